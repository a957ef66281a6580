/* Data-parallel reductions of a training step: the dense gradients summed over
 * the ranks in buckets, and the Quantile Balancing histogram counts summed so that every
 * rank computes the same selection bias.
 *
 * Gradient convention: each rank's loss is a mean over its own tokens, so the gradient of
 * the global loss (a mean over all ranks' tokens, equal shares) is the mean of the ranks'
 * gradients: average = 1 (the default) multiplies the sum by 1 / N. With unequal shares, or a
 * loss that is a sum, pass average = 0 and scale yourself.
 *
 * Determinism: the result does not depend on MPI's reduction algorithm or on the number of
 * buckets. A bucket of B floats (pieces of the gradients in registration order) is cut into
 * N slices; MPI_Alltoallv hands slice r of every rank to rank r, which sums the N copies in
 * rank order 0, 1, ..., N-1 in double precision, scales, rounds once to fp32; MPI_Allgatherv
 * then gives every rank every reduced slice. Element i of the result is therefore
 * fl32(scale * (g_0[i] + g_1[i] + ... + g_{N-1}[i]) in double), the same bits on every rank,
 * every run and every bucket size. Cost per bucket and rank: 2 (N-1)/N B floats sent and
 * received (as a ring all-reduce), B additions, B floats of extra host memory for the
 * received slices (plus the B of the bucket itself), and one device read and one write of
 * the bucket. MPI_Allreduce / MPI_Reduce_scatter with MPI_SUM give no order guarantee, so
 * they are not used for floats here. */
#ifndef CLMOE_DIST_GRADS_H
#define CLMOE_DIST_GRADS_H

#include "dist.h"
#include "moe.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CLMOE_DIST_GRADS_DEFAULT_BUCKET_BYTES ((size_t)32 << 20) /* 32 MiB of fp32 */

/* 1: the parameter lives on this rank only (a routed expert's weights): its gradient is
 * neither sent nor changed. Must give the same answer for the same name on every rank. */
typedef int (*clmoe_param_is_local_fn)(const clmoe_param *p, void *user);

typedef struct clmoe_grad_allreduce_opts {
  size_t bucket_bytes;   /* 0: CLMOE_DIST_GRADS_DEFAULT_BUCKET_BYTES; any multiple of 4 from
                          * 4 up to 4 * INT_MAX is allowed (pieces of a tensor if smaller) */
  int no_average;        /* 0: multiply the sum by 1 / N (see above); 1: the plain sum */
  /* Expert-local parameters: either predicate or prefixes (or both) may say so. */
  clmoe_param_is_local_fn is_local;
  void *user;
  const char *const *local_prefixes; /* names starting with any of these are local */
  int n_local_prefixes;
} clmoe_grad_allreduce_opts;

/* Counted by clmoe_dist_allreduce_grads (may be NULL). */
typedef struct clmoe_grad_allreduce_stats {
  int64_t elements;      /* gradient elements reduced on this rank */
  int64_t buckets;       /* buckets (each one Alltoallv + one Allgatherv) */
  int64_t bytes_sent;    /* bytes this rank handed to MPI (to other ranks) */
  int params_reduced, params_local;
} clmoe_grad_allreduce_stats;

/* Every trainable parameter's gradient (except the expert-local ones) becomes the sum (or
 * mean) over the ranks, as described above. Collective: every rank must call it with
 * registries holding the same parameters (names and sizes, in the same order) and the same
 * options; a mismatch is detected before any gradient moves and is an error on every rank.
 * opts NULL: the defaults. With one rank (or without MPI) the gradients are left as they are
 * (sum = mean = the rank's own). A rank that fails while others are inside the collective
 * leaves them waiting: apps end the job with clmoe_dist_abort on any error. */
CLMOE_API clmoe_status clmoe_dist_allreduce_grads(clmoe_dist *dist, clmoe_params *ps,
                                                  const clmoe_grad_allreduce_opts *opts,
                                                  clmoe_grad_allreduce_stats *stats);

/* 1 when p is expert-local: row-sharded (clmoe_params_add_rows), or so by the options. */
CLMOE_API int clmoe_grad_param_is_local(const clmoe_param *p,
                                        const clmoe_grad_allreduce_opts *opts);

/* Quantile Balancing by histogram across ranks: saved->hist (i32 [E, bins], from a
 * train-mode clmoe_moe_forward with balance = QB_HIST) becomes the exact sum over the ranks
 * (int64 all-reduce), saved->hist_tokens the total token count and saved->range rank 0's
 * range, so that clmoe_moe_balance_update derives the same thresholds on every rank.
 * Collective; E and bins must be equal, and the ranges may differ by rounding only (ranks
 * on different OpenCL implementations divide differently; a larger difference means the
 * ranks' biases differ: an error). A bin total above INT32_MAX is an error
 * (CLMOE_ERR_UNSUPPORTED). The updated bias still differs by rounding between
 * implementations: share it with clmoe_dist_broadcast_tensor (dist.h). */
CLMOE_API clmoe_status clmoe_dist_sum_qb_histogram(clmoe_dist *dist, clmoe_moe_saved *saved);

/* Replicated state across ranks: every parameter that is not local (clmoe_grad_param_is_local
 * with opts), its AdamW moments, and the non-trainable buffers. Ranks on different OpenCL
 * implementations round the optimizer step differently, so their replicas drift apart by
 * rounding from step to step. Collective: each rank hashes its copy of every such tensor,
 * the hashes are compared with rank 0's, and every tensor that differs on any rank is
 * replaced by rank 0's copy on all ranks. *differed (may be NULL): how many tensors
 * differed. One rank: nothing to do. */
CLMOE_API clmoe_status clmoe_dist_sync_replicas(clmoe_dist *dist, clmoe_params *ps,
                                                const clmoe_grad_allreduce_opts *opts,
                                                int *differed);

#ifdef __cplusplus
}
#endif
#endif
