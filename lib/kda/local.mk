# lib/kda/local.mk: Kimi Delta Attention (chunked forward and backward, the token loop and
# decoding step, the tile-interface forward and backward), its short convolution and the
# KDA layer.
lib_libclmoe_impl_la_SOURCES += lib/kda/kda_internal.h lib/kda/kda_plan.c lib/kda/kda_chunk.c \
	lib/kda/kda_tile_common.c lib/kda/kda_tile_kept.c lib/kda/kda_forward.c \
	lib/kda/kda_backward.c lib/kda/kda_tile_fwd.c lib/kda/kda_tile_bwd.c lib/kda/kda_layer.c \
	lib/kda/kda_layer_params.c lib/kda/kda_conv.c lib/kda/kda_step.c
clmoeinclude_HEADERS += include/clmoe/kda.h include/clmoe/conv.h include/clmoe/kda_layer.h
CLMOE_KERNEL_FILES += kernels_cl/kda/kda_common.cl kernels_cl/kda/kda_fwd.cl kernels_cl/kda/kda_fwd_pairwise.cl \
	kernels_cl/kda/kda_rec.cl kernels_cl/kda/kda_step.cl kernels_cl/kda/kda_bwd.cl kernels_cl/kda/kda_conv.cl \
	kernels_cl/kda/kda_tile.cl kernels_cl/kda/kda_tile_state16.cl \
	kernels_cl/kda/kda_tile_state.cl kernels_cl/kda/kda_tile_bwd.cl kernels_cl/kda/kda_tile_warp.cl \
	kernels_cl/kda/kda_tile_bwd_chunk.cl
check_libclmoecheck_la_SOURCES += check/ref/ref_kda.h check/ref/ref_kda.c check/check_kda.c \
	check/kda_inputs.h check/kda_inputs.c check/check_conv.c check/check_kda_tile.h \
	check/check_kda_tile.c
TEST_SUITES += tests/unit/test_kda tests/unit/test_conv tests/unit/test_kda_tile \
	tests/unit/test_kda_tile_bwd
apps_clmoe_bench_SOURCES += apps/bench_kda.c
