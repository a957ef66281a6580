# lib/mla/local.mk: gated multi-head latent attention (the layer, attention forward and
# backward, the tile-interface attention, the paged latent cache, prefill, decoding and
# extension).
lib_libclmoe_impl_la_SOURCES += lib/mla/mla_internal.h lib/mla/mla.c lib/mla/mla_layer.c \
	lib/mla/mla_attn_plan.c lib/mla/mla_tile.c lib/mla/mla_tile_bwa.c lib/mla/mla_attn.c lib/mla/mla_cache.c \
	lib/mla/mla_absorbed.c lib/mla/mla_decode.c lib/mla/mla_extend.c lib/mla/mla_extend_flash.c
clmoeinclude_HEADERS += include/clmoe/mla.h
CLMOE_KERNEL_FILES += kernels_cl/mla/mla_layout.cl kernels_cl/mla/mla.cl kernels_cl/mla/mla_fwd.cl \
	kernels_cl/mla/mla_bwd.cl kernels_cl/mla/mla_decode.cl kernels_cl/mla/mla_extend.cl \
	kernels_cl/mla/mla_tile.cl kernels_cl/mla/mla_tile_bwd.cl kernels_cl/mla/mla_tile_bwd_async.cl kernels_cl/mla/mla_tile_async.cl \
	kernels_cl/mla/mla_tile_wgmma.cl
check_libclmoecheck_la_SOURCES += check/ref/ref_mla.h check/ref/ref_mla.c check/check_mla.h \
	check/check_mla.c check/check_mla_extend.c check/check_mla_tile.h check/check_mla_tile.c
TEST_SUITES += tests/unit/test_mla tests/unit/test_mla_tile tests/unit/test_mla_tile_async
apps_clmoe_bench_SOURCES += apps/bench_mla.c
apps_clmoe_op_SOURCES += apps/clmoe_op_mla.c
TESTS += tests/apps/test_op_mla.sh
EXTRA_DIST += tests/apps/test_op_mla.sh
