/* Double-precision C references of every operator: written for clarity, not speed, and
 * independent of the library's kernels. All arrays are row-major. */
#ifndef CLMOE_REFERENCE_H
#define CLMOE_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

/* ---- ref_core.c ---- */
/* C[m,n] = alpha op(A) op(B) + beta C; A is [m,k] (or [k,m] when ta), B [k,n] (or [n,k]). */
void ref_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const double *A,
              int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc);
double ref_sigmoid(double x);
double ref_silu(double x);
double ref_silu_grad(double x); /* d silu / dx */
double ref_sum(const double *x, size_t n);
double ref_sum_squares(const double *x, size_t n);
double ref_max_abs(const double *x, size_t n);
/* out[j] = sum_i x[i*n + j] */
void ref_sum_rows(const double *x, int64_t rows, int64_t n, double *out);
/* Y[rows, out] = X[rows, in] W[out, in]^T (+ bias[out] when not NULL). */
void ref_linear(const double *X, const double *W, const double *bias, int64_t rows, int64_t in,
                int64_t out, double *Y);
/* The backward of ref_linear from dY[rows, out]: dX += dY W, dW += dY^T X, dbias += the sum
 * of dY's rows (each output accumulated: start from zeros to overwrite); each may be NULL. */
void ref_linear_backward(const double *X, const double *W, const double *dY, int64_t rows,
                         int64_t in, int64_t out, double *dX, double *dW, double *dbias);

/* ---- ref_norm.c ---- */
/* y = x / sqrt(mean(x^2) + eps) * gain (gain may be NULL), per row of n. */
void ref_rmsnorm(const double *x, const double *gain, int64_t rows, int64_t n, double eps,
                 double *y);
/* dx (and dgain when not NULL, overwritten) from dy. */
void ref_rmsnorm_backward(const double *x, const double *gain, const double *dy, int64_t rows,
                          int64_t n, double eps, double *dx, double *dgain);
void ref_softmax(const double *x, int64_t rows, int64_t n, double *y);
void ref_softmax_backward(const double *y, const double *dy, int64_t rows, int64_t n, double *dx);
/* loss[r] = logsumexp(logits[r]) - logits[r][target[r]] (0 when target[r] < 0). */
void ref_cross_entropy(const double *logits, const int32_t *target, int64_t rows, int64_t vocab,
                       double *loss);
/* dlogits = scale (softmax - onehot), zero rows for ignored targets. */
void ref_cross_entropy_backward(const double *logits, const int32_t *target, int64_t rows,
                                int64_t vocab, double scale, double *dlogits);

/* ---- ref_embed.c ---- */
void ref_embedding(const double *table, const int32_t *ids, int64_t ntok, int64_t d, double *out);
/* dtable[ids[t]] += dout[t] (dtable is accumulated into, not overwritten). */
void ref_embedding_backward(const int32_t *ids, const double *dout, int64_t ntok, int64_t d,
                            double *dtable);
/* One AdamW step in place on param, m, v (see include/clmoe/ops.h for the formula). */
void ref_adamw(double *param, const double *grad, double *m, double *v, size_t n, double lr,
               double beta1, double beta2, double eps, double weight_decay, double grad_scale,
               int64_t step);

#endif
