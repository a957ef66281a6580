/* Declarations shared by the distributed layer's source files; not installed. */
#ifndef CLMOE_DIST_INTERNAL_H
#define CLMOE_DIST_INTERNAL_H

#include "runtime/internal.h"

#include "clmoe/dist.h"

/* The counters of clmoe_dist_stats, for the exchange code to add to (NULL for a NULL dist). */
clmoe_dist_stats *clmoe__dist_stats(clmoe_dist *dist);

#ifdef HAVE_MPI
#include <mpi.h>

#include "clmoe/dist_mpi.h"

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
