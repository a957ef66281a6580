/* Gated MLA layer: the forward and backward through clmoe_linear, RMSNorm, the sigmoid gate
 * and the tiled attention (mla_attn.c), and the projections that prefill, decode and extend
 * share. Configuration and weights are in mla.c, decoding in mla_decode.c. Shapes: M = B T
 * tokens; Dqk = Dn + Dr. */
#include "mla_internal.h"

#include <string.h>

#include "clmoe/gemm.h"
#include "clmoe/ops.h"

/* ---- forward --------------------------------------------------------------------------- */

static clmoe_status mk(clmoe_ctx *ctx, clmoe_tensor *t, int64_t d0, int64_t d1, int64_t d2)
{
  int64_t shape[3] = {d0, d1, d2};
  return clmoe_tensor_create(ctx, t, CLMOE_F32, d2 ? 3 : d1 ? 2 : 1, shape);
}

/* t [d0, d1]: bf16 storage when it feeds only the product with W and W is a bf16 copy (a bf16
 * training step: the product rounds it anyway, so it is rounded once where it is made and
 * kept so for the backward's dW), else fp32. */
static clmoe_status mk_operand(clmoe_ctx *ctx, clmoe_tensor *t, const clmoe_tensor *W, int64_t d0, int64_t d1)
{
  if (W->dtype != CLMOE_BF16) return mk(ctx, t, d0, d1, 0);
  return clmoe_tensor_create(ctx, t, CLMOE_BF16, 2, (int64_t[]){d0, d1});
}

clmoe_status clmoe__mla_project(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                const clmoe_mla_weights *w, const clmoe_tensor *x2,
                                clmoe_mla_saved *s, int keep_raw)
{
  const int64_t M = x2->shape[0], H = cfg->n_heads, dqk = cfg->qk_nope + cfg->qk_rope, dc = cfg->kv_rank;
  const float eps = clmoe__mla_eps(cfg);
  clmoe_tensor v2, wc, wr;
  const int latent_q = cfg->q_rank > 0;
  /* with keep_raw (a layer forward) c_q feeds only W_uq: bf16 with its copy. c stays fp32: a
   * prefill writes it into the latent cache. */
  if (latent_q)
    CLMOE_TRY(keep_raw ? mk_operand(ctx, &s->cq, &w->w_uq, M, cfg->q_rank) : mk(ctx, &s->cq, M, cfg->q_rank, 0));
  CLMOE_TRY(mk(ctx, &s->c, M, dc, 0));
  if (keep_raw && latent_q) {
    CLMOE_TRY(mk(ctx, &s->cq_raw, M, cfg->q_rank, 0));
    CLMOE_TRY(mk(ctx, &s->rstd_q, M, 0, 0));
  }
  if (keep_raw) {
    CLMOE_TRY(mk(ctx, &s->ckv_raw, M, dc, 0));
    CLMOE_TRY(mk(ctx, &s->rstd_kv, M, 0, 0));
  }
  CLMOE_TRY(mk(ctx, &s->q, M, H, dqk));
  CLMOE_TRY(mk(ctx, &s->kr, M, cfg->qk_rope, 0));
  /* c_q = RMSNorm(W_dq x); q = W_uq c_q; or with q_rank 0, q = W_q x (W_q in w_uq) */
  CLMOE_TRY(clmoe_tensor_view2d(&s->q, &v2, M, H * dqk));
  if (latent_q) {
    clmoe_tensor *cq_raw = keep_raw ? &s->cq_raw : &s->cq;
    CLMOE_TRY(clmoe_linear(ctx, x2, &w->w_dq, NULL, cq_raw));
    CLMOE_TRY(clmoe_rmsnorm(ctx, cq_raw, &w->q_norm, eps, &s->cq, keep_raw ? &s->rstd_q : NULL));
    CLMOE_TRY(clmoe_linear(ctx, &s->cq, &w->w_uq, NULL, &v2));
  } else {
    CLMOE_TRY(clmoe_linear(ctx, x2, &w->w_uq, NULL, &v2));
  }
  /* [c_kv; k_r] = W_dkv x (two row blocks of W_dkv); c = RMSNorm(c_kv) */
  CLMOE_TRY(clmoe_tensor_rows(&w->w_dkv, &wc, 0, dc));
  CLMOE_TRY(clmoe_tensor_rows(&w->w_dkv, &wr, dc, cfg->qk_rope));
  clmoe_tensor *ckv_raw = keep_raw ? &s->ckv_raw : &s->c;
  CLMOE_TRY(clmoe_linear(ctx, x2, &wc, NULL, ckv_raw));
  CLMOE_TRY(clmoe_linear(ctx, x2, &wr, NULL, &s->kr));
  CLMOE_TRY(clmoe_rmsnorm(ctx, ckv_raw, &w->kv_norm, eps, &s->c, keep_raw ? &s->rstd_kv : NULL));
  /* gate = sigmoid(W_g x); none (s->gate stays empty) without w_g */
  if (!w->w_g.buf) return CLMOE_OK;
  CLMOE_TRY(mk(ctx, &s->gate, M, H * cfg->v_dim, 0));
  CLMOE_TRY(clmoe_linear(ctx, x2, &w->w_g, NULL, &s->gate));
  return clmoe_sigmoid(ctx, &s->gate, &s->gate);
}

clmoe_status clmoe__mla_output(clmoe_ctx *ctx, const clmoe_mla_weights *w, const clmoe_tensor *gate,
                               const clmoe_tensor *o2, clmoe_tensor *u, clmoe_tensor *y2)
{
  if (!gate->buf) return clmoe_linear(ctx, o2, &w->w_o, NULL, y2); /* ungated: y = W_o o */
  CLMOE_TRY(clmoe_mul(ctx, gate, o2, u));
  return clmoe_linear(ctx, u, &w->w_o, NULL, y2);
}

/* The attention operands of the layer: k_nope and v interleaved per head in kv. */
static mla_attn_desc layer_desc(const clmoe_mla_config *cfg, const clmoe_mla_saved *s, int64_t M)
{
  const int64_t H = cfg->n_heads, dn = cfg->qk_nope, dqk = dn + cfg->qk_rope, dkv = dn + cfg->v_dim;
  mla_attn_desc a = {M, H, dn, cfg->qk_rope, cfg->v_dim, 0, clmoe__mla_scale(cfg), {0}, {0}, {0}, {0}};
  a.q = (mla_operand){s->q.buf, (cl_ulong)s->q.offset, (cl_uint)(H * dqk), (cl_uint)dqk};
  a.kn = (mla_operand){s->kv.buf, (cl_ulong)s->kv.offset, (cl_uint)(H * dkv), (cl_uint)dkv};
  a.kr = (mla_operand){s->kr.buf, (cl_ulong)s->kr.offset, (cl_uint)cfg->qk_rope, 0};
  a.v = (mla_operand){s->kv.buf, (cl_ulong)(s->kv.offset + dn), (cl_uint)(H * dkv), (cl_uint)dkv};
  return a;
}

clmoe_status clmoe__mla_layer_forward(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                      const clmoe_mla_weights *w, const clmoe_tensor *x2,
                                      mla_plan *p, clmoe_tensor *y2, clmoe_mla_saved *s)
{
  const int64_t M = p->M, H = cfg->n_heads, dv = cfg->v_dim;
  clmoe_tensor kv2, o2;
  s->B = p->B, s->T = p->T;
  CLMOE_TRY(clmoe__mla_project(ctx, cfg, w, x2, s, 1));
  /* per head [k_n; v] = W_ukv c */
  CLMOE_TRY(mk(ctx, &s->kv, M, H, cfg->qk_nope + dv));
  CLMOE_TRY(clmoe_tensor_view2d(&s->kv, &kv2, M, H * (cfg->qk_nope + dv)));
  CLMOE_TRY(clmoe_linear(ctx, &s->c, &w->w_ukv, NULL, &kv2));
  CLMOE_TRY(mk(ctx, &s->o, M, H, dv));
  CLMOE_TRY(mk(ctx, &s->lse, M, H, 0));
  if (w->w_g.buf) CLMOE_TRY(mk_operand(ctx, &s->u, &w->w_o, M, H * dv)); /* u = gate o feeds only W_o */
  mla_attn_desc a = layer_desc(cfg, s, M);
  CLMOE_TRY(clmoe__mla_attn_fwd_run(ctx, &a, p, &s->o, &s->lse));
  CLMOE_TRY(clmoe_tensor_view2d(&s->o, &o2, M, H * dv));
  return clmoe__mla_output(ctx, w, &s->gate, &o2, &s->u, y2);
}

/* x [B, T, d] f32 or bf16 and the plan; x2 and (when y) y2: [M, d] views. */
static clmoe_status layer_setup(clmoe_ctx *ctx, const char *op, const clmoe_mla_config *cfg,
                                const clmoe_mla_weights *w, const clmoe_tensor *x, const clmoe_tensor *cu,
                                const clmoe_tensor *y, clmoe_tensor *x2, clmoe_tensor *y2, mla_plan *p)
{
  char desc[96];
  memset(p, 0, sizeof *p);
  CLMOE_TRY(clmoe__mla_check_layer_weights(op, cfg, w));
  if (!x || x->ndim != 3)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: x is %s, expected [B, T, d_model] f32", op,
                        x ? clmoe_tensor_describe(x, desc, sizeof desc) : "NULL");
  const int64_t B = x->shape[0], T = x->shape[1], d = cfg->d_model;
  /* x feeds only the projections: bf16 storage (a bf16 step's normed input) is taken as it is */
  CLMOE_TRY(clmoe__want_shape(x, op, "x", 1, 3, B, T, d, 0));
  CLMOE_TRY(clmoe_tensor_view2d(x, x2, B * T, d));
  if (y) {
    CLMOE_TRY(clmoe__want_shape(y, op, "y", 0, 3, B, T, d, 0));
    CLMOE_TRY(clmoe_tensor_view2d(y, y2, B * T, d));
  }
  return clmoe__mla_plan_make(ctx, op, B, T, cu, p);
}

clmoe_status clmoe_mla_forward(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                               const clmoe_tensor *x, const clmoe_tensor *cu_seqlens, clmoe_tensor *y,
                               clmoe_mla_saved *saved)
{
  const char *op = "clmoe_mla_forward";
  clmoe_tensor x2, y2;
  mla_plan p;
  if (!y) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: y is NULL", op);
  CLMOE_TRY(layer_setup(ctx, op, cfg, w, x, cu_seqlens, y, &x2, &y2, &p));
  clmoe_mla_saved local;
  clmoe_mla_saved *s = saved ? saved : &local;
  memset(s, 0, sizeof *s);
  clmoe_status st = clmoe__mla_layer_forward(ctx, cfg, w, &x2, &p, &y2, s);
  if (st != CLMOE_OK || !saved) clmoe_mla_saved_release(s);
  clmoe__mla_plan_release(ctx, &p);
  return st;
}

/* ---- backward -------------------------------------------------------------------------- */

enum { G_DU, G_DGATE, G_DO, G_DQ, G_DKV, G_DKR, G_DC, G_DCQ, G_COUNT };

static clmoe_status layer_backward(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                                   const clmoe_tensor *x2, mla_plan *p, const clmoe_mla_saved *s,
                                   const clmoe_tensor *dy2, clmoe_tensor *dx2, clmoe_mla_weights *g,
                                   clmoe_tensor *t)
{
  const int64_t M = p->M, H = cfg->n_heads, dn = cfg->qk_nope, dr = cfg->qk_rope, dv = cfg->v_dim;
  const int64_t dqk = dn + dr, dkv = dn + dv, dc = cfg->kv_rank;
  const int gated = w->w_g.buf != NULL, latent_q = cfg->q_rank > 0;
  if (gated) {
    CLMOE_TRY(mk(ctx, &t[G_DU], M, H * dv, 0));
    CLMOE_TRY(mk(ctx, &t[G_DGATE], M, H * dv, 0));
  }
  CLMOE_TRY(mk(ctx, &t[G_DO], M, H, dv));
  CLMOE_TRY(mk(ctx, &t[G_DQ], M, H, dqk));
  CLMOE_TRY(mk(ctx, &t[G_DKV], M, H, dkv));
  CLMOE_TRY(mk(ctx, &t[G_DKR], M, dr, 0));
  CLMOE_TRY(mk(ctx, &t[G_DC], M, dc, 0));
  if (latent_q) CLMOE_TRY(mk(ctx, &t[G_DCQ], M, cfg->q_rank, 0));
  clmoe_tensor o2, do2, dq2, dkv2, wc, wr, gwc, gwr;
  CLMOE_TRY(clmoe_tensor_view2d(&s->o, &o2, M, H * dv));
  CLMOE_TRY(clmoe_tensor_view2d(&t[G_DO], &do2, M, H * dv));
  CLMOE_TRY(clmoe_tensor_view2d(&t[G_DQ], &dq2, M, H * dqk));
  CLMOE_TRY(clmoe_tensor_view2d(&t[G_DKV], &dkv2, M, H * dkv));
  /* y = W_o u, u = gate * o, gate = sigmoid(W_g x); ungated: y = W_o o */
  int dx_written = 0;
  if (gated) {
    CLMOE_TRY(clmoe_linear_backward(ctx, &s->u, &w->w_o, dy2, &t[G_DU], &g->w_o, NULL, 0));
    CLMOE_TRY(clmoe_mul_backward(ctx, &t[G_DU], &s->gate, &o2, &t[G_DGATE], &do2));
    CLMOE_TRY(clmoe_sigmoid_backward(ctx, &s->gate, &t[G_DGATE], &t[G_DGATE]));
    CLMOE_TRY(clmoe_linear_backward(ctx, x2, &w->w_g, &t[G_DGATE], dx2, &g->w_g, NULL, 0));
    dx_written = 1;
  } else {
    CLMOE_TRY(clmoe_linear_backward(ctx, &o2, &w->w_o, dy2, &do2, &g->w_o, NULL, 0));
  }
  /* attention */
  mla_attn_desc a = layer_desc(cfg, s, M);
  mla_operand dkn = {t[G_DKV].buf, (cl_ulong)t[G_DKV].offset, (cl_uint)(H * dkv), (cl_uint)dkv};
  mla_operand dvo = dkn;
  dvo.off += (cl_ulong)dn;
  CLMOE_TRY(clmoe__mla_attn_bwd_run(ctx, &a, p, &s->o, &s->lse, &t[G_DO], &t[G_DQ], dkn, dvo, &t[G_DKR]));
  /* kv = W_ukv c, c = RMSNorm(c_kv), [c_kv; k_r] = W_dkv x */
  CLMOE_TRY(clmoe_linear_backward(ctx, &s->c, &w->w_ukv, &dkv2, &t[G_DC], &g->w_ukv, NULL, 0));
  CLMOE_TRY(clmoe_rmsnorm_backward(ctx, &s->ckv_raw, &w->kv_norm, &s->rstd_kv, &t[G_DC], &t[G_DC], &g->kv_norm));
  CLMOE_TRY(clmoe_tensor_rows(&w->w_dkv, &wc, 0, dc));
  CLMOE_TRY(clmoe_tensor_rows(&w->w_dkv, &wr, dc, dr));
  CLMOE_TRY(clmoe_tensor_rows(&g->w_dkv, &gwc, 0, dc));
  CLMOE_TRY(clmoe_tensor_rows(&g->w_dkv, &gwr, dc, dr));
  CLMOE_TRY(clmoe_linear_backward(ctx, x2, &wc, &t[G_DC], dx2, &gwc, NULL, dx_written ? CLMOE_LINEAR_ACC_DX : 0));
  CLMOE_TRY(clmoe_linear_backward(ctx, x2, &wr, &t[G_DKR], dx2, &gwr, NULL, CLMOE_LINEAR_ACC_DX));
  /* q = W_q x (q_rank 0); or q = W_uq c_q, c_q = RMSNorm(W_dq x) */
  if (!latent_q) return clmoe_linear_backward(ctx, x2, &w->w_uq, &dq2, dx2, &g->w_uq, NULL, CLMOE_LINEAR_ACC_DX);
  CLMOE_TRY(clmoe_linear_backward(ctx, &s->cq, &w->w_uq, &dq2, &t[G_DCQ], &g->w_uq, NULL, 0));
  CLMOE_TRY(clmoe_rmsnorm_backward(ctx, &s->cq_raw, &w->q_norm, &s->rstd_q, &t[G_DCQ], &t[G_DCQ], &g->q_norm));
  CLMOE_TRY(clmoe_linear_backward(ctx, x2, &w->w_dq, &t[G_DCQ], dx2, &g->w_dq, NULL, CLMOE_LINEAR_ACC_DX));
  return CLMOE_OK;
}

clmoe_status clmoe_mla_backward(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                                const clmoe_tensor *x, const clmoe_tensor *cu_seqlens,
                                const clmoe_mla_saved *saved, const clmoe_tensor *dy, clmoe_tensor *dx,
                                clmoe_mla_weights *grads)
{
  const char *op = "clmoe_mla_backward";
  clmoe_tensor x2, dy2, dx2;
  mla_plan p;
  if (!saved || !saved->q.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: saved is empty; pass the struct filled by clmoe_mla_forward", op);
  CLMOE_TRY(layer_setup(ctx, op, cfg, w, x, cu_seqlens, dy, &x2, &dy2, &p));
  clmoe_tensor t[G_COUNT];
  memset(t, 0, sizeof t);
  clmoe_status st;
  if (saved->B != p.B || saved->T != p.T || saved->q.shape[0] != p.M || saved->q.shape[1] != cfg->n_heads) {
    st = clmoe__error(CLMOE_ERR_SHAPE, "%s: saved comes from a forward of another shape or configuration", op);
    goto done;
  }
  CLMOE_TRY_GOTO(st, clmoe__mla_check_weights(op, cfg, grads), done);
  if ((grads->w_g.buf != NULL) != (w->w_g.buf != NULL)) {
    st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: grads %s w_g and the weights %s: both must be of one form", op,
                      grads->w_g.buf ? "have" : "lack", w->w_g.buf ? "have it" : "lack it");
    goto done;
  }
  if (dx) {
    CLMOE_TRY_GOTO(st, clmoe__want_shape(dx, op, "dx", 0, 3, p.B, p.T, cfg->d_model, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(dx, &dx2, p.M, cfg->d_model), done);
  }
  if (p.M == 0) { /* no tokens: zero gradients */
    for (int i = 0; i < CLMOE_MLA_NWEIGHTS; i++)
      if (clmoe_mla_weight_at(grads, i)->buf) CLMOE_TRY_GOTO(st, clmoe_tensor_fill(clmoe_mla_weight_at(grads, i), 0.0), done);
    goto done;
  }
  st = layer_backward(ctx, cfg, w, &x2, &p, saved, &dy2, dx ? &dx2 : NULL, grads, t);
done:
  for (int i = 0; i < G_COUNT; i++) clmoe_tensor_destroy(&t[i]);
  clmoe__mla_plan_release(ctx, &p);
  return st;
}
