/* CUnit suite: the MLA tile interface's scheduled kernels, each run in a context of its own
 * with profiling on so that the kernel that took a case can be told, against the
 * double-precision reference (1e-2 forward, 3e-2 backward): the double-buffered forward
 * (kernels_cl/mla/mla_tile_async.cl) and backward (mla_tile_bwd_async.cl) with
 * CLMOE_MLA_TC_ASYNC at its default and off, and the warp-group forward (mla_tile_wgmma.cl;
 * wgmma on sm_90, the same layouts through tile_mma elsewhere) under each CLMOE_MLA_TC_WGMMA
 * schedule. Also the packed bf16 copies of fp32 operands that feed them on a matrix unit
 * (lib/mla/mla_tile_bwa.c), bit for bit. On a device without a matrix unit (PoCL in CI) the
 * kernels run on the portable tiles (tile.cl). The tile kernels' shapes, the fast path's
 * dispatch and the layer on it: test_mla_tile.c. */
#include <stdlib.h>
#include <string.h>

#include "check/check_mla.h"
#include "check/check_mla_tile.h"
#include "mla/mla_internal.h"   /* clmoe__mla_tile_bf16_copies */
#include "tile/tile_internal.h" /* clmoe__local_mem_optin, clmoe__tile_features */
#include "clmoe/paths.h"
#include "test_common.h"

/* One forward case against the reference (its tolerance: 1e-2), profiled from a clear
 * table, so that test_kernel_ran tells which kernel took it. */
static void forward_case(clmoe_ctx *ctx, uint64_t seed, const ck_mla_tile_case *c, const char *label, int i)
{
  clmoe_check_result res;
  memset(&res, 0, sizeof res);
  clmoe_ctx_profile_clear(ctx);
  TEST_OK(clmoe_ctx_profile_begin(ctx));
  TEST_OK(ck_mla_tile_forward(ctx, seed, &res, c));
  double secs;
  TEST_OK(clmoe_ctx_profile_end(ctx, &secs, NULL));
  if (!(res.max_err <= res.tolerance))
    fprintf(stderr, "\n  %s case %d: error %.3g > %.3g at %s\n", label, i, res.max_err, res.tolerance, res.worst);
  CU_ASSERT(res.max_err <= res.tolerance);
}

/* The double-buffered forward (mla_tile_async.cl) takes bf16 inputs with 8-aligned strides
 * and Dv a multiple of 16; CLMOE_MLA_TC_ASYNC=0 sends them to mla_tile_fwd; f32 inputs and
 * odd sizes always go there (the warp-group kernel off). The report's sizes packed (128-row
 * tiles), small sizes with partial key blocks (64-row tiles), an f32 case. */
static void test_async_forward(void)
{
  static const int32_t lens[5] = {17, 300, 1, 64, 130};
  const ck_mla_tile_case cs[3] = {
      {1, 0, 1, 128, 64, 128, lens, 5, CLMOE_BF16, CLMOE_BF16, CLMOE_MLA_ATTN_TILE128, 1},
      {2, 97, 3, 16, 8, 16, NULL, 0, CLMOE_BF16, CLMOE_BF16, CLMOE_MLA_ATTN_TILE64, 1},
      {1, 75, 1, 16, 8, 16, NULL, 0, CLMOE_F32, CLMOE_F32, CLMOE_MLA_ATTN_TILE64, 1}};
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.profiling = 1};
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_MLA_TC_WGMMA", "0"));
  for (int off = 0; off < 2; off++) {
    TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_MLA_TC_ASYNC", off ? "0" : "")); /* "": the default */
    TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_MLA_TC_BWD", "1"));
    for (int i = 0; i < 3; i++) {
      forward_case(ctx, test_seed + 900 + (uint64_t)i, &cs[i], off ? "async off" : "async on", i);
      /* fp32 operands get bf16 copies on a matrix unit (lib/mla/mla_tile_bwa.c) */
      const int async = !off && (cs[i].dtype == CLMOE_BF16 || clmoe__tile_features(ctx)->matrix_unit);
      CU_ASSERT_EQUAL(test_kernel_ran(ctx, "mla_tile_fwd_async"), async);
      CU_ASSERT_EQUAL(test_kernel_ran(ctx, "mla_tile_fwd"), !async);
    }
  }
  clmoe_ctx_destroy(ctx);
}

/* The warp-group forward (mla_tile_wgmma.cl: wgmma on sm_90, the same layouts through
 * tile_mma elsewhere) with CLMOE_MLA_TC_WGMMA set: the report's sizes packed (128-row
 * tiles), a partial key block and odd lengths with 64-row tiles and a K row of one
 * 64-column block; Dv other than 128 goes to the other kernels. */
static void test_wgmma_forward(void)
{
  static const int32_t lens[5] = {17, 300, 1, 64, 130};
  const ck_mla_tile_case cs[3] = {
      {1, 0, 1, 128, 64, 128, lens, 5, CLMOE_BF16, CLMOE_BF16, CLMOE_MLA_ATTN_TILE128, 1},
      {2, 97, 3, 32, 16, 128, NULL, 0, CLMOE_BF16, CLMOE_F32, CLMOE_MLA_ATTN_TILE64, 1},
      {1, 75, 1, 16, 8, 16, NULL, 0, CLMOE_BF16, CLMOE_BF16, CLMOE_MLA_ATTN_TILE64, 1}};
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.profiling = 1};
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  /* the device's choice on the 3 cases (64-key blocks, the warp groups taking turns, where
   * the local memory holds them); on the first (128-row tiles) 32-key blocks 2 ahead taking
   * turns (76 KB) and, on a matrix unit, 64-key blocks in step (98 KB; under the portable
   * tiles that schedule differs from the turns' by a V buffer only): devices that grant 96
   * KB run them */
  static const char *const cfg[5] = {"1", "1", "1", "32,2", "64,1,0"};
  const int roomy = clmoe__local_mem_optin(ctx) >= 96 * 1024;
  const int ncase = clmoe__tile_features(ctx)->matrix_unit ? 5 : 4;
  for (int t = 0; t < ncase; t++) {
    const int i = t < 3 ? t : 0;
    TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_MLA_TC_WGMMA", cfg[t]));
    /* the 5 sequences' tiles in launches of 2 tiles (the host splits at 65535) */
    TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_MLA_TC_TILES_PER_LAUNCH", t == 0 ? "2" : ""));
    forward_case(ctx, test_seed + 950 + (uint64_t)t, &cs[i], cfg[t], i);
    if (t < 3 || roomy) CU_ASSERT_EQUAL(test_kernel_ran(ctx, "mla_tile_fwd_wgmma"), cs[i].Dv == 128);
  }
  clmoe_ctx_destroy(ctx);
}

/* The double-buffered backward (mla_tile_bwd_async.cl) against the reference and the
 * portable backward, CLMOE_MLA_TC_BWD=1 with CLMOE_MLA_TC_ASYNC at its default and off:
 * bf16 inputs (batches, 3 heads, partial blocks; the report's sizes packed) take it; fp32
 * ones through bf16 copies on a matrix unit only, else mla_tile_bwd.cl. */
static void test_async_backward(void)
{
  static const int32_t lens[3] = {150, 1, 90};
  const ck_mla_tile_case cs[3] = {
      {2, 97, 3, 16, 8, 16, NULL, 0, CLMOE_BF16, CLMOE_BF16, CLMOE_MLA_ATTN_TILE64, 1},
      {1, 0, 1, 128, 64, 128, lens, 3, CLMOE_BF16, CLMOE_F32, CLMOE_MLA_ATTN_TILE128, 1},
      {1, 75, 2, 16, 8, 16, NULL, 0, CLMOE_F32, CLMOE_F32, CLMOE_MLA_ATTN_TILE64, 1}};
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.profiling = 1};
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  clmoe_ctx_set_fastpath(ctx, 1);
  for (int off = 0; off < 2; off++) {
    TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_MLA_TC_ASYNC", off ? "0" : ""));
    TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_MLA_TC_BWD", "1"));
    for (int i = 0; i < 3; i++) {
      clmoe_check_result res;
      memset(&res, 0, sizeof res);
      clmoe_ctx_profile_clear(ctx);
      TEST_OK(clmoe_ctx_profile_begin(ctx));
      TEST_OK(ck_mla_tile_backward(ctx, test_seed + 980 + (uint64_t)i, &res, &cs[i], 3e-2));
      double secs;
      TEST_OK(clmoe_ctx_profile_end(ctx, &secs, NULL));
      if (!(res.max_err <= res.tolerance)) fprintf(stderr, "\n  async %d case %d: %s\n", !off, i, res.worst);
      CU_ASSERT(res.max_err <= res.tolerance);
      const int async = !off && (cs[i].dtype == CLMOE_BF16 || clmoe__tile_features(ctx)->matrix_unit);
      CU_ASSERT_EQUAL(test_kernel_ran(ctx, "mla_tile_bwd_kv_async"), async);
      CU_ASSERT_EQUAL(test_kernel_ran(ctx, "mla_tile_bwd_q_async"), async);
      CU_ASSERT_EQUAL(test_kernel_ran(ctx, "mla_tile_bwd_kv"), !async);
    }
  }
  clmoe_ctx_destroy(ctx);
}

/* fp32 x as bf16 bits, nearest even. */
static uint16_t bf16_bits(float x)
{
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The packed bf16 copies of fp32 operands (mla_tile_to_bf16; used on matrix units only, run
 * everywhere here): q [M, H, 24], k_nope and v interleaved per head in kv [M, H, 16 + 16] as
 * the layer keeps them, k_rope [M, 8]; each element the nearest-even bf16 of its source. */
static void test_bf16_copies(void)
{
  enum { M = 37, H = 3, DN = 16, DR = 8, DV = 16 };
  clmoe_tensor q, kv, kr;
  double *hq = NULL, *hkv = NULL, *hkr = NULL;
  const int64_t sq[3] = {M, H, DN + DR}, skv[3] = {M, H, DN + DV}, skr[2] = {M, DR};
  TEST_OK(ck_uniform(test_ctx, &q, CLMOE_F32, 3, sq, test_seed + 990, -3.0f, 3.0f, &hq));
  TEST_OK(ck_uniform(test_ctx, &kv, CLMOE_F32, 3, skv, test_seed + 991, -3.0f, 3.0f, &hkv));
  TEST_OK(ck_uniform(test_ctx, &kr, CLMOE_F32, 2, skr, test_seed + 992, -3.0f, 3.0f, &hkr));
  mla_attn_desc a = {M, H, DN, DR, DV, 0, 0.2f, {0}, {0}, {0}, {0}}, ab;
  a.q = (mla_operand){q.buf, (cl_ulong)q.offset, H * (DN + DR), DN + DR};
  a.kn = (mla_operand){kv.buf, (cl_ulong)kv.offset, H * (DN + DV), DN + DV};
  a.kr = (mla_operand){kr.buf, (cl_ulong)kr.offset, DR, 0};
  a.v = (mla_operand){kv.buf, (cl_ulong)kv.offset + DN, H * (DN + DV), DN + DV};
  mla_bf16_copies c;
  TEST_OK(clmoe__mla_tile_bf16_copies(test_ctx, &a, &ab, &c));
  CU_ASSERT_EQUAL(ab.in_bf16, 1);
  const int width[4] = {DN + DR, DN, DR, DV}, heads[4] = {H, H, 1, H};
  const mla_operand *op[4] = {&ab.q, &ab.kn, &ab.kr, &ab.v};
  int bad = 0;
  for (int i = 0; i < 4; i++) {
    CU_ASSERT(op[i]->buf == c.mem[i] && op[i]->off == 0);
    CU_ASSERT_EQUAL(op[i]->ts, (cl_uint)(heads[i] * width[i]));
    CU_ASSERT_EQUAL(op[i]->hs, i == 2 ? 0u : (cl_uint)width[i]);
    const size_t n = (size_t)M * (size_t)heads[i] * (size_t)width[i];
    uint16_t *got = malloc(n * sizeof *got);
    CU_ASSERT_FATAL(got != NULL);
    CU_ASSERT_EQUAL_FATAL(clEnqueueReadBuffer(test_ctx->queue, c.mem[i], CL_TRUE, 0, n * 2, got, 0, NULL, NULL),
                          CL_SUCCESS);
    for (size_t e = 0; e < n; e++) {
      const size_t m = e / ((size_t)heads[i] * width[i]), h = e / (size_t)width[i] % (size_t)heads[i];
      const size_t d = e % (size_t)width[i];
      const double x = i == 0 ? hq[e] : i == 2 ? hkr[e] : hkv[(m * H + h) * (DN + DV) + (i == 3 ? DN : 0) + d];
      bad += got[e] != bf16_bits((float)x);
    }
    free(got);
  }
  CU_ASSERT_EQUAL(bad, 0);
  clmoe__mla_tile_bf16_release(test_ctx, &c);
  clmoe_tensor_destroy(&q), clmoe_tensor_destroy(&kv), clmoe_tensor_destroy(&kr);
  free(hq), free(hkv), free(hkr);
}

static void add_tests(CU_pSuite suite)
{
  printf("\n  tile implementation: %s\n", clmoe_tile_impl_name(clmoe_ctx_tile_impl(test_ctx)));
  CU_add_test(suite, "double-buffered forward (bf16, aligned) and the single-buffered one", test_async_forward);
  CU_add_test(suite, "warp-group forward (bf16, aligned, Dv 128)", test_wgmma_forward);
  CU_add_test(suite, "double-buffered backward (bf16, aligned; fp32 through copies on a matrix unit)",
              test_async_backward);
  CU_add_test(suite, "packed bf16 copies of fp32 operands (strided, interleaved)", test_bf16_copies);
}

int main(void) { return test_main("mla_tile_async", add_tests); }
