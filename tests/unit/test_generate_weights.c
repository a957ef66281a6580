/* CUnit suite: inference with bf16 weight storage (clmoe_gen_set_weights,
 * clmoe_gen_random_model, clmoe_gen_load_weights; lib/generate/) on the tiny preset, and the
 * few-token GEMV's conformance checks (gemv*: fp32 and bf16 weights). The models have random
 * weights of one seed (clmoe_model_init's values; KDA dt_bias -6, so the states carry far
 * and a pass that loses one shows):
 *  - the logits of chunked prefill and decode steps of the bf16 model equal, at every
 *    position, those of one inference forward (clmoe_model_forward) of the fp32 model whose
 *    matrices were rounded to bf16 in place (1e-4 relative: the same weights, sums in other
 *    orders), for steps on the GEMV path (up to 16 sequences) and past it (17 sequences:
 *    the layers' bf16 matrices widened to fp32 copies per call; CLMOE_INFER_TILE=0 so on
 *    any device; the tile path: test_generate_prefill);
 *  - the bf16 model made directly equals the fp32 one of its seed stored in bf16 afterwards
 *    (clmoe_gen_set_weights), to the bit, and holds about half the weight bytes;
 *  - memory: a bf16 model made (clmoe_gen_random_model) or loaded from a training
 *    checkpoint (clmoe_gen_load_weights) in a fresh context never has more device memory in
 *    use, nor held by the pool, than its own tensors take (the parameter counts: 2 bytes a
 *    matrix element, 4 the rest, plus the pool's size-class rounding), a bound below the
 *    fp32 size of the model; loading fp32 then storing bf16 goes past it (the bound can
 *    fail); the loaded model equals clmoe_gen_load + clmoe_gen_set_weights, to the bit;
 *  - argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/paths.h" /* clmoe_ctx_set_knob */
#include "test_common.h"

#define SEED 7

/* Bytes of the tiny vocabulary, from a counter-based stream. */
static void text(int32_t *t, int64_t n, uint64_t seed)
{
  for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(clmoe_random_uniform(seed, (uint64_t)i, 0.0f, 1.0f) * 255.0f);
}

static clmoe_model *random_model(clmoe_dtype dtype)
{
  clmoe_config cfg;
  clmoe_model *m = NULL;
  TEST_OK(clmoe_config_preset("tiny", &cfg));
  TEST_OK(clmoe_gen_random_model(test_ctx, &cfg, SEED, dtype, &m));
  clmoe_params *ps = clmoe_model_params(m);
  for (int i = 0; i < ps->n; i++)
    if (strstr(ps->p[i].name, "/mixer/dt_bias")) TEST_OK(clmoe_tensor_fill(ps->p[i].value, -6.0));
  return m;
}

/* The weights clmoe_gen_set_weights stores in bf16 (the head and every trainable 2-D or
 * expert-stack "w_*"), rounded to bf16 in place in m's fp32 tensors. */
static void round_matrices(clmoe_model *m)
{
  clmoe_params *ps = clmoe_model_params(m);
  int n = 0;
  for (int i = 0; i < ps->n; i++) {
    const char *base = strrchr(ps->p[i].name, '/');
    base = base ? base + 1 : ps->p[i].name;
    if (!ps->p[i].trainable || (strcmp(ps->p[i].name, "head") && strncmp(base, "w_", 2))) continue;
    clmoe_tensor *v = ps->p[i].value, b = {0};
    TEST_OK(clmoe_tensor_create(test_ctx, &b, CLMOE_BF16, v->ndim, v->shape));
    TEST_OK(clmoe_tensor_copy(&b, v));
    TEST_OK(clmoe_tensor_copy(v, &b));
    clmoe_tensor_destroy(&b);
    n++;
  }
  CU_ASSERT(n > 10);
}

/* Prefills nseq prompts of lens[s] tokens (from full[s]) in chunks of `chunk` into model,
 * then `steps` decode steps feeding the next tokens; every position's logits against one
 * forward of ref over full[s][0 .. lens[s] + steps). */
static void check_equivalence(clmoe_model *model, clmoe_model *ref, int64_t nseq, const int64_t *lens, int64_t steps,
                              int64_t chunk, int32_t *const *full)
{
  const int64_t V = clmoe_model_config(model)->vocab;
  clmoe_gen_options o = {.prefill_chunk = chunk};
  clmoe_gen_state *g = NULL;
  TEST_OK(clmoe_gen_state_create(model, nseq, &o, &g));
  int64_t total = 0;
  for (int64_t s = 0; s < nseq; s++) total += lens[s];
  float *all = malloc((size_t)(total * V) * sizeof *all), *step = malloc((size_t)(steps * nseq * V) * sizeof *step);
  float *want = malloc((size_t)((total + nseq * steps) * V) * sizeof *want);
  int32_t *next = malloc((size_t)nseq * sizeof *next);
  CU_ASSERT_FATAL(all && step && want && next);
  TEST_OK(clmoe_gen_prefill(g, (const int32_t *const *)full, lens, NULL, all));
  for (int64_t k = 0; k < steps; k++) {
    for (int64_t s = 0; s < nseq; s++) next[s] = full[s][lens[s] + k];
    TEST_OK(clmoe_gen_step(g, next, step + k * nseq * V));
  }
  for (int64_t s = 0, off = 0; s < nseq; off += lens[s], s++) {
    const int64_t T = lens[s] + steps;
    TEST_OK(clmoe_model_forward(ref, 1, T, full[s], NULL, 0, NULL, NULL));
    TEST_OK(clmoe_tensor_read(clmoe_model_logits(ref), want, (size_t)(T * V) * sizeof *want));
    const double e_pre = test_rel_err(all + off * V, want, lens[s] * V);
    double e_step = 0.0;
    for (int64_t k = 0; k < steps; k++) {
      const double e = test_rel_err(step + (k * nseq + s) * V, want + (lens[s] + k) * V, V);
      e_step = e > e_step ? e : e_step;
    }
    if (!(e_pre <= 1e-4 && e_step <= 1e-4) || getenv("CLMOE_TEST_VERBOSE"))
      fprintf(stderr, "\n  seq %lld of %lld (prompt %lld, chunk %lld, %lld steps): prefill %.3g, steps %.3g "
              "(tol 1e-4)", (long long)s, (long long)nseq, (long long)lens[s], (long long)chunk, (long long)steps,
              e_pre, e_step);
    CU_ASSERT(e_pre <= 1e-4 && e_step <= 1e-4);
  }
  free(all), free(step), free(want), free(next);
  clmoe_gen_state_destroy(g);
}

/* Prefill passes and steps of the bf16 model = the forward of the rounded fp32 one. */
static void test_equivalence(void)
{
  enum { S = 3, MANY = 17 };
  clmoe_model *m = random_model(CLMOE_BF16), *ref = random_model(CLMOE_F32);
  CU_ASSERT_EQUAL(clmoe_gen_weights(m), CLMOE_BF16);
  CU_ASSERT_EQUAL(clmoe_gen_weights(ref), CLMOE_F32);
  round_matrices(ref);
  /* the widened path, also on a matrix unit (the tile path: test_tile_path) */
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_INFER_TILE", "0"));
  int32_t a[48], b[40], c[40], many[MANY][12];
  int32_t *one[1] = {a}, *full[S] = {a, b, c}, *fm[MANY];
  text(a, 48, 11), text(b, 40, 22), text(c, 40, 23);
  const int64_t len[1] = {37}, lens[S] = {5, 23, 17};
  int64_t lm[MANY];
  for (int i = 0; i < MANY; i++) text(many[i], 12, 40 + (uint64_t)i), fm[i] = many[i], lm[i] = 2 + i % 7;
  check_equivalence(m, ref, 1, len, 6, 16, one);   /* chunks 16 + 16 + 5 */
  check_equivalence(m, ref, S, lens, 4, 8, full);  /* 1, 3 and 3 passes */
  check_equivalence(m, ref, MANY, lm, 3, 4, fm);   /* steps past the GEMV path */
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_INFER_TILE", ""));
  clmoe_model_destroy(m);
  clmoe_model_destroy(ref);
}

/* Made in bf16 = made in fp32 and stored in bf16, to the bit; half the weight bytes. */
static void test_direct_equals_converted(void)
{
  clmoe_model *a = random_model(CLMOE_BF16), *b = random_model(CLMOE_F32), *f = random_model(CLMOE_F32);
  TEST_OK(clmoe_gen_set_weights(b, CLMOE_BF16));
  CU_ASSERT_EQUAL(clmoe_gen_weights(b), CLMOE_BF16);
  const int64_t V = clmoe_model_config(a)->vocab;
  int32_t t[20];
  text(t, 20, 5);
  const int32_t *p[1] = {t};
  const int64_t len[1] = {20};
  float *la = malloc((size_t)(2 * V) * sizeof *la), *lb = la ? la + V : NULL;
  CU_ASSERT_PTR_NOT_NULL_FATAL(la);
  clmoe_gen_state *ga = NULL, *gb = NULL, *gf = NULL;
  TEST_OK(clmoe_gen_state_create(a, 1, NULL, &ga));
  TEST_OK(clmoe_gen_state_create(b, 1, NULL, &gb));
  TEST_OK(clmoe_gen_state_create(f, 1, NULL, &gf));
  TEST_OK(clmoe_gen_prefill(ga, p, len, la, NULL));
  TEST_OK(clmoe_gen_prefill(gb, p, len, lb, NULL));
  CU_ASSERT(test_rel_err(la, lb, V) == 0.0);
  TEST_OK(clmoe_gen_step(ga, (int32_t[]){'7'}, la));
  TEST_OK(clmoe_gen_step(gb, (int32_t[]){'7'}, lb));
  CU_ASSERT(test_rel_err(la, lb, V) == 0.0);
  clmoe_gen_memory ma, mb, mf;
  clmoe_gen_memory_usage(ga, &ma);
  clmoe_gen_memory_usage(gb, &mb);
  clmoe_gen_memory_usage(gf, &mf);
  /* the matrices halve; the embedding, gains, biases and convolution taps stay fp32 */
  if (getenv("CLMOE_TEST_VERBOSE")) fprintf(stderr, "\n  weights fp32 %zu B, bf16 %zu B", mf.weights, ma.weights);
  CU_ASSERT_EQUAL(ma.weights, mb.weights);
  CU_ASSERT(ma.weights * 2 > mf.weights && ma.weights < 0.53 * (double)mf.weights);
  free(la);
  clmoe_gen_state_destroy(ga), clmoe_gen_state_destroy(gb), clmoe_gen_state_destroy(gf);
  clmoe_model_destroy(a), clmoe_model_destroy(b), clmoe_model_destroy(f);
}

/* ---- memory ---- */

/* A fresh context on the suite's device: its pool counters start at zero. */
static clmoe_ctx *fresh_ctx(void)
{
  clmoe_ctx *ctx = NULL;
  TEST_OK(clmoe_ctx_create(&ctx, NULL));
  return ctx;
}

/* The bound on the device bytes of a model from its registry: 2 bytes a bf16 element (the
 * matrices), the others' own sizes, each tensor rounded up as the pool's size classes do
 * (up to 12.5% and 256 bytes a tensor); *fp32 = the model's size with fp32 matrices. */
static double model_bound(clmoe_model *m, double *fp32)
{
  clmoe_params *ps = clmoe_model_params(m);
  double mat = 0.0, other = 0.0;
  for (int i = 0; i < ps->n; i++) {
    const clmoe_tensor *v = ps->p[i].value;
    if (v->dtype == CLMOE_BF16) mat += (double)clmoe_tensor_numel(v);
    else other += (double)clmoe_tensor_bytes(v);
  }
  CU_ASSERT(mat > 0.0);
  *fp32 = 4.0 * mat + other;
  return 1.125 * (2.0 * mat + other) + 256.0 * ps->n;
}

/* ctx's peak bytes in use and its pool's held bytes within the bound of m. */
static void check_peak(clmoe_ctx *ctx, clmoe_model *m, const char *what)
{
  clmoe_pool_stats st;
  clmoe_ctx_pool_stats(ctx, &st);
  double fp32 = 0.0;
  const double bound = model_bound(m, &fp32);
  CU_ASSERT(bound < fp32); /* the bound tells the two apart */
  const int ok = (double)st.peak_in_use_bytes <= bound && (double)st.device_bytes <= bound;
  if (!ok || getenv("CLMOE_TEST_VERBOSE"))
    fprintf(stderr, "\n  %s: peak in use %llu B, held %llu B; bound %.0f B (fp32 model %.0f B)", what,
            (unsigned long long)st.peak_in_use_bytes, (unsigned long long)st.device_bytes, bound, fp32);
  CU_ASSERT(ok);
}

/* A training model of the tiny preset with random weights, saved as a checkpoint. */
static void save_tiny(const char *path)
{
  clmoe_config cfg;
  clmoe_model *m = NULL;
  TEST_OK(clmoe_config_preset("tiny", &cfg));
  TEST_OK(clmoe_model_create(test_ctx, &cfg, &m));
  TEST_OK(clmoe_model_init(m, SEED));
  clmoe_ckpt_meta meta = {0};
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  clmoe_config_write(&cfg, f);
  fclose(f);
  TEST_OK(clmoe_ckpt_meta_set(&meta, "config", text));
  TEST_OK(clmoe_params_save(clmoe_model_params(m), path, &meta));
  clmoe_ckpt_meta_free(&meta);
  free(text);
  clmoe_model_destroy(m);
}

/* Every registry entry of a and b: same name, dtype and bytes. */
static void check_same_params(clmoe_model *a, clmoe_model *b)
{
  clmoe_params *pa = clmoe_model_params(a), *pb = clmoe_model_params(b);
  CU_ASSERT_EQUAL_FATAL(pa->n, pb->n);
  int differ = 0, bf16 = 0;
  for (int i = 0; i < pa->n; i++) {
    const clmoe_tensor *x = pa->p[i].value, *y = pb->p[i].value;
    const size_t n = clmoe_tensor_bytes(x);
    if (strcmp(pa->p[i].name, pb->p[i].name) || x->dtype != y->dtype || n != clmoe_tensor_bytes(y)) {
      fprintf(stderr, "\n  parameter %d: %s (%s) against %s (%s)", i, pa->p[i].name, clmoe_dtype_name(x->dtype),
              pb->p[i].name, clmoe_dtype_name(y->dtype));
      differ++;
      continue;
    }
    bf16 += x->dtype == CLMOE_BF16;
    unsigned char *hx = malloc(n + 1), *hy = malloc(n + 1);
    CU_ASSERT_FATAL(hx && hy);
    TEST_OK(clmoe_tensor_read(x, hx, n));
    TEST_OK(clmoe_tensor_read(y, hy, n));
    if (memcmp(hx, hy, n)) fprintf(stderr, "\n  parameter %s differs", pa->p[i].name), differ++;
    free(hx), free(hy);
  }
  CU_ASSERT_EQUAL(differ, 0);
  CU_ASSERT(bf16 > 10);
}

/* clmoe_gen_random_model in bf16: the peak is the bf16 model's. */
static void test_memory_random(void)
{
  clmoe_config cfg;
  TEST_OK(clmoe_config_preset("tiny", &cfg));
  clmoe_ctx *ctx = fresh_ctx();
  clmoe_model *m = NULL;
  TEST_OK(clmoe_gen_random_model(ctx, &cfg, SEED, CLMOE_BF16, &m));
  CU_ASSERT_EQUAL(clmoe_gen_weights(m), CLMOE_BF16);
  check_peak(ctx, m, "random bf16 model");
  clmoe_model_destroy(m);
  clmoe_ctx_destroy(ctx);
}

/* clmoe_gen_load_weights in bf16: the peak is the bf16 model's, the model that of
 * clmoe_gen_load + clmoe_gen_set_weights; that path's peak is past the bound. */
static void test_memory_load(void)
{
  char path[512];
  snprintf(path, sizeof path, "%s/tiny.safetensors", test_tmpdir("genw"));
  save_tiny(path);
  clmoe_ctx *ctx = fresh_ctx();
  clmoe_model *m = NULL, *ref = NULL;
  TEST_OK(clmoe_gen_load_weights(ctx, path, NULL, NULL, CLMOE_BF16, &m, NULL));
  CU_ASSERT_EQUAL(clmoe_gen_weights(m), CLMOE_BF16);
  check_peak(ctx, m, "checkpoint loaded in bf16");
  clmoe_ctx *old = fresh_ctx();
  TEST_OK(clmoe_gen_load(old, path, &ref, NULL));
  TEST_OK(clmoe_gen_set_weights(ref, CLMOE_BF16));
  check_same_params(m, ref);
  clmoe_pool_stats st;
  clmoe_ctx_pool_stats(old, &st);
  double fp32 = 0.0;
  CU_ASSERT((double)st.peak_in_use_bytes > model_bound(m, &fp32)); /* fp32, then bf16: all the fp32 */
  clmoe_model_destroy(ref);
  clmoe_ctx_destroy(old);
  /* fp32 loads as before, and equals clmoe_gen_load */
  clmoe_model *f = NULL, *g = NULL;
  TEST_OK(clmoe_gen_load_weights(ctx, path, NULL, NULL, CLMOE_F32, &f, NULL));
  TEST_OK(clmoe_gen_load(ctx, path, &g, NULL));
  CU_ASSERT_EQUAL(clmoe_gen_weights(f), CLMOE_F32);
  clmoe_params *pf = clmoe_model_params(f), *pg = clmoe_model_params(g);
  CU_ASSERT_EQUAL(pf->n, pg->n);
  for (int i = 0; i < pf->n && i < pg->n; i++) CU_ASSERT_EQUAL(pf->p[i].value->dtype, pg->p[i].value->dtype);
  clmoe_model_destroy(f), clmoe_model_destroy(g), clmoe_model_destroy(m);
  clmoe_ctx_destroy(ctx);
  remove(path);
}

static void test_arguments(void)
{
  clmoe_config cfg;
  clmoe_model *m = random_model(CLMOE_BF16), *none = m;
  TEST_OK(clmoe_config_preset("tiny", &cfg));
  CU_ASSERT_EQUAL(clmoe_gen_set_weights(m, CLMOE_F32), CLMOE_ERR_INVALID_ARGUMENT); /* bf16 already */
  TEST_OK(clmoe_gen_set_weights(m, CLMOE_BF16));                                     /* nothing left to do */
  CU_ASSERT_EQUAL(clmoe_gen_set_weights(m, CLMOE_I32), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_gen_set_weights(NULL, CLMOE_BF16), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_gen_random_model(test_ctx, &cfg, SEED, CLMOE_I32, &none), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(none);
  none = m;
  CU_ASSERT_EQUAL(clmoe_gen_load_weights(test_ctx, "/nonexistent.safetensors", NULL, NULL, CLMOE_I32, &none, NULL),
                  CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(none);
  CU_ASSERT_NOT_EQUAL(clmoe_gen_load_weights(test_ctx, "/nonexistent.safetensors", NULL, NULL, CLMOE_BF16, &none,
                                             NULL), CLMOE_OK);
  CU_ASSERT_PTR_NULL(none);
  clmoe_model_destroy(m);
}

static void add(CU_pSuite s)
{
  CU_add_test(s, "bf16 weights: prefill and steps = forward of the rounded fp32 weights", test_equivalence);
  CU_add_test(s, "made in bf16 = stored in bf16 afterwards; half the bytes", test_direct_equals_converted);
  CU_add_test(s, "random bf16 model: peak memory within the bf16 model's size", test_memory_random);
  CU_add_test(s, "checkpoint loaded in bf16: peak within the bf16 size; = load + set_weights", test_memory_load);
  CU_add_test(s, "argument errors", test_arguments);
  test_add_checks(s, "gemv");
}

int main(void) { return test_main("generate_weights", add); }
