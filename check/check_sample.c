/* Conformance check of the device sampler (clmoe_gen_sample_rows, kernels_cl/generate/
 * gen_sample.cl) against the double-precision rule (check/ref/ref_sample.c) and the host
 * sampler (clmoe_gen_sample), on rows that hold the hard cases. */
#include <math.h>
#include <stdlib.h>

#include "clmoe/paths.h"
#include "conformance.h"
#include "ref/ref_sample.h"

enum { SR = 8 }; /* rows */

/* Row r of the check's logits [SR, V]: 0 random, 1 ties (three values), 2 every third -inf,
 * 3 all -inf, 4 two +inf, 5 denormals and signed zeros only, 6 a wide range (most weights
 * 0), 7 two NaNs. */
static float row_value(uint64_t seed, int r, int64_t i, int64_t V)
{
  const double u = ck_host_uniform(seed, (uint64_t)(r * V + i), 0.0, 1.0);
  const float x = (float)(8.0 * u - 4.0);
  switch (r) {
  case 1: return (float)(int)(3.0 * u);
  case 2: return i % 3 == 1 ? -INFINITY : x;
  case 3: return -INFINITY;
  case 4: return i == 5 || i == V - 2 ? INFINITY : x;
  case 5: return u < 0.25 ? 1e-40f : u < 0.5 ? -1e-40f : u < 0.75 ? -0.0f : 0.0f;
  case 6: return 15.0f * x;
  case 7: return i == V / 2 || i == V - 1 ? NAN : x;
  default: return x;
  }
}

static clmoe_status g_sample(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  const int64_t V = CK_SIZE(300, 37), steps = CK_SIZE(4, 1), sl[2] = {SR, V}, n = SR;
  const clmoe_gen_sampling how[] = {
      {.temperature = 1.0, .seed = seed},
      {.temperature = 0.7, .top_k = 5, .seed = seed + 1},
      {.temperature = 1.3, .top_p = 0.6173, .seed = seed + 2},
      {.temperature = 0.9, .top_k = 20, .top_p = 0.9137, .seed = seed + 3},
      {.temperature = 1.0, .top_k = V + 5, .top_p = 1.0, .seed = seed + 4},
      {.temperature = 0.0, .seed = seed + 5}};
  enum { NH = sizeof how / sizeof how[0] };
  const int64_t total = NH * steps * SR;
  clmoe_status st = CLMOE_OK;
  clmoe_tensor lg = {0}, ids = {0};
  float *hf = NULL;
  double *prob = NULL, *got = NULL, *ref = NULL, *host = NULL;
  int32_t *gi = NULL;
  CK_ALLOC(hf, SR * V);
  CK_ALLOC(prob, V);
  CK_ALLOC(gi, SR);
  CK_ALLOC(got, total);
  CK_ALLOC(ref, total);
  CK_ALLOC(host, total);
  for (int r = 0; r < SR; r++)
    for (int64_t i = 0; i < V; i++) hf[r * V + i] = row_value(seed, r, i, V);
  CK(clmoe_tensor_create(ctx, &lg, CLMOE_F32, 2, sl));
  CK(clmoe_tensor_write(&lg, hf, (size_t)(SR * V) * sizeof *hf));
  CK(clmoe_tensor_create(ctx, &ids, CLMOE_I32, 1, &n));
  int64_t at = 0;
  for (int h = 0; h < NH; h++)
    for (int64_t k = 0; k < steps; k++) {
      for (int r = 0; r < SR; r++) gi[r] = -7; /* a row the kernel misses fails */
      CK(clmoe_tensor_write(&ids, gi, SR * sizeof *gi));
      CK(clmoe_gen_sample_rows(ctx, &how[h], &lg, k, &ids));
      CK(clmoe_tensor_read(&ids, gi, SR * sizeof *gi));
      for (int r = 0; r < SR; r++, at++) {
        const float *x = hf + r * V;
        got[at] = gi[r];
        int32_t t = -1;
        const clmoe_status hs = clmoe_gen_sample(&how[h], x, V, r, k, &t);
        host[at] = hs == CLMOE_OK ? t : -8;
        if (r == 7) { /* NaN: -1 - the lower index; the host refuses the row */
          ref[at] = (double)(-1 - V / 2);
          host[at] = hs == CLMOE_ERR_INVALID_ARGUMENT ? gi[r] : -8;
          continue;
        }
        if (how[h].temperature == 0.0) { /* greedy: the first maximum */
          int64_t b = 0;
          for (int64_t i = 1; i < V; i++)
            if (x[i] > x[b]) b = i;
          ref[at] = (double)b;
          continue;
        }
        double cut, mu;
        ref_sample_probs(how[h].temperature, how[h].top_k, how[h].top_p, x, V, prob, &cut);
        const double u = ref_sample_uniform(how[h].seed, r, k);
        ref[at] = ref_sample_pick(prob, V, u, &mu);
        if (cut < 3e-6) ref[at] = -9; /* inputs on a top-p boundary: fails */
        /* u within 3e-6 of a boundary (the weights' error): the integer weights may take either neighbour */
        if (mu < 3e-6 && got[at] != ref[at] &&
            (got[at] == ref_sample_pick(prob, V, u - 3e-6, NULL) || got[at] == ref_sample_pick(prob, V, u + 3e-6, NULL)))
          ref[at] = got[at];
      }
    }
  res->tolerance = 0.0; /* ids: exact */
  ck_compare("ids", got, ref, (size_t)total, res);
  ck_compare("host", got, host, (size_t)total, res);
done:
  clmoe_tensor_destroy(&lg), clmoe_tensor_destroy(&ids);
  free(hf), free(prob), free(got), free(ref), free(host), free(gi);
  return st;
}

/* The same with each row split over 3 work-groups (gen_sample_split.cl), forced by
 * CLMOE_SAMPLE_GROUPS (the automatic count keeps rows this short in one group). */
static clmoe_status g_sample_split(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  clmoe_status st = clmoe_ctx_set_knob(ctx, "CLMOE_SAMPLE_GROUPS", "3");
  if (st == CLMOE_OK) st = g_sample(ctx, seed, res);
  const clmoe_status back = clmoe_ctx_set_knob(ctx, "CLMOE_SAMPLE_GROUPS", NULL); /* the environment's */
  return st != CLMOE_OK ? st : back;
}

const clmoe_check clmoe_checks_sample[] = {
    {"gen.sample", "sampled tokens of 8 rows (ties, -inf, +inf, denormals, NaN) under top-k/top-p", g_sample},
    {"gen.sample.split", "gen.sample with each row over 3 work-groups", g_sample_split},
    {NULL, NULL, NULL}};
