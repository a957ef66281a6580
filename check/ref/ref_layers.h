/* Double-precision references of the model's layer pieces: Block AttnRes. */
#ifndef CLMOE_REF_LAYERS_H
#define CLMOE_REF_LAYERS_H

#include <stdint.h>

/* sources [S, T, d]; w, g [d]; h [T, d]; alpha [T, S] (may be NULL). */
void ref_attn_res(const double *src, int64_t S, int64_t T, int64_t d, const double *w,
                  const double *g, double eps, double *h, double *alpha);
/* dsrc [S, T, d] is added to; dw, dg [d] are overwritten. */
void ref_attn_res_backward(const double *src, int64_t S, int64_t T, int64_t d, const double *w,
                           const double *g, double eps, const double *dh, double *dsrc,
                           double *dw, double *dg);

#endif

/* The KDA token mixer (include/clmoe/kda_layer.h) from the other references: GEMMs, the short
 * convolution, the KDA token loop, the per-head RMSNorm and the sigmoid gate. Weights are
 * row-major [out, in] like the library's. Sequences as in ref_kda_shape (its B, T,
 * cu_seqlens, nseq; H, K = V = D, scale 1/sqrt(D), lb -5 are set from the layer). */
typedef struct ref_kda_layer {
  int64_t d, H, D, rank, W;
  double eps;
  const double *w_q, *w_k, *w_v, *w_beta, *w_a_down, *w_a_up, *dt_bias, *A_log;
  const double *conv_q, *conv_k, *conv_v, *o_gain, *w_g, *w_o;
  int64_t gate_rank;                 /* r > 0: gate logits (x W_g_down^T) W_g_up^T, w_g unused */
  const double *w_g_down, *w_g_up;   /* [r, d], [H D, r] */
  int unbounded;                     /* 1: g = -exp(A_log) softplus(z + dt_bias) */
} ref_kda_layer;
/* x, y [B, T, d]. */
void ref_kda_layer_forward(const ref_kda_layer *L, int64_t B, int64_t T, const int32_t *cu_seqlens,
                           int64_t nseq, const double *x, double *y);
