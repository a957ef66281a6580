/* The Stable LatentMoE layer, forward and backward: the phases in order, each a handful of
 * launches on the in-order queue (no host round trip on the grouped path). */
#include "moe_internal.h"

#include <string.h>
#include "clmoe/ops.h"
#include "tile/tile_internal.h" /* clmoe__infer_tile */

/* forward()'s infer: the expert kernels of clmoe_moe_forward_infer. */
enum { INFER_NO = 0, INFER_GROUPED = 1, INFER_TILE = 2 };

/* Slot of the timing struct for a phase, or NULL when not timing. */
#define PHASE(L, field) ((L)->timing ? &(L)->timing->field : NULL)

static int use_padded(const clmoe_moe_config *c) { return c->gemm == CLMOE_MOE_GEMM_PADDED; }

/* Router and, in train mode, this batch's balancing statistics. */
static clmoe_status forward_route(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x,
                                  int train, clmoe_moe_saved *s)
{
  const clmoe_moe_config *c = &L->cfg;
  const int64_t m = s->tokens, E = c->n_experts, k = c->top_k;
  const int qb = train && (c->balance == CLMOE_MOE_BALANCE_QB || c->balance == CLMOE_MOE_BALANCE_QB_HIST);
  if (qb && c->groups > 1)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_moe_forward: Quantile Balancing is not defined with "
                        "grouped selection (groups = %lld) in training; use balance sign or none",
                        (long long)c->groups);
  clmoe_tensor s_all = {0}, cutoff = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &s_all, CLMOE_F32, m, E), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &s->topk, CLMOE_I32, m, k), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &s->scores, CLMOE_F32, m, k), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &s->probs, CLMOE_F32, m, k), done);
  if (qb) CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &cutoff, CLMOE_F32, 1, &m), done);
  CLMOE_TRY_GOTO(st, clmoe_moe_route(ctx, L, x, &s_all, &s->topk, &s->scores, &s->probs,
                                     qb ? &cutoff : NULL), done);
  if (qb && c->balance == CLMOE_MOE_BALANCE_QB) {
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &s->thr, CLMOE_F32, 1, &E), done);
    CLMOE_TRY_GOTO(st, clmoe_moe_qb_threshold_exact(ctx, &s_all, &cutoff, k, &s->thr), done);
  } else if (qb) {
    const int64_t three = 3;
    CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &s->hist, CLMOE_I32, E, c->hist_bins), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &s->range, CLMOE_F32, 1, &three), done);
    CLMOE_TRY_GOTO(st, clmoe_moe_qb_histogram(ctx, &s_all, &cutoff, &L->bias, &s->hist, &s->range), done);
    s->hist_tokens = m;
  }
done:
  clmoe_tensor_destroy(&s_all);
  clmoe_tensor_destroy(&cutoff);
  return st;
}

static int has_shared(const clmoe_moe_config *c) { return c->n_shared * c->shared_ff > 0; }

/* Everything after the router: xin is x2 or its bf16 copy (dense_input) for W_down and the
 * shared experts. infer: the experts of clmoe_moe_forward_infer (INFER_GROUPED: grouped, bf16
 * stacks read as they are; INFER_TILE: the bf16 tile kernels). */
static clmoe_status forward_experts(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x2,
                                    const clmoe_tensor *xin, clmoe_tensor *y2, int train, int infer,
                                    clmoe_moe_saved *s, double *t0)
{
  const clmoe_moe_config *c = &L->cfg;
  const int64_t m = s->tokens, l = clmoe__moe_width(c), f = c->expert_ff;
  CLMOE_TRY(clmoe__moe_new2(ctx, &s->xl, CLMOE_F32, m, l));
  if (c->latent > 0) CLMOE_TRY(clmoe_linear(ctx, xin, &L->w_down, NULL, &s->xl));
  else CLMOE_TRY(clmoe_tensor_copy(&s->xl, x2)); /* the gather takes a buffer from its start */
  CLMOE_TRY(clmoe__moe_phase(ctx, PHASE(L, dense), t0));
  CLMOE_TRY(clmoe_moe_dispatch_create(ctx, &s->topk, c->n_experts, use_padded(c) && !infer, &s->disp));
  const int64_t R = s->disp.rows;
  CLMOE_TRY(clmoe__moe_new2(ctx, &s->xs, CLMOE_F32, R, l));
  CLMOE_TRY(clmoe_moe_gather(ctx, &s->disp, &s->xl, &s->xs));
  CLMOE_TRY(clmoe__moe_phase(ctx, PHASE(L, dispatch), t0));
  if (train) {
    CLMOE_TRY(clmoe__moe_new2(ctx, &s->u, CLMOE_F32, R, f));
    CLMOE_TRY(clmoe__moe_new2(ctx, &s->w, CLMOE_F32, R, f));
  }
  CLMOE_TRY(clmoe__moe_new2(ctx, &s->act, CLMOE_F32, R, f));
  CLMOE_TRY(clmoe__moe_new2(ctx, &s->ys, CLMOE_F32, R, l));
  if (infer)
    CLMOE_TRY(clmoe__moe_experts_forward_infer(ctx, L, &s->disp, &s->xs, &s->act, &s->ys, infer == INFER_TILE));
  else
    CLMOE_TRY(clmoe__moe_experts_forward(ctx, L, &s->disp, &s->xs, train ? &s->u : NULL, train ? &s->w : NULL,
                                         &s->act, &s->ys));
  CLMOE_TRY(clmoe__moe_phase(ctx, PHASE(L, experts), t0));
  CLMOE_TRY(clmoe__moe_new2(ctx, &s->z, CLMOE_F32, m, l));
  CLMOE_TRY(clmoe_moe_combine(ctx, &s->disp, &s->probs, &s->ys, &s->z));
  CLMOE_TRY(clmoe__moe_phase(ctx, PHASE(L, combine), t0));
  if (c->latent > 0) {
    CLMOE_TRY(clmoe_tensor_create(ctx, &s->rstd, CLMOE_F32, 1, &m));
    /* zn feeds only W_up: bf16 with its bf16 copy (the norm rounds it once) */
    CLMOE_TRY(clmoe__moe_new2(ctx, &s->zn, L->w_up.dtype == CLMOE_BF16 ? CLMOE_BF16 : CLMOE_F32, m, l));
    CLMOE_TRY(clmoe_rmsnorm(ctx, &s->z, &L->norm_gain, c->norm_eps, &s->zn, &s->rstd));
    CLMOE_TRY(clmoe_linear(ctx, &s->zn, &L->w_up, NULL, y2));
  } else {
    CLMOE_TRY(clmoe_tensor_copy(y2, &s->z)); /* y = the experts' weighted sum (+ shared) */
  }
  if (has_shared(c)) CLMOE_TRY(clmoe_situ_ffn_forward(ctx, &L->shared, xin, 1.0f, y2, train ? &s->shared : NULL));
  return clmoe__moe_phase(ctx, PHASE(L, dense), t0);
}

/* The input of W_down and the shared experts' products, x2 [m, d]: when every one of them has
 * a bf16 weight (a bf16 training step), one bf16 copy in *x16 that they all read (each would
 * round x2 itself: the same values), else x2 itself. */
static clmoe_status dense_input(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x2,
                                clmoe_tensor *x16, const clmoe_tensor **xin)
{
  const clmoe_moe_config *c = &L->cfg;
  const int down = c->latent > 0, shared = has_shared(c);
  const int b16 = (down || shared) && (!down || L->w_down.dtype == CLMOE_BF16) &&
                  (!shared || (L->shared.w_gate.dtype == CLMOE_BF16 && L->shared.w_upp.dtype == CLMOE_BF16));
  *xin = x2;
  if (!b16 || x2->dtype == CLMOE_BF16) return CLMOE_OK;
  CLMOE_TRY(clmoe_tensor_create(ctx, x16, CLMOE_BF16, 2, x2->shape));
  *xin = x16;
  return clmoe_tensor_copy(x16, x2);
}

/* Everything after the router. */
static clmoe_status forward_rest(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x2,
                                 clmoe_tensor *y2, int train, int infer, clmoe_moe_saved *s, double *t0)
{
  clmoe_tensor x16 = {0};
  const clmoe_tensor *xin;
  CLMOE_TRY(dense_input(ctx, L, x2, &x16, &xin));
  clmoe_status st = forward_experts(ctx, L, x2, xin, y2, train, infer, s, t0);
  clmoe_tensor_destroy(&x16); /* the in-order queue: back to the pool once enqueued */
  return st;
}

static clmoe_status forward(const char *op, clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x,
                            clmoe_tensor *y, clmoe_moe_saved *saved, int infer)
{
  if (!L || !L->w_router.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the layer is not created", op);
  const int64_t d = L->cfg.d;
  int64_t m, my;
  CLMOE_TRY(clmoe__moe_want_rows(x, op, "x", d, &m));
  CLMOE_TRY(clmoe__moe_want_rows(y, op, "y", d, &my));
  if (my != m) return clmoe__error(CLMOE_ERR_SHAPE, "%s: x and y differ in rows", op);
  if (m * L->cfg.top_k >= INT32_MAX || m * L->cfg.n_experts >= ((int64_t)1 << 40))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %lld tokens is too many for one call", op, (long long)m);
  clmoe_moe_saved local, *s = saved ? saved : &local;
  memset(s, 0, sizeof *s);
  s->tokens = m;
  if (m == 0) return CLMOE_OK;
  clmoe_tensor x2, y2;
  CLMOE_TRY(clmoe_tensor_view2d(x, &x2, m, d));
  CLMOE_TRY(clmoe_tensor_view2d(y, &y2, m, d));
  double t0 = clmoe__moe_now();
  clmoe_status st;
  CLMOE_TRY_GOTO(st, forward_route(ctx, L, &x2, saved != NULL, s), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_phase(ctx, PHASE(L, route), &t0), done);
  st = forward_rest(ctx, L, &x2, &y2, saved != NULL, infer, s, &t0);
done:
  if (st != CLMOE_OK || !saved) clmoe_moe_saved_destroy(s);
  return st;
}

clmoe_status clmoe_moe_forward(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x,
                               clmoe_tensor *y, clmoe_moe_saved *saved)
{
  return forward("clmoe_moe_forward", ctx, L, x, y, saved, 0);
}

clmoe_status clmoe_moe_forward_infer(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x,
                                     clmoe_tensor *y)
{
  /* fp32 stacks: clmoe_moe_forward itself (its padded choice included) */
  const int b16 = ctx && L && L->w_gate.dtype == CLMOE_BF16;
  return forward("clmoe_moe_forward_infer", ctx, L, x, y, NULL,
                 !b16 ? INFER_NO : clmoe__infer_tile(ctx) ? INFER_TILE : INFER_GROUPED);
}

/* The gradients of the layer's matrices must match the layer's shapes. */
static clmoe_status want_grads(const char *op, const clmoe_moe_layer *L, const clmoe_moe_grads *g)
{
  const clmoe_moe_config *c = &L->cfg;
  const int64_t E = c->n_experts, d = c->d, l = clmoe__moe_width(c), f = c->expert_ff;
  const int64_t S = c->n_shared * c->shared_ff;
  if (!g) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: grads is NULL", op);
  CLMOE_TRY(clmoe__want_shape(&g->w_router, op, "grads w_router", 0, 2, E, d, 0, 0));
  if (c->latent > 0) {
    CLMOE_TRY(clmoe__want_shape(&g->w_down, op, "grads w_down", 0, 2, l, d, 0, 0));
    CLMOE_TRY(clmoe__want_shape(&g->norm_gain, op, "grads norm_gain", 0, 1, l, 0, 0, 0));
    CLMOE_TRY(clmoe__want_shape(&g->w_up, op, "grads w_up", 0, 2, d, l, 0, 0));
  }
  CLMOE_TRY(clmoe__moe_want_buf(&g->w_gate, op, "grads w_gate", 3, E, f, l));
  CLMOE_TRY(clmoe__moe_want_buf(&g->w_upp, op, "grads w_upp", 3, E, f, l));
  CLMOE_TRY(clmoe__moe_want_buf(&g->w_dn, op, "grads w_dn", 3, E, l, f));
  if (S)
    CLMOE_TRY(clmoe__want_shape(&g->shared.w_gate, op, "grads shared.w_gate", 0, 2, S, d, 0, 0));
  return CLMOE_OK;
}

static clmoe_status zero_grads(clmoe_moe_grads *g)
{
  clmoe_tensor *t[] = {&g->w_router, &g->w_down, &g->w_gate, &g->w_upp, &g->w_dn, &g->norm_gain,
                       &g->w_up, &g->shared.w_gate, &g->shared.w_upp, &g->shared.w_dn};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (t[i]->buf) CLMOE_TRY(clmoe_tensor_fill(t[i], 0.0));
  return CLMOE_OK;
}

/* The backward's temporaries. */
typedef struct bwd_buf {
  clmoe_tensor dzn, dz, dp, dys, dxs, dxl; /* [m, l], [m, l], [m k], [R, l], [R, l], [m, l] */
  clmoe_tensor x16;                        /* [m, d] bf16: dense_input's copy of x, or none */
} bwd_buf;

static void bwd_buf_destroy(bwd_buf *b)
{
  clmoe_tensor *t[] = {&b->dzn, &b->dz, &b->dp, &b->dys, &b->dxs, &b->dxl, &b->x16};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
}

static clmoe_status backward_steps(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x2,
                                   const clmoe_moe_saved *s, const clmoe_tensor *dy2,
                                   clmoe_moe_grads *g, clmoe_tensor *dx2, bwd_buf *b)
{
  const clmoe_moe_config *c = &L->cfg;
  const int64_t m = s->tokens, l = clmoe__moe_width(c), R = s->disp.rows;
  double t0 = clmoe__moe_now();
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->dz, CLMOE_F32, m, l));
  if (c->latent > 0) { /* y = W_up zn (+ shared): dW_up, dzn, then the latent norm */
    CLMOE_TRY(clmoe__moe_new2(ctx, &b->dzn, CLMOE_F32, m, l));
    CLMOE_TRY(clmoe_linear_backward(ctx, &s->zn, &L->w_up, dy2, &b->dzn, &g->w_up, NULL, 0));
    CLMOE_TRY(clmoe_rmsnorm_backward(ctx, &s->z, &L->norm_gain, &s->rstd, &b->dzn, &b->dz, &g->norm_gain));
  } else { /* y = z (+ shared) */
    CLMOE_TRY(clmoe_tensor_copy(&b->dz, dy2));
  }
  CLMOE_TRY(clmoe__moe_phase(ctx, PHASE(L, dense), &t0));
  /* combine: dp and the expert outputs' gradient */
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->dp, CLMOE_F32, m, c->top_k));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->dys, CLMOE_F32, R, l));
  CLMOE_TRY(clmoe__moe_combine_backward(ctx, &s->disp, &s->probs, &s->ys, &b->dz, &b->dp, &b->dys));
  CLMOE_TRY(clmoe__moe_phase(ctx, PHASE(L, combine), &t0));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->dxs, CLMOE_F32, R, l));
  CLMOE_TRY(clmoe__moe_experts_backward(ctx, L, s, &b->dys, g, &b->dxs));
  CLMOE_TRY(clmoe__moe_phase(ctx, PHASE(L, experts), &t0));
  CLMOE_TRY(clmoe__moe_new2(ctx, &b->dxl, CLMOE_F32, m, l));
  CLMOE_TRY(clmoe__moe_gather_backward(ctx, &s->disp, &b->dxs, &b->dxl));
  CLMOE_TRY(clmoe__moe_phase(ctx, PHASE(L, dispatch), &t0));
  /* xl = W_down x (or x); dx starts here (beta 0), every later term adds in a fixed order */
  const clmoe_tensor *xin; /* x2 or its bf16 copy for the dW of W_down and the shared experts */
  CLMOE_TRY(dense_input(ctx, L, x2, &b->x16, &xin));
  if (c->latent > 0) CLMOE_TRY(clmoe_linear_backward(ctx, xin, &L->w_down, &b->dxl, dx2, &g->w_down, NULL, 0));
  else CLMOE_TRY(clmoe_tensor_copy(dx2, &b->dxl));
  CLMOE_TRY(clmoe__moe_phase(ctx, PHASE(L, dense), &t0));
  CLMOE_TRY(clmoe__moe_router_backward(ctx, L, x2, s, &b->dp, &g->w_router, dx2));
  CLMOE_TRY(clmoe__moe_phase(ctx, PHASE(L, route), &t0));
  if (has_shared(c)) CLMOE_TRY(clmoe_situ_ffn_backward(ctx, &L->shared, xin, &s->shared, dy2, &g->shared, 1.0f, dx2));
  return clmoe__moe_phase(ctx, PHASE(L, dense), &t0);
}

clmoe_status clmoe_moe_backward(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x,
                                const clmoe_moe_saved *s, const clmoe_tensor *dy,
                                clmoe_moe_grads *g, clmoe_tensor *dx)
{
  static const char op[] = "clmoe_moe_backward";
  if (!L || !L->w_router.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the layer is not created", op);
  const int64_t d = L->cfg.d;
  int64_t m, mdy, mdx;
  CLMOE_TRY(clmoe__moe_want_rows(x, op, "x", d, &m));
  CLMOE_TRY(clmoe__moe_want_rows(dy, op, "dy", d, &mdy));
  CLMOE_TRY(clmoe__moe_want_rows(dx, op, "dx", d, &mdx));
  CLMOE_TRY(want_grads(op, L, g));
  if (!s || s->tokens != m || (m > 0 && !s->u.buf))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: saved must come from a train-mode forward on "
                        "the same %lld tokens", op, (long long)m);
  if (mdy != m || mdx != m) return clmoe__error(CLMOE_ERR_SHAPE, "%s: x, dy and dx differ in rows", op);
  if (dx->buf == x->buf || dx->buf == dy->buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: dx must not share a buffer with x or dy", op);
  if (m == 0) return zero_grads(g);
  clmoe_tensor x2, dy2, dx2;
  CLMOE_TRY(clmoe_tensor_view2d(x, &x2, m, d));
  CLMOE_TRY(clmoe_tensor_view2d(dy, &dy2, m, d));
  CLMOE_TRY(clmoe_tensor_view2d(dx, &dx2, m, d));
  bwd_buf b;
  memset(&b, 0, sizeof b);
  clmoe_status st = backward_steps(ctx, L, &x2, s, &dy2, g, &dx2, &b);
  bwd_buf_destroy(&b);
  return st;
}
