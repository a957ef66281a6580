/* MoE router (kernels_cl/moe/moe_route.cl): sigmoid scores, top-k of s + b, combine weights and
 * their gradient; the balancing rules (Quantile Balancing exact or by histogram, the sign
 * rule) and the load statistics. */
#include "moe_internal.h"

#include <stdlib.h>
#include <string.h>
#include "clmoe/ops.h"

/* t: contiguous i32 [a, b] at offset 0. */
static clmoe_status want_i32(const clmoe_tensor *t, const char *op, const char *name, int64_t a, int64_t b)
{
  char desc[96];
  if (!t) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  CLMOE_TRY(clmoe__want(t, CLMOE_I32, op, name));
  if (t->ndim != 2 || t->shape[0] != a || t->shape[1] != b || t->offset != 0)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s is %s, expected [%lld, %lld] i32 (not a view at an "
                        "offset)", op, name, clmoe_tensor_describe(t, desc, sizeof desc),
                        (long long)a, (long long)b);
  return CLMOE_OK;
}

clmoe_status clmoe_moe_route(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x,
                             clmoe_tensor *s_all, clmoe_tensor *topk, clmoe_tensor *scores,
                             clmoe_tensor *probs, clmoe_tensor *cutoff)
{
  static const char op[] = "clmoe_moe_route";
  const int64_t E = L->cfg.n_experts, k = L->cfg.top_k, d = L->cfg.d;
  int64_t m;
  CLMOE_TRY(clmoe__moe_want_rows(x, op, "x", d, &m));
  CLMOE_TRY(clmoe__moe_want_buf(s_all, op, "s_all", 2, m, E, 0));
  CLMOE_TRY(want_i32(topk, op, "topk", m, k));
  CLMOE_TRY(clmoe__moe_want_buf(scores, op, "scores", 2, m, k, 0));
  CLMOE_TRY(clmoe__moe_want_buf(probs, op, "probs", 2, m, k, 0));
  const clmoe_moe_config *c = &L->cfg;
  const int64_t G = c->groups > 1 ? c->groups : 1, TG = c->topk_groups > 0 ? c->topk_groups : G;
  if (G > 1 && (G > CLMOE_MOE_MAX_GROUPS || E % G || E / G < 2 || TG > G || k > TG * (E / G)))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: groups %lld, topk_groups %lld do not fit %lld "
                        "experts and top_k %lld", op, (long long)G, (long long)TG, (long long)E, (long long)k);
  if (cutoff) {
    CLMOE_TRY(clmoe__moe_want_buf(cutoff, op, "cutoff", 1, m, 0, 0));
    if (k >= E)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: a cut-off needs top_k + 1 <= n_experts", op);
    if (G > 1)
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: the QB cut-off is not defined with grouped "
                          "selection (groups = %lld)", op, (long long)G);
  }
  if (m == 0) return CLMOE_OK;
  if (m * k >= INT32_MAX)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %lld tokens x top_k %lld exceeds 2^31", op, (long long)m,
                        (long long)k);
  clmoe_tensor x2;
  CLMOE_TRY(clmoe_tensor_view2d(x, &x2, m, d));
  CLMOE_TRY(clmoe_linear(ctx, &x2, &L->w_router, NULL, s_all));
  cl_kernel kr;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_ROUTE, "moe_route", &kr));
  cl_int im = (cl_int)m, iE = (cl_int)E, ik = (cl_int)k, ik1 = (cl_int)(cutoff ? k + 1 : k);
  cl_mem cbuf = cutoff ? cutoff->buf : probs->buf; /* never written when k1 = k */
  cl_int iG = (cl_int)G, iTG = (cl_int)TG, renorm = !c->no_renormalize;
  cl_float scale = c->routed_scale != 0.0f ? c->routed_scale : 1.0f;
  CLMOE_TRY(clmoe__args(kr, 14, KA(s_all->buf), KA(L->bias.buf), KA(im), KA(iE), KA(ik), KA(ik1),
                        KA(topk->buf), KA(scores->buf), KA(probs->buf), KA(cbuf), KA(iG), KA(iTG),
                        KA(renorm), KA(scale)));
  return clmoe__launch_groups(ctx, kr, m, 64); /* MOE_ROUTE_WG of kernels_cl/moe/moe_route.cl */
}

/* s_all [m, E] and cutoff [m] of a QB statistic. */
static clmoe_status want_margins(const char *op, const clmoe_tensor *s_all, const clmoe_tensor *cutoff,
                                 int64_t *m, int64_t *E)
{
  char desc[96];
  if (!s_all || !cutoff) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: s_all and cutoff are required", op);
  if (s_all->ndim != 2)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: s_all %s must be [m, E]", op,
                        clmoe_tensor_describe(s_all, desc, sizeof desc));
  *m = s_all->shape[0], *E = s_all->shape[1];
  CLMOE_TRY(clmoe__moe_want_buf(s_all, op, "s_all", 2, *m, *E, 0));
  CLMOE_TRY(clmoe__moe_want_buf(cutoff, op, "cutoff", 1, *m, 0, 0));
  if (*m < 1 || *m >= INT32_MAX || *E >= INT32_MAX)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: s_all %s: 1 <= m < 2^31 tokens needed", op,
                        clmoe_tensor_describe(s_all, desc, sizeof desc));
  return CLMOE_OK;
}

/* r = floor(tokens k / E) + 1, which must be a rank among `tokens` margins. */
static clmoe_status qb_rank(const char *op, int64_t tokens, int64_t k, int64_t E, cl_int *r)
{
  if (k < 1 || k >= E || tokens < 1 || tokens * k / E + 1 >= INT32_MAX)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: top_k %lld with %lld experts and %lld tokens "
                        "(1 <= top_k < E and tokens >= 1 needed)", op, (long long)k, (long long)E,
                        (long long)tokens);
  *r = (cl_int)(tokens * k / E + 1);
  return CLMOE_OK;
}

/* mt [E, m]: the margins s_all - cutoff transposed, one row per expert. */
static clmoe_status margins_t(clmoe_ctx *ctx, const clmoe_tensor *s_all, const clmoe_tensor *cutoff,
                              int64_t m, int64_t E, clmoe_tensor *mt)
{
  CLMOE_TRY(clmoe__moe_new2(ctx, mt, CLMOE_F32, E, m));
  cl_kernel k;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_ROUTE, "moe_margins_t", &k));
  cl_int im = (cl_int)m, iE = (cl_int)E;
  CLMOE_TRY(clmoe__args(k, 5, KA(s_all->buf), KA(cutoff->buf), KA(im), KA(iE), KA(mt->buf)));
  size_t local[2] = {16, 16}, global[2] = {(size_t)E, (size_t)m};
  return clmoe__launch(ctx, k, 2, global, local);
}

clmoe_status clmoe_moe_qb_threshold_exact(clmoe_ctx *ctx, const clmoe_tensor *s_all,
                                          const clmoe_tensor *cutoff, int64_t top_k, clmoe_tensor *thr)
{
  static const char op[] = "clmoe_moe_qb_threshold_exact";
  int64_t m, E;
  cl_int r;
  CLMOE_TRY(want_margins(op, s_all, cutoff, &m, &E));
  CLMOE_TRY(clmoe__moe_want_buf(thr, op, "thr", 1, E, 0, 0));
  CLMOE_TRY(qb_rank(op, m, top_k, E, &r));
  cl_kernel k;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_ROUTE, "moe_qb_select", &k));
  clmoe_tensor mt = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, margins_t(ctx, s_all, cutoff, m, E, &mt), done);
  size_t local;
  CLMOE_TRY_GOTO(st, clmoe__row_local(ctx, k, m, &local), done);
  cl_int im = (cl_int)m;
  CLMOE_TRY_GOTO(st, clmoe__args(k, 4, KA(mt.buf), KA(im), KA(r), KA(thr->buf)), done);
  st = clmoe__launch_groups(ctx, k, E, local);
done:
  clmoe_tensor_destroy(&mt); /* the queue is in order: safe to reuse at once */
  return st;
}

clmoe_status clmoe_moe_qb_histogram(clmoe_ctx *ctx, const clmoe_tensor *s_all, const clmoe_tensor *cutoff,
                                    const clmoe_tensor *bias, clmoe_tensor *counts, clmoe_tensor *range)
{
  static const char op[] = "clmoe_moe_qb_histogram";
  char desc[96];
  int64_t m, E;
  CLMOE_TRY(want_margins(op, s_all, cutoff, &m, &E));
  CLMOE_TRY(clmoe__moe_want_buf(bias, op, "bias", 1, E, 0, 0));
  CLMOE_TRY(clmoe__moe_want_buf(range, op, "range", 1, 3, 0, 0));
  if (!counts || counts->ndim != 2 || counts->shape[0] != E || counts->dtype != CLMOE_I32 ||
      counts->shape[1] < 2 || counts->shape[1] > CLMOE_MOE_MAX_HIST_BINS || counts->offset != 0 ||
      !clmoe_tensor_is_contiguous(counts))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: counts %s must be [E = %lld, bins] i32 with 2 <= bins <= %d",
                        op, counts ? clmoe_tensor_describe(counts, desc, sizeof desc) : "NULL",
                        (long long)E, CLMOE_MOE_MAX_HIST_BINS);
  const cl_int bins = (cl_int)counts->shape[1];
  if ((uint64_t)bins * 4 > ctx->caps.local_mem_bytes)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %d bins do not fit the device's %llu bytes of local "
                        "memory", op, (int)bins, (unsigned long long)ctx->caps.local_mem_bytes);
  cl_kernel kr, kh;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_ROUTE, "moe_qb_range", &kr));
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_ROUTE, "moe_qb_hist", &kh));
  cl_int im = (cl_int)m, iE = (cl_int)E;
  CLMOE_TRY(clmoe__args(kr, 4, KA(bias->buf), KA(iE), KA(bins), KA(range->buf)));
  CLMOE_TRY(clmoe__launch1d(ctx, kr, 1));
  clmoe_tensor mt = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, margins_t(ctx, s_all, cutoff, m, E, &mt), done);
  size_t local;
  CLMOE_TRY_GOTO(st, clmoe__row_local(ctx, kh, m, &local), done);
  CLMOE_TRY_GOTO(st, clmoe__args(kh, 6, KA(mt.buf), KA(im), KA(range->buf), KA(bins), KA(counts->buf),
                                 KA_LOCAL((size_t)bins * sizeof(cl_uint))), done);
  st = clmoe__launch_groups(ctx, kh, E, local);
done:
  clmoe_tensor_destroy(&mt);
  return st;
}

clmoe_status clmoe_moe_qb_threshold_hist(clmoe_ctx *ctx, const clmoe_tensor *counts,
                                         const clmoe_tensor *range, int64_t tokens, int64_t top_k,
                                         clmoe_tensor *thr)
{
  static const char op[] = "clmoe_moe_qb_threshold_hist";
  if (!counts || counts->ndim != 2 || counts->dtype != CLMOE_I32 || counts->offset != 0 ||
      !clmoe_tensor_is_contiguous(counts) || counts->shape[1] < 1)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: counts must be a contiguous [E, bins] i32 tensor", op);
  const int64_t E = counts->shape[0];
  cl_int r, bins = (cl_int)counts->shape[1], iE = (cl_int)E;
  CLMOE_TRY(clmoe__moe_want_buf(range, op, "range", 1, 3, 0, 0));
  CLMOE_TRY(clmoe__moe_want_buf(thr, op, "thr", 1, E, 0, 0));
  CLMOE_TRY(qb_rank(op, tokens, top_k, E, &r));
  cl_kernel k;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_ROUTE, "moe_qb_from_hist", &k));
  CLMOE_TRY(clmoe__args(k, 6, KA(counts->buf), KA(iE), KA(bins), KA(range->buf), KA(r), KA(thr->buf)));
  return clmoe__launch1d(ctx, k, (size_t)E);
}

clmoe_status clmoe_moe_bias_from_threshold(clmoe_ctx *ctx, const clmoe_tensor *thr, clmoe_tensor *bias)
{
  static const char op[] = "clmoe_moe_bias_from_threshold";
  if (!thr || thr->ndim != 1) return clmoe__error(CLMOE_ERR_SHAPE, "%s: thr must be [E]", op);
  const int64_t E = thr->shape[0];
  CLMOE_TRY(clmoe__moe_want_buf(thr, op, "thr", 1, E, 0, 0));
  CLMOE_TRY(clmoe__moe_want_buf(bias, op, "bias", 1, E, 0, 0));
  if (E == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_ROUTE, "moe_bias_from_thr", &k));
  cl_int iE = (cl_int)E;
  CLMOE_TRY(clmoe__args(k, 3, KA(thr->buf), KA(iE), KA(bias->buf)));
  return clmoe__launch1d(ctx, k, 1);
}

clmoe_status clmoe_moe_balance_update(clmoe_ctx *ctx, clmoe_moe_layer *L, const clmoe_moe_saved *s)
{
  static const char op[] = "clmoe_moe_balance_update";
  const clmoe_moe_config *c = &L->cfg;
  if (!s) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: saved is NULL", op);
  if (c->balance == CLMOE_MOE_BALANCE_NONE || s->tokens == 0) return CLMOE_OK;
  if (c->balance == CLMOE_MOE_BALANCE_SIGN) {
    if (!s->disp.offsets.buf)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: saved holds no dispatch (not from a "
                          "train-mode forward)", op);
    cl_kernel k;
    CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_ROUTE, "moe_sign_update", &k));
    cl_int iE = (cl_int)c->n_experts, mk = (cl_int)(s->tokens * c->top_k);
    cl_float g = c->sign_gamma;
    CLMOE_TRY(clmoe__args(k, 5, KA(s->disp.offsets.buf), KA(iE), KA(mk), KA(g), KA(L->bias.buf)));
    return clmoe__launch1d(ctx, k, (size_t)c->n_experts);
  }
  if (c->balance == CLMOE_MOE_BALANCE_QB) {
    if (!s->thr.buf)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: saved holds no QB threshold (not from a "
                          "train-mode forward of this layer)", op);
    return clmoe_moe_bias_from_threshold(ctx, &s->thr, &L->bias);
  }
  if (!s->hist.buf || !s->range.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: saved holds no QB histogram (not from a "
                        "train-mode forward of this layer)", op);
  clmoe_tensor thr = {0};
  clmoe_status st;
  CLMOE_TRY(clmoe_tensor_create(ctx, &thr, CLMOE_F32, 1, &c->n_experts));
  CLMOE_TRY_GOTO(st, clmoe_moe_qb_threshold_hist(ctx, &s->hist, &s->range, s->hist_tokens, c->top_k, &thr), done);
  st = clmoe_moe_bias_from_threshold(ctx, &thr, &L->bias);
done:
  clmoe_tensor_destroy(&thr);
  return st;
}

clmoe_status clmoe__moe_router_backward(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                        const clmoe_tensor *x2, const clmoe_moe_saved *s,
                                        const clmoe_tensor *dp, clmoe_tensor *dw_router,
                                        clmoe_tensor *dx2)
{
  const int64_t m = s->tokens, E = L->cfg.n_experts, k = L->cfg.top_k;
  clmoe_tensor dlogit = {0}; /* [m, E], zero except at the chosen experts */
  clmoe_status st;
  CLMOE_TRY(clmoe__moe_new2(ctx, &dlogit, CLMOE_F32, m, E));
  CLMOE_TRY_GOTO(st, clmoe_tensor_fill(&dlogit, 0.0), done);
  cl_kernel kb;
  CLMOE_TRY_GOTO(st, clmoe__moe_kernel(ctx, MOE_ROUTE, "moe_router_bwd", &kb), done);
  cl_int im = (cl_int)m, ik = (cl_int)k, iE = (cl_int)E, renorm = !L->cfg.no_renormalize;
  cl_float scale = L->cfg.routed_scale != 0.0f ? L->cfg.routed_scale : 1.0f;
  CLMOE_TRY_GOTO(st, clmoe__args(kb, 10, KA(s->topk.buf), KA(s->scores.buf), KA(s->probs.buf), KA(dp->buf),
                                 KA(im), KA(ik), KA(iE), KA(dlogit.buf), KA(renorm), KA(scale)), done);
  CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, kb, (size_t)m), done);
  st = clmoe_linear_backward(ctx, x2, &L->w_router, &dlogit, dx2, dw_router, NULL, CLMOE_LINEAR_ACC_DX);
done:
  clmoe_tensor_destroy(&dlogit);
  return st;
}

static int cmp_i64(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double quantile(const int64_t *sorted, int64_t n, double q)
{
  const double p = q * (double)(n - 1);
  const int64_t i = (int64_t)p;
  const double frac = p - (double)i;
  return i + 1 < n ? (double)sorted[i] + frac * (double)(sorted[i + 1] - sorted[i]) : (double)sorted[i];
}

void clmoe_moe_load_from_counts(const int64_t *counts, int64_t n_experts, int64_t tokens, int64_t top_k,
                                int64_t *sorted, clmoe_moe_load *stats)
{
  const int64_t E = n_experts;
  memset(stats, 0, sizeof *stats);
  for (int64_t e = 0; e < E; e++) sorted[e] = counts[e], stats->empty += counts[e] == 0;
  qsort(sorted, (size_t)E, sizeof *sorted, cmp_i64);
  stats->tokens = tokens, stats->n_experts = E, stats->top_k = top_k;
  stats->mean = (double)(tokens * top_k) / (double)E;
  stats->min = sorted[0], stats->max = sorted[E - 1];
  stats->max_over_mean = stats->mean > 0 ? (double)stats->max / stats->mean : 0.0;
  stats->q10 = quantile(sorted, E, 0.1), stats->q50 = quantile(sorted, E, 0.5), stats->q90 = quantile(sorted, E, 0.9);
}

clmoe_status clmoe_moe_load_stats(clmoe_ctx *ctx, const clmoe_moe_dispatch *d, clmoe_moe_load *stats,
                                  int64_t *counts)
{
  (void)ctx;
  const int64_t E = d->n_experts;
  memset(stats, 0, sizeof *stats);
  if (E < 1 || !d->offsets.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_moe_load_stats: the dispatch is empty");
  cl_int *off = malloc((size_t)(E + 1) * sizeof *off);
  int64_t *c = malloc((size_t)E * 2 * sizeof *c);
  clmoe_status st = CLMOE_OK;
  if (!off || !c) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_moe_load_stats: out of host memory");
    goto done;
  }
  CLMOE_TRY_GOTO(st, clmoe_tensor_read(&d->offsets, off, (size_t)(E + 1) * sizeof *off), done);
  for (int64_t e = 0; e < E; e++) {
    c[e] = off[e + 1] - off[e];
    if (counts) counts[e] = c[e];
  }
  clmoe_moe_load_from_counts(c, E, d->tokens, d->top_k, c + E, stats);
done:
  free(off), free(c);
  return st;
}
