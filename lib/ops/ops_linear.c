/* The linear layer in PyTorch's Linear layout (include/clmoe/ops.h): Y = X W^T (+ bias) and
 * its backward, as products through clmoe_gemm (clmoe_gemm_bf16 on the tile GEMM when W is a
 * bf16 training copy), the bias as a row broadcast
 * (kernels_cl/ops/elementwise.cl) and its gradient as column sums (clmoe_sum_rows). */
#include <stdio.h>

#include "clmoe/gemm.h"
#include "clmoe/ops.h"
#include "ops/ops_internal.h"
#include "runtime/internal.h"

/* t must be a matrix [d0, d1]; d0 or d1 < 0: any size. `dims` names the two sizes in the
 * message ("rows, in"). */
static clmoe_status want_matrix(const char *op, const char *name, const clmoe_tensor *t,
                                int64_t d0, int64_t d1, const char *dims)
{
  if (!t) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  if (t->ndim == 2 && (d0 < 0 || t->shape[0] == d0) && (d1 < 0 || t->shape[1] == d1))
    return CLMOE_OK;
  char desc[96], a[24] = "?", b[24] = "?";
  if (d0 >= 0) snprintf(a, sizeof a, "%lld", (long long)d0);
  if (d1 >= 0) snprintf(b, sizeof b, "%lld", (long long)d1);
  return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s is %s, expected [%s] = [%s, %s]", op, name,
                      clmoe_tensor_describe(t, desc, sizeof desc), dims, a, b);
}

typedef clmoe_status (*gemm_fn)(clmoe_ctx *, clmoe_trans, clmoe_trans, float, const clmoe_tensor *,
                                const clmoe_tensor *, float, clmoe_tensor *);

/* The products of a bf16 W (a bf16 training step's weight copy) run in bf16 on the tile GEMM;
 * every other W keeps clmoe_gemm, bit for bit as before. */
static gemm_fn product(const clmoe_tensor *W)
{
  return W->dtype == CLMOE_BF16 ? clmoe_gemm_bf16 : clmoe_gemm;
}

clmoe_status clmoe_linear(clmoe_ctx *ctx, const clmoe_tensor *X, const clmoe_tensor *W,
                          const clmoe_tensor *bias, clmoe_tensor *Y)
{
  static const char op[] = "clmoe_linear";
  CLMOE_TRY(want_matrix(op, "X", X, -1, -1, "rows, in"));
  const int64_t rows = X->shape[0], in = X->shape[1];
  CLMOE_TRY(want_matrix(op, "W", W, -1, in, "out, in"));
  const int64_t out = W->shape[0];
  CLMOE_TRY(want_matrix(op, "Y", Y, rows, out, "rows, out"));
  if (bias) CLMOE_TRY(clmoe__want_shape(bias, op, "bias", 0, 1, out, 0, 0, 0));
  CLMOE_TRY(product(W)(ctx, CLMOE_NOTRANS, CLMOE_TRANS, 1.0f, X, W, 0.0f, Y));
  return bias ? clmoe__ops_add_rows(ctx, op, bias, Y) : CLMOE_OK;
}

/* dbias = (or +=) the sum of dY's rows; added through a scratch tensor of column sums. */
static clmoe_status bias_backward(clmoe_ctx *ctx, const clmoe_tensor *dY, clmoe_tensor *dbias,
                                  int add)
{
  if (!add) return clmoe_sum_rows(ctx, dY, dbias);
  clmoe_tensor sums = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &sums, CLMOE_F32, 1, &dY->shape[1]), done);
  CLMOE_TRY_GOTO(st, clmoe_sum_rows(ctx, dY, &sums), done);
  st = clmoe_axpy(ctx, 1.0f, &sums, dbias);
done:
  clmoe_tensor_destroy(&sums);
  return st;
}

clmoe_status clmoe_linear_backward(clmoe_ctx *ctx, const clmoe_tensor *X, const clmoe_tensor *W,
                                   const clmoe_tensor *dY, clmoe_tensor *dX, clmoe_tensor *dW,
                                   clmoe_tensor *dbias, unsigned accumulate)
{
  static const char op[] = "clmoe_linear_backward";
  CLMOE_TRY(want_matrix(op, "X", X, -1, -1, "rows, in"));
  const int64_t rows = X->shape[0], in = X->shape[1];
  CLMOE_TRY(want_matrix(op, "W", W, -1, in, "out, in"));
  const int64_t out = W->shape[0];
  CLMOE_TRY(want_matrix(op, "dY", dY, rows, out, "rows, out"));
  if (dX) CLMOE_TRY(want_matrix(op, "dX", dX, rows, in, "rows, in"));
  if (dW) CLMOE_TRY(want_matrix(op, "dW", dW, out, in, "out, in"));
  if (dbias) {
    CLMOE_TRY(clmoe__want_shape(dbias, op, "dbias", 0, 1, out, 0, 0, 0));
    CLMOE_TRY(clmoe__want(dY, CLMOE_F32, op, "dY (with dbias)"));
  }
  if (accumulate & ~(unsigned)(CLMOE_LINEAR_ACC_DX | CLMOE_LINEAR_ACC_DW | CLMOE_LINEAR_ACC_DBIAS))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: accumulate %#x has unknown bits", op,
                        accumulate);
  const float bx = (accumulate & CLMOE_LINEAR_ACC_DX) ? 1.0f : 0.0f;
  const float bw = (accumulate & CLMOE_LINEAR_ACC_DW) ? 1.0f : 0.0f;
  if (W->dtype == CLMOE_BF16 && dX && dW && dY->dtype == CLMOE_F32 && clmoe_tensor_is_contiguous(dY)) {
    /* dY rounded to bf16 once for both products */
    clmoe_tensor dy16 = {0};
    clmoe_status st;
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dy16, CLMOE_BF16, 2, dY->shape), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_copy(&dy16, dY), done);
    CLMOE_TRY_GOTO(st, clmoe_gemm_bf16(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &dy16, W, bx, dX), done);
    st = clmoe_gemm_bf16(ctx, CLMOE_TRANS, CLMOE_NOTRANS, 1.0f, &dy16, X, bw, dW);
  done:
    clmoe_tensor_destroy(&dy16);
    CLMOE_TRY(st);
  } else {
    if (dX) CLMOE_TRY(product(W)(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, dY, W, bx, dX));
    if (dW) CLMOE_TRY(product(W)(ctx, CLMOE_TRANS, CLMOE_NOTRANS, 1.0f, dY, X, bw, dW));
  }
  return dbias ? bias_backward(ctx, dY, dbias, !!(accumulate & CLMOE_LINEAR_ACC_DBIAS))
               : CLMOE_OK;
}
