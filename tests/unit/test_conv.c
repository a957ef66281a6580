/* CUnit suite: the short convolution (the "conv" conformance checks), its argument errors,
 * run-to-run determinism of dw, and a state_out that is the state_in itself. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"

/* The message of the last error names the op and the argument. */
#define ASSERT_ERROR(call, status, op, arg)                                                \
  do {                                                                                     \
    CU_ASSERT_EQUAL((call), (status));                                                     \
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), (op)));                              \
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), (arg)));                             \
  } while (0)

static void test_errors(void)
{
  const char *fw = "clmoe_short_conv", *bw = "clmoe_short_conv_backward", *sp = "clmoe_short_conv_step";
  clmoe_tensor x, x2, w, w5, wbig, y, yb, s, sbad, x1, y1, cu, dw, dwbad, dyb, ns, yn;
  const int64_t B = 2, T = 6, C = 8, W = 4;
  TEST_OK(clmoe_tensor_zeros(test_ctx, &x, CLMOE_F32, 3, (int64_t[]){B, T, C}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &x2, CLMOE_F32, 2, (int64_t[]){B * T, C}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &x1, CLMOE_F32, 3, (int64_t[]){1, 2 * T, C}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &y1, CLMOE_F32, 3, (int64_t[]){1, 2 * T, C}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &w, CLMOE_F32, 2, (int64_t[]){C, W}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &w5, CLMOE_F32, 2, (int64_t[]){C + 1, W}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &wbig, CLMOE_F32, 2, (int64_t[]){C, 65}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &y, CLMOE_F32, 3, (int64_t[]){B, T, C}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &yb, CLMOE_F32, 3, (int64_t[]){B, T + 1, C}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &s, CLMOE_F32, 3, (int64_t[]){B, W - 1, C}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &sbad, CLMOE_F32, 3, (int64_t[]){B, W, C}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &dw, CLMOE_F32, 2, (int64_t[]){C, W}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &dwbad, CLMOE_F32, 2, (int64_t[]){C, W + 1}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &dyb, CLMOE_BF16, 3, (int64_t[]){B, T, C}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &ns, CLMOE_F32, 2, (int64_t[]){B, C}));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &yn, CLMOE_F32, 2, (int64_t[]){B, C + 1}));
  TEST_OK(clmoe_tensor_create(test_ctx, &cu, CLMOE_I32, 1, (int64_t[]){3}));

  /* Shapes. */
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x2, &w, NULL, NULL, &y, NULL), CLMOE_ERR_SHAPE, fw, "x");
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x, &w5, NULL, NULL, &y, NULL), CLMOE_ERR_SHAPE, fw, "w");
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x, &w, NULL, NULL, &yb, NULL), CLMOE_ERR_SHAPE, fw, "y");
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x, &w, NULL, &sbad, &y, NULL), CLMOE_ERR_SHAPE, fw, "state_in");
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x, &w, NULL, NULL, &y, &sbad), CLMOE_ERR_SHAPE, fw, "state_out");
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x, &wbig, NULL, NULL, &y, NULL), CLMOE_ERR_UNSUPPORTED, fw, "W");
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x, NULL, NULL, NULL, &y, NULL), CLMOE_ERR_INVALID_ARGUMENT, fw, "w");
  ASSERT_ERROR(clmoe_short_conv_backward(test_ctx, &x, &w, NULL, NULL, &y, &y, &dwbad, NULL),
               CLMOE_ERR_SHAPE, bw, "dw");
  ASSERT_ERROR(clmoe_short_conv_backward(test_ctx, &x, &w, NULL, NULL, &dyb, &y, &dw, NULL),
               CLMOE_ERR_SHAPE, bw, "dy");
  ASSERT_ERROR(clmoe_short_conv_backward(test_ctx, &x, &w, NULL, NULL, &y, NULL, &dw, NULL),
               CLMOE_ERR_INVALID_ARGUMENT, bw, "dx");
  ASSERT_ERROR(clmoe_short_conv_backward(test_ctx, &x, &w, NULL, NULL, &y, &y, &dw, &sbad),
               CLMOE_ERR_SHAPE, bw, "dstate_in");
  ASSERT_ERROR(clmoe_short_conv_step(test_ctx, &ns, &w, &sbad, &ns), CLMOE_ERR_SHAPE, sp, "state");
  ASSERT_ERROR(clmoe_short_conv_step(test_ctx, &ns, &w, &s, &yn), CLMOE_ERR_SHAPE, sp, "y");
  ASSERT_ERROR(clmoe_short_conv_step(test_ctx, &ns, &w, NULL, &ns), CLMOE_ERR_INVALID_ARGUMENT, sp, "state");
  ASSERT_ERROR(clmoe_short_conv_step(test_ctx, &x, &w, &s, &ns), CLMOE_ERR_SHAPE, sp, "x");

  /* cu_seqlens: B must be 1; values must start at 0, not decrease, end at T. */
  TEST_OK(clmoe_tensor_write(&cu, (int32_t[]){0, 5, 12}, 3 * sizeof(int32_t)));
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x, &w, &cu, NULL, &y, NULL), CLMOE_ERR_SHAPE, fw, "B");
  TEST_OK(clmoe_short_conv(test_ctx, &x1, &w, &cu, &s, &y1, NULL)); /* the same, valid */
  TEST_OK(clmoe_tensor_write(&cu, (int32_t[]){1, 5, 12}, 3 * sizeof(int32_t)));
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x1, &w, &cu, NULL, &y1, NULL), CLMOE_ERR_INVALID_ARGUMENT,
               fw, "cu_seqlens");
  TEST_OK(clmoe_tensor_write(&cu, (int32_t[]){0, 7, 5}, 3 * sizeof(int32_t)));
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x1, &w, &cu, NULL, &y1, NULL), CLMOE_ERR_INVALID_ARGUMENT,
               fw, "cu_seqlens");
  TEST_OK(clmoe_tensor_write(&cu, (int32_t[]){0, 5, 11}, 3 * sizeof(int32_t)));
  ASSERT_ERROR(clmoe_short_conv_backward(test_ctx, &x1, &w, &cu, NULL, &x1, &y1, &dw, NULL),
               CLMOE_ERR_INVALID_ARGUMENT, bw, "cu_seqlens");
  ASSERT_ERROR(clmoe_short_conv(test_ctx, &x1, &w, &w, NULL, &y1, NULL), CLMOE_ERR_SHAPE, fw, "cu_seqlens");

  clmoe_tensor *all[] = {&x, &x2, &x1, &y1, &w, &w5, &wbig, &y, &yb, &s, &sbad, &dw, &dwbad, &dyb, &ns, &yn, &cu};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
}

/* dw sums every token: two runs must give the same bits (many chunks, so the second pass
 * runs). */
static void test_backward_deterministic(void)
{
  const int64_t B = 3, T = 3001, C = 96, W = 4;
  clmoe_tensor x, w, s, dy, dx, dw;
  float *a = malloc((size_t)(C * W) * sizeof *a), *b = malloc((size_t)(C * W) * sizeof *b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 3, (int64_t[]){B, T, C}));
  TEST_OK(clmoe_tensor_create(test_ctx, &dy, CLMOE_F32, 3, (int64_t[]){B, T, C}));
  TEST_OK(clmoe_tensor_create(test_ctx, &dx, CLMOE_F32, 3, (int64_t[]){B, T, C}));
  TEST_OK(clmoe_tensor_create(test_ctx, &w, CLMOE_F32, 2, (int64_t[]){C, W}));
  TEST_OK(clmoe_tensor_create(test_ctx, &dw, CLMOE_F32, 2, (int64_t[]){C, W}));
  TEST_OK(clmoe_tensor_create(test_ctx, &s, CLMOE_F32, 3, (int64_t[]){B, W - 1, C}));
  TEST_OK(clmoe_tensor_fill_normal(&x, 11, 0.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_normal(&dy, 12, 0.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_normal(&w, 13, 0.0f, 0.5f));
  TEST_OK(clmoe_tensor_fill_normal(&s, 14, 0.0f, 1.0f));
  for (int run = 0; run < 2; run++) {
    TEST_OK(clmoe_tensor_fill(&dw, NAN));
    TEST_OK(clmoe_short_conv_backward(test_ctx, &x, &w, NULL, &s, &dy, &dx, &dw, NULL));
    TEST_OK(clmoe_tensor_read(&dw, run ? b : a, (size_t)(C * W) * sizeof *a));
  }
  CU_ASSERT(memcmp(a, b, (size_t)(C * W) * sizeof *a) == 0);
  for (int64_t i = 0; i < C * W; i++) CU_ASSERT(isfinite(a[i]));
  free(a), free(b);
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&w), clmoe_tensor_destroy(&s);
  clmoe_tensor_destroy(&dy), clmoe_tensor_destroy(&dx), clmoe_tensor_destroy(&dw);
}

/* Prefill that continues a state: state_out may be the state_in tensor itself, and must
 * equal what separate tensors give. */
static void test_state_in_place(void)
{
  const int64_t T = 7, C = 40, W = 4;
  const int32_t lens[4] = {0, 2, 2, 7}; /* cu_seqlens: lengths 2, 0, 5 */
  clmoe_tensor x, w, s, s2, y, cu;
  float a[3 * 3 * 40], b[3 * 3 * 40];
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 3, (int64_t[]){1, T, C}));
  TEST_OK(clmoe_tensor_create(test_ctx, &y, CLMOE_F32, 3, (int64_t[]){1, T, C}));
  TEST_OK(clmoe_tensor_create(test_ctx, &w, CLMOE_F32, 2, (int64_t[]){C, W}));
  TEST_OK(clmoe_tensor_create(test_ctx, &s, CLMOE_F32, 3, (int64_t[]){3, W - 1, C}));
  TEST_OK(clmoe_tensor_create(test_ctx, &s2, CLMOE_F32, 3, (int64_t[]){3, W - 1, C}));
  TEST_OK(clmoe_tensor_create(test_ctx, &cu, CLMOE_I32, 1, (int64_t[]){4}));
  TEST_OK(clmoe_tensor_write(&cu, lens, sizeof lens));
  TEST_OK(clmoe_tensor_fill_normal(&x, 21, 0.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_normal(&w, 22, 0.0f, 0.5f));
  TEST_OK(clmoe_tensor_fill_normal(&s, 23, 0.0f, 1.0f));
  TEST_OK(clmoe_short_conv(test_ctx, &x, &w, &cu, &s, &y, &s2));
  TEST_OK(clmoe_short_conv(test_ctx, &x, &w, &cu, &s, &y, &s));
  TEST_OK(clmoe_tensor_read(&s, a, sizeof a));
  TEST_OK(clmoe_tensor_read(&s2, b, sizeof b));
  CU_ASSERT(memcmp(a, b, sizeof a) == 0);
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&w);
  clmoe_tensor_destroy(&s), clmoe_tensor_destroy(&s2), clmoe_tensor_destroy(&cu);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "argument errors", test_errors);
  CU_add_test(suite, "dw repeats bit for bit", test_backward_deterministic);
  CU_add_test(suite, "state_out in place of state_in", test_state_in_place);
  test_add_checks(suite, "conv");
}

int main(void) { return test_main("conv", add_tests); }
