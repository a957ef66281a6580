/* What the layers above the distributed layer use of it beyond the public API (include/clmoe/
 * dist.h): the collectives of dist_collect.c, each complete without MPI (one rank), so that
 * no MPI call is made outside lib/dist/. Not installed. */
#ifndef CLMOE_DIST_INTERNAL_H
#define CLMOE_DIST_INTERNAL_H

#include "runtime/internal.h"

#include "clmoe/dist.h"

/* The counters of clmoe_dist_stats, for the exchange code to add to (NULL for a NULL dist). */
clmoe_dist_stats *clmoe__dist_stats(clmoe_dist *dist);

/* Every rank's rows gathered to rank 0 in rank order. This rank holds n rows: ids [n] and
 * rows [n, row_elems]; counts [size] are every rank's n (the same array on every rank).
 * Rank 0 receives all_ids [sum counts] and all_rows [sum counts, row_elems], rank 0's rows
 * first; the others may pass NULL. One rank: a copy. `what` names the data in messages.
 * Collective. */
clmoe_status clmoe__dist_gather_rows(clmoe_dist *dist, const int32_t *ids, const float *rows,
                                     int64_t n, int64_t row_elems, const int64_t *counts,
                                     int32_t *all_ids, float *all_rows, const char *what);

/* buf [n] becomes, on every rank, fl32(scale * (buf_0[i] + ... + buf_{N-1}[i])) with the sum
 * taken in double in rank order 0 .. N-1: the same bits on every rank and for any MPI (no
 * MPI reduction is used for the floats). Slice r of buf is reduced on rank r
 * (MPI_Alltoallv), then every rank gets every slice (MPI_Allgatherv). work [n + size] is
 * scratch; *bytes_sent (may be NULL) gets the bytes this rank sent to other ranks.
 * n < 2^31. One rank: buf scaled. Collective. */
clmoe_status clmoe__dist_allreduce_ordered_f32(clmoe_dist *dist, float *buf, int64_t n,
                                               double scale, float *work, int64_t *bytes_sent);

/* Every rank's n values (n the same on every rank) in rank order: all [size, n]. One rank:
 * a copy. Collective. */
clmoe_status clmoe__dist_allgather_u64(clmoe_dist *dist, const uint64_t *mine, size_t n,
                                       uint64_t *all);
clmoe_status clmoe__dist_allgather_u32(clmoe_dist *dist, const uint32_t *mine, size_t n,
                                       uint32_t *all);

#endif
