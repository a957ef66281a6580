/* References: RMSNorm, softmax, cross-entropy (double precision, straightforward loops).
 * Maxima let a NaN through so the references propagate NaN as the kernels must. */
#include <math.h>
#include <stddef.h>

#include "reference.h"

/* Row maximum; a NaN anywhere makes it NaN. */
static double row_max(const double *x, int64_t n)
{
  double m = -INFINITY;
  for (int64_t j = 0; j < n; j++)
    if (isnan(x[j]) || x[j] > m) {
      m = x[j];
      if (isnan(m)) break;
    }
  return m;
}

static double row_logsumexp(const double *x, int64_t n)
{
  double m = row_max(x, n), s = 0.0;
  for (int64_t j = 0; j < n; j++) s += exp(x[j] - m);
  return m + log(s);
}

static double row_rstd(const double *x, int64_t n, double eps)
{
  double ss = 0.0;
  for (int64_t j = 0; j < n; j++) ss += x[j] * x[j];
  return 1.0 / sqrt(ss / (double)n + eps);
}

void ref_rmsnorm(const double *x, const double *gain, int64_t rows, int64_t n, double eps,
                 double *y)
{
  for (int64_t i = 0; i < rows; i++) {
    const double *xr = x + i * n;
    double r = row_rstd(xr, n, eps);
    for (int64_t j = 0; j < n; j++) y[i * n + j] = xr[j] * r * (gain ? gain[j] : 1.0);
  }
}

/* y_j = x_j r g_j with r = (mean(x^2) + eps)^(-1/2), dr/dx_k = -r^3 x_k / n:
 *   dx_k = r g_k dy_k - x_k r^3 / n sum_j dy_j g_j x_j,   dgain_j = sum_rows dy_j x_j r. */
void ref_rmsnorm_backward(const double *x, const double *gain, const double *dy, int64_t rows,
                          int64_t n, double eps, double *dx, double *dgain)
{
  if (dgain)
    for (int64_t j = 0; j < n; j++) dgain[j] = 0.0;
  for (int64_t i = 0; i < rows; i++) {
    const double *xr = x + i * n, *dyr = dy + i * n;
    double r = row_rstd(xr, n, eps), dot = 0.0;
    for (int64_t j = 0; j < n; j++) dot += dyr[j] * (gain ? gain[j] : 1.0) * xr[j];
    for (int64_t j = 0; j < n; j++) {
      double g = gain ? gain[j] : 1.0;
      dx[i * n + j] = r * g * dyr[j] - xr[j] * r * r * r * dot / (double)n;
      if (dgain) dgain[j] += dyr[j] * xr[j] * r;
    }
  }
}

void ref_softmax(const double *x, int64_t rows, int64_t n, double *y)
{
  for (int64_t i = 0; i < rows; i++) {
    const double *xr = x + i * n;
    double m = row_max(xr, n), s = 0.0;
    for (int64_t j = 0; j < n; j++) s += exp(xr[j] - m);
    for (int64_t j = 0; j < n; j++) y[i * n + j] = exp(xr[j] - m) / s;
  }
}

/* The Jacobian is d y_j / d x_k = y_j (delta_jk - y_k), so with incoming gradient dy:
 *   dx_k = sum_j dy_j y_j (delta_jk - y_k) = y_k (dy_k - sum_j y_j dy_j). */
void ref_softmax_backward(const double *y, const double *dy, int64_t rows, int64_t n, double *dx)
{
  for (int64_t i = 0; i < rows; i++) {
    const double *yr = y + i * n, *dyr = dy + i * n;
    double dot = 0.0;
    for (int64_t j = 0; j < n; j++) dot += yr[j] * dyr[j];
    for (int64_t j = 0; j < n; j++) dx[i * n + j] = yr[j] * (dyr[j] - dot);
  }
}

/* A target >= vocab is the caller's error; the reference answers NaN without reading. */
void ref_cross_entropy(const double *logits, const int32_t *target, int64_t rows, int64_t vocab,
                       double *loss)
{
  for (int64_t i = 0; i < rows; i++) {
    const double *xr = logits + i * vocab;
    if (target[i] < 0) loss[i] = 0.0;
    else if (target[i] >= vocab) loss[i] = NAN;
    else loss[i] = row_logsumexp(xr, vocab) - xr[target[i]];
  }
}

void ref_cross_entropy_backward(const double *logits, const int32_t *target, int64_t rows,
                                int64_t vocab, double scale, double *dlogits)
{
  for (int64_t i = 0; i < rows; i++) {
    const double *xr = logits + i * vocab;
    double *dr = dlogits + i * vocab;
    int32_t t = target[i];
    if (t < 0 || t >= vocab) {
      for (int64_t j = 0; j < vocab; j++) dr[j] = t < 0 ? 0.0 : NAN;
      continue;
    }
    double l = row_logsumexp(xr, vocab);
    for (int64_t j = 0; j < vocab; j++) dr[j] = scale * (exp(xr[j] - l) - (j == t ? 1.0 : 0.0));
  }
}
