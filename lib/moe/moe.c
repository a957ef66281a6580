/* MoE layer: configuration, parameters and the helpers shared by lib/moe_*.c. The forward
 * and backward are in moe_layer.c, the router and balancing in moe_route.c, dispatch in
 * moe_dispatch.c, the experts in moe_experts.c, the dense SiTU-GLU FFN in moe_ffn.c. */
#include "moe_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

void moe__tiles(const clmoe_ctx *ctx, moe_tiles *t)
{
  /* GPUs: 32 x 64 tiles of 128 work-items (4 x 4 each), the usual shape for fp32 on SIMT.
   * CPUs (PoCL): 16 x 128 tiles of 64 work-items (4 x 8 each) were the fastest of the shapes
   * tried on the tiny and gpu presets' widths (docs/architecture.md, "Stable LatentMoE"). */
  static const moe_tiles gpu = {32, 64, 16, 4, 4}, cpu = {16, 128, 16, 4, 8};
  *t = ctx->caps.is_gpu ? gpu : cpu;
}

clmoe_status moe__kernel(clmoe_ctx *ctx, enum moe_family family, const char *name, cl_kernel *k)
{
  switch (family) {
  case MOE_ROUTE: return clmoe__kernel(ctx, "moe_common+moe_route", NULL, name, k);
  case MOE_DISPATCH: return clmoe__kernel(ctx, "moe_common+moe_dispatch", NULL, name, k);
  case MOE_GEMM: {
    moe_tiles t;
    char opts[128];
    moe__tiles(ctx, &t);
    snprintf(opts, sizeof opts, "-DMG_TM=%d -DMG_TN=%d -DMG_TK=%d -DMG_WM=%d -DMG_WN=%d", t.tm, t.tn,
             t.tk, t.wm, t.wn);
    return clmoe__kernel(ctx, "moe_common+moe_gemm", opts, name, k);
  }
  }
  return clmoe__error(CLMOE_ERR_INTERNAL, "moe__kernel: unknown family %d", (int)family);
}

clmoe_status moe__launch_rows(clmoe_ctx *ctx, cl_kernel k, int64_t cols, int64_t rows)
{
  /* Narrow rows share a work-group so that small widths do not leave work-items idle. */
  size_t wg = ctx->caps.wg_size, l0 = 1;
  while (l0 < (size_t)cols && l0 < wg) l0 <<= 1;
  size_t local[2] = {l0, wg / l0 ? wg / l0 : 1}, global[2] = {(size_t)cols, (size_t)rows};
  return clmoe__launch(ctx, k, 2, global, local);
}

clmoe_status moe__view2(const clmoe_tensor *t, int64_t rows, int64_t cols, clmoe_tensor *v)
{
  const int64_t shape[2] = {rows, cols};
  return clmoe_tensor_view(t, v, 2, shape, 0);
}

clmoe_status moe__new2(clmoe_ctx *ctx, clmoe_tensor *t, clmoe_dtype dt, int64_t a, int64_t b)
{
  const int64_t shape[2] = {a, b};
  return clmoe_tensor_create(ctx, t, dt, 2, shape);
}

clmoe_status moe__new3(clmoe_ctx *ctx, clmoe_tensor *t, int64_t a, int64_t b, int64_t c)
{
  const int64_t shape[3] = {a, b, c};
  return clmoe_tensor_create(ctx, t, CLMOE_F32, 3, shape);
}

clmoe_status moe__want(const clmoe_tensor *t, const char *op, const char *name, int rank, int64_t a,
                       int64_t b, int64_t c)
{
  char desc[96];
  if (!t) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  CLMOE_TRY(clmoe__want_shape(t, op, name, 0, rank, a, b, c, 0));
  if (t->offset != 0)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s %s must not be a view at an offset", op, name,
                        clmoe_tensor_describe(t, desc, sizeof desc));
  return CLMOE_OK;
}

clmoe_status moe__want_rows(const clmoe_tensor *x, const char *op, const char *name, int64_t d,
                            int64_t *rows)
{
  char desc[96];
  if (!x) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  CLMOE_TRY(clmoe__want(x, CLMOE_F32, op, name));
  if (x->ndim < 1 || x->shape[x->ndim - 1] != d)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s %s must have a last dimension of %lld", op, name,
                        clmoe_tensor_describe(x, desc, sizeof desc), (long long)d);
  *rows = clmoe_tensor_numel(x) / d;
  return CLMOE_OK;
}

double moe__now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

clmoe_status moe__phase(clmoe_ctx *ctx, double *slot, double *t0)
{
  if (!slot) return CLMOE_OK;
  CLMOE_CL(clFinish(ctx->queue));
  const double now = moe__now();
  *slot += now - *t0;
  *t0 = now;
  return CLMOE_OK;
}

const char *clmoe_moe_balance_name(clmoe_moe_balance b)
{
  switch (b) {
  case CLMOE_MOE_BALANCE_QB: return "qb";
  case CLMOE_MOE_BALANCE_QB_HIST: return "qb-hist";
  case CLMOE_MOE_BALANCE_SIGN: return "sign";
  case CLMOE_MOE_BALANCE_NONE: return "none";
  }
  return "?";
}

/* Fills defaults and checks every field; the message names the field. */
static clmoe_status config_check(const clmoe_moe_config *in, clmoe_moe_config *c)
{
  static const char op[] = "clmoe_moe_layer_create";
  *c = *in;
  if (c->norm_eps == 0.0f) c->norm_eps = 1e-5f;
  if (c->hist_bins == 0) c->hist_bins = 1000;
  if (c->sign_gamma == 0.0f) c->sign_gamma = 1e-3f;
  const struct { const char *name; int64_t v, lo; } dims[] = {
      {"d", c->d, 1}, {"latent", c->latent, 1}, {"n_experts", c->n_experts, 1},
      {"top_k", c->top_k, 1}, {"expert_ff", c->expert_ff, 1}, {"n_shared", c->n_shared, 0},
      {"shared_ff", c->shared_ff, 0}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i].v < dims[i].lo || dims[i].v >= INT32_MAX)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field %s = %lld must be in [%lld, 2^31)",
                          op, dims[i].name, (long long)dims[i].v, (long long)dims[i].lo);
  if (c->top_k > c->n_experts || c->top_k > CLMOE_MOE_MAX_TOP_K)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field top_k = %lld must be at most "
                        "n_experts (%lld) and %d", op, (long long)c->top_k, (long long)c->n_experts,
                        CLMOE_MOE_MAX_TOP_K);
  const int qb = c->balance == CLMOE_MOE_BALANCE_QB || c->balance == CLMOE_MOE_BALANCE_QB_HIST;
  if ((int)c->balance < 0 || c->balance > CLMOE_MOE_BALANCE_NONE)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field balance = %d is not a "
                        "clmoe_moe_balance", op, (int)c->balance);
  if (qb && c->top_k >= c->n_experts)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: Quantile Balancing routes with top-(k+1): "
                        "top_k = %lld needs n_experts > top_k (have %lld)", op, (long long)c->top_k,
                        (long long)c->n_experts);
  if (c->hist_bins < 2 || c->hist_bins > CLMOE_MOE_MAX_HIST_BINS)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field hist_bins = %d must be in [2, %d]",
                        op, c->hist_bins, CLMOE_MOE_MAX_HIST_BINS);
  if (!(c->norm_eps > 0.0f) || isinf(c->norm_eps))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field norm_eps = %g must be finite and > 0",
                        op, (double)c->norm_eps);
  if (!(c->sign_gamma > 0.0f) || isinf(c->sign_gamma))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field sign_gamma = %g must be finite "
                        "and > 0", op, (double)c->sign_gamma);
  if ((int)c->gemm < 0 || c->gemm > CLMOE_MOE_GEMM_PADDED)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field gemm = %d is not a clmoe_moe_gemm",
                        op, (int)c->gemm);
  if (c->n_shared * c->shared_ff >= INT32_MAX)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: n_shared x shared_ff is too large", op);
  return CLMOE_OK;
}

void clmoe_situ_ffn_destroy(clmoe_situ_ffn *f)
{
  if (!f) return;
  clmoe_tensor_destroy(&f->w_gate);
  clmoe_tensor_destroy(&f->w_upp);
  clmoe_tensor_destroy(&f->w_dn);
}

clmoe_status clmoe_situ_ffn_create(clmoe_ctx *ctx, clmoe_situ_ffn *f, int64_t d, int64_t ff)
{
  memset(f, 0, sizeof *f);
  clmoe_status st;
  CLMOE_TRY_GOTO(st, moe__new2(ctx, &f->w_gate, CLMOE_F32, ff, d), fail);
  CLMOE_TRY_GOTO(st, moe__new2(ctx, &f->w_upp, CLMOE_F32, ff, d), fail);
  CLMOE_TRY_GOTO(st, moe__new2(ctx, &f->w_dn, CLMOE_F32, d, ff), fail);
  return CLMOE_OK;
fail:
  clmoe_situ_ffn_destroy(f);
  return st;
}

/* The parameter tensors of a layer or its gradients, in one order. */
static void param_list(clmoe_tensor *t[10], clmoe_tensor *wr, clmoe_tensor *wd, clmoe_tensor *wg,
                       clmoe_tensor *wu, clmoe_tensor *wn, clmoe_tensor *gain, clmoe_tensor *wup,
                       clmoe_situ_ffn *sh)
{
  t[0] = wr, t[1] = wd, t[2] = wg, t[3] = wu, t[4] = wn, t[5] = gain, t[6] = wup;
  t[7] = &sh->w_gate, t[8] = &sh->w_upp, t[9] = &sh->w_dn;
}

static clmoe_status params_create(clmoe_ctx *ctx, const clmoe_moe_config *c, clmoe_tensor *t[10])
{
  const int64_t E = c->n_experts, d = c->d, l = c->latent, f = c->expert_ff;
  const int64_t S = c->n_shared * c->shared_ff;
  CLMOE_TRY(moe__new2(ctx, t[0], CLMOE_F32, E, d));
  CLMOE_TRY(moe__new2(ctx, t[1], CLMOE_F32, l, d));
  CLMOE_TRY(moe__new3(ctx, t[2], E, f, l));
  CLMOE_TRY(moe__new3(ctx, t[3], E, f, l));
  CLMOE_TRY(moe__new3(ctx, t[4], E, l, f));
  CLMOE_TRY(clmoe_tensor_create(ctx, t[5], CLMOE_F32, 1, &l));
  CLMOE_TRY(moe__new2(ctx, t[6], CLMOE_F32, d, l));
  if (S) {
    CLMOE_TRY(moe__new2(ctx, t[7], CLMOE_F32, S, d));
    CLMOE_TRY(moe__new2(ctx, t[8], CLMOE_F32, S, d));
    CLMOE_TRY(moe__new2(ctx, t[9], CLMOE_F32, d, S));
  }
  return CLMOE_OK;
}

void clmoe_moe_layer_destroy(clmoe_moe_layer *L)
{
  if (!L) return;
  clmoe_tensor *t[10];
  param_list(t, &L->w_router, &L->w_down, &L->w_gate, &L->w_upp, &L->w_dn, &L->norm_gain, &L->w_up,
             &L->shared);
  for (int i = 0; i < 10; i++) clmoe_tensor_destroy(t[i]);
  clmoe_tensor_destroy(&L->bias);
  memset(L, 0, sizeof *L);
}

clmoe_status clmoe_moe_layer_create(clmoe_ctx *ctx, clmoe_moe_layer *L, const clmoe_moe_config *cfg)
{
  memset(L, 0, sizeof *L);
  if (!cfg) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_moe_layer_create: cfg is NULL");
  CLMOE_TRY(config_check(cfg, &L->cfg));
  clmoe_tensor *t[10];
  param_list(t, &L->w_router, &L->w_down, &L->w_gate, &L->w_upp, &L->w_dn, &L->norm_gain, &L->w_up,
             &L->shared);
  clmoe_status st;
  CLMOE_TRY_GOTO(st, params_create(ctx, &L->cfg, t), fail);
  CLMOE_TRY_GOTO(st, clmoe_tensor_zeros(ctx, &L->bias, CLMOE_F32, 1, &L->cfg.n_experts), fail);
  return CLMOE_OK;
fail:
  clmoe_moe_layer_destroy(L);
  return st;
}

clmoe_status clmoe_moe_layer_init(clmoe_moe_layer *L, uint64_t seed, float stddev)
{
  clmoe_tensor *t[10];
  param_list(t, &L->w_router, &L->w_down, &L->w_gate, &L->w_upp, &L->w_dn, &L->norm_gain, &L->w_up,
             &L->shared);
  for (int i = 0; i < 10; i++) {
    if (!t[i]->buf) continue;
    if (i == 5) CLMOE_TRY(clmoe_tensor_fill(t[i], 1.0));
    else CLMOE_TRY(clmoe_tensor_fill_normal(t[i], seed * 16 + (uint64_t)i, 0.0f, stddev));
  }
  return clmoe_tensor_fill(&L->bias, 0.0);
}

void clmoe_moe_grads_destroy(clmoe_moe_grads *g)
{
  if (!g) return;
  clmoe_tensor *t[10];
  param_list(t, &g->w_router, &g->w_down, &g->w_gate, &g->w_upp, &g->w_dn, &g->norm_gain, &g->w_up,
             &g->shared);
  for (int i = 0; i < 10; i++) clmoe_tensor_destroy(t[i]);
  memset(g, 0, sizeof *g);
}

clmoe_status clmoe_moe_grads_create(clmoe_ctx *ctx, const clmoe_moe_layer *L, clmoe_moe_grads *g)
{
  memset(g, 0, sizeof *g);
  clmoe_tensor *t[10];
  param_list(t, &g->w_router, &g->w_down, &g->w_gate, &g->w_upp, &g->w_dn, &g->norm_gain, &g->w_up,
             &g->shared);
  clmoe_status st = params_create(ctx, &L->cfg, t);
  if (st != CLMOE_OK) clmoe_moe_grads_destroy(g);
  return st;
}

void clmoe_situ_saved_destroy(clmoe_situ_saved *s)
{
  if (!s) return;
  clmoe_tensor_destroy(&s->u);
  clmoe_tensor_destroy(&s->w);
  clmoe_tensor_destroy(&s->act);
}

void clmoe_moe_saved_destroy(clmoe_moe_saved *s)
{
  if (!s) return;
  clmoe_tensor *t[] = {&s->topk, &s->scores, &s->probs, &s->xl, &s->xs, &s->u, &s->w, &s->act,
                       &s->ys, &s->z, &s->rstd, &s->zn, &s->thr, &s->hist, &s->range};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
  clmoe_moe_dispatch_destroy(&s->disp);
  clmoe_situ_saved_destroy(&s->shared);
  memset(s, 0, sizeof *s);
}

double clmoe_moe_forward_flops(const clmoe_moe_config *c, int64_t m)
{
  const double d = (double)c->d, l = (double)c->latent, E = (double)c->n_experts;
  const double k = (double)c->top_k, f = (double)c->expert_ff;
  const double S = (double)(c->n_shared * c->shared_ff);
  /* router d E, W_down d l, experts k 3 l f, W_up l d, shared 3 d S: 2 FLOPs per multiply-add */
  return 2.0 * (double)m * (d * E + 2.0 * d * l + 3.0 * k * l * f + 3.0 * d * S);
}
