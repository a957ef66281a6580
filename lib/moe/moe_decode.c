/* The MoE layer's inference forward for few tokens (decode steps, short prefill passes):
 * the router, then two kernels over the (token, chosen expert) pairs that read the top-k
 * from the device (kernels_cl/moe/moe_decode.cl), then the latent norm, W_up and the shared
 * experts as in clmoe_moe_forward. No sort, no dispatch, no host read: a handful of
 * launches. Each pair reads its expert's weights itself, so the work grows with m k; the
 * grouped path of clmoe_moe_forward reads an expert once for all its tokens and wins for
 * many tokens. */
#include "moe_internal.h"

#include <stdio.h>
#include <string.h>
#include "clmoe/ops.h"

#define MOE_DECODE_LANES 64 /* MD_LANES of moe_decode.cl */

/* Rows per work-group: fewer on GPUs, where a batch-1 step needs many work-groups to fill
 * the device; the sums do not depend on it. */
static int decode_rows(const clmoe_ctx *ctx) { return ctx->caps.is_gpu ? 4 : 8; }

static clmoe_status decode_kernel(clmoe_ctx *ctx, const char *name, cl_kernel *k)
{
  char opts[32];
  snprintf(opts, sizeof opts, "-DMD_ROWS=%d", decode_rows(ctx));
  return clmoe__kernel(ctx, "moe_common+moe_decode", opts, name, k);
}

/* The temporaries of one call. */
typedef struct dec_buf {
  clmoe_tensor s_all, topk, scores, probs; /* [m, E], [m, k] i32, [m, k], [m, k] */
  clmoe_tensor xl, act, z, zn, rstd;       /* [m, l], [m k, f], [m, l], [m, l], [m] */
} dec_buf;

static void dec_buf_destroy(dec_buf *b)
{
  clmoe_tensor *t[] = {&b->s_all, &b->topk, &b->scores, &b->probs, &b->xl, &b->act, &b->z, &b->zn, &b->rstd};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
}

/* act [m k, f] from xin [m, l] (at its offset) and the top-k. */
static clmoe_status experts_up(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *xin, dec_buf *b,
                               int64_t m)
{
  const clmoe_moe_config *c = &L->cfg;
  const int64_t k = c->top_k, f = c->expert_ff, rows = decode_rows(ctx);
  cl_kernel kn;
  CLMOE_TRY(decode_kernel(ctx, "moe_dec_up", &kn));
  cl_ulong xoff = (cl_ulong)xin->offset;
  cl_int iE = (cl_int)c->n_experts, ik = (cl_int)k, il = (cl_int)clmoe__moe_width(c), iff = (cl_int)f;
  cl_int glu = (cl_int)c->glu;
  CLMOE_TRY(clmoe__args(kn, 11, KA(b->topk.buf), KA(xin->buf), KA(xoff), KA(L->w_gate.buf), KA(L->w_upp.buf),
                        KA(iE), KA(ik), KA(il), KA(iff), KA(glu), KA(b->act.buf)));
  size_t local[2] = {MOE_DECODE_LANES, 1};
  size_t global[2] = {MOE_DECODE_LANES, (size_t)(m * k * ((f + rows - 1) / rows))};
  return clmoe__launch(ctx, kn, 2, global, local);
}

/* z [m, l] (at its offset) = the weighted sum of the pairs' down products. */
static clmoe_status experts_down(clmoe_ctx *ctx, const clmoe_moe_layer *L, dec_buf *b, clmoe_tensor *z,
                                 int64_t m)
{
  const clmoe_moe_config *c = &L->cfg;
  const int64_t l = clmoe__moe_width(c), rows = decode_rows(ctx);
  cl_kernel kn;
  CLMOE_TRY(decode_kernel(ctx, "moe_dec_down", &kn));
  cl_ulong zoff = (cl_ulong)z->offset;
  cl_int iE = (cl_int)c->n_experts, ik = (cl_int)c->top_k, il = (cl_int)l, iff = (cl_int)c->expert_ff;
  CLMOE_TRY(clmoe__args(kn, 10, KA(b->topk.buf), KA(b->probs.buf), KA(b->act.buf), KA(L->w_dn.buf), KA(iE),
                        KA(ik), KA(il), KA(iff), KA(z->buf), KA(zoff)));
  size_t local[2] = {MOE_DECODE_LANES, 1};
  size_t global[2] = {MOE_DECODE_LANES, (size_t)(m * ((l + rows - 1) / rows))};
  return clmoe__launch(ctx, kn, 2, global, local);
}

static clmoe_status decode_steps(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x2,
                                 clmoe_tensor *y2, int64_t m, dec_buf *b)
{
  const clmoe_moe_config *c = &L->cfg;
  const int64_t E = c->n_experts, k = c->top_k, l = clmoe__moe_width(c), f = c->expert_ff;
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->s_all, CLMOE_F32, m, E));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->topk, CLMOE_I32, m, k));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->scores, CLMOE_F32, m, k));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->probs, CLMOE_F32, m, k));
  CLMOE_TRY(clmoe_moe_route(ctx, L, x2, &b->s_all, &b->topk, &b->scores, &b->probs, NULL));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->act, CLMOE_F32, m * k, f));
  if (c->latent == 0) { /* the experts work on x itself, and y is their weighted sum */
    CLMOE_TRY(experts_up(ctx, L, x2, b, m));
    CLMOE_TRY(experts_down(ctx, L, b, y2, m));
  } else {
    CLMOE_TRY(clmoe__moe_new2(ctx, &b->xl, CLMOE_F32, m, l));
    CLMOE_TRY(clmoe_linear(ctx, x2, &L->w_down, NULL, &b->xl));
    CLMOE_TRY(experts_up(ctx, L, &b->xl, b, m));
    CLMOE_TRY(clmoe__moe_new2(ctx, &b->z, CLMOE_F32, m, l));
    CLMOE_TRY(experts_down(ctx, L, b, &b->z, m));
    CLMOE_TRY(clmoe_tensor_create(ctx, &b->rstd, CLMOE_F32, 1, &m));
    CLMOE_TRY(clmoe__moe_new2(ctx, &b->zn, CLMOE_F32, m, l));
    CLMOE_TRY(clmoe_rmsnorm(ctx, &b->z, &L->norm_gain, c->norm_eps, &b->zn, &b->rstd));
    CLMOE_TRY(clmoe_linear(ctx, &b->zn, &L->w_up, NULL, y2));
  }
  if (c->n_shared * c->shared_ff > 0) CLMOE_TRY(clmoe_situ_ffn_forward(ctx, &L->shared, x2, 1.0f, y2, NULL));
  return CLMOE_OK;
}

clmoe_status clmoe_moe_decode_forward(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x,
                                      clmoe_tensor *y)
{
  static const char op[] = "clmoe_moe_decode_forward";
  if (!ctx || !L || !L->w_router.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the context or the layer is missing", op);
  const int64_t d = L->cfg.d;
  int64_t m, my;
  CLMOE_TRY(clmoe__moe_want_rows(x, op, "x", d, &m));
  CLMOE_TRY(clmoe__moe_want_rows(y, op, "y", d, &my));
  if (my != m) return clmoe__error(CLMOE_ERR_SHAPE, "%s: x and y differ in rows", op);
  const int64_t E = L->cfg.n_experts, lw = clmoe__moe_width(&L->cfg), ff = L->cfg.expert_ff;
  CLMOE_TRY(clmoe__moe_want_buf(&L->w_gate, op, "w_gate", 3, E, ff, lw)); /* fp32 experts only */
  CLMOE_TRY(clmoe__moe_want_buf(&L->w_upp, op, "w_upp", 3, E, ff, lw));
  CLMOE_TRY(clmoe__moe_want_buf(&L->w_dn, op, "w_dn", 3, E, lw, ff));
  const int64_t f = L->cfg.expert_ff, l = clmoe__moe_width(&L->cfg), rows = 8;
  if (m * L->cfg.top_k * ((f + rows - 1) / rows) >= INT32_MAX || m * ((l + rows - 1) / rows) >= INT32_MAX ||
      m * L->cfg.n_experts >= ((int64_t)1 << 40))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %lld tokens is too many for one call (this path is for few "
                        "tokens; clmoe_moe_forward takes many)", op, (long long)m);
  if (m == 0) return CLMOE_OK;
  clmoe_tensor x2, y2;
  CLMOE_TRY(clmoe_tensor_view2d(x, &x2, m, d));
  CLMOE_TRY(clmoe_tensor_view2d(y, &y2, m, d));
  dec_buf b;
  memset(&b, 0, sizeof b);
  const clmoe_status st = decode_steps(ctx, L, &x2, &y2, m, &b);
  dec_buf_destroy(&b); /* the queue is in order: the buffers go back to the pool at once */
  return st;
}
