# lib/gemm/local.mk: GEMM (the dispatcher and shape checks, CLBlast and its tuning, our tiled
# and naive kernels, the bf16 GEMM on the tile interface).
lib_libclmoe_impl_la_SOURCES += lib/gemm/gemm_internal.h lib/gemm/gemm.c lib/gemm/gemm_clblast.c \
	lib/gemm/gemm_own.c lib/gemm/gemm_tile.c
clmoeinclude_HEADERS += include/clmoe/gemm.h
CLMOE_KERNEL_FILES += kernels_cl/gemm/gemm.cl kernels_cl/gemm/gemm_common.cl \
	kernels_cl/gemm/gemm_tile.cl kernels_cl/gemm/gemm_async.cl kernels_cl/gemm/gemm_wgmma.cl
check_libclmoecheck_la_SOURCES += check/check_gemm.c
TEST_SUITES += tests/unit/test_gemm
apps_clmoe_bench_SOURCES += apps/bench_gemm.c
