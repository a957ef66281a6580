/* Conformance checks: RMSNorm, softmax and cross-entropy, forward and backward, against
 * the double-precision references of ref_norm.c; NaN propagation; ignored targets.
 * The bf16 output of RMSNorm (a bf16 step's normed input) against the reference and, bit
 * for bit, against the fp32 output rounded. Shapes cover n = 1, 16, lengths that are not
 * multiples of the 256 lanes, 7168 (a model width), a 163840 vocabulary, and logits of
 * +-100 whose exp overflows fp32 unless the row maximum is subtracted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "ref/reference.h"

#define TOL_F32 1e-5
#define EPS 1e-5f
#define F CLMOE_F32

/* Writes n doubles into an fp32 tensor (rounding each to float). */
static clmoe_status write_doubles(clmoe_tensor *t, const double *v, size_t n)
{
  float *tmp = malloc(n * sizeof *tmp + 1);
  if (!tmp) return CLMOE_ERR_OUT_OF_MEMORY;
  for (size_t i = 0; i < n; i++) tmp[i] = (float)v[i];
  clmoe_status st = clmoe_tensor_write(t, tmp, n * sizeof *tmp);
  free(tmp);
  return st;
}

/* Targets i32 [rows] in [0, vocab), and every `ignore_every`-th row (from row 1) ignored
 * with -1 or -100 (any negative value marks an ignored row). */
static clmoe_status make_targets(clmoe_ctx *ctx, clmoe_tensor *t, int64_t rows, int64_t vocab,
                                 uint64_t seed, int ignore_every, int32_t **host)
{
  int32_t *h = malloc((size_t)rows * sizeof *h + 1);
  *host = h;
  if (!h) return CLMOE_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < rows; i++) {
    int64_t v = (int64_t)ck_host_uniform(seed, (uint64_t)i, 0.0, (double)vocab);
    h[i] = (int32_t)(v >= vocab ? vocab - 1 : v);
    if (ignore_every && i % ignore_every == 1) h[i] = (i / ignore_every) % 2 ? -100 : -1;
  }
  clmoe_status st = clmoe_tensor_create(ctx, t, CLMOE_I32, 1, &rows);
  if (st == CLMOE_OK) st = clmoe_tensor_write(t, h, (size_t)rows * sizeof *h);
  return st;
}

/* ---- RMSNorm ---- */

/* The reference for the saved rstd [rows]: 1 / sqrt(mean(x^2) + eps). */
static void rstd_rows(const double *x, int64_t rows, int64_t n, double *out)
{
  for (int64_t i = 0; i < rows; i++) {
    double ss = 0.0;
    for (int64_t j = 0; j < n; j++) ss += x[i * n + j] * x[i * n + j];
    out[i] = 1.0 / sqrt(ss / (double)n + EPS);
  }
}

static clmoe_status check_rmsnorm(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                  int64_t rows, int64_t n, int with_gain)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor X = {0}, G = {0}, Y = {0}, R = {0};
  double *x = NULL, *g = NULL, *got = NULL, *gotr = NULL, *ref = NULL, *refr = NULL;
  const size_t total = (size_t)(rows * n);
  CK(ck_uniform(ctx, &X, F, 2, (int64_t[]){rows, n}, seed, -2.0f, 2.0f, &x));
  if (with_gain) CK(ck_uniform(ctx, &G, F, 1, &n, seed + 1, 0.5f, 1.5f, &g));
  CK(clmoe_tensor_create(ctx, &Y, F, 2, (int64_t[]){rows, n}));
  CK(clmoe_tensor_create(ctx, &R, F, 1, &rows));
  CK(clmoe_rmsnorm(ctx, &X, with_gain ? &G : NULL, EPS, &Y, &R));
  CK(ck_read(&Y, &got));
  CK(ck_read(&R, &gotr));
  CK_ALLOC(ref, total);
  CK_ALLOC(refr, rows);
  ref_rmsnorm(x, g, rows, n, EPS, ref);
  rstd_rows(x, rows, n, refr);
  res->tolerance = TOL_F32;
  ck_compare("y", got, ref, total, res);
  ck_compare("rstd", gotr, refr, (size_t)rows, res);
done:
  free(x), free(g), free(got), free(gotr), free(ref), free(refr);
  clmoe_tensor_destroy(&X), clmoe_tensor_destroy(&G), clmoe_tensor_destroy(&Y), clmoe_tensor_destroy(&R);
  return st;
}

/* bf16 output: every value within bf16's rounding (2^-8 relative) of the reference, plus fp32's
 * error; and with exact = 1, each bf16 value the fp32 kernel's value rounded to nearest even
 * on the host (tolerance 0): the norm's bf16 output is what a conversion after it gave. */
#define TOL_BF16_OUT 4e-3
static clmoe_status check_rmsnorm_bf16(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                       int64_t rows, int64_t n, int exact)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor X = {0}, G = {0}, Y = {0}, Y32 = {0}, R = {0};
  double *x = NULL, *g = NULL, *got = NULL, *got32 = NULL, *gotr = NULL, *ref = NULL, *refr = NULL;
  const size_t total = (size_t)(rows * n);
  CK(ck_uniform(ctx, &X, F, 2, (int64_t[]){rows, n}, seed, -2.0f, 2.0f, &x));
  CK(ck_uniform(ctx, &G, F, 1, &n, seed + 1, 0.5f, 1.5f, &g));
  CK(clmoe_tensor_create(ctx, &Y, CLMOE_BF16, 2, (int64_t[]){rows, n}));
  CK(clmoe_tensor_create(ctx, &R, F, 1, &rows));
  CK(clmoe_rmsnorm(ctx, &X, &G, EPS, &Y, &R));
  CK(ck_read(&Y, &got));
  if (exact) {
    CK(clmoe_tensor_create(ctx, &Y32, F, 2, (int64_t[]){rows, n}));
    CK(clmoe_rmsnorm(ctx, &X, &G, EPS, &Y32, NULL));
    CK(ck_read(&Y32, &got32));
    for (size_t i = 0; i < total; i++) got32[i] = clmoe_f32_from_bf16(clmoe_bf16_from_f32((float)got32[i]));
    res->tolerance = 0.0;
    ck_compare("y = bf16(fp32 y)", got, got32, total, res);
    goto done;
  }
  CK(ck_read(&R, &gotr));
  CK_ALLOC(ref, total);
  CK_ALLOC(refr, rows);
  ref_rmsnorm(x, g, rows, n, EPS, ref);
  rstd_rows(x, rows, n, refr);
  res->tolerance = TOL_BF16_OUT;
  ck_compare("y (bf16)", got, ref, total, res);
  ck_compare("rstd", gotr, refr, (size_t)rows, res);
done:
  free(x), free(g), free(got), free(got32), free(gotr), free(ref), free(refr);
  clmoe_tensor_destroy(&X), clmoe_tensor_destroy(&G), clmoe_tensor_destroy(&Y);
  clmoe_tensor_destroy(&Y32), clmoe_tensor_destroy(&R);
  return st;
}

/* The device backward (fed the device forward's rstd) against the reference backward. */
static clmoe_status check_rmsnorm_bwd(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                      int64_t rows, int64_t n, int with_gain, int with_dgain)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor X = {0}, G = {0}, Y = {0}, R = {0}, DY = {0}, DX = {0}, DG = {0};
  double *x = NULL, *g = NULL, *dy = NULL, *got = NULL, *gotg = NULL, *ref = NULL, *refg = NULL;
  const size_t total = (size_t)(rows * n);
  const int64_t shape[2] = {rows, n};
  CK(ck_uniform(ctx, &X, F, 2, shape, seed, -2.0f, 2.0f, &x));
  if (with_gain) CK(ck_uniform(ctx, &G, F, 1, &n, seed + 1, 0.5f, 1.5f, &g));
  CK(ck_uniform(ctx, &DY, F, 2, shape, seed + 2, -1.0f, 1.0f, &dy));
  CK(clmoe_tensor_create(ctx, &Y, F, 2, shape));
  CK(clmoe_tensor_create(ctx, &R, F, 1, &rows));
  CK(clmoe_tensor_create(ctx, &DX, F, 2, shape));
  if (with_dgain) CK(clmoe_tensor_create(ctx, &DG, F, 1, &n));
  CK(clmoe_rmsnorm(ctx, &X, with_gain ? &G : NULL, EPS, &Y, &R));
  CK(clmoe_rmsnorm_backward(ctx, &X, with_gain ? &G : NULL, &R, &DY, &DX, with_dgain ? &DG : NULL));
  CK(ck_read(&DX, &got));
  CK_ALLOC(ref, total);
  CK_ALLOC(refg, n);
  ref_rmsnorm_backward(x, g, dy, rows, n, EPS, ref, with_dgain ? refg : NULL);
  res->tolerance = TOL_F32;
  ck_compare("dx", got, ref, total, res);
  if (with_dgain) {
    CK(ck_read(&DG, &gotg));
    ck_compare("dgain", gotg, refg, (size_t)n, res);
  }
done:
  free(x), free(g), free(dy), free(got), free(gotg), free(ref), free(refg);
  clmoe_tensor_destroy(&X), clmoe_tensor_destroy(&G), clmoe_tensor_destroy(&Y);
  clmoe_tensor_destroy(&R), clmoe_tensor_destroy(&DY), clmoe_tensor_destroy(&DX);
  clmoe_tensor_destroy(&DG);
  return st;
}

/* ---- softmax ---- */

static clmoe_status check_softmax(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                  int64_t rows, int64_t n, float lo, float hi)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor X = {0}, Y = {0};
  double *x = NULL, *got = NULL, *ref = NULL;
  const size_t total = (size_t)(rows * n);
  CK(ck_uniform(ctx, &X, F, 2, (int64_t[]){rows, n}, seed, lo, hi, &x));
  CK(clmoe_tensor_create(ctx, &Y, F, 2, (int64_t[]){rows, n}));
  CK(clmoe_softmax(ctx, &X, &Y));
  CK(ck_read(&Y, &got));
  CK_ALLOC(ref, total);
  ref_softmax(x, rows, n, ref);
  res->tolerance = TOL_F32;
  ck_compare("y", got, ref, total, res);
done:
  free(x), free(got), free(ref);
  clmoe_tensor_destroy(&X), clmoe_tensor_destroy(&Y);
  return st;
}

/* The reference backward is fed the device forward's y, as the device backward is. */
static clmoe_status check_softmax_bwd(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                      int64_t rows, int64_t n)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor X = {0}, Y = {0}, DY = {0}, DX = {0};
  double *x = NULL, *y = NULL, *dy = NULL, *got = NULL, *ref = NULL;
  const size_t total = (size_t)(rows * n);
  const int64_t shape[2] = {rows, n};
  CK(ck_uniform(ctx, &X, F, 2, shape, seed, -4.0f, 4.0f, &x));
  CK(ck_uniform(ctx, &DY, F, 2, shape, seed + 1, -1.0f, 1.0f, &dy));
  CK(clmoe_tensor_create(ctx, &Y, F, 2, shape));
  CK(clmoe_tensor_create(ctx, &DX, F, 2, shape));
  CK(clmoe_softmax(ctx, &X, &Y));
  CK(clmoe_softmax_backward(ctx, &Y, &DY, &DX));
  CK(ck_read(&Y, &y));
  CK(ck_read(&DX, &got));
  CK_ALLOC(ref, total);
  ref_softmax_backward(y, dy, rows, n, ref);
  res->tolerance = TOL_F32;
  ck_compare("dx", got, ref, total, res);
done:
  free(x), free(y), free(dy), free(got), free(ref);
  clmoe_tensor_destroy(&X), clmoe_tensor_destroy(&Y), clmoe_tensor_destroy(&DY), clmoe_tensor_destroy(&DX);
  return st;
}

/* ---- cross-entropy ---- */

/* logsumexp of each row: the reference for the saved lse. */
static void lse_rows(const double *x, int64_t rows, int64_t v, double *out)
{
  for (int64_t i = 0; i < rows; i++) {
    const double *xr = x + i * v;
    double m = xr[0], s = 0.0;
    for (int64_t j = 1; j < v; j++) m = xr[j] > m || isnan(xr[j]) ? xr[j] : m;
    for (int64_t j = 0; j < v; j++) s += exp(xr[j] - m);
    out[i] = m + log(s);
  }
}

/* Ignored rows must be exactly zero (loss and gradient), not merely small. */
static void want_zero_rows(const char *what, const double *got, const int32_t *t, int64_t rows,
                           int64_t width, clmoe_check_result *res)
{
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; t[i] < 0 && j < width; j++)
      if (got[i * width + j] != 0.0) {
        res->max_err = INFINITY;
        snprintf(res->worst, sizeof res->worst, "%s[%lld, %lld] = %.9g in an ignored row", what,
                 (long long)i, (long long)j, got[i * width + j]);
        return;
      }
}

/* Forward (loss, lse) and, when bwd, backward with scale 1 / counted rows. */
static clmoe_status check_xent(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                               int64_t rows, int64_t v, float lo, float hi, int bwd,
                               int ignore_every)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor L = {0}, T = {0}, LOSS = {0}, LSE = {0}, DL = {0};
  double *x = NULL, *got = NULL, *gotl = NULL, *ref = NULL, *refl = NULL;
  int32_t *t = NULL;
  const size_t total = (size_t)(rows * v);
  CK(ck_uniform(ctx, &L, F, 2, (int64_t[]){rows, v}, seed, lo, hi, &x));
  CK(make_targets(ctx, &T, rows, v, seed + 1, ignore_every, &t));
  CK(clmoe_tensor_create(ctx, &LOSS, F, 1, &rows));
  CK(clmoe_tensor_create(ctx, &LSE, F, 1, &rows));
  CK(clmoe_cross_entropy(ctx, &L, &T, &LOSS, &LSE));
  CK(ck_read(&LOSS, &got));
  CK(ck_read(&LSE, &gotl));
  CK_ALLOC(ref, bwd ? total : (size_t)rows);
  CK_ALLOC(refl, rows);
  ref_cross_entropy(x, t, rows, v, ref);
  lse_rows(x, rows, v, refl);
  res->tolerance = TOL_F32;
  ck_compare("loss", got, ref, (size_t)rows, res);
  ck_compare("lse", gotl, refl, (size_t)rows, res);
  want_zero_rows("loss", got, t, rows, 1, res);
  if (bwd) {
    int64_t counted = 0;
    for (int64_t i = 0; i < rows; i++) counted += t[i] >= 0;
    double scale = 1.0 / (double)(counted ? counted : 1);
    CK(clmoe_tensor_create(ctx, &DL, F, 2, (int64_t[]){rows, v}));
    CK(clmoe_cross_entropy_backward(ctx, &L, &T, &LSE, (float)scale, &DL));
    free(got);
    got = NULL;
    CK(ck_read(&DL, &got));
    ref_cross_entropy_backward(x, t, rows, v, (float)scale, ref);
    ck_compare("dlogits", got, ref, total, res);
    want_zero_rows("dlogits", got, t, rows, v, res);
  }
done:
  free(x), free(got), free(gotl), free(ref), free(refl), free(t);
  clmoe_tensor_destroy(&L), clmoe_tensor_destroy(&T), clmoe_tensor_destroy(&LOSS);
  clmoe_tensor_destroy(&LSE), clmoe_tensor_destroy(&DL);
  return st;
}

/* ---- NaN propagation: one NaN in row 1 makes all of row 1 NaN, other rows stay right ---- */
enum { NAN_RMSNORM, NAN_SOFTMAX, NAN_XENT };

/* Every value of row 1 of got [rows, width] must be NaN; the rest must match ref. */
static void want_nan_row(const char *what, const double *got, const double *ref, int64_t rows,
                         int64_t width, clmoe_check_result *res)
{
  for (int64_t j = 0; j < width; j++)
    if (!isnan(got[width + j])) {
      res->max_err = INFINITY;
      snprintf(res->worst, sizeof res->worst, "%s[1, %lld] = %.9g, expected NaN (a NaN is in row 1)",
               what, (long long)j, got[width + j]);
      return;
    }
  ck_compare(what, got, ref, (size_t)(rows * width), res); /* ref is NaN in row 1 too */
}

static clmoe_status check_nan(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, int op)
{
  clmoe_status st = CLMOE_OK;
  const int64_t rows = 4, n = 300, shape[2] = {rows, n};
  clmoe_tensor X = {0}, G = {0}, Y = {0}, R = {0}, LSE = {0}, T = {0};
  double *x = NULL, *g = NULL, *got = NULL, *gotr = NULL, *ref = NULL, *refr = NULL;
  int32_t *t = NULL;
  CK(ck_uniform(ctx, &X, F, 2, shape, seed, -3.0f, 3.0f, &x));
  x[n + (int64_t)ck_host_uniform(seed, 7, 0.0, (double)n - 1)] = NAN;
  CK(write_doubles(&X, x, (size_t)(rows * n)));
  CK_ALLOC(ref, rows * n);
  CK_ALLOC(refr, rows);
  CK(clmoe_tensor_create(ctx, &Y, F, 2, shape)); /* y, or dlogits */
  CK(clmoe_tensor_create(ctx, &R, F, 1, &rows)); /* rstd, or loss */
  res->tolerance = TOL_F32;
  if (op == NAN_RMSNORM) {
    CK(ck_uniform(ctx, &G, F, 1, &n, seed + 1, 0.5f, 1.5f, &g));
    CK(clmoe_rmsnorm(ctx, &X, &G, EPS, &Y, &R));
    ref_rmsnorm(x, g, rows, n, EPS, ref);
    rstd_rows(x, rows, n, refr);
  } else if (op == NAN_SOFTMAX) {
    CK(clmoe_softmax(ctx, &X, &Y));
    ref_softmax(x, rows, n, ref);
  } else {
    CK(make_targets(ctx, &T, rows, n, seed + 2, 0, &t));
    CK(clmoe_tensor_create(ctx, &LSE, F, 1, &rows));
    CK(clmoe_cross_entropy(ctx, &X, &T, &R, &LSE));
    CK(clmoe_cross_entropy_backward(ctx, &X, &T, &LSE, 0.25f, &Y));
    ref_cross_entropy(x, t, rows, n, refr);
    ref_cross_entropy_backward(x, t, rows, n, 0.25, ref);
  }
  CK(ck_read(&Y, &got));
  want_nan_row(op == NAN_XENT ? "dlogits" : "y", got, ref, rows, n, res);
  if (op != NAN_SOFTMAX) {
    CK(ck_read(&R, &gotr));
    want_nan_row(op == NAN_XENT ? "loss" : "rstd", gotr, refr, rows, 1, res);
  }
done:
  free(x), free(g), free(got), free(gotr), free(ref), free(refr), free(t);
  clmoe_tensor_destroy(&X), clmoe_tensor_destroy(&G), clmoe_tensor_destroy(&Y);
  clmoe_tensor_destroy(&R), clmoe_tensor_destroy(&LSE), clmoe_tensor_destroy(&T);
  return st;
}

#define CHECK_FN(fname, call) \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return call; }
/*                                         rows   n  gain */
CHECK_FN(rms_fwd, check_rmsnorm(c, s, r, 37, 1000, 1))
CHECK_FN(rms_fwd_nogain, check_rmsnorm(c, s, r, 64, 300, 0))
CHECK_FN(rms_fwd_small, check_rmsnorm(c, s, r, 200, 16, 1))
CHECK_FN(rms_fwd_wide, check_rmsnorm(c, s, r, 4, 7168, 1))
CHECK_FN(rms_fwd_n1, check_rmsnorm(c, s, r, 13, 1, 1))
/*                                                rows     n  exact */
CHECK_FN(rms_fwd_bf16, check_rmsnorm_bf16(c, s, r, 37, 1000, 0))
CHECK_FN(rms_fwd_bf16_wide, check_rmsnorm_bf16(c, s, r, 4, 7168, 0))
CHECK_FN(rms_fwd_bf16_bits, check_rmsnorm_bf16(c, s, r, 64, 300, 1))
/*                                             rows   n  gain dgain */
CHECK_FN(rms_bwd, check_rmsnorm_bwd(c, s, r, 150, 333, 1, 1))
CHECK_FN(rms_bwd_nogain, check_rmsnorm_bwd(c, s, r, 70, 257, 0, 1))
CHECK_FN(rms_bwd_nodgain, check_rmsnorm_bwd(c, s, r, 40, 100, 1, 0))
CHECK_FN(rms_bwd_small, check_rmsnorm_bwd(c, s, r, 300, 16, 1, 1))
CHECK_FN(rms_bwd_wide, check_rmsnorm_bwd(c, s, r, 3, 7168, 1, 1))
CHECK_FN(rms_nan, check_nan(c, s, r, NAN_RMSNORM))
/*                                         rows   n     lo       hi */
CHECK_FN(sm_fwd, check_softmax(c, s, r, 37, 1000, -5.0f, 5.0f))
CHECK_FN(sm_fwd_small, check_softmax(c, s, r, 500, 16, -5.0f, 5.0f))
CHECK_FN(sm_fwd_wide, check_softmax(c, s, r, 3, 7168, -5.0f, 5.0f))
CHECK_FN(sm_fwd_large, check_softmax(c, s, r, 16, 1000, -100.0f, 100.0f))
CHECK_FN(sm_fwd_n1, check_softmax(c, s, r, 7, 1, -5.0f, 5.0f))
CHECK_FN(sm_bwd, check_softmax_bwd(c, s, r, 37, 1000))
CHECK_FN(sm_bwd_small, check_softmax_bwd(c, s, r, 300, 16))
CHECK_FN(sm_bwd_wide, check_softmax_bwd(c, s, r, 2, 7168))
CHECK_FN(sm_nan, check_nan(c, s, r, NAN_SOFTMAX))
/*                                   rows      V     lo       hi    bwd ignore */
CHECK_FN(xe_fwd, check_xent(c, s, r, 37, 1000, -5.0f, 5.0f, 0, 0))
CHECK_FN(xe_fwd_small, check_xent(c, s, r, 64, 16, -5.0f, 5.0f, 0, 0))
CHECK_FN(xe_fwd_large, check_xent(c, s, r, 16, 1000, -100.0f, 100.0f, 0, 0))
CHECK_FN(xe_fwd_vocab, check_xent(c, s, r, 3, 163840, -20.0f, 20.0f, 0, 0))
CHECK_FN(xe_bwd, check_xent(c, s, r, 37, 1000, -5.0f, 5.0f, 1, 0))
CHECK_FN(xe_bwd_small, check_xent(c, s, r, 64, 16, -5.0f, 5.0f, 1, 0))
CHECK_FN(xe_bwd_large, check_xent(c, s, r, 16, 1000, -100.0f, 100.0f, 1, 0))
CHECK_FN(xe_bwd_vocab, check_xent(c, s, r, 3, 163840, -20.0f, 20.0f, 1, 0))
CHECK_FN(xe_bwd_ragged, check_xent(c, s, r, 6, 9001, -5.0f, 5.0f, 1, 4))
CHECK_FN(xe_ignore, check_xent(c, s, r, 20, 500, -5.0f, 5.0f, 1, 2))
CHECK_FN(xe_nan, check_nan(c, s, r, NAN_XENT))

const clmoe_check clmoe_checks_norm[] = {
    {"rmsnorm.forward", "RMSNorm [37, 1000] with gain: y and rstd", rms_fwd},
    {"rmsnorm.forward.nogain", "RMSNorm [64, 300] without gain", rms_fwd_nogain},
    {"rmsnorm.forward.small", "RMSNorm rows of 16", rms_fwd_small},
    {"rmsnorm.forward.wide", "RMSNorm rows of 7168", rms_fwd_wide},
    {"rmsnorm.forward.n1", "RMSNorm rows of 1", rms_fwd_n1},
    {"rmsnorm.forward.bf16", "RMSNorm [37, 1000] with a bf16 output: y and rstd", rms_fwd_bf16},
    {"rmsnorm.forward.bf16.wide", "RMSNorm rows of 7168, bf16 output", rms_fwd_bf16_wide},
    {"rmsnorm.forward.bf16.bits", "RMSNorm's bf16 output is its fp32 output rounded to nearest even", rms_fwd_bf16_bits},
    {"rmsnorm.backward", "RMSNorm backward [150, 333]: dx and dgain over 3 row chunks", rms_bwd},
    {"rmsnorm.backward.nogain", "RMSNorm backward without gain (dgain for a gain of ones)", rms_bwd_nogain},
    {"rmsnorm.backward.nodgain", "RMSNorm backward, dgain NULL", rms_bwd_nodgain},
    {"rmsnorm.backward.small", "RMSNorm backward rows of 16, dgain over 5 chunks", rms_bwd_small},
    {"rmsnorm.backward.wide", "RMSNorm backward rows of 7168", rms_bwd_wide},
    {"rmsnorm.nan", "a NaN in a row makes that row's y and rstd NaN", rms_nan},
    {"softmax.forward", "softmax [37, 1000]", sm_fwd},
    {"softmax.forward.small", "softmax rows of 16", sm_fwd_small},
    {"softmax.forward.wide", "softmax rows of 7168", sm_fwd_wide},
    {"softmax.forward.large", "softmax of +-100 (exp overflows without the max)", sm_fwd_large},
    {"softmax.forward.n1", "softmax rows of 1", sm_fwd_n1},
    {"softmax.backward", "softmax backward [37, 1000]", sm_bwd},
    {"softmax.backward.small", "softmax backward rows of 16", sm_bwd_small},
    {"softmax.backward.wide", "softmax backward rows of 7168", sm_bwd_wide},
    {"softmax.nan", "a NaN in a row makes that row's softmax NaN", sm_nan},
    {"xent.forward", "cross-entropy [37, 1000]: loss and lse", xe_fwd},
    {"xent.forward.small", "cross-entropy, vocabulary 16", xe_fwd_small},
    {"xent.forward.large", "cross-entropy of +-100 logits", xe_fwd_large},
    {"xent.forward.vocab", "cross-entropy, vocabulary 163840", xe_fwd_vocab},
    {"xent.backward", "cross-entropy backward [37, 1000], mean scale", xe_bwd},
    {"xent.backward.small", "cross-entropy backward, vocabulary 16", xe_bwd_small},
    {"xent.backward.large", "cross-entropy backward of +-100 logits", xe_bwd_large},
    {"xent.backward.vocab", "cross-entropy backward, vocabulary 163840", xe_bwd_vocab},
    {"xent.backward.ragged", "cross-entropy backward, vocabulary 9001 (a partial column tile)", xe_bwd_ragged},
    {"xent.ignore", "negative targets: loss 0 and zero gradient rows", xe_ignore},
    {"xent.nan", "a NaN logit makes that row's loss and gradient NaN", xe_nan},
    {NULL, NULL, NULL}};
