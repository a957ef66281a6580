/* Shared by the test programs run under mpirun (tests/mpi/mpi_*.c): a failed call prints the
 * program, the rank and the error, then ends the whole job so no other rank waits in a
 * collective. Each program sets mpi_prog and mpi_dist. */
#ifndef CLMOE_TEST_MPI_COMMON_H
#define CLMOE_TEST_MPI_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "clmoe/clmoe.h"

static const char *mpi_prog = "mpi_test";
static clmoe_dist *mpi_dist;

static void mpi_die(const char *what, clmoe_status st)
{
  fprintf(stderr, "%s: rank %d: %s: %s (%s)\n", mpi_prog, clmoe_dist_rank(mpi_dist), what, clmoe_last_error(),
          clmoe_strerror(st));
  clmoe_dist_abort(mpi_dist, 1);
  exit(1);
}

#define TRY(call)                                                                          \
  do {                                                                                     \
    clmoe_status st_ = (call);                                                             \
    if (st_ != CLMOE_OK) mpi_die(#call, st_);                                              \
  } while (0)

#endif
