# lib/dist/local.mk: the distributed layer (MPI ranks, device and CPU placement per rank,
# expert placement maps, the expert exchange, the collectives of the layers above: rows
# gathered to rank 0, the rank-ordered float all-reduce, all-gathers, the tensor
# broadcast); and what this build is (clmoe_build_info: its MPI line asks the library, the
# commit comes from lib/build_commit.c, Makefile.am). The only folder with MPI calls. The library builds without MPI; these files
# then report that it is missing.
lib_libclmoe_impl_la_SOURCES += lib/dist/dist_internal.h lib/dist/dist_mpi_internal.h \
	lib/dist/dist.c lib/dist/dist_collect.c lib/dist/dist_place.c lib/dist/dist_exchange.c \
	lib/dist/expert_map.c lib/dist/launch.c lib/dist/build_info.c
clmoeinclude_HEADERS += include/clmoe/dist.h include/clmoe/dist_exchange.h \
	include/clmoe/expert_map.h
if HAVE_MPI
# mpi.h's flags for every object (lib/dist/ needs them; the rest ignore them).
AM_CPPFLAGS += $(MPI_CFLAGS)
lib_libclmoe_impl_la_LIBADD += $(MPI_LIBS)
lib_libclmoe_la_LIBADD += $(MPI_LIBS)
clmoeinclude_HEADERS += include/clmoe/dist_mpi.h
HAVE_MPI_FLAG = 1
else
EXTRA_DIST += include/clmoe/dist_mpi.h
HAVE_MPI_FLAG = 0
endif
TEST_SUITES += tests/unit/test_dist
# The MPI programs run under mpirun through tests/mpi/*.sh (they skip, 77, without MPI).
check_PROGRAMS += tests/mpi/mpi_ranks tests/mpi/mpi_exchange
tests_mpi_mpi_ranks_SOURCES = tests/mpi/mpi_ranks.c
tests_mpi_mpi_ranks_LDADD = lib/libclmoe.la $(OPENCL_LIBS)
tests_mpi_mpi_exchange_SOURCES = tests/mpi/mpi_exchange.c tests/mpi/mpi_common.h
tests_mpi_mpi_exchange_LDADD = lib/libclmoe.la $(OPENCL_LIBS)
TESTS += tests/mpi/test_mpi.sh
EXTRA_DIST += tests/mpi/test_mpi.sh tests/mpi/mpi_common.sh
