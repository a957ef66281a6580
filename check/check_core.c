/* Conformance checks: random fills, dtype conversion, GEMM, pointwise ops, reductions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "ref/reference.h"

#define TOL_F32 1e-5
#define TOL_BF16 1e-2

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

/* ---- GEMM ----
 * A case: sizes, transposes, dtypes, batch (with broadcast of A or B), and a padded
 * leading dimension (C is a column slice of a wider matrix). */
typedef struct gemm_case {
  clmoe_gemm_backend backend;
  int ta, tb;
  int64_t m, n, k, batch;
  int a_batch1, b_batch1; /* A or B broadcast over the batch */
  clmoe_dtype da, db, dc;
  float alpha, beta;
  int pad_c; /* C is a slice of a matrix with 5 extra columns */
} gemm_case;

static clmoe_status check_gemm(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                               const gemm_case *g)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor A = {0}, B = {0}, Cfull = {0}, C = {0};
  double *a = NULL, *b = NULL, *c = NULL, *got = NULL, *ref = NULL;
  int batched = g->batch > 1 || g->a_batch1 || g->b_batch1;
  int64_t ab = g->a_batch1 ? 1 : g->batch, bb = g->b_batch1 ? 1 : g->batch;
  int64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
  int64_t br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
  int64_t cw = g->n + (g->pad_c ? 5 : 0);
  int64_t sa[3] = {ab, ar, ac}, sb[3] = {bb, br, bc}, sc[3] = {g->batch, g->m, cw};
  int off = batched ? 0 : 1; /* 2-D tensors skip the batch dimension */
  CK(ck_uniform(ctx, &A, g->da, 3 - off, sa + off, seed, -1.0f, 1.0f, &a));
  CK(ck_uniform(ctx, &B, g->db, 3 - off, sb + off, seed + 1, -1.0f, 1.0f, &b));
  CK(ck_uniform(ctx, &Cfull, g->dc, 3 - off, sc + off, seed + 2, -1.0f, 1.0f, &c));
  CK(clmoe_tensor_slice(&Cfull, &C, 2 - off, 0, g->n));
  CK(clmoe_gemm_ex(ctx, g->backend, g->ta, g->tb, g->alpha, &A, &B, g->beta, &C));
  CK(ck_read(&Cfull, &got));
  size_t total = (size_t)(g->batch * g->m * cw);
  CK_ALLOC(ref, total);
  memcpy(ref, c, total * sizeof *ref);
  for (int64_t q = 0; q < g->batch; q++)
    ref_gemm(g->ta, g->tb, g->m, g->n, g->k, g->alpha, a + (g->a_batch1 ? 0 : q) * ar * ac, ac,
             b + (g->b_batch1 ? 0 : q) * br * bc, bc, g->beta, ref + q * g->m * cw, cw);
  if (g->dc == CLMOE_BF16) /* the device rounds C to bf16 on store */
    for (size_t i = 0; i < total; i++) ref[i] = clmoe_f32_from_bf16(clmoe_bf16_from_f32((float)ref[i]));
  res->tolerance = g->dc == CLMOE_BF16 ? TOL_BF16 : TOL_F32;
  /* Compared whole: the padding columns must be untouched. */
  ck_compare("C", got, ref, total, res);
done:
  free(a), free(b), free(c), free(got), free(ref);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&Cfull);
  return st;
}

#define F CLMOE_F32
#define H CLMOE_BF16
#define GEMM_CHECK(fname, ...)                                                              \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)               \
  {                                                                                         \
    const gemm_case g = __VA_ARGS__;                                                        \
    return check_gemm(c, s, r, &g);                                                         \
  }
/*                         backend            ta tb  m    n    k  batch a1 b1 da db dc alpha beta pad */
GEMM_CHECK(gemm_clblast_nn, {CLMOE_GEMM_CLBLAST, 0, 0, 67, 45, 83, 1, 0, 0, F, F, F, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_clblast_nt, {CLMOE_GEMM_CLBLAST, 0, 1, 64, 33, 70, 1, 0, 0, F, F, F, 0.5f, 1.0f, 1})
GEMM_CHECK(gemm_clblast_tn, {CLMOE_GEMM_CLBLAST, 1, 0, 31, 64, 19, 1, 0, 0, F, F, F, 1.0f, -0.5f, 0})
GEMM_CHECK(gemm_clblast_tt, {CLMOE_GEMM_CLBLAST, 1, 1, 17, 29, 64, 1, 0, 0, F, F, F, 2.0f, 0.0f, 1})
GEMM_CHECK(gemm_clblast_batched, {CLMOE_GEMM_CLBLAST, 0, 1, 19, 23, 37, 3, 0, 0, F, F, F, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_clblast_bcast, {CLMOE_GEMM_CLBLAST, 0, 0, 21, 16, 35, 4, 0, 1, F, F, F, 1.0f, 1.0f, 0})
GEMM_CHECK(gemm_clblast_bf16, {CLMOE_GEMM_CLBLAST, 0, 1, 40, 24, 56, 1, 0, 0, H, H, F, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_clblast_bf16out, {CLMOE_GEMM_CLBLAST, 0, 0, 33, 20, 48, 1, 0, 0, F, H, H, 1.0f, 1.0f, 0})
GEMM_CHECK(gemm_clblast_k0, {CLMOE_GEMM_CLBLAST, 0, 0, 5, 7, 0, 1, 0, 0, F, F, F, 1.0f, 0.5f, 0})
GEMM_CHECK(gemm_tiled_nn, {CLMOE_GEMM_TILED, 0, 0, 130, 67, 75, 1, 0, 0, F, F, F, 1.0f, 0.0f, 1})
GEMM_CHECK(gemm_tiled_nt, {CLMOE_GEMM_TILED, 0, 1, 64, 64, 64, 1, 0, 0, F, F, F, 1.0f, 1.0f, 0})
GEMM_CHECK(gemm_tiled_tn, {CLMOE_GEMM_TILED, 1, 0, 45, 70, 33, 1, 0, 0, F, F, F, -1.0f, 0.5f, 0})
GEMM_CHECK(gemm_tiled_tt, {CLMOE_GEMM_TILED, 1, 1, 1, 65, 17, 1, 0, 0, F, F, F, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_tiled_batched, {CLMOE_GEMM_TILED, 0, 1, 20, 30, 40, 3, 1, 0, F, F, F, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_tiled_bf16, {CLMOE_GEMM_TILED, 1, 1, 50, 40, 30, 2, 0, 0, H, H, H, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_naive_nn, {CLMOE_GEMM_NAIVE, 0, 0, 23, 19, 41, 1, 0, 0, F, F, F, 1.0f, 0.0f, 1})
GEMM_CHECK(gemm_naive_tt_bf16, {CLMOE_GEMM_NAIVE, 1, 1, 16, 24, 40, 2, 0, 0, H, F, H, 0.5f, 1.0f, 0})
GEMM_CHECK(gemm_auto_nt, {CLMOE_GEMM_AUTO, 0, 1, 48, 36, 24, 1, 0, 0, F, F, F, 1.0f, 0.0f, 0})

/* beta = 0 must ignore C, even when C holds NaN (pool buffers are never cleared). */
static clmoe_status check_gemm_nan_c(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                     clmoe_gemm_backend backend)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor A = {0}, B = {0}, C = {0};
  double *a = NULL, *b = NULL, *got = NULL, *ref = NULL;
  const int64_t m = 24, n = 20, k = 16;
  CK(ck_uniform(ctx, &A, F, 2, (int64_t[]){m, k}, seed, -1.0f, 1.0f, &a));
  CK(ck_uniform(ctx, &B, F, 2, (int64_t[]){k, n}, seed + 1, -1.0f, 1.0f, &b));
  CK(clmoe_tensor_create(ctx, &C, F, 2, (int64_t[]){m, n}));
  CK(clmoe_tensor_fill(&C, NAN));
  CK(clmoe_gemm_ex(ctx, backend, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &B, 0.0f, &C));
  CK(ck_read(&C, &got));
  CK_ALLOC(ref, m * n);
  ref_gemm(0, 0, m, n, k, 1.0, a, k, b, n, 0.0, ref, n);
  res->tolerance = TOL_F32;
  ck_compare("C", got, ref, (size_t)(m * n), res);
done:
  free(a), free(b), free(got), free(ref);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&C);
  return st;
}
static clmoe_status gemm_clblast_nan_c(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_gemm_nan_c(c, s, r, CLMOE_GEMM_CLBLAST); }
static clmoe_status gemm_tiled_nan_c(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_gemm_nan_c(c, s, r, CLMOE_GEMM_TILED); }

/* ---- pointwise ops ---- */
enum { PW_ADD, PW_MUL, PW_SCALE, PW_AXPY, PW_MUL_BWD, PW_SILU, PW_SILU_BWD, PW_SIGMOID, PW_SIGMOID_BWD };

static clmoe_status check_pointwise(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, int op)
{
  clmoe_status st = CLMOE_OK;
  const int64_t shape[3] = {3, 37, 41};
  const size_t n = 3 * 37 * 41;
  clmoe_tensor A = {0}, B = {0}, O = {0}, O2 = {0};
  double *a = NULL, *b = NULL, *got = NULL, *got2 = NULL, *ref = NULL, *ref2 = NULL;
  float alpha = 0.75f;
  CK(ck_uniform(ctx, &A, F, 3, shape, seed, -6.0f, 6.0f, &a));
  CK(ck_uniform(ctx, &B, F, 3, shape, seed + 1, -2.0f, 2.0f, &b));
  CK(clmoe_tensor_create(ctx, &O, F, 3, shape));
  CK(clmoe_tensor_create(ctx, &O2, F, 3, shape));
  CK_ALLOC(ref, n);
  CK_ALLOC(ref2, n);
  switch (op) {
  case PW_ADD: CK(clmoe_add(ctx, &A, &B, &O)); break;
  case PW_MUL: CK(clmoe_mul(ctx, &A, &B, &O)); break;
  case PW_SCALE: CK(clmoe_scale(ctx, alpha, &A, &O)); break;
  case PW_AXPY: CK(clmoe_tensor_copy(&O, &B)); CK(clmoe_axpy(ctx, alpha, &A, &O)); break;
  case PW_MUL_BWD: CK(clmoe_mul_backward(ctx, &B, &A, &A, &O, &O2)); break; /* dout = B, a = b = A */
  case PW_SILU: CK(clmoe_silu(ctx, &A, &O)); break;
  case PW_SILU_BWD: CK(clmoe_silu_backward(ctx, &A, &B, &O)); break;
  case PW_SIGMOID: CK(clmoe_sigmoid(ctx, &A, &O)); break;
  case PW_SIGMOID_BWD: CK(clmoe_sigmoid(ctx, &A, &O2)); CK(clmoe_sigmoid_backward(ctx, &O2, &B, &O)); break;
  }
  for (size_t i = 0; i < n; i++) {
    double s = ref_sigmoid(a[i]);
    switch (op) {
    case PW_ADD: ref[i] = a[i] + b[i]; break;
    case PW_MUL: ref[i] = a[i] * b[i]; break;
    case PW_SCALE: ref[i] = alpha * a[i]; break;
    case PW_AXPY: ref[i] = b[i] + alpha * a[i]; break;
    case PW_MUL_BWD: ref[i] = ref2[i] = b[i] * a[i]; break;
    case PW_SILU: ref[i] = ref_silu(a[i]); break;
    case PW_SILU_BWD: ref[i] = b[i] * ref_silu_grad(a[i]); break;
    case PW_SIGMOID: ref[i] = s; break;
    case PW_SIGMOID_BWD: ref[i] = b[i] * s * (1.0 - s); break;
    }
  }
  CK(ck_read(&O, &got));
  res->tolerance = TOL_F32;
  ck_compare("out", got, ref, n, res);
  if (op == PW_MUL_BWD) {
    CK(ck_read(&O2, &got2));
    ck_compare("db", got2, ref2, n, res);
  }
done:
  free(a), free(b), free(got), free(got2), free(ref), free(ref2);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&O), clmoe_tensor_destroy(&O2);
  return st;
}

#define PW_CHECK(fname, op) \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_pointwise(c, s, r, op); }
PW_CHECK(pw_add, PW_ADD)
PW_CHECK(pw_mul, PW_MUL)
PW_CHECK(pw_scale, PW_SCALE)
PW_CHECK(pw_axpy, PW_AXPY)
PW_CHECK(pw_mul_bwd, PW_MUL_BWD)
PW_CHECK(pw_silu, PW_SILU)
PW_CHECK(pw_silu_bwd, PW_SILU_BWD)
PW_CHECK(pw_sigmoid, PW_SIGMOID)
PW_CHECK(pw_sigmoid_bwd, PW_SIGMOID_BWD)

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

const clmoe_check clmoe_checks_core[] = {
    {"random.uniform.f32", "counter-based uniform fill, bit-exact against the host", random_uniform_f32},
    {"random.normal.f32", "counter-based normal fill, bit-exact against the host", random_normal_f32},
    {"random.normal.bf16", "normal fill into bf16 storage, bit-exact against the host", random_normal_bf16},
    {"convert.bf16", "fp32 -> bf16 -> fp32 round trip against host rounding", convert_bf16},
    {"gemm.clblast.nn", "CLBlast SGEMM, no transposes", gemm_clblast_nn},
    {"gemm.clblast.nt", "CLBlast SGEMM, B transposed, beta 1, padded C", gemm_clblast_nt},
    {"gemm.clblast.tn", "CLBlast SGEMM, A transposed, beta -0.5", gemm_clblast_tn},
    {"gemm.clblast.tt", "CLBlast SGEMM, both transposed, padded C", gemm_clblast_tt},
    {"gemm.clblast.batched", "CLBlast strided-batched SGEMM", gemm_clblast_batched},
    {"gemm.clblast.broadcast", "batched SGEMM with B broadcast over the batch", gemm_clblast_bcast},
    {"gemm.clblast.bf16in", "bf16 A and B converted for CLBlast", gemm_clblast_bf16},
    {"gemm.clblast.bf16out", "bf16 B and C through CLBlast, beta 1", gemm_clblast_bf16out},
    {"gemm.clblast.k0", "k = 0: C = beta C", gemm_clblast_k0},
    {"gemm.clblast.nanc", "beta 0 ignores a C full of NaN", gemm_clblast_nan_c},
    {"gemm.tiled.nn", "tiled kernel, ragged edges, padded C", gemm_tiled_nn},
    {"gemm.tiled.nt", "tiled kernel, B transposed, beta 1", gemm_tiled_nt},
    {"gemm.tiled.tn", "tiled kernel, A transposed", gemm_tiled_tn},
    {"gemm.tiled.tt", "tiled kernel, m = 1, both transposed", gemm_tiled_tt},
    {"gemm.tiled.batched", "tiled kernel, batched with A broadcast", gemm_tiled_batched},
    {"gemm.tiled.bf16", "tiled kernel, all operands bf16", gemm_tiled_bf16},
    {"gemm.tiled.nanc", "tiled kernel, beta 0 ignores NaN in C", gemm_tiled_nan_c},
    {"gemm.naive.nn", "naive kernel, padded C", gemm_naive_nn},
    {"gemm.naive.bf16", "naive kernel, bf16 A and C, batched", gemm_naive_tt_bf16},
    {"gemm.auto.nt", "default backend", gemm_auto_nt},
    {"pointwise.add", "out = a + b", pw_add},
    {"pointwise.mul", "out = a b", pw_mul},
    {"pointwise.scale", "out = alpha x", pw_scale},
    {"pointwise.axpy", "y += alpha x", pw_axpy},
    {"pointwise.mul.backward", "da = dout b, db = dout a", pw_mul_bwd},
    {"pointwise.silu", "x sigmoid(x)", pw_silu},
    {"pointwise.silu.backward", "dy silu'(x)", pw_silu_bwd},
    {"pointwise.sigmoid", "1 / (1 + exp(-x))", pw_sigmoid},
    {"pointwise.sigmoid.backward", "dy y (1 - y)", pw_sigmoid_bwd},
    {"reduce.sum", "sum of 603k values", rd_sum},
    {"reduce.sum.small", "sum of 7 values", rd_sum_small},
    {"reduce.sumsq", "sum of squares of 2M values", rd_sumsq},
    {"reduce.maxabs", "max |x|", rd_maxabs},
    {"reduce.maxabs.nan", "max |x| propagates NaN", rd_maxabs_nan},
    {"reduce.rows", "column sums of a [300, 77] matrix", rd_rows},
    {NULL, NULL, NULL}};
