/* Configuration files: the key table, a strict key = value parser with sections and the
 * shipped presets. The writer (model_config_write.c) is driven by the same key table; the
 * defaults, validation and parameter counting are in model_config_rules.c. */
#include "model_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clmoe/model_config.h"

/* ---- the key table ------------------------------------------------------------------- */
#define OFF(field) offsetof(clmoe_config, field)
#define TOFF(field) (offsetof(clmoe_config, train) + offsetof(clmoe_train_config, field))
static const char *const residual_names[] = {"attn_res", "plain", NULL};
static const char *const activation_names[] = {"situ", "swiglu", NULL};
static const char *const bool_names[] = {"false", "true", NULL};

/* The sections; those of a kind of layer (kda, mla, ffn, moe) are optional. */
const config_section clmoe__model_config_sections[] = {
    {"model", 0}, {"kda", 1},      {"mla", 1},   {"ffn", 1},
    {"moe", 1},   {"attn_res", 0}, {"train", 0}, {NULL, 0}};

const config_key clmoe__model_config_keys[] = {
    {"model", "vocab", CFG_I64, OFF(vocab), 2, 1 << 30, NULL},
    {"model", "d_model", CFG_I64, OFF(d_model), 1, 1 << 20, NULL},
    {"model", "layers", CFG_INT, OFF(layers), 1, CLMOE_MAX_LAYERS, NULL},
    {"model", "mla_every", CFG_EVERY, 0, 1, CLMOE_MAX_LAYERS, NULL},
    {"model", "mla_layers", CFG_LAYERS, 0, 1, CLMOE_MAX_LAYERS, NULL},
    {"model", "dense_layers", CFG_INT, OFF(dense_layers), 0, CLMOE_MAX_LAYERS, NULL},
    {"model", "norm_eps", CFG_F64, OFF(norm_eps), 1e-12, 1.0, NULL},
    {"model", "residual", CFG_CHOICE, OFF(residual), 0, 0, residual_names},
    {"kda", "heads", CFG_I64, OFF(kda_heads), 1, 4096, NULL},
    {"kda", "head_dim", CFG_I64, OFF(kda_head_dim), 1, 4096, NULL},
    {"kda", "gate_rank", CFG_I64, OFF(kda_gate_rank), 1, 1 << 20, NULL},
    {"kda", "conv_width", CFG_INT, OFF(kda_conv_width), 1, 64, NULL},
    {"kda", "lower_bound", CFG_F64, OFF(kda_lower_bound), -5.0, -1e-6, NULL},
    {"kda", "gate", CFG_GATE, OFF(kda_unbounded_gate), 0, 0, NULL},
    {"kda", "out_gate_rank", CFG_I64, OFF(kda_out_gate_rank), 0, 1 << 20, NULL},
    {"mla", "heads", CFG_I64, OFF(mla_heads), 1, 4096, NULL},
    {"mla", "q_rank", CFG_I64, OFF(mla_q_rank), 0, 1 << 20, NULL},
    {"mla", "kv_rank", CFG_I64, OFF(mla_kv_rank), 1, 1 << 20, NULL},
    {"mla", "qk_nope_dim", CFG_I64, OFF(mla_qk_nope_dim), 1, 4096, NULL},
    {"mla", "qk_rope_dim", CFG_I64, OFF(mla_qk_rope_dim), 0, 4096, NULL},
    {"mla", "v_dim", CFG_I64, OFF(mla_v_dim), 1, 4096, NULL},
    {"mla", "output_gate", CFG_CHOICE, OFF(mla_output_gate), 0, 0, bool_names},
    {"mla", "norm_eps", CFG_F64, OFF(mla_norm_eps), 0.0, 1.0, NULL},
    {"ffn", "dense_ff", CFG_I64, OFF(dense_ff), 1, 1 << 24, NULL},
    {"ffn", "activation", CFG_CHOICE, OFF(activation), 0, 0, activation_names},
    {"moe", "experts", CFG_I64, OFF(experts), 1, 1 << 20, NULL},
    {"moe", "top_k", CFG_I64, OFF(top_k), 1, 1024, NULL},
    {"moe", "shared_experts", CFG_I64, OFF(shared_experts), 0, 64, NULL},
    {"moe", "shared_ff", CFG_I64, OFF(shared_ff), 1, 1 << 24, NULL},
    {"moe", "latent", CFG_I64, OFF(latent), 0, 1 << 20, NULL},
    {"moe", "expert_ff", CFG_I64, OFF(expert_ff), 1, 1 << 24, NULL},
    {"moe", "routed_scale", CFG_F64, OFF(routed_scale), 1e-6, 1e6, NULL},
    {"moe", "balancing", CFG_BALANCE, OFF(balancing), 0, 0, NULL},
    {"moe", "quantile_bins", CFG_INT, OFF(quantile_bins), 2, 1 << 24, NULL},
    {"moe", "sign_rate", CFG_F64, OFF(sign_rate), 0.0, 1.0, NULL},
    {"moe", "groups", CFG_I64, OFF(groups), 1, 1 << 20, NULL},
    {"moe", "topk_groups", CFG_I64, OFF(topk_groups), 1, 1 << 20, NULL},
    {"moe", "renormalize", CFG_CHOICE, OFF(renormalize), 0, 0, bool_names},
    {"attn_res", "block", CFG_INT, OFF(attn_res_block), 1, CLMOE_MAX_LAYERS, NULL},
    {"train", "lr", CFG_F64, TOFF(lr), 0.0, 10.0, NULL},
    {"train", "min_lr", CFG_F64, TOFF(min_lr), 0.0, 10.0, NULL},
    {"train", "warmup_steps", CFG_I64, TOFF(warmup_steps), 0, 1e15, NULL},
    {"train", "steps", CFG_I64, TOFF(steps), 0, 1e15, NULL},
    {"train", "batch", CFG_I64, TOFF(batch), 1, 1 << 20, NULL},
    {"train", "seq_len", CFG_I64, TOFF(seq_len), 1, 1 << 24, NULL},
    {"train", "curriculum", CFG_CURRICULUM, 0, 1, 1 << 24, NULL},
    {"train", "weight_decay", CFG_F64, TOFF(weight_decay), 0.0, 10.0, NULL},
    {"train", "beta1", CFG_F64, TOFF(beta1), 0.0, 0.999999, NULL},
    {"train", "beta2", CFG_F64, TOFF(beta2), 0.0, 0.999999, NULL},
    {"train", "adam_eps", CFG_F64, TOFF(adam_eps), 1e-30, 1.0, NULL},
    {"train", "clip", CFG_F64, TOFF(clip), 0.0, 1e9, NULL},
    {"train", "seed", CFG_U64, TOFF(seed), 0, 0, NULL},
    {"train", "eval_every", CFG_I64, TOFF(eval_every), 0, 1e15, NULL},
    {"train", "eval_batches", CFG_I64, TOFF(eval_batches), 0, 1e9, NULL},
    {"train", "log_every", CFG_I64, TOFF(log_every), 1, 1e15, NULL},
    {"train", "checkpoint_every", CFG_I64, TOFF(checkpoint_every), 0, 1e15, NULL},
    {"train", "keep_checkpoints", CFG_I64, TOFF(keep_checkpoints), 0, 1e9, NULL},
    {"train", "precision", CFG_PRECISION, TOFF(precision), 0, 0, NULL},
    {NULL, NULL, CFG_I64, 0, 0, 0, NULL}};
#define NKEYS (sizeof clmoe__model_config_keys / sizeof clmoe__model_config_keys[0] - 1)

const char *const clmoe__model_config_balancing[] = {"quantile", "quantile-hist", "sign", "none",
                                                     NULL};

/* ---- values ---------------------------------------------------------------------------- */
static int parse_i64(const char *s, int64_t *v)
{
  char *end;
  errno = 0;
  double d = strtod(s, &end); /* accepts 1e5 too, checked to be a whole number */
  if (errno || end == s || *end || d != floor(d) || fabs(d) > 9e15) return 0;
  *v = (int64_t)d;
  return 1;
}

static int parse_f64(const char *s, double *v)
{
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return !errno && end != s && !*end && isfinite(*v);
}

typedef struct parser {
  const char *name;
  int line;
  const char *key;
} parser;

static clmoe_status bad(const parser *p, const char *fmt, const char *detail)
{
  char what[256];
  snprintf(what, sizeof what, fmt, detail);
  return clmoe__error(CLMOE_ERR_FORMAT, "%s:%d: %s%s%s", p->name, p->line, p->key ? p->key : "",
                      p->key ? ": " : "", what);
}

/* Splits a comma-separated list in place; returns the count (at most max). */
static int split_list(char *s, char **items, int max)
{
  int n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (isspace((unsigned char)*tok)) tok++;
    char *e = tok + strlen(tok);
    while (e > tok && isspace((unsigned char)e[-1])) *--e = '\0';
    if (n == max) return -1;
    items[n++] = tok;
  }
  return n;
}

/* One item of a layer list: a 1-based layer n (*first = *last = n) or a range a-b, a <= b. */
static clmoe_status parse_layers(const parser *p, char *item, int64_t *first, int64_t *last)
{
  char *dash = strchr(item, '-');
  if (dash && dash != item) { /* (a leading '-' is a negative number: not a layer) */
    *dash = '\0';
    int ok = parse_i64(item, first) && parse_i64(dash + 1, last);
    *dash = '-';
    if (!ok || *first < 1 || *last > CLMOE_MAX_LAYERS || *first > *last)
      return bad(p, "'%s' is not a range of layers a-b (1-based, a <= b)", item);
    return CLMOE_OK;
  }
  if (!parse_i64(item, first) || *first < 1 || *first > CLMOE_MAX_LAYERS)
    return bad(p, "'%s' is not a layer number (1-based)", item);
  *last = *first;
  return CLMOE_OK;
}

static clmoe_status set_value(const parser *p, const config_key *k, char *value, clmoe_config *c,
                              int *mla_every)
{
  char *base = (char *)c;
  int64_t i;
  double d;
  switch (k->kind) {
  case CFG_I64:
  case CFG_INT:
  case CFG_EVERY:
    if (!parse_i64(value, &i)) return bad(p, "'%s' is not a whole number", value);
    if (i < k->lo || i > k->hi) {
      char range[96];
      snprintf(range, sizeof range, "%lld is outside [%.0f, %.0f]", (long long)i, k->lo, k->hi);
      return bad(p, "%s", range);
    }
    if (k->kind == CFG_EVERY) *mla_every = (int)i;
    else if (k->kind == CFG_INT) *(int *)(base + k->offset) = (int)i;
    else *(int64_t *)(base + k->offset) = i;
    return CLMOE_OK;
  case CFG_U64: {
    char *end;
    errno = 0;
    unsigned long long u = strtoull(value, &end, 10); /* decimal, like every integer key */
    if (errno || end == value || *end || value[0] == '-') return bad(p, "'%s' is not an unsigned number", value);
    *(uint64_t *)(base + k->offset) = u;
    return CLMOE_OK;
  }
  case CFG_F64:
    if (!parse_f64(value, &d)) return bad(p, "'%s' is not a number", value);
    if (d < k->lo || d > k->hi) {
      char range[96];
      snprintf(range, sizeof range, "%g is outside [%g, %g]", d, k->lo, k->hi);
      return bad(p, "%s", range);
    }
    *(double *)(base + k->offset) = d;
    return CLMOE_OK;
  case CFG_BALANCE:
    for (int b = 0; clmoe__model_config_balancing[b]; b++)
      if (!strcmp(value, clmoe__model_config_balancing[b])) {
        memset(c->balancing, 0, sizeof c->balancing);
        snprintf(c->balancing, sizeof c->balancing, "%s", value);
        return CLMOE_OK;
      }
    return bad(p, "'%s' is not one of quantile, quantile-hist, sign, none", value);
  case CFG_GATE:
    if (!strcmp(value, "bounded") || !strcmp(value, "unbounded")) {
      c->kda_unbounded_gate = !strcmp(value, "unbounded");
      return CLMOE_OK;
    }
    return bad(p, "'%s' is not bounded or unbounded", value);
  case CFG_CHOICE: {
    char list[128] = "";
    for (int n = 0; k->choices[n]; n++) {
      if (!strcmp(value, k->choices[n])) {
        *(int *)(base + k->offset) = n;
        return CLMOE_OK;
      }
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", n ? ", " : "", k->choices[n]);
    }
    char what[192];
    snprintf(what, sizeof what, "'%%s' is not one of %s", list);
    return bad(p, what, value);
  }
  case CFG_PRECISION:
    for (int q = CLMOE_PRECISION_AUTO; q <= CLMOE_PRECISION_BF16; q++)
      if (!strcmp(value, clmoe_precision_name((clmoe_precision)q))) {
        *(int *)(base + k->offset) = q;
        return CLMOE_OK;
      }
    return bad(p, "'%s' is not one of bf16, fp32, auto", value);
  case CFG_LAYERS: {
    char *items[CLMOE_MAX_LAYERS + 1];
    int n = split_list(value, items, CLMOE_MAX_LAYERS);
    if (n <= 0) return bad(p, "%s", "expected a comma-separated list of layer numbers");
    for (int j = 0; j < n; j++) {
      int64_t last;
      CLMOE_TRY(parse_layers(p, items[j], &i, &last));
      for (; i <= last; i++) c->is_mla[i - 1] = 2; /* 2: named (checked against `layers` later) */
    }
    return CLMOE_OK;
  }
  case CFG_CURRICULUM: {
    char *items[CLMOE_MAX_CURRICULUM + 1];
    int n = split_list(value, items, CLMOE_MAX_CURRICULUM);
    if (n <= 0) return bad(p, "%s", "expected 'length@step, ...' (at most 16 entries)");
    for (int j = 0; j < n; j++) {
      char *at = strchr(items[j], '@');
      int64_t len, step;
      if (!at) return bad(p, "'%s' is not length@step", items[j]);
      *at = '\0';
      if (!parse_i64(items[j], &len) || !parse_i64(at + 1, &step) || len < 1 || step < 0)
        return bad(p, "'%s' is not length@step with length >= 1 and step >= 0", items[j]);
      if (j == 0 && step != 0) return bad(p, "%s", "the first entry must start at step 0");
      if (j > 0 && step <= c->train.curriculum_step[j - 1])
        return bad(p, "%s", "steps must increase from entry to entry");
      c->train.curriculum_len[j] = len;
      c->train.curriculum_step[j] = step;
    }
    c->train.ncurriculum = n;
    return CLMOE_OK;
  }
  }
  return clmoe__error(CLMOE_ERR_INTERNAL, "%s: key %s of unknown kind %d", p->name, k->key,
                      (int)k->kind);
}

/* ---- parsing --------------------------------------------------------------------------- */
static char *trim(char *s)
{
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

static clmoe_status parse_text(const char *text, const char *name, clmoe_config *c)
{
  parser p = {name, 0, NULL};
  char section[32] = "";
  int mla_every = 0;
  unsigned char seen[NKEYS];
  memset(seen, 0, sizeof seen);
  memset(c->is_mla, 0, sizeof c->is_mla);
  snprintf(c->name, sizeof c->name, "%s", name);
  for (const char *s = text; *s;) {
    const char *nl = strchr(s, '\n');
    size_t len = nl ? (size_t)(nl - s) : strlen(s);
    p.line++;
    p.key = NULL;
    if (len > CONFIG_LINE_MAX) {
      char what[64];
      snprintf(what, sizeof what, "line longer than %d characters", CONFIG_LINE_MAX);
      return bad(&p, "%s", what);
    }
    char buf[CONFIG_LINE_MAX + 1];
    memcpy(buf, s, len);
    buf[len] = '\0';
    s += len + (nl ? 1 : 0);
    char *hash = strchr(buf, '#');
    if (hash) *hash = '\0';
    char *line = trim(buf);
    if (!*line) continue;
    if (*line == '[') {
      char *close = strchr(line, ']');
      if (!close || close[1] != '\0') return bad(&p, "'%s' is not a [section] header", line);
      *close = '\0';
      char *sec = trim(line + 1);
      const config_section *known = clmoe__model_config_sections;
      while (known->name && strcmp(known->name, sec)) known++;
      if (!known->name) {
        char list[128] = "";
        for (const config_section *t = clmoe__model_config_sections; t->name; t++) {
          const size_t used = strlen(list);
          snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", t->name);
        }
        char what[192];
        snprintf(what, sizeof what, "unknown section [%.40s] (%s)", sec, list);
        return bad(&p, "%s", what);
      }
      snprintf(section, sizeof section, "%s", sec);
      continue;
    }
    char *eq = strchr(line, '=');
    if (!eq) return bad(&p, "'%s' is neither 'key = value' nor a [section]", line);
    *eq = '\0';
    char *key = trim(line), *value = trim(eq + 1);
    if (!section[0]) return bad(&p, "'%s' comes before any [section]", key);
    size_t k = 0;
    const config_key *keys = clmoe__model_config_keys;
    while (k < NKEYS && (strcmp(keys[k].section, section) || strcmp(keys[k].key, key))) k++;
    char qualified[80];
    snprintf(qualified, sizeof qualified, "[%s] %s", section, key);
    p.key = qualified;
    if (k == NKEYS) return bad(&p, "%s", "unknown key");
    if (seen[k]) return bad(&p, "%s", "given twice");
    if (!*value) return bad(&p, "%s", "no value");
    seen[k] = 1;
    CLMOE_TRY(set_value(&p, &keys[k], value, c, &mla_every));
  }
  /* The layer pattern: explicit layers must exist; every N-th layer from mla_every. */
  for (int i = 0; i < CLMOE_MAX_LAYERS; i++)
    if (c->is_mla[i] == 2 && i >= c->layers)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: [model] mla_layers names layer %d but the model has %d layers",
                          name, i + 1, c->layers);
  for (int i = 0; i < c->layers; i++) c->is_mla[i] = c->is_mla[i] || (mla_every && (i + 1) % mla_every == 0);
  return clmoe_config_validate(c, name);
}

clmoe_status clmoe_config_parse(const char *text, const char *name, clmoe_config *cfg)
{
  clmoe_config c;
  clmoe_config_defaults(&c);
  CLMOE_TRY(parse_text(text, name, &c));
  *cfg = c;
  return CLMOE_OK;
}

clmoe_status clmoe_config_load(const char *path, clmoe_config *cfg)
{
  FILE *f = fopen(path, "rb");
  if (!f) return clmoe__error(CLMOE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *text = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = cap ? 2 * cap : 8192;
      char *grown = cap <= (1u << 24) ? realloc(text, cap) : NULL;
      if (!grown) {
        free(text);
        fclose(f);
        return clmoe__error(CLMOE_ERR_FORMAT, "%s: larger than 16 MB: not a config file", path);
      }
      text = grown;
    }
    size_t got = fread(text + n, 1, 4096, f);
    n += got;
    if (got < 4096) break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(text);
    return clmoe__error(CLMOE_ERR_IO, "%s: read error", path);
  }
  text[n] = '\0';
  clmoe_status st = CLMOE_OK;
  if (memchr(text, '\0', n)) st = clmoe__error(CLMOE_ERR_FORMAT, "%s: contains a NUL byte: not a text file", path);
  else st = clmoe_config_parse(text, path, cfg);
  free(text);
  return st;
}

const char *const *clmoe_config_preset_names(void)
{
  static const char *names[16];
  if (!names[0]) {
    int n = 0;
    for (const clmoe_kernel_source *s = clmoe__preset_sources; s->family && n < 15; s++) names[n++] = s->family;
    names[n] = NULL;
  }
  return names;
}

clmoe_status clmoe_config_preset(const char *preset, clmoe_config *cfg)
{
  for (const clmoe_kernel_source *s = clmoe__preset_sources; s->family; s++)
    if (!strcmp(s->family, preset)) return clmoe_config_parse(s->text, preset, cfg);
  char list[256] = "";
  for (const char *const *n = clmoe_config_preset_names(); *n; n++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", *n);
  return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "unknown preset '%s' (presets: %s)", preset, list);
}
