/* References: Block AttnRes, written from the definition (MODEL.md section 5). */
#include "ref_layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per token: logits l_i = (w g . b_i) / r_i, a = softmax(l). */
static void logits(const double *src, int64_t S, int64_t T, int64_t d, int64_t t, const double *w,
                   const double *g, double eps, double *r, double *l, double *a)
{
  double m = -INFINITY, z = 0.0;
  for (int64_t i = 0; i < S; i++) {
    const double *b = src + (i * T + t) * d;
    double ss = 0.0, dot = 0.0;
    for (int64_t c = 0; c < d; c++) ss += b[c] * b[c], dot += w[c] * g[c] * b[c];
    r[i] = sqrt(ss / (double)d + eps);
    l[i] = dot / r[i];
    if (l[i] > m) m = l[i];
  }
  for (int64_t i = 0; i < S; i++) z += (a[i] = exp(l[i] - m));
  for (int64_t i = 0; i < S; i++) a[i] /= z;
}

void ref_attn_res(const double *src, int64_t S, int64_t T, int64_t d, const double *w,
                  const double *g, double eps, double *h, double *alpha)
{
  double *r = malloc((size_t)S * 3 * sizeof *r), *l = r + S, *a = r + 2 * S;
  for (int64_t t = 0; t < T; t++) {
    logits(src, S, T, d, t, w, g, eps, r, l, a);
    for (int64_t c = 0; c < d; c++) {
      double s = 0.0;
      for (int64_t i = 0; i < S; i++) s += a[i] * src[(i * T + t) * d + c];
      h[t * d + c] = s;
    }
    if (alpha)
      for (int64_t i = 0; i < S; i++) alpha[t * S + i] = a[i];
  }
  free(r);
}

void ref_attn_res_backward(const double *src, int64_t S, int64_t T, int64_t d, const double *w,
                           const double *g, double eps, const double *dh, double *dsrc,
                           double *dw, double *dg)
{
  double *r = malloc((size_t)S * 5 * sizeof *r), *l = r + S, *a = r + 2 * S, *da = r + 3 * S;
  double *dl = r + 4 * S;
  memset(dw, 0, (size_t)d * sizeof *dw);
  memset(dg, 0, (size_t)d * sizeof *dg);
  for (int64_t t = 0; t < T; t++) {
    logits(src, S, T, d, t, w, g, eps, r, l, a);
    double s = 0.0;
    for (int64_t i = 0; i < S; i++) {
      da[i] = 0.0;
      for (int64_t c = 0; c < d; c++) da[i] += dh[t * d + c] * src[(i * T + t) * d + c];
      s += a[i] * da[i];
    }
    for (int64_t i = 0; i < S; i++) dl[i] = a[i] * (da[i] - s);
    for (int64_t i = 0; i < S; i++)
      for (int64_t c = 0; c < d; c++) {
        const double b = src[(i * T + t) * d + c];
        /* h = sum a_i b_i; l_i = (u . b_i) / r_i with dr_i/db = b_i / (d r_i) */
        dsrc[(i * T + t) * d + c] += a[i] * dh[t * d + c] +
                                     dl[i] * (w[c] * g[c] / r[i] - l[i] * b / ((double)d * r[i] * r[i]));
        dw[c] += dl[i] * g[c] * b / r[i];
        dg[c] += dl[i] * w[c] * b / r[i];
      }
  }
  free(r);
}

#include "ref_kda.h"
#include "reference.h"

void ref_kda_layer_forward(const ref_kda_layer *L, int64_t B, int64_t T, const int32_t *cu_seqlens,
                           int64_t nseq, const double *x, double *y)
{
  const int64_t N = B * T, d = L->d, H = L->H, D = L->D, HD = H * D;
  ref_kda_shape s = {B, T, H, D, D, cu_seqlens, nseq, 1.0 / sqrt((double)D), -5.0, L->unbounded};
  double *pre = malloc((size_t)(N * HD) * sizeof *pre), *q = malloc((size_t)(N * HD) * sizeof *q);
  double *k = malloc((size_t)(N * HD) * sizeof *k), *v = malloc((size_t)(N * HD) * sizeof *v);
  double *za = malloc((size_t)(N * L->rank) * sizeof *za), *z = malloc((size_t)(N * HD) * sizeof *z);
  double *beta = malloc((size_t)(N * H) * sizeof *beta), *o = malloc((size_t)(N * HD) * sizeof *o);
  double *gate = malloc((size_t)(N * HD) * sizeof *gate);
  const double *W[3] = {L->w_q, L->w_k, L->w_v}, *cw[3] = {L->conv_q, L->conv_k, L->conv_v};
  double *post[3] = {q, k, v};
  for (int j = 0; j < 3; j++) {
    ref_gemm(0, 1, N, HD, d, 1.0, x, d, W[j], d, 0.0, pre, HD);
    ref_short_conv(&s, HD, L->W, pre, cw[j], NULL, post[j], NULL);
  }
  ref_gemm(0, 1, N, L->rank, d, 1.0, x, d, L->w_a_down, d, 0.0, za, L->rank);
  ref_gemm(0, 1, N, HD, L->rank, 1.0, za, L->rank, L->w_a_up, L->rank, 0.0, z, HD);
  ref_gemm(0, 1, N, H, d, 1.0, x, d, L->w_beta, d, 0.0, beta, H);
  ref_kda_forward(&s, q, k, v, z, beta, L->A_log, L->dt_bias, NULL, o, NULL);
  ref_rmsnorm(o, L->o_gain, N * H, D, L->eps, o); /* per head, in place */
  if (L->gate_rank > 0) {
    const int64_t r = L->gate_rank;
    double *gd = malloc((size_t)(N * r) * sizeof *gd);
    ref_gemm(0, 1, N, r, d, 1.0, x, d, L->w_g_down, d, 0.0, gd, r);
    ref_gemm(0, 1, N, HD, r, 1.0, gd, r, L->w_g_up, r, 0.0, gate, HD);
    free(gd);
  } else {
    ref_gemm(0, 1, N, HD, d, 1.0, x, d, L->w_g, d, 0.0, gate, HD);
  }
  for (int64_t i = 0; i < N * HD; i++) gate[i] = o[i] / (1.0 + exp(-gate[i]));
  ref_gemm(0, 1, N, d, HD, 1.0, gate, HD, L->w_o, HD, 0.0, y, d);
  free(pre), free(q), free(k), free(v), free(za), free(z), free(beta), free(o), free(gate);
}
