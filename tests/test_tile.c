/* CUnit suite: the matrix-unit tile interface and the tile GEMM (issue 9).
 * The "tile." conformance checks (every tile load, tile_a_from_c, three GEMM cases), a sweep
 * of the tile GEMM over ragged shapes x all four transposes x every work-group block, the
 * fast-path switch and its hook into clmoe_gemm, NaN handling and argument errors. The GEMM
 * runs on the device's own tiles: nv-mma on NVIDIA sm_80+, the portable tiles elsewhere
 * (PoCL in CI), whatever the fast path says, because CLMOE_GEMM_TILE is named explicitly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance/tile_check.h"
#include "ref/reference.h"
#include "test_common.h"

/* Runs one GEMM case and asserts it passed, printing the case on failure. */
static void run_case(const tile_gemm_case *g, uint64_t seed)
{
  clmoe_check_result res;
  memset(&res, 0, sizeof res);
  clmoe_status st = check_tile_gemm_case(test_ctx, seed, g, &res);
  int ok = st == CLMOE_OK && res.max_err <= res.tolerance;
  if (!ok)
    fprintf(stderr,
            "\n  tile gemm %s%s %lldx%lldx%lld batch %lld block %dx%d C %s (seed %llu): %s %s "
            "(err %.3g, tol %.3g)\n", g->ta ? "T" : "N", g->tb ? "T" : "N", (long long)g->m,
            (long long)g->n, (long long)g->k, (long long)g->batch, g->bm, g->bn,
            clmoe_dtype_name(g->dc), (unsigned long long)seed,
            st == CLMOE_OK ? "" : clmoe_last_error(), res.worst, res.max_err, res.tolerance);
  CU_ASSERT(ok);
}

#define F CLMOE_F32
#define H CLMOE_BF16
/* Ragged shapes (1, 17, 130, 257 in every position) under all four transposes, each layout
 * once with row strides that allow 16-byte loads (multiples of 8) and once without; bf16 C,
 * beta, alpha, a padded C and an unaligned A along the way. Device's default block. */
static void test_gemm_sweep(void)
{
  static const tile_gemm_case cases[] = {
      /* ta tb  m    n    k  batch a1 b1 dc alpha  beta pad aoff bm bn */
      {0, 0, 130, 67, 257, 1, 0, 0, F, 1.0f, 0.0f, 1, 0, 0, 0},   /* NN, unaligned */
      {0, 0, 257, 136, 72, 1, 0, 0, H, -0.75f, 0.5f, 0, 0, 0, 0}, /* NN, 16-byte loads */
      {0, 1, 1, 17, 130, 1, 0, 0, F, 1.0f, 0.0f, 0, 0, 0, 0},     /* NT, m = 1 */
      {0, 1, 120, 264, 96, 1, 0, 0, F, 1.0f, 1.0f, 1, 0, 0, 0},   /* NT, 16-byte loads */
      {1, 0, 17, 130, 1, 1, 0, 0, F, 2.0f, 0.0f, 0, 0, 0, 0},     /* TN, k = 1 */
      {1, 0, 72, 40, 257, 1, 0, 0, F, 1.0f, -0.5f, 0, 0, 0, 0},   /* TN, 16-byte loads */
      {1, 1, 130, 1, 17, 1, 0, 0, F, 1.0f, 0.0f, 1, 1, 0, 0},     /* TT, n = 1, A unaligned */
      {1, 1, 200, 56, 48, 1, 0, 0, F, 0.5f, 0.0f, 0, 0, 0, 0},    /* TT, 16-byte loads */
      {0, 0, 64, 64, 64, 1, 0, 0, F, 1.0f, 0.0f, 0, 1, 0, 0},     /* NN whole blocks, A unaligned */
  };
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) run_case(&cases[i], test_seed + (uint64_t)i * 7);
}

/* Every work-group block the kernel is built for, on shapes ragged for each, batched with a
 * broadcast operand; each block sees both global layouts of A and of B (NN and TT). The
 * 128x256 block (8 warps) is the matrix units' block: on portable tiles it takes PoCL half a
 * minute to build and is never chosen there, so it runs where the tiles are a matrix unit
 * (its loaders are the 64x64 block's, which runs everywhere). */
static void test_gemm_blocks(void)
{
  static const int blocks[][2] = {{64, 64}, {128, 128}, {128, 256}};
  int nblocks = clmoe_ctx_tile_impl(test_ctx) == CLMOE_TILE_PORTABLE ? 2 : 3;
  for (int b = 0; b < nblocks; b++)
    for (int t = 0; t < 2; t++) {
      tile_gemm_case g = {t, t, 150, 270, 72, 2, t == 0, t == 1, F, 1.0f, t ? 1.0f : 0.0f, t == 0, 0,
                          blocks[b][0], blocks[b][1]};
      run_case(&g, test_seed + 1000 + (uint64_t)(b * 2 + t));
    }
}

/* k = 0: C = beta C. */
static void test_gemm_k0(void)
{
  tile_gemm_case g = {0, 0, 19, 23, 0, 1, 0, 0, CLMOE_F32, 1.0f, 0.5f, 0, 0, 0, 0};
  run_case(&g, test_seed + 2000);
}

/* beta = 0 ignores a C full of NaN, and a NaN left in the output fails the comparison. */
static void test_nan(void)
{
  const int64_t m = 40, n = 24, k = 48;
  clmoe_tensor A = {0}, B = {0}, C = {0};
  double *a = NULL, *b = NULL, *got = NULL, ref[40 * 24];
  TEST_OK(ck_uniform(test_ctx, &A, CLMOE_BF16, 2, (int64_t[]){m, k}, test_seed, -1.0f, 1.0f, &a));
  TEST_OK(ck_uniform(test_ctx, &B, CLMOE_BF16, 2, (int64_t[]){k, n}, test_seed + 1, -1.0f, 1.0f, &b));
  TEST_OK(clmoe_tensor_create(test_ctx, &C, CLMOE_F32, 2, (int64_t[]){m, n}));
  TEST_OK(clmoe_tensor_fill(&C, NAN));
  TEST_OK(clmoe_gemm_ex(test_ctx, CLMOE_GEMM_TILE, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &B, 0.0f, &C));
  TEST_OK(ck_read(&C, &got));
  ref_gemm(0, 0, m, n, k, 1.0, a, k, b, n, 0.0, ref, n);
  clmoe_check_result res;
  memset(&res, 0, sizeof res);
  ck_compare("C", got, ref, (size_t)(m * n), &res);
  CU_ASSERT(res.max_err <= TILE_GEMM_TOL_F32);
  /* The same comparison must fail on one NaN. */
  got[(m * n) / 2] = NAN;
  memset(&res, 0, sizeof res);
  ck_compare("C", got, ref, (size_t)(m * n), &res);
  CU_ASSERT_FALSE(res.max_err <= TILE_GEMM_TOL_F32);
  free(a), free(b), free(got);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&C);
}

/* The probe's verdict, the fast-path switch and the tile build options agree. */
static void test_fastpath_switch(void)
{
  const clmoe_device_caps *caps = clmoe_ctx_caps(test_ctx);
  clmoe_tile_impl impl = clmoe_ctx_tile_impl(test_ctx);
  CU_ASSERT_STRING_EQUAL(clmoe_tile_impl_name(CLMOE_TILE_PORTABLE), "portable");
  CU_ASSERT_STRING_EQUAL(clmoe_tile_impl_name(CLMOE_TILE_NV_MMA), "nv-mma");
  if (caps->vendor != CLMOE_VENDOR_NVIDIA || caps->inline_ptx != 1 || caps->nv_cc_major < 8)
    CU_ASSERT_EQUAL(impl, CLMOE_TILE_PORTABLE);
  CU_ASSERT_STRING_EQUAL(clmoe__tile_options(test_ctx), impl == CLMOE_TILE_NV_MMA ? "-DCLMOE_TILE_PTX=1" : "");
  clmoe_ctx_set_fastpath(test_ctx, 0);
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath(test_ctx), 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_ctx_fastpath_reason(test_ctx), "off"));
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath_for(test_ctx, 1), 0);
  clmoe_ctx_set_fastpath(test_ctx, 1);
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath(test_ctx), 1);
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath_for(test_ctx, 0), 1); /* forced: fp32 operands too */
  clmoe_ctx_set_fastpath(test_ctx, -1); /* auto: on exactly when the tiles are a matrix unit */
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath(test_ctx), impl != CLMOE_TILE_PORTABLE);
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath_for(test_ctx, 1), impl != CLMOE_TILE_PORTABLE);
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath_for(test_ctx, 0), 0); /* auto keeps fp32 operands fp32 */
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_ctx_fastpath_reason(test_ctx), "auto"));
  printf("\n  tile implementation %s, fast path %s\n", clmoe_tile_impl_name(impl),
         clmoe_ctx_fastpath_reason(test_ctx));
}

/* clmoe_gemm (AUTO) sends bf16 A and B to the tile GEMM when the fast path is on, to CLBlast
 * when it is off, and fp32 operands to CLBlast either way; both paths match the reference. */
static void test_auto_hook(void)
{
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.profiling = 1};
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  const int64_t m = 37, n = 29, k = 45;
  clmoe_tensor A = {0}, B = {0}, A32 = {0}, C = {0};
  double *a = NULL, *b = NULL, *got = NULL, ref[37 * 29];
  TEST_OK(ck_uniform(ctx, &A, CLMOE_BF16, 2, (int64_t[]){m, k}, test_seed + 5, -1.0f, 1.0f, &a));
  TEST_OK(ck_uniform(ctx, &B, CLMOE_BF16, 2, (int64_t[]){n, k}, test_seed + 6, -1.0f, 1.0f, &b));
  TEST_OK(clmoe_tensor_create(ctx, &A32, CLMOE_F32, 2, (int64_t[]){m, k}));
  TEST_OK(clmoe_tensor_copy(&A32, &A));
  TEST_OK(clmoe_tensor_create(ctx, &C, CLMOE_F32, 2, (int64_t[]){m, n}));
  ref_gemm(0, 1, m, n, k, 1.0, a, k, b, k, 0.0, ref, n);
  for (int mode = 0; mode < 3; mode++) { /* fast path on, off; fp32 A with it on */
    clmoe_ctx_set_fastpath(ctx, mode != 1);
    clmoe_ctx_profile_clear(ctx);
    TEST_OK(clmoe_tensor_fill(&C, NAN));
    TEST_OK(clmoe_ctx_profile_begin(ctx));
    TEST_OK(clmoe_gemm(ctx, CLMOE_NOTRANS, CLMOE_TRANS, 1.0f, mode == 2 ? &A32 : &A, &B, 0.0f, &C));
    double secs;
    TEST_OK(clmoe_ctx_profile_end(ctx, &secs, NULL));
    CU_ASSERT_EQUAL(test_kernel_ran(ctx, "gemm_tile"), mode == 0);
    CU_ASSERT_EQUAL(test_kernel_ran(ctx, "clblast_sgemm"), mode != 0);
    TEST_OK(ck_read(&C, &got));
    clmoe_check_result res;
    memset(&res, 0, sizeof res);
    ck_compare("C", got, ref, (size_t)(m * n), &res);
    CU_ASSERT(res.max_err <= TILE_GEMM_TOL_F32);
    free(got), got = NULL;
  }
  free(a), free(b);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&A32);
  clmoe_tensor_destroy(&C);
  clmoe_ctx_destroy(ctx);
}

/* The pipelined kernel (gemm_async.cl, asynchronous copies into 2-4 local stages): taken
 * for operands whose rows allow 16-byte copies unless CLMOE_GEMM_ASYNC=0; every block it
 * offers, all four transposes on ragged shapes (K leaves a partial step of 32, M and N
 * partial blocks), a batch with a broadcast A; the register-staged kernel when it is off. */
static void test_gemm_pipelined(void)
{
  static const char *const portable[] = {"64,64,2,2,2", "64,64,2,2,3,16", "128,128,2,2,3"};
  static const char *const matrix[] = {"64,64,2,2,2", "64,64,2,2,3,16", "128,128,2,2,3",
                                       "128,256,2,4,4,16", "256,128,4,2,2", "128,128,2,4,6,16"};
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.profiling = 1};
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  int on_matrix = clmoe_ctx_tile_impl(ctx) != CLMOE_TILE_PORTABLE;
  const char *const *cfg = on_matrix ? matrix : portable;
  int ncfg = on_matrix ? 6 : 3;
  const char *saved = getenv("CLMOE_GEMM_ASYNC");
  char *keep = saved ? strdup(saved) : NULL;
  for (int c = 0; c <= ncfg; c++) {
    setenv("CLMOE_GEMM_ASYNC", c < ncfg ? cfg[c] : "0", 1);
    for (int t = 0; t < 4; t++) {
      tile_gemm_case g = {t >> 1, t & 1, 152, 136, 264, t == 3 ? 2 : 1, t == 3, 0,
                          t == 1 ? CLMOE_BF16 : CLMOE_F32, 1.0f, t == 2 ? 0.5f : 0.0f, 0, 0, 0, 0};
      clmoe_ctx_profile_clear(ctx);
      TEST_OK(clmoe_ctx_profile_begin(ctx));
      clmoe_check_result res;
      memset(&res, 0, sizeof res);
      clmoe_status st = check_tile_gemm_case(ctx, test_seed + 3000 + (uint64_t)(c * 4 + t), &g, &res);
      double secs;
      TEST_OK(clmoe_ctx_profile_end(ctx, &secs, NULL));
      int ok = st == CLMOE_OK && res.max_err <= res.tolerance;
      if (!ok)
        fprintf(stderr, "\n  pipelined gemm %s, layout %d: %s (err %.3g, tol %.3g)\n",
                c < ncfg ? cfg[c] : "off", t, st == CLMOE_OK ? "" : clmoe_last_error(),
                res.max_err, res.tolerance);
      CU_ASSERT(ok);
      CU_ASSERT_EQUAL(test_kernel_ran(ctx, "gemm_async"), c < ncfg);
      CU_ASSERT_EQUAL(test_kernel_ran(ctx, "gemm_tile"), c == ncfg);
    }
  }
  if (keep) setenv("CLMOE_GEMM_ASYNC", keep, 1);
  else unsetenv("CLMOE_GEMM_ASYNC");
  free(keep);
  clmoe_ctx_destroy(ctx);
}

static void test_errors(void)
{
  clmoe_tensor A = {0}, B = {0}, C = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &A, CLMOE_F32, 2, (int64_t[]){4, 5}));
  TEST_OK(clmoe_tensor_create(test_ctx, &B, CLMOE_BF16, 2, (int64_t[]){5, 3}));
  TEST_OK(clmoe_tensor_create(test_ctx, &C, CLMOE_F32, 2, (int64_t[]){4, 3}));
  CU_ASSERT_EQUAL(clmoe_gemm_ex(test_ctx, CLMOE_GEMM_TILE, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &B, 0.0f, &C),
                  CLMOE_ERR_UNSUPPORTED);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "bf16 A and B"));
  CU_ASSERT_EQUAL(clmoe_ctx_set_gemm_tile_block(test_ctx, 96, 96), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "128x256"));
  CU_ASSERT_STRING_EQUAL(clmoe_gemm_backend_name(CLMOE_GEMM_TILE), "tile");
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&C);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "probe verdict and the fast-path switch", test_fastpath_switch);
  test_add_checks(suite, "tile");
  CU_add_test(suite, "tile GEMM: ragged shapes x transposes", test_gemm_sweep);
  CU_add_test(suite, "tile GEMM: every work-group block", test_gemm_blocks);
  CU_add_test(suite, "tile GEMM: the pipelined kernel's blocks x transposes", test_gemm_pipelined);
  CU_add_test(suite, "tile GEMM: k = 0", test_gemm_k0);
  CU_add_test(suite, "tile GEMM: NaN in C with beta 0; NaN in the output fails", test_nan);
  CU_add_test(suite, "clmoe_gemm uses the tile GEMM exactly when the fast path is on", test_auto_hook);
  CU_add_test(suite, "argument errors", test_errors);
}

int main(void) { return test_main("tile", add_tests); }
