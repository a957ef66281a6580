/* CUnit suite: tensors (create, views, transfers, copies, fills), bf16 rounding, the
 * buffer pool, and the counter-based random fills. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"

static void test_create(void)
{
  clmoe_tensor t;
  char desc[64];
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_F32, 3, (int64_t[]){2, 3, 4}));
  CU_ASSERT_EQUAL(clmoe_tensor_numel(&t), 24);
  CU_ASSERT_EQUAL(clmoe_tensor_bytes(&t), 96);
  CU_ASSERT(clmoe_tensor_is_contiguous(&t));
  CU_ASSERT_EQUAL(t.stride[0], 12);
  CU_ASSERT_EQUAL(t.stride[1], 4);
  CU_ASSERT_EQUAL(t.stride[2], 1);
  CU_ASSERT_STRING_EQUAL(clmoe_tensor_describe(&t, desc, sizeof desc), "[2, 3, 4] f32");
  clmoe_tensor_destroy(&t);
  CU_ASSERT_PTR_NULL(t.buf);
  clmoe_tensor_destroy(&t); /* twice is harmless */

  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_BF16, 2, (int64_t[]){0, 5}));
  CU_ASSERT_EQUAL(clmoe_tensor_numel(&t), 0);
  TEST_OK(clmoe_tensor_fill(&t, 1.0)); /* empty tensors are fine everywhere */
  clmoe_tensor_destroy(&t);

  CU_ASSERT_EQUAL(clmoe_tensor_create(test_ctx, &t, CLMOE_F32, 5, (int64_t[]){1, 1, 1, 1, 1}), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_tensor_create(test_ctx, &t, CLMOE_F32, 2, (int64_t[]){3, -1}), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "negative"));
  /* Larger than the device allows in one buffer: a clear error, not a crash. */
  const clmoe_device_caps *c = clmoe_ctx_caps(test_ctx);
  int64_t huge = (int64_t)(c->max_alloc_bytes / 4) + 1024;
  CU_ASSERT_EQUAL(clmoe_tensor_create(test_ctx, &t, CLMOE_F32, 1, &huge), CLMOE_ERR_OUT_OF_MEMORY);
}

static void test_transfers(void)
{
  clmoe_tensor t, v, s;
  float x[24], y[24];
  int32_t ix[24], iy[24];
  for (int i = 0; i < 24; i++) x[i] = (float)i * 0.5f - 3.0f, ix[i] = i * 1000 - 7;
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_F32, 2, (int64_t[]){4, 6}));
  TEST_OK(clmoe_tensor_write(&t, x, sizeof x));
  TEST_OK(clmoe_tensor_read(&t, y, sizeof y));
  CU_ASSERT_EQUAL(memcmp(x, y, sizeof x), 0);
  CU_ASSERT_EQUAL(clmoe_tensor_write(&t, x, sizeof x - 4), CLMOE_ERR_SHAPE);

  /* A view: elements 6..17 as [3, 4]. */
  TEST_OK(clmoe_tensor_view(&t, &v, 2, (int64_t[]){3, 4}, 6));
  TEST_OK(clmoe_tensor_read(&v, y, 12 * sizeof(float)));
  for (int i = 0; i < 12; i++) CU_ASSERT_EQUAL(y[i], x[6 + i]);
  CU_ASSERT_EQUAL(clmoe_tensor_view(&t, &v, 1, (int64_t[]){20}, 6), CLMOE_ERR_SHAPE);
  /* Rows 1..2 are contiguous; columns 2..3 are not. */
  TEST_OK(clmoe_tensor_slice(&t, &s, 0, 1, 2));
  CU_ASSERT(clmoe_tensor_is_contiguous(&s));
  TEST_OK(clmoe_tensor_read(&s, y, 12 * sizeof(float)));
  for (int i = 0; i < 12; i++) CU_ASSERT_EQUAL(y[i], x[6 + i]);
  TEST_OK(clmoe_tensor_slice(&t, &s, 1, 2, 2));
  CU_ASSERT_FALSE(clmoe_tensor_is_contiguous(&s));
  CU_ASSERT_EQUAL(clmoe_tensor_read(&s, y, 8 * sizeof(float)), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_tensor_slice(&t, &s, 1, 5, 2), CLMOE_ERR_SHAPE);
  /* The shorthands: all of t as [2, 12] and [2, 3, 4]; rows 2..3 of the [4, 6] matrix. */
  TEST_OK(clmoe_tensor_view2d(&t, &v, 2, 12));
  CU_ASSERT(v.ndim == 2 && v.shape[0] == 2 && v.shape[1] == 12 && v.offset == t.offset);
  TEST_OK(clmoe_tensor_view3d(&t, &v, 2, 3, 4));
  CU_ASSERT(v.ndim == 3 && v.shape[2] == 4 && v.stride[0] == 12);
  CU_ASSERT_EQUAL(clmoe_tensor_view2d(&t, &v, 2, 11), CLMOE_ERR_SHAPE); /* not all of t */
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "clmoe_tensor_view2d"));
  TEST_OK(clmoe_tensor_rows(&t, &v, 2, 2));
  TEST_OK(clmoe_tensor_read(&v, y, 12 * sizeof(float)));
  for (int i = 0; i < 12; i++) CU_ASSERT_EQUAL(y[i], x[12 + i]);
  CU_ASSERT_EQUAL(clmoe_tensor_rows(&t, &v, 3, 2), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_tensor_rows(&v, &s, -1, 1), CLMOE_ERR_SHAPE);
  /* Filling a view leaves the rest alone. */
  TEST_OK(clmoe_tensor_view(&t, &v, 1, (int64_t[]){5}, 3));
  TEST_OK(clmoe_tensor_fill(&v, 42.0));
  clmoe_tensor_destroy(&v); /* a view: must not return t's buffer */
  TEST_OK(clmoe_tensor_read(&t, y, sizeof y));
  for (int i = 0; i < 24; i++) CU_ASSERT_EQUAL(y[i], i >= 3 && i < 8 ? 42.0f : x[i]);
  clmoe_tensor_destroy(&t);

  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_I32, 1, (int64_t[]){24}));
  TEST_OK(clmoe_tensor_write(&t, ix, sizeof ix));
  TEST_OK(clmoe_tensor_read(&t, iy, sizeof iy));
  CU_ASSERT_EQUAL(memcmp(ix, iy, sizeof ix), 0);
  TEST_OK(clmoe_tensor_fill(&t, -5.0));
  TEST_OK(clmoe_tensor_read(&t, iy, sizeof iy));
  for (int i = 0; i < 24; i++) CU_ASSERT_EQUAL(iy[i], -5);
  CU_ASSERT_EQUAL(clmoe_tensor_write_f32(&t, x), CLMOE_ERR_INVALID_ARGUMENT);
  clmoe_tensor_destroy(&t);
}

static void test_bf16(void)
{
  /* Round to nearest, ties to even, on the host. */
  CU_ASSERT_EQUAL(clmoe_bf16_from_f32(1.0f), 0x3f80);
  CU_ASSERT_EQUAL(clmoe_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);  /* tie: down to even */
  CU_ASSERT_EQUAL(clmoe_bf16_from_f32(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82); /* tie: up to even */
  CU_ASSERT_EQUAL(clmoe_bf16_from_f32(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81); /* above the tie */
  CU_ASSERT_EQUAL(clmoe_bf16_from_f32(-2.0f), 0xc000);
  CU_ASSERT_EQUAL(clmoe_bf16_from_f32(INFINITY), 0x7f80);
  CU_ASSERT_EQUAL(clmoe_bf16_from_f32(3.4e38f), 0x7f80); /* rounds up to infinity */
  CU_ASSERT(isnan(clmoe_f32_from_bf16(clmoe_bf16_from_f32(NAN))));
  CU_ASSERT_EQUAL(clmoe_f32_from_bf16(0x3f80), 1.0f);

  /* Device rounding through a bf16 tensor, then the same on the host. */
  clmoe_tensor t;
  float x[5] = {1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f, -0.0f, NAN, 65504.0f}, y[5];
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_BF16, 1, (int64_t[]){5}));
  TEST_OK(clmoe_tensor_write_f32(&t, x));
  TEST_OK(clmoe_tensor_read_f32(&t, y));
  CU_ASSERT_EQUAL(y[0], 1.0f);
  CU_ASSERT_EQUAL(y[1], 1.0f + 0x1p-6f);
  CU_ASSERT(y[2] == 0.0f && signbit(y[2]));
  CU_ASSERT(isnan(y[3]));
  CU_ASSERT_EQUAL(y[4], 65536.0f);
  TEST_OK(clmoe_tensor_fill(&t, 3.0));
  TEST_OK(clmoe_tensor_read_f32(&t, y));
  for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(y[i], 3.0f);
  clmoe_tensor_destroy(&t);
}

static void test_copy(void)
{
  clmoe_tensor a, b, c;
  float x[10], y[10];
  for (int i = 0; i < 10; i++) x[i] = 1.0f / (float)(i + 1);
  TEST_OK(clmoe_tensor_create(test_ctx, &a, CLMOE_F32, 2, (int64_t[]){2, 5}));
  TEST_OK(clmoe_tensor_create(test_ctx, &b, CLMOE_F32, 1, (int64_t[]){10}));
  TEST_OK(clmoe_tensor_create(test_ctx, &c, CLMOE_F32, 1, (int64_t[]){9}));
  TEST_OK(clmoe_tensor_write(&a, x, sizeof x));
  TEST_OK(clmoe_tensor_copy(&b, &a));
  TEST_OK(clmoe_tensor_read(&b, y, sizeof y));
  CU_ASSERT_EQUAL(memcmp(x, y, sizeof x), 0);
  CU_ASSERT_EQUAL(clmoe_tensor_copy(&c, &a), CLMOE_ERR_SHAPE);
  clmoe_tensor_destroy(&a), clmoe_tensor_destroy(&b), clmoe_tensor_destroy(&c);
}

static void test_pool(void)
{
  clmoe_pool_stats s0, s1, s2;
  clmoe_ctx_pool_trim(test_ctx);
  clmoe_ctx_pool_stats(test_ctx, &s0);
  clmoe_tensor t[3];
  for (int round = 0; round < 5; round++) {
    TEST_OK(clmoe_tensor_create(test_ctx, &t[0], CLMOE_F32, 2, (int64_t[]){100, 33}));
    TEST_OK(clmoe_tensor_create(test_ctx, &t[1], CLMOE_BF16, 1, (int64_t[]){12345}));
    TEST_OK(clmoe_tensor_create(test_ctx, &t[2], CLMOE_F32, 1, (int64_t[]){3000})); /* same class as t[1] */
    if (round == 0) clmoe_ctx_pool_stats(test_ctx, &s1);
    for (int i = 0; i < 3; i++) clmoe_tensor_destroy(&t[i]);
  }
  clmoe_ctx_pool_stats(test_ctx, &s2);
  /* After the first round nothing new is allocated: a training step's steady state. */
  CU_ASSERT_EQUAL(s2.allocations, s1.allocations);
  CU_ASSERT_EQUAL(s2.reuses - s1.reuses, 12);
  CU_ASSERT_EQUAL(s2.in_use_bytes, s0.in_use_bytes);
  CU_ASSERT(s2.peak_in_use_bytes >= 100 * 33 * 4 + 12345 * 2 + 3000 * 4);
  clmoe_ctx_pool_trim(test_ctx);
  clmoe_ctx_pool_stats(test_ctx, &s2);
  CU_ASSERT_EQUAL(s2.device_bytes, s2.in_use_bytes);
}

static void test_random(void)
{
  clmoe_tensor a, b;
  const int64_t n = 1000;
  float x[1000], y[1000];
  TEST_OK(clmoe_tensor_create(test_ctx, &a, CLMOE_F32, 1, &n));
  TEST_OK(clmoe_tensor_create(test_ctx, &b, CLMOE_F32, 1, &n));
  TEST_OK(clmoe_tensor_fill_normal(&a, 5, 0.0f, 0.02f));
  TEST_OK(clmoe_tensor_fill_normal(&b, 5, 0.0f, 0.02f));
  TEST_OK(clmoe_tensor_read(&a, x, sizeof x));
  TEST_OK(clmoe_tensor_read(&b, y, sizeof y));
  CU_ASSERT_EQUAL(memcmp(x, y, sizeof x), 0); /* same seed, same numbers */
  TEST_OK(clmoe_tensor_fill_normal(&b, 6, 0.0f, 0.02f));
  TEST_OK(clmoe_tensor_read(&b, y, sizeof y));
  int same = 0;
  double sum2 = 0.0;
  for (int i = 0; i < 1000; i++) same += x[i] == y[i], sum2 += (double)x[i] * x[i];
  CU_ASSERT(same < 5);
  double sd = sqrt(sum2 / 1000.0);
  CU_ASSERT(sd > 0.018 && sd < 0.022); /* the standard deviation asked for */
  /* Host-side normals: tails and moments of a larger sample. */
  double m1 = 0, m2 = 0, m4 = 0, big = 0;
  const int N = 200000;
  for (int i = 0; i < N; i++) {
    double v = clmoe_random_normal(99, (uint64_t)i, 0.0f, 1.0f);
    m1 += v, m2 += v * v, m4 += v * v * v * v;
    big += fabs(v) > 3.0;
  }
  m1 /= N, m2 /= N, m4 /= N;
  CU_ASSERT(fabs(m1) < 0.01);
  CU_ASSERT(fabs(m2 - 1.0) < 0.02);
  CU_ASSERT(fabs(m4 - 3.0) < 0.1);                    /* kurtosis of a normal */
  CU_ASSERT(fabs(big / N - 0.0027) < 0.0007);          /* P(|x| > 3) */
  CU_ASSERT_EQUAL(clmoe_tensor_fill_uniform(&(clmoe_tensor){.ctx = test_ctx, .dtype = CLMOE_I32, .ndim = 1,
                                            .shape = {4, 1, 1, 1}, .stride = {1, 1, 1, 1}}, 1, 0, 1),
                  CLMOE_ERR_SHAPE);
  clmoe_tensor_destroy(&a), clmoe_tensor_destroy(&b);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "create, shapes, errors", test_create);
  CU_add_test(suite, "transfers, views, slices", test_transfers);
  CU_add_test(suite, "bf16 rounding", test_bf16);
  CU_add_test(suite, "copy", test_copy);
  CU_add_test(suite, "buffer pool reuse", test_pool);
  CU_add_test(suite, "random fills", test_random);
  test_add_checks(suite, "random");
  test_add_checks(suite, "convert");
}

int main(void) { return test_main("tensor", add_tests); }
