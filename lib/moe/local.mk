# lib/moe/local.mk: Stable LatentMoE (routing, Quantile Balancing, dispatch, the grouped
# expert GEMMs with SiTU-GLU or SwiGLU, the layer) and its expert-parallel form over dist/.
lib_libclmoe_impl_la_SOURCES += lib/moe/moe_internal.h lib/moe/moe_util.c lib/moe/moe.c \
	lib/moe/moe_route.c lib/moe/moe_dispatch.c lib/moe/moe_experts.c lib/moe/moe_experts_bf16.c \
	lib/moe/moe_ffn.c lib/moe/moe_layer.c lib/moe/moe_decode.c lib/moe/moe_ep.c lib/moe/moe_ep_build.c \
	lib/moe/moe_ep_backward.c
clmoeinclude_HEADERS += include/clmoe/moe.h include/clmoe/moe_ep.h
CLMOE_KERNEL_FILES += kernels_cl/moe/moe_common.cl kernels_cl/moe/moe_route.cl \
	kernels_cl/moe/moe_dispatch.cl kernels_cl/moe/moe_gemm.cl kernels_cl/moe/moe_gemm_tile.cl \
	kernels_cl/moe/moe_decode.cl
check_libclmoecheck_la_SOURCES += check/ref/ref_moe.h check/ref/ref_moe.c check/check_moe.h check/check_moe.c \
	check/check_moe_layer.c check/check_moe_decode.c check/check_moe_infer.c
TEST_SUITES += tests/unit/test_moe
apps_clmoe_bench_SOURCES += apps/bench_moe.c
# the expert-parallel layer against the single-rank one, under mpirun
check_PROGRAMS += tests/mpi/mpi_moe_ep
tests_mpi_mpi_moe_ep_SOURCES = tests/mpi/mpi_moe_ep.c tests/mpi/mpi_common.h
tests_mpi_mpi_moe_ep_LDADD = lib/libclmoe.la $(OPENCL_LIBS) -lm
TESTS += tests/mpi/test_moe_ep.sh
EXTRA_DIST += tests/mpi/test_moe_ep.sh
