/* References: Block AttnRes, written from the definition (MODEL.md section 5). */
#include "ref/ref_layers.h"

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
