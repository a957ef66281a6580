/* Core operators, forward and backward. fp32 tensors, contiguous, unless stated.
 *
 * Row-wise operators take x of any rank and work over its last dimension (n = last size,
 * rows = numel / n). Reductions use a fixed summation order that does not depend on the
 * device's work-group size, so a device gives the same bits from run to run. */
#ifndef CLMOE_OPS_H
#define CLMOE_OPS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise (a, b, out: same number of elements; out may alias an input) ---- */
CLMOE_API clmoe_status clmoe_add(clmoe_ctx *ctx, const clmoe_tensor *a, const clmoe_tensor *b,
                                 clmoe_tensor *out);
/* out = a b; out may be bf16 storage (then not aliasing an input): the fp32 product rounded
 * to nearest even, for a product that feeds only bf16 matrix products. */
CLMOE_API clmoe_status clmoe_mul(clmoe_ctx *ctx, const clmoe_tensor *a, const clmoe_tensor *b,
                                 clmoe_tensor *out);
/* out = alpha x */
CLMOE_API clmoe_status clmoe_scale(clmoe_ctx *ctx, float alpha, const clmoe_tensor *x,
                                   clmoe_tensor *out);
/* y += alpha x */
CLMOE_API clmoe_status clmoe_axpy(clmoe_ctx *ctx, float alpha, const clmoe_tensor *x,
                                  clmoe_tensor *y);
/* da = dout b, db = dout a (either output may be NULL). */
CLMOE_API clmoe_status clmoe_mul_backward(clmoe_ctx *ctx, const clmoe_tensor *dout,
                                          const clmoe_tensor *a, const clmoe_tensor *b,
                                          clmoe_tensor *da, clmoe_tensor *db);
/* y = x sigmoid(x); dx = dy (s + x s (1 - s)) */
CLMOE_API clmoe_status clmoe_silu(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *y);
CLMOE_API clmoe_status clmoe_silu_backward(clmoe_ctx *ctx, const clmoe_tensor *x,
                                           const clmoe_tensor *dy, clmoe_tensor *dx);
/* y = 1 / (1 + exp(-x)); the backward takes the forward's output y: dx = dy y (1 - y) */
CLMOE_API clmoe_status clmoe_sigmoid(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *y);
CLMOE_API clmoe_status clmoe_sigmoid_backward(clmoe_ctx *ctx, const clmoe_tensor *y,
                                              const clmoe_tensor *dy, clmoe_tensor *dx);

/* ---- reductions (out: a 1-element f32 tensor) ---- */
CLMOE_API clmoe_status clmoe_sum(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *out);
CLMOE_API clmoe_status clmoe_sum_squares(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *out);
CLMOE_API clmoe_status clmoe_max_abs(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *out);
/* out[j] = sum_i x[i, j] over the rows of x [rows, n]; out: [n]. */
CLMOE_API clmoe_status clmoe_sum_rows(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *out);

/* ---- linear layer (PyTorch's Linear layout: weights [out, in]), through clmoe_gemm ----
 * Y = X W^T (+ bias): X [rows, in], W [out, in], bias [out] or NULL, Y [rows, out]. X, W and
 * Y may be fp32 or bf16 as clmoe_gemm takes them (rows contiguous); with a bias, bias and
 * Y are contiguous fp32.
 * A bf16 W (the weight copy of a bf16 training step) selects the bf16 products: X, and dY in
 * the backward, are rounded to bf16 where they are fp32, and all three products run on the
 * tile GEMM with fp32 accumulation (clmoe_gemm_bf16); an fp32 W keeps clmoe_gemm.
 * Backward: dX = dY W (dX [rows, in]), dW = dY^T X (dW [out, in]), dbias = the sum of dY's
 * rows (dbias [out], fp32; dY contiguous fp32 then); each may be NULL. `accumulate` says
 * which of them are added to instead of overwritten: CLMOE_LINEAR_ACC_DX | _DW | _DBIAS
 * (0: all three overwritten; the usual training step accumulates dW and dbias over the
 * uses of a weight and the microbatches). */
enum {
  CLMOE_LINEAR_ACC_DX = 1,   /* dX += dY W */
  CLMOE_LINEAR_ACC_DW = 2,   /* dW += dY^T X */
  CLMOE_LINEAR_ACC_DBIAS = 4 /* dbias += column sums of dY */
};
CLMOE_API clmoe_status clmoe_linear(clmoe_ctx *ctx, const clmoe_tensor *X, const clmoe_tensor *W,
                                    const clmoe_tensor *bias, clmoe_tensor *Y);
CLMOE_API clmoe_status clmoe_linear_backward(clmoe_ctx *ctx, const clmoe_tensor *X,
                                             const clmoe_tensor *W, const clmoe_tensor *dY,
                                             clmoe_tensor *dX, clmoe_tensor *dW,
                                             clmoe_tensor *dbias, unsigned accumulate);

/* ---- RMSNorm over the last dimension ----
 * y = x * rstd * gain, rstd = 1 / sqrt(mean(x^2) + eps); gain [n] may be NULL (no gain).
 * rstd [rows] is saved for the backward (may be NULL when no backward follows).
 * Backward: rstd is required; dx (required) may alias x or dy; dgain [n] (overwritten;
 * may be NULL) is the gradient of a gain of ones when gain is NULL. y may alias x.
 * y may be bf16 storage (then not aliasing x): the fp32 result rounded to nearest even, for
 * a normed input that feeds only bf16 products (the statistics stay fp32). */
CLMOE_API clmoe_status clmoe_rmsnorm(clmoe_ctx *ctx, const clmoe_tensor *x,
                                     const clmoe_tensor *gain, float eps, clmoe_tensor *y,
                                     clmoe_tensor *rstd);
CLMOE_API clmoe_status clmoe_rmsnorm_backward(clmoe_ctx *ctx, const clmoe_tensor *x,
                                              const clmoe_tensor *gain, const clmoe_tensor *rstd,
                                              const clmoe_tensor *dy, clmoe_tensor *dx,
                                              clmoe_tensor *dgain);

/* ---- softmax over the last dimension; the backward takes the forward's output ----
 * y may alias x, dx may alias y or dy. A NaN in a row makes that row's output NaN. */
CLMOE_API clmoe_status clmoe_softmax(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *y);
CLMOE_API clmoe_status clmoe_softmax_backward(clmoe_ctx *ctx, const clmoe_tensor *y,
                                              const clmoe_tensor *dy, clmoe_tensor *dx);

/* ---- embedding lookup ----
 * table [V, d], ids i32 [N] (any shape of N elements), out [N, d].
 * Backward: dtable[v] += sum of dout rows whose id is v, summed in token order (so the
 * result is deterministic). An id outside [0, V) is an error reported by the forward; the
 * backward skips such tokens. */
CLMOE_API clmoe_status clmoe_embedding(clmoe_ctx *ctx, const clmoe_tensor *table,
                                       const clmoe_tensor *ids, clmoe_tensor *out);
CLMOE_API clmoe_status clmoe_embedding_backward(clmoe_ctx *ctx, const clmoe_tensor *ids,
                                                const clmoe_tensor *dout, clmoe_tensor *dtable);
/* clmoe_embedding without its wait: the first position of a bad id (-1: none) goes to bad
 * (i32 [1]) on the device, for the caller to read with results it reads anyway and pass to
 * clmoe_embedding_report, which returns clmoe_embedding's error for it (or CLMOE_OK). */
CLMOE_API clmoe_status clmoe_embedding_nowait(clmoe_ctx *ctx, const clmoe_tensor *table,
                                              const clmoe_tensor *ids, clmoe_tensor *out,
                                              clmoe_tensor *bad);
CLMOE_API clmoe_status clmoe_embedding_report(clmoe_ctx *ctx, const clmoe_tensor *table,
                                              const clmoe_tensor *ids, int32_t bad);

/* ---- cross-entropy over a vocabulary ----
 * logits [N, V], targets i32 [N]; a negative target marks an ignored row (loss 0).
 * loss [N] = logsumexp(logits) - logits[target]; lse [N] is saved for the backward.
 * Backward: dlogits = scale * (softmax(logits) - onehot(target)), zero on ignored rows;
 * use scale = 1 / (number of counted rows) for a mean loss; lse is required and dlogits
 * may alias logits. A target >= V is an error in both directions
 * (CLMOE_ERR_INVALID_ARGUMENT naming the row); its row is set to NaN, never read out of
 * bounds. Checking it costs one wait for the queue per call. */
CLMOE_API clmoe_status clmoe_cross_entropy(clmoe_ctx *ctx, const clmoe_tensor *logits,
                                           const clmoe_tensor *targets, clmoe_tensor *loss,
                                           clmoe_tensor *lse);
CLMOE_API clmoe_status clmoe_cross_entropy_backward(clmoe_ctx *ctx, const clmoe_tensor *logits,
                                                    const clmoe_tensor *targets,
                                                    const clmoe_tensor *lse, float scale,
                                                    clmoe_tensor *dlogits);
/* The same without their wait: the first bad row (-1: none) goes to bad (i32 [1]) on the
 * device; clmoe_cross_entropy_report turns a read value into the call's error (backward 0:
 * the forward's, 1: the backward's; vocab: the logits' width) or CLMOE_OK. */
CLMOE_API clmoe_status clmoe_cross_entropy_nowait(clmoe_ctx *ctx, const clmoe_tensor *logits,
                                                  const clmoe_tensor *targets, clmoe_tensor *loss,
                                                  clmoe_tensor *lse, clmoe_tensor *bad);
CLMOE_API clmoe_status clmoe_cross_entropy_backward_nowait(clmoe_ctx *ctx,
                                                           const clmoe_tensor *logits,
                                                           const clmoe_tensor *targets,
                                                           const clmoe_tensor *lse, float scale,
                                                           clmoe_tensor *dlogits, clmoe_tensor *bad);
CLMOE_API clmoe_status clmoe_cross_entropy_report(clmoe_ctx *ctx, int64_t vocab,
                                                  const clmoe_tensor *targets, int backward,
                                                  int32_t bad);

/* ---- AdamW (decoupled weight decay) ----
 * For step t >= 1:  g = grad_scale * grad;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   param -= lr * (weight_decay * param + (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)).
 * grad_scale carries global gradient-norm clipping (1 when not clipping). */
typedef struct clmoe_adamw {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  int64_t step; /* t, starting at 1 */
} clmoe_adamw;
CLMOE_API clmoe_status clmoe_adamw_step(clmoe_ctx *ctx, clmoe_tensor *param,
                                        const clmoe_tensor *grad, clmoe_tensor *m, clmoe_tensor *v,
                                        const clmoe_adamw *hp);
/* The same step, and copy (bf16, numel of param) = the new param rounded to nearest even, in
 * the same kernel: the bf16 weights of a bf16 training step (clmoe_precision). param, m and
 * v are updated by the same code as in clmoe_adamw_step. */
CLMOE_API clmoe_status clmoe_adamw_step_bf16(clmoe_ctx *ctx, clmoe_tensor *param,
                                             const clmoe_tensor *grad, clmoe_tensor *m,
                                             clmoe_tensor *v, const clmoe_adamw *hp,
                                             clmoe_tensor *copy);
/* The same steps (copy may be NULL) with the gradient's scale read on the device from scale
 * (fp32 [1]) instead of hp->grad_scale: no wait for the host between the gradient norm and
 * the step. A NaN scale leaves param, m, v and copy unchanged (the step is not taken). */
CLMOE_API clmoe_status clmoe_adamw_step_scaled(clmoe_ctx *ctx, clmoe_tensor *param,
                                               const clmoe_tensor *grad, clmoe_tensor *m,
                                               clmoe_tensor *v, const clmoe_adamw *hp,
                                               const clmoe_tensor *scale, clmoe_tensor *copy);
/* Global gradient-norm clipping on the device: sums (fp32 [n]) the gradients' sums of
 * squares; norm (i32 [2]) receives the bits of the double sqrt(sum of sums, in index order,
 * in double), low word first; scale (fp32 [1]) = clip / norm rounded to fp32 when clip > 0
 * and norm > clip, else 1; NaN when the norm is not finite. Needs fp64 on the device
 * (CLMOE_ERR_UNSUPPORTED without). */
CLMOE_API clmoe_status clmoe_grad_clip_scale(clmoe_ctx *ctx, const clmoe_tensor *sums, double clip,
                                             clmoe_tensor *norm, clmoe_tensor *scale);

#ifdef __cplusplus
}
#endif
#endif
