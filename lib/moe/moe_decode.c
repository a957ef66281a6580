/* The MoE layer's inference forward for few tokens (decode steps, short prefill passes), in
 * six launches: the products of x (router, W_down, the shared experts' gate and up) in one
 * GEMV launch (kernels_cl/ops/gemv.cl), the router's top-k (moe_route), two kernels over the
 * (token, chosen expert) pairs that read the top-k on the device (kernels_cl/moe/
 * moe_decode.cl), W_up with the latent RMSNorm applied on the way in, and the shared experts'
 * down product with their gated unit applied on the way in, accumulating. Weights fp32 or
 * bf16 (each GEMV launch's matrices alike, the expert stacks alike), sums fp32. No sort, no
 * dispatch, no host read, no CLBlast call. Each pair reads its expert's weights itself, so
 * the work grows with m k; the grouped path of clmoe_moe_forward reads an expert once for all
 * its tokens and wins for many tokens. */
#include "moe_internal.h"

#include <stdio.h>
#include <string.h>
#include "clmoe/ops.h"
#include "ops/ops_internal.h" /* the few-token GEMV */

#define MOE_DECODE_LANES 64  /* MD_LANES of moe_decode.cl */
#define MOE_DECODE_UP_ROWS 4 /* MD_UP_ROWS */
#define MOE_DECODE_DN_ROWS 2 /* MD_DN_ROWS; CLMOE_MOE_DECODE_TOPK_MAX is its MD_KMAX */
#define GEMV_OP "clmoe_moe_decode_forward (gemv)"

static clmoe_status decode_kernel(clmoe_ctx *ctx, const clmoe_moe_layer *L, const char *name, cl_kernel *k)
{
  char opts[48];
  /* 16-byte weight loads where every row starts aligned: the stacks are whole tensors, so rows
   * of a multiple of 8 elements (the sums are the same either way) */
  const int vec = clmoe__knob_int(ctx, CLMOE_K_GEMV_VEC) != 0 && clmoe__moe_width(&L->cfg) % 8 == 0 &&
                  L->cfg.expert_ff % 8 == 0;
  snprintf(opts, sizeof opts, "-DMD_WBF16=%d -DMD_VEC=%d", L->w_gate.dtype == CLMOE_BF16, vec);
  return clmoe__kernel(ctx, "moe_common+moe_decode", opts, name, k);
}

/* The temporaries of one call. */
typedef struct dec_buf {
  clmoe_tensor s_all, topk, scores, probs; /* [m, E], [m, k] i32, [m, k], [m, k] */
  clmoe_tensor xl, act, z, su, sw;         /* [m, l], [m k, f], [m, l], [m, S], [m, S] */
  clmoe_tensor xn;                         /* [m, d]: RMSNorm(x) when the call norms x */
} dec_buf;

static void dec_buf_destroy(dec_buf *b)
{
  clmoe_tensor *t[] = {&b->s_all, &b->topk, &b->scores, &b->probs, &b->xl, &b->act, &b->z, &b->su, &b->sw, &b->xn};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
}

/* topk, scores, probs from the logits s_all (the router's kernel: sigmoid in place, top-k of
 * s + b, combine weights), as clmoe_moe_route after its product. */
static clmoe_status route_topk(clmoe_ctx *ctx, const clmoe_moe_layer *L, dec_buf *b, int64_t m)
{
  const clmoe_moe_config *c = &L->cfg;
  cl_kernel kr;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_ROUTE, "moe_route", &kr));
  cl_int im = (cl_int)m, iE = (cl_int)c->n_experts, ik = (cl_int)c->top_k, ik1 = ik;
  cl_int iG = (cl_int)(c->groups > 1 ? c->groups : 1), iTG = (cl_int)(c->topk_groups > 0 ? c->topk_groups : iG);
  cl_int renorm = !c->no_renormalize;
  cl_float scale = c->routed_scale != 0.0f ? c->routed_scale : 1.0f;
  CLMOE_TRY(clmoe__args(kr, 14, KA(b->s_all.buf), KA(L->bias.buf), KA(im), KA(iE), KA(ik), KA(ik1), KA(b->topk.buf),
                        KA(b->scores.buf), KA(b->probs.buf), KA(b->probs.buf), KA(iG), KA(iTG), KA(renorm),
                        KA(scale)));
  return clmoe__launch_groups(ctx, kr, m, 64); /* MOE_ROUTE_WG of kernels_cl/moe/moe_route.cl */
}

/* act [m k, f] from xin [m, l] (at its offset) and the top-k. */
static clmoe_status experts_up(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *xin, dec_buf *b,
                               int64_t m)
{
  const clmoe_moe_config *c = &L->cfg;
  const int64_t k = c->top_k, f = c->expert_ff, rows = MOE_DECODE_UP_ROWS;
  cl_kernel kn;
  CLMOE_TRY(decode_kernel(ctx, L, "moe_dec_up", &kn));
  cl_ulong xoff = (cl_ulong)xin->offset;
  cl_int iE = (cl_int)c->n_experts, ik = (cl_int)k, il = (cl_int)clmoe__moe_width(c), iff = (cl_int)f;
  cl_int glu = (cl_int)c->glu;
  CLMOE_TRY(clmoe__args(kn, 11, KA(b->topk.buf), KA(xin->buf), KA(xoff), KA(L->w_gate.buf), KA(L->w_upp.buf),
                        KA(iE), KA(ik), KA(il), KA(iff), KA(glu), KA(b->act.buf)));
  size_t local[2] = {MOE_DECODE_LANES, 1};
  size_t global[2] = {MOE_DECODE_LANES, (size_t)(m * k * ((f + rows - 1) / rows))};
  return clmoe__launch(ctx, kn, 2, global, local);
}

/* z [m, l] (at its offset) = beta z + the weighted sum of the pairs' down products. */
static clmoe_status experts_down(clmoe_ctx *ctx, const clmoe_moe_layer *L, dec_buf *b, clmoe_tensor *z,
                                 int64_t m, int beta)
{
  const clmoe_moe_config *c = &L->cfg;
  const int64_t l = clmoe__moe_width(c), rows = MOE_DECODE_DN_ROWS;
  cl_kernel kn;
  CLMOE_TRY(decode_kernel(ctx, L, "moe_dec_down", &kn));
  cl_ulong zoff = (cl_ulong)z->offset;
  cl_int iE = (cl_int)c->n_experts, ik = (cl_int)c->top_k, il = (cl_int)l, iff = (cl_int)c->expert_ff;
  cl_int ibeta = beta;
  CLMOE_TRY(clmoe__args(kn, 11, KA(b->topk.buf), KA(b->probs.buf), KA(b->act.buf), KA(L->w_dn.buf), KA(iE),
                        KA(ik), KA(il), KA(iff), KA(z->buf), KA(zoff), KA(ibeta)));
  size_t local[2] = {MOE_DECODE_LANES, 1};
  size_t global[2] = {MOE_DECODE_LANES, (size_t)(m * ((l + rows - 1) / rows))};
  return clmoe__launch(ctx, kn, 2, global, local);
}

/* gain not NULL: x2 is the residual stream and the layer's input is RMSNorm(x2) gain (eps),
 * applied in the first launch, which also writes it to b->xn where the experts read it. */
static clmoe_status decode_steps(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x2,
                                 const clmoe_tensor *gain, float eps, clmoe_tensor *y2, int64_t m, int acc, dec_buf *b)
{
  const clmoe_moe_config *c = &L->cfg;
  const int64_t E = c->n_experts, k = c->top_k, l = clmoe__moe_width(c), f = c->expert_ff;
  const int64_t S = c->n_shared * c->shared_ff;
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->s_all, CLMOE_F32, m, E));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->topk, CLMOE_I32, m, k));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->scores, CLMOE_F32, m, k));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->probs, CLMOE_F32, m, k));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->act, CLMOE_F32, m * k, f));
  /* every product of x in one launch: router logits, W_down, the shared gate and up */
  clmoe__gemv_slot sl[4] = {{&L->w_router, &b->s_all, NULL}};
  int n = 1;
  if (c->latent > 0) {
    CLMOE_TRY(clmoe__moe_new2(ctx, &b->xl, CLMOE_F32, m, l));
    sl[n++] = (clmoe__gemv_slot){&L->w_down, &b->xl, NULL};
  }
  if (S > 0) {
    CLMOE_TRY(clmoe__moe_new2(ctx, &b->su, CLMOE_F32, m, S));
    CLMOE_TRY(clmoe__moe_new2(ctx, &b->sw, CLMOE_F32, m, S));
    sl[n++] = (clmoe__gemv_slot){&L->shared.w_gate, &b->su, NULL};
    sl[n++] = (clmoe__gemv_slot){&L->shared.w_upp, &b->sw, NULL};
  }
  clmoe_tensor *xn = NULL; /* the normed x, where the experts read it */
  if (gain && c->latent == 0) {
    CLMOE_TRY(clmoe__moe_new2(ctx, &b->xn, CLMOE_F32, m, c->d));
    xn = &b->xn;
  }
  CLMOE_TRY(clmoe__ops_gemv_xn(ctx, GEMV_OP, x2, NULL, gain, gain ? 1 : 0, 0, eps, 0, n, sl, xn));
  CLMOE_TRY(route_topk(ctx, L, b, m));
  if (c->latent == 0) { /* the experts work on x itself, and y is their weighted sum */
    CLMOE_TRY(experts_up(ctx, L, xn ? xn : x2, b, m));
    CLMOE_TRY(experts_down(ctx, L, b, y2, m, acc));
  } else { /* y = W_up RMSNorm_gain(z) */
    CLMOE_TRY(experts_up(ctx, L, &b->xl, b, m));
    CLMOE_TRY(clmoe__moe_new2(ctx, &b->z, CLMOE_F32, m, l));
    CLMOE_TRY(experts_down(ctx, L, b, &b->z, m, 0));
    const clmoe__gemv_slot up = {&L->w_up, y2, NULL};
    CLMOE_TRY(clmoe__ops_gemv(ctx, GEMV_OP, &b->z, NULL, &L->norm_gain, 1, 0, c->norm_eps, acc, 1, &up));
  }
  if (S > 0) { /* y += W_dn glu(su, sw) */
    const clmoe__gemv_slot dn = {&L->shared.w_dn, y2, NULL};
    CLMOE_TRY(clmoe__ops_gemv(ctx, GEMV_OP, &b->su, &b->sw, NULL, 2, (int)L->shared.glu, 0.0f, 1, 1, &dn));
  }
  return CLMOE_OK;
}

/* The routed experts' stacks: whole tensors, all fp32 or all bf16. */
static clmoe_status want_experts(const clmoe_moe_layer *L, const char *op, int64_t E, int64_t ff, int64_t lw)
{
  const clmoe_tensor *w[3] = {&L->w_gate, &L->w_upp, &L->w_dn};
  static const char *const name[3] = {"w_gate", "w_upp", "w_dn"};
  for (int i = 0; i < 3; i++) {
    CLMOE_TRY(clmoe__want_shape(w[i], op, name[i], 1, 3, E, i < 2 ? ff : lw, i < 2 ? lw : ff, 0));
    if (w[i]->offset != 0 || w[i]->dtype != L->w_gate.dtype)
      return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s must be a whole tensor of w_gate's type (fp32 or bf16)", op,
                          name[i]);
  }
  return CLMOE_OK;
}

clmoe_status clmoe__moe_decode_forward_norm(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x,
                                            const clmoe_tensor *gain, float eps, int accumulate, clmoe_tensor *y,
                                            clmoe_tensor *topk)
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
  CLMOE_TRY(want_experts(L, op, E, ff, lw));
  if (L->cfg.top_k > CLMOE_MOE_DECODE_TOPK_MAX)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: top_k = %lld; this path takes at most %d (clmoe_moe_forward takes "
                        "any)", op, (long long)L->cfg.top_k, CLMOE_MOE_DECODE_TOPK_MAX);
  const int64_t f = L->cfg.expert_ff, l = clmoe__moe_width(&L->cfg);
  if (m * L->cfg.top_k * ((f + MOE_DECODE_UP_ROWS - 1) / MOE_DECODE_UP_ROWS) >= INT32_MAX ||
      m * ((l + MOE_DECODE_DN_ROWS - 1) / MOE_DECODE_DN_ROWS) >= INT32_MAX ||
      m * L->cfg.n_experts >= ((int64_t)1 << 40))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %lld tokens is too many for one call (this path is for few "
                        "tokens; clmoe_moe_forward takes many)", op, (long long)m);
  if (topk) {
    CLMOE_TRY(clmoe__want(topk, CLMOE_I32, op, "topk"));
    if (topk->ndim != 2 || topk->shape[0] != m || topk->shape[1] != L->cfg.top_k)
      return clmoe__error(CLMOE_ERR_SHAPE, "%s: topk must be [%lld, %lld] i32", op, (long long)m,
                          (long long)L->cfg.top_k);
  }
  if (m == 0) return CLMOE_OK;
  clmoe_tensor x2, y2;
  CLMOE_TRY(clmoe_tensor_view2d(x, &x2, m, d));
  CLMOE_TRY(clmoe_tensor_view2d(y, &y2, m, d));
  dec_buf b;
  memset(&b, 0, sizeof b);
  if (gain) CLMOE_TRY(clmoe__want_shape(gain, op, "norm gain", 0, 1, d, 0, 0, 0));
  clmoe_status st = decode_steps(ctx, L, &x2, gain, eps, &y2, m, accumulate != 0, &b);
  if (st == CLMOE_OK && topk) st = clmoe_tensor_copy(topk, &b.topk);
  dec_buf_destroy(&b); /* the queue is in order: the buffers go back to the pool at once */
  return st;
}

clmoe_status clmoe_moe_decode_forward(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x,
                                      int accumulate, clmoe_tensor *y, clmoe_tensor *topk)
{
  return clmoe__moe_decode_forward_norm(ctx, L, x, NULL, 0.0f, accumulate, y, topk);
}
