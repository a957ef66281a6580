/* A Kimi Linear checkpoint directory -> an inference model (include/clmoe/hf.h). Each
 * parameter of the model's registry is filled from the hub's tensor of the same meaning:
 *
 *   registry (clmoe)                 hub tensor (model.layers.N. + ...)      shape (hub)
 *   embed / head / final/norm        model.embed_tokens / lm_head / model.norm  [V,d] [V,d] [d]
 *   layerN/mixer/norm, ffn/norm      input_layernorm, post_attention_layernorm  [d]
 *   KDA  w_q w_k w_v                 self_attn.q_proj k_proj v_proj          [HD, d]
 *        conv_q conv_k conv_v        self_attn.q_conv1d k_conv1d v_conv1d    [HD, 1, K]
 *        w_a_down w_a_up             self_attn.f_a_proj f_b_proj             [D, d] [HD, D]
 *        dt_bias A_log w_beta        self_attn.dt_bias A_log b_proj          [HD] [..H..] [H, d]
 *        w_g_down w_g_up (w_g)       self_attn.g_a_proj g_b_proj (g_proj)    [D, d] [HD, D]
 *        o_gain w_o                  self_attn.o_norm o_proj                 [D] [d, HD]
 *   MLA  w_uq (q_rank 0: w_q)        self_attn.q_proj (q_rank > 0: q_b_proj) [H (n + r), .]
 *        w_dq q_norm                 self_attn.q_a_proj q_a_layernorm
 *        w_dkv kv_norm w_ukv         self_attn.kv_a_proj_with_mqa kv_a_layernorm kv_b_proj
 *        w_g w_o                     self_attn.g_proj o_proj
 *   dense FFN w_gate w_upp w_dn      mlp.gate_proj up_proj down_proj
 *   MoE  w_router, bias              block_sparse_moe.gate.weight, .e_score_correction_bias
 *        w_gate w_upp w_dn [E, ...]  block_sparse_moe.experts.E.w1 w3 w2     [f, d] [f, d] [d, f]
 *        shared/w_gate w_upp w_dn    block_sparse_moe.shared_experts.gate_proj up_proj down_proj
 *
 * Shapes must match the config; dimensions of size 1 are ignored (the hub stores A_log as
 * [1, 1, H, 1] and the convolutions as [HD, 1, K]) and dt_bias may be flat.
 *
 * With bf16 weights (clmoe_hf_load_weights, clmoe_hf_load_ep_weights) the matrices are
 * created as bf16 tensors (lib/model/model.c), and each hub tensor goes through the host
 * buffer of one tensor into them: no fp32 copy of the model on the host or the device, not
 * even an empty one (bf16 hub tensors arrive unchanged). */
#include "hf_internal.h"
#include "model/model_internal.h" /* the inference model with bf16 matrices, its owned map */
#include "clmoe/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct hf_rule {
  const char *leaf; /* the registry name after "layerN/mixer/" or "layerN/ffn/" */
  const char *hub;  /* after "model.layers.N." ("%d": the expert) */
  int flat;         /* the hub tensor may have any shape of the same size */
  const char *alt;  /* another spelling of hub, or NULL */
} hf_rule;

static const hf_rule kda_rules[] = {
    {"w_q", "self_attn.q_proj.weight", 0, NULL},        {"w_k", "self_attn.k_proj.weight", 0, NULL},
    {"w_v", "self_attn.v_proj.weight", 0, NULL},        {"w_beta", "self_attn.b_proj.weight", 0, NULL},
    {"w_a_down", "self_attn.f_a_proj.weight", 0, NULL}, {"w_a_up", "self_attn.f_b_proj.weight", 0, NULL},
    {"dt_bias", "self_attn.dt_bias", 1, NULL},          {"A_log", "self_attn.A_log", 1, NULL},
    {"conv_q", "self_attn.q_conv1d.weight", 0, NULL},   {"conv_k", "self_attn.k_conv1d.weight", 0, NULL},
    {"conv_v", "self_attn.v_conv1d.weight", 0, NULL},   {"o_gain", "self_attn.o_norm.weight", 0, NULL},
    {"w_g", "self_attn.g_proj.weight", 0, NULL},        {"w_g_down", "self_attn.g_a_proj.weight", 0, NULL},
    {"w_g_up", "self_attn.g_b_proj.weight", 0, NULL},   {"w_o", "self_attn.o_proj.weight", 0, NULL},
    {NULL, NULL, 0, NULL}};

static const hf_rule mla_rules[] = {
    {"w_dq", "self_attn.q_a_proj.weight", 0, NULL},    {"q_norm", "self_attn.q_a_layernorm.weight", 0, NULL},
    {"w_dkv", "self_attn.kv_a_proj_with_mqa.weight", 0, NULL},
    {"kv_norm", "self_attn.kv_a_layernorm.weight", 0, NULL},
    {"w_ukv", "self_attn.kv_b_proj.weight", 0, NULL},  {"w_g", "self_attn.g_proj.weight", 0, NULL},
    {"w_o", "self_attn.o_proj.weight", 0, NULL},       {NULL, NULL, 0, NULL}};

/* transformers 5.25's save_pretrained writes the dense layers under block_sparse_moe. */
static const hf_rule dense_rules[] = {{"w_gate", "mlp.gate_proj.weight", 0, "block_sparse_moe.gate_proj.weight"},
                                      {"w_upp", "mlp.up_proj.weight", 0, "block_sparse_moe.up_proj.weight"},
                                      {"w_dn", "mlp.down_proj.weight", 0, "block_sparse_moe.down_proj.weight"},
                                      {NULL, NULL, 0, NULL}};

static const hf_rule moe_rules[] = {
    {"w_router", "block_sparse_moe.gate.weight", 0, NULL},
    {"bias", "block_sparse_moe.gate.e_score_correction_bias", 0, NULL},
    {"w_gate", "block_sparse_moe.experts.%d.w1.weight", 0, NULL},
    {"w_upp", "block_sparse_moe.experts.%d.w3.weight", 0, NULL},
    {"w_dn", "block_sparse_moe.experts.%d.w2.weight", 0, NULL},
    {"shared/w_gate", "block_sparse_moe.shared_experts.gate_proj.weight", 0, NULL},
    {"shared/w_upp", "block_sparse_moe.shared_experts.up_proj.weight", 0, NULL},
    {"shared/w_dn", "block_sparse_moe.shared_experts.down_proj.weight", 0, NULL},
    {NULL, NULL, 0, NULL}};

typedef struct loader {
  hf_weights w;
  const clmoe_config *cfg;
  float *buf; /* one tensor's elements */
  size_t cap;
} loader;

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t len)
{
  size_t o = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && o + 24 < len; d++)
    o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
  snprintf(buf + o, len - o, "]");
}

/* 1 when the shapes are equal once their dimensions of size 1 are dropped. */
static int same_shape(int na, const int64_t *a, int nb, const int64_t *b)
{
  int i = 0, j = 0;
  for (;;) {
    while (i < na && a[i] == 1) i++;
    while (j < nb && b[j] == 1) j++;
    if (i == na || j == nb) return i == na && j == nb;
    if (a[i++] != b[j++]) return 0;
  }
}

/* Hub tensor `name` into dst (a contiguous tensor or view): shape checked, then read as
 * f32 (BF16 and F16 exactly) and written (rounded to nearest even for a bf16 dst). */
static clmoe_status load_one(loader *L, const char *name, const char *param, int flat, clmoe_tensor *dst)
{
  hf_tensor *t = clmoe__hf_weights_find(&L->w, name);
  if (!t)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: no tensor %s, which %s (parameter %s) needs", L->w.dir, name,
                        L->cfg->name, param);
  clmoe_st_file *f = clmoe__hf_weights_file(&L->w, t);
  clmoe_st_info info;
  CLMOE_TRY(clmoe_st_info_of(f, name, &info));
  const int64_t numel = clmoe_tensor_numel(dst);
  int ok = flat ? (int64_t)info.numel == numel : same_shape(info.ndim, info.shape, dst->ndim, dst->shape);
  if (!ok) {
    char got[96], want[96];
    shape_text(info.ndim, info.shape, got, sizeof got);
    shape_text(dst->ndim, dst->shape, want, sizeof want);
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: tensor %s is %s, but %s needs %s (parameter %s)", clmoe_st_path(f),
                        name, got, L->cfg->name, want, param);
  }
  if ((size_t)numel > L->cap) {
    float *b = realloc(L->buf, (size_t)numel * sizeof *b);
    if (!b) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory (%lld elements)", name,
                                (long long)numel);
    L->buf = b, L->cap = (size_t)numel;
  }
  clmoe_status st = clmoe_st_read_f32(f, name, L->buf, (size_t)numel);
  if (st == CLMOE_OK) st = clmoe_tensor_write_f32(dst, L->buf);
  if (st != CLMOE_OK) return st;
  t->used = 1;
  return CLMOE_OK;
}

/* A routed-expert parameter [E, ...]: row e from expert e's tensor (with expert
 * parallelism, the rank's rows; every expert's tensor is still checked to exist). */
static clmoe_status load_experts(loader *L, const char *pattern, int layer, clmoe_param *p)
{
  char name[256], fmt[256];
  snprintf(fmt, sizeof fmt, "model.layers.%d.%s", layer, pattern);
  const int64_t rows = p->value->shape[0];
  const int64_t global = p->rows ? p->global_rows : rows;
  for (int64_t e = 0; e < global; e++) {
    snprintf(name, sizeof name, fmt, (int)e);
    hf_tensor *t = clmoe__hf_weights_find(&L->w, name);
    if (!t)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: no tensor %s, which %s (parameter %s) needs", L->w.dir, name,
                          L->cfg->name, p->name);
    t->used = 1;
  }
  for (int64_t r = 0; r < rows; r++) {
    snprintf(name, sizeof name, fmt, (int)(p->rows ? p->rows[r] : r));
    const int64_t shape[2] = {p->value->shape[1], p->value->shape[2]};
    clmoe_tensor view;
    CLMOE_TRY(clmoe_tensor_view(p->value, &view, 2, shape, r * shape[0] * shape[1]));
    CLMOE_TRY(load_one(L, name, p->name, 0, &view));
  }
  return CLMOE_OK;
}

static const hf_rule *find_rule(const hf_rule *rules, const char *leaf)
{
  for (const hf_rule *r = rules; r->leaf; r++)
    if (!strcmp(r->leaf, leaf)) return r;
  return NULL;
}

static clmoe_status load_param(loader *L, clmoe_param *p)
{
  const clmoe_config *c = L->cfg;
  if (!strcmp(p->name, "embed")) return load_one(L, "model.embed_tokens.weight", p->name, 0, p->value);
  if (!strcmp(p->name, "head")) return load_one(L, "lm_head.weight", p->name, 0, p->value);
  if (!strcmp(p->name, "final/norm")) return load_one(L, "model.norm.weight", p->name, 0, p->value);
  int layer, end = 0;
  char part[8];
  if (sscanf(p->name, "layer%d/%5[a-z]/%n", &layer, part, &end) != 2 || end == 0 || layer < 0 ||
      layer >= c->layers)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: the model's parameter %s has no counterpart in Kimi Linear "
                        "checkpoints", c->name, p->name);
  const char *leaf = p->name + end;
  char name[256];
  const int mixer = !strcmp(part, "mixer");
  if (!strcmp(leaf, "norm")) {
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", layer,
             mixer ? "input_layernorm" : "post_attention_layernorm");
    return load_one(L, name, p->name, 0, p->value);
  }
  const hf_rule *r;
  if (mixer && c->is_mla[layer] && c->mla_q_rank == 0 && (!strcmp(leaf, "w_uq") || !strcmp(leaf, "w_q"))) {
    static const hf_rule direct = {"w_uq", "self_attn.q_proj.weight", 0, NULL};
    r = &direct;
  } else if (mixer && c->is_mla[layer] && !strcmp(leaf, "w_uq")) {
    static const hf_rule latent = {"w_uq", "self_attn.q_b_proj.weight", 0, NULL};
    r = &latent;
  } else {
    r = find_rule(mixer ? (c->is_mla[layer] ? mla_rules : kda_rules) : layer < c->dense_layers ? dense_rules
                                                                                                 : moe_rules,
                  leaf);
  }
  if (!r)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: the model's parameter %s has no counterpart in Kimi Linear "
                        "checkpoints", c->name, p->name);
  if (strstr(r->hub, "%d")) return load_experts(L, r->hub, layer, p);
  snprintf(name, sizeof name, "model.layers.%d.%s", layer, r->hub);
  if (r->alt && !clmoe__hf_weights_find(&L->w, name)) {
    char alt[256];
    snprintf(alt, sizeof alt, "model.layers.%d.%s", layer, r->alt);
    if (clmoe__hf_weights_find(&L->w, alt)) snprintf(name, sizeof name, "%s", alt);
  }
  return load_one(L, name, p->name, r->flat, p->value);
}

/* The model the config describes, its weight matrices made as `weights` from the start:
 * one process's, or this rank's part of an expert-parallel one (map NULL: the experts spread
 * evenly, the map owned by the model). */
static clmoe_status create(clmoe_ctx *ctx, const clmoe_config *cfg, clmoe_dist *dist, const clmoe_expert_map *map,
                           clmoe_dtype weights, clmoe_model **m)
{
  clmoe_expert_map *even = NULL;
  if (dist && !map) CLMOE_TRY(clmoe_expert_map_even((int)cfg->experts, clmoe_dist_size(dist), &even));
  clmoe_status st = clmoe__model_create_inference(ctx, cfg, dist, map ? map : even, weights, m);
  if (st != CLMOE_OK) {
    clmoe_expert_map_destroy(even);
    return st;
  }
  (*m)->owned_map = even;
  return CLMOE_OK;
}

static clmoe_status load(clmoe_ctx *ctx, const char *dir, clmoe_dist *dist, const clmoe_expert_map *map,
                         clmoe_dtype weights, clmoe_model **model)
{
  if (!model) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_hf_load: model is NULL");
  *model = NULL;
  if (!ctx || !dir) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_hf_load: ctx and dir are required");
  clmoe_config cfg;
  CLMOE_TRY(clmoe_hf_config_read(dir, &cfg));
  loader L = {.cfg = &cfg};
  CLMOE_TRY(clmoe__hf_weights_open(dir, &L.w));
  clmoe_model *m = NULL;
  clmoe_status st = create(ctx, &cfg, dist, map, weights, &m);
  clmoe_params *ps = st == CLMOE_OK ? clmoe_model_params(m) : NULL;
  for (int i = 0; st == CLMOE_OK && i < ps->n; i++) st = load_param(&L, &ps->p[i]);
  if (st == CLMOE_OK) {
    const hf_tensor *u = clmoe__hf_weights_unused(&L.w);
    if (u)
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor %s belongs to no parameter of the model %s describes",
                        clmoe_st_path(clmoe__hf_weights_file(&L.w, u)), u->name, cfg.name);
  }
  free(L.buf);
  clmoe__hf_weights_close(&L.w);
  if (st != CLMOE_OK) {
    clmoe_model_destroy(m);
    return st;
  }
  *model = m;
  return CLMOE_OK;
}

clmoe_status clmoe_hf_load(clmoe_ctx *ctx, const char *dir, clmoe_model **model)
{
  return load(ctx, dir, NULL, NULL, CLMOE_F32, model);
}

clmoe_status clmoe_hf_load_weights(clmoe_ctx *ctx, const char *dir, clmoe_dtype weights, clmoe_model **model)
{
  if (weights != CLMOE_F32 && weights != CLMOE_BF16) {
    if (model) *model = NULL;
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_hf_load_weights: weights must be fp32 or bf16");
  }
  return load(ctx, dir, NULL, NULL, weights, model);
}

clmoe_status clmoe_hf_load_ep(clmoe_ctx *ctx, const char *dir, clmoe_dist *dist, const clmoe_expert_map *map,
                              clmoe_model **model)
{
  if (!dist) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_hf_load_ep: dist is NULL");
  return load(ctx, dir, dist, map, CLMOE_F32, model);
}

clmoe_status clmoe_hf_load_ep_weights(clmoe_ctx *ctx, const char *dir, clmoe_dist *dist, const clmoe_expert_map *map,
                                      clmoe_dtype weights, clmoe_model **model)
{
  if (model) *model = NULL;
  if (!dist) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_hf_load_ep_weights: dist is NULL");
  if (weights != CLMOE_F32 && weights != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_hf_load_ep_weights: weights must be fp32 or bf16");
  return load(ctx, dir, dist, map, weights, model);
}
