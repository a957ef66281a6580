/* Double-precision reference of the Stable LatentMoE layer (shared/spec/MODEL.md section 4):
 * the router (with grouped selection), the gated FFN (SiTU-GLU or SwiGLU), the whole layer as
 * a loop over tokens and their chosen experts with its analytic backward (with or without the
 * latent projection, renormalised or plain combine weights times a scale), Quantile
 * Balancing (exact and histogram) and the sign rule. Written for clarity, independent of the library's kernels. Row-major arrays;
 * weight matrices are [out, in] as in include/clmoe/moe.h. */
#ifndef CLMOE_REF_MOE_H
#define CLMOE_REF_MOE_H

#include <stddef.h>
#include <stdint.h>

#define REF_SITU_B1 4.0
#define REF_SITU_B2 25.0

/* x rounded to bf16 (nearest even, through fp32), returned as a double. */
double ref_bf16(double x);

/* SiTU(u, w) = (b1 tanh(u/b1) sigmoid(u)) (b2 tanh(w/b2)) and its two partial derivatives. */
double ref_situ(double u, double w);
void ref_situ_grad(double u, double w, double *du, double *dw);
/* The gated unit glu (0: SiTU, 1: SwiGLU = u sigmoid(u) w) and its partial derivatives. */
double ref_glu(int glu, double u, double w);
void ref_glu_grad(int glu, double u, double w, double *du, double *dw);

/* Dense SiTU-GLU FFN, y += W_dn situ(W_gate x, W_upp x) for m rows of width d and an
 * intermediate width f: w_gate, w_upp [f, d], w_dn [d, f]. */
void ref_situ_ffn_forward(int64_t m, int64_t d, int64_t f, const double *x, const double *w_gate,
                          const double *w_upp, const double *w_dn, double *y);
/* Adds the gradients of sum(y * dy) to dw_gate, dw_upp, dw_dn and dx (any may be NULL). */
void ref_situ_ffn_backward(int64_t m, int64_t d, int64_t f, const double *x, const double *w_gate,
                           const double *w_upp, const double *w_dn, const double *dy,
                           double *dw_gate, double *dw_upp, double *dw_dn, double *dx);
/* The same with the gated unit glu. */
void ref_glu_ffn_forward(int glu, int64_t m, int64_t d, int64_t f, const double *x, const double *w_gate,
                         const double *w_upp, const double *w_dn, double *y);
void ref_glu_ffn_backward(int glu, int64_t m, int64_t d, int64_t f, const double *x,
                          const double *w_gate, const double *w_upp, const double *w_dn,
                          const double *dy, double *dw_gate, double *dw_upp, double *dw_dn, double *dx);

typedef struct ref_moe_shape {
  int64_t m;   /* tokens */
  int64_t d;   /* model width */
  int64_t l;   /* latent width; 0: no latent projection (the experts work at d on x) */
  int64_t E;   /* routed experts */
  int64_t k;   /* experts per token */
  int64_t f;   /* expert intermediate width */
  int64_t S;   /* shared FFN width (n_shared * shared_ff; 0: none) */
  double eps;  /* latent RMSNorm epsilon */
  int glu;     /* gated unit of every FFN (0: SiTU-GLU, 1: SwiGLU) */
  int64_t groups, topk_groups; /* grouped selection (0 or 1 group: none) */
  int no_renorm; /* 1: p = scale s (no division by the chosen sum) */
  double scale;  /* routed scale of p (0 means 1) */
} ref_moe_shape;

/* Parameters (or, for the backward, their gradients; l = 0: no w_down, gain, w_up and the
 * experts' l is d), layouts as include/clmoe/moe.h:
 * w_router [E, d], w_down [l, d], w_gate and w_upp [E, f, l], w_dn [E, l, f], gain [l],
 * w_up [d, l], sh_gate and sh_upp [S, d], sh_dn [d, S]. */
typedef struct ref_moe_params {
  double *w_router, *w_down, *w_gate, *w_upp, *w_dn, *gain, *w_up, *sh_gate, *sh_upp, *sh_dn;
} ref_moe_params;

/* s_all [m, E] = sigmoid(x W_r^T) (may be NULL); topk [m, k1]: the k1 largest s + bias per
 * token in descending order, ties to the lower expert index; bias may be NULL (zero). With
 * groups > 1: only among the experts of the topk_groups groups (E / groups consecutive
 * experts each) with the largest sum of their two best s + bias, ties to the lower group. */
void ref_moe_route(const ref_moe_shape *s, const double *w_router, const double *bias,
                   const double *x, int64_t k1, int32_t *topk, double *s_all);

/* allowed [E]: 1 for the experts of the topk_groups groups of v [E] (s + b of one token) with
 * the largest sum of their two best values (ties: the lower group); every expert without
 * groups. */
void ref_moe_keep_groups(const ref_moe_shape *s, const double *v, char *allowed);

/* y [m, d] of the layer for the chosen experts topk [m, k]; probs [m, k] (may be NULL)
 * receives the combine weights p = scale s / sum of the chosen s (or scale s). Without a
 * latent projection (l = 0) w_down, gain and w_up are not read. */
void ref_moe_forward(const ref_moe_shape *s, const ref_moe_params *p, const double *x,
                     const int32_t *topk, double *y, double *probs);

/* Gradients of sum(y * dy) for a fixed choice topk: every array of g (overwritten; S = 0
 * leaves the shared ones alone) and dx [m, d] (overwritten). */
void ref_moe_backward(const ref_moe_shape *s, const ref_moe_params *p, const double *x,
                      const int32_t *topk, const double *dy, ref_moe_params *g, double *dx);

/* The same as a bf16 training step computes them: the routed experts' products take their
 * vector operands (the expert's input, the unit's output, the output gradient, du and dw)
 * rounded to bf16 (ref_bf16) where the bf16 kernels round them; every sum in double. The
 * weights are used as given (pass them rounded to model bf16 copies). */
void ref_moe_forward_bf16(const ref_moe_shape *s, const ref_moe_params *p, const double *x,
                          const int32_t *topk, double *y, double *probs);
void ref_moe_backward_bf16(const ref_moe_shape *s, const ref_moe_params *p, const double *x,
                           const int32_t *topk, const double *dy, ref_moe_params *g, double *dx);

/* Tokens per expert: counts [E] from topk [m, k]. */
void ref_moe_loads(int64_t m, int64_t E, int64_t k, const int32_t *topk, int64_t *counts);

/* Quantile Balancing threshold of expert j: the r-th largest margin s_all[i, j] - cutoff[i]
 * over the m tokens, r = floor(m k / E) + 1. thr [E]. */
int64_t ref_moe_qb_rank(int64_t m, int64_t E, int64_t k);
void ref_moe_qb_exact(int64_t m, int64_t E, int64_t k, const double *s_all, const double *cutoff,
                      double *thr);
/* The histogram estimate of the same threshold from counts [E, bins] of margins over
 * [lo, hi) (bin b covers lo + b w .. lo + (b + 1) w, w = (hi - lo) / bins): the bin that
 * holds the r-th largest margin, interpolated linearly inside it; `tokens` is the total
 * count per expert (summed over ranks). */
void ref_moe_qb_from_hist(int64_t E, int64_t bins, const int32_t *counts, double lo, double hi,
                          int64_t tokens, int64_t k, double *thr);
/* bias [E] = c - mean(c) with c = -thr (the new bias replaces the old one). */
void ref_moe_bias_from_thr(int64_t E, const double *thr, double *bias);
/* DeepSeek-V3's rule: bias[j] += gamma sign(mean load - load[j]). */
void ref_moe_sign_update(int64_t E, int64_t m, int64_t k, const int64_t *counts, double gamma,
                         double *bias);

#endif
