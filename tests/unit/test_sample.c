/* CUnit suite: the token sampler (clmoe_gen_sample on the host, clmoe_gen_sample_rows on the
 * device; include/clmoe/generate.h):
 *  - its rules on synthetic logits (greedy, top-k, top-p, temperature, errors);
 *  - the host's draws equal the double-precision rule's (check/ref/ref_sample.c) at
 *    V 12000, with cuts deep into flat tails and top-k sets past the heap's first 256;
 *  - the device draws the host's tokens, bit for bit, over many seeds, steps and rows at
 *    V 7, 300 and 12000, with ties, -inf, +inf, denormals and NaN rows, and at V 163840
 *    (random and tied rows), and with the 8-bit digits of a device with little local memory;
 *  - the same with each row split over several work-groups (CLMOE_SAMPLE_GROUPS: 3 to 16,
 *    more groups than logits; the automatic count at V 163840; batch 1 and several rows),
 *    and rows whose top-p cut lies among weights of about 2^32 (the bins' low-word carries
 *    decide it), 1 to 7 groups;
 *  - the probability of each candidate (its integer weight over the set's) is the double
 *    rule's within 2e-6, and 20480 device draws pass a chi-square test against it;
 *  - edge options: top-k > V, top-p 1, temperature 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/paths.h"
#include "test_common.h"
#include "check/ref/ref_sample.h"
#include "lib/generate/generate_internal.h"

/* The sampler's rules on synthetic logits. */
static void test_rules(void)
{
  enum { V = 8, DRAWS = 4000 };
  const float lg[V] = {0.0f, 2.0f, 1.0f, 2.0f, -1.0f, 0.5f, -3.0f, 1.5f};
  int32_t t;
  clmoe_gen_sampling g = {.greedy = 1};
  TEST_OK(clmoe_gen_sample(&g, lg, V, 0, 0, &t));
  CU_ASSERT_EQUAL(t, 1); /* the first of the two maxima */
  clmoe_gen_sampling k2 = {.temperature = 1.0, .top_k = 2, .seed = 5};
  clmoe_gen_sampling p = {.temperature = 1.0, .top_p = 0.5, .seed = 6};
  clmoe_gen_sampling full = {.temperature = 1.0, .seed = 7};
  int ck[V] = {0}, cp[V] = {0}, cf[V] = {0};
  for (int i = 0; i < DRAWS; i++) {
    TEST_OK(clmoe_gen_sample(&k2, lg, V, 1, i, &t));
    ck[t]++;
    TEST_OK(clmoe_gen_sample(&p, lg, V, 1, i, &t));
    cp[t]++;
    TEST_OK(clmoe_gen_sample(&full, lg, V, 1, i, &t));
    cf[t]++;
  }
  CU_ASSERT_EQUAL(ck[1] + ck[3], DRAWS); /* top-2: the two maxima only, about evenly */
  CU_ASSERT(abs(ck[1] - ck[3]) < DRAWS / 10);
  /* top-p 0.5: the first maximum holds 0.28 of the mass, both 0.56: both are kept */
  CU_ASSERT_EQUAL(cp[1] + cp[3], DRAWS);
  double z = 0.0; /* no truncation: frequencies follow softmax */
  for (int i = 0; i < V; i++) z += exp(lg[i]);
  for (int i = 0; i < V; i++) {
    const double want = DRAWS * exp(lg[i]) / z;
    CU_ASSERT(fabs(cf[i] - want) < 5.0 * sqrt(want) + 3.0);
  }
  clmoe_gen_sampling bad = {.temperature = -1.0};
  CU_ASSERT_EQUAL(clmoe_gen_sample(&bad, lg, V, 0, 0, &t), CLMOE_ERR_INVALID_ARGUMENT);
  bad = (clmoe_gen_sampling){.temperature = 1.0, .top_k = -2};
  CU_ASSERT_EQUAL(clmoe_gen_sample(&bad, lg, V, 0, 0, &t), CLMOE_ERR_INVALID_ARGUMENT);
  const float nan_lg[3] = {0.0f, NAN, NAN};
  CU_ASSERT_EQUAL(clmoe_gen_sample(&full, nan_lg, 3, 0, 0, &t), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "logit 1 is NaN"));
}

/* The double rule's draw, and whether it is well defined: u and the top-p cut further
 * than 1e-6 (the integer weights' error, test_probabilities) from a
 * boundary. */
static int32_t ref_draw(const clmoe_gen_sampling *sp, const float *lg, int64_t V, int64_t seq, int64_t step,
                        double *prob, int *clear)
{
  if (sp->greedy || sp->temperature == 0.0 || sp->top_k == 1) {
    int64_t b = 0;
    for (int64_t i = 1; i < V; i++)
      if (lg[i] > lg[b]) b = i;
    *clear = 1;
    return (int32_t)b;
  }
  double cut, mu;
  ref_sample_probs(sp->temperature, sp->top_k, sp->top_p, lg, V, prob, &cut);
  const int32_t t = ref_sample_pick(prob, V, ref_sample_uniform(sp->seed, seq, step), &mu);
  *clear = cut > 1e-6 && mu > 1e-6;
  return t;
}

/* Rows of V logits: 0 flat (uniform in [0, 1)), 1 peaked with a tie at the top. */
static void fill_rows(float *flat, float *peaked, int64_t V)
{
  for (int64_t i = 0; i < V; i++) {
    flat[i] = clmoe_random_uniform(11, (uint64_t)i, 0.0f, 1.0f);
    peaked[i] = clmoe_random_uniform(12, (uint64_t)i, -4.0f, 4.0f) * (i % 97 == 0 ? 3.0f : 1.0f);
  }
  peaked[V / 3] = peaked[V / 3 + 1] = 20.0f;
}

static const clmoe_gen_sampling HOW[] = {
    {.temperature = 1.0, .seed = 1},                  {.temperature = 0.7, .top_p = 0.95, .seed = 2},
    {.temperature = 1.0, .top_k = 50, .seed = 3},     {.temperature = 1.3, .top_k = 3000, .seed = 4},
    {.temperature = 1.0, .top_k = 3000, .top_p = 0.5, .seed = 5}, {.temperature = 2.0, .top_p = 0.999, .seed = 6},
    {.temperature = 0.0, .seed = 7}};
enum { NHOW = sizeof HOW / sizeof HOW[0] };

/* A large vocabulary: the host sampler (best keys by a heap, more when top-p's walk needs
 * them) draws what the double rule draws, with cuts far past its first 256 candidates. */
static void test_host_equals_rule(void)
{
  enum { V = 12000, DRAWS = 40 };
  float *flat = malloc(V * sizeof *flat), *peaked = malloc(V * sizeof *peaked);
  double *prob = malloc(V * sizeof *prob);
  CU_ASSERT_FATAL(flat && peaked && prob);
  fill_rows(flat, peaked, V);
  int differ = 0, deep = 0, unclear = 0, n = 0;
  for (int h = 0; h < NHOW; h++)
    for (int which = 0; which < 2; which++)
      for (int k = 0; k < DRAWS; k++, n++) {
        const float *lg = which ? peaked : flat;
        int32_t t = -1;
        int clear;
        TEST_OK(clmoe_gen_sample(&HOW[h], lg, V, which, k, &t));
        const int32_t want = ref_draw(&HOW[h], lg, V, which, k, prob, &clear);
        unclear += !clear;
        differ += clear && t != want;
        int rank = 0; /* how far down the candidates the draw went */
        for (int i = 0; i < V; i++) rank += lg[i] > lg[want];
        deep += rank >= 256;
      }
  CU_ASSERT_EQUAL(differ, 0);
  /* flat rows have boundaries 8e-5 apart, and a top-p cut near p leaves all 40 draws of
   * its row unclear (seed 20261129: 45 of 560) */
  if (unclear >= n / 8) fprintf(stderr, "\n  %d of %d draws within 1e-6 of a boundary", unclear, n);
  CU_ASSERT(unclear < n / 8);
  CU_ASSERT(deep > 0);
  free(flat), free(peaked), free(prob);
}

/* Rows of the device test: r % 6 picks 0 random, 1 ties, 2 some -inf, 3 all -inf, 4 +inf
 * twice, 5 denormals and signed zeros; row 6 (of 7 or more) holds a NaN. */
static void special_rows(float *lg, int R, int64_t V, uint64_t seed)
{
  for (int r = 0; r < R; r++)
    for (int64_t i = 0; i < V; i++) {
      const float u = clmoe_random_uniform(seed, (uint64_t)(r * V + i), 0.0f, 1.0f);
      float x = 10.0f * u - 5.0f;
      switch (r % 6) {
      case 1: x = (float)(int)(4.0f * u); break;
      case 2: x = i % 4 == 2 ? -INFINITY : x; break;
      case 3: x = -INFINITY; break;
      case 4: x = i == V / 2 || i == V - 1 ? INFINITY : x; break;
      case 5: x = u < 0.3f ? 1e-41f : u < 0.6f ? -0.0f : u < 0.9f ? 0.0f : 2e-39f; break;
      default: break;
      }
      if (r == 6 && (i == V - 1 || i == V / 3)) x = NAN;
      lg[r * V + i] = x;
    }
}

/* Device draws = host draws, over the options above and a few edge ones, many steps, on
 * `rows` rows (0: by V, 2 to 16). */
static void device_rows_equal_host(int64_t V, int64_t rows, uint64_t seed)
{
  const int64_t R = rows ? rows : V > 100000 ? 2 : V > 1000 ? 7 : 16,
                steps = V > 1000 ? 2 - (V > 100000) : V > 10 ? 4 : 12, shape[2] = {R, V};
  float *lg = malloc((size_t)(R * V) * sizeof *lg);
  int32_t *ids = malloc((size_t)R * sizeof *ids);
  CU_ASSERT_FATAL(lg && ids);
  special_rows(lg, (int)R, V, seed);
  clmoe_tensor t = {0}, it = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_F32, 2, shape));
  TEST_OK(clmoe_tensor_create(test_ctx, &it, CLMOE_I32, 1, &R));
  TEST_OK(clmoe_tensor_write(&t, lg, (size_t)(R * V) * sizeof *lg));
  clmoe_gen_sampling how[NHOW + 3];
  memcpy(how, HOW, sizeof HOW);
  how[NHOW] = (clmoe_gen_sampling){.temperature = 0.5, .top_k = V + 9, .top_p = 1.0, .seed = 8};
  how[NHOW + 1] = (clmoe_gen_sampling){.temperature = 1e-3, .top_k = 3, .seed = 9};
  how[NHOW + 2] = (clmoe_gen_sampling){.temperature = 30.0, .top_p = 0.3, .seed = 10};
  int differ = 0, draws = 0;
  for (int h = 0; h < NHOW + 3; h++) {
    how[h].seed += test_seed;
    for (int64_t k = 0; k < steps; k++) {
      for (int64_t r = 0; r < R; r++) ids[r] = -12345;
      TEST_OK(clmoe_tensor_write(&it, ids, (size_t)R * sizeof *ids));
      TEST_OK(clmoe_gen_sample_rows(test_ctx, &how[h], &t, k, &it));
      TEST_OK(clmoe_tensor_read(&it, ids, (size_t)R * sizeof *ids));
      for (int64_t r = 0; r < R; r++, draws++) {
        int32_t want = -1;
        const clmoe_status st = clmoe_gen_sample(&how[h], lg + r * V, V, r, k, &want);
        if (r == 6) { /* NaN row: the lowest NaN index, an error on the host */
          want = -1 - (int32_t)(V / 3 < V - 1 ? V / 3 : V - 1);
          CU_ASSERT_EQUAL(st, CLMOE_ERR_INVALID_ARGUMENT);
        } else {
          CU_ASSERT_EQUAL(st, CLMOE_OK);
        }
        if (ids[r] != want) {
          if (differ++ < 5)
            fprintf(stderr, "\n  V %lld option %d step %lld row %lld: device %d host %d (seed %llu)", (long long)V, h,
                    (long long)k, (long long)r, ids[r], want, (unsigned long long)test_seed);
        }
      }
    }
  }
  CU_ASSERT_EQUAL(differ, 0);
  CU_ASSERT(draws > 0);
  clmoe_tensor_destroy(&t), clmoe_tensor_destroy(&it);
  free(lg), free(ids);
}

static void device_equals_host(int64_t V, uint64_t seed) { device_rows_equal_host(V, 0, seed); }

static void test_device_equals_host(void)
{
  static const int64_t vs[4] = {7, 300, 12000, 163840}; /* the last: Kimi-Linear's, rows 0 and 1 */
  for (int v = 0; v < 4; v++) device_equals_host(vs[v], test_seed + (uint64_t)v);
}

/* Rows whose top-p cut falls among weights of about 2^32 (V 12000: a weight is
 * exp(l - lmax) 2^48): logits 0 at the last index, the rest in [-11, -10.5], so the bins'
 * low words carry and a lost carry moves the cut by about a candidate; the largest logit
 * last, so the draw walks the small ones first. Device draws = host draws over 6 steps. */
static void carry_rows(void)
{
  enum { V = 12000, R = 2, STEPS = 6 };
  const int64_t shape[2] = {R, V}, n = R;
  float *lg = malloc(R * V * sizeof *lg);
  CU_ASSERT_FATAL(lg != NULL);
  for (int64_t i = 0; i < R * V; i++) lg[i] = clmoe_random_uniform(test_seed + 31, (uint64_t)i, -11.0f, -10.5f);
  lg[V - 1] = lg[2 * V - 1] = 0.0f;
  clmoe_tensor t = {0}, it = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_F32, 2, shape));
  TEST_OK(clmoe_tensor_create(test_ctx, &it, CLMOE_I32, 1, &n));
  TEST_OK(clmoe_tensor_write(&t, lg, sizeof *lg * R * V));
  const clmoe_gen_sampling how[] = {{.temperature = 1.0, .top_p = 0.9, .seed = test_seed + 1},
                                    {.temperature = 1.0, .top_k = 9000, .top_p = 0.93, .seed = test_seed + 2}};
  int differ = 0, small = 0;
  for (int h = 0; h < 2; h++)
    for (int64_t k = 0; k < STEPS; k++) {
      int32_t ids[R] = {-12345, -12345}, want;
      TEST_OK(clmoe_tensor_write(&it, ids, sizeof ids));
      TEST_OK(clmoe_gen_sample_rows(test_ctx, &how[h], &t, k, &it));
      TEST_OK(clmoe_tensor_read(&it, ids, sizeof ids));
      for (int r = 0; r < R; r++) {
        TEST_OK(clmoe_gen_sample(&how[h], lg + r * V, V, r, k, &want));
        differ += ids[r] != want;
        small += want != V - 1;
      }
    }
  CU_ASSERT_EQUAL(differ, 0);
  CU_ASSERT(small > 0); /* some draws took a small candidate */
  clmoe_tensor_destroy(&t), clmoe_tensor_destroy(&it);
  free(lg);
}

/* Several work-groups per row (CLMOE_SAMPLE_GROUPS): groups of a few logits, more groups than
 * logits (empty groups), odd V, one row and several, and Kimi-Linear's V with the automatic
 * count (at batch 1 and 2) and with 16. */
static void test_device_split(void)
{
  static const struct { int64_t V, rows; const char *groups; } cases[] = {
      {7, 0, "3"}, {7, 0, "11"}, {300, 0, "5"}, {1001, 0, "4"}, {1001, 1, "4"}, {12000, 0, "7"},
      {163840, 1, "0"}, {163840, 0, "0"}, {163840, 0, "16"}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_SAMPLE_GROUPS", cases[c].groups));
    device_rows_equal_host(cases[c].V, cases[c].rows, test_seed + 20 + (uint64_t)c);
  }
  for (int g = 1; g <= 7; g += 3) {
    char v[8];
    snprintf(v, sizeof v, "%d", g);
    TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_SAMPLE_GROUPS", v));
    carry_rows();
  }
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_SAMPLE_GROUPS", NULL));
}

/* Under 24 KB of local memory the device sampler takes 8-bit digits (at V 12000: 4 levels
 * over the logit, 2 over the index); under its 6 KB it refuses, naming local memory. */
static void test_device_small_local(void)
{
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_LOCAL_MEM_BYTES", "16384"));
  device_equals_host(12000, test_seed + 7);
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_SAMPLE_GROUPS", "3")); /* and split over 3 groups */
  device_equals_host(12000, test_seed + 8);
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_SAMPLE_GROUPS", NULL));
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_LOCAL_MEM_BYTES", "4096"));
  const int64_t shape[2] = {1, 300}, one = 1;
  clmoe_tensor t = {0}, it = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_F32, 2, shape));
  TEST_OK(clmoe_tensor_create(test_ctx, &it, CLMOE_I32, 1, &one));
  TEST_OK(clmoe_tensor_fill_normal(&t, 3, 0.0f, 1.0f));
  CU_ASSERT_EQUAL(clmoe_gen_sample_rows(test_ctx, &HOW[2], &t, 0, &it), CLMOE_ERR_UNSUPPORTED);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "local memory"));
  clmoe_tensor_destroy(&t), clmoe_tensor_destroy(&it);
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_LOCAL_MEM_BYTES", NULL));
}

/* Each candidate's probability, its integer weight over the set's, against the double
 * rule's: within 2e-6 relative (the fp32 exponent and the polynomial), on rows of 300. */
static void test_probabilities(void)
{
  enum { V = 300 };
  float lg[V];
  double prob[V];
  const clmoe_gen_sampling how[] = {{.temperature = 0.8, .seed = 1},
                                    {.temperature = 1.7, .top_k = 40, .seed = 1},
                                    {.temperature = 0.6, .top_p = 0.8, .seed = 1}};
  double worst = 0.0;
  int checked = 0;
  for (int row = 0; row < 2; row++) {
    for (int i = 0; i < V; i++)
      lg[i] = row ? (float)(i % 7) - 3.0f : clmoe_random_uniform(test_seed, (uint64_t)i, -6.0f, 6.0f);
    float lmax = lg[0];
    for (int i = 1; i < V; i++) lmax = lg[i] > lmax ? lg[i] : lmax;
    for (size_t h = 0; h < sizeof how / sizeof how[0]; h++) {
      gen_sampling_plan pl;
      TEST_OK(clmoe__gen_sampling_plan(&how[h], V, "test", &pl));
      double cut;
      ref_sample_probs(how[h].temperature, how[h].top_k, how[h].top_p, lg, V, prob, &cut);
      CU_ASSERT(cut > 1e-4);
      uint64_t Q = 0;
      for (int i = 0; i < V; i++)
        if (prob[i] > 0.0) Q += clmoe__gen_sample_weight(lg[i], lmax, pl.inv_t, pl.scale);
      for (int i = 0; i < V; i++)
        if (prob[i] > 0.0) {
          const double p = (double)clmoe__gen_sample_weight(lg[i], lmax, pl.inv_t, pl.scale) / (double)Q;
          const double e = fabs(p - prob[i]) / prob[i];
          worst = e > worst || isnan(e) ? (isnan(e) ? INFINITY : e) : worst;
          checked++;
        }
    }
  }
  if (worst > 2e-6) fprintf(stderr, "\n  worst relative error of a probability: %.3g", worst);
  CU_ASSERT(worst <= 2e-6);
  CU_ASSERT(checked > 300);
}

/* Draws on the device: 2048 rows of the same 7 logits (sequences 0..2047) over 10 steps,
 * counted per token: chi-square against the double rule's probabilities below the 1e-4
 * quantile's critical value, and no draw outside the candidates. */
static void test_chi_square(void)
{
  enum { V = 7, R = 2048, STEPS = 10 };
  const float row[V] = {1.0f, 0.2f, -0.5f, 2.0f, 2.0f, -3.0f, 0.7f};
  const clmoe_gen_sampling how[] = {{.temperature = 0.8, .top_k = 5, .seed = 21}, {.temperature = 1.2, .top_p = 0.8, .seed = 22},
                                    {.temperature = 1.0, .seed = 23}};
  const double crit[V] = {0, 15.14, 18.42, 21.11, 23.51, 25.74, 27.86}; /* df 1..6 at 1e-4 */
  float *lg = malloc(R * V * sizeof *lg);
  int32_t *ids = malloc(R * sizeof *ids);
  CU_ASSERT_FATAL(lg && ids);
  for (int r = 0; r < R; r++) memcpy(lg + r * V, row, sizeof row);
  const int64_t shape[2] = {R, V}, n = R;
  clmoe_tensor t = {0}, it = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_F32, 2, shape));
  TEST_OK(clmoe_tensor_create(test_ctx, &it, CLMOE_I32, 1, &n));
  TEST_OK(clmoe_tensor_write(&t, lg, R * V * sizeof *lg));
  for (size_t h = 0; h < sizeof how / sizeof how[0]; h++) {
    double prob[V];
    const int64_t cands = ref_sample_probs(how[h].temperature, how[h].top_k, how[h].top_p, row, V, prob, NULL);
    long count[V] = {0}, outside = 0;
    for (int k = 0; k < STEPS; k++) {
      TEST_OK(clmoe_gen_sample_rows(test_ctx, &how[h], &t, k, &it));
      TEST_OK(clmoe_tensor_read(&it, ids, R * sizeof *ids));
      for (int r = 0; r < R; r++) {
        CU_ASSERT_FATAL(ids[r] >= 0 && ids[r] < V);
        count[ids[r]]++;
        outside += prob[ids[r]] == 0.0;
      }
    }
    double chi = 0.0;
    for (int i = 0; i < V; i++)
      if (prob[i] > 0.0) {
        const double e = prob[i] * R * STEPS;
        chi += (count[i] - e) * (count[i] - e) / e;
      }
    if (!(chi < crit[cands - 1])) fprintf(stderr, "\n  option %zu: chi-square %.2f, %lld candidates", h, chi, (long long)cands);
    CU_ASSERT(cands >= 2 && chi < crit[cands - 1]);
    CU_ASSERT_EQUAL(outside, 0);
  }
  clmoe_tensor_destroy(&t), clmoe_tensor_destroy(&it);
  free(lg), free(ids);
}

/* top-k past V is no top-k, top-p 1 is no top-p, temperature 0 and top-k 1 are greedy. */
static void test_edge_options(void)
{
  enum { V = 300, DRAWS = 50 };
  float lg[V];
  for (int i = 0; i < V; i++) lg[i] = clmoe_random_uniform(test_seed + 5, (uint64_t)i, -3.0f, 3.0f);
  lg[17] = lg[230] = 4.0f;
  const clmoe_gen_sampling pairs[][2] = {
      {{.temperature = 1.0, .top_k = V + 1, .seed = 3}, {.temperature = 1.0, .seed = 3}},
      {{.temperature = 1.0, .top_k = V, .seed = 3}, {.temperature = 1.0, .seed = 3}},
      {{.temperature = 0.9, .top_p = 1.0, .seed = 4}, {.temperature = 0.9, .top_p = 0.0, .seed = 4}},
      {{.temperature = 0.0, .top_p = 0.5, .seed = 5}, {.greedy = 1}},
      {{.temperature = 3.0, .top_k = 1, .seed = 5}, {.greedy = 1}}};
  int differ = 0, varied = 0;
  int32_t a0 = -1;
  for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
    for (int k = 0; k < DRAWS; k++) {
      int32_t a, b;
      TEST_OK(clmoe_gen_sample(&pairs[p][0], lg, V, 0, k, &a));
      TEST_OK(clmoe_gen_sample(&pairs[p][1], lg, V, 0, k, &b));
      differ += a != b;
      if (p == 0 && k == 0) a0 = a;
      varied += p == 0 && a != a0;
      if (p >= 3) differ += a != 17; /* the first maximum */
    }
  CU_ASSERT_EQUAL(differ, 0);
  CU_ASSERT(varied > 0);
}

static void add(CU_pSuite s)
{
  CU_add_test(s, "sampler rules: greedy, top-k, top-p, temperature, errors", test_rules);
  CU_add_test(s, "host draws = the double rule's at V 12000", test_host_equals_rule);
  CU_add_test(s, "device draws = host draws at V 7, 300, 12000, 163840 with ties, inf, NaN", test_device_equals_host);
  CU_add_test(s, "device draws = host draws with 3 to 16 work-groups per row, V 7 to 163840, low-word carries",
              test_device_split);
  CU_add_test(s, "device draws = host draws with 8-bit digits (16 KB of local memory)", test_device_small_local);
  CU_add_test(s, "candidate probabilities = the double rule's within 2e-6", test_probabilities);
  CU_add_test(s, "device draws pass a chi-square test", test_chi_square);
  CU_add_test(s, "edge options: top-k > V, top-p 1, temperature 0, top-k 1", test_edge_options);
  test_add_checks(s, "gen.sample");
}

int main(void) { return test_main("sample", add); }
