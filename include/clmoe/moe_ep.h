/* The Stable LatentMoE layer with its routed experts spread over MPI ranks (expert
 * parallelism): forward and backward.
 *
 * Every rank holds the dense parameters whole (router, W_down, latent norm gain, W_up, the
 * shared experts, the selection bias: data-parallel) and only the routed experts that the
 * expert map puts in its slots. Each rank runs its own tokens:
 *   1. route and W_down locally, as clmoe_moe_forward does;
 *   2. clmoe_ep_plan_create: the per-rank row counts (MPI_Alltoall) and expert ids;
 *   3. clmoe_ep_dispatch: the latent rows, staged through host memory (MPI_Alltoallv);
 *   4. the local experts' SiTU-GLU on the received rows, with the single-rank expert code on
 *      a sub-layer that holds only the local experts;
 *   5. clmoe_ep_combine: the outputs back to their tokens' ranks, the reverse exchange;
 *   6. z[t] = sum over slots s in order of p[t, s] out[t k + s] (on the host, fixed order),
 *      then the latent RMSNorm, W_up and the shared experts on the device.
 * Every row's expert output is computed by the same kernel as on one rank, and the
 * combine sums in slot order, so the result does not depend on the number of ranks beyond
 * the rounding of the host sum (fp32, within 1e-5 relative of clmoe_moe_forward).
 *
 * The backward mirrors it with the same plan (lib/moe/moe_ep_backward.c): the gradients of the
 * routed copies' outputs go to the experts' ranks, the local experts' backward runs there,
 * and the gradients of their inputs come back; then W_down, the router and the shared
 * experts on this rank's tokens.
 *
 * Collective: every rank of the map must call the forward, also with no tokens. When a call
 * fails on one rank the others may wait in an exchange; the caller ends the job
 * (clmoe_dist_abort), as the distributed apps do. */
#ifndef CLMOE_MOE_EP_H
#define CLMOE_MOE_EP_H

#include "dist.h"
#include "dist_exchange.h"
#include "expert_map.h"
#include "moe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clmoe_moe_ep_layer {
  clmoe_moe_config cfg;        /* the whole layer (n_experts = E over all ranks) */
  const clmoe_expert_map *map; /* borrowed: must outlive the layer */
  int rank;                    /* this rank in the map */
  int64_t n_local;             /* routed experts held here (0 when the map gives none) */
  int32_t *local_expert;       /* [n_local] global id of each local expert, slot order */
  int32_t *local_index;        /* [E] local index of each expert, -1 when not held here */
  /* Router, W_down, norm gain, W_up, shared experts and bias, whole ([E, d] router, [E]
   * bias); the routed expert tensors are left empty. */
  clmoe_moe_layer dense;
  /* The local experts only: cfg.n_experts = n_local, w_gate / w_upp [n_local, f, l],
   * w_dn [n_local, l, f]; the other tensors are left empty. */
  clmoe_moe_layer experts;
} clmoe_moe_ep_layer;

/* Builds this rank's part of a layer from a whole single-rank layer (the same weights on
 * every rank, e.g. loaded from a checkpoint): the dense tensors and the bias copied whole,
 * the experts the map puts on `rank` copied from their [E, ...] slices. The map must have
 * full->cfg.n_experts experts and rank must be one of its ranks. */
CLMOE_API clmoe_status clmoe_moe_ep_layer_from_full(clmoe_ctx *ctx, const clmoe_moe_layer *full,
                                                    const clmoe_expert_map *map, int rank,
                                                    clmoe_moe_ep_layer *ep);
/* The same part created directly, without a whole layer (a rank never holds every expert):
 * contents undefined until clmoe_moe_ep_layer_init or a checkpoint load. */
CLMOE_API clmoe_status clmoe_moe_ep_layer_create(clmoe_ctx *ctx, const clmoe_moe_config *cfg,
                                                 const clmoe_expert_map *map, int rank,
                                                 clmoe_moe_ep_layer *ep);
/* The values clmoe_moe_layer_init(whole, seed, stddev) gives the same tensors and experts:
 * a model initialised on N ranks equals the one initialised on one. */
CLMOE_API clmoe_status clmoe_moe_ep_layer_init(clmoe_moe_ep_layer *ep, uint64_t seed, float stddev);
CLMOE_API void clmoe_moe_ep_layer_destroy(clmoe_moe_ep_layer *ep);

/* What a train-mode forward keeps for the backward. */
typedef struct clmoe_moe_ep_saved {
  clmoe_moe_saved local;   /* this rank's m tokens: topk, scores, probs [m, k]; z, rstd, zn;
                              the shared experts' intermediates */
  clmoe_moe_saved experts; /* the R rows received here (tokens = R): the dispatch over the
                              local experts, xs, u, w, act, ys */
  clmoe_ep_plan *plan;     /* the exchange, used again (mirrored) by the backward */
  float *probs;            /* [m k] routing weights (host) */
  float *out;              /* [m k, l] the expert output of every routed copy (host) */
} clmoe_moe_ep_saved;
CLMOE_API void clmoe_moe_ep_saved_destroy(clmoe_moe_ep_saved *s);

/* y [m, d] from x [m, d] for this rank's m tokens (m may differ between ranks and be 0).
 * saved NULL: inference (nothing kept); saved given: train mode, filled for
 * clmoe_moe_ep_backward (destroy it). The bias only selects and is not updated here. dist
 * must have as many ranks as the map, and its rank must be ep->rank. Collective.
 * bf16 weight matrices (the layer as a bf16 training step hands it over, or from a whole
 * bf16 layer): in train mode the local experts' products (and the backward's) run on the
 * tile path with bf16 operands and fp32 accumulation, as clmoe_moe_forward's; in inference
 * mode the grouped kernels read the bf16 experts as they are and multiply fp32 rows. */
CLMOE_API clmoe_status clmoe_moe_ep_forward(clmoe_ctx *ctx, clmoe_dist *dist,
                                            const clmoe_moe_ep_layer *ep, const clmoe_tensor *x,
                                            clmoe_tensor *y, clmoe_moe_ep_saved *saved);

/* Gradients of a rank's part: the dense ones in the whole layer's shapes, w_gate / w_upp /
 * w_dn in the local experts' ([n_local, ...], empty when n_local is 0). Free them with
 * clmoe_moe_grads_destroy. */
CLMOE_API clmoe_status clmoe_moe_ep_grads_create(clmoe_ctx *ctx, const clmoe_moe_ep_layer *ep,
                                                 clmoe_moe_grads *g);
/* Gradients of sum(y * dy) over this rank's tokens, for the same x as the train-mode forward
 * (grads and dx overwritten). The dense gradients are this rank's tokens' share: summed over
 * the ranks (the data-parallel all-reduce, the caller's) they are the whole batch's. The
 * local experts' gradients cover every token routed to them from any rank: an expert with
 * replicas gets its share on each replica's rank. Collective. */
CLMOE_API clmoe_status clmoe_moe_ep_backward(clmoe_ctx *ctx, clmoe_dist *dist,
                                             const clmoe_moe_ep_layer *ep, const clmoe_tensor *x,
                                             const clmoe_moe_ep_saved *saved,
                                             const clmoe_tensor *dy, clmoe_moe_grads *grads,
                                             clmoe_tensor *dx);

#ifdef __cplusplus
}
#endif
#endif
