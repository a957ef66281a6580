/* Conformance checks of the reductions: sums, sums of squares and max |x| of long arrays,
 * column sums, and NaN propagation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "conformance.h"
#include "ref/reference.h"

#define TOL_F32 1e-5
#define F CLMOE_F32

/* ---- reductions ---- */
enum { RD_SUM, RD_SUMSQ, RD_MAXABS, RD_ROWS };

static clmoe_status check_reduce(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, int op,
                                 int64_t rows, int64_t cols)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor X = {0}, O = {0};
  double *x = NULL, *got = NULL, *ref = NULL;
  const size_t n = (size_t)(rows * cols);
  int64_t on = op == RD_ROWS ? cols : 1;
  CK(ck_uniform(ctx, &X, F, 2, (int64_t[]){rows, cols}, seed, -1.0f, 1.0f, &x));
  CK(clmoe_tensor_create(ctx, &O, F, 1, &on));
  CK_ALLOC(ref, on);
  switch (op) {
  case RD_SUM: CK(clmoe_sum(ctx, &X, &O)); ref[0] = ref_sum(x, n); break;
  case RD_SUMSQ: CK(clmoe_sum_squares(ctx, &X, &O)); ref[0] = ref_sum_squares(x, n); break;
  case RD_MAXABS: CK(clmoe_max_abs(ctx, &X, &O)); ref[0] = ref_max_abs(x, n); break;
  case RD_ROWS: CK(clmoe_sum_rows(ctx, &X, &O)); ref_sum_rows(x, rows, cols, ref); break;
  }
  CK(ck_read(&O, &got));
  /* A sum of n terms of size 1 carries about sqrt(n) eps of rounding: scale the bound. */
  res->tolerance = op == RD_MAXABS ? 0.0 : TOL_F32 * fmax(1.0, sqrt((double)n) / 100.0);
  if (op == RD_SUM || op == RD_ROWS) {
    /* Relative to the sum of magnitudes: a sum of random signs can be close to zero. */
    double scale = 0.0;
    for (size_t i = 0; i < n; i++) scale += fabs(x[i]);
    scale /= (double)(op == RD_ROWS ? rows : 1);
    double worst = 0.0;
    for (int64_t j = 0; j < on; j++) {
      double e = isfinite(got[j]) ? fabs(got[j] - ref[j]) / (scale > 0 ? scale : 1.0) : INFINITY;
      if (e > worst || j == 0) {
        worst = fmax(worst, e);
        snprintf(res->worst, sizeof res->worst, "out[%lld]: got %.9g, expected %.9g (scale %.3g)",
                 (long long)j, got[j], ref[j], scale);
      }
    }
    res->max_err = worst;
    ck_capture_scaled("out", got, ref, (size_t)on, scale > 0 ? scale : 1.0, res);
  } else {
    ck_compare("out", got, ref, (size_t)on, res);
  }
done:
  free(x), free(got), free(ref);
  clmoe_tensor_destroy(&X), clmoe_tensor_destroy(&O);
  return st;
}

static clmoe_status rd_sum(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_reduce(c, s, r, RD_SUM, CK_SIZE(601, 61), 1003); }
static clmoe_status rd_sum_small(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_reduce(c, s, r, RD_SUM, 1, 7); }
static clmoe_status rd_sumsq(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_reduce(c, s, r, RD_SUMSQ, CK_SIZE(1000, 50), 2001); }
static clmoe_status rd_maxabs(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_reduce(c, s, r, RD_MAXABS, 77, CK_SIZE(5000, 500)); }
static clmoe_status rd_rows(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_reduce(c, s, r, RD_ROWS, 300, 77); }

/* max_abs must report a NaN anywhere in its input. */
static clmoe_status rd_maxabs_nan(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor X = {0}, O = {0};
  float *x = NULL, out = 0.0f;
  const int64_t n = 9000, one = 1;
  CK_ALLOC(x, n);
  for (int64_t i = 0; i < n; i++) x[i] = (float)ck_host_uniform(seed, (uint64_t)i, -1.0, 1.0);
  x[(int64_t)(ck_host_uniform(seed, 99999, 0.0, 0.999) * n)] = NAN;
  CK(clmoe_tensor_create(ctx, &X, F, 1, &n));
  CK(clmoe_tensor_create(ctx, &O, F, 1, &one));
  CK(clmoe_tensor_write(&X, x, (size_t)n * sizeof *x));
  CK(clmoe_max_abs(ctx, &X, &O));
  CK(clmoe_tensor_read(&O, &out, sizeof out));
  res->tolerance = 0.0;
  if (!isnan(out)) {
    res->max_err = 1.0;
    snprintf(res->worst, sizeof res->worst, "max_abs of an input with a NaN returned %g", out);
  }
  const double g = out, want = NAN;
  ck_capture_scaled("max_abs", &g, &want, 1, 1.0, res);
done:
  free(x);
  clmoe_tensor_destroy(&X), clmoe_tensor_destroy(&O);
  return st;
}

const clmoe_check clmoe_checks_reduce[] = {
    {"reduce.sum", "sum of 603k values", rd_sum},
    {"reduce.sum.small", "sum of 7 values", rd_sum_small},
    {"reduce.sumsq", "sum of squares of 2M values", rd_sumsq},
    {"reduce.maxabs", "max |x|", rd_maxabs},
    {"reduce.maxabs.nan", "max |x| propagates NaN", rd_maxabs_nan},
    {"reduce.rows", "column sums of a [300, 77] matrix", rd_rows},
    {NULL, NULL, NULL}};
