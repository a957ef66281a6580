/* CUnit suite: GEMM on every backend against the double reference (the "gemm" checks),
 * and the argument errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check/conformance.h"
#include "check/ref/reference.h"
#include "clmoe/paths.h"
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

/* A CLBlast tuner result for `device` (the H200's best Xgemm parameters, valid on any
 * OpenCL device with 128 work-items and 16 KB of local memory), or one without parameters. */
#define TUNED_OK "GEMMK=0 KREG=1 KWG=32 KWI=2 MDIMA=16 MDIMC=16 MWG=64 NDIMB=8 NDIMC=8 NWG=64 PRECISION=32 SA=1 SB=1 STRM=0 STRN=0 VWM=4 VWN=4"
/* 64 x 64 work-items: more than any device's work-group; PoCL runs it anyway and returns
 * garbage, NVIDIA refuses the launch: clmoe's check after applying must catch either. */
#define TUNED_WRONG "GEMMK=0 KREG=1 KWG=32 KWI=2 MDIMA=16 MDIMC=64 MWG=64 NDIMB=8 NDIMC=64 NWG=64 SA=1 SB=1 STRM=0 STRN=0 VWM=4 VWN=4"

static void write_tuning(const char *path, const char *device, const char *params)
{
  FILE *f = fopen(path, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fprintf(f, "{\n  \"kernel_family\": \"xgemm_1\",\n  \"precision\": \"32\",\n  \"best_kernel\": \"Xgemm\",\n");
  if (params) fprintf(f, "  \"best_parameters\": \"%s\",\n", params);
  fprintf(f, "  \"clblast_device_name\": \"%s\",\n  \"results\": []\n}\n", device);
  fclose(f);
}

/* CLMOE_CLBLAST_TUNING: the file for this device is applied (and the GEMM still matches the
 * double reference), a file for another device is skipped, a malformed one is an error
 * naming it. CLBlast's overrides are process-wide, so the "gemm" checks that run after this
 * test check the overridden kernel too. */
static void test_clblast_tuning(void)
{
  char good[] = "/tmp/clmoe-tune-good.XXXXXX", other[] = "/tmp/clmoe-tune-other.XXXXXX",
       bad[] = "/tmp/clmoe-tune-bad.XXXXXX", wrong[] = "/tmp/clmoe-tune-wrong.XXXXXX", list[200];
  int fds[4] = {mkstemp(good), mkstemp(other), mkstemp(bad), mkstemp(wrong)};
  for (int i = 0; i < 4; i++) {
    CU_ASSERT_FATAL(fds[i] >= 0);
    close(fds[i]);
  }
  write_tuning(good, clmoe_ctx_caps(test_ctx)->device_name, TUNED_OK);
  write_tuning(other, "Some Other Accelerator 9000", TUNED_WRONG);
  write_tuning(bad, clmoe_ctx_caps(test_ctx)->device_name, NULL);
  write_tuning(wrong, clmoe_ctx_caps(test_ctx)->device_name, TUNED_WRONG);

  enum { M = 70, N = 50, K = 40 };
  snprintf(list, sizeof list, "%s:%s", other, good);
  clmoe_ctx *ctx = NULL;
  TEST_OK(clmoe_ctx_create_at(&ctx, clmoe_ctx_caps(test_ctx), NULL));
  CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
  TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_CLBLAST_TUNING", list));
  clmoe_ctx_set_gemm_backend(ctx, CLMOE_GEMM_CLBLAST);
  clmoe_tensor A, B, C;
  TEST_OK(clmoe_tensor_create(ctx, &A, CLMOE_F32, 2, (int64_t[]){M, K}));
  TEST_OK(clmoe_tensor_create(ctx, &B, CLMOE_F32, 2, (int64_t[]){K, N}));
  TEST_OK(clmoe_tensor_create(ctx, &C, CLMOE_F32, 2, (int64_t[]){M, N}));
  TEST_OK(clmoe_tensor_fill_uniform(&A, 31, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&B, 32, -1.0f, 1.0f));
  TEST_OK(clmoe_gemm(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &B, 0.0f, &C));
  CU_ASSERT_EQUAL(clmoe_gemm_tuned_kernels(ctx), 1);
  double *a = NULL, *b = NULL, *c = NULL, ref[M * N];
  TEST_OK(ck_read(&A, &a));
  TEST_OK(ck_read(&B, &b));
  TEST_OK(ck_read(&C, &c));
  if (a && b && c) {
    ref_gemm(0, 0, M, N, K, 1.0, a, K, b, N, 0.0, ref, N);
    clmoe_check_result res = {0};
    ck_compare("C", c, ref, M * N, &res);
    CU_ASSERT(res.max_err < 1e-5);
  }
  free(a), free(b), free(c);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&C);
  clmoe_ctx_destroy(ctx);

  TEST_OK(clmoe_ctx_create_at(&ctx, clmoe_ctx_caps(test_ctx), NULL));
  TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_CLBLAST_TUNING", bad));
  clmoe_ctx_set_gemm_backend(ctx, CLMOE_GEMM_CLBLAST);
  TEST_OK(clmoe_tensor_create(ctx, &A, CLMOE_F32, 2, (int64_t[]){4, 4}));
  CU_ASSERT_EQUAL(clmoe_gemm(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &A, 0.0f, &A), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), bad));
  clmoe_tensor_destroy(&A);
  clmoe_ctx_destroy(ctx);

  /* wrong parameters, then the good ones again (overrides are process-wide) */
  const char *order[2] = {wrong, good};
  for (int i = 0; i < 2; i++) {
    TEST_OK(clmoe_ctx_create_at(&ctx, clmoe_ctx_caps(test_ctx), NULL));
    TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_CLBLAST_TUNING", order[i]));
    clmoe_ctx_set_gemm_backend(ctx, CLMOE_GEMM_CLBLAST);
    TEST_OK(clmoe_tensor_create(ctx, &A, CLMOE_F32, 2, (int64_t[]){4, 4}));
    TEST_OK(clmoe_tensor_create(ctx, &B, CLMOE_F32, 2, (int64_t[]){4, 4}));
    TEST_OK(clmoe_tensor_fill_uniform(&A, 33, -1.0f, 1.0f));
    const clmoe_status st = clmoe_gemm(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &A, 0.0f, &B);
    if (i == 0 && st != CLMOE_OK) { /* garbage (PoCL: "wrong products") or a refused launch */
      CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "CLMOE_CLBLAST_TUNING"));
    } else if (i == 0) { /* CLBlast declined them (NVIDIA): then the products must be right */
      double *a4 = NULL, *b4 = NULL, ref4[16];
      TEST_OK(ck_read(&A, &a4));
      TEST_OK(ck_read(&B, &b4));
      if (a4 && b4) {
        ref_gemm(0, 0, 4, 4, 4, 1.0, a4, 4, a4, 4, 0.0, ref4, 4);
        clmoe_check_result res = {0};
        ck_compare("C", b4, ref4, 16, &res);
        CU_ASSERT(res.max_err < 1e-5);
      }
      free(a4), free(b4);
    } else {
      CU_ASSERT_EQUAL(st, CLMOE_OK);
    }
    clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B);
    clmoe_ctx_destroy(ctx);
  }
  unlink(good), unlink(other), unlink(bad), unlink(wrong);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "CLMOE_CLBLAST_TUNING applies tuner results for this device", test_clblast_tuning);
  CU_add_test(suite, "shape errors", test_shape_errors);
  CU_add_test(suite, "context backend setting", test_backend_setting);
  test_add_checks(suite, "gemm");
}

int main(void) { return test_main("gemm", add_tests); }
