/* CUnit suite: pointwise operators, reductions and the linear layer (the "pointwise",
 * "reduce" and "linear" checks), their argument errors, aliasing, run-to-run determinism of
 * reductions, and the linear backward's accumulation. */
#include <math.h>
#include <string.h>

#include "test_common.h"

static void test_errors(void)
{
  clmoe_tensor a, b, h;
  TEST_OK(clmoe_tensor_create(test_ctx, &a, CLMOE_F32, 1, (int64_t[]){10}));
  TEST_OK(clmoe_tensor_create(test_ctx, &b, CLMOE_F32, 1, (int64_t[]){11}));
  TEST_OK(clmoe_tensor_create(test_ctx, &h, CLMOE_BF16, 1, (int64_t[]){10}));
  CU_ASSERT_EQUAL(clmoe_add(test_ctx, &a, &b, &a), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "clmoe_add"));
  CU_ASSERT_EQUAL(clmoe_silu(test_ctx, &h, &a), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "bf16"));
  CU_ASSERT_EQUAL(clmoe_sum(test_ctx, &a, &b), CLMOE_ERR_SHAPE); /* output of 11 elements */
  CU_ASSERT_EQUAL(clmoe_add(test_ctx, &a, NULL, &a), CLMOE_ERR_INVALID_ARGUMENT);
  clmoe_tensor_destroy(&a), clmoe_tensor_destroy(&b), clmoe_tensor_destroy(&h);
}

static void test_alias_and_nan(void)
{
  clmoe_tensor a;
  float x[5] = {1, -2, 3, NAN, 0.5f}, y[5];
  TEST_OK(clmoe_tensor_create(test_ctx, &a, CLMOE_F32, 1, (int64_t[]){5}));
  TEST_OK(clmoe_tensor_write(&a, x, sizeof x));
  TEST_OK(clmoe_add(test_ctx, &a, &a, &a)); /* out aliases both inputs */
  TEST_OK(clmoe_silu(test_ctx, &a, &a));
  TEST_OK(clmoe_tensor_read(&a, y, sizeof y));
  for (int i = 0; i < 5; i++) {
    double v = 2.0 * x[i], want = v / (1.0 + exp(-v));
    if (isnan(x[i])) {
      CU_ASSERT(isnan(y[i]));
    } else {
      CU_ASSERT(fabs(y[i] - want) <= 1e-6 * (fabs(want) + 1.0));
    }
  }
  clmoe_tensor_destroy(&a);
}

static void test_reduce_deterministic(void)
{
  clmoe_tensor x, s;
  float r[4];
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 1, (int64_t[]){123457}));
  TEST_OK(clmoe_tensor_create(test_ctx, &s, CLMOE_F32, 1, (int64_t[]){1}));
  TEST_OK(clmoe_tensor_fill_normal(&x, 3, 0.0f, 1.0f));
  for (int i = 0; i < 4; i++) {
    TEST_OK(clmoe_sum(test_ctx, &x, &s));
    TEST_OK(clmoe_tensor_read(&s, &r[i], sizeof r[i]));
  }
  CU_ASSERT(r[0] == r[1] && r[1] == r[2] && r[2] == r[3]);
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&s);
}

static void test_linear_errors(void)
{
  clmoe_tensor X, W, Wbad, Y, b16, dW;
  TEST_OK(clmoe_tensor_create(test_ctx, &X, CLMOE_F32, 2, (int64_t[]){4, 6}));
  TEST_OK(clmoe_tensor_create(test_ctx, &W, CLMOE_F32, 2, (int64_t[]){5, 6}));
  TEST_OK(clmoe_tensor_create(test_ctx, &Wbad, CLMOE_F32, 2, (int64_t[]){5, 7}));
  TEST_OK(clmoe_tensor_create(test_ctx, &Y, CLMOE_F32, 2, (int64_t[]){4, 5}));
  TEST_OK(clmoe_tensor_create(test_ctx, &b16, CLMOE_BF16, 1, (int64_t[]){5}));
  TEST_OK(clmoe_tensor_create(test_ctx, &dW, CLMOE_F32, 2, (int64_t[]){6, 5}));
  CU_ASSERT_EQUAL(clmoe_linear(test_ctx, &X, &Wbad, NULL, &Y), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "clmoe_linear: W"));
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "[out, in] = [?, 6]"));
  CU_ASSERT_EQUAL(clmoe_linear(test_ctx, &X, &W, NULL, &dW), CLMOE_ERR_SHAPE); /* Y [6, 5] */
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "[rows, out] = [4, 5]"));
  CU_ASSERT_EQUAL(clmoe_linear(test_ctx, NULL, &W, NULL, &Y), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_linear(test_ctx, &X, &W, &b16, &Y), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "bias"));
  CU_ASSERT_EQUAL(clmoe_linear_backward(test_ctx, &X, &W, &Y, NULL, &dW, NULL, 0), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "clmoe_linear_backward: dW"));
  CU_ASSERT_EQUAL(clmoe_linear_backward(test_ctx, &X, &W, &Y, NULL, NULL, NULL, 8),
                  CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "accumulate"));
  clmoe_tensor_destroy(&X), clmoe_tensor_destroy(&W), clmoe_tensor_destroy(&Wbad);
  clmoe_tensor_destroy(&Y), clmoe_tensor_destroy(&b16), clmoe_tensor_destroy(&dW);
}

/* dW and dbias accumulate: two backward calls from zero give exactly twice one call. */
static void test_linear_accumulates(void)
{
  const int64_t rows = 33, in = 20, out = 12;
  clmoe_tensor X, W, dY, dW1, dW2, db1, db2;
  float w1[12 * 20], w2[12 * 20], b1[12], b2[12];
  TEST_OK(clmoe_tensor_create(test_ctx, &X, CLMOE_F32, 2, (int64_t[]){rows, in}));
  TEST_OK(clmoe_tensor_create(test_ctx, &W, CLMOE_F32, 2, (int64_t[]){out, in}));
  TEST_OK(clmoe_tensor_create(test_ctx, &dY, CLMOE_F32, 2, (int64_t[]){rows, out}));
  TEST_OK(clmoe_tensor_fill_normal(&X, test_seed, 0.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_normal(&W, test_seed + 1, 0.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_normal(&dY, test_seed + 2, 0.0f, 1.0f));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &dW1, CLMOE_F32, 2, (int64_t[]){out, in}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &dW2, CLMOE_F32, 2, (int64_t[]){out, in}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &db1, CLMOE_F32, 1, &out));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &db2, CLMOE_F32, 1, &out));
  const unsigned acc = CLMOE_LINEAR_ACC_DW | CLMOE_LINEAR_ACC_DBIAS;
  TEST_OK(clmoe_linear_backward(test_ctx, &X, &W, &dY, NULL, &dW1, &db1, acc));
  for (int i = 0; i < 2; i++)
    TEST_OK(clmoe_linear_backward(test_ctx, &X, &W, &dY, NULL, &dW2, &db2, acc));
  TEST_OK(clmoe_tensor_read(&dW1, w1, sizeof w1));
  TEST_OK(clmoe_tensor_read(&dW2, w2, sizeof w2));
  TEST_OK(clmoe_tensor_read(&db1, b1, sizeof b1));
  TEST_OK(clmoe_tensor_read(&db2, b2, sizeof b2));
  int same = 1;
  for (int i = 0; i < 12 * 20; i++) same &= w2[i] == 2.0f * w1[i];
  for (int i = 0; i < 12; i++) same &= b2[i] == 2.0f * b1[i];
  CU_ASSERT(same);
  clmoe_tensor_destroy(&X), clmoe_tensor_destroy(&W), clmoe_tensor_destroy(&dY);
  clmoe_tensor_destroy(&dW1), clmoe_tensor_destroy(&dW2), clmoe_tensor_destroy(&db1);
  clmoe_tensor_destroy(&db2);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "argument errors", test_errors);
  CU_add_test(suite, "aliasing and NaN", test_alias_and_nan);
  CU_add_test(suite, "reductions repeat bit for bit", test_reduce_deterministic);
  test_add_checks(suite, "pointwise");
  test_add_checks(suite, "reduce");
  CU_add_test(suite, "linear: argument errors", test_linear_errors);
  CU_add_test(suite, "linear: dW and dbias accumulate", test_linear_accumulates);
  test_add_checks(suite, "linear");
}

int main(void) { return test_main("ops", add_tests); }
