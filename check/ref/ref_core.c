/* References: GEMM, pointwise functions, reductions, the linear layer. */
#include <math.h>

#include "reference.h"

void ref_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const double *A,
              int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc)
{
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; p++) {
        double a = ta ? A[p * lda + i] : A[i * lda + p];
        double b = tb ? B[j * ldb + p] : B[p * ldb + j];
        acc += a * b;
      }
      double *c = &C[i * ldc + j];
      *c = beta == 0.0 ? alpha * acc : alpha * acc + beta * *c;
    }
}

double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
double ref_silu(double x) { return x * ref_sigmoid(x); }

double ref_silu_grad(double x)
{
  double s = ref_sigmoid(x);
  return s + x * s * (1.0 - s);
}

double ref_sum(const double *x, size_t n)
{
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += x[i];
  return s;
}

double ref_sum_squares(const double *x, size_t n)
{
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += x[i] * x[i];
  return s;
}

double ref_max_abs(const double *x, size_t n)
{
  double m = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(x[i])) return x[i];
    if (fabs(x[i]) > m) m = fabs(x[i]);
  }
  return m;
}

void ref_sum_rows(const double *x, int64_t rows, int64_t n, double *out)
{
  for (int64_t j = 0; j < n; j++) out[j] = 0.0;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < n; j++) out[j] += x[i * n + j];
}

void ref_linear(const double *X, const double *W, const double *bias, int64_t rows, int64_t in,
                int64_t out, double *Y)
{
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < out; o++) {
      double acc = bias ? bias[o] : 0.0;
      for (int64_t i = 0; i < in; i++) acc += X[r * in + i] * W[o * in + i];
      Y[r * out + o] = acc;
    }
}

void ref_linear_backward(const double *X, const double *W, const double *dY, int64_t rows,
                         int64_t in, int64_t out, double *dX, double *dW, double *dbias)
{
  for (int64_t r = 0; dX && r < rows; r++)
    for (int64_t i = 0; i < in; i++) {
      double acc = 0.0;
      for (int64_t o = 0; o < out; o++) acc += dY[r * out + o] * W[o * in + i];
      dX[r * in + i] += acc;
    }
  for (int64_t o = 0; dW && o < out; o++)
    for (int64_t i = 0; i < in; i++) {
      double acc = 0.0;
      for (int64_t r = 0; r < rows; r++) acc += dY[r * out + o] * X[r * in + i];
      dW[o * in + i] += acc;
    }
  for (int64_t o = 0; dbias && o < out; o++)
    for (int64_t r = 0; r < rows; r++) dbias[o] += dY[r * out + o];
}
