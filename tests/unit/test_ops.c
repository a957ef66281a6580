/* CUnit suite: pointwise operators and reductions (the "pointwise" and "reduce" checks),
 * their argument errors, aliasing, and run-to-run determinism of reductions. */
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

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "argument errors", test_errors);
  CU_add_test(suite, "aliasing and NaN", test_alias_and_nan);
  CU_add_test(suite, "reductions repeat bit for bit", test_reduce_deterministic);
  test_add_checks(suite, "pointwise");
  test_add_checks(suite, "reduce");
}

int main(void) { return test_main("ops", add_tests); }
