/* Conformance checks of the runtime: random fills (bit-exact against the host generator)
 * and the fp32 <-> bf16 conversion of tensor copies. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "conformance.h"

/* ---- random fills: the device must give exactly the host generator's bits ---- */
static clmoe_status check_random(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                 int normal, clmoe_dtype dtype)
{
  const int64_t n = 10007;
  clmoe_status st = CLMOE_OK;
  clmoe_tensor t = {0};
  double *got = NULL, *want = NULL;
  CK_ALLOC(want, n);
  CK(clmoe_tensor_create(ctx, &t, dtype, 1, &n));
  CK(normal ? clmoe_tensor_fill_normal(&t, seed, 0.5f, 2.0f)
            : clmoe_tensor_fill_uniform(&t, seed, -3.0f, 5.0f));
  CK(ck_read(&t, &got));
  double mean = 0.0;
  for (int64_t i = 0; i < n; i++) {
    float v = normal ? clmoe_random_normal(seed, (uint64_t)i, 0.5f, 2.0f)
                     : clmoe_random_uniform(seed, (uint64_t)i, -3.0f, 5.0f);
    if (dtype == CLMOE_BF16) v = clmoe_f32_from_bf16(clmoe_bf16_from_f32(v));
    want[i] = v;
    mean += v;
  }
  res->tolerance = 0.0; /* bit-exact: any difference fails */
  ck_capture_scaled("values", got, want, (size_t)n, 1.0, res);
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      res->max_err = 1.0;
      snprintf(res->worst, sizeof res->worst, "element %lld: device %.9g, host %.9g",
               (long long)i, got[i], want[i]);
      break;
    }
  /* The host generator must also look like the distribution asked for. */
  mean /= (double)n;
  double expect = normal ? 0.5 : 1.0, sd = normal ? 2.0 : 8.0 / sqrt(12.0);
  if (fabs(mean - expect) > 5.0 * sd / sqrt((double)n)) {
    res->max_err = 1.0;
    snprintf(res->worst, sizeof res->worst, "sample mean %.5f, expected %.5f", mean, expect);
  }
done:
  free(got);
  free(want);
  clmoe_tensor_destroy(&t);
  return st;
}

static clmoe_status random_uniform_f32(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_random(c, s, r, 0, CLMOE_F32); }
static clmoe_status random_normal_f32(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_random(c, s, r, 1, CLMOE_F32); }
static clmoe_status random_normal_bf16(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_random(c, s, r, 1, CLMOE_BF16); }

/* ---- fp32 <-> bf16 conversion on the device against the host's rounding ---- */
static clmoe_status convert_bf16(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  const int64_t n = 4099;
  clmoe_status st = CLMOE_OK;
  clmoe_tensor a = {0}, h = {0}, b = {0};
  double *x = NULL, *got = NULL, *want = NULL;
  CK_ALLOC(want, n);
  CK(ck_uniform(ctx, &a, CLMOE_F32, 1, &n, seed, -100.0f, 100.0f, &x));
  CK(clmoe_tensor_create(ctx, &h, CLMOE_BF16, 1, &n));
  CK(clmoe_tensor_create(ctx, &b, CLMOE_F32, 1, &n));
  CK(clmoe_tensor_copy(&h, &a));
  CK(clmoe_tensor_copy(&b, &h));
  CK(ck_read(&b, &got));
  for (int64_t i = 0; i < n; i++) want[i] = clmoe_f32_from_bf16(clmoe_bf16_from_f32((float)x[i]));
  res->tolerance = 0.0;
  ck_compare("bf16(x)", got, want, (size_t)n, res);
done:
  free(x), free(got), free(want);
  clmoe_tensor_destroy(&a), clmoe_tensor_destroy(&h), clmoe_tensor_destroy(&b);
  return st;
}

const clmoe_check clmoe_checks_random[] = {
    {"random.uniform.f32", "counter-based uniform fill, bit-exact against the host", random_uniform_f32},
    {"random.normal.f32", "counter-based normal fill, bit-exact against the host", random_normal_f32},
    {"random.normal.bf16", "normal fill into bf16 storage, bit-exact against the host", random_normal_bf16},
    {"convert.bf16", "fp32 -> bf16 -> fp32 round trip against host rounding", convert_bf16},
    {NULL, NULL, NULL}};
