/* The dense gated FFN: y = W_dn glu(W_gate x, W_upp x) with the FFN's gated unit (SiTU-GLU or
 * SwiGLU), three products (clmoe_linear) and an elementwise kernel. The model's dense layers
 * and the MoE's shared experts use it. */
#include "moe_internal.h"

#include <string.h>
#include "clmoe/gemm.h"
#include "clmoe/ops.h"

/* The FFN's matrices: w_gate, w_upp [f, d], w_dn [d, f]; *f from w_gate. Weights may be
 * bf16 (a bf16 training step's copies: their products run in bf16), gradients are fp32. */
static clmoe_status want_ffn(const char *op, const clmoe_situ_ffn *ffn, int64_t d, int64_t *f, int allow_bf16)
{
  if (!ffn || ffn->w_gate.ndim != 2)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: the FFN's w_gate must be [f, d]", op);
  if (allow_bf16 && ffn->glu != CLMOE_GLU_SITU && ffn->glu != CLMOE_GLU_SWIGLU) /* the weights' */
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the FFN's glu = %d is not a clmoe_glu", op,
                        (int)ffn->glu);
  *f = ffn->w_gate.shape[0];
  CLMOE_TRY(clmoe__want_shape(&ffn->w_gate, op, "w_gate", allow_bf16, 2, *f, d, 0, 0));
  CLMOE_TRY(clmoe__want_shape(&ffn->w_upp, op, "w_upp", allow_bf16, 2, *f, d, 0, 0));
  return clmoe__want_shape(&ffn->w_dn, op, "w_dn", allow_bf16, 2, d, *f, 0, 0);
}

/* A product with weight W: in bf16 on the tile GEMM when W is a bf16 copy (as clmoe_linear). */
static clmoe_status weight_gemm(clmoe_ctx *ctx, clmoe_trans tw, const clmoe_tensor *X, const clmoe_tensor *W,
                                float beta, clmoe_tensor *Y)
{
  if (W->dtype == CLMOE_BF16) return clmoe_gemm_bf16(ctx, CLMOE_NOTRANS, tw, 1.0f, X, W, beta, Y);
  return clmoe_gemm(ctx, CLMOE_NOTRANS, tw, 1.0f, X, W, beta, Y);
}

/* x [m, d] (any leading dimensions): fp32, or bf16 storage when it feeds only the products
 * (a bf16 step's normed input, taken as it is by the bf16 products). */
static clmoe_status want_x(const char *op, const clmoe_tensor *x, int64_t d, int64_t *m)
{
  char desc[96];
  if (!x || x->dtype != CLMOE_BF16) return clmoe__moe_want_rows(x, op, "x", d, m);
  CLMOE_TRY(clmoe__want(x, CLMOE_BF16, op, "x"));
  if (x->ndim < 1 || x->shape[x->ndim - 1] != d)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: x %s must have a last dimension of %lld", op,
                        clmoe_tensor_describe(x, desc, sizeof desc), (long long)d);
  *m = clmoe_tensor_numel(x) / d;
  return CLMOE_OK;
}

/* d from y's (or dy's) last dimension, and x of the same rows. */
static clmoe_status want_io(const char *op, const clmoe_tensor *x, const clmoe_tensor *y, const char *yname,
                            int64_t *m, int64_t *d)
{
  if (!y || y->ndim < 1) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %s is missing", op, yname);
  *d = y->shape[y->ndim - 1];
  int64_t my;
  CLMOE_TRY(want_x(op, x, *d, m));
  CLMOE_TRY(clmoe__moe_want_rows(y, op, yname, *d, &my));
  if (my != *m) return clmoe__error(CLMOE_ERR_SHAPE, "%s: x and %s differ in rows", op, yname);
  return CLMOE_OK;
}

clmoe_status clmoe_situ_ffn_forward(clmoe_ctx *ctx, const clmoe_situ_ffn *ffn, const clmoe_tensor *x,
                                    float beta, clmoe_tensor *y, clmoe_situ_saved *saved)
{
  static const char op[] = "clmoe_situ_ffn_forward";
  int64_t m, d, f;
  CLMOE_TRY(want_io(op, x, y, "y", &m, &d));
  CLMOE_TRY(want_ffn(op, ffn, d, &f, 1));
  clmoe_situ_saved local, *s = saved ? saved : &local;
  memset(s, 0, sizeof *s);
  if (m == 0) return CLMOE_OK;
  clmoe_tensor x2, y2;
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(x, &x2, m, d), fail);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(y, &y2, m, d), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &s->u, CLMOE_F32, m, f), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &s->w, CLMOE_F32, m, f), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &s->act, CLMOE_F32, m, f), fail);
  CLMOE_TRY_GOTO(st, clmoe_linear(ctx, &x2, &ffn->w_gate, NULL, &s->u), fail);
  CLMOE_TRY_GOTO(st, clmoe_linear(ctx, &x2, &ffn->w_upp, NULL, &s->w), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_situ_forward(ctx, ffn->glu, &s->u, &s->w, &s->act), fail);
  CLMOE_TRY_GOTO(st, weight_gemm(ctx, CLMOE_TRANS, &s->act, &ffn->w_dn, beta, &y2), fail);
  if (!saved) clmoe_situ_saved_destroy(s);
  return CLMOE_OK;
fail:
  clmoe_situ_saved_destroy(s);
  return st;
}

clmoe_status clmoe_situ_ffn_backward(clmoe_ctx *ctx, const clmoe_situ_ffn *ffn, const clmoe_tensor *x,
                                     const clmoe_situ_saved *saved, const clmoe_tensor *dy,
                                     clmoe_situ_ffn *grad, float dx_beta, clmoe_tensor *dx)
{
  static const char op[] = "clmoe_situ_ffn_backward";
  int64_t m, d, f, mdx;
  CLMOE_TRY(want_io(op, x, dy, "dy", &m, &d));
  CLMOE_TRY(want_ffn(op, ffn, d, &f, 1));
  CLMOE_TRY(want_ffn(op, grad, d, &f, 0));
  if (dx) {
    CLMOE_TRY(clmoe__moe_want_rows(dx, op, "dx", d, &mdx));
    if (mdx != m) return clmoe__error(CLMOE_ERR_SHAPE, "%s: dx and x differ in rows", op);
  }
  if (m == 0) {
    CLMOE_TRY(clmoe_tensor_fill(&grad->w_gate, 0.0));
    CLMOE_TRY(clmoe_tensor_fill(&grad->w_upp, 0.0));
    return clmoe_tensor_fill(&grad->w_dn, 0.0);
  }
  if (!saved || !saved->u.buf || !saved->w.buf || !saved->act.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: saved must come from the forward on x", op);
  CLMOE_TRY(clmoe__want_shape(&saved->act, op, "saved act", 0, 2, m, f, 0, 0));
  clmoe_tensor x2, dy2, dx2, du = {0}, dw = {0}, du16 = {0}, dw16 = {0}; /* du, dw [m, f]; bf16 copies */
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(x, &x2, m, d), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(dy, &dy2, m, d), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &du, CLMOE_F32, m, f), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dw, CLMOE_F32, m, f), done);
  /* dact = dy W_dn (into du), dW_dn = dy^T act, then the gated unit's gradient in place */
  CLMOE_TRY_GOTO(st, clmoe_linear_backward(ctx, &saved->act, &ffn->w_dn, &dy2, &du, &grad->w_dn, NULL, 0), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_situ_backward(ctx, ffn->glu, &du, &saved->u, &saved->w, &du, &dw), done);
  /* With bf16 weights each of du, dw feeds two bf16 products (dW and dx): rounded once here
   * (the products would each round it: the same values) */
  const clmoe_tensor *gu = &du, *gw = &dw;
  if (ffn->w_gate.dtype == CLMOE_BF16 && ffn->w_upp.dtype == CLMOE_BF16) {
    CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &du16, CLMOE_BF16, m, f), done);
    CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dw16, CLMOE_BF16, m, f), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_copy(&du16, &du), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_copy(&dw16, &dw), done);
    gu = &du16, gw = &dw16;
  }
  CLMOE_TRY_GOTO(st, clmoe_linear_backward(ctx, &x2, &ffn->w_gate, gu, NULL, &grad->w_gate, NULL, 0), done);
  CLMOE_TRY_GOTO(st, clmoe_linear_backward(ctx, &x2, &ffn->w_upp, gw, NULL, &grad->w_upp, NULL, 0), done);
  if (dx) {
    CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(dx, &dx2, m, d), done);
    /* dx = dx_beta dx + du W_gate + dw W_upp (any dx_beta: the first product through clmoe_gemm) */
    CLMOE_TRY_GOTO(st, weight_gemm(ctx, CLMOE_NOTRANS, gu, &ffn->w_gate, dx_beta, &dx2), done);
    st = clmoe_linear_backward(ctx, &x2, &ffn->w_upp, gw, &dx2, NULL, NULL, CLMOE_LINEAR_ACC_DX);
  }
done:
  clmoe_tensor_destroy(&du);
  clmoe_tensor_destroy(&dw);
  clmoe_tensor_destroy(&du16);
  clmoe_tensor_destroy(&dw16);
  return st;
}
