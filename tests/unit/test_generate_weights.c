/* CUnit suite: inference with bf16 weight storage (clmoe_gen_set_weights,
 * clmoe_gen_random_model; lib/generate/generate_weights.c) on the tiny preset, and the
 * few-token GEMV's conformance checks (gemv*: fp32 and bf16 weights). The models have random
 * weights of one seed (clmoe_model_init's values; KDA dt_bias -6, so the states carry far
 * and a pass that loses one shows):
 *  - the logits of chunked prefill and decode steps of the bf16 model equal, at every
 *    position, those of one inference forward (clmoe_model_forward) of the fp32 model whose
 *    matrices were rounded to bf16 in place (1e-4 relative: the same weights, sums in other
 *    orders), for steps on the GEMV path (up to 16 sequences) and past it (17 sequences:
 *    the layers' bf16 matrices widened to fp32 copies per call);
 *  - the bf16 model made directly equals the fp32 one of its seed stored in bf16 afterwards
 *    (clmoe_gen_set_weights), to the bit, and holds about half the weight bytes;
 *  - argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  int32_t a[48], b[40], c[40], many[MANY][12];
  int32_t *one[1] = {a}, *full[S] = {a, b, c}, *fm[MANY];
  text(a, 48, 11), text(b, 40, 22), text(c, 40, 23);
  const int64_t len[1] = {37}, lens[S] = {5, 23, 17};
  int64_t lm[MANY];
  for (int i = 0; i < MANY; i++) text(many[i], 12, 40 + (uint64_t)i), fm[i] = many[i], lm[i] = 2 + i % 7;
  check_equivalence(m, ref, 1, len, 6, 16, one);   /* chunks 16 + 16 + 5 */
  check_equivalence(m, ref, S, lens, 4, 8, full);  /* 1, 3 and 3 passes */
  check_equivalence(m, ref, MANY, lm, 3, 4, fm);   /* steps past the GEMV path */
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
  clmoe_model_destroy(m);
}

static void add(CU_pSuite s)
{
  CU_add_test(s, "bf16 weights: prefill and steps = forward of the rounded fp32 weights", test_equivalence);
  CU_add_test(s, "made in bf16 = stored in bf16 afterwards; half the bytes", test_direct_equals_converted);
  CU_add_test(s, "argument errors", test_arguments);
  test_add_checks(s, "gemv");
}

int main(void) { return test_main("generate_weights", add); }
