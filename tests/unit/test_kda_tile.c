/* CUnit suite: KDA on the tile interface. clmoe_kda_forward_tile against the
 * double reference over T (1 .. 300, partial chunks), H, B, K, V, storage types, packed
 * sequences, initial states, state work-group sizes, copy-ring depths and gate extremes on
 * the default state pass (the register state fed by a copy ring); the 16-token staged pass
 * (CLMOE_KDA_TC_STEP=16) around its look-ahead's turns, packed sequences, warps and gate
 * extremes; against the portable chunked path; and the dispatch of
 * clmoe_kda_forward (the fast path forced on, so it runs on any device, with the portable
 * tiles where there is no matrix unit). Tolerance TOL_KDA_TILE (1e-2, bf16 operands) in
 * ck_compare's measure; NaN or Inf fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_kda_tile.h"
#include "clmoe/paths.h"
#include "test_common.h"

/* The state pass of the calls below: 16 or 64 tokens per step (the knob CLMOE_KDA_TC_STEP of
 * the test's context, read by lib/kda/kda_tile_fwd.c at every call); 0 restores the default. */
static void set_step(int step)
{
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_TC_STEP", step ? (step == 16 ? "16" : "64") : NULL));
}

static void run_cases_step(const kda_tile_case *cases, int n, int step)
{
  set_step(step);
  for (int i = 0; i < n; i++) {
    clmoe_check_result res = {0};
    res.passed = 1;
    clmoe_status st = ck_kda_tile_case(test_ctx, test_seed + 101 * (uint64_t)i, &cases[i], &res);
    if (st != CLMOE_OK)
      fprintf(stderr, "\n  case %d: %s: %s\n", i, clmoe_strerror(st), clmoe_last_error());
    CU_ASSERT_EQUAL_FATAL(st, CLMOE_OK);
    const int ok = res.max_err <= res.tolerance;
    if (!ok || getenv("CLMOE_TEST_VERBOSE"))
      fprintf(stderr, "\n  case %d, step %d (B %lld T %lld H %lld K %lld V %lld): max error %.3g (tolerance "
              "%.3g), worst %s, seed %llu", i, step, (long long)cases[i].B, (long long)cases[i].T,
              (long long)cases[i].H, (long long)cases[i].K, (long long)cases[i].V, res.max_err,
              res.tolerance, res.worst, (unsigned long long)test_seed);
    CU_ASSERT(ok);
  }
  set_step(0);
}

/* Every case with the default state pass (the register state fed by the copy ring);
 * test_step16 covers the other. */
static void run_cases(const kda_tile_case *cases, int n) { run_cases_step(cases, n, 0); }

#define F CLMOE_F32
#define BF CLMOE_BF16
#define UNI KDA_TILE_Z_UNIFORM

/* T across chunk boundaries, B 2, H 1-3, K = V = 32, with and without initial state; the
 * state pass with 1, 2 and 3 chunks copied ahead (rings of 2, 3 and 4 stages). */
static void test_lengths(void)
{
  static const kda_tile_case c[] = {
      {2, 1, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {2, 15, 1, 32, 32, NULL, 0, 0, F, F, UNI, 0.0f, 0, 0, 0},
      {2, 16, 3, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {2, 17, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {2, 100, 3, 32, 32, NULL, 0, 0, F, F, UNI, 0.0f, 0, 0, 1},
      {2, 300, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 3},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

/* Head sizes: 64, K != V, 128, 16; bf16 storage and bf16 o; 1 and 4 state warps; lb -1.
 * (Few distinct kernel builds: PoCL compiles each in seconds.) */
static void test_shapes(void)
{
  static const kda_tile_case c[] = {
      {2, 100, 2, 64, 64, NULL, 0, 1, BF, BF, UNI, 0.0f, 0, 0, 0},
      {1, 77, 2, 32, 64, NULL, 0, 1, F, F, UNI, 0.0f, 0, 1, 1},
      {2, 50, 1, 64, 32, NULL, 0, 1, BF, F, UNI, 0.0f, 0, 4, 0},
      {1, 130, 1, 128, 128, NULL, 0, 1, BF, BF, UNI, 0.0f, 0, 0, 0},
      {1, 33, 2, 16, 16, NULL, 0, 1, BF, F, UNI, -1.0f, 0, 0, 0},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

/* Packed sequences (one of length 0, partial chunks), with and without initial states,
 * look-ahead 2 and 1. */
static void test_packed(void)
{
  static const int32_t lens[] = {1, 15, 16, 17, 40, 3}, lens_empty[] = {5, 0, 33};
  static const kda_tile_case c[] = {
      {1, 0, 2, 64, 64, lens, 6, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {1, 0, 3, 32, 32, lens_empty, 3, 1, BF, BF, UNI, 0.0f, 0, 0, 0},
      {1, 0, 1, 32, 32, lens, 6, 0, F, F, UNI, 0.0f, 0, 0, 1},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

/* Gate logits of +-1e4, and g = lb = -5 on every channel of a long sequence (the largest
 * anchored factors, e^75): finite and within tolerance. */
static void test_extremes(void)
{
  static const kda_tile_case c[] = {
      {2, 100, 2, 64, 64, NULL, 0, 1, F, F, KDA_TILE_Z_EXTREME, -5.0f, 0, 0, 0},
      {1, 300, 1, 32, 32, NULL, 0, 1, BF, BF, KDA_TILE_Z_EXTREME, -5.0f, 0, 0, 0},
      {1, 4096, 1, 32, 32, NULL, 0, 1, F, F, KDA_TILE_Z_SATURATE, -5.0f, 0, 0, 0},
      {1, 1000, 2, 16, 16, NULL, 0, 1, BF, F, KDA_TILE_Z_SATURATE, -0.5f, 0, 0, 0},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

/* The 16-token pass that stages S through local memory (CLMOE_KDA_TC_STEP=16) around its
 * look-ahead's turns (1 and 2 register sets; partial last chunks): T = 1, 63, 65, 129 (none
 * a multiple of 16 but 1); initial and final states; packed sequences of lengths around 64
 * (and 0, 1); 2 (the default) and 4 warps of 8 columns; the extreme gates over long
 * sequences (decays down to e^-320 across 64 tokens: the per-chunk anchors keep every
 * factor finite). The shapes of the cases above, so few new kernel builds. */
static void test_step16(void)
{
  static const int32_t lens[] = {63, 64, 65, 1, 0, 128, 127, 17};
  static const kda_tile_case c[] = {
      {2, 1, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {1, 63, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {2, 65, 3, 32, 32, NULL, 0, 0, F, F, UNI, 0.0f, 0, 0, 0},
      {1, 129, 1, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 1, 0, 1},
      {1, 0, 2, 64, 64, lens, 8, 1, F, F, UNI, 0.0f, 0, 0, 3},
      {1, 0, 1, 64, 64, lens, 8, 0, F, F, UNI, 0.0f, 0, 4, 2},
      {1, 0, 1, 32, 32, lens, 8, 1, F, F, KDA_TILE_Z_SATURATE, -5.0f, 0, 0, 0},
      {2, 129, 2, 64, 64, NULL, 0, 1, F, F, KDA_TILE_Z_EXTREME, -5.0f, 0, 0, 0},
  };
  run_cases_step(c, (int)(sizeof c / sizeof c[0]), 16);
}

/* Devices with less local memory (the knob CLMOE_LOCAL_MEM_BYTES of a second context), K = V = 64:
 * 25,000 bytes (the ring with 2 stages and 1 warp; 3 stages and 2 warps need 37.6 KB with
 * the portable tiles' scratch) and 21,000 (no ring fits: the 16-token pass, whose build
 * test_step16 made). */
static void test_local_budget(void)
{
  static const kda_tile_case c = {1, 40, 1, 64, 64, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0};
  static const char *budgets[] = {"25000", "21000"};
  for (int i = 0; i < 2; i++) {
    clmoe_ctx *ctx = NULL;
    clmoe_status st = clmoe_ctx_create(&ctx, NULL);
    CU_ASSERT_EQUAL_FATAL(st, CLMOE_OK);
    TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_LOCAL_MEM_BYTES", budgets[i]));
    CU_ASSERT_EQUAL(clmoe_ctx_caps(ctx)->local_mem_bytes, (size_t)strtoul(budgets[i], NULL, 10));
    clmoe_check_result res = {0};
    res.passed = 1;
    st = ck_kda_tile_case(ctx, test_seed + 31 * (uint64_t)i, &c, &res);
    if (st != CLMOE_OK) fprintf(stderr, "\n  budget %s: %s: %s\n", budgets[i], clmoe_strerror(st), clmoe_last_error());
    CU_ASSERT_EQUAL(st, CLMOE_OK);
    if (!(res.max_err <= res.tolerance))
      fprintf(stderr, "\n  budget %s: max error %.3g (tolerance %.3g), worst %s", budgets[i], res.max_err,
              res.tolerance, res.worst);
    CU_ASSERT(res.max_err <= res.tolerance);
    clmoe_ctx_destroy(ctx);
  }
}

/* The unbounded gate (decays to -50 per token) at short and packed lengths (empty sequences,
 * partial chunks), K = V = 16 and 32, on both state passes; also against the portable path and
 * the device's token loop. */
static void test_unbounded(void)
{
  static const int32_t lens[] = {17, 0, 1, 16, 15, 33};
  static const kda_tile_case c[] = {
      {2, 1, 1, 32, 32, NULL, 0, 1, F, F, KDA_TILE_Z_KIMI, 0.0f, 2, 0, 0},
      {1, 47, 2, 32, 32, NULL, 0, 0, F, F, KDA_TILE_Z_KIMI_MIX, 0.0f, 2, 0, 0},
      {1, 0, 2, 16, 16, lens, 6, 1, F, F, KDA_TILE_Z_KIMI, 0.0f, 2, 0, 0},
      {1, 0, 1, 32, 32, lens, 6, 1, BF, F, KDA_TILE_Z_KIMI, 0.0f, 2, 0, 0},
  };
  run_cases_step(c, (int)(sizeof c / sizeof c[0]), 0);
  run_cases_step(c, (int)(sizeof c / sizeof c[0]), 16);
}

/* The tile path against the portable chunked path (both compared with the reference too). */
static void test_vs_portable(void)
{
  static const int32_t lens[] = {20, 7, 64};
  static const kda_tile_case c[] = {
      {2, 45, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 1, 0, 0},
      {1, 0, 2, 64, 64, lens, 3, 1, BF, BF, UNI, 0.0f, 1, 0, 0},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

static void read_all(const clmoe_tensor *t, float *buf) { TEST_OK(clmoe_tensor_read_f32(t, buf)); }

/* clmoe_kda_forward with the fast path on: the tile result for covered calls (the unbounded
 * gate's too), the portable result (bit for bit) for K not a multiple of 16, which the
 * explicit entry refuses. */
static void test_dispatch(void)
{
  enum { T = 40, H = 2, D = 32, D2 = 24 };
  clmoe_tensor q, v, b, A, dt, o1, o2, q2, dt2, o3;
  const int64_t sk[4] = {1, T, H, D}, sb[3] = {1, T, H}, sdt[2] = {H, D}, nh = H;
  const int64_t sk2[4] = {1, T, H, D2}, sdt2[2] = {H, D2};
  static float x[T * H * D], y[T * H * D];
  TEST_OK(clmoe_tensor_create(test_ctx, &q, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &v, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &b, CLMOE_F32, 3, sb));
  TEST_OK(clmoe_tensor_create(test_ctx, &A, CLMOE_F32, 1, &nh));
  TEST_OK(clmoe_tensor_create(test_ctx, &dt, CLMOE_F32, 2, sdt));
  TEST_OK(clmoe_tensor_create(test_ctx, &o1, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &o2, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &q2, CLMOE_F32, 4, sk2));
  TEST_OK(clmoe_tensor_create(test_ctx, &dt2, CLMOE_F32, 2, sdt2));
  TEST_OK(clmoe_tensor_create(test_ctx, &o3, CLMOE_F32, 4, sk2));
  TEST_OK(clmoe_tensor_fill_uniform(&q, test_seed, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&v, test_seed + 1, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&b, test_seed + 2, -2.0f, 2.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&A, test_seed + 3, -0.5f, 0.5f));
  TEST_OK(clmoe_tensor_fill_uniform(&dt, test_seed + 4, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&q2, test_seed + 5, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&dt2, test_seed + 6, -1.0f, 1.0f));
  const size_t n = (size_t)(T * H * D);
  clmoe_kda_inputs in = {&q, &q, &v, &q, &b, &A, &dt, NULL, NULL};
  clmoe_kda_options bnd = {0}, unb = {.gate = CLMOE_KDA_GATE_UNBOUNDED};

  clmoe_ctx_set_fastpath(test_ctx, 1);
  TEST_OK(clmoe_kda_forward(test_ctx, &bnd, &in, &o1, NULL));
  TEST_OK(clmoe_kda_forward_tile(test_ctx, &bnd, &in, &o2, NULL, NULL));
  read_all(&o1, x);
  read_all(&o2, y);
  CU_ASSERT(memcmp(x, y, n * sizeof x[0]) == 0); /* the tile path was taken */
  clmoe_ctx_set_fastpath(test_ctx, 0);
  TEST_OK(clmoe_kda_forward(test_ctx, &bnd, &in, &o2, NULL));
  read_all(&o2, y);
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)x[i] - y[i]));
  CU_ASSERT(worst > 0.0 && worst < 0.05); /* a different computation, the same result */

  /* Unbounded gate: the tile path with the fast path on (the explicit entry's bits), finite
   * and near the portable result. */
  TEST_OK(clmoe_kda_forward(test_ctx, &unb, &in, &o2, NULL));
  clmoe_ctx_set_fastpath(test_ctx, 1);
  TEST_OK(clmoe_kda_forward(test_ctx, &unb, &in, &o1, NULL));
  read_all(&o1, x);
  read_all(&o2, y);
  worst = 0.0;
  int finite = 1;
  for (size_t i = 0; i < n; i++) {
    finite = finite && isfinite(x[i]);
    worst = fmax(worst, fabs((double)x[i] - y[i]));
  }
  CU_ASSERT(finite);
  CU_ASSERT(worst > 0.0 && worst < 0.05);
  TEST_OK(clmoe_kda_forward_tile(test_ctx, &unb, &in, &o2, NULL, NULL));
  read_all(&o2, y);
  CU_ASSERT(memcmp(x, y, n * sizeof x[0]) == 0);

  /* K = V = 24: not covered either. */
  clmoe_kda_inputs in2 = {&q2, &q2, &q2, &q2, &b, &A, &dt2, NULL, NULL};
  CU_ASSERT_EQUAL(clmoe_kda_forward_tile(test_ctx, &bnd, &in2, &o3, NULL, NULL), CLMOE_ERR_UNSUPPORTED);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "multiples of 16"));
  const size_t n2 = (size_t)(T * H * D2);
  TEST_OK(clmoe_kda_forward(test_ctx, &bnd, &in2, &o3, NULL));
  read_all(&o3, x);
  clmoe_ctx_set_fastpath(test_ctx, 0);
  TEST_OK(clmoe_kda_forward(test_ctx, &bnd, &in2, &o3, NULL));
  read_all(&o3, y);
  CU_ASSERT(memcmp(x, y, n2 * sizeof x[0]) == 0);
  clmoe_ctx_set_fastpath(test_ctx, 1);

  clmoe_tensor *all[] = {&q, &v, &b, &A, &dt, &o1, &o2, &q2, &dt2, &o3};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
}

static void add_tests(CU_pSuite suite)
{
  clmoe_ctx_set_fastpath(test_ctx, 1); /* the tile path on any device */
  CU_add_test(suite, "T 1..300 across chunk boundaries, B 2, H 1-3", test_lengths);
  CU_add_test(suite, "K, V 16..128, bf16 storage and output, state warps", test_shapes);
  CU_add_test(suite, "packed sequences", test_packed);
  CU_add_test(suite, "gate extremes: +-1e4, g = lb on every channel", test_extremes);
  CU_add_test(suite, "16-token staged pass: boundaries, packed, warps, extremes", test_step16);
  CU_add_test(suite, "less local memory: fewer ring stages and warps, the 16-token pass", test_local_budget);
  CU_add_test(suite, "unbounded gate: short and packed lengths, K 16 and 32, both state passes", test_unbounded);
  CU_add_test(suite, "tile path against the portable path", test_vs_portable);
  CU_add_test(suite, "clmoe_kda_forward dispatch", test_dispatch);
  test_add_checks(suite, "kda_tile.forward"); /* kda_tile.backward: test_kda_tile_bwd */
}

int main(void) { return test_main("kda_tile", add_tests); }
