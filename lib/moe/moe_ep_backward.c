/* The backward of the expert-parallel MoE layer (include/clmoe/moe_ep.h): the forward's exchange
 * mirrored. Per routed copy the output gradient p dz goes to the expert's rank (dispatch of
 * copy rows), the single-rank expert backward runs on the received rows, and the input
 * gradients come back (combine) to be summed per token in slot order, as
 * clmoe_moe_backward's gather backward does. Host math in fixed order: dp and p dz. */
#include "clmoe/moe_ep.h"
#include "clmoe/ops.h"

#include <stdlib.h>
#include <string.h>

#include "moe_internal.h"

clmoe_status clmoe_moe_ep_grads_create(clmoe_ctx *ctx, const clmoe_moe_ep_layer *ep, clmoe_moe_grads *g)
{
  if (!g) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_moe_ep_grads_create: g is NULL");
  memset(g, 0, sizeof *g);
  const clmoe_moe_layer *D = &ep->dense, *X = &ep->experts;
  const clmoe_tensor *src[10] = {&D->w_router, &D->w_down, &X->w_gate, &X->w_upp, &X->w_dn,
                                 &D->norm_gain, &D->w_up, &D->shared.w_gate, &D->shared.w_upp,
                                 &D->shared.w_dn};
  clmoe_tensor *dst[10] = {&g->w_router, &g->w_down, &g->w_gate, &g->w_upp, &g->w_dn,
                           &g->norm_gain, &g->w_up, &g->shared.w_gate, &g->shared.w_upp,
                           &g->shared.w_dn};
  for (int i = 0; i < 10; i++) {
    if (!src[i]->buf) continue; /* no shared experts, or no local experts */
    clmoe_status st = clmoe_tensor_create(ctx, dst[i], CLMOE_F32, src[i]->ndim, src[i]->shape);
    if (st != CLMOE_OK) {
      clmoe_moe_grads_destroy(g);
      return st;
    }
  }
  return CLMOE_OK;
}

/* Host buffers of one backward. */
typedef struct ep_bhost {
  float *dz;    /* [m, l] gradient of the combine's output */
  float *dp;    /* [m k] gradient of the routing weights */
  float *dcopy; /* [m k, l] p dz per routed copy; later the copies' input gradients */
  float *drecv; /* [R, l] received output gradients, then the input gradients in place */
  float *dxl;   /* [m, l] gradient of W_down x */
} ep_bhost;

static void ep_bhost_free(ep_bhost *h)
{
  free(h->dz), free(h->dp), free(h->dcopy), free(h->drecv), free(h->dxl);
  memset(h, 0, sizeof *h);
}

static clmoe_status bhost_alloc(float **p, int64_t n)
{
  *p = malloc((size_t)(n > 0 ? n : 1) * sizeof **p);
  if (!*p) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_moe_ep_backward: %lld host floats",
                               (long long)n);
  return CLMOE_OK;
}

/* dW_up, the latent norm's backward, then dz to the host (latent 0: dz = dy). */
static clmoe_status tail_backward(clmoe_ctx *ctx, const clmoe_moe_ep_layer *ep, const clmoe_moe_saved *s,
                                  const clmoe_tensor *dy2, clmoe_moe_grads *g, float *dzh)
{
  const int64_t m = s->tokens, l = clmoe__moe_width(&ep->cfg);
  clmoe_tensor dzn = {0}, dz = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dz, CLMOE_F32, m, l), done);
  if (ep->cfg.latent > 0) {
    CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dzn, CLMOE_F32, m, l), done);
    CLMOE_TRY_GOTO(st, clmoe_linear_backward(ctx, &s->zn, &ep->dense.w_up, dy2, &dzn, &g->w_up, NULL, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_rmsnorm_backward(ctx, &s->z, &ep->dense.norm_gain, &s->rstd, &dzn, &dz,
                                              &g->norm_gain), done);
  } else {
    CLMOE_TRY_GOTO(st, clmoe_tensor_copy(&dz, dy2), done);
  }
  st = clmoe_tensor_read(&dz, dzh, clmoe_tensor_bytes(&dz));
done:
  clmoe_tensor_destroy(&dzn), clmoe_tensor_destroy(&dz);
  return st;
}

/* The combine's backward on the host: dp[t, s] = dz[t] . out[t k + s] and the copies'
 * output gradients p[t, s] dz[t]. */
static void combine_backward_host(const clmoe_moe_ep_saved *s, int64_t m, int64_t k, int64_t l,
                                  ep_bhost *h)
{
  for (int64_t t = 0; t < m; t++)
    for (int64_t j = 0; j < k; j++) {
      const float *dz = h->dz + t * l, *o = s->out + (t * k + j) * l;
      const float p = s->probs[t * k + j];
      float *dc = h->dcopy + (t * k + j) * l, dot = 0.0f;
      for (int64_t c = 0; c < l; c++) {
        dot += dz[c] * o[c];
        dc[c] = p * dz[c];
      }
      h->dp[t * k + j] = dot;
    }
}

/* The local experts' backward on the R received rows h->drecv [R, l], in place: dys in the
 * forward's expert order, the expert backward (dW_gate, dW_upp, dW_dn), dxs back to
 * received order. */
static clmoe_status experts_backward(clmoe_ctx *ctx, const clmoe_moe_ep_layer *ep,
                                     const clmoe_moe_saved *sv, clmoe_moe_grads *g, float *drecv)
{
  const int64_t R = sv->tokens, l = clmoe__moe_width(&ep->cfg), Rd = sv->disp.rows;
  if (ep->n_local == 0) return CLMOE_OK;
  if (R == 0) { /* no tokens for the local experts: their gradients are 0 */
    CLMOE_TRY(clmoe_tensor_fill(&g->w_gate, 0.0));
    CLMOE_TRY(clmoe_tensor_fill(&g->w_upp, 0.0));
    return clmoe_tensor_fill(&g->w_dn, 0.0);
  }
  clmoe_tensor dr = {0}, dys = {0}, dxs = {0}, dxr = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dr, CLMOE_F32, R, l), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dys, CLMOE_F32, Rd, l), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dxs, CLMOE_F32, Rd, l), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dxr, CLMOE_F32, R, l), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_write(&dr, drecv, clmoe_tensor_bytes(&dr)), done);
  CLMOE_TRY_GOTO(st, clmoe_moe_gather(ctx, &sv->disp, &dr, &dys), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_experts_backward(ctx, &ep->experts, sv, &dys, g, &dxs), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_gather_backward(ctx, &sv->disp, &dxs, &dxr), done);
  st = clmoe_tensor_read(&dxr, drecv, clmoe_tensor_bytes(&dxr));
done:
  clmoe_tensor_destroy(&dr), clmoe_tensor_destroy(&dys), clmoe_tensor_destroy(&dxs);
  clmoe_tensor_destroy(&dxr);
  return st;
}

/* dxl[t] = sum over slots in order of the copies' input gradients. */
static void gather_backward_host(int64_t m, int64_t k, int64_t l, ep_bhost *h)
{
  for (int64_t t = 0; t < m; t++) {
    float *dx = h->dxl + t * l;
    for (int64_t c = 0; c < l; c++) dx[c] = 0.0f;
    for (int64_t j = 0; j < k; j++) {
      const float *dc = h->dcopy + (t * k + j) * l;
      for (int64_t c = 0; c < l; c++) dx[c] += dc[c];
    }
  }
}

/* W_down, the router and the shared experts on this rank's tokens; dx starts here. */
static clmoe_status dense_backward(clmoe_ctx *ctx, const clmoe_moe_ep_layer *ep, const clmoe_tensor *x2,
                                   const clmoe_moe_saved *s, const clmoe_tensor *dy2, const ep_bhost *h,
                                   clmoe_moe_grads *g, clmoe_tensor *dx2)
{
  const int64_t m = s->tokens, l = clmoe__moe_width(&ep->cfg), k = ep->cfg.top_k;
  clmoe_tensor dxl = {0}, dp = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dxl, CLMOE_F32, m, l), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dp, CLMOE_F32, m, k), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_write(&dxl, h->dxl, clmoe_tensor_bytes(&dxl)), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_write(&dp, h->dp, clmoe_tensor_bytes(&dp)), done);
  if (ep->cfg.latent > 0)
    CLMOE_TRY_GOTO(st, clmoe_linear_backward(ctx, x2, &ep->dense.w_down, &dxl, dx2, &g->w_down, NULL, 0), done);
  else CLMOE_TRY_GOTO(st, clmoe_tensor_copy(dx2, &dxl), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_router_backward(ctx, &ep->dense, x2, s, &dp, &g->w_router, dx2),
                 done);
  if (ep->cfg.n_shared * ep->cfg.shared_ff > 0)
    st = clmoe_situ_ffn_backward(ctx, &ep->dense.shared, x2, &s->shared, dy2, &g->shared, 1.0f, dx2);
done:
  clmoe_tensor_destroy(&dxl), clmoe_tensor_destroy(&dp);
  return st;
}

/* A rank without tokens contributes nothing to the dense gradients. */
static clmoe_status zero_dense(clmoe_moe_grads *g)
{
  clmoe_tensor *t[] = {&g->w_router, &g->w_down, &g->norm_gain, &g->w_up, &g->shared.w_gate,
                       &g->shared.w_upp, &g->shared.w_dn};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (t[i]->buf) CLMOE_TRY(clmoe_tensor_fill(t[i], 0.0));
  return CLMOE_OK;
}

static clmoe_status want_backward(clmoe_dist *dist, const clmoe_moe_ep_layer *ep, const clmoe_tensor *x,
                                  const clmoe_moe_ep_saved *s, const clmoe_tensor *dy,
                                  const clmoe_moe_grads *g, const clmoe_tensor *dx, int64_t *m)
{
  static const char op[] = "clmoe_moe_ep_backward";
  CLMOE_TRY(clmoe__moe_ep_check_layer(op, dist, ep));
  const clmoe_moe_config *c = &ep->cfg;
  int64_t mdy, mdx;
  CLMOE_TRY(clmoe__moe_want_rows(x, op, "x", c->d, m));
  CLMOE_TRY(clmoe__moe_want_rows(dy, op, "dy", c->d, &mdy));
  CLMOE_TRY(clmoe__moe_want_rows(dx, op, "dx", c->d, &mdx));
  if (mdy != *m || mdx != *m) return clmoe__error(CLMOE_ERR_SHAPE, "%s: x, dy and dx differ in rows", op);
  if (!s || !s->plan || s->local.tokens != *m || !s->out || (s->experts.tokens > 0 && !s->experts.u.buf))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: saved must come from a train-mode forward on "
                        "the same %lld tokens", op, (long long)*m);
  if (!g) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: grads is NULL", op);
  CLMOE_TRY(clmoe__want_shape(&g->w_router, op, "grads w_router", 0, 2, c->n_experts, c->d, 0, 0));
  const int64_t l = clmoe__moe_width(c);
  if (c->latent > 0) {
    CLMOE_TRY(clmoe__want_shape(&g->w_down, op, "grads w_down", 0, 2, l, c->d, 0, 0));
    CLMOE_TRY(clmoe__want_shape(&g->norm_gain, op, "grads norm_gain", 0, 1, l, 0, 0, 0));
    CLMOE_TRY(clmoe__want_shape(&g->w_up, op, "grads w_up", 0, 2, c->d, l, 0, 0));
  }
  if (ep->n_local > 0) {
    CLMOE_TRY(clmoe__moe_want_buf(&g->w_gate, op, "grads w_gate", 3, ep->n_local, c->expert_ff,
                                  l));
    CLMOE_TRY(
        clmoe__moe_want_buf(&g->w_upp, op, "grads w_upp", 3, ep->n_local, c->expert_ff, l));
    CLMOE_TRY(
        clmoe__moe_want_buf(&g->w_dn, op, "grads w_dn", 3, ep->n_local, l, c->expert_ff));
  }
  if (c->n_shared * c->shared_ff > 0)
    CLMOE_TRY(clmoe__want_shape(&g->shared.w_gate, op, "grads shared.w_gate", 0, 2,
                                c->n_shared * c->shared_ff, c->d, 0, 0));
  return CLMOE_OK;
}

clmoe_status clmoe_moe_ep_backward(clmoe_ctx *ctx, clmoe_dist *dist, const clmoe_moe_ep_layer *ep,
                                   const clmoe_tensor *x, const clmoe_moe_ep_saved *s,
                                   const clmoe_tensor *dy, clmoe_moe_grads *g, clmoe_tensor *dx)
{
  int64_t m;
  CLMOE_TRY(want_backward(dist, ep, x, s, dy, g, dx, &m));
  const int64_t k = ep->cfg.top_k, l = clmoe__moe_width(&ep->cfg), d = ep->cfg.d, R = s->plan->recv_rows;
  ep_bhost h = {0};
  clmoe_tensor x2, dy2, dx2;
  clmoe_status st;
  CLMOE_TRY_GOTO(st, bhost_alloc(&h.dz, m * l), done);
  CLMOE_TRY_GOTO(st, bhost_alloc(&h.dp, m * k), done);
  CLMOE_TRY_GOTO(st, bhost_alloc(&h.dcopy, m * k * l), done);
  CLMOE_TRY_GOTO(st, bhost_alloc(&h.drecv, R * l), done);
  CLMOE_TRY_GOTO(st, bhost_alloc(&h.dxl, m * l), done);
  if (m > 0) {
    CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(x, &x2, m, d), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(dy, &dy2, m, d), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(dx, &dx2, m, d), done);
    CLMOE_TRY_GOTO(st, tail_backward(ctx, ep, &s->local, &dy2, g, h.dz), done);
    combine_backward_host(s, m, k, l, &h);
  }
  /* The copies' output gradients go where the copies went: a plan of one row per copy. */
  clmoe_ep_plan per_copy = *s->plan;
  per_copy.top_k = 1;
  CLMOE_TRY_GOTO(st, clmoe_ep_dispatch(dist, &per_copy, h.dcopy, l, h.drecv), done);
  CLMOE_TRY_GOTO(st, experts_backward(ctx, ep, &s->experts, g, h.drecv), done);
  CLMOE_TRY_GOTO(st, clmoe_ep_combine(dist, s->plan, h.drecv, l, h.dcopy), done);
  if (m > 0) {
    gather_backward_host(m, k, l, &h);
    st = dense_backward(ctx, ep, &x2, &s->local, &dy2, &h, g, &dx2);
  } else {
    st = zero_dense(g);
  }
done:
  ep_bhost_free(&h);
  return st;
}
