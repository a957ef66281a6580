# lib/tile/local.mk: the matrix-unit tile interface (the contract, one kernel file per
# implementation): the implementation probe and its feature
# record, the fast path policy, the interface self-test.
lib_libclmoe_impl_la_SOURCES += lib/tile/tile_internal.h lib/tile/tile.c lib/tile/fastpath.c \
	lib/tile/tile_selftest.c
clmoeinclude_HEADERS += include/clmoe/tile.h
CLMOE_KERNEL_FILES += kernels_cl/tile/tile.cl kernels_cl/tile/tile_portable.cl kernels_cl/tile/tile_nv_mma.cl
check_libclmoecheck_la_SOURCES += check/check_tile.c check/tile_check.h
TEST_SUITES += tests/unit/test_tile
