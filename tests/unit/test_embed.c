/* CUnit suite: embedding, the device sort, AdamW. The conformance checks compare the device
 * with the references; the tests below cover errors, edge cases and the references. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/paths.h" /* clmoe_sort_u64 */
#include "check/ref/reference.h"
#include "test_common.h"

/* Status of a call, leaving its message readable by the caller. */
#define EXPECT_STATUS(call, want)                                                          \
  do {                                                                                     \
    clmoe_status got_ = (call);                                                            \
    if (got_ != (want))                                                                    \
      fprintf(stderr, "\n  %s:%d: %s -> %s (%s), expected %s\n", __FILE__, __LINE__, #call, \
              clmoe_strerror(got_), clmoe_last_error(), clmoe_strerror(want));             \
    CU_ASSERT_EQUAL(got_, (want));                                                         \
  } while (0)

/* ---- out-of-range ids: an error naming the id and its position, never a wild read ---- */
static void test_embedding_bad_id(void)
{
  const int64_t V = 10, d = 4, N = 4;
  clmoe_tensor T = {0}, I = {0}, O = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &T, CLMOE_F32, 2, (int64_t[]){V, d}));
  TEST_OK(clmoe_tensor_fill_uniform(&T, test_seed, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_create(test_ctx, &I, CLMOE_I32, 1, &N));
  TEST_OK(clmoe_tensor_create(test_ctx, &O, CLMOE_F32, 2, (int64_t[]){N, d}));
  const int32_t cases[3][4] = {{1, 10, 3, -1}, {-1, 2, 2, 2}, {0, 9, 5, 5}};
  const char *want[3] = {"id 10 at position 1", "id -1 at position 0", NULL};
  for (int c = 0; c < 3; c++) {
    TEST_OK(clmoe_tensor_write(&I, cases[c], sizeof cases[c]));
    clmoe_status st = clmoe_embedding(test_ctx, &T, &I, &O);
    if (!want[c]) {
      CU_ASSERT_EQUAL(st, CLMOE_OK);
      continue;
    }
    CU_ASSERT_EQUAL(st, CLMOE_ERR_INVALID_ARGUMENT);
    if (!strstr(clmoe_last_error(), want[c]))
      fprintf(stderr, "\n  message \"%s\" lacks \"%s\"\n", clmoe_last_error(), want[c]);
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), want[c]));
  }
  clmoe_tensor_destroy(&T), clmoe_tensor_destroy(&I), clmoe_tensor_destroy(&O);
}

/* The backward skips out-of-range ids (the forward reports them) and leaves empty rows. */
static void test_embedding_backward_skips_bad_ids(void)
{
  const int64_t V = 5, d = 3, N = 4;
  const int32_t ids[4] = {5, -1, 2, 1000};
  float table[15], dout[12], got[15];
  for (int i = 0; i < 15; i++) table[i] = (float)i;
  for (int i = 0; i < 12; i++) dout[i] = 0.5f + (float)i;
  clmoe_tensor T = {0}, I = {0}, D = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &T, CLMOE_F32, 2, (int64_t[]){V, d}));
  TEST_OK(clmoe_tensor_create(test_ctx, &I, CLMOE_I32, 1, &N));
  TEST_OK(clmoe_tensor_create(test_ctx, &D, CLMOE_F32, 2, (int64_t[]){N, d}));
  TEST_OK(clmoe_tensor_write(&T, table, sizeof table));
  TEST_OK(clmoe_tensor_write(&I, ids, sizeof ids));
  TEST_OK(clmoe_tensor_write(&D, dout, sizeof dout));
  TEST_OK(clmoe_embedding_backward(test_ctx, &I, &D, &T));
  TEST_OK(clmoe_tensor_read(&T, got, sizeof got));
  for (int v = 0; v < V; v++)
    for (int c = 0; c < d; c++) {
      float want = table[v * d + c] + (v == 2 ? dout[2 * d + c] : 0.0f);
      CU_ASSERT_EQUAL(got[v * d + c], want);
    }
  clmoe_tensor_destroy(&T), clmoe_tensor_destroy(&I), clmoe_tensor_destroy(&D);
}

/* ---- shapes and dtypes ---- */
static void test_embedding_shapes(void)
{
  clmoe_tensor T = {0}, T1 = {0}, I = {0}, IF = {0}, O = {0}, Owide = {0}, Oshort = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &T, CLMOE_F32, 2, (int64_t[]){8, 4}));
  TEST_OK(clmoe_tensor_create(test_ctx, &T1, CLMOE_F32, 1, (int64_t[]){32}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &I, CLMOE_I32, 1, (int64_t[]){6}));
  TEST_OK(clmoe_tensor_create(test_ctx, &IF, CLMOE_F32, 1, (int64_t[]){6}));
  TEST_OK(clmoe_tensor_create(test_ctx, &O, CLMOE_F32, 2, (int64_t[]){6, 4}));
  TEST_OK(clmoe_tensor_create(test_ctx, &Owide, CLMOE_F32, 2, (int64_t[]){4, 6})); /* same numel */
  TEST_OK(clmoe_tensor_create(test_ctx, &Oshort, CLMOE_F32, 2, (int64_t[]){5, 4}));
  TEST_OK(clmoe_embedding(test_ctx, &T, &I, &O));
  EXPECT_STATUS(clmoe_embedding(test_ctx, &T1, &I, &O), CLMOE_ERR_SHAPE);
  EXPECT_STATUS(clmoe_embedding(test_ctx, &T, &IF, &O), CLMOE_ERR_SHAPE);
  EXPECT_STATUS(clmoe_embedding(test_ctx, &T, &I, &Owide), CLMOE_ERR_SHAPE);
  EXPECT_STATUS(clmoe_embedding(test_ctx, &T, &I, &Oshort), CLMOE_ERR_SHAPE);
  EXPECT_STATUS(clmoe_embedding(test_ctx, &O, &I, &T), CLMOE_ERR_SHAPE); /* swapped */
  EXPECT_STATUS(clmoe_embedding(test_ctx, NULL, &I, &O), CLMOE_ERR_INVALID_ARGUMENT);
  TEST_OK(clmoe_embedding_backward(test_ctx, &I, &O, &T));
  EXPECT_STATUS(clmoe_embedding_backward(test_ctx, &I, &Oshort, &T), CLMOE_ERR_SHAPE);
  EXPECT_STATUS(clmoe_embedding_backward(test_ctx, &I, &O, &T1), CLMOE_ERR_SHAPE);
  EXPECT_STATUS(clmoe_embedding_backward(test_ctx, &IF, &O, &T), CLMOE_ERR_SHAPE);
  /* No tokens: nothing to do, not an error. */
  clmoe_tensor I0 = {0}, O0 = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &I0, CLMOE_I32, 1, (int64_t[]){0}));
  TEST_OK(clmoe_tensor_create(test_ctx, &O0, CLMOE_F32, 2, (int64_t[]){0, 4}));
  TEST_OK(clmoe_embedding(test_ctx, &T, &I0, &O0));
  TEST_OK(clmoe_embedding_backward(test_ctx, &I0, &O0, &T));
  clmoe_tensor_destroy(&T), clmoe_tensor_destroy(&T1), clmoe_tensor_destroy(&I);
  clmoe_tensor_destroy(&IF), clmoe_tensor_destroy(&O), clmoe_tensor_destroy(&Owide);
  clmoe_tensor_destroy(&Oshort), clmoe_tensor_destroy(&I0), clmoe_tensor_destroy(&O0);
}

/* ---- AdamW argument checks ---- */
static void test_adamw_validation(void)
{
  const int64_t n = 16;
  clmoe_tensor P = {0}, G = {0}, M = {0}, V = {0}, Gshort = {0};
  TEST_OK(clmoe_tensor_zeros(test_ctx, &P, CLMOE_F32, 1, &n));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &G, CLMOE_F32, 1, &n));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &M, CLMOE_F32, 1, &n));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &V, CLMOE_F32, 1, &n));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &Gshort, CLMOE_F32, 1, (int64_t[]){n - 1}));
  const clmoe_adamw good = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 1};
  TEST_OK(clmoe_adamw_step(test_ctx, &P, &G, &M, &V, &good));
  clmoe_adamw bad[8];
  for (int i = 0; i < 8; i++) bad[i] = good;
  bad[0].lr = -1e-3f;
  bad[1].beta1 = 1.0f;
  bad[2].beta2 = -0.1f;
  bad[3].eps = 0.0f;
  bad[4].step = 0;
  bad[5].lr = NAN;
  bad[6].grad_scale = INFINITY;
  bad[7].beta2 = NAN;
  for (int i = 0; i < 8; i++)
    EXPECT_STATUS(clmoe_adamw_step(test_ctx, &P, &G, &M, &V, &bad[i]), CLMOE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(clmoe_adamw_step(test_ctx, &P, &G, &M, &V, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(clmoe_adamw_step(test_ctx, &P, &Gshort, &M, &V, &good), CLMOE_ERR_SHAPE);
  EXPECT_STATUS(clmoe_adamw_step(test_ctx, &P, &G, &Gshort, &V, &good), CLMOE_ERR_SHAPE);
  clmoe_tensor_destroy(&P), clmoe_tensor_destroy(&G), clmoe_tensor_destroy(&M);
  clmoe_tensor_destroy(&V), clmoe_tensor_destroy(&Gshort);
}

/* ---- the sort on inputs a bitonic network could get wrong: sorted, reversed, equal ---- */
static void test_sort_patterns(void)
{
  const size_t n = 4099;
  uint64_t *keys = malloc(n * sizeof *keys), *got = malloc(n * sizeof *got);
  CU_ASSERT_PTR_NOT_NULL_FATAL(keys);
  CU_ASSERT_PTR_NOT_NULL_FATAL(got);
  clmoe_tensor B = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &B, CLMOE_I32, 1, (int64_t[]){(int64_t)(2 * n)}));
  for (int pattern = 0; pattern < 3; pattern++) {
    for (size_t i = 0; i < n; i++)
      keys[i] = pattern == 0 ? i * 3 : pattern == 1 ? (n - i) << 20 : 0x1234567890ULL;
    TEST_OK(clmoe_tensor_write(&B, keys, n * sizeof *keys));
    TEST_OK(clmoe_sort_u64(test_ctx, B.buf, 0, n));
    TEST_OK(clmoe_tensor_read(&B, got, n * sizeof *got));
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
      uint64_t want = pattern == 0 ? i * 3 : pattern == 1 ? (i + 1) << 20 : 0x1234567890ULL;
      ok = got[i] == want;
    }
    CU_ASSERT(ok);
  }
  TEST_OK(clmoe_sort_u64(test_ctx, B.buf, 0, 0)); /* nothing to sort */
  clmoe_tensor_destroy(&B);
  free(keys), free(got);
}

/* ---- the references themselves ----
 * Embedding backward must be the gradient of L(table) = sum(embedding(table) * dout): L is
 * linear in the table, so central differences are exact up to rounding. */
static void test_ref_embedding_gradient(void)
{
  enum { V = 4, D = 3, N = 6 };
  const int32_t ids[N] = {2, 0, 2, 3, 2, 0}; /* row 1 unused: its gradient is 0 */
  double table[V * D], dout[N * D], grad[V * D] = {0}, out[N * D];
  for (int i = 0; i < V * D; i++) table[i] = ck_host_uniform(test_seed, (uint64_t)i, -1.0, 1.0);
  for (int i = 0; i < N * D; i++) dout[i] = ck_host_uniform(test_seed + 1, (uint64_t)i, -1.0, 1.0);
  ref_embedding_backward(ids, dout, N, D, grad);
  const double h = 1e-3;
  for (int i = 0; i < V * D; i++) {
    double loss[2];
    for (int s = 0; s < 2; s++) {
      double saved = table[i];
      table[i] += s ? -h : h;
      ref_embedding(table, ids, N, D, out);
      loss[s] = 0.0;
      for (int j = 0; j < N * D; j++) loss[s] += out[j] * dout[j];
      table[i] = saved;
    }
    CU_ASSERT_DOUBLE_EQUAL(grad[i], (loss[0] - loss[1]) / (2 * h), 1e-9);
  }
  for (int c = 0; c < D; c++) CU_ASSERT_EQUAL(grad[1 * D + c], 0.0);
}

/* AdamW facts that follow from the formula without evaluating it the same way: the first
 * step from zero moments moves each parameter by lr g / (|g| + eps) (bias correction
 * cancels the (1 - beta) factors); a zero gradient only decays; grad_scale scales g. */
static void test_ref_adamw(void)
{
  enum { N = 5 };
  const double g[N] = {0.5, -2.0, 1e-3, -7.0, 3.0};
  double p[N], m[N] = {0}, v[N] = {0}, p0[N];
  const double lr = 0.01, eps = 1e-8;
  for (int i = 0; i < N; i++) p[i] = p0[i] = 0.1 * (i + 1);
  ref_adamw(p, g, m, v, N, lr, 0.9, 0.999, eps, 0.0, 1.0, 1);
  for (int i = 0; i < N; i++) {
    CU_ASSERT_DOUBLE_EQUAL(p[i], p0[i] - lr * (g[i] > 0 ? 1.0 : -1.0), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(m[i], 0.1 * g[i], 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(v[i], 0.001 * g[i] * g[i], 1e-15);
  }
  /* Zero gradient and moments at step 7: param *= (1 - lr wd). */
  const double zero[N] = {0};
  for (int i = 0; i < N; i++) p[i] = p0[i], m[i] = v[i] = 0.0;
  ref_adamw(p, zero, m, v, N, lr, 0.9, 0.999, eps, 0.5, 1.0, 7);
  for (int i = 0; i < N; i++) CU_ASSERT_DOUBLE_EQUAL(p[i], p0[i] * (1.0 - lr * 0.5), 1e-15);
  /* grad_scale 0.5 on g is the same as grad_scale 1 on g / 2, mid-training. */
  double pa[N], ma[N], va[N], pb[N], mb[N], vb[N], half[N];
  for (int i = 0; i < N; i++) {
    pa[i] = pb[i] = p0[i], ma[i] = mb[i] = 0.01 * i, va[i] = vb[i] = 0.02 * (i + 1);
    half[i] = g[i] / 2;
  }
  ref_adamw(pa, g, ma, va, N, lr, 0.9, 0.99, eps, 0.1, 0.5, 3);
  ref_adamw(pb, half, mb, vb, N, lr, 0.9, 0.99, eps, 0.1, 1.0, 3);
  for (int i = 0; i < N; i++) CU_ASSERT_DOUBLE_EQUAL(pa[i], pb[i], 1e-15);
}

static void add_tests(CU_pSuite suite)
{
  test_add_checks(suite, "embedding");
  test_add_checks(suite, "sort");
  test_add_checks(suite, "adamw");
  CU_add_test(suite, "embedding out-of-range ids", test_embedding_bad_id);
  CU_add_test(suite, "embedding backward skips bad ids", test_embedding_backward_skips_bad_ids);
  CU_add_test(suite, "embedding shapes", test_embedding_shapes);
  CU_add_test(suite, "adamw argument checks", test_adamw_validation);
  CU_add_test(suite, "sort sorted, reversed, equal keys", test_sort_patterns);
  CU_add_test(suite, "reference embedding gradient", test_ref_embedding_gradient);
  CU_add_test(suite, "reference adamw", test_ref_adamw);
}

int main(void) { return test_main("embed", add_tests); }
