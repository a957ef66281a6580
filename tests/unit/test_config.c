/* CUnit suite: configuration files. The presets parse and reproduce the published
 * parameter counts; a config written out parses back to itself, field by field, and the
 * written text is a fixed point (write(parse(write(c))) = write(c)) for every preset, for
 * the known hard cases (sections of kinds of layer the model does not have, given in part;
 * long layer lists) and for a few hundred random configs over the keys' ranges; every file
 * of the corpus tests/data/bad/config gives its own clear error naming the file and line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h" /* the key table: clmoe__model_config_keys */
#include "test_common.h"

static void test_presets(void)
{
  int n = 0;
  for (const char *const *name = clmoe_config_preset_names(); *name; name++, n++) {
    clmoe_config c;
    clmoe_status st = clmoe_config_preset(*name, &c);
    if (st != CLMOE_OK) fprintf(stderr, "\n  preset %s: %s\n", *name, clmoe_last_error());
    CU_ASSERT_EQUAL(st, CLMOE_OK);
  }
  CU_ASSERT(n >= 5);
  clmoe_config c;
  CU_ASSERT_EQUAL(clmoe_config_preset("k4", &c), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "tiny"));
}

/* The report's totals (MODEL.md sections 1 and 6): K3 2.78T total, 104.2B active; the gpu
 * preset 705M total, 99M active. Rounded the way they are published. */
static void test_counts(void)
{
  clmoe_config c;
  clmoe_param_count p;
  TEST_OK(clmoe_config_preset("k3", &c));
  clmoe_config_count_params(&c, &p);
  CU_ASSERT_EQUAL(clmoe_config_mla_count(&c), 24);
  CU_ASSERT(fabs(p.total / 1e12 - 2.78) < 0.005);
  CU_ASSERT(fabs(p.active / 1e9 - 104.2) < 0.05);
  CU_ASSERT(p.active < p.total);
  TEST_OK(clmoe_config_preset("gpu", &c));
  clmoe_config_count_params(&c, &p);
  CU_ASSERT(fabs(p.total / 1e6 - 705) < 0.5);
  CU_ASSERT(fabs(p.active / 1e6 - 99) < 0.5);
  /* tiny: MLA only at layer 4, the dense FFN in layer 1. */
  TEST_OK(clmoe_config_preset("tiny", &c));
  CU_ASSERT(c.is_mla[3] && !c.is_mla[0] && !c.is_mla[1] && !c.is_mla[2]);
  CU_ASSERT_EQUAL(c.dense_layers, 1);
  CU_ASSERT_EQUAL(c.experts, 896);
  CU_ASSERT_EQUAL(c.top_k, 8);
}

/* ---- write and parse back ------------------------------------------------------------- */

/* The first field in which a and b differ (not the name), as "field: a vs b" in why; 0 when
 * none does. */
static int config_diff(const clmoe_config *a, const clmoe_config *b, char *why, size_t len)
{
#define SAME_I(f)                                                                          \
  if (a->f != b->f)                                                                        \
    return snprintf(why, len, #f ": %lld vs %lld", (long long)a->f, (long long)b->f), 1
#define SAME_D(f)                                                                          \
  if (memcmp(&a->f, &b->f, sizeof a->f))                                                   \
    return snprintf(why, len, #f ": %.17g vs %.17g", a->f, b->f), 1
  SAME_I(vocab);
  SAME_I(d_model);
  SAME_I(layers);
  for (int i = 0; i < CLMOE_MAX_LAYERS; i++) SAME_I(is_mla[i]);
  SAME_I(dense_layers);
  SAME_D(norm_eps);
  SAME_I(residual);
  SAME_I(kda_out_gate_rank);
  SAME_I(mla_output_gate);
  SAME_D(mla_norm_eps);
  SAME_I(activation);
  SAME_I(groups);
  SAME_I(topk_groups);
  SAME_I(renormalize);
  SAME_I(kda_heads);
  SAME_I(kda_head_dim);
  SAME_I(kda_gate_rank);
  SAME_I(kda_conv_width);
  SAME_I(kda_unbounded_gate);
  SAME_D(kda_lower_bound);
  SAME_I(mla_heads);
  SAME_I(mla_q_rank);
  SAME_I(mla_kv_rank);
  SAME_I(mla_qk_nope_dim);
  SAME_I(mla_qk_rope_dim);
  SAME_I(mla_v_dim);
  SAME_I(dense_ff);
  SAME_I(experts);
  SAME_I(top_k);
  SAME_I(shared_experts);
  SAME_I(shared_ff);
  SAME_I(latent);
  SAME_I(expert_ff);
  SAME_D(routed_scale);
  SAME_D(sign_rate);
  if (strcmp(a->balancing, b->balancing))
    return snprintf(why, len, "balancing: %s vs %s", a->balancing, b->balancing), 1;
  SAME_I(quantile_bins);
  SAME_I(attn_res_block);
  SAME_D(train.lr);
  SAME_D(train.min_lr);
  SAME_I(train.warmup_steps);
  SAME_I(train.steps);
  SAME_I(train.batch);
  SAME_I(train.seq_len);
  SAME_I(train.ncurriculum);
  for (int i = 0; i < a->train.ncurriculum; i++) {
    SAME_I(train.curriculum_len[i]);
    SAME_I(train.curriculum_step[i]);
  }
  SAME_D(train.weight_decay);
  SAME_D(train.beta1);
  SAME_D(train.beta2);
  SAME_D(train.adam_eps);
  SAME_D(train.clip);
  SAME_I(train.seed);
  SAME_I(train.eval_every);
  SAME_I(train.eval_batches);
  SAME_I(train.log_every);
  SAME_I(train.checkpoint_every);
  SAME_I(train.keep_checkpoints);
  SAME_I(train.precision);
#undef SAME_I
#undef SAME_D
  return 0;
}

/* c as clmoe_config_write writes it (malloc'ed), NULL when that failed. */
static char *written(const clmoe_config *c)
{
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  int rc = clmoe_config_write(c, f);
  fclose(f);
  if (rc != 0) free(text), text = NULL;
  return text;
}

/* Longest line of text. */
static size_t longest_line(const char *text)
{
  size_t most = 0;
  for (const char *s = text; *s;) {
    size_t n = strcspn(s, "\n");
    most = n > most ? n : most;
    s += n + (s[n] == '\n');
  }
  return most;
}

/* Writes a, parses it back (the same fields), writes that (the same text). 1 when all holds;
 * otherwise prints why, naming the config by `what`, and the written text. */
static int round_trip(const clmoe_config *a, const char *what)
{
  char *t1 = written(a), *t2 = NULL, why[192] = "";
  clmoe_config b;
  if (!t1) snprintf(why, sizeof why, "clmoe_config_write failed: %s", clmoe_last_error());
  else if (clmoe_config_parse(t1, a->name, &b) != CLMOE_OK)
    snprintf(why, sizeof why, "the written text does not parse: %s", clmoe_last_error());
  else if (config_diff(a, &b, why, sizeof why))
    ;
  else if (!(t2 = written(&b)) || strcmp(t1, t2))
    snprintf(why, sizeof why, "written again, the text differs");
  else if (longest_line(t1) > 1023)
    snprintf(why, sizeof why, "a line of %zu characters", longest_line(t1));
  if (why[0]) fprintf(stderr, "\n  %s: %s; written:\n%s\n", what, why, t1 ? t1 : "(nothing)");
  free(t1), free(t2);
  return !why[0];
}

static void test_round_trip(void)
{
  for (const char *const *name = clmoe_config_preset_names(); *name; name++) {
    clmoe_config a;
    TEST_OK(clmoe_config_preset(*name, &a));
    CU_ASSERT(round_trip(&a, *name));
    a.train.ncurriculum = 2;
    a.train.curriculum_len[0] = 128, a.train.curriculum_step[0] = 0;
    a.train.curriculum_len[1] = 512, a.train.curriculum_step[1] = 100;
    a.train.warmup_steps = 7;
    CU_ASSERT(round_trip(&a, *name));
  }
}

/* The cases a hand-written writer got wrong: a section of a kind of layer the model does
 * not have, given in part (its unset sizes were written as "= 0", which the parser
 * refuses), and layer lists longer than the parser's lines. */
static void test_round_trip_hard(void)
{
  clmoe_config c;
  TEST_OK(clmoe_config_parse("[model]\nvocab = 256\nd_model = 64\nlayers = 4\n"
                             "[kda]\nheads = 2\nhead_dim = 16\ngate_rank = 16\n"
                             "[ffn]\ndense_ff = 128\n"
                             "[moe]\nexperts = 8\ntop_k = 2\nexpert_ff = 16\n"
                             "[mla]\nheads = 2\n",
                             "no-mla", &c));
  CU_ASSERT_EQUAL(clmoe_config_mla_count(&c), 0);
  CU_ASSERT(round_trip(&c, "[mla] heads = 2 without MLA layers"));
  TEST_OK(clmoe_config_parse("[model]\nvocab = 256\nd_model = 64\nlayers = 2\ndense_layers = 2\n"
                             "[kda]\nheads = 2\nhead_dim = 16\ngate_rank = 16\n"
                             "[ffn]\ndense_ff = 128\n[moe]\nexperts = 8\n",
                             "all-dense", &c));
  CU_ASSERT(round_trip(&c, "[moe] experts = 8 in an all-dense model"));
  /* MLA layers: all 256; 200 of 256 at random; runs of three; runs of two (the longest
   * text: nothing to shorten as a range); every other one. */
  uint64_t state = test_seed;
  for (int pattern = 0; pattern < 5; pattern++) {
    TEST_OK(clmoe_config_preset("tiny", &c));
    c.layers = CLMOE_MAX_LAYERS;
    memset(c.is_mla, 0, sizeof c.is_mla);
    int n = 0;
    for (int i = 0; i < c.layers; i++) {
      const int mla = pattern == 0   ? 1
                      : pattern == 2 ? i % 4 != 3
                      : pattern == 3 ? i % 3 != 2
                      : pattern == 4 ? i % 2 == 0
                                     : 0;
      c.is_mla[i] = (unsigned char)mla, n += mla;
    }
    while (pattern == 1 && n < 200) { /* 200 distinct layers from the seed */
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const int i = (int)((state >> 33) % (uint64_t)c.layers);
      n += !c.is_mla[i], c.is_mla[i] = 1;
    }
    char what[64];
    snprintf(what, sizeof what, "%d MLA layers of %d (pattern %d, seed %llu)", n, c.layers, pattern,
             (unsigned long long)test_seed);
    CU_ASSERT(round_trip(&c, what));
  }
}

/* mla_layers takes ranges a-b beside layer numbers; bad ranges are named. */
static void test_layer_ranges(void)
{
  static const char head[] = "[model]\nvocab = 256\nd_model = 64\nlayers = 12\ndense_layers = 12\n"
                             "[kda]\nheads = 2\nhead_dim = 16\ngate_rank = 16\n"
                             "[ffn]\ndense_ff = 8\n"
                             "[mla]\nheads = 2\nq_rank = 8\nkv_rank = 8\nqk_nope_dim = 8\n"
                             "v_dim = 8\n"
                             "[model]\n";
  char text[512];
  clmoe_config c;
  snprintf(text, sizeof text, "%s", head);
  /* (a [model] section given twice is fine: its keys may not be) */
  snprintf(text + strlen(text), sizeof text - strlen(text), "mla_layers = 2, 5-7, 12-12\n");
  TEST_OK(clmoe_config_parse(text, "ranges", &c));
  CU_ASSERT_EQUAL(clmoe_config_mla_count(&c), 5);
  CU_ASSERT(c.is_mla[1] && c.is_mla[4] && c.is_mla[5] && c.is_mla[6] && c.is_mla[11]);
  CU_ASSERT(!c.is_mla[0] && !c.is_mla[3] && !c.is_mla[7]);
  static const struct { const char *list, *expect; } bad[] = {
      {"7-5", "'7-5' is not a range of layers a-b (1-based, a <= b)"},
      {"0-3", "'0-3' is not a range of layers"},
      {"2-257", "'2-257' is not a range of layers"},
      {"2-x", "'2-x' is not a range of layers"},
      {"-3", "'-3' is not a layer number (1-based)"},
      {"3-13", "mla_layers names layer 13 but the model has 12 layers"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(text, sizeof text, "%smla_layers = %s\n", head, bad[i].list);
    const clmoe_status st = clmoe_config_parse(text, "ranges", &c);
    const int ok = st == CLMOE_ERR_FORMAT && strstr(clmoe_last_error(), bad[i].expect);
    if (!ok) fprintf(stderr, "\n  mla_layers = %s: \"%s\"\n", bad[i].list, clmoe_last_error());
    CU_ASSERT(ok);
  }
}

/* ---- random configs over the keys' ranges ------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1p-53; }

/* A whole number in [lo, hi]: an end, one just above lo, or log-uniform over the span, so
 * that both ends and every order of magnitude come up. */
static int64_t rng_int(uint64_t *s, int64_t lo, int64_t hi)
{
  const unsigned pick = (unsigned)(rng_next(s) % 8);
  if (hi <= lo || pick == 0) return lo;
  if (pick == 1) return hi;
  if (pick == 2) return lo + (int64_t)(rng_next(s) % (uint64_t)(hi - lo < 8 ? hi - lo + 1 : 8));
  const int64_t off = (int64_t)(exp(rng_unit(s) * log((double)(hi - lo) + 1.0)) - 1.0);
  return off < 0 ? lo : off > hi - lo ? hi : lo + off;
}

/* A number in [lo, hi] with a random 53-bit mantissa: an end, or log-uniform when the range
 * keeps one sign and spans orders of magnitude, else uniform. */
static double rng_f64(uint64_t *s, double lo, double hi)
{
  const unsigned pick = (unsigned)(rng_next(s) % 8);
  const double u = rng_unit(s);
  double v;
  if (pick == 0) return lo;
  if (pick == 1) return hi;
  if (lo > 0 && hi / lo > 100) v = lo * exp(u * log(hi / lo));
  else if (hi < 0 && lo / hi > 100) v = hi * exp(u * log(lo / hi));
  else v = lo + u * (hi - lo);
  return v < lo ? lo : v > hi ? hi : v;
}

static const config_key *key_of(const char *section, const char *key)
{
  const config_key *k = clmoe__model_config_keys;
  while (k->section && (strcmp(k->section, section) || strcmp(k->key, key))) k++;
  return k->section ? k : NULL;
}

/* A random value of key k in its range (the list kinds are set elsewhere). */
static void set_random(uint64_t *s, const config_key *k, clmoe_config *c)
{
  char *field = (char *)c + k->offset;
  int nb = 0;
  switch (k->kind) {
  case CFG_I64: *(int64_t *)field = rng_int(s, (int64_t)k->lo, (int64_t)k->hi); break;
  case CFG_INT: *(int *)field = (int)rng_int(s, (int64_t)k->lo, (int64_t)k->hi); break;
  case CFG_F64: *(double *)field = rng_f64(s, k->lo, k->hi); break;
  case CFG_U64: *(uint64_t *)field = rng_next(s) >> (rng_next(s) % 64); break;
  case CFG_BALANCE:
    while (clmoe__model_config_balancing[nb]) nb++;
    memset(c->balancing, 0, sizeof c->balancing);
    snprintf(c->balancing, sizeof c->balancing, "%s",
             clmoe__model_config_balancing[rng_next(s) % (uint64_t)nb]);
    break;
  case CFG_GATE: c->kda_unbounded_gate = (int)(rng_next(s) & 1); break;
  case CFG_PRECISION: *(int *)field = (int)(rng_next(s) % 3); break;
  case CFG_CHOICE:
    while (k->choices[nb]) nb++;
    *(int *)field = (int)(rng_next(s) % (uint64_t)nb);
    break;
  case CFG_EVERY:
  case CFG_LAYERS:
  case CFG_CURRICULUM: break;
  }
}

/* A size the config needs (> 0) for the layers it has: drawn when unset. */
static void need(uint64_t *s, clmoe_config *c, const char *section, const char *key)
{
  const config_key *k = key_of(section, key);
  int64_t *v = (int64_t *)((char *)c + k->offset);
  if (*v < 1) *v = rng_int(s, k->lo > 1 ? (int64_t)k->lo : 1, (int64_t)k->hi);
}

/* A random valid config: layers and an MLA pattern (often long), every key set at random
 * in its range or left at its default (so sections come in part), then the sizes that the
 * layers present need, and the constraints between keys. */
static void random_config(uint64_t *s, int index, clmoe_config *c)
{
  clmoe_config_defaults(c);
  snprintf(c->name, sizeof c->name, "random %d", index);
  for (const config_key *k = clmoe__model_config_keys; k->section; k++)
    if (rng_next(s) % 2) set_random(s, k, c);
  c->layers = rng_next(s) % 2 ? (int)rng_int(s, 1, CLMOE_MAX_LAYERS)
                              : (int)(CLMOE_MAX_LAYERS - (int)(rng_next(s) % 64));
  const int mode = (int)(rng_next(s) % 5), every = 1 + (int)(rng_next(s) % 8);
  const double density = rng_unit(s);
  for (int i = 0; i < c->layers; i++)
    c->is_mla[i] = (unsigned char)(mode == 1   ? 1
                                   : mode == 2 ? rng_unit(s) < density
                                   : mode == 3 ? (i + 1) % every == 0
                                   : mode == 4 ? rng_unit(s) < 0.8
                                               : 0);
  const int nmla = clmoe_config_mla_count(c);
  need(s, c, "model", "vocab"), need(s, c, "model", "d_model");
  if (c->dense_layers > c->layers) c->dense_layers = (int)rng_int(s, 0, c->layers);
  if (nmla < c->layers) {
    need(s, c, "kda", "heads"), need(s, c, "kda", "head_dim");
    need(s, c, "kda", "gate_rank");
  }
  if (nmla > 0) {
    need(s, c, "mla", "heads"), need(s, c, "mla", "q_rank"), need(s, c, "mla", "kv_rank");
    need(s, c, "mla", "qk_nope_dim"), need(s, c, "mla", "v_dim");
  }
  if (c->dense_layers > 0) need(s, c, "ffn", "dense_ff");
  if (c->dense_layers < c->layers) {
    need(s, c, "moe", "experts"), need(s, c, "moe", "top_k"), need(s, c, "moe", "expert_ff");
    if (c->top_k > c->experts) c->top_k = rng_int(s, 1, c->experts < 1024 ? c->experts : 1024);
    if (c->shared_experts > 0) need(s, c, "moe", "shared_ff");
    /* groups: a divisor of experts with at least 2 experts each, enough chosen groups */
    c->groups = rng_next(s) % 2 ? 1 : rng_int(s, 1, c->experts / 2 > 1 ? c->experts / 2 : 1);
    while (c->experts % c->groups) c->groups--;
    c->topk_groups = rng_int(s, 1, c->groups);
    while (c->top_k > c->topk_groups * (c->experts / c->groups)) c->topk_groups++;
  }
  clmoe_train_config *t = &c->train;
  if (t->min_lr > t->lr) {
    const double lr = t->lr;
    t->lr = t->min_lr, t->min_lr = lr;
  }
  if (t->warmup_steps > t->steps) {
    const int64_t w = t->warmup_steps;
    t->warmup_steps = t->steps, t->steps = w;
  }
  if (rng_next(s) % 3 == 0) { /* a curriculum: lengths from 1, steps rising from 0 */
    t->ncurriculum = 1 + (int)(rng_next(s) % CLMOE_MAX_CURRICULUM);
    for (int i = 0; i < t->ncurriculum; i++) {
      t->curriculum_len[i] = rng_int(s, 1, (int64_t)1 << 24);
      t->curriculum_step[i] =
          i == 0 ? 0 : t->curriculum_step[i - 1] + rng_int(s, 1, (int64_t)1 << 40);
    }
  }
}

static void test_round_trip_random(void)
{
  enum { CONFIGS = 400 };
  uint64_t state = test_seed;
  int failed = 0, long_lists = 0;
  for (int i = 0; i < CONFIGS && failed < 3; i++) {
    clmoe_config c;
    random_config(&state, i, &c);
    char what[96];
    snprintf(what, sizeof what, "random config %d (seed %llu)", i, (unsigned long long)test_seed);
    TEST_OK(clmoe_config_validate(&c, what)); /* the generator makes valid configs only */
    failed += !round_trip(&c, what);
    long_lists += clmoe_config_mla_count(&c) >= 150;
  }
  CU_ASSERT_EQUAL(failed, 0);
  CU_ASSERT(long_lists >= 20); /* the generator does reach the long lists */
}

/* Each bad file and the words its error must contain (besides the file's name). */
static const struct { const char *file, *expect; } bad_files[] = {
    {"unknown_key.conf", ":3: [model] colour: unknown key"},
    {"unknown_section.conf", ":2: unknown section [modle]"},
    {"no_section.conf", ":2: 'vocab' comes before any [section]"},
    {"not_a_number.conf", ":3: [model] d_model: 'sixty-four' is not a whole number"},
    {"fraction.conf", ":3: [model] layers: '2.5' is not a whole number"},
    {"out_of_range.conf", ":3: [kda] lower_bound: -6 is outside [-5"},
    {"twice.conf", ":4: [model] vocab: given twice"},
    {"no_value.conf", ":3: [model] vocab: no value"},
    {"no_equals.conf", ":3: 'vocab 256' is neither"},
    {"bad_header.conf", ":2: '[model' is not a [section] header"},
    {"bad_layer.conf", ":3: [model] mla_layers: 'x' is not a layer number"},
    {"layer_past_end.conf", "mla_layers names layer 9 but the model has 4 layers"},
    {"bad_balancing.conf", ":3: [moe] balancing: 'auxloss' is not one of"},
    {"bad_curriculum.conf", ":3: [train] curriculum: steps must increase"},
    {"missing_sizes.conf", "[model] vocab, d_model and layers are required"},
    {"topk_too_big.conf", "[moe] top_k = 9 exceeds experts = 8"},
    {"groups_too_few.conf", "[moe] top_k = 3 exceeds the 2 experts of topk_groups = 1 groups"},
    {"bad_activation.conf", ":3: [ffn] activation: 'gelu' is not one of situ, swiglu"},
    {"kda_missing.conf", "[kda] heads, head_dim and gate_rank are required"},
    {"empty.conf", "[model] vocab, d_model and layers are required"},
    {"nul_byte.conf", "contains a NUL byte"},
    {"does_not_exist.conf", "cannot open"},
};

static void test_bad_corpus(void)
{
  const char *src = getenv("CLMOE_SRCDIR");
  CU_ASSERT_PTR_NOT_NULL_FATAL(src);
  for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/bad/config/%s", src, bad_files[i].file);
    clmoe_config c;
    clmoe_status st = clmoe_config_load(path, &c);
    const char *msg = clmoe_last_error();
    int ok = (st == CLMOE_ERR_FORMAT || st == CLMOE_ERR_IO) && strstr(msg, bad_files[i].file) &&
             strstr(msg, bad_files[i].expect);
    if (!ok)
      fprintf(stderr, "\n  %s: status %s, message \"%s\", expected \"%s\"\n", bad_files[i].file,
              clmoe_strerror(st), msg, bad_files[i].expect);
    CU_ASSERT(ok);
  }
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "presets parse", test_presets);
  CU_add_test(suite, "parameter counts of k3 and gpu", test_counts);
  CU_add_test(suite, "presets written and parsed back: same config, same text", test_round_trip);
  CU_add_test(suite, "partial sections and long layer lists round-trip", test_round_trip_hard);
  CU_add_test(suite, "random configs round-trip", test_round_trip_random);
  CU_add_test(suite, "layer ranges in mla_layers", test_layer_ranges);
  CU_add_test(suite, "bad config corpus", test_bad_corpus);
}

int main(void) { return test_main("config", add_tests); }
