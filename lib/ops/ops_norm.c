/* RMSNorm over the last dimension, forward and backward (kernels in kernels_cl/ops/norm.cl).
 *
 * Both directions run one work-group per row; the row sums use a fixed lane order (see
 * norm.cl), so the work-group size chosen here changes speed, never the bits. dgain, a sum
 * over rows, is computed in chunks of DGAIN_ROWS rows and then over chunks in order. */
#include "clmoe/ops.h"
#include "runtime/internal.h"

#include <math.h>

#define ROW_LANES 256 /* must match kernels_cl/ops/norm.cl */
#define DGAIN_ROWS 64 /* must match kernels_cl/ops/norm.cl */



/* t must be a contiguous fp32 tensor of n elements (`what` says why n). */
static clmoe_status want_vec(const clmoe_tensor *t, int64_t n, const char *op, const char *name,
                             const char *what)
{
  char desc[96];
  CLMOE_TRY(clmoe__want(t, CLMOE_F32, op, name));
  if (clmoe_tensor_numel(t) != n)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s is %s, expected %lld elements (%s)", op, name,
                        clmoe_tensor_describe(t, desc, sizeof desc), (long long)n, what);
  return CLMOE_OK;
}

clmoe_status clmoe_rmsnorm(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *gain,
                           float eps, clmoe_tensor *y, clmoe_tensor *rstd)
{
  static const char op[] = "clmoe_rmsnorm";
  CLMOE_TRY(clmoe__want(x, CLMOE_F32, op, "input x"));
  const int y16 = y && y->dtype == CLMOE_BF16; /* bf16 storage: rounded once, here */
  if (!y16) CLMOE_TRY(clmoe__want(y, CLMOE_F32, op, "output y"));
  else if (!clmoe_tensor_is_contiguous(y))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: output y (bf16) must be contiguous", op);
  CLMOE_TRY(clmoe__want_numel(x, y, op, "input x", "output y"));
  if (y16 && y->buf == x->buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: a bf16 output y must not share x's buffer", op);
  int64_t rows, n;
  clmoe__rows(x, &rows, &n);
  if (gain) CLMOE_TRY(want_vec(gain, n, op, "gain", "the last dimension of x"));
  if (rstd) CLMOE_TRY(want_vec(rstd, rows, op, "rstd", "one per row of x"));
  if (!(eps >= 0.0f) || isinf(eps)) /* also rejects NaN */
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: eps is %g; it must be finite and >= 0",
                        op, (double)eps);
  if (rows == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "norm", NULL, y16 ? "rmsnorm_fwd_bf16" : "rmsnorm_fwd", &k));
  /* Unused buffer arguments get x's buffer; the kernel's flags keep it from touching them. */
  cl_int has_gain = gain != NULL, has_rstd = rstd != NULL;
  cl_mem gbuf = gain ? gain->buf : x->buf, rbuf = rstd ? rstd->buf : x->buf;
  cl_ulong xo = (cl_ulong)x->offset, go = gain ? (cl_ulong)gain->offset : 0, yo = (cl_ulong)y->offset;
  cl_ulong ro = rstd ? (cl_ulong)rstd->offset : 0, un = (cl_ulong)n;
  CLMOE_TRY(clmoe__args(k, 12, KA(x->buf), KA(xo), KA(gbuf), KA(go), KA(has_gain), KA(y->buf),
                        KA(yo), KA(rbuf), KA(ro), KA(has_rstd), KA(un), KA(eps)));
  size_t local;
  CLMOE_TRY(clmoe__row_local(ctx, k, n, &local));
  return clmoe__launch_groups(ctx, k, rows, local);
}

/* dgain [n] = sum over rows of dy x rstd, deterministic: partials over DGAIN_ROWS rows,
 * then a fixed-order sum of the partials (skipped when there is one chunk). */
static clmoe_status rmsnorm_dgain(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *rstd,
                                  const clmoe_tensor *dy, int64_t rows, int64_t n,
                                  clmoe_tensor *dgain)
{
  cl_kernel k1, k2;
  CLMOE_TRY(clmoe__kernel(ctx, "norm", NULL, "rmsnorm_dgain_part", &k1));
  CLMOE_TRY(clmoe__kernel(ctx, "norm", NULL, "rmsnorm_dgain_final", &k2));
  cl_ulong urows = (cl_ulong)rows, un = (cl_ulong)n;
  cl_ulong chunks = (urows + DGAIN_ROWS - 1) / DGAIN_ROWS;
  cl_ulong xo = (cl_ulong)x->offset, ro = (cl_ulong)rstd->offset, dyo = (cl_ulong)dy->offset;
  cl_ulong go = (cl_ulong)dgain->offset;
  size_t local[2] = {ctx->caps.wg_size, 1}, global[2] = {(size_t)n, (size_t)chunks};
  if (chunks == 1) {
    CLMOE_TRY(clmoe__args(k1, 10, KA(x->buf), KA(xo), KA(rstd->buf), KA(ro), KA(dy->buf),
                          KA(dyo), KA(urows), KA(un), KA(dgain->buf), KA(go)));
    return clmoe__launch(ctx, k1, 2, global, local);
  }
  /* [chunks, n] fp32 partial column sums */
  size_t part_bytes = (size_t)(chunks * un) * sizeof(float);
  cl_mem part = NULL;
  CLMOE_TRY(clmoe__scratch(ctx, part_bytes, &part));
  clmoe_status st;
  cl_ulong zero = 0;
  CLMOE_TRY_GOTO(st, clmoe__args(k1, 10, KA(x->buf), KA(xo), KA(rstd->buf), KA(ro), KA(dy->buf),
                                 KA(dyo), KA(urows), KA(un), KA(part), KA(zero)), done);
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, k1, 2, global, local), done);
  CLMOE_TRY_GOTO(st, clmoe__args(k2, 5, KA(part), KA(chunks), KA(un), KA(dgain->buf), KA(go)), done);
  st = clmoe__launch1d(ctx, k2, (size_t)n);
done:
  /* The queue is in order: the scratch buffer can go back to the pool at once. */
  clmoe__scratch_release(ctx, part, part_bytes);
  return st;
}

clmoe_status clmoe_rmsnorm_backward(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *gain,
                                    const clmoe_tensor *rstd, const clmoe_tensor *dy,
                                    clmoe_tensor *dx, clmoe_tensor *dgain)
{
  static const char op[] = "clmoe_rmsnorm_backward";
  CLMOE_TRY(clmoe__want(x, CLMOE_F32, op, "input x"));
  CLMOE_TRY(clmoe__want(dy, CLMOE_F32, op, "gradient dy"));
  CLMOE_TRY(clmoe__want(dx, CLMOE_F32, op, "gradient dx"));
  CLMOE_TRY(clmoe__want_numel(x, dy, op, "input x", "gradient dy"));
  CLMOE_TRY(clmoe__want_numel(x, dx, op, "input x", "gradient dx"));
  int64_t rows, n;
  clmoe__rows(x, &rows, &n);
  if (!rstd)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT,
                        "%s: rstd is NULL; pass the rstd saved by clmoe_rmsnorm", op);
  CLMOE_TRY(want_vec(rstd, rows, op, "rstd", "one per row of x"));
  if (gain) CLMOE_TRY(want_vec(gain, n, op, "gain", "the last dimension of x"));
  /* Without a gain, dgain is the gradient for a gain of ones. */
  if (dgain) CLMOE_TRY(want_vec(dgain, n, op, "dgain", "the last dimension of x"));
  if (n == 0) return CLMOE_OK;
  if (rows == 0) return dgain ? clmoe_tensor_fill(dgain, 0.0) : CLMOE_OK;
  /* dgain first: it reads x and dy, which dx may overwrite. */
  if (dgain) CLMOE_TRY(rmsnorm_dgain(ctx, x, rstd, dy, rows, n, dgain));
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "norm", NULL, "rmsnorm_bwd", &k));
  cl_int has_gain = gain != NULL;
  cl_mem gbuf = gain ? gain->buf : x->buf;
  cl_ulong xo = (cl_ulong)x->offset, go = gain ? (cl_ulong)gain->offset : 0;
  cl_ulong ro = (cl_ulong)rstd->offset, dyo = (cl_ulong)dy->offset, dxo = (cl_ulong)dx->offset;
  cl_ulong un = (cl_ulong)n;
  CLMOE_TRY(clmoe__args(k, 12, KA(x->buf), KA(xo), KA(gbuf), KA(go), KA(has_gain), KA(rstd->buf),
                        KA(ro), KA(dy->buf), KA(dyo), KA(dx->buf), KA(dxo), KA(un)));
  size_t local;
  CLMOE_TRY(clmoe__row_local(ctx, k, n, &local));
  return clmoe__launch_groups(ctx, k, rows, local);
}
