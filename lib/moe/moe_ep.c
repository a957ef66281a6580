/* The forward of the LatentMoE layer with its routed experts spread over MPI ranks
 * (include/clmoe/moe_ep.h; the rank's parts are built in moe_ep_build.c). The exchange itself
 * is lib/dist/dist_exchange.c; the expert products are the single-rank grouped / padded code
 * of lib/moe/moe_experts.c run on a sub-layer of the local experts. */
#include "clmoe/moe_ep.h"

#include <stdlib.h>
#include <string.h>

#include "clmoe/dist_exchange.h"
#include "clmoe/ops.h"
#include "moe_internal.h"

/* ---- the forward ------------------------------------------------------------------------- */

/* Host buffers of one forward. */
typedef struct ep_host {
  int32_t *topk;  /* [m k] chosen experts */
  float *probs;   /* [m k] routing weights */
  float *xl;      /* [m, l] W_down x */
  float *recv;    /* [R, l] received rows, then the local experts' outputs in place */
  float *out;     /* [m k, l] outputs back in routed copy order */
  float *z;       /* [m, l] the weighted combine */
  int32_t *local; /* [R] local expert of each received row */
} ep_host;

static void ep_host_free(ep_host *h)
{
  free(h->topk), free(h->probs), free(h->xl), free(h->recv), free(h->out), free(h->z), free(h->local);
  memset(h, 0, sizeof *h);
}

/* malloc of n elements of `size` bytes (at least one, so that 0 rows is not NULL). */
static clmoe_status host_alloc(void **p, int64_t n, size_t size)
{
  *p = malloc((size_t)(n > 0 ? n : 1) * size);
  if (!*p) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_moe_ep_forward: %lld host rows",
                               (long long)n);
  return CLMOE_OK;
}

/* Router and W_down on this rank's tokens, read back to the host. train: topk, scores and
 * probs stay in sv (the router's backward needs them). */
static clmoe_status route_local(clmoe_ctx *ctx, const clmoe_moe_ep_layer *ep, const clmoe_tensor *x2,
                                int64_t m, int train, ep_host *h, clmoe_moe_saved *sv)
{
  const clmoe_moe_config *c = &ep->cfg;
  const int64_t k = c->top_k, E = c->n_experts, l = clmoe__moe_width(c);
  /* Quantile Balancing across ranks works from histograms (summed by the caller with
   * clmoe_dist_sum_qb_histogram): exact QB would need every rank's scores. */
  const int hist = train && (c->balance == CLMOE_MOE_BALANCE_QB || c->balance == CLMOE_MOE_BALANCE_QB_HIST);
  clmoe_tensor s_all = {0}, xl = {0}, cutoff = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &s_all, CLMOE_F32, m, E), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &sv->topk, CLMOE_I32, m, k), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &sv->scores, CLMOE_F32, m, k), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &sv->probs, CLMOE_F32, m, k), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &xl, CLMOE_F32, m, l), done);
  if (hist) CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &cutoff, CLMOE_F32, 1, &m), done);
  CLMOE_TRY_GOTO(st, clmoe_moe_route(ctx, &ep->dense, x2, &s_all, &sv->topk, &sv->scores, &sv->probs,
                                     hist ? &cutoff : NULL), done);
  if (hist) {
    const int64_t three = 3, bins = c->hist_bins > 0 ? c->hist_bins : 1000;
    CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &sv->hist, CLMOE_I32, E, bins), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &sv->range, CLMOE_F32, 1, &three), done);
    CLMOE_TRY_GOTO(st, clmoe_moe_qb_histogram(ctx, &s_all, &cutoff, &ep->dense.bias, &sv->hist, &sv->range), done);
    sv->hist_tokens = m;
  }
  if (c->latent > 0) CLMOE_TRY_GOTO(st, clmoe_linear(ctx, x2, &ep->dense.w_down, NULL, &xl), done);
  else CLMOE_TRY_GOTO(st, clmoe_tensor_copy(&xl, x2), done); /* no latent projection */
  CLMOE_TRY_GOTO(st, clmoe_tensor_read(&sv->topk, h->topk, clmoe_tensor_bytes(&sv->topk)), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_read(&sv->probs, h->probs, clmoe_tensor_bytes(&sv->probs)), done);
  st = clmoe_tensor_read(&xl, h->xl, clmoe_tensor_bytes(&xl));
done:
  clmoe_tensor_destroy(&s_all), clmoe_tensor_destroy(&xl), clmoe_tensor_destroy(&cutoff);
  return st;
}

/* The local experts on the R received rows h->recv [R, l], in place: grouped by local
 * expert with the single-rank dispatch, the expert products, and back to received order
 * with a combine of weight 1 (exact). The dispatch, xs, act (and in train mode u, w) stay
 * in sv for the backward. bf16 stacks: in train mode, or with `tile` (a bf16 training
 * step's inference forward), the bf16 copies of a training step on the tile path of
 * moe_experts_bf16.c (bf16 operands, fp32 accumulation), as the single-rank layer runs
 * them; otherwise (an inference model) read as they are by the grouped kernels of
 * clmoe_moe_forward_infer: bf16 weights times fp32 rows, as every generation path. */
static clmoe_status experts_local(clmoe_ctx *ctx, const clmoe_moe_ep_layer *ep, const clmoe_ep_plan *plan,
                                  ep_host *h, int train, int tile, clmoe_moe_saved *sv)
{
  const clmoe_moe_layer *X = &ep->experts;
  const int64_t R = plan->recv_rows, l = clmoe__moe_width(&ep->cfg), f = ep->cfg.expert_ff;
  const int narrow = X->w_gate.dtype == CLMOE_BF16 && !train && !tile;
  sv->tokens = R;
  if (R == 0) return CLMOE_OK;
  for (int64_t i = 0; i < R; i++) {
    const int32_t e = plan->recv_expert[i];
    h->local[i] = e >= 0 && e < ep->cfg.n_experts ? ep->local_index[e] : -1;
    if (h->local[i] < 0)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_moe_ep_forward: rank %d received a row "
                          "for expert %d, which it does not hold (map differs between ranks?)",
                          ep->rank, (int)e);
  }
  clmoe_tensor ones = {0}, xr = {0}, yr = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &sv->topk, CLMOE_I32, R, 1), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_write(&sv->topk, h->local, clmoe_tensor_bytes(&sv->topk)), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &ones, CLMOE_F32, R, 1), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_fill(&ones, 1.0), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &xr, CLMOE_F32, R, l), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_write(&xr, h->recv, clmoe_tensor_bytes(&xr)), done);
  CLMOE_TRY_GOTO(st, clmoe_moe_dispatch_create(ctx, &sv->topk, X->cfg.n_experts,
                                               !narrow && X->cfg.gemm == CLMOE_MOE_GEMM_PADDED, &sv->disp), done);
  const int64_t Rd = sv->disp.rows;
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &sv->xs, CLMOE_F32, Rd, l), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &sv->act, CLMOE_F32, Rd, f), done);
  if (train) {
    CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &sv->u, CLMOE_F32, Rd, f), done);
    CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &sv->w, CLMOE_F32, Rd, f), done);
  }
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &sv->ys, CLMOE_F32, Rd, l), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &yr, CLMOE_F32, R, l), done);
  CLMOE_TRY_GOTO(st, clmoe_moe_gather(ctx, &sv->disp, &xr, &sv->xs), done);
  if (narrow) CLMOE_TRY_GOTO(st, clmoe__moe_experts_forward_infer(ctx, X, &sv->disp, &sv->xs, &sv->act, &sv->ys, 0), done);
  else
    CLMOE_TRY_GOTO(st,
                   clmoe__moe_experts_forward(ctx, X, &sv->disp, &sv->xs, train ? &sv->u : NULL,
                                              train ? &sv->w : NULL, &sv->act, &sv->ys),
                   done);
  CLMOE_TRY_GOTO(st, clmoe_moe_combine(ctx, &sv->disp, &ones, &sv->ys, &yr), done);
  st = clmoe_tensor_read(&yr, h->recv, clmoe_tensor_bytes(&yr));
done:
  clmoe_tensor_destroy(&ones), clmoe_tensor_destroy(&xr), clmoe_tensor_destroy(&yr);
  return st;
}

/* z[t] = sum over slots in order of p[t, s] out[t k + s]: the order of clmoe_moe_combine. */
static void combine_host(const ep_host *h, int64_t m, int64_t k, int64_t l)
{
  for (int64_t t = 0; t < m; t++) {
    float *z = h->z + t * l;
    for (int64_t j = 0; j < l; j++) z[j] = 0.0f;
    for (int64_t s = 0; s < k; s++) {
      const float p = h->probs[t * k + s];
      const float *o = h->out + (t * k + s) * l;
      for (int64_t j = 0; j < l; j++) z[j] += p * o[j];
    }
  }
}

/* The dense tail on the device: y = W_up RMSNorm_gain(z) + Shared(x) (latent 0: y = z +
 * Shared(x)); z, its norm and the shared experts' intermediates stay in sv. */
static clmoe_status dense_tail(clmoe_ctx *ctx, const clmoe_moe_ep_layer *ep, const clmoe_tensor *x2,
                               int64_t m, const float *zh, clmoe_tensor *y2, int train,
                               clmoe_moe_saved *sv)
{
  const clmoe_moe_config *c = &ep->cfg;
  const int64_t l = clmoe__moe_width(c);
  CLMOE_TRY(clmoe__moe_new2(ctx, &sv->z, CLMOE_F32, m, l));
  CLMOE_TRY(clmoe_tensor_write(&sv->z, zh, clmoe_tensor_bytes(&sv->z)));
  if (c->latent > 0) {
    /* zn feeds only W_up: bf16 with its bf16 copy (the norm rounds it once), as the
     * single-rank layer keeps it */
    CLMOE_TRY(clmoe__moe_new2(ctx, &sv->zn, ep->dense.w_up.dtype == CLMOE_BF16 ? CLMOE_BF16 : CLMOE_F32, m, l));
    CLMOE_TRY(clmoe_tensor_create(ctx, &sv->rstd, CLMOE_F32, 1, &m));
    CLMOE_TRY(clmoe_rmsnorm(ctx, &sv->z, &ep->dense.norm_gain, c->norm_eps, &sv->zn, &sv->rstd));
    CLMOE_TRY(clmoe_linear(ctx, &sv->zn, &ep->dense.w_up, NULL, y2));
  } else {
    CLMOE_TRY(clmoe_tensor_copy(y2, &sv->z));
  }
  if (c->n_shared * c->shared_ff > 0)
    CLMOE_TRY(clmoe_situ_ffn_forward(ctx, &ep->dense.shared, x2, 1.0f, y2, train ? &sv->shared : NULL));
  return CLMOE_OK;
}

clmoe_status clmoe__moe_ep_check_layer(const char *op, clmoe_dist *dist,
                                       const clmoe_moe_ep_layer *ep)
{
  if (!ep || !ep->map || !ep->dense.w_router.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the layer is not built", op);
  if (ep->map->ranks != clmoe_dist_size(dist) || ep->rank != clmoe_dist_rank(dist))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the layer is rank %d of a %d-rank map, the job "
                        "rank %d of %d", op, ep->rank, ep->map->ranks, clmoe_dist_rank(dist),
                        clmoe_dist_size(dist));
  return CLMOE_OK;
}

static clmoe_status want_forward(clmoe_dist *dist, const clmoe_moe_ep_layer *ep, const clmoe_tensor *x,
                                 const clmoe_tensor *y, int64_t *m)
{
  static const char op[] = "clmoe_moe_ep_forward";
  CLMOE_TRY(clmoe__moe_ep_check_layer(op, dist, ep));
  int64_t my;
  CLMOE_TRY(clmoe__moe_want_rows(x, op, "x", ep->cfg.d, m));
  CLMOE_TRY(clmoe__moe_want_rows(y, op, "y", ep->cfg.d, &my));
  if (my != *m) return clmoe__error(CLMOE_ERR_SHAPE, "%s: x and y differ in rows", op);
  if (*m * ep->cfg.top_k >= INT32_MAX)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %lld tokens is too many for one call", op, (long long)*m);
  return CLMOE_OK;
}

void clmoe_moe_ep_saved_destroy(clmoe_moe_ep_saved *s)
{
  if (!s) return;
  clmoe_moe_saved_destroy(&s->local);
  clmoe_moe_saved_destroy(&s->experts);
  clmoe_ep_plan_destroy(s->plan);
  free(s->probs);
  free(s->out);
  memset(s, 0, sizeof *s);
}

clmoe_status clmoe_moe_ep_forward(clmoe_ctx *ctx, clmoe_dist *dist, const clmoe_moe_ep_layer *ep,
                                  const clmoe_tensor *x, clmoe_tensor *y, clmoe_moe_ep_saved *saved)
{
  return clmoe__moe_ep_forward(ctx, dist, ep, x, y, saved, 0);
}

clmoe_status clmoe__moe_ep_forward(clmoe_ctx *ctx, clmoe_dist *dist, const struct clmoe_moe_ep_layer *ep,
                                   const clmoe_tensor *x, clmoe_tensor *y, struct clmoe_moe_ep_saved *saved,
                                   int tile)
{
  int64_t m;
  CLMOE_TRY(want_forward(dist, ep, x, y, &m));
  const int64_t k = ep->cfg.top_k, l = clmoe__moe_width(&ep->cfg), d = ep->cfg.d;
  const int train = saved != NULL;
  clmoe_moe_ep_saved local, *s = train ? saved : &local;
  memset(s, 0, sizeof *s);
  s->local.tokens = m;
  ep_host h = {0};
  clmoe_tensor x2, y2;
  clmoe_status st;
  CLMOE_TRY_GOTO(st, host_alloc((void **)&h.topk, m * k, sizeof *h.topk), done);
  CLMOE_TRY_GOTO(st, host_alloc((void **)&h.probs, m * k, sizeof *h.probs), done);
  CLMOE_TRY_GOTO(st, host_alloc((void **)&h.xl, m * l, sizeof *h.xl), done);
  CLMOE_TRY_GOTO(st, host_alloc((void **)&h.out, m * k * l, sizeof *h.out), done);
  CLMOE_TRY_GOTO(st, host_alloc((void **)&h.z, m * l, sizeof *h.z), done);
  if (m > 0) {
    CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(x, &x2, m, d), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(y, &y2, m, d), done);
    CLMOE_TRY_GOTO(st, route_local(ctx, ep, &x2, m, train, &h, &s->local), done);
  }
  /* From here every rank takes part in the exchanges, with or without tokens. */
  CLMOE_TRY_GOTO(st, clmoe_ep_plan_create(dist, ep->map, h.topk, m, (int)k, &s->plan), done);
  CLMOE_TRY_GOTO(st, host_alloc((void **)&h.recv, s->plan->recv_rows * l, sizeof *h.recv), done);
  CLMOE_TRY_GOTO(st, host_alloc((void **)&h.local, s->plan->recv_rows, sizeof *h.local), done);
  CLMOE_TRY_GOTO(st, clmoe_ep_dispatch(dist, s->plan, h.xl, l, h.recv), done);
  CLMOE_TRY_GOTO(st, experts_local(ctx, ep, s->plan, &h, train, tile, &s->experts), done);
  CLMOE_TRY_GOTO(st, clmoe_ep_combine(dist, s->plan, h.recv, l, h.out), done);
  if (m > 0) {
    combine_host(&h, m, k, l);
    CLMOE_TRY_GOTO(st, dense_tail(ctx, ep, &x2, m, h.z, &y2, train, &s->local), done);
  }
  if (train) { /* the backward's host copies */
    s->probs = h.probs, s->out = h.out;
    h.probs = NULL, h.out = NULL;
  }
done:
  if (st != CLMOE_OK || !train) clmoe_moe_ep_saved_destroy(s);
  ep_host_free(&h);
  return st;
}
