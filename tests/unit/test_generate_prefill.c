/* CUnit suite: the MoE layers of a prefill over an inference model with bf16 weights
 * (lib/generate/generate_run.c, clmoe_moe_forward_infer) on the tiny preset (896 experts,
 * top-8: a pass of more than 32 tokens takes the grouped forward, not the few-token one):
 *  - the logits of every prompt position equal, to the bit, those of the same prefill over
 *    the fp32 model whose matrices hold the bf16 model's stored values: the path generation
 *    took before on bf16 weights (every matrix of a layer widened to an fp32 copy for the
 *    call), since widening is exact and the expert kernels differ only in their loads; for
 *    one prompt in one pass and three prompts in passes of 40 tokens;
 *  - memory: in a fresh context, the device bytes a prefill of 96 tokens puts in use on top
 *    of the model and its state stay below 2 bytes a routed expert parameter of one MoE
 *    layer (the layer's bf16 stacks' size), from the parameter counts; the fp32 copies of
 *    one layer's stacks that the former path made for the call (4 bytes a parameter) go
 *    past that bound, which the test shows by holding such copies during a prefill. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"

#define SEED 11

static void text(int32_t *t, int64_t n, uint64_t seed)
{
  for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(clmoe_random_uniform(seed, (uint64_t)i, 0.0f, 1.0f) * 255.0f);
}

static clmoe_model *random_model(clmoe_ctx *ctx, clmoe_dtype dtype)
{
  clmoe_config cfg;
  clmoe_model *m = NULL;
  TEST_OK(clmoe_config_preset("tiny", &cfg));
  TEST_OK(clmoe_gen_random_model(ctx, &cfg, SEED, dtype, &m));
  return m;
}

/* ref's fp32 tensors take the values m stores in bf16 (widened exactly): the weights the
 * former path multiplied by, its fp32 copies of m's matrices. */
static void take_stored(clmoe_model *ref, clmoe_model *m)
{
  clmoe_params *pr = clmoe_model_params(ref), *pm = clmoe_model_params(m);
  CU_ASSERT_EQUAL_FATAL(pr->n, pm->n);
  int n = 0;
  for (int i = 0; i < pm->n; i++) {
    if (pm->p[i].value->dtype != CLMOE_BF16) continue;
    CU_ASSERT_EQUAL(pr->p[i].value->dtype, CLMOE_F32);
    TEST_OK(clmoe_tensor_copy(pr->p[i].value, pm->p[i].value));
    n++;
  }
  CU_ASSERT(n > 10);
}

/* All logits of a prefill of nseq prompts in passes of `chunk` tokens (host, malloc'd). */
static float *prefill_logits(clmoe_model *m, int64_t nseq, int32_t *const *p, const int64_t *lens, int64_t chunk)
{
  const int64_t V = clmoe_model_config(m)->vocab;
  int64_t total = 0;
  for (int64_t s = 0; s < nseq; s++) total += lens[s];
  float *all = malloc((size_t)(total * V) * sizeof *all);
  CU_ASSERT_PTR_NOT_NULL_FATAL(all);
  clmoe_gen_options o = {.prefill_chunk = chunk};
  clmoe_gen_state *g = NULL;
  TEST_OK(clmoe_gen_state_create(m, nseq, &o, &g));
  TEST_OK(clmoe_gen_prefill(g, (const int32_t *const *)p, lens, NULL, all));
  clmoe_gen_state_destroy(g);
  return all;
}

/* The bf16 model's prefill = the rounded fp32 model's, to the bit. */
static void test_same_logits(void)
{
  clmoe_model *m = random_model(test_ctx, CLMOE_BF16), *ref = random_model(test_ctx, CLMOE_F32);
  CU_ASSERT_EQUAL(clmoe_gen_weights(m), CLMOE_BF16);
  take_stored(ref, m);
  const int64_t V = clmoe_model_config(m)->vocab;
  int32_t a[100], b[70], c[45];
  text(a, 100, 1), text(b, 70, 2), text(c, 45, 3);
  int32_t *one[1] = {a}, *three[3] = {a, b, c};
  const int64_t len1[1] = {100}, len3[3] = {90, 70, 45};
  struct { int64_t nseq, chunk, total; int32_t *const *p; const int64_t *lens; } runs[2] = {
      {1, 128, 100, one, len1}, {3, 40, 205, three, len3}};
  for (int r = 0; r < 2; r++) {
    float *got = prefill_logits(m, runs[r].nseq, runs[r].p, runs[r].lens, runs[r].chunk);
    float *want = prefill_logits(ref, runs[r].nseq, runs[r].p, runs[r].lens, runs[r].chunk);
    const size_t n = (size_t)(runs[r].total * V);
    size_t differ = 0, nan = 0;
    for (size_t i = 0; i < n; i++) {
      differ += memcmp(&got[i], &want[i], sizeof got[i]) != 0;
      nan += got[i] != got[i];
    }
    if (differ || nan || getenv("CLMOE_TEST_VERBOSE"))
      fprintf(stderr, "\n  %lld prompts, passes of %lld: %zu of %zu logits differ from the fp32 model's (%zu NaN), "
              "largest relative error %.3g", (long long)runs[r].nseq, (long long)runs[r].chunk, differ, n, nan,
              test_rel_err(got, want, (int64_t)n));
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT_EQUAL(nan, 0);
    free(got), free(want);
  }
  clmoe_model_destroy(m);
  clmoe_model_destroy(ref);
}

/* One MoE layer's routed expert parameters (w_gate, w_upp, w_dn of the first MoE layer),
 * and those tensors in t[3]. */
static double expert_params(clmoe_model *m, const clmoe_tensor *t[3])
{
  clmoe_params *ps = clmoe_model_params(m);
  const char *names[3] = {"/ffn/w_gate", "/ffn/w_upp", "/ffn/w_dn"}; /* [E, ...]: 3-D, unlike a dense FFN's */
  double n = 0.0;
  int found = 0;
  for (int j = 0; j < 3; j++)
    for (int i = 0; i < ps->n; i++) {
      const char *nm = ps->p[i].name;
      const size_t a = strlen(nm), b = strlen(names[j]);
      if (ps->p[i].value->ndim != 3 || a < b || strcmp(nm + a - b, names[j])) continue;
      t[j] = ps->p[i].value;
      n += (double)clmoe_tensor_numel(t[j]);
      found++;
      break;
    }
  CU_ASSERT_EQUAL_FATAL(found, 3);
  CU_ASSERT(t[0]->ndim == 3 && t[0]->dtype == CLMOE_BF16);
  return n;
}

/* Bytes in use during a prefill of 96 tokens beyond those in use before it, in ctx; with
 * `old`, fp32 copies of one MoE layer's expert stacks are held meanwhile, as the former
 * path held them for the call. */
static double prefill_extra(int old, double *bound)
{
  clmoe_ctx *ctx = NULL;
  TEST_OK(clmoe_ctx_create(&ctx, NULL));
  clmoe_model *m = random_model(ctx, CLMOE_BF16);
  const clmoe_tensor *st[3];
  *bound = 2.0 * expert_params(m, st);
  clmoe_gen_options o = {.prefill_chunk = 96};
  clmoe_gen_state *g = NULL;
  TEST_OK(clmoe_gen_state_create(m, 1, &o, &g));
  int32_t t[96];
  text(t, 96, 9);
  const int32_t *p[1] = {t};
  const int64_t len[1] = {96};
  const int64_t V = clmoe_model_config(m)->vocab;
  float *last = malloc((size_t)V * sizeof *last);
  CU_ASSERT_PTR_NOT_NULL_FATAL(last);
  clmoe_pool_stats before, after;
  clmoe_ctx_pool_stats(ctx, &before);
  clmoe_tensor w[3] = {{0}};
  for (int j = 0; old && j < 3; j++) {
    TEST_OK(clmoe_tensor_create(ctx, &w[j], CLMOE_F32, st[j]->ndim, st[j]->shape));
    TEST_OK(clmoe_tensor_copy(&w[j], st[j]));
  }
  TEST_OK(clmoe_gen_prefill(g, p, len, last, NULL));
  for (int j = 0; j < 3; j++) clmoe_tensor_destroy(&w[j]);
  clmoe_ctx_pool_stats(ctx, &after);
  int finite = 1;
  for (int64_t i = 0; i < V; i++) finite &= last[i] == last[i];
  CU_ASSERT(finite);
  free(last);
  clmoe_gen_state_destroy(g);
  clmoe_model_destroy(m);
  clmoe_ctx_destroy(ctx);
  return (double)after.peak_in_use_bytes - (double)before.in_use_bytes;
}

static void test_peak(void)
{
  double bound = 0.0, bound_old = 0.0;
  const double extra = prefill_extra(0, &bound), extra_old = prefill_extra(1, &bound_old);
  if (!(extra <= bound && extra_old > bound) || getenv("CLMOE_TEST_VERBOSE"))
    fprintf(stderr, "\n  prefill of 96 tokens: %.0f B in use beyond the model and state (with one layer's fp32 "
            "expert copies held: %.0f B); bound %.0f B (2 B a routed expert parameter of one layer)", extra,
            extra_old, bound);
  CU_ASSERT(extra <= bound);
  CU_ASSERT(extra_old > bound); /* the bound tells the former path apart */
}

static void add(CU_pSuite s)
{
  CU_add_test(s, "bf16 prefill logits = those of the fp32 weights of the same values, to the bit", test_same_logits);
  CU_add_test(s, "prefill's device memory beyond the model below one layer's bf16 expert bytes", test_peak);
}

int main(void) { return test_main("generate_prefill", add); }
