/* The model: its tensors, the parameter registry and initialisation (include/clmoe/model.h). The
 * forward and backward are in model_run.c. */
#include "model_internal.h"
#include "params_internal.h"
#include "kda/kda_internal.h"
#include "mla/mla_internal.h"
#include "moe/moe_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clmoe/model.h"
#include "clmoe/model_config.h"
#include "clmoe/params.h"
#include "clmoe/kda.h"
#include "clmoe/kda_layer.h"
#include "clmoe/mla.h"

static clmoe_status vec(clmoe_ctx *ctx, clmoe_tensor *t, int64_t n)
{
  return clmoe_tensor_create(ctx, t, CLMOE_F32, 1, &n);
}

/* Registers value under "prefix/name" and makes *grad a view of the registry's gradient. */
static clmoe_status reg(clmoe_model *m, const char *prefix, const char *name, clmoe_tensor *value,
                        int decay, clmoe_tensor *grad)
{
  char full[96];
  snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "/" : "", name);
  CLMOE_TRY(clmoe_params_add(&m->params, full, value, decay));
  if (grad) {
    *grad = clmoe_params_find(&m->params, full)->grad;
    grad->is_view = 1; /* owned by the registry */
  }
  return CLMOE_OK;
}

/* The MoE layer of an expert-parallel model: the dense tensors whole, this rank's experts as
 * rows of the [E, ...] expert tensors (include/clmoe/params.h), the bias a buffer as usual. Exact QB
 * needs every rank's scores, so "quantile" runs as its histogram form here. */
static clmoe_status create_ep_moe(clmoe_model *m, model_layer *L, clmoe_moe_config *mc, clmoe_dtype matrices,
                                  const char *prefix)
{
  if (mc->balance == CLMOE_MOE_BALANCE_SIGN)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "balancing = sign needs every expert's load on one rank: "
                        "use quantile or quantile-hist with expert parallelism");
  if (mc->balance == CLMOE_MOE_BALANCE_QB) mc->balance = CLMOE_MOE_BALANCE_QB_HIST;
  const int rank = clmoe_dist_rank(m->dist);
  CLMOE_TRY(clmoe__moe_ep_layer_create_dtype(m->ctx, mc, m->map, rank, matrices, &L->ep));
  if (L->ep.n_local == 0)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "the expert map gives rank %d no expert (more ranks than "
                        "experts?)", rank);
  for (int e = 0; !m->params.inference && e < m->map->experts; e++)
    if (m->map->replicas[e] != 1)
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "training needs every expert on exactly one rank; the map "
                          "puts expert %d on %d (replicas are for inference)", e, (int)m->map->replicas[e]);
  clmoe_moe_layer *D = &L->ep.dense, *X = &L->ep.experts;
  struct { const char *name; clmoe_tensor *t, *g; int decay; } dense[] = {
      {"w_router", &D->w_router, &L->moe_g.w_router, 1}, {"w_down", &D->w_down, &L->moe_g.w_down, 1},
      {"norm_gain", &D->norm_gain, &L->moe_g.norm_gain, 0}, {"w_up", &D->w_up, &L->moe_g.w_up, 1},
      {"shared/w_gate", &D->shared.w_gate, &L->moe_g.shared.w_gate, 1},
      {"shared/w_upp", &D->shared.w_upp, &L->moe_g.shared.w_upp, 1},
      {"shared/w_dn", &D->shared.w_dn, &L->moe_g.shared.w_dn, 1}};
  struct { const char *name; clmoe_tensor *t, *g; } experts[] = {
      {"w_gate", &X->w_gate, &L->moe_g.w_gate}, {"w_upp", &X->w_upp, &L->moe_g.w_upp}, {"w_dn", &X->w_dn, &L->moe_g.w_dn}};
  char full[96];
  /* the single-rank model's registration order: router, down, gate, upp, dn, gain, up, shared */
  for (int i = 0; i < 7; i++) {
    if (dense[i].t->buf) /* latent 0: no w_down, norm_gain, w_up; no shared experts */
      CLMOE_TRY(reg(m, prefix, dense[i].name, dense[i].t, dense[i].decay, dense[i].g));
    if (i != 1) continue; /* the experts come after w_down, or after the router without it */
    for (int j = 0; j < 3; j++) {
      snprintf(full, sizeof full, "%s/%s", prefix, experts[j].name);
      CLMOE_TRY(clmoe_params_add_rows(&m->params, full, experts[j].t, 1, m->map->experts, L->ep.local_expert));
      if (!m->params.inference) *experts[j].g = clmoe_params_find(&m->params, full)->grad;
    }
  }
  snprintf(full, sizeof full, "%s/bias", prefix);
  return clmoe_params_add_buffer(&m->params, full, &D->bias);
}

/* Layer l's tensors, registered; its weight matrices made as `matrices` (fp32 for training). */
static clmoe_status create_layer(clmoe_model *m, int l, clmoe_dtype matrices)
{
  const clmoe_config *c = &m->cfg;
  model_layer *L = &m->layers[l];
  clmoe_ctx *ctx = m->ctx;
  const int64_t d = c->d_model;
  char prefix[48];
  L->is_mla = c->is_mla[l] != 0;
  L->is_dense = l < c->dense_layers;
  for (int s = 0; s < 2; s++) { /* a plain stack has the norm gains only */
    const int ar = c->residual == CLMOE_RESIDUAL_ATTN_RES;
    if (ar) CLMOE_TRY(vec(ctx, &L->ar_w[s], d));
    if (ar) CLMOE_TRY(vec(ctx, &L->ar_g[s], d));
    CLMOE_TRY(vec(ctx, &L->norm[s], d));
    snprintf(prefix, sizeof prefix, "layer%d/%s", l, s == SUB_MIXER ? "mixer" : "ffn");
    if (ar) CLMOE_TRY(reg(m, prefix, "attn_res_w", &L->ar_w[s], 0, NULL));
    if (ar) CLMOE_TRY(reg(m, prefix, "attn_res_gain", &L->ar_g[s], 0, NULL));
    CLMOE_TRY(reg(m, prefix, "norm", &L->norm[s], 0, NULL));
  }
  snprintf(prefix, sizeof prefix, "layer%d/mixer", l);
  if (L->is_mla) {
    clmoe_mla_config mc = {d, c->mla_heads, c->mla_q_rank, c->mla_kv_rank, c->mla_qk_nope_dim,
                           c->mla_qk_rope_dim, c->mla_v_dim,
                           (float)(c->mla_norm_eps > 0.0 ? c->mla_norm_eps : c->norm_eps), 0.0f};
    L->mla_cfg = mc;
    CLMOE_TRY(clmoe__mla_weights_create_dtype(ctx, &L->mla_cfg, c->mla_output_gate != 0, matrices, &L->mla));
    for (int i = 0; i < CLMOE_MLA_NWEIGHTS; i++) {
      const char *name = clmoe_mla_weight_name_in(&L->mla_cfg, &L->mla, i);
      if (!name) continue; /* absent in this form */
      int decay = strcmp(name, "q_norm") && strcmp(name, "kv_norm");
      CLMOE_TRY(reg(m, prefix, name, clmoe_mla_weight_at(&L->mla, i), decay, clmoe_mla_weight_at(&L->mla_g, i)));
    }
  } else {
    clmoe_kda_options ko = {0.0f, (float)c->kda_lower_bound,
                            c->kda_unbounded_gate ? CLMOE_KDA_GATE_UNBOUNDED : CLMOE_KDA_GATE_BOUNDED};
    CLMOE_TRY(clmoe__kda_layer_create_dtype(ctx, &L->kda, d, c->kda_heads, c->kda_head_dim, c->kda_gate_rank,
                                            c->kda_conv_width, (float)c->norm_eps, &ko, c->kda_out_gate_rank,
                                            matrices));
    L->kda_g = L->kda; /* sizes and options; the tensors become registry views below */
    clmoe_tensor *t[CLMOE_KDA_LAYER_PARAMS], *g[CLMOE_KDA_LAYER_PARAMS];
    const char *names[CLMOE_KDA_LAYER_PARAMS];
    int decay[CLMOE_KDA_LAYER_PARAMS];
    const int np = clmoe_kda_layer_params(&L->kda, t, names, decay); /* the form's tensors */
    clmoe_kda_layer_params(&L->kda_g, g, NULL, NULL);
    for (int i = 0; i < np; i++) CLMOE_TRY(reg(m, prefix, names[i], t[i], decay[i], g[i]));
  }
  snprintf(prefix, sizeof prefix, "layer%d/ffn", l);
  if (L->is_dense) {
    CLMOE_TRY(clmoe__situ_ffn_create_dtype(ctx, &L->ffn, d, c->dense_ff, matrices));
    L->ffn.glu = c->activation == CLMOE_ACTIVATION_SWIGLU ? CLMOE_GLU_SWIGLU : CLMOE_GLU_SITU;
    CLMOE_TRY(reg(m, prefix, "w_gate", &L->ffn.w_gate, 1, &L->ffn_g.w_gate));
    CLMOE_TRY(reg(m, prefix, "w_upp", &L->ffn.w_upp, 1, &L->ffn_g.w_upp));
    CLMOE_TRY(reg(m, prefix, "w_dn", &L->ffn.w_dn, 1, &L->ffn_g.w_dn));
    return CLMOE_OK;
  }
  static const clmoe_moe_balance balance[] = {CLMOE_MOE_BALANCE_QB, CLMOE_MOE_BALANCE_QB_HIST,
                                              CLMOE_MOE_BALANCE_SIGN, CLMOE_MOE_BALANCE_NONE};
  static const char *const balance_names[] = {"quantile", "quantile-hist", "sign", "none"};
  clmoe_moe_config mc = {0};
  mc.d = d, mc.latent = c->latent, mc.n_experts = c->experts, mc.top_k = c->top_k; /* latent 0: none */
  mc.expert_ff = c->expert_ff, mc.n_shared = c->shared_experts, mc.shared_ff = c->shared_ff;
  mc.norm_eps = (float)c->norm_eps, mc.hist_bins = c->quantile_bins, mc.sign_gamma = (float)c->sign_rate;
  mc.glu = c->activation == CLMOE_ACTIVATION_SWIGLU ? CLMOE_GLU_SWIGLU : CLMOE_GLU_SITU;
  mc.groups = c->groups, mc.topk_groups = c->topk_groups, mc.no_renormalize = !c->renormalize;
  mc.routed_scale = (float)c->routed_scale;
  for (int b = 0; b < 4; b++)
    if (!strcmp(c->balancing, balance_names[b])) mc.balance = balance[b];
  if (m->dist) return create_ep_moe(m, L, &mc, matrices, prefix);
  CLMOE_TRY(clmoe__moe_layer_create_dtype(ctx, &L->moe, &mc, matrices));
  struct { const char *name; clmoe_tensor *t, *g; int decay; } moe[] = {
      {"w_router", &L->moe.w_router, &L->moe_g.w_router, 1}, {"w_down", &L->moe.w_down, &L->moe_g.w_down, 1},
      {"w_gate", &L->moe.w_gate, &L->moe_g.w_gate, 1},       {"w_upp", &L->moe.w_upp, &L->moe_g.w_upp, 1},
      {"w_dn", &L->moe.w_dn, &L->moe_g.w_dn, 1},             {"norm_gain", &L->moe.norm_gain, &L->moe_g.norm_gain, 0},
      {"w_up", &L->moe.w_up, &L->moe_g.w_up, 1}};
  for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
    if (moe[i].t->buf) /* latent 0: no w_down, norm_gain, w_up */
      CLMOE_TRY(reg(m, prefix, moe[i].name, moe[i].t, moe[i].decay, moe[i].g));
  if (c->shared_experts > 0) {
    CLMOE_TRY(reg(m, prefix, "shared/w_gate", &L->moe.shared.w_gate, 1, &L->moe_g.shared.w_gate));
    CLMOE_TRY(reg(m, prefix, "shared/w_upp", &L->moe.shared.w_upp, 1, &L->moe_g.shared.w_upp));
    CLMOE_TRY(reg(m, prefix, "shared/w_dn", &L->moe.shared.w_dn, 1, &L->moe_g.shared.w_dn));
  }
  char full[96];
  snprintf(full, sizeof full, "%s/bias", prefix);
  return clmoe_params_add_buffer(&m->params, full, &L->moe.bias);
}

/* Every weight matrix (clmoe__param_is_weight_matrix's: the head, the layers' "w_*", the
 * expert stacks) is made as `matrices` from the start: an inference model in bf16 never
 * holds their fp32 values. */
static clmoe_status create(clmoe_ctx *ctx, const clmoe_config *cfg, int inference, clmoe_dist *dist,
                           const clmoe_expert_map *map, clmoe_dtype matrices, clmoe_model **out)
{
  *out = NULL;
  if (matrices != CLMOE_F32 && (matrices != CLMOE_BF16 || !inference))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "creating model %s: weight matrices must be fp32, or bf16 for "
                        "inference", cfg->name);
  CLMOE_TRY(clmoe_config_validate(cfg, cfg->name));
  if (dist && (!map || map->ranks != clmoe_dist_size(dist) || map->experts != cfg->experts))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_model_create_ep: the expert map must have %d ranks "
                        "and %lld experts (it has %d and %d)", clmoe_dist_size(dist), (long long)cfg->experts,
                        map ? map->ranks : 0, map ? map->experts : 0);
  clmoe_model *m = calloc(1, sizeof *m);
  if (!m) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (model)");
  m->ctx = ctx;
  m->dist = dist;
  m->map = dist ? map : NULL;
  m->cfg = *cfg;
  clmoe_params_init(&m->params, ctx);
  m->params.inference = inference;
  m->inference_only = inference;
  clmoe_status st = CLMOE_OK;
  const int64_t V = cfg->vocab, d = cfg->d_model;
  m->layers = calloc((size_t)cfg->layers, sizeof *m->layers);
  if (!m->layers) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (model)");
    goto fail;
  }
  m->nslots = clmoe__model_stack_slots(cfg);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m->embed, CLMOE_F32, 2, (int64_t[]){V, d}), fail);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m->head, matrices, 2, (int64_t[]){V, d}), fail);
  const int ar = cfg->residual == CLMOE_RESIDUAL_ATTN_RES; /* plain: the final norm only */
  if (ar) CLMOE_TRY_GOTO(st, vec(ctx, &m->far_w, d), fail);
  if (ar) CLMOE_TRY_GOTO(st, vec(ctx, &m->far_g, d), fail);
  CLMOE_TRY_GOTO(st, vec(ctx, &m->fnorm, d), fail);
  CLMOE_TRY_GOTO(st, reg(m, "", "embed", &m->embed, 1, NULL), fail);
  for (int l = 0; l < cfg->layers; l++) CLMOE_TRY_GOTO(st, create_layer(m, l, matrices), fail);
  if (ar) CLMOE_TRY_GOTO(st, reg(m, "final", "attn_res_w", &m->far_w, 0, NULL), fail);
  if (ar) CLMOE_TRY_GOTO(st, reg(m, "final", "attn_res_gain", &m->far_g, 0, NULL), fail);
  CLMOE_TRY_GOTO(st, reg(m, "final", "norm", &m->fnorm, 0, NULL), fail);
  CLMOE_TRY_GOTO(st, reg(m, "", "head", &m->head, 1, NULL), fail);
  /* the values are not written yet: clmoe_model_init or a checkpoint load fills the copies */
  CLMOE_TRY_GOTO(st, clmoe__model_set_precision(m, (clmoe_precision)cfg->train.precision, 0), fail);
  for (int i = 0; matrices == CLMOE_BF16 && i < m->params.n; i++)
    if (clmoe__param_is_weight_matrix(&m->params.p[i])) { /* a constructor that ignored the dtype */
      st = clmoe__error(CLMOE_ERR_INTERNAL, "parameter %s was made fp32, not bf16", m->params.p[i].name);
      goto fail;
    }
  *out = m;
  return CLMOE_OK;
fail:
  clmoe__append_error(" (creating model %s)", cfg->name);
  clmoe_model_destroy(m);
  return st;
}

clmoe_status clmoe_model_create(clmoe_ctx *ctx, const clmoe_config *cfg, clmoe_model **out)
{
  return create(ctx, cfg, 0, NULL, NULL, CLMOE_F32, out);
}

clmoe_status clmoe_model_create_ep(clmoe_ctx *ctx, const clmoe_config *cfg, clmoe_dist *dist,
                                   const clmoe_expert_map *map, clmoe_model **out)
{
  if (!dist) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_model_create_ep: dist is NULL");
  return create(ctx, cfg, 0, dist, map, CLMOE_F32, out);
}

clmoe_status clmoe__model_create_inference(clmoe_ctx *ctx, const clmoe_config *cfg, clmoe_dist *dist,
                                           const clmoe_expert_map *map, clmoe_dtype matrices, clmoe_model **out)
{
  return create(ctx, cfg, 1, dist, dist ? map : NULL, matrices, out);
}

void clmoe_model_set_loss_count(clmoe_model *m, int64_t count) { m->loss_count = count > 0 ? count : 0; }

clmoe_status clmoe_model_create_inference(clmoe_ctx *ctx, const clmoe_config *cfg, clmoe_model **out)
{
  return create(ctx, cfg, 1, NULL, NULL, CLMOE_F32, out);
}

void clmoe_model_destroy(clmoe_model *m)
{
  if (!m) return;
  clmoe__model_release_activations(m);
  clmoe_params_destroy(&m->params);
  for (int l = 0; m->layers && l < m->cfg.layers; l++) {
    model_layer *L = &m->layers[l];
    for (int s = 0; s < 2; s++) {
      clmoe_tensor_destroy(&L->ar_w[s]);
      clmoe_tensor_destroy(&L->ar_g[s]);
      clmoe_tensor_destroy(&L->norm[s]);
    }
    clmoe_kda_layer_destroy(&L->kda);
    clmoe_mla_weights_destroy(&L->mla);
    clmoe_situ_ffn_destroy(&L->ffn);
    clmoe_moe_layer_destroy(&L->moe);
    clmoe_moe_ep_layer_destroy(&L->ep);
  }
  free(m->layers);
  clmoe_expert_map_destroy(m->owned_map);
  clmoe_tensor_destroy(&m->embed);
  clmoe_tensor_destroy(&m->head);
  clmoe_tensor_destroy(&m->far_w);
  clmoe_tensor_destroy(&m->far_g);
  clmoe_tensor_destroy(&m->fnorm);
  free(m);
}

clmoe_status clmoe_model_init(clmoe_model *m, uint64_t seed)
{
  const float sd = 0.02f;
  /* Every tensor draws from its own stream: seed mixed with its registration index. */
  uint64_t s = seed * 1000003u;
  CLMOE_TRY(clmoe_tensor_fill_normal(&m->embed, s + 1, 0.0f, sd));
  CLMOE_TRY(clmoe_tensor_fill_normal(&m->head, s + 2, 0.0f, sd));
  const int ar = m->cfg.residual == CLMOE_RESIDUAL_ATTN_RES; /* plain: no AttnRes tensors */
  if (ar) CLMOE_TRY(clmoe_tensor_fill(&m->far_w, 0.0));
  if (ar) CLMOE_TRY(clmoe_tensor_fill(&m->far_g, 1.0));
  CLMOE_TRY(clmoe_tensor_fill(&m->fnorm, 1.0));
  for (int l = 0; l < m->cfg.layers; l++) {
    model_layer *L = &m->layers[l];
    const uint64_t ls = s + 1000 * (uint64_t)(l + 1);
    for (int k = 0; k < 2; k++) {
      if (ar) CLMOE_TRY(clmoe_tensor_fill(&L->ar_w[k], 0.0));
      if (ar) CLMOE_TRY(clmoe_tensor_fill(&L->ar_g[k], 1.0));
      CLMOE_TRY(clmoe_tensor_fill(&L->norm[k], 1.0));
    }
    if (L->is_mla) CLMOE_TRY(clmoe_mla_weights_init(&L->mla, ls + 10, sd));
    else CLMOE_TRY(clmoe_kda_layer_init(&L->kda, ls + 10));
    if (L->is_dense) {
      CLMOE_TRY(clmoe_tensor_fill_normal(&L->ffn.w_gate, ls + 100, 0.0f, sd));
      CLMOE_TRY(clmoe_tensor_fill_normal(&L->ffn.w_upp, ls + 101, 0.0f, sd));
      CLMOE_TRY(clmoe_tensor_fill_normal(&L->ffn.w_dn, ls + 102, 0.0f, sd));
    } else if (m->dist) {
      CLMOE_TRY(clmoe_moe_ep_layer_init(&L->ep, ls + 200, sd));
    } else {
      CLMOE_TRY(clmoe_moe_layer_init(&L->moe, ls + 200, sd));
    }
  }
  return clmoe_params_refresh_bf16(&m->params);
}

clmoe_params *clmoe_model_params(clmoe_model *m) { return &m->params; }
const clmoe_config *clmoe_model_config(const clmoe_model *m) { return &m->cfg; }
const clmoe_tensor *clmoe_model_logits(const clmoe_model *m) { return &m->logits; }

int clmoe_model_moe_layers(const clmoe_model *m)
{
  int n = 0;
  for (int l = 0; l < m->cfg.layers; l++) n += !m->layers[l].is_dense;
  return n;
}

/* Load of an expert-parallel layer over all ranks' tokens: the chosen experts counted here,
 * summed over the ranks (exact), the statistics of clmoe_moe_load_stats. Collective. */
static clmoe_status ep_load(clmoe_model *m, model_layer *L, clmoe_moe_load *load, int64_t *counts)
{
  const clmoe_moe_saved *s = &L->epsaved.local;
  const int64_t E = L->ep.cfg.n_experts, k = L->ep.cfg.top_k, mt = s->topk.buf ? s->topk.shape[0] : 0;
  int64_t *cnt = calloc((size_t)(2 * E + 1), sizeof *cnt); /* [E] counts, [1] tokens, [E] scratch */
  int32_t *topk = malloc((size_t)(mt * k > 0 ? mt * k : 1) * sizeof *topk);
  clmoe_status st = cnt && topk ? CLMOE_OK : clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "MoE load statistics");
  if (st == CLMOE_OK && mt) st = clmoe_tensor_read(&s->topk, topk, (size_t)(mt * k) * sizeof *topk);
  for (int64_t i = 0; st == CLMOE_OK && i < mt * k; i++)
    if (topk[i] >= 0 && topk[i] < E) cnt[topk[i]]++;
  cnt[E] = mt;
  if (st == CLMOE_OK) st = clmoe_dist_allreduce_sum_i64(m->dist, cnt, (size_t)E + 1);
  if (st == CLMOE_OK && counts) memcpy(counts, cnt, (size_t)E * sizeof *counts);
  if (st == CLMOE_OK) clmoe_moe_load_from_counts(cnt, E, cnt[E], k, cnt + E + 1, load);
  free(cnt), free(topk);
  return st;
}

clmoe_status clmoe_model_moe_load(clmoe_model *m, int index, clmoe_moe_load *load)
{
  return clmoe_model_moe_load_counts(m, index, load, NULL);
}

/* Load of the MoE layer whose expert offsets [E + 1] are at word w of the step record's
 * last read (clmoe_model_step_read): no wait. */
static clmoe_status record_load(clmoe_model *m, const model_layer *L, int64_t w, clmoe_moe_load *load,
                                int64_t *counts)
{
  const int64_t E = L->moe.cfg.n_experts;
  int64_t *c = malloc((size_t)E * 2 * sizeof *c);
  if (!c) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "MoE load statistics: out of host memory");
  const int32_t *off = m->rec_host + w;
  for (int64_t e = 0; e < E; e++) {
    c[e] = off[e + 1] - off[e];
    if (counts) counts[e] = c[e];
  }
  clmoe_moe_load_from_counts(c, E, m->N, L->moe.cfg.top_k, c + E, load);
  free(c);
  return CLMOE_OK;
}

clmoe_status clmoe_model_moe_load_counts(clmoe_model *m, int index, clmoe_moe_load *load, int64_t *counts)
{
  int64_t w = REC_MOE; /* this layer's offsets in the step record */
  for (int l = 0; l < m->cfg.layers; l++) {
    model_layer *L = &m->layers[l];
    if (L->is_dense) continue;
    if (index-- > 0) {
      w += L->moe.cfg.n_experts + 1;
      continue;
    }
    if (m->dist) return ep_load(m, L, load, counts);
    if (m->rec_state == REC_READ && m->rec_words > REC_MOE) return record_load(m, L, w, load, counts);
    if (!m->trained && L->moesaved.tokens == 0)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "MoE load statistics need a train forward first");
    return clmoe_moe_load_stats(m->ctx, &L->moesaved.disp, load, counts);
  }
  return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "the model has no MoE layer %d", index);
}
