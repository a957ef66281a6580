/* The MPI side of clmoe_dist, for code that calls MPI itself (installed only when clmoe
 * was built with MPI; includes mpi.h, which dist.h never does). */
#ifndef CLMOE_DIST_MPI_H
#define CLMOE_DIST_MPI_H

#include <mpi.h>

#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

/* clmoe's duplicate of MPI_COMM_WORLD (errors returned, not fatal); MPI_COMM_SELF for a
 * single rank without MPI. Owned by dist: do not free. */
CLMOE_API MPI_Comm clmoe_dist_comm(const clmoe_dist *dist);
/* The ranks of this host (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED). */
CLMOE_API MPI_Comm clmoe_dist_local_comm(const clmoe_dist *dist);

#ifdef __cplusplus
}
#endif
#endif
