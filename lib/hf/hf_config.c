/* config.json of a Kimi Linear checkpoint -> clmoe_config (include/clmoe/hf.h). Both forms
 * in use are read: the hub's (linear_attn_config, first_k_dense_replace, num_experts, ...)
 * and transformers 5's (layer_types, mlp_layer_types, linear_num_heads, n_routed_experts,
 * ...). Where both spell a value, either is accepted; two spellings that disagree are an
 * error. The defaults are KimiLinearConfig's where the key may be left out. */
#include "hf_internal.h"
#include "tokenize/tokenize_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct hf_cfg {
  const char *path;
  const tj_node *root, *lin; /* the object and its linear_attn_config (or NULL) */
} hf_cfg;

static clmoe_status bad(const hf_cfg *h, const char *key, const char *what)
{
  return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s: %s", h->path, key, what);
}

/* The member of the first spelling present in o; *used the spelling. Two spellings that are
 * both present must hold the same JSON number, string or literal. */
static clmoe_status member(const hf_cfg *h, const tj_node *o, const char *const *keys, const tj_node **out,
                           const char **used)
{
  *out = NULL, *used = keys[0];
  for (int i = 0; keys[i]; i++) {
    const tj_node *n = clmoe__tok_json_get(o, keys[i]);
    if (!n) continue;
    if (!*out) {
      *out = n, *used = keys[i];
      continue;
    }
    const tj_node *a = *out;
    const int same = a->type == n->type && (a->type != TJ_NUMBER || a->num == n->num) &&
                     (a->type != TJ_STRING || (a->len == n->len && !memcmp(a->str, n->str, a->len)));
    if (!same) {
      char what[160];
      snprintf(what, sizeof what, "disagrees with %s (two spellings of one setting)", *used);
      return bad(h, keys[i], what);
    }
  }
  return CLMOE_OK;
}

/* An integer in [lo, hi]; absent or null: def (def < lo: required). */
static clmoe_status get_int(const hf_cfg *h, const tj_node *o, const char *const *keys, int64_t lo, int64_t hi,
                            int64_t def, int64_t *v)
{
  const tj_node *n;
  const char *key;
  CLMOE_TRY(member(h, o, keys, &n, &key));
  if (!n || n->type == TJ_NULL) {
    if (def < lo) return bad(h, key, "required (a whole number) but absent");
    *v = def;
    return CLMOE_OK;
  }
  if (!clmoe__tok_json_int(n, lo, hi, v)) {
    char what[96];
    snprintf(what, sizeof what, "not a whole number in [%lld, %lld]", (long long)lo, (long long)hi);
    return bad(h, key, what);
  }
  return CLMOE_OK;
}

static clmoe_status get_num(const hf_cfg *h, const tj_node *o, const char *key, double lo, double hi, double def,
                            double *v)
{
  const tj_node *n = clmoe__tok_json_get(o, key);
  if (!n || n->type == TJ_NULL) {
    *v = def;
    return CLMOE_OK;
  }
  if (n->type != TJ_NUMBER || !(n->num >= lo && n->num <= hi)) {
    char what[96];
    snprintf(what, sizeof what, "not a number in [%g, %g]", lo, hi);
    return bad(h, key, what);
  }
  *v = n->num;
  return CLMOE_OK;
}

/* true / false; absent or null: def. */
static clmoe_status get_bool(const hf_cfg *h, const tj_node *o, const char *const *keys, int def, int *v)
{
  const tj_node *n;
  const char *key;
  CLMOE_TRY(member(h, o, keys, &n, &key));
  if (!n || n->type == TJ_NULL) *v = def;
  else if (n->type == TJ_TRUE || n->type == TJ_FALSE) *v = n->type == TJ_TRUE;
  else return bad(h, key, "not true or false");
  return CLMOE_OK;
}

/* A string member equal to one of the accepted values (absent: def, which may be NULL). */
static clmoe_status expect_string(const hf_cfg *h, const tj_node *o, const char *key, const char *def,
                                  const char *const *accepted, const char *why)
{
  const tj_node *n = clmoe__tok_json_get(o, key);
  if (!n || n->type == TJ_NULL) {
    if (def) return CLMOE_OK;
    return bad(h, key, "required but absent");
  }
  if (n->type == TJ_STRING)
    for (int i = 0; accepted[i]; i++)
      if (!strcmp(n->str, accepted[i])) return CLMOE_OK;
  char what[256];
  snprintf(what, sizeof what, "'%.60s' is not supported (%s)", n->type == TJ_STRING ? n->str : "?", why);
  return bad(h, key, what);
}

/* Layer kinds from a list of strings ([layers], values a / b -> 0 / 1). */
static clmoe_status kinds_from_types(const hf_cfg *h, const tj_node *list, const char *key, int layers,
                                     const char *a, const char *b, unsigned char *kind)
{
  if (list->type != TJ_ARRAY || (int64_t)list->len != layers) {
    char what[96];
    snprintf(what, sizeof what, "not a list of %d strings (one per layer)", layers);
    return bad(h, key, what);
  }
  for (int i = 0; i < layers; i++) {
    const tj_node *s = &list->kid[i];
    if (s->type == TJ_STRING && !strcmp(s->str, a)) kind[i] = 0;
    else if (s->type == TJ_STRING && !strcmp(s->str, b)) kind[i] = 1;
    else {
      char what[160];
      snprintf(what, sizeof what, "entry %d is not \"%s\" or \"%s\"", i, a, b);
      return bad(h, key, what);
    }
  }
  return CLMOE_OK;
}

/* MLA layers from linear_attn_config's kda_layers and full_attn_layers (1-based, a partition
 * of the layers). */
static clmoe_status kinds_from_lists(const hf_cfg *h, int layers, unsigned char *is_mla)
{
  static const char *const names[2] = {"linear_attn_config.kda_layers", "linear_attn_config.full_attn_layers"};
  unsigned char seen[CLMOE_MAX_LAYERS] = {0};
  for (int k = 0; k < 2; k++) {
    const tj_node *list = clmoe__tok_json_get(h->lin, k ? "full_attn_layers" : "kda_layers");
    if (!list || list->type != TJ_ARRAY) return bad(h, names[k], "not a list of 1-based layer numbers");
    for (size_t i = 0; i < list->len; i++) {
      int64_t l;
      if (!clmoe__tok_json_int(&list->kid[i], 1, layers, &l)) {
        char what[96];
        snprintf(what, sizeof what, "entry %zu is not a layer number in [1, %d]", i, layers);
        return bad(h, names[k], what);
      }
      if (seen[l - 1]) {
        char what[96];
        snprintf(what, sizeof what, "layer %lld is named twice", (long long)l);
        return bad(h, names[k], what);
      }
      seen[l - 1] = 1, is_mla[l - 1] = (unsigned char)k;
    }
  }
  for (int l = 0; l < layers; l++)
    if (!seen[l]) {
      char what[96];
      snprintf(what, sizeof what, "layer %d is in neither list", l + 1);
      return bad(h, "linear_attn_config", what);
    }
  return CLMOE_OK;
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

static clmoe_status read_layers(const hf_cfg *h, clmoe_config *c)
{
  const tj_node *types = clmoe__tok_json_get(h->root, "layer_types");
  unsigned char kind[CLMOE_MAX_LAYERS] = {0};
  const int have_lists = h->lin && clmoe__tok_json_get(h->lin, "full_attn_layers");
  if (have_lists) CLMOE_TRY(kinds_from_lists(h, c->layers, c->is_mla));
  if (types && types->type != TJ_NULL) {
    CLMOE_TRY(kinds_from_types(h, types, "layer_types", c->layers, "linear_attention", "full_attention", kind));
    for (int l = 0; l < c->layers; l++) {
      if (have_lists && kind[l] != c->is_mla[l])
        return bad(h, "layer_types", "disagrees with linear_attn_config.full_attn_layers");
      c->is_mla[l] = kind[l];
    }
  } else if (!have_lists) {
    return bad(h, "layer_types", "absent, and so is linear_attn_config.full_attn_layers: which layers are "
               "MLA is not known");
  }
  const tj_node *mlp = clmoe__tok_json_get(h->root, "mlp_layer_types");
  int64_t first_dense;
  CLMOE_TRY(get_int(h, h->root, KEYS("first_k_dense_replace"), 0, c->layers, 1, &first_dense));
  if (mlp && mlp->type != TJ_NULL) {
    CLMOE_TRY(kinds_from_types(h, mlp, "mlp_layer_types", c->layers, "dense", "sparse", kind));
    int n = 0;
    while (n < c->layers && kind[n] == 0) n++;
    for (int l = n; l < c->layers; l++)
      if (kind[l] == 0)
        return bad(h, "mlp_layer_types", "dense layers after a sparse one: only the first layers may be dense");
    if (clmoe__tok_json_get(h->root, "first_k_dense_replace") && n != first_dense)
      return bad(h, "mlp_layer_types", "disagrees with first_k_dense_replace");
    first_dense = n;
  }
  c->dense_layers = (int)first_dense;
  return CLMOE_OK;
}

static clmoe_status read_kda(const hf_cfg *h, clmoe_config *c)
{
  const tj_node *lin = h->lin ? h->lin : h->root;
  CLMOE_TRY(get_int(h, lin, h->lin ? KEYS("num_heads") : KEYS("linear_num_heads"), 1, 4096, 32, &c->kda_heads));
  CLMOE_TRY(get_int(h, lin, h->lin ? KEYS("head_dim") : KEYS("linear_head_dim"), 1, 4096, 128, &c->kda_head_dim));
  int64_t conv;
  CLMOE_TRY(get_int(h, lin, h->lin ? KEYS("short_conv_kernel_size") : KEYS("linear_conv_kernel_dim"), 1, 64, 4,
                    &conv));
  c->kda_conv_width = (int)conv;
  /* f_a/f_b and g_a/g_b are low rank through the head dimension */
  c->kda_gate_rank = c->kda_head_dim;
  c->kda_out_gate_rank = c->kda_head_dim;
  c->kda_unbounded_gate = 1;
  if (h->lin) {
    /* K3's form: the lower-bounded gate and a full-rank output gate */
    const tj_node *lb = clmoe__tok_json_get(h->lin, "gate_lower_bound");
    if (lb && lb->type != TJ_NULL) {
      CLMOE_TRY(get_num(h, h->lin, "gate_lower_bound", -5.0, -1e-6, -5.0, &c->kda_lower_bound));
      c->kda_unbounded_gate = 0;
    }
    int full = 0;
    CLMOE_TRY(get_bool(h, h->lin, KEYS("use_full_rank_gate"), 0, &full));
    if (full) c->kda_out_gate_rank = 0;
  }
  return CLMOE_OK;
}

static clmoe_status read_mla(const hf_cfg *h, clmoe_config *c)
{
  const tj_node *r = h->root;
  int64_t kv_heads;
  CLMOE_TRY(get_int(h, r, KEYS("num_key_value_heads"), 1, 4096, c->mla_heads, &kv_heads));
  if (kv_heads != c->mla_heads)
    return bad(h, "num_key_value_heads", "differs from num_attention_heads (MLA has one latent for every head)");
  CLMOE_TRY(get_int(h, r, KEYS("q_lora_rank"), 0, 1 << 20, 0, &c->mla_q_rank));
  CLMOE_TRY(get_int(h, r, KEYS("kv_lora_rank"), 1, 1 << 20, 512, &c->mla_kv_rank));
  CLMOE_TRY(get_int(h, r, KEYS("qk_nope_head_dim"), 1, 4096, 128, &c->mla_qk_nope_dim));
  CLMOE_TRY(get_int(h, r, KEYS("qk_rope_head_dim"), 0, 4096, 64, &c->mla_qk_rope_dim));
  CLMOE_TRY(get_int(h, r, KEYS("v_head_dim"), 1, 4096, 128, &c->mla_v_dim));
  int nope = 1, gate = 0, bias = 0;
  CLMOE_TRY(get_bool(h, r, KEYS("mla_use_nope"), 1, &nope));
  if (!nope) return bad(h, "mla_use_nope", "false: MLA with rotary embeddings is not supported (NoPE only)");
  /* transformers builds q_a_layernorm and kv_a_layernorm with its RMSNorm's default eps */
  c->mla_norm_eps = 1e-6;
  CLMOE_TRY(get_bool(h, r, KEYS("mla_use_output_gate"), 0, &gate));
  c->mla_output_gate = gate;
  CLMOE_TRY(get_bool(h, r, KEYS("attention_bias"), 0, &bias));
  if (bias) return bad(h, "attention_bias", "true: projections with biases are not supported");
  return CLMOE_OK;
}

static clmoe_status read_moe(const hf_cfg *h, clmoe_config *c)
{
  const tj_node *r = h->root;
  CLMOE_TRY(get_int(h, r, KEYS("num_experts", "n_routed_experts", "num_local_experts"), 1, 1 << 20, 256,
                    &c->experts));
  CLMOE_TRY(get_int(h, r, KEYS("num_experts_per_token", "num_experts_per_tok"), 1, 1024, 8, &c->top_k));
  CLMOE_TRY(get_int(h, r, KEYS("moe_intermediate_size"), 1, 1 << 24, 1024, &c->expert_ff));
  int64_t shared;
  CLMOE_TRY(get_int(h, r, KEYS("num_shared_experts", "n_shared_experts"), 0, 64, 1, &shared));
  c->shared_experts = shared, c->shared_ff = shared > 0 ? c->expert_ff : 0;
  CLMOE_TRY(get_num(h, r, "routed_scaling_factor", 1e-6, 1e6, 2.446, &c->routed_scale));
  int grouped = 1;
  CLMOE_TRY(get_bool(h, r, KEYS("use_grouped_topk"), 1, &grouped));
  CLMOE_TRY(get_int(h, r, KEYS("num_expert_group", "n_group"), 1, 1 << 20, 1, &c->groups));
  CLMOE_TRY(get_int(h, r, KEYS("topk_group"), 1, 1 << 20, 1, &c->topk_groups));
  if (!grouped) c->groups = 1, c->topk_groups = 1;
  CLMOE_TRY(get_bool(h, r, KEYS("moe_renormalize", "norm_topk_prob"), 1, &c->renormalize));
  CLMOE_TRY(expect_string(h, r, "moe_router_activation_func", "sigmoid", KEYS("sigmoid"),
                          "the router's scores are sigmoid(W x)"));
  int64_t freq;
  CLMOE_TRY(get_int(h, r, KEYS("moe_layer_freq"), 1, CLMOE_MAX_LAYERS, 1, &freq));
  if (freq != 1) return bad(h, "moe_layer_freq", "not 1: MoE layers that alternate with dense ones are not supported");
  c->latent = 0;
  snprintf(c->balancing, sizeof c->balancing, "none"); /* the correction bias is loaded, never updated */
  return CLMOE_OK;
}

/* A key given twice in object o (JSON allows it; a config that does is ambiguous). */
static clmoe_status no_duplicates(const hf_cfg *h, const tj_node *o, const char *prefix)
{
  for (size_t i = 1; i < o->len; i++)
    for (size_t j = 0; j < i; j++)
      if (!strcmp(o->kid[i].key, o->kid[j].key)) {
        char key[160];
        snprintf(key, sizeof key, "%s%s", prefix, o->kid[i].key);
        return bad(h, key, "given twice");
      }
  return CLMOE_OK;
}

static clmoe_status read_config(const hf_cfg *h, clmoe_config *c)
{
  const tj_node *r = h->root;
  if (r->type != TJ_OBJECT) return bad(h, "(top level)", "not a JSON object");
  CLMOE_TRY(no_duplicates(h, r, ""));
  CLMOE_TRY(expect_string(h, r, "model_type", NULL, KEYS("kimi_linear"),
                          "only Kimi Linear checkpoints (model_type kimi_linear) are read"));
  CLMOE_TRY(expect_string(h, r, "hidden_act", "silu", KEYS("silu"), "the FFNs are SwiGLU"));
  CLMOE_TRY(get_int(h, r, KEYS("vocab_size"), 2, 1 << 30, -1, &c->vocab));
  CLMOE_TRY(get_int(h, r, KEYS("hidden_size"), 1, 1 << 20, -1, &c->d_model));
  int64_t layers;
  CLMOE_TRY(get_int(h, r, KEYS("num_hidden_layers"), 1, CLMOE_MAX_LAYERS, -1, &layers));
  c->layers = (int)layers;
  CLMOE_TRY(get_int(h, r, KEYS("num_attention_heads"), 1, 4096, -1, &c->mla_heads));
  CLMOE_TRY(get_num(h, r, "rms_norm_eps", 1e-12, 1.0, 1e-5, &c->norm_eps));
  CLMOE_TRY(get_int(h, r, KEYS("intermediate_size"), 1, 1 << 24, 9216, &c->dense_ff));
  const tj_node *lin = clmoe__tok_json_get(r, "linear_attn_config");
  if (lin && lin->type != TJ_NULL && lin->type != TJ_OBJECT) return bad(h, "linear_attn_config", "not an object");
  ((hf_cfg *)h)->lin = lin && lin->type == TJ_OBJECT ? lin : NULL;
  if (h->lin) CLMOE_TRY(no_duplicates(h, h->lin, "linear_attn_config."));
  const tj_node *ar = clmoe__tok_json_get(r, "attn_res_block_size");
  if (ar && ar->type != TJ_NULL)
    return bad(h, "attn_res_block_size", "Block Attention Residuals checkpoints are not read yet (the tensor "
               "names of the AttnRes queries and gains are not known)");
  int tied = 0;
  CLMOE_TRY(get_bool(h, r, KEYS("tie_word_embeddings"), 0, &tied));
  if (tied) return bad(h, "tie_word_embeddings", "true: a tied output head is not supported");
  c->residual = CLMOE_RESIDUAL_PLAIN;
  c->activation = CLMOE_ACTIVATION_SWIGLU;
  CLMOE_TRY(read_layers(h, c));
  CLMOE_TRY(read_kda(h, c));
  CLMOE_TRY(read_mla(h, c));
  return read_moe(h, c);
}

int clmoe_hf_is_checkpoint(const char *path)
{
  struct stat sb;
  char file[4200];
  if (!path || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return 0;
  snprintf(file, sizeof file, "%s/config.json", path);
  return stat(file, &sb) == 0 && S_ISREG(sb.st_mode);
}

clmoe_status clmoe_hf_config_read(const char *path, clmoe_config *cfg)
{
  if (!path || !cfg) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_hf_config_read: path and cfg are required");
  char file[4200];
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(file, sizeof file, "%s/config.json", path);
  else snprintf(file, sizeof file, "%s", path);
  tj_doc *doc;
  const tj_node *root;
  CLMOE_TRY(clmoe__tok_json_read(file, &doc, &root));
  clmoe_config c;
  clmoe_config_defaults(&c);
  const size_t n = strlen(file), keep = n < sizeof c.name ? n : sizeof c.name - 1;
  memcpy(c.name, file + n - keep, keep); /* the end of the path: the directory's name */
  c.name[keep] = '\0';
  hf_cfg h = {file, root, NULL};
  clmoe_status st = read_config(&h, &c);
  clmoe__tok_json_free(doc);
  if (st == CLMOE_OK) st = clmoe_config_validate(&c, file);
  if (st == CLMOE_OK) *cfg = c;
  return st;
}
