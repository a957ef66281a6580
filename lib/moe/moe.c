/* MoE layer: configuration, parameters, their gradients and the saved state (create, init,
 * destroy). The helpers every MoE file uses are in moe_util.c, the forward and backward in
 * moe_layer.c, the router and balancing in moe_route.c, dispatch in moe_dispatch.c, the
 * experts in moe_experts.c, the dense gated FFN in moe_ffn.c. */
#include "moe_internal.h"

#include <math.h>
#include <string.h>

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

/* The options of the Kimi Linear / DeepSeek-V3 form: gated unit, groups, weights' scale. */
static clmoe_status options_check(const char *op, clmoe_moe_config *c)
{
  if (c->groups == 0) c->groups = 1;
  if (c->topk_groups == 0) c->topk_groups = c->groups;
  if (c->routed_scale == 0.0f) c->routed_scale = 1.0f;
  if (c->glu != CLMOE_GLU_SITU && c->glu != CLMOE_GLU_SWIGLU)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field glu = %d is not a clmoe_glu", op,
                        (int)c->glu);
  if (c->groups < 1 || c->groups > CLMOE_MOE_MAX_GROUPS || c->n_experts % c->groups)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field groups = %lld must divide n_experts "
                        "(%lld) and be in [1, %d]", op, (long long)c->groups, (long long)c->n_experts,
                        CLMOE_MOE_MAX_GROUPS);
  if (c->groups > 1 && c->n_experts / c->groups < 2)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field groups = %lld leaves fewer than 2 "
                        "experts a group (a group's score is the sum of its two best)", op, (long long)c->groups);
  if (c->topk_groups < 1 || c->topk_groups > c->groups)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field topk_groups = %lld must be in [1, "
                        "groups = %lld]", op, (long long)c->topk_groups, (long long)c->groups);
  if (c->top_k > c->topk_groups * (c->n_experts / c->groups))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field top_k = %lld exceeds the %lld experts "
                        "of topk_groups = %lld groups", op, (long long)c->top_k,
                        (long long)(c->topk_groups * (c->n_experts / c->groups)), (long long)c->topk_groups);
  if (!(c->routed_scale > 0.0f) || isinf(c->routed_scale))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: config field routed_scale = %g must be finite "
                        "and > 0", op, (double)c->routed_scale);
  return CLMOE_OK;
}

/* Fills defaults and checks every field; the message names the field. */
clmoe_status clmoe__moe_config_check(const char *op, const clmoe_moe_config *in, clmoe_moe_config *c)
{
  *c = *in;
  if (c->norm_eps == 0.0f) c->norm_eps = 1e-5f;
  if (c->hist_bins == 0) c->hist_bins = 1000;
  if (c->sign_gamma == 0.0f) c->sign_gamma = 1e-3f;
  const struct { const char *name; int64_t v, lo; } dims[] = {
      {"d", c->d, 1}, {"latent", c->latent, 0}, {"n_experts", c->n_experts, 1},
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
  return options_check(op, c);
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
  return clmoe__situ_ffn_create_dtype(ctx, f, d, ff, CLMOE_F32);
}

clmoe_status clmoe__situ_ffn_create_dtype(clmoe_ctx *ctx, clmoe_situ_ffn *f, int64_t d, int64_t ff,
                                         clmoe_dtype matrices)
{
  memset(f, 0, sizeof *f);
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &f->w_gate, matrices, ff, d), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &f->w_upp, matrices, ff, d), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &f->w_dn, matrices, d, ff), fail);
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

/* Every tensor but the latent norm's gain (t[5]) is a weight matrix, made as `mat`. */
static clmoe_status params_create(clmoe_ctx *ctx, const clmoe_moe_config *c, clmoe_dtype mat, clmoe_tensor *t[10])
{
  const int64_t E = c->n_experts, d = c->d, l = clmoe__moe_width(c), f = c->expert_ff;
  const int64_t S = c->n_shared * c->shared_ff;
  CLMOE_TRY(clmoe__moe_new2(ctx, t[0], mat, E, d));
  CLMOE_TRY(clmoe_tensor_create(ctx, t[2], mat, 3, (int64_t[]){E, f, l}));
  CLMOE_TRY(clmoe_tensor_create(ctx, t[3], mat, 3, (int64_t[]){E, f, l}));
  CLMOE_TRY(clmoe_tensor_create(ctx, t[4], mat, 3, (int64_t[]){E, l, f}));
  if (c->latent > 0) { /* latent 0: no W_down, latent norm or W_up */
    CLMOE_TRY(clmoe__moe_new2(ctx, t[1], mat, l, d));
    CLMOE_TRY(clmoe_tensor_create(ctx, t[5], CLMOE_F32, 1, &l));
    CLMOE_TRY(clmoe__moe_new2(ctx, t[6], mat, d, l));
  }
  if (S) {
    CLMOE_TRY(clmoe__moe_new2(ctx, t[7], mat, S, d));
    CLMOE_TRY(clmoe__moe_new2(ctx, t[8], mat, S, d));
    CLMOE_TRY(clmoe__moe_new2(ctx, t[9], mat, d, S));
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
  return clmoe__moe_layer_create_dtype(ctx, L, cfg, CLMOE_F32);
}

clmoe_status clmoe__moe_layer_create_dtype(clmoe_ctx *ctx, clmoe_moe_layer *L, const clmoe_moe_config *cfg,
                                          clmoe_dtype matrices)
{
  memset(L, 0, sizeof *L);
  if (!cfg) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_moe_layer_create: cfg is NULL");
  if (matrices != CLMOE_F32 && matrices != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_moe_layer_create: matrices must be fp32 or bf16");
  CLMOE_TRY(clmoe__moe_config_check("clmoe_moe_layer_create", cfg, &L->cfg));
  clmoe_tensor *t[10];
  param_list(t, &L->w_router, &L->w_down, &L->w_gate, &L->w_upp, &L->w_dn, &L->norm_gain, &L->w_up,
             &L->shared);
  clmoe_status st;
  CLMOE_TRY_GOTO(st, params_create(ctx, &L->cfg, matrices, t), fail);
  L->shared.glu = L->cfg.glu;
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
  clmoe_status st = params_create(ctx, &L->cfg, CLMOE_F32, t);
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
  const double d = (double)c->d, l = (double)clmoe__moe_width(c), E = (double)c->n_experts;
  const double k = (double)c->top_k, f = (double)c->expert_ff;
  const double S = (double)(c->n_shared * c->shared_ff), proj = c->latent > 0 ? 2.0 * d * l : 0.0;
  /* router d E, W_down d l, experts k 3 l f, W_up l d, shared 3 d S: 2 FLOPs per multiply-add */
  return 2.0 * (double)m * (d * E + proj + 3.0 * k * l * f + 3.0 * d * S);
}
