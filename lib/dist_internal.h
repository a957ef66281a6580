/* Declarations shared by the distributed layer's source files; not installed. */
#ifndef CLMOE_DIST_INTERNAL_H
#define CLMOE_DIST_INTERNAL_H

#include "internal.h"

#ifdef HAVE_MPI
#include <mpi.h>

#include "dist_mpi.h"

/* Records a failed MPI call (with MPI_Error_string's text) and returns CLMOE_ERR_MPI. */
clmoe_status clmoe__mpi_error(int err, const char *call);

#define CLMOE_MPI_GOTO(st, call, label)                                                    \
  do {                                                                                     \
    int clmoe_mpi_e_ = (call);                                                             \
    if (clmoe_mpi_e_ != MPI_SUCCESS) {                                                     \
      st = clmoe__mpi_error(clmoe_mpi_e_, #call);                                          \
      goto label;                                                                          \
    }                                                                                      \
  } while (0)
#endif

#endif
