/* Softmax over the last dimension and cross-entropy over a vocabulary, forward and
 * backward (kernels in kernels_cl/ops/softmax.cl).
 *
 * Row kernels run one work-group per row with a fixed lane order for the row reductions
 * (see softmax.cl), so the work-group size chosen here changes speed, never the bits.
 *
 * Out-of-range targets (>= V) are reported, not read: the kernels record the lowest such
 * row in a one-word device flag and write NaN to that row's loss (or gradient row); the
 * host reads the flag back after the kernel and returns CLMOE_ERR_INVALID_ARGUMENT naming
 * the row and target. The read-back waits for the queue, once per call (forward and
 * backward); cross-entropy runs once per training step, where that wait is small next to
 * the vocabulary GEMMs. */
#include "clmoe/ops.h"
#include "runtime/internal.h"

#define ROW_LANES 256  /* must match kernels_cl/ops/softmax.cl */
/* Columns per work-group of the cross-entropy backward: enough work per work-group to
 * amortise its set-up (1024 ran 10% slower on an H200, 512 25% slower; 4096-16384 within
 * 2% of each other). */
#define XENT_TILE 4096
#define NO_BAD_ROW 0xffffffffu



static clmoe_status want_count(const clmoe_tensor *t, clmoe_dtype dtype, int64_t count,
                               const char *op, const char *name, const char *what)
{
  char desc[96];
  CLMOE_TRY(clmoe__want(t, dtype, op, name));
  if (clmoe_tensor_numel(t) != count)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s is %s, expected %lld elements (%s)", op, name,
                        clmoe_tensor_describe(t, desc, sizeof desc), (long long)count, what);
  return CLMOE_OK;
}

/* ---- softmax ---- */

clmoe_status clmoe_softmax(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *y)
{
  static const char op[] = "clmoe_softmax";
  CLMOE_TRY(clmoe__want(x, CLMOE_F32, op, "input x"));
  CLMOE_TRY(clmoe__want(y, CLMOE_F32, op, "output y"));
  CLMOE_TRY(clmoe__want_numel(x, y, op, "input x", "output y"));
  int64_t rows, n;
  clmoe__rows(x, &rows, &n);
  if (rows == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "softmax", NULL, "softmax_fwd", &k));
  cl_ulong xo = (cl_ulong)x->offset, yo = (cl_ulong)y->offset, un = (cl_ulong)n;
  CLMOE_TRY(clmoe__args(k, 5, KA(x->buf), KA(xo), KA(y->buf), KA(yo), KA(un)));
  size_t local;
  CLMOE_TRY(clmoe__row_local(ctx, k, n, &local));
  return clmoe__launch_groups(ctx, k, rows, local);
}

clmoe_status clmoe_softmax_backward(clmoe_ctx *ctx, const clmoe_tensor *y, const clmoe_tensor *dy,
                                    clmoe_tensor *dx)
{
  static const char op[] = "clmoe_softmax_backward";
  CLMOE_TRY(clmoe__want(y, CLMOE_F32, op, "forward output y"));
  CLMOE_TRY(clmoe__want(dy, CLMOE_F32, op, "gradient dy"));
  CLMOE_TRY(clmoe__want(dx, CLMOE_F32, op, "gradient dx"));
  CLMOE_TRY(clmoe__want_numel(y, dy, op, "forward output y", "gradient dy"));
  CLMOE_TRY(clmoe__want_numel(y, dx, op, "forward output y", "gradient dx"));
  int64_t rows, n;
  clmoe__rows(y, &rows, &n);
  if (rows == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "softmax", NULL, "softmax_bwd", &k));
  cl_ulong yo = (cl_ulong)y->offset, dyo = (cl_ulong)dy->offset, dxo = (cl_ulong)dx->offset;
  cl_ulong un = (cl_ulong)n;
  CLMOE_TRY(clmoe__args(k, 7, KA(y->buf), KA(yo), KA(dy->buf), KA(dyo), KA(dx->buf), KA(dxo),
                        KA(un)));
  size_t local;
  CLMOE_TRY(clmoe__row_local(ctx, k, n, &local));
  return clmoe__launch_groups(ctx, k, rows, local);
}

/* ---- cross-entropy ---- */

/* Common checks: logits [N, V] fp32, targets i32 [N] (any shape), V > 0. */
static clmoe_status xent_shapes(const char *op, const clmoe_tensor *logits,
                                const clmoe_tensor *targets, int64_t *rows, int64_t *vocab)
{
  char desc[96];
  CLMOE_TRY(clmoe__want(logits, CLMOE_F32, op, "logits"));
  clmoe__rows(logits, rows, vocab);
  if (*vocab == 0 && targets && clmoe_tensor_numel(targets) != 0)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: logits %s have an empty vocabulary", op,
                        clmoe_tensor_describe(logits, desc, sizeof desc));
  return want_count(targets, CLMOE_I32, *rows, op, "targets", "one per row of logits");
}

/* A one-word device flag, set to NO_BAD_ROW. */
static clmoe_status flag_create(clmoe_ctx *ctx, cl_mem *flag)
{
  const cl_uint none = NO_BAD_ROW;
  CLMOE_TRY(clmoe__scratch(ctx, sizeof none, flag));
  cl_int err = clEnqueueFillBuffer(ctx->queue, *flag, &none, sizeof none, 0, sizeof none, 0, NULL,
                                   NULL);
  if (err != CL_SUCCESS) {
    clmoe__scratch_release(ctx, *flag, sizeof none);
    *flag = NULL;
    return clmoe__cl_error(err, "clEnqueueFillBuffer", __FILE__, __LINE__);
  }
  return CLMOE_OK;
}

/* The error for a recorded bad row (one blocking read of its target: the failure path). */
static clmoe_status bad_row_error(clmoe_ctx *ctx, cl_uint row, const char *op, const clmoe_tensor *targets,
                                  int64_t vocab)
{
  cl_int t = -1;
  CLMOE_CL(clEnqueueReadBuffer(ctx->queue, targets->buf, CL_TRUE,
                               ((size_t)targets->offset + row) * sizeof t, sizeof t, &t, 0, NULL,
                               NULL));
  clmoe__count_wait(ctx, CLMOE_WAIT_READ);
  return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT,
                      "%s: target %d of row %u is outside the vocabulary [0, %lld) (negative "
                      "targets mark ignored rows)",
                      op, (int)t, (unsigned)row, (long long)vocab);
}

/* Without out: reads the flag back (waiting for the kernel) and turns a recorded row into an
 * error. With out (i32 [1]): copies the flag there on the device (NO_BAD_ROW reads as -1). */
static clmoe_status flag_check(clmoe_ctx *ctx, cl_mem flag, const char *op,
                               const clmoe_tensor *targets, int64_t vocab, clmoe_tensor *out)
{
  cl_uint row = NO_BAD_ROW;
  if (out) {
    CLMOE_CL(clEnqueueCopyBuffer(ctx->queue, flag, out->buf, 0, (size_t)out->offset * 4, sizeof row, 0, NULL,
                                 NULL));
    return CLMOE_OK;
  }
  CLMOE_CL(clEnqueueReadBuffer(ctx->queue, flag, CL_TRUE, 0, sizeof row, &row, 0, NULL, NULL));
  clmoe__count_wait(ctx, CLMOE_WAIT_READ);
  if (row == NO_BAD_ROW) return CLMOE_OK;
  return bad_row_error(ctx, row, op, targets, vocab);
}

/* The caller's flag tensor: i32, one element. */
static clmoe_status want_flag(const clmoe_tensor *bad, const char *op)
{
  if (!bad) return CLMOE_OK;
  CLMOE_TRY(clmoe__want(bad, CLMOE_I32, op, "bad"));
  if (clmoe_tensor_numel(bad) != 1) return clmoe__error(CLMOE_ERR_SHAPE, "%s: bad must hold one element", op);
  return CLMOE_OK;
}

static clmoe_status xent_forward(clmoe_ctx *ctx, const clmoe_tensor *logits, const clmoe_tensor *targets,
                                 clmoe_tensor *loss, clmoe_tensor *lse, clmoe_tensor *bad)
{
  static const char op[] = "clmoe_cross_entropy";
  int64_t rows, vocab;
  CLMOE_TRY(xent_shapes(op, logits, targets, &rows, &vocab));
  CLMOE_TRY(want_count(loss, CLMOE_F32, rows, op, "loss", "one per row of logits"));
  if (lse) CLMOE_TRY(want_count(lse, CLMOE_F32, rows, op, "lse", "one per row of logits"));
  CLMOE_TRY(want_flag(bad, op));
  if (rows == 0) return bad ? clmoe_tensor_fill(bad, -1.0) : CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "softmax", NULL, "xent_fwd", &k));
  size_t local;
  CLMOE_TRY(clmoe__row_local(ctx, k, vocab, &local));
  cl_mem flag = NULL;
  CLMOE_TRY(flag_create(ctx, &flag));
  clmoe_status st;
  /* Without lse, the kernel is given loss's buffer and told not to write it. */
  cl_int has_lse = lse != NULL;
  cl_mem lbuf = lse ? lse->buf : loss->buf;
  cl_ulong lo = (cl_ulong)logits->offset, to = (cl_ulong)targets->offset;
  cl_ulong losso = (cl_ulong)loss->offset, lseo = lse ? (cl_ulong)lse->offset : 0;
  cl_ulong un = (cl_ulong)vocab;
  CLMOE_TRY_GOTO(st, clmoe__args(k, 11, KA(logits->buf), KA(lo), KA(targets->buf), KA(to),
                                 KA(loss->buf), KA(losso), KA(lbuf), KA(lseo), KA(has_lse), KA(un),
                                 KA(flag)), done);
  CLMOE_TRY_GOTO(st, clmoe__launch_groups(ctx, k, rows, local), done);
  st = flag_check(ctx, flag, op, targets, vocab, bad);
done:
  clmoe__scratch_release(ctx, flag, sizeof(cl_uint));
  return st;
}

static clmoe_status xent_backward(clmoe_ctx *ctx, const clmoe_tensor *logits, const clmoe_tensor *targets,
                                  const clmoe_tensor *lse, float scale, clmoe_tensor *dlogits, clmoe_tensor *bad)
{
  static const char op[] = "clmoe_cross_entropy_backward";
  int64_t rows, vocab;
  CLMOE_TRY(xent_shapes(op, logits, targets, &rows, &vocab));
  if (!lse)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT,
                        "%s: lse is NULL; pass the lse saved by clmoe_cross_entropy", op);
  CLMOE_TRY(want_count(lse, CLMOE_F32, rows, op, "lse", "one per row of logits"));
  CLMOE_TRY(clmoe__want(dlogits, CLMOE_F32, op, "dlogits"));
  CLMOE_TRY(clmoe__want_numel(logits, dlogits, op, "logits", "dlogits"));
  CLMOE_TRY(want_flag(bad, op));
  if (rows == 0) return bad ? clmoe_tensor_fill(bad, -1.0) : CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "softmax", NULL, "xent_bwd", &k));
  size_t local;
  CLMOE_TRY(clmoe__row_local(ctx, k, vocab < XENT_TILE ? vocab : XENT_TILE, &local));
  cl_mem flag = NULL;
  CLMOE_TRY(flag_create(ctx, &flag));
  clmoe_status st;
  cl_ulong lo = (cl_ulong)logits->offset, to = (cl_ulong)targets->offset;
  cl_ulong lseo = (cl_ulong)lse->offset, dlo = (cl_ulong)dlogits->offset, un = (cl_ulong)vocab;
  cl_ulong tile_cols = XENT_TILE;
  cl_ulong tiles = (un + tile_cols - 1) / tile_cols;
  CLMOE_TRY_GOTO(st, clmoe__args(k, 13, KA(logits->buf), KA(lo), KA(targets->buf), KA(to),
                                 KA(lse->buf), KA(lseo), KA(scale), KA(dlogits->buf), KA(dlo),
                                 KA(un), KA(tile_cols), KA(tiles), KA(flag)), done);
  CLMOE_TRY_GOTO(st, clmoe__launch_groups(ctx, k, rows * (int64_t)tiles, local), done);
  st = flag_check(ctx, flag, op, targets, vocab, bad);
done:
  clmoe__scratch_release(ctx, flag, sizeof(cl_uint));
  return st;
}

clmoe_status clmoe_cross_entropy(clmoe_ctx *ctx, const clmoe_tensor *logits, const clmoe_tensor *targets,
                                 clmoe_tensor *loss, clmoe_tensor *lse)
{
  return xent_forward(ctx, logits, targets, loss, lse, NULL);
}

clmoe_status clmoe_cross_entropy_backward(clmoe_ctx *ctx, const clmoe_tensor *logits, const clmoe_tensor *targets,
                                          const clmoe_tensor *lse, float scale, clmoe_tensor *dlogits)
{
  return xent_backward(ctx, logits, targets, lse, scale, dlogits, NULL);
}

clmoe_status clmoe_cross_entropy_nowait(clmoe_ctx *ctx, const clmoe_tensor *logits, const clmoe_tensor *targets,
                                        clmoe_tensor *loss, clmoe_tensor *lse, clmoe_tensor *bad)
{
  if (!bad) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_cross_entropy_nowait: bad is NULL");
  return xent_forward(ctx, logits, targets, loss, lse, bad);
}

clmoe_status clmoe_cross_entropy_backward_nowait(clmoe_ctx *ctx, const clmoe_tensor *logits,
                                                 const clmoe_tensor *targets, const clmoe_tensor *lse, float scale,
                                                 clmoe_tensor *dlogits, clmoe_tensor *bad)
{
  if (!bad) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_cross_entropy_backward_nowait: bad is NULL");
  return xent_backward(ctx, logits, targets, lse, scale, dlogits, bad);
}

clmoe_status clmoe_cross_entropy_report(clmoe_ctx *ctx, int64_t vocab, const clmoe_tensor *targets,
                                        int backward, int32_t bad)
{
  const char *op = backward ? "clmoe_cross_entropy_backward" : "clmoe_cross_entropy";
  if (bad == -1) return CLMOE_OK;
  const int64_t rows = clmoe_tensor_numel(targets);
  if (bad < 0 || bad >= rows)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: bad-target flag %d is not a row of targets [%lld]", op,
                        (int)bad, (long long)rows);
  return bad_row_error(ctx, (cl_uint)bad, op, targets, vocab);
}
