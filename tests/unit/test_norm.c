/* CUnit suite for RMSNorm, softmax and cross-entropy.
 *
 * 1. The references' backwards against central finite differences of the references'
 *    forwards (double precision), so the conformance checks compare the device with a
 *    gradient that is itself checked.
 * 2. Every conformance check named rmsnorm.*, softmax.*, xent.* (device vs reference).
 * 3. Argument errors: bad shapes give CLMOE_ERR_SHAPE, bad values
 *    CLMOE_ERR_INVALID_ARGUMENT (out-of-range targets included).
 * 4. Same bits on a repeated run, in place, and through views with an offset. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/ref/reference.h"
#include "test_common.h"

#define FD_H 1e-5   /* central-difference step: truncation ~h^2, rounding ~1e-16/h */
#define FD_TOL 1e-6 /* relative to |analytic| + rms(analytic), as ck_compare measures */

/* ---- 1. finite differences of the references ---- */

/* Worst |num - ana| / (|ana| + rms(ana)) over n values. */
static double grad_err(const double *num, const double *ana, int n)
{
  double ss = 0.0, worst = 0.0;
  for (int i = 0; i < n; i++) ss += ana[i] * ana[i];
  double rms = sqrt(ss / n) + 1e-300;
  for (int i = 0; i < n; i++) {
    double e = fabs(num[i] - ana[i]) / (fabs(ana[i]) + rms);
    if (!(e <= worst)) worst = e; /* a NaN becomes the worst */
  }
  return worst;
}

static void host_uniform(double *v, int n, uint64_t seed, double lo, double hi)
{
  for (int i = 0; i < n; i++) v[i] = ck_host_uniform(seed, (uint64_t)i, lo, hi);
}

enum { FD_RMS_X, FD_RMS_GAIN, FD_SOFTMAX, FD_XENT };
#define FD_ROWS 3
#define FD_N 7
#define FD_EPS 1e-3
#define FD_SCALE 0.37

/* The scalar whose gradient the backwards compute: sum(dy * forward(x)) for RMSNorm and
 * softmax, sum of FD_SCALE * loss for cross-entropy. p is x (or the gain for FD_RMS_GAIN). */
static double fd_loss(int which, const double *x, const double *gain, const double *dy,
                      const int32_t *t)
{
  double y[FD_ROWS * FD_N], s = 0.0;
  int count = FD_ROWS * FD_N;
  switch (which) {
  case FD_RMS_X:
  case FD_RMS_GAIN: ref_rmsnorm(x, gain, FD_ROWS, FD_N, FD_EPS, y); break;
  case FD_SOFTMAX: ref_softmax(x, FD_ROWS, FD_N, y); break;
  default:
    ref_cross_entropy(x, t, FD_ROWS, FD_N, y);
    for (int i = 0; i < FD_ROWS; i++) s += FD_SCALE * y[i];
    return s;
  }
  for (int i = 0; i < count; i++) s += dy[i] * y[i];
  return s;
}

/* Numerical gradient with respect to p (x or gain, n values), then the worst error. */
static double fd_check(int which, int with_gain)
{
  double x[FD_ROWS * FD_N], g[FD_N], dy[FD_ROWS * FD_N], y[FD_ROWS * FD_N];
  double ana[FD_ROWS * FD_N], dgain[FD_N], num[FD_ROWS * FD_N];
  const int32_t t[FD_ROWS] = {2, -1, 6}; /* row 1 ignored: its gradient must be 0 */
  host_uniform(x, FD_ROWS * FD_N, 11, -2.0, 2.0);
  host_uniform(g, FD_N, 12, 0.5, 1.5);
  host_uniform(dy, FD_ROWS * FD_N, 13, -1.0, 1.0);
  const double *gp = with_gain ? g : NULL;
  switch (which) {
  case FD_RMS_X:
  case FD_RMS_GAIN: ref_rmsnorm_backward(x, gp, dy, FD_ROWS, FD_N, FD_EPS, ana, dgain); break;
  case FD_SOFTMAX:
    ref_softmax(x, FD_ROWS, FD_N, y);
    ref_softmax_backward(y, dy, FD_ROWS, FD_N, ana);
    break;
  default: ref_cross_entropy_backward(x, t, FD_ROWS, FD_N, FD_SCALE, ana); break;
  }
  /* Without a gain, dgain is the gradient at a gain of ones: perturb a ones vector. */
  double ones[FD_N];
  for (int j = 0; j < FD_N; j++) ones[j] = 1.0;
  double *p = which == FD_RMS_GAIN ? (with_gain ? g : ones) : x;
  int n = which == FD_RMS_GAIN ? FD_N : FD_ROWS * FD_N;
  const double *gl = which == FD_RMS_GAIN ? p : gp;
  for (int k = 0; k < n; k++) {
    double keep = p[k];
    p[k] = keep + FD_H;
    double up = fd_loss(which, x, gl, dy, t);
    p[k] = keep - FD_H;
    double down = fd_loss(which, x, gl, dy, t);
    p[k] = keep;
    num[k] = (up - down) / (2.0 * FD_H);
  }
  return grad_err(num, which == FD_RMS_GAIN ? dgain : ana, n);
}

static void expect_fd(const char *what, double err)
{
  if (!(err <= FD_TOL)) fprintf(stderr, "\n  %s: finite-difference error %.3g > %.3g\n", what, err, FD_TOL);
  CU_ASSERT(err <= FD_TOL);
}

static void test_fd_rmsnorm(void)
{
  expect_fd("rmsnorm dx", fd_check(FD_RMS_X, 1));
  expect_fd("rmsnorm dgain", fd_check(FD_RMS_GAIN, 1));
  expect_fd("rmsnorm dx (no gain)", fd_check(FD_RMS_X, 0));
  expect_fd("rmsnorm dgain (no gain)", fd_check(FD_RMS_GAIN, 0));
}

static void test_fd_softmax(void) { expect_fd("softmax dx", fd_check(FD_SOFTMAX, 0)); }
static void test_fd_xent(void) { expect_fd("cross-entropy dlogits", fd_check(FD_XENT, 0)); }

/* The comparison itself must catch a wrong gradient (the tests can fail). */
static void test_fd_detects_error(void)
{
  double a[4] = {1.0, -2.0, 0.5, 3.0}, b[4] = {1.0, -2.0, 0.5, 3.0 * (1.0 + 1e-5)};
  CU_ASSERT(grad_err(b, a, 4) > FD_TOL);
  CU_ASSERT(grad_err(a, a, 4) == 0.0);
}

/* ---- 3. argument errors ---- */

#define T2(t, dt, a, b) TEST_OK(clmoe_tensor_create(test_ctx, &(t), dt, 2, (int64_t[]){a, b}))
#define T1(t, dt, a) TEST_OK(clmoe_tensor_create(test_ctx, &(t), dt, 1, (int64_t[]){a}))

static void test_rmsnorm_errors(void)
{
  clmoe_tensor x = {0}, y = {0}, y9 = {0}, g = {0}, g7 = {0}, r = {0}, r3 = {0}, xh = {0};
  clmoe_ctx *c = test_ctx;
  T2(x, CLMOE_F32, 4, 8); T2(y, CLMOE_F32, 4, 8); T2(y9, CLMOE_F32, 4, 9);
  T1(g, CLMOE_F32, 8); T1(g7, CLMOE_F32, 7); T1(r, CLMOE_F32, 4); T1(r3, CLMOE_F32, 3);
  T2(xh, CLMOE_BF16, 4, 8);
  CU_ASSERT_EQUAL(clmoe_rmsnorm(c, &x, &g, 1e-5f, &y9, &r), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_rmsnorm(c, &x, &g7, 1e-5f, &y, &r), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_rmsnorm(c, &x, &g, 1e-5f, &y, &r3), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_rmsnorm(c, &xh, &g, 1e-5f, &y, &r), CLMOE_ERR_SHAPE); /* bf16 */
  CU_ASSERT_EQUAL(clmoe_rmsnorm(c, &x, &g, -1.0f, &y, &r), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_rmsnorm(c, &x, &g, NAN, &y, &r), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_rmsnorm(c, NULL, &g, 1e-5f, &y, &r), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_rmsnorm_backward(c, &x, &g, &r, &y9, &y, NULL), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_rmsnorm_backward(c, &x, &g, &r, &y, &y9, NULL), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_rmsnorm_backward(c, &x, &g, &r3, &y, &y, NULL), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_rmsnorm_backward(c, &x, &g, &r, &y, &y, &g7), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_rmsnorm_backward(c, &x, &g, NULL, &y, &y, &g), CLMOE_ERR_INVALID_ARGUMENT);
  /* The valid call works, so the errors above come from the argument changed. */
  TEST_OK(clmoe_tensor_fill(&x, 0.5));
  TEST_OK(clmoe_tensor_fill(&g, 1.0));
  TEST_OK(clmoe_rmsnorm(c, &x, &g, 1e-5f, &y, &r));
  TEST_OK(clmoe_rmsnorm_backward(c, &x, &g, &r, &y, &y, NULL));
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&y9);
  clmoe_tensor_destroy(&g), clmoe_tensor_destroy(&g7), clmoe_tensor_destroy(&r);
  clmoe_tensor_destroy(&r3), clmoe_tensor_destroy(&xh);
}

static void test_softmax_errors(void)
{
  clmoe_tensor x = {0}, y = {0}, y9 = {0}, yh = {0};
  clmoe_ctx *c = test_ctx;
  T2(x, CLMOE_F32, 4, 8); T2(y, CLMOE_F32, 4, 8); T2(y9, CLMOE_F32, 4, 9);
  T2(yh, CLMOE_BF16, 4, 8);
  CU_ASSERT_EQUAL(clmoe_softmax(c, &x, &y9), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_softmax(c, &x, &yh), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_softmax_backward(c, &y, &y9, &x), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_softmax_backward(c, &y, &x, &y9), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_softmax_backward(c, &y, &x, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  TEST_OK(clmoe_tensor_fill(&x, 0.5));
  TEST_OK(clmoe_softmax(c, &x, &y));
  TEST_OK(clmoe_softmax_backward(c, &y, &x, &x));
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&y9);
  clmoe_tensor_destroy(&yh);
}

static void test_xent_errors(void)
{
  clmoe_tensor l = {0}, l0 = {0}, t = {0}, t3 = {0}, tf = {0}, loss = {0}, loss5 = {0}, d9 = {0};
  clmoe_ctx *c = test_ctx;
  T2(l, CLMOE_F32, 4, 8); T2(l0, CLMOE_F32, 4, 0); T2(d9, CLMOE_F32, 4, 9);
  T1(t, CLMOE_I32, 4); T1(t3, CLMOE_I32, 3); T1(tf, CLMOE_F32, 4);
  T1(loss, CLMOE_F32, 4); T1(loss5, CLMOE_F32, 5);
  TEST_OK(clmoe_tensor_fill(&t, 1.0));
  TEST_OK(clmoe_tensor_fill(&l, 0.0));
  CU_ASSERT_EQUAL(clmoe_cross_entropy(c, &l, &t3, &loss, NULL), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_cross_entropy(c, &l, &tf, &loss, NULL), CLMOE_ERR_SHAPE); /* f32 ids */
  CU_ASSERT_EQUAL(clmoe_cross_entropy(c, &l, &t, &loss5, NULL), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_cross_entropy(c, &l, &t, &loss, &loss5), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_cross_entropy(c, &l0, &t, &loss, NULL), CLMOE_ERR_SHAPE); /* V = 0 */
  CU_ASSERT_EQUAL(clmoe_cross_entropy_backward(c, &l, &t, &loss, 1.0f, &d9), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_cross_entropy_backward(c, &l, &t, &loss5, 1.0f, &l), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_cross_entropy_backward(c, &l, &t, NULL, 1.0f, &l), CLMOE_ERR_INVALID_ARGUMENT);
  TEST_OK(clmoe_cross_entropy(c, &l, &t, &loss, NULL));
  float got[4];
  TEST_OK(clmoe_tensor_read_f32(&loss, got));
  CU_ASSERT_DOUBLE_EQUAL(got[0], log(8.0), 1e-6); /* uniform logits: loss = log V */
  clmoe_tensor_destroy(&l), clmoe_tensor_destroy(&l0), clmoe_tensor_destroy(&d9);
  clmoe_tensor_destroy(&t), clmoe_tensor_destroy(&t3), clmoe_tensor_destroy(&tf);
  clmoe_tensor_destroy(&loss), clmoe_tensor_destroy(&loss5);
}

/* A target >= V is an error from both directions, names the row, and is never read:
 * the row's loss is NaN, other rows are computed. */
static void test_xent_bad_target(void)
{
  clmoe_tensor l = {0}, t = {0}, loss = {0}, lse = {0}, d = {0};
  const int32_t bad[2][4] = {{0, 5, 8, 2}, {3, -1, 7, 2147483647}};
  const char *row[2] = {"row 2", "row 3"};
  T2(l, CLMOE_F32, 4, 8); T2(d, CLMOE_F32, 4, 8); T1(t, CLMOE_I32, 4);
  T1(loss, CLMOE_F32, 4); T1(lse, CLMOE_F32, 4);
  TEST_OK(clmoe_tensor_fill_uniform(&l, 5, -1.0f, 1.0f));
  for (int k = 0; k < 2; k++) {
    TEST_OK(clmoe_tensor_write(&t, bad[k], sizeof bad[k]));
    CU_ASSERT_EQUAL(clmoe_cross_entropy(test_ctx, &l, &t, &loss, &lse), CLMOE_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), row[k]));
    float got[4];
    TEST_OK(clmoe_tensor_read_f32(&loss, got));
    CU_ASSERT(isnan(got[k == 0 ? 2 : 3]));
    CU_ASSERT(isfinite(got[0]) && got[0] > 0.0f);
    CU_ASSERT(k == 0 || got[1] == 0.0f); /* ignored row */
    CU_ASSERT_EQUAL(clmoe_cross_entropy_backward(test_ctx, &l, &t, &lse, 1.0f, &d),
                    CLMOE_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), row[k]));
  }
  clmoe_tensor_destroy(&l), clmoe_tensor_destroy(&d), clmoe_tensor_destroy(&t);
  clmoe_tensor_destroy(&loss), clmoe_tensor_destroy(&lse);
}

/* ---- 4. same bits: repeated, in place, and through offset views ---- */

static int same_bits(const clmoe_tensor *a, const clmoe_tensor *b)
{
  size_t bytes = clmoe_tensor_bytes(a);
  char *x = malloc(bytes + 1), *y = malloc(bytes + 1);
  int same = x && y && bytes == clmoe_tensor_bytes(b) && clmoe_tensor_read(a, x, bytes) == CLMOE_OK &&
             clmoe_tensor_read(b, y, bytes) == CLMOE_OK && !memcmp(x, y, bytes);
  free(x), free(y);
  return same;
}

static void test_same_bits(void)
{
  enum { R = 5, N = 3001, PAD = 3 };
  clmoe_ctx *c = test_ctx;
  clmoe_tensor big = {0}, x = {0}, xv = {0}, g = {0}, y1 = {0}, y2 = {0}, r = {0}, dg1 = {0},
               dg2 = {0}, t = {0}, loss1 = {0}, loss2 = {0}, lse = {0};
  const int32_t tgt[R] = {0, 3000, -1, 17, 1234};
  TEST_OK(clmoe_tensor_create(c, &big, CLMOE_F32, 1, (int64_t[]){R * N + PAD}));
  TEST_OK(clmoe_tensor_fill_uniform(&big, 77, -3.0f, 3.0f));
  TEST_OK(clmoe_tensor_view(&big, &xv, 2, (int64_t[]){R, N}, PAD)); /* offset PAD */
  T2(x, CLMOE_F32, R, N); T2(y1, CLMOE_F32, R, N); T2(y2, CLMOE_F32, R, N);
  T1(g, CLMOE_F32, N); T1(r, CLMOE_F32, R); T1(dg1, CLMOE_F32, N); T1(dg2, CLMOE_F32, N);
  T1(t, CLMOE_I32, R); T1(loss1, CLMOE_F32, R); T1(loss2, CLMOE_F32, R); T1(lse, CLMOE_F32, R);
  TEST_OK(clmoe_tensor_copy(&x, &xv));
  TEST_OK(clmoe_tensor_fill_uniform(&g, 78, 0.5f, 1.5f));
  TEST_OK(clmoe_tensor_write(&t, tgt, sizeof tgt));
  /* RMSNorm: offset input vs plain input, then in place; backward twice (dgain too). */
  TEST_OK(clmoe_rmsnorm(c, &xv, &g, 1e-5f, &y1, &r));
  TEST_OK(clmoe_rmsnorm(c, &x, &g, 1e-5f, &y2, &r));
  CU_ASSERT(same_bits(&y1, &y2));
  TEST_OK(clmoe_rmsnorm_backward(c, &x, &g, &r, &x, &y1, &dg1));
  TEST_OK(clmoe_rmsnorm_backward(c, &x, &g, &r, &x, &y2, &dg2));
  CU_ASSERT(same_bits(&y1, &y2));
  CU_ASSERT(same_bits(&dg1, &dg2));
  TEST_OK(clmoe_tensor_copy(&y2, &x));
  TEST_OK(clmoe_rmsnorm(c, &y2, &g, 1e-5f, &y2, &r)); /* in place */
  TEST_OK(clmoe_rmsnorm(c, &x, &g, 1e-5f, &y1, &r));
  CU_ASSERT(same_bits(&y1, &y2));
  /* softmax: offset input, then in place. */
  TEST_OK(clmoe_softmax(c, &xv, &y1));
  TEST_OK(clmoe_tensor_copy(&y2, &x));
  TEST_OK(clmoe_softmax(c, &y2, &y2));
  CU_ASSERT(same_bits(&y1, &y2));
  /* cross-entropy: offset logits vs plain, then the backward in place over the logits. */
  TEST_OK(clmoe_cross_entropy(c, &xv, &t, &loss1, NULL));
  TEST_OK(clmoe_cross_entropy(c, &x, &t, &loss2, &lse));
  CU_ASSERT(same_bits(&loss1, &loss2));
  TEST_OK(clmoe_cross_entropy_backward(c, &x, &t, &lse, 0.25f, &y1));
  TEST_OK(clmoe_cross_entropy_backward(c, &x, &t, &lse, 0.25f, &x));
  CU_ASSERT(same_bits(&y1, &x));
  clmoe_tensor_destroy(&big), clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&g);
  clmoe_tensor_destroy(&y1), clmoe_tensor_destroy(&y2), clmoe_tensor_destroy(&r);
  clmoe_tensor_destroy(&dg1), clmoe_tensor_destroy(&dg2), clmoe_tensor_destroy(&t);
  clmoe_tensor_destroy(&loss1), clmoe_tensor_destroy(&loss2), clmoe_tensor_destroy(&lse);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "reference rmsnorm backward = finite differences", test_fd_rmsnorm);
  CU_add_test(suite, "reference softmax backward = finite differences", test_fd_softmax);
  CU_add_test(suite, "reference cross-entropy backward = finite differences", test_fd_xent);
  CU_add_test(suite, "finite-difference comparison detects a wrong gradient", test_fd_detects_error);
  test_add_checks(suite, "rmsnorm");
  test_add_checks(suite, "softmax");
  test_add_checks(suite, "xent");
  CU_add_test(suite, "rmsnorm argument errors", test_rmsnorm_errors);
  CU_add_test(suite, "softmax argument errors", test_softmax_errors);
  CU_add_test(suite, "cross-entropy argument errors", test_xent_errors);
  CU_add_test(suite, "cross-entropy target >= V is an error", test_xent_bad_target);
  CU_add_test(suite, "same bits: repeated, in place, offset views", test_same_bits);
}

int main(void) { return test_main("norm", add_tests); }
