/* Reductions: sum, sum of squares, max |x| of a whole tensor; column sums of a matrix. */
#include "clmoe/ops.h"
#include "runtime/internal.h"

enum { RED_SUM = 0, RED_SUMSQ = 1, RED_MAXABS = 2 };
#define RED_LANES 256 /* must match kernels_cl/ops/reduce.cl */
#define RED_BLOCK 2048
#define ROWS_PER_CHUNK 64

static clmoe_status reduce_all(clmoe_ctx *ctx, const char *opname, int op, const clmoe_tensor *x,
                               clmoe_tensor *out)
{
  CLMOE_TRY(clmoe__want(x, CLMOE_F32, opname, "input"));
  CLMOE_TRY(clmoe__want(out, CLMOE_F32, opname, "output"));
  if (clmoe_tensor_numel(out) != 1)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: the output must have one element", opname);
  cl_ulong n = (cl_ulong)clmoe_tensor_numel(x);
  if (n == 0) return clmoe_tensor_fill(out, 0.0);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "reduce", NULL, "reduce_blocks", &k));
  size_t local = ctx->caps.max_work_group_size >= RED_LANES ? RED_LANES : ctx->caps.wg_size;
  /* Scratch for the first pass's partials; later passes reuse its two halves. */
  cl_ulong groups = (n + RED_BLOCK - 1) / RED_BLOCK;
  cl_mem scratch = NULL;
  size_t scratch_bytes = (size_t)(groups + (groups + RED_BLOCK - 1) / RED_BLOCK + 1) * sizeof(float);
  CLMOE_TRY(clmoe__scratch(ctx, scratch_bytes, &scratch));
  clmoe_status st = CLMOE_OK;
  cl_mem src = x->buf;
  cl_ulong src_off = (cl_ulong)x->offset, count = n, dst_off = 0, other_off = groups;
  cl_int mapped = 0, iop = op;
  for (;;) {
    cl_ulong g = (count + RED_BLOCK - 1) / RED_BLOCK;
    int last = g == 1;
    cl_mem dst = last ? out->buf : scratch;
    cl_ulong doff = last ? (cl_ulong)out->offset : dst_off;
    /* After the first pass, partials are already mapped: sum them (max for max-abs). */
    cl_int pass_op = mapped && op == RED_SUMSQ ? RED_SUM : iop;
    CLMOE_TRY_GOTO(st, clmoe__args(k, 7, KA(pass_op), KA(mapped), KA(src), KA(src_off), KA(count),
                                   KA(dst), KA(doff)), done);
    size_t global = (size_t)g * local;
    CLMOE_TRY_GOTO(st, clmoe__launch(ctx, k, 1, &global, &local), done);
    if (last) break;
    src = scratch, src_off = dst_off, count = g, mapped = 1;
    cl_ulong t = dst_off;
    dst_off = other_off, other_off = t;
  }
done:
  /* The queue is in order: the scratch buffer can go back to the pool at once. */
  clmoe__scratch_release(ctx, scratch, scratch_bytes);
  return st;
}

clmoe_status clmoe_sum(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *out)
{
  return reduce_all(ctx, "clmoe_sum", RED_SUM, x, out);
}

clmoe_status clmoe_sum_squares(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *out)
{
  return reduce_all(ctx, "clmoe_sum_squares", RED_SUMSQ, x, out);
}

clmoe_status clmoe_max_abs(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *out)
{
  return reduce_all(ctx, "clmoe_max_abs", RED_MAXABS, x, out);
}

clmoe_status clmoe_sum_rows(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *out)
{
  CLMOE_TRY(clmoe__want(x, CLMOE_F32, "clmoe_sum_rows", "input"));
  CLMOE_TRY(clmoe__want(out, CLMOE_F32, "clmoe_sum_rows", "output"));
  int64_t rows, n;
  clmoe__rows(x, &rows, &n);
  if (clmoe_tensor_numel(out) != n)
    return clmoe__error(CLMOE_ERR_SHAPE, "clmoe_sum_rows: output has %lld elements, input rows %lld",
                        (long long)clmoe_tensor_numel(out), (long long)n);
  if (n == 0) return CLMOE_OK;
  if (rows == 0) return clmoe_tensor_fill(out, 0.0);
  cl_ulong urows = (cl_ulong)rows, un = (cl_ulong)n, chunks = (urows + ROWS_PER_CHUNK - 1) / ROWS_PER_CHUNK;
  cl_mem part = NULL;
  size_t part_bytes = (size_t)(chunks * un) * sizeof(float);
  CLMOE_TRY(clmoe__scratch(ctx, part_bytes, &part));
  clmoe_status st;
  cl_kernel k1, k2;
  cl_ulong xo = (cl_ulong)x->offset, oo = (cl_ulong)out->offset;
  CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "reduce", NULL, "sum_rows_chunks", &k1), done);
  CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "reduce", NULL, "sum_rows_final", &k2), done);
  CLMOE_TRY_GOTO(st, clmoe__args(k1, 5, KA(x->buf), KA(xo), KA(urows), KA(un), KA(part)), done);
  size_t local[2] = {ctx->caps.wg_size, 1};
  size_t global[2] = {(size_t)n, (size_t)chunks};
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, k1, 2, global, local), done);
  CLMOE_TRY_GOTO(st, clmoe__args(k2, 5, KA(part), KA(chunks), KA(un), KA(out->buf), KA(oo)), done);
  st = clmoe__launch1d(ctx, k2, (size_t)n);
done:
  clmoe__scratch_release(ctx, part, part_bytes);
  return st;
}
