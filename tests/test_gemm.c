/* CUnit suite: GEMM on every backend against the double reference (the "gemm" checks),
 * and the argument errors. */
#include <string.h>

#include "test_common.h"

static void test_shape_errors(void)
{
  clmoe_tensor A, B, C, D;
  TEST_OK(clmoe_tensor_create(test_ctx, &A, CLMOE_F32, 2, (int64_t[]){4, 5}));
  TEST_OK(clmoe_tensor_create(test_ctx, &B, CLMOE_F32, 2, (int64_t[]){6, 3}));
  TEST_OK(clmoe_tensor_create(test_ctx, &C, CLMOE_F32, 2, (int64_t[]){4, 3}));
  TEST_OK(clmoe_tensor_create(test_ctx, &D, CLMOE_I32, 2, (int64_t[]){5, 3}));
  /* k differs: 5 against 6. */
  CU_ASSERT_EQUAL(clmoe_gemm(test_ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &B, 0.0f, &C), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "[4, 5] f32"));
  /* int32 operands are rejected. */
  CU_ASSERT_EQUAL(clmoe_gemm(test_ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &D, 0.0f, &C), CLMOE_ERR_SHAPE);
  /* The batched entry point wants 3-D tensors, the plain one 2-D. */
  CU_ASSERT_EQUAL(clmoe_gemm_batched(test_ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &B, 0.0f, &C), CLMOE_ERR_SHAPE);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&C), clmoe_tensor_destroy(&D);
}

static void test_backend_setting(void)
{
  CU_ASSERT_STRING_EQUAL(clmoe_gemm_backend_name(CLMOE_GEMM_TILED), "tiled");
  clmoe_ctx_set_gemm_backend(test_ctx, CLMOE_GEMM_TILED);
  /* clmoe_gemm follows the context's backend: the tiled checks pass through it too. */
  clmoe_tensor A, B, C;
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, c[4];
  TEST_OK(clmoe_tensor_create(test_ctx, &A, CLMOE_F32, 2, (int64_t[]){2, 3}));
  TEST_OK(clmoe_tensor_create(test_ctx, &B, CLMOE_F32, 2, (int64_t[]){3, 2}));
  TEST_OK(clmoe_tensor_create(test_ctx, &C, CLMOE_F32, 2, (int64_t[]){2, 2}));
  TEST_OK(clmoe_tensor_write(&A, a, sizeof a));
  TEST_OK(clmoe_tensor_write(&B, b, sizeof b));
  TEST_OK(clmoe_gemm(test_ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &B, 0.0f, &C));
  TEST_OK(clmoe_tensor_read(&C, c, sizeof c));
  /* [1 2 3; 4 5 6] [1 0; 0 1; 1 1] = [4 5; 10 11], worked by hand. */
  CU_ASSERT_EQUAL(c[0], 4.0f);
  CU_ASSERT_EQUAL(c[1], 5.0f);
  CU_ASSERT_EQUAL(c[2], 10.0f);
  CU_ASSERT_EQUAL(c[3], 11.0f);
  clmoe_ctx_set_gemm_backend(test_ctx, CLMOE_GEMM_AUTO);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&C);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "shape errors", test_shape_errors);
  CU_add_test(suite, "context backend setting", test_backend_setting);
  test_add_checks(suite, "gemm");
}

int main(void) { return test_main("gemm", add_tests); }
