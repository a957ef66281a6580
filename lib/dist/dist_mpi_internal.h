/* MPI inside the distributed layer (the files of lib/dist/, the only ones that call it):
 * the error text of a failed call and the check macro. Not installed; without MPI it
 * declares nothing beyond dist_internal.h. */
#ifndef CLMOE_DIST_MPI_INTERNAL_H
#define CLMOE_DIST_MPI_INTERNAL_H

#include "dist_internal.h"

#ifdef HAVE_MPI
#include <mpi.h>

#include "clmoe/dist_mpi.h"

/* Records a failed MPI call (with MPI_Error_string's text) and returns CLMOE_ERR_MPI. */
clmoe_status clmoe__dist_mpi_error(int err, const char *call);

#define CLMOE_MPI_GOTO(st, call, label)                                                    \
  do {                                                                                     \
    int clmoe_mpi_e_ = (call);                                                             \
    if (clmoe_mpi_e_ != MPI_SUCCESS) {                                                     \
      st = clmoe__dist_mpi_error(clmoe_mpi_e_, #call);                                     \
      goto label;                                                                          \
    }                                                                                      \
  } while (0)
#endif

#endif
