/* Pointwise operators: add, mul (fp32 or bf16 output), scale, axpy, SiLU, sigmoid and their
 * backwards. The op codes (EW_*) are the kernels' own, from kernels_cl/ops/elementwise.cl. */
#include "clmoe/ops.h"
#include "ops/ops_internal.h"
#include "runtime/internal.h"

#include "kernels_cl/ops/elementwise.cl"

static clmoe_status binary(clmoe_ctx *ctx, const char *opname, int op, float alpha,
                           const clmoe_tensor *a, const clmoe_tensor *b, clmoe_tensor *out)
{
  CLMOE_TRY(clmoe__want(a, CLMOE_F32, opname, "first input"));
  CLMOE_TRY(clmoe__want(b, CLMOE_F32, opname, "second input"));
  CLMOE_TRY(clmoe__want(out, CLMOE_F32, opname, "output"));
  CLMOE_TRY(clmoe__want_numel(a, b, opname, "first input", "second input"));
  CLMOE_TRY(clmoe__want_numel(a, out, opname, "input", "output"));
  cl_ulong n = (cl_ulong)clmoe_tensor_numel(out);
  if (n == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "elementwise", NULL, "ew_binary", &k));
  cl_int iop = op;
  cl_ulong ao = (cl_ulong)a->offset, bo = (cl_ulong)b->offset, oo = (cl_ulong)out->offset;
  CLMOE_TRY(clmoe__args(k, 9, KA(iop), KA(alpha), KA(a->buf), KA(ao), KA(b->buf), KA(bo),
                        KA(out->buf), KA(oo), KA(n)));
  return clmoe__launch1d(ctx, k, (size_t)n);
}

static clmoe_status unary(clmoe_ctx *ctx, const char *opname, int op, float alpha,
                          const clmoe_tensor *x, clmoe_tensor *out)
{
  CLMOE_TRY(clmoe__want(x, CLMOE_F32, opname, "input"));
  CLMOE_TRY(clmoe__want(out, CLMOE_F32, opname, "output"));
  CLMOE_TRY(clmoe__want_numel(x, out, opname, "input", "output"));
  cl_ulong n = (cl_ulong)clmoe_tensor_numel(out);
  if (n == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "elementwise", NULL, "ew_unary", &k));
  cl_int iop = op;
  cl_ulong xo = (cl_ulong)x->offset, oo = (cl_ulong)out->offset;
  CLMOE_TRY(clmoe__args(k, 7, KA(iop), KA(alpha), KA(x->buf), KA(xo), KA(out->buf), KA(oo), KA(n)));
  return clmoe__launch1d(ctx, k, (size_t)n);
}

clmoe_status clmoe_add(clmoe_ctx *ctx, const clmoe_tensor *a, const clmoe_tensor *b, clmoe_tensor *out)
{
  return binary(ctx, "clmoe_add", EW_ADD, 1.0f, a, b, out);
}

/* out = a b into bf16 storage: the fp32 product rounded once (ew_mul_bf16). */
static clmoe_status mul_bf16(clmoe_ctx *ctx, const clmoe_tensor *a, const clmoe_tensor *b, clmoe_tensor *out)
{
  static const char opname[] = "clmoe_mul";
  CLMOE_TRY(clmoe__want(a, CLMOE_F32, opname, "first input"));
  CLMOE_TRY(clmoe__want(b, CLMOE_F32, opname, "second input"));
  CLMOE_TRY(clmoe__want(out, CLMOE_BF16, opname, "output"));
  CLMOE_TRY(clmoe__want_numel(a, b, opname, "first input", "second input"));
  CLMOE_TRY(clmoe__want_numel(a, out, opname, "input", "output"));
  if (out->buf == a->buf || out->buf == b->buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: a bf16 output must not share an input's buffer", opname);
  cl_ulong n = (cl_ulong)clmoe_tensor_numel(out);
  if (n == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "elementwise", NULL, "ew_mul_bf16", &k));
  cl_ulong ao = (cl_ulong)a->offset, bo = (cl_ulong)b->offset, oo = (cl_ulong)out->offset;
  CLMOE_TRY(clmoe__args(k, 7, KA(a->buf), KA(ao), KA(b->buf), KA(bo), KA(out->buf), KA(oo), KA(n)));
  return clmoe__launch1d(ctx, k, (size_t)n);
}

clmoe_status clmoe_mul(clmoe_ctx *ctx, const clmoe_tensor *a, const clmoe_tensor *b, clmoe_tensor *out)
{
  if (out && out->dtype == CLMOE_BF16) return mul_bf16(ctx, a, b, out);
  return binary(ctx, "clmoe_mul", EW_MUL, 1.0f, a, b, out);
}

clmoe_status clmoe_axpy(clmoe_ctx *ctx, float alpha, const clmoe_tensor *x, clmoe_tensor *y)
{
  return binary(ctx, "clmoe_axpy", EW_ADD, alpha, y, x, y);
}

clmoe_status clmoe_scale(clmoe_ctx *ctx, float alpha, const clmoe_tensor *x, clmoe_tensor *out)
{
  return unary(ctx, "clmoe_scale", EW_SCALE, alpha, x, out);
}

clmoe_status clmoe_mul_backward(clmoe_ctx *ctx, const clmoe_tensor *dout, const clmoe_tensor *a,
                                const clmoe_tensor *b, clmoe_tensor *da, clmoe_tensor *db)
{
  if (da) CLMOE_TRY(binary(ctx, "clmoe_mul_backward", EW_MUL, 1.0f, dout, b, da));
  if (db) CLMOE_TRY(binary(ctx, "clmoe_mul_backward", EW_MUL, 1.0f, dout, a, db));
  return CLMOE_OK;
}

clmoe_status clmoe_silu(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *y)
{
  return unary(ctx, "clmoe_silu", EW_SILU, 0.0f, x, y);
}

clmoe_status clmoe_silu_backward(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *dy,
                                 clmoe_tensor *dx)
{
  return binary(ctx, "clmoe_silu_backward", EW_SILU_BWD, 0.0f, x, dy, dx);
}

clmoe_status clmoe_sigmoid(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *y)
{
  return unary(ctx, "clmoe_sigmoid", EW_SIGMOID, 0.0f, x, y);
}

clmoe_status clmoe_sigmoid_backward(clmoe_ctx *ctx, const clmoe_tensor *y, const clmoe_tensor *dy,
                                    clmoe_tensor *dx)
{
  return binary(ctx, "clmoe_sigmoid_backward", EW_SIGMOID_BWD, 0.0f, y, dy, dx);
}

clmoe_status clmoe__ops_add_rows(clmoe_ctx *ctx, const char *op, const clmoe_tensor *bias,
                                 clmoe_tensor *y)
{
  CLMOE_TRY(clmoe__want(bias, CLMOE_F32, op, "bias"));
  CLMOE_TRY(clmoe__want(y, CLMOE_F32, op, "output"));
  const cl_ulong n = (cl_ulong)clmoe_tensor_numel(bias), total = (cl_ulong)clmoe_tensor_numel(y);
  if (y->ndim < 1 || (cl_ulong)y->shape[y->ndim - 1] != n) {
    char yd[96], bd[96];
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: bias %s does not match the rows of output %s", op,
                        clmoe_tensor_describe(bias, bd, sizeof bd),
                        clmoe_tensor_describe(y, yd, sizeof yd));
  }
  if (total == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "elementwise", NULL, "ew_add_rows", &k));
  cl_ulong yo = (cl_ulong)y->offset, bo = (cl_ulong)bias->offset;
  CLMOE_TRY(clmoe__args(k, 6, KA(y->buf), KA(yo), KA(bias->buf), KA(bo), KA(n), KA(total)));
  return clmoe__launch1d(ctx, k, (size_t)total);
}
