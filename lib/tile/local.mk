# lib/tile/local.mk: the matrix-unit tile interface, its implementation probe and the fast
# path policy.
lib_libclmoe_la_SOURCES += lib/tile/fastpath.c
clmoeinclude_HEADERS += include/clmoe/fastpath.h
CLMOE_KERNEL_FILES += kernels_cl/tile/tile.cl
check_libclmoecheck_la_SOURCES += check/check_tile.c check/tile_check.h
TEST_SUITES += tests/unit/test_tile
