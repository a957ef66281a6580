/* CUnit suite: the matrix-unit tile interface and the tile GEMM.
 * The "tile." conformance checks (every tile load, tile_a_from_c, three GEMM cases), a sweep
 * of the tile GEMM over ragged shapes x all four transposes x every work-group block, the
 * fast-path switch and its hook into clmoe_gemm, NaN handling and argument errors. The GEMM
 * runs on the device's own tiles: nv-mma on NVIDIA sm_80+, the portable tiles elsewhere
 * (PoCL in CI), whatever the fast path says, because CLMOE_GEMM_TILE is named explicitly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/tile_check.h"
#include "check/ref/reference.h"
#include "clmoe/paths.h"
#include "test_common.h"
#include "runtime/ptx_sm90a.h" /* clmoe__ptx_sm90a */
#include "tile/tile_internal.h" /* clmoe__tile_options, clmoe__tile_features */

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
  int nblocks = clmoe__tile_features(test_ctx)->matrix_unit ? 3 : 2;
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
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe__tile_options(test_ctx), impl == CLMOE_TILE_NV_MMA ? "-DCLMOE_TILE_IMPL=tile_nv_mma" : "-DCLMOE_TILE_IMPL=tile_portable"));
  clmoe_ctx_set_fastpath(test_ctx, 0);
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath(test_ctx), 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_ctx_fastpath_reason(test_ctx), "off"));
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath_for(test_ctx, 1), 0);
  clmoe_ctx_set_fastpath(test_ctx, 1);
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath(test_ctx), 1);
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath_for(test_ctx, 0), 1); /* forced: fp32 operands too */
  clmoe_ctx_set_fastpath(test_ctx, -1); /* auto: on exactly when the tiles are a matrix unit */
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath(test_ctx), clmoe__tile_features(test_ctx)->matrix_unit);
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath_for(test_ctx, 1), clmoe__tile_features(test_ctx)->matrix_unit);
  CU_ASSERT_EQUAL(clmoe_ctx_fastpath_for(test_ctx, 0), 0); /* auto keeps fp32 operands fp32 */
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_ctx_fastpath_reason(test_ctx), "auto"));
  printf("\n  tile implementation %s, fast path %s\n", clmoe_tile_impl_name(impl),
         clmoe_ctx_fastpath_reason(test_ctx));
}

/* The feature record agrees with the probe's verdict: a matrix unit exactly on nv-mma, the
 * fragment shape of the interface's contract, the build options and the summary the public
 * calls give, and nothing beyond plain arithmetic for the portable tiles. */
static void test_features(void)
{
  const clmoe_tile_features *f = clmoe__tile_features(test_ctx);
  const clmoe_device_caps *caps = clmoe_ctx_caps(test_ctx);
  CU_ASSERT_EQUAL(f->impl, clmoe_ctx_tile_impl(test_ctx));
  CU_ASSERT_STRING_EQUAL(f->name, clmoe_tile_impl_name(f->impl));
  CU_ASSERT_STRING_EQUAL(f->options, clmoe__tile_options(test_ctx));
  CU_ASSERT_PTR_EQUAL(f->summary, clmoe_ctx_tile_summary(test_ctx));
  CU_ASSERT(f->lanes == 32 && f->frag_m == 16 && f->frag_n == 8 && f->frag_k == 16);
  CU_ASSERT_EQUAL(f->matrix_unit, f->impl == CLMOE_TILE_NV_MMA);
  CU_ASSERT_EQUAL(f->inline_ptx, f->impl == CLMOE_TILE_NV_MMA);
  if (f->impl == CLMOE_TILE_PORTABLE) {
    CU_ASSERT(!f->lane_shuffle && !f->async_copy && !f->matrix_load && !f->matrix_store &&
              !f->warp_group);
  } else {
    CU_ASSERT(f->lane_shuffle && f->async_copy && f->matrix_load);
    CU_ASSERT_EQUAL(f->matrix_store, caps->nv_cc_major >= 9);
    CU_ASSERT_EQUAL(f->warp_group, caps->nv_cc_major == 9);
  }
  printf("\n  tile features: %s\n", f->summary);
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

/* Runs every layout (all four transposes on ragged shapes: K leaves a partial step, M and N
 * partial blocks; a batch with a broadcast A) for each block of cfg, set through the knob
 * env of the context, and once with env = "0": kernel must run exactly when a block is set
 * (the register-staged gemm_tile when both knobs' kernels are off). */
static void check_kernel_blocks(const char *env, const char *kernel, const char *const *cfg, int ncfg,
                                uint64_t seed)
{
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.profiling = 1};
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  const char *other = strcmp(env, "CLMOE_GEMM_ASYNC") ? "CLMOE_GEMM_ASYNC" : "CLMOE_GEMM_WGMMA";
  TEST_OK(clmoe_ctx_set_knob(ctx, other, "0"));
  for (int c = 0; c <= ncfg; c++) {
    TEST_OK(clmoe_ctx_set_knob(ctx, env, c < ncfg ? cfg[c] : "0"));
    for (int t = 0; t < 4; t++) {
      tile_gemm_case g = {t >> 1, t & 1, 152, 136, 264, t == 3 ? 2 : 1, t == 3, 0,
                          t == 1 ? CLMOE_BF16 : CLMOE_F32, 1.0f, t == 2 ? 0.5f : 0.0f, 0, 0, 0, 0};
      clmoe_ctx_profile_clear(ctx);
      TEST_OK(clmoe_ctx_profile_begin(ctx));
      clmoe_check_result res;
      memset(&res, 0, sizeof res);
      clmoe_status st = check_tile_gemm_case(ctx, seed + (uint64_t)(c * 4 + t), &g, &res);
      double secs;
      TEST_OK(clmoe_ctx_profile_end(ctx, &secs, NULL));
      int ok = st == CLMOE_OK && res.max_err <= res.tolerance;
      if (!ok)
        fprintf(stderr, "\n  %s %s, layout %d: %s (err %.3g, tol %.3g)\n", kernel, c < ncfg ? cfg[c] : "off",
                t, st == CLMOE_OK ? "" : clmoe_last_error(), res.max_err, res.tolerance);
      CU_ASSERT(ok);
      CU_ASSERT_EQUAL(test_kernel_ran(ctx, kernel), c < ncfg);
      CU_ASSERT_EQUAL(test_kernel_ran(ctx, "gemm_tile"), c == ncfg);
    }
  }
  clmoe_ctx_destroy(ctx);
}

static int on_matrix_unit(void) { return clmoe__tile_features(test_ctx)->matrix_unit; }

/* The pipelined kernel (gemm_async.cl, asynchronous copies into 2-6 local stages): taken
 * for operands whose rows allow 16-byte copies unless CLMOE_GEMM_ASYNC=0. */
static void test_gemm_pipelined(void)
{
  static const char *const portable[] = {"64,64,2,2,2", "64,64,2,2,3,16", "128,128,2,2,3"};
  static const char *const matrix[] = {"64,64,2,2,2", "64,64,2,2,3,16", "128,128,2,2,3",
                                       "128,256,2,4,4,16", "256,128,4,2,2", "128,128,2,4,6,16"};
  if (on_matrix_unit()) check_kernel_blocks("CLMOE_GEMM_ASYNC", "gemm_async", matrix, 6, test_seed + 3000);
  else check_kernel_blocks("CLMOE_GEMM_ASYNC", "gemm_async", portable, 3, test_seed + 3000);
}

/* The warp-group kernel (gemm_wgmma.cl: wgmma on sm_90, the same layouts element by
 * element on the portable tiles): every swizzle (16, 32, 64 k per stage), both pipelines
 * (products in flight across a step or not), one to three warp groups, two 128-column
 * products per warp group. */
static void test_gemm_wgmma(void)
{
  static const char *const portable[] = {"64,128,16,2,0", "128,256,32,3,1", "64,128,64,3,1"};
  static const char *const matrix[] = {"128,128,16,6,1", "128,128,32,3,1", "128,128,32,3,0", "64,128,16,4,1",
                                       "128,256,16,4,1", "64,128,64,2,0", "64,256,16,4,1",
                                       "128,128,64,2,0", "128,128,32,6,0", "128,128,64,3,0"};
  if (on_matrix_unit()) check_kernel_blocks("CLMOE_GEMM_WGMMA", "gemm_wgmma", matrix, 10, test_seed + 3100);
  else check_kernel_blocks("CLMOE_GEMM_WGMMA", "gemm_wgmma", portable, 3, test_seed + 3100);
}

/* PTX retargeting for the warp-group kernel: target, version, marks; text that is not PTX
 * for sm_90 is refused. */
static void test_ptx_sm90a(void)
{
  static const char ptx[] = "//\n.version 7.8\n.target sm_90\n.address_size 64\n"
                            "\t//sm90a wgmma.fence.sync.aligned;\n\t// a comment\n//sm90a }";
  static const char want[] = "//\n.version 8.0\n.target sm_90a\n.address_size 64\n"
                             "\twgmma.fence.sync.aligned;\n\t// a comment\n}";
  unsigned char *out = NULL;
  size_t n = 0;
  TEST_OK(clmoe__ptx_sm90a((const unsigned char *)ptx, sizeof ptx - 1, &out, &n));
  CU_ASSERT_EQUAL(n, sizeof want - 1);
  CU_ASSERT(out && n == sizeof want - 1 && !memcmp(out, want, n));
  free(out), out = NULL;
  static const char already[] = ".version 8.3\n.target sm_90a, debug\n";
  TEST_OK(clmoe__ptx_sm90a((const unsigned char *)already, sizeof already - 1, &out, &n));
  CU_ASSERT(out && n == sizeof already - 1 && !memcmp(out, already, n));
  free(out), out = NULL;
  static const char *const refused[] = {".version 8.0\n.target sm_80\n", ".target sm_900\n", "not ptx"};
  for (int i = 0; i < 3; i++) {
    CU_ASSERT_EQUAL(clmoe__ptx_sm90a((const unsigned char *)refused[i], strlen(refused[i]), &out, &n),
                    CLMOE_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "sm_90"));
  }
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
  CU_add_test(suite, "the feature record of the tile implementation", test_features);
  test_add_checks(suite, "tile");
  CU_add_test(suite, "tile GEMM: ragged shapes x transposes", test_gemm_sweep);
  CU_add_test(suite, "tile GEMM: every work-group block", test_gemm_blocks);
  CU_add_test(suite, "tile GEMM: the pipelined kernel's blocks x transposes", test_gemm_pipelined);
  CU_add_test(suite, "tile GEMM: the warp-group kernel's blocks x transposes", test_gemm_wgmma);
  CU_add_test(suite, "PTX retargeting to sm_90a for the warp-group kernel", test_ptx_sm90a);
  CU_add_test(suite, "tile GEMM: k = 0", test_gemm_k0);
  CU_add_test(suite, "tile GEMM: NaN in C with beta 0; NaN in the output fails", test_nan);
  CU_add_test(suite, "clmoe_gemm uses the tile GEMM exactly when the fast path is on", test_auto_hook);
  CU_add_test(suite, "argument errors", test_errors);
}

int main(void) { return test_main("tile", add_tests); }
