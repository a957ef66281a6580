/* The expert-parallel exchange of token rows on the host: the plan of who sends
 * which routed copy where, the dispatch (tokens to the ranks that hold their experts) and
 * the combine (expert outputs back to the tokens' ranks). Rows are float32 host memory; the
 * caller stages device buffers through the host and does the routing math (weights, sums).
 *
 * Per step and MoE layer: clmoe_ep_plan_create (MPI_Alltoall of the row counts, then
 * MPI_Alltoallv of the expert ids), clmoe_ep_dispatch (MPI_Alltoallv of the rows), the
 * local experts, clmoe_ep_combine (the reverse MPI_Alltoallv). Backward uses the same plan:
 * gradients of the outputs go out with dispatch, gradients of the inputs come back with
 * combine. Rows move as one MPI datatype of `width` floats, so counts stay small integers
 * however wide a row is. One rank without MPI: plain copies in the same order. */
#ifndef CLMOE_DIST_EXCHANGE_H
#define CLMOE_DIST_EXCHANGE_H

#include <stdint.h>

#include "dist.h"
#include "expert_map.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clmoe_ep_plan {
  int ranks, top_k;
  int64_t copies;       /* routed copies sent by this rank: tokens x top_k */
  int *send_counts;     /* [ranks] rows this rank sends to each rank */
  int *send_displs;     /* [ranks] their first row in the send order */
  int *recv_counts;     /* [ranks] rows this rank receives from each rank */
  int *recv_displs;     /* [ranks] */
  int64_t recv_rows;    /* sum of recv_counts */
  int32_t *send_copy;   /* [copies] the routed copy (token x top_k + j) at each send position:
                           grouped by destination rank, in copy order within a rank */
  int32_t *recv_expert; /* [recv_rows] the expert each received row is for (held here) */
} clmoe_ep_plan;

/* Builds the plan from this rank's routing. experts: [tokens, top_k] expert ids; the map
 * must have as many ranks as dist. Collective. */
CLMOE_API clmoe_status clmoe_ep_plan_create(clmoe_dist *dist, const clmoe_expert_map *map,
                                            const int32_t *experts, int64_t tokens, int top_k,
                                            clmoe_ep_plan **plan);
CLMOE_API void clmoe_ep_plan_destroy(clmoe_ep_plan *plan);

/* Sends row (copy / top_k) of x to the rank serving each routed copy.
 * x: [tokens, width]; recv: [recv_rows, width], grouped by source rank. Collective. */
CLMOE_API clmoe_status clmoe_ep_dispatch(clmoe_dist *dist, const clmoe_ep_plan *plan,
                                         const float *x, int64_t width, float *recv);
/* Returns the rows computed for the received copies to their senders.
 * y: [recv_rows, width] in the order dispatch delivered; out: [copies, width] in routed
 * copy order (row token x top_k + j). Collective. */
CLMOE_API clmoe_status clmoe_ep_combine(clmoe_dist *dist, const clmoe_ep_plan *plan, const float *y,
                                        int64_t width, float *out);

#ifdef __cplusplus
}
#endif
#endif
