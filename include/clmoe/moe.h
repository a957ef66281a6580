/* Stable LatentMoE with SiTU-GLU experts and Quantile Balancing (shared/spec/MODEL.md
 * sections 4 and 7), forward and backward, plus the dense SiTU-GLU FFN on its own; with the
 * options of the Kimi Linear / DeepSeek-V3 MoE (SwiGLU, grouped selection, no renormalisation,
 * no latent projection).
 *
 *   y = Shared(x) + W_up RMSNorm_gain( sum_{i in TopK} p_i Expert_i(W_down x) )
 *   latent 0: y = Shared(x) + sum_{i in TopK} p_i Expert_i(x) (no W_down, norm or W_up).
 *   s = sigmoid(W_r x) (fp32, over the full-width x); TopK = the k largest s + b, ties to the
 *   lower expert index; p_i = c s_i / sum_{j in TopK} s_j (renormalised) or p_i = c s_i, with
 *   c = routed_scale. The bias b only selects: it carries no gradient, and the backward treats
 *   the chosen set as fixed.
 *   Grouped selection (groups G > 1): the E experts form G groups of E / G consecutive ones; a
 *   group's score is the sum of its two largest s + b; the topk_groups best groups are kept
 *   (ties: the lower group index) and TopK is taken among their experts only.
 *   SiTU-GLU(h) = W_dn [ (b1 tanh(u/b1) sigmoid(u)) * (b2 tanh(w/b2)) ], u = W_gate h,
 *   w = W_upp h, b1 = 4, b2 = 25; SwiGLU(h) = W_dn [ SiLU(u) * w ]. Every FFN of a layer (the
 *   routed and the shared experts) uses the layer's one gated unit. Shared experts: one FFN of
 *   width n_shared * shared_ff at full width d. No biases in any projection.
 *
 * Matrices are fp32 and stored [out, in] (y = x W^T), the layout of PyTorch's nn.Linear.
 * Activations x, y, dy, dx: [m, d] or any shape whose last dimension is d (m = the rest).
 *
 * Dispatch never drops a token: every (token, slot) pair gets a row of the expert buffers.
 * The pairs are grouped by expert with the device sort of keys expert << 32 | (token k +
 * slot), so inside an expert they stay in token order; each token sums its k expert
 * outputs in slot order. No float atomics: the same device gives the same bits every run.
 *
 * Expert products: a grouped GEMM over (expert, row tile, column tile) with per-expert
 * offsets (our kernel, kernels_cl/moe/moe_gemm.cl, SiTU-GLU fused into the gate/up product and
 * its gradient into the down product's backward), or CLBlast batched GEMMs over groups
 * padded to the largest expert (needs one read of the counts per call). */
#ifndef CLMOE_MOE_H
#define CLMOE_MOE_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CLMOE_SITU_B1 4.0f
#define CLMOE_SITU_B2 25.0f
#define CLMOE_MOE_MAX_TOP_K 64      /* largest k (QB routes with k + 1) */
#define CLMOE_MOE_MAX_HIST_BINS 4096

/* The gated unit of an FFN: act = a(u) * b(w) with u = W_gate h, w = W_upp h. */
typedef enum clmoe_glu {
  CLMOE_GLU_SITU = 0,  /* SiTU-GLU: (4 tanh(u/4) sigmoid(u)) * (25 tanh(w/25)) */
  CLMOE_GLU_SWIGLU = 1 /* SwiGLU: SiLU(u) * w = u sigmoid(u) * w */
} clmoe_glu;

/* ---- the dense gated FFN (the model's first layer, the shared experts) ------------------- */
typedef struct clmoe_situ_ffn {
  clmoe_tensor w_gate; /* [f, d] */
  clmoe_tensor w_upp;  /* [f, d] */
  clmoe_tensor w_dn;   /* [d, f] */
  clmoe_glu glu;       /* the gated unit; create sets SiTU, the owner may change it */
} clmoe_situ_ffn;

/* What the FFN's backward needs (f32 [m, f] each); the forward fills it when not NULL. */
typedef struct clmoe_situ_saved {
  clmoe_tensor u, w, act;
} clmoe_situ_saved;
CLMOE_API void clmoe_situ_saved_destroy(clmoe_situ_saved *s);

/* Creates the three matrices (contents undefined) / gives them back. */
CLMOE_API clmoe_status clmoe_situ_ffn_create(clmoe_ctx *ctx, clmoe_situ_ffn *ffn, int64_t d,
                                             int64_t f);
CLMOE_API void clmoe_situ_ffn_destroy(clmoe_situ_ffn *ffn);

/* y = beta y + FFN(x) with the FFN's gated unit; x, y [m, d]; beta 0 never reads y. */
CLMOE_API clmoe_status clmoe_situ_ffn_forward(clmoe_ctx *ctx, const clmoe_situ_ffn *ffn,
                                              const clmoe_tensor *x, float beta, clmoe_tensor *y,
                                              clmoe_situ_saved *saved);
/* Gradients of sum(y * dy): grad's matrices overwritten; dx = dx_beta dx + dL/dx (dx may be
 * NULL). saved: from the forward on the same x. */
CLMOE_API clmoe_status clmoe_situ_ffn_backward(clmoe_ctx *ctx, const clmoe_situ_ffn *ffn,
                                               const clmoe_tensor *x, const clmoe_situ_saved *saved,
                                               const clmoe_tensor *dy, clmoe_situ_ffn *grad,
                                               float dx_beta, clmoe_tensor *dx);

/* ---- the MoE layer ---------------------------------------------------------------------- */
typedef enum clmoe_moe_balance {
  CLMOE_MOE_BALANCE_QB = 0,    /* Quantile Balancing, exact quantile (radix select) */
  CLMOE_MOE_BALANCE_QB_HIST,   /* Quantile Balancing from a histogram of margins */
  CLMOE_MOE_BALANCE_SIGN,      /* DeepSeek-V3: b_j += gamma sign(mean load - load_j) */
  CLMOE_MOE_BALANCE_NONE       /* b stays as it is */
} clmoe_moe_balance;

/* AUTO is GROUPED: on PoCL it was faster at the gpu preset's widths (l 256, f 128) and
 * slower only at the tiny preset's (docs/architecture.md, "Stable LatentMoE"); it never
 * waits for the host, and its buffers hold m k rows where the padded ones hold E x (largest
 * load) - unbounded when routing collapses onto few experts. */
typedef enum clmoe_moe_gemm {
  CLMOE_MOE_GEMM_AUTO = 0,
  CLMOE_MOE_GEMM_GROUPED,  /* our grouped kernel over per-expert offsets */
  CLMOE_MOE_GEMM_PADDED    /* CLBlast batched GEMMs over groups padded to the largest */
} clmoe_moe_gemm;

#define CLMOE_MOE_MAX_GROUPS 256 /* largest number of expert groups */

typedef struct clmoe_moe_config {
  int64_t d;         /* model width */
  int64_t latent;    /* l: width the routed experts work at; 0: no latent projection (the
                        experts work at d on x itself, and y is their weighted sum) */
  int64_t n_experts; /* E (the report: 896) */
  int64_t top_k;     /* k (the report: 16), 1 .. min(E, CLMOE_MOE_MAX_TOP_K) */
  int64_t expert_ff; /* f: intermediate width of a routed expert */
  int64_t n_shared;  /* shared experts (0: none) ... */
  int64_t shared_ff; /* ... each this wide; together one FFN of n_shared * shared_ff */
  float norm_eps;    /* latent RMSNorm epsilon; 0 means 1e-5 */
  clmoe_moe_balance balance;
  int hist_bins;     /* QB_HIST: bins (0 means 1000) */
  float sign_gamma;  /* SIGN: step (0 means 1e-3) */
  clmoe_moe_gemm gemm;
  clmoe_glu glu;     /* gated unit of the routed and the shared experts (0: SiTU-GLU) */
  int64_t groups;    /* G expert groups for grouped selection (0 means 1: no grouping);
                        G > 1 needs E a multiple of G with at least 2 experts a group */
  int64_t topk_groups; /* groups kept per token (0 means G); top_k <= topk_groups E / G */
  int no_renormalize; /* 1: p_i = routed_scale s_i (no division by the chosen sum) */
  float routed_scale; /* c multiplying every combine weight; 0 means 1 */
} clmoe_moe_config;

/* Per-phase wall-clock seconds, accumulated when clmoe_moe_layer.timing is set (the layer then
 * waits for the device after each phase: for benchmarks only). */
typedef struct clmoe_moe_timing {
  double route;    /* router GEMM, top-k, balancing statistics (backward: router gradient) */
  double dispatch; /* grouping by expert, tile tables, gathers into expert order */
  double experts;  /* expert GEMMs and SiTU-GLU */
  double combine;  /* weighted combine (backward: its gradient and dp) */
  double dense;    /* W_down, latent RMSNorm, W_up and the shared experts */
} clmoe_moe_timing;

typedef struct clmoe_moe_layer {
  clmoe_moe_config cfg;   /* as given, with the defaults filled in */
  clmoe_tensor w_router;  /* [E, d] */
  clmoe_tensor w_down;    /* [l, d]; latent 0: not created (buf NULL) */
  clmoe_tensor w_gate;    /* [E, f, l] (latent 0: l = d here and below) */
  clmoe_tensor w_upp;     /* [E, f, l] */
  clmoe_tensor w_dn;      /* [E, l, f] */
  clmoe_tensor norm_gain; /* [l]; latent 0: not created */
  clmoe_tensor w_up;      /* [d, l]; latent 0: not created */
  clmoe_situ_ffn shared;  /* [S, d], [S, d], [d, S] with S = n_shared * shared_ff (empty if 0) */
  clmoe_tensor bias;      /* [E] selection bias: state, not a parameter; starts at 0 */
  clmoe_moe_timing *timing; /* NULL, or per-phase times (see clmoe_moe_timing) */
} clmoe_moe_layer;

/* Gradients, the same shapes as the layer's parameters (no bias; latent 0: no w_down,
 * norm_gain, w_up). */
typedef struct clmoe_moe_grads {
  clmoe_tensor w_router, w_down, w_gate, w_upp, w_dn, norm_gain, w_up;
  clmoe_situ_ffn shared;
} clmoe_moe_grads;

/* Checks cfg (a clear error naming the field) and creates the tensors: parameters undefined,
 * bias 0. */
CLMOE_API clmoe_status clmoe_moe_layer_create(clmoe_ctx *ctx, clmoe_moe_layer *layer,
                                              const clmoe_moe_config *cfg);
/* Matrices N(0, stddev) from the counter-based generator (seed), gain 1, bias 0. */
CLMOE_API clmoe_status clmoe_moe_layer_init(clmoe_moe_layer *layer, uint64_t seed, float stddev);
CLMOE_API void clmoe_moe_layer_destroy(clmoe_moe_layer *layer);
CLMOE_API clmoe_status clmoe_moe_grads_create(clmoe_ctx *ctx, const clmoe_moe_layer *layer,
                                              clmoe_moe_grads *g);
CLMOE_API void clmoe_moe_grads_destroy(clmoe_moe_grads *g);

/* Grouping of the m k (token, slot) pairs by expert. R rows of expert buffers: m k when
 * grouped, E cap when padded (row pos[i] of (token, slot) i = token k + slot). */
typedef struct clmoe_moe_dispatch {
  int64_t tokens, top_k, n_experts;
  int64_t rows;          /* R */
  int64_t cap;           /* padded: rows per expert (the largest count); grouped: 0 */
  int64_t max_tiles;     /* grouped: entries of tiles */
  int64_t tile_rows;     /* grouped: rows per tile of the grouped GEMM */
  clmoe_tensor perm;     /* i32 [m k]: the pair (token k + slot) at each sorted position */
  clmoe_tensor offsets;  /* i32 [E + 1]: expert e owns sorted positions offsets[e] .. [e + 1] */
  clmoe_tensor pos;      /* i32 [m k]: row of each pair in the expert buffers */
  clmoe_tensor tiles;    /* i32 [max_tiles, 2], grouped: (expert, first row) of each row tile
                            of the grouped GEMM, expert -1 past the last */
} clmoe_moe_dispatch;

/* topk i32 [m, k]: expert of each (token, slot). A value outside [0, E) is not checked by the
 * host; such a pair gets no row (pos -1) and adds nothing (offsets[E] < m k shows it). */
CLMOE_API clmoe_status clmoe_moe_dispatch_create(clmoe_ctx *ctx, const clmoe_tensor *topk,
                                                 int64_t n_experts, int padded,
                                                 clmoe_moe_dispatch *disp);
CLMOE_API void clmoe_moe_dispatch_destroy(clmoe_moe_dispatch *disp);
/* xs [R, l]: row pos[i] = x[i / k] (padded: other rows 0). x [m, l]. */
CLMOE_API clmoe_status clmoe_moe_gather(clmoe_ctx *ctx, const clmoe_moe_dispatch *disp,
                                        const clmoe_tensor *x, clmoe_tensor *xs);
/* z [m, l]: z[t] = sum over slots s in order of probs[t, s] ys[pos[t k + s]]. */
CLMOE_API clmoe_status clmoe_moe_combine(clmoe_ctx *ctx, const clmoe_moe_dispatch *disp,
                                         const clmoe_tensor *probs, const clmoe_tensor *ys,
                                         clmoe_tensor *z);

/* The router: s_all [m, E] = sigmoid(x W_r^T) (f32); topk i32 [m, k]: the k largest s + b in
 * descending order (ties: lower index), among the experts of the kept groups when the layer
 * groups them; scores [m, k] their s; probs [m, k] = p (renormalised or not, times
 * routed_scale). cutoff [m] (NULL: not computed; not with groups) gets the (k+1)-th largest
 * s + b, the QB cut-off. */
CLMOE_API clmoe_status clmoe_moe_route(clmoe_ctx *ctx, const clmoe_moe_layer *layer,
                                       const clmoe_tensor *x, clmoe_tensor *s_all,
                                       clmoe_tensor *topk, clmoe_tensor *scores,
                                       clmoe_tensor *probs, clmoe_tensor *cutoff);

/* Quantile Balancing pieces. The margin of token i for expert j is s_all[i, j] - cutoff[i];
 * the threshold of expert j is the r-th largest margin, r = floor(tokens k / E) + 1, and the
 * new bias is b = c - mean(c) with c = -threshold.
 * Exact: thr [E] by radix selection over the m margins. */
CLMOE_API clmoe_status clmoe_moe_qb_threshold_exact(clmoe_ctx *ctx, const clmoe_tensor *s_all,
                                                    const clmoe_tensor *cutoff, int64_t top_k,
                                                    clmoe_tensor *thr);
/* Histogram: range f32 [3] = {lo, hi, scale} with lo = -1 - max(bias), hi = 1 - min(bias)
 * (every margin lies in [lo, hi]; ranks sharing the bias agree on it) and scale = bins /
 * (hi - lo); counts i32 [E, bins]: margin -> bin floor((margin - lo) * scale), clamped to
 * [0, bins - 1]. Counts of several ranks may be summed before the threshold. */
CLMOE_API clmoe_status clmoe_moe_qb_histogram(clmoe_ctx *ctx, const clmoe_tensor *s_all,
                                              const clmoe_tensor *cutoff, const clmoe_tensor *bias,
                                              clmoe_tensor *counts, clmoe_tensor *range);
/* thr [E] from counts: the bin holding the r-th largest margin (r from `tokens`, the total
 * count per expert over all ranks), interpolated linearly inside it. */
CLMOE_API clmoe_status clmoe_moe_qb_threshold_hist(clmoe_ctx *ctx, const clmoe_tensor *counts,
                                                   const clmoe_tensor *range, int64_t tokens,
                                                   int64_t top_k, clmoe_tensor *thr);
/* bias = c - mean(c), c = -thr (replaces the old bias). */
CLMOE_API clmoe_status clmoe_moe_bias_from_threshold(clmoe_ctx *ctx, const clmoe_tensor *thr,
                                                     clmoe_tensor *bias);

/* Everything one forward keeps for the backward and the balancing update. */
typedef struct clmoe_moe_saved {
  int64_t tokens;             /* m */
  clmoe_tensor topk, scores, probs; /* [m, k] */
  clmoe_moe_dispatch disp;
  clmoe_tensor xl;            /* [m, l] W_down x (latent 0: a copy of x [m, d]) */
  clmoe_tensor xs;            /* [R, l] xl in expert order */
  clmoe_tensor u, w, act;     /* [R, f] expert intermediates */
  clmoe_tensor ys;            /* [R, l] expert outputs */
  clmoe_tensor z, rstd, zn;   /* [m, l], [m], [m, l] combine, its norm (latent 0: z only) */
  clmoe_situ_saved shared;    /* [m, S] */
  /* Balancing statistics of this batch (train mode): QB: thr [E]; QB_HIST: hist i32
   * [E, bins], range [3]; hist_tokens = m (set it to the sum over ranks after summing hist). */
  clmoe_tensor thr, hist, range;
  int64_t hist_tokens;
} clmoe_moe_saved;
CLMOE_API void clmoe_moe_saved_destroy(clmoe_moe_saved *s);

/* y [m, d] from x [m, d]. saved NULL: inference (nothing kept, bias frozen). saved given:
 * train mode: fills it for clmoe_moe_backward and clmoe_moe_balance_update (destroy it). */
CLMOE_API clmoe_status clmoe_moe_forward(clmoe_ctx *ctx, const clmoe_moe_layer *layer,
                                         const clmoe_tensor *x, clmoe_tensor *y,
                                         clmoe_moe_saved *saved);
/* The inference forward of an inference model's layer (clmoe_moe_forward with saved NULL
 * otherwise): bf16 routed expert stacks [E, ...] are read by the grouped expert kernels as
 * they are, widened exactly as they are staged, with fp32 rows and fp32 sums in the grouped
 * kernels' order: the bits of clmoe_moe_forward on fp32 copies of the same weights (grouped
 * GEMM), with no fp32 copy of any expert made. Where the device has a matrix unit
 * (CLMOE_INFER_TILE auto; 1: on any device, 0: never) bf16 stacks take the tile path of
 * clmoe_moe_forward instead (rows rounded to bf16 as they are staged, fp32 sums: a bf16
 * training step's form). The padded choice (cfg.gemm) is not taken for bf16 stacks. The other
 * matrices are taken as clmoe_moe_forward takes them (fp32 ones: fp32 products; bf16 ones on
 * the tile GEMM). */
CLMOE_API clmoe_status clmoe_moe_forward_infer(clmoe_ctx *ctx, const clmoe_moe_layer *layer,
                                               const clmoe_tensor *x, clmoe_tensor *y);
/* The inference forward (as clmoe_moe_forward with saved NULL, to fp32 rounding) for few
 * tokens, e.g. a decode step: two kernels over the m k (token, chosen expert) pairs read the
 * router's choice on the device and run the experts without sorting or dispatch (no host
 * read); each pair reads its expert's weights, so for many tokens clmoe_moe_forward is
 * faster. Routed experts in fp32 or bf16 (fp32 sums), top_k at most
 * CLMOE_MOE_DECODE_TOPK_MAX. accumulate 1: y += MoE(x) (a residual stream); 0: y =
 * MoE(x), y not read. topk (i32 [m, k], may be NULL) receives the router's choice. The
 * router's product is summed in another order than clmoe_moe_route's, so a near-tie (within
 * fp32 rounding) may choose differently. */
#define CLMOE_MOE_DECODE_TOPK_MAX 64
CLMOE_API clmoe_status clmoe_moe_decode_forward(clmoe_ctx *ctx, const clmoe_moe_layer *layer,
                                                const clmoe_tensor *x, int accumulate,
                                                clmoe_tensor *y, clmoe_tensor *topk);
/* Gradients of sum(y * dy) (grads and dx overwritten) for the same x as the forward. */
CLMOE_API clmoe_status clmoe_moe_backward(clmoe_ctx *ctx, const clmoe_moe_layer *layer,
                                          const clmoe_tensor *x, const clmoe_moe_saved *saved,
                                          const clmoe_tensor *dy, clmoe_moe_grads *grads,
                                          clmoe_tensor *dx);
/* Applies the configured balancing rule to layer->bias from a train-mode forward's batch:
 * the new bias takes effect at the next forward. NONE: nothing. */
CLMOE_API clmoe_status clmoe_moe_balance_update(clmoe_ctx *ctx, clmoe_moe_layer *layer,
                                                const clmoe_moe_saved *saved);

/* Load statistics of a dispatch (one blocking read of E + 1 integers). Quantiles of the
 * per-expert token counts interpolate linearly between order statistics (q (E - 1)). */
typedef struct clmoe_moe_load {
  int64_t tokens, n_experts, top_k;
  double mean;            /* m k / E */
  int64_t max, min;
  double max_over_mean;
  double q10, q50, q90;
  int64_t empty;          /* experts with no tokens */
} clmoe_moe_load;
/* The statistics of per-expert token counts [n_experts] (of tokens x top_k routed copies);
 * sorted: [n_experts] scratch. For counts gathered elsewhere (summed over ranks). */
CLMOE_API void clmoe_moe_load_from_counts(const int64_t *counts, int64_t n_experts, int64_t tokens,
                                          int64_t top_k, int64_t *sorted, clmoe_moe_load *stats);
/* counts [E] may be NULL. */
CLMOE_API clmoe_status clmoe_moe_load_stats(clmoe_ctx *ctx, const clmoe_moe_dispatch *disp,
                                            clmoe_moe_load *stats, int64_t *counts);

/* FLOPs of one forward of the layer for m tokens (matrix products only). */
CLMOE_API double clmoe_moe_forward_flops(const clmoe_moe_config *cfg, int64_t m);
CLMOE_API const char *clmoe_moe_balance_name(clmoe_moe_balance b);

#ifdef __cplusplus
}
#endif
#endif
