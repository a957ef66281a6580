/* CUnit suite: the KDA backward on the tile interface. clmoe_kda_backward_tile
 * against the double reference's analytic backward (check/ref/ref_kda.c), every gradient,
 * over T (1, partial chunks), B, H, K, V, storage types, packed sequences (one empty),
 * initial state with dfinal_state, state work-group sizes and the gate's bounded extremes;
 * against the portable backward; the dispatch of clmoe_kda_backward; and the conformance
 * checks "kda_tile.backward" (clmoe-xcheck's). The fast path is
 * forced on, so the portable tiles run where there is no matrix unit (PoCL in CI).
 * Tolerance TOL_KDA_TILE_BWD (3e-2 of each gradient's largest magnitude, dA_log's of the sum
 * of its terms' magnitudes; bf16 operands); the gradients start as NaN, and NaN or Inf
 * anywhere fails. Shapes stay small: PoCL compiles
 * one program per (K, V, storage, warps). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_kda_tile.h"
#include "kda/kda_internal.h" /* clmoe__kda_kept_saved */
#include "clmoe/kda_layer.h"
#include "clmoe/paths.h"
#include "test_common.h"

/* kept: 0 the backward alone, 1 on the factors its forward kept, 2 after a forward that
 * must keep none (ck_kda_tile_bwd_unkept_case) */
static void run_cases_with(const kda_tile_case *cases, int n, int kept)
{
  for (int i = 0; i < n; i++) {
    clmoe_check_result res = {0};
    res.passed = 1;
    const uint64_t seed = test_seed + 211 * (uint64_t)i;
    clmoe_status st = kept == 1   ? ck_kda_tile_bwd_kept_case(test_ctx, seed, &cases[i], &res)
                      : kept == 2 ? ck_kda_tile_bwd_unkept_case(test_ctx, seed, &cases[i], &res)
                                  : ck_kda_tile_bwd_case(test_ctx, seed, &cases[i], &res);
    if (st != CLMOE_OK)
      fprintf(stderr, "\n  case %d: %s: %s\n", i, clmoe_strerror(st), clmoe_last_error());
    CU_ASSERT_EQUAL_FATAL(st, CLMOE_OK);
    const int ok = res.max_err <= res.tolerance;
    if (!ok || getenv("CLMOE_TEST_VERBOSE"))
      fprintf(stderr, "\n  case %d (B %lld T %lld H %lld K %lld V %lld): max error %.3g (tolerance %.3g), "
              "worst %s, seed %llu", i, (long long)cases[i].B, (long long)cases[i].T,
              (long long)cases[i].H, (long long)cases[i].K, (long long)cases[i].V, res.max_err,
              res.tolerance, res.worst, (unsigned long long)test_seed);
    CU_ASSERT(ok);
  }
}

static void run_cases(const kda_tile_case *cases, int n) { run_cases_with(cases, n, 0); }

#define F CLMOE_F32
#define BF CLMOE_BF16
#define UNI KDA_TILE_Z_UNIFORM

/* T = 1, one partial chunk, 16, 17 and several chunks; B 2, H 1-2, K = V = 32; with and
 * without initial state + dfinal_state. */
static void test_lengths(void)
{
  static const kda_tile_case c[] = {
      {2, 1, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {1, 15, 1, 32, 32, NULL, 0, 0, F, F, UNI, 0.0f, 0, 0, 0},
      {2, 16, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {2, 17, 1, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {1, 70, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

/* K = V = 16 with lb -1, K < V with 2 state warps (the default follows the compute units),
 * K = 128 > V with bf16 storage and one state warp (each line one more program build on
 * PoCL). */
static void test_shapes(void)
{
  static const kda_tile_case c[] = {
      {1, 33, 2, 16, 16, NULL, 0, 1, F, F, UNI, -1.0f, 0, 0, 0},
      {1, 40, 1, 32, 64, NULL, 0, 1, F, F, UNI, 0.0f, 0, 2, 0},
      {1, 21, 2, 128, 64, NULL, 0, 1, BF, F, UNI, 0.0f, 0, 1, 0},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

/* Packed sequences: partial chunks, one of length 0, initial states. */
static void test_packed(void)
{
  static const int32_t lens[] = {1, 15, 16, 17, 40, 3}, lens_empty[] = {5, 0, 33};
  static const kda_tile_case c[] = {
      {1, 0, 2, 32, 32, lens, 6, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {1, 0, 1, 32, 32, lens_empty, 3, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {1, 0, 2, 32, 32, lens, 6, 0, F, F, UNI, 0.0f, 0, 0, 0},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

/* Gate logits of +-1e4 (g at lb or 0 per channel), and g = lb = -5 on every channel (the
 * largest anchored factors, e^75, and states decaying to nothing). */
static void test_extremes(void)
{
  static const kda_tile_case c[] = {
      {1, 64, 2, 32, 32, NULL, 0, 1, F, F, KDA_TILE_Z_EXTREME, -5.0f, 0, 0, 0},
      {1, 50, 1, 32, 32, NULL, 0, 1, F, F, KDA_TILE_Z_SATURATE, -5.0f, 0, 0, 0},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

/* The tile backward against the portable one (both against the reference too). */
static void test_vs_portable(void)
{
  static const int32_t lens[] = {20, 7, 35};
  static const kda_tile_case c[] = {
      {2, 30, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 1, 0, 0},
      {1, 0, 1, 32, 32, lens, 3, 1, F, F, UNI, 0.0f, 1, 0, 0},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

/* Every gradient of one call, read back to the host ([B, T, H] layouts, fp32). */
enum { NGR = 7, T = 24, H = 2, D = 32, D2 = 24 };
typedef struct grads_set {
  clmoe_tensor t[NGR];
  clmoe_kda_grads g;
} grads_set;

static void grads_make(grads_set *s, int64_t d)
{
  const int64_t sk[4] = {1, T, H, d}, sb[3] = {1, T, H}, sdt[2] = {H, d}, nh = H;
  const int64_t *shape[NGR] = {sk, sk, sk, sk, sb, &nh, sdt};
  const int rank[NGR] = {4, 4, 4, 4, 3, 1, 2};
  for (int i = 0; i < NGR; i++) TEST_OK(clmoe_tensor_create(test_ctx, &s->t[i], CLMOE_F32, rank[i], shape[i]));
  clmoe_kda_grads g = {&s->t[0], &s->t[1], &s->t[2], &s->t[3], &s->t[4], &s->t[5], &s->t[6], NULL};
  s->g = g;
}

/* 1 when both sets hold the same bits. */
static int grads_equal(const grads_set *a, const grads_set *b)
{
  static float x[T * H * D], y[T * H * D];
  int same = 1;
  for (int i = 0; i < NGR; i++) {
    const size_t n = (size_t)clmoe_tensor_numel(&a->t[i]);
    TEST_OK(clmoe_tensor_read_f32(&a->t[i], x));
    TEST_OK(clmoe_tensor_read_f32(&b->t[i], y));
    same &= memcmp(x, y, n * sizeof x[0]) == 0;
  }
  return same;
}

static void grads_free(grads_set *s)
{
  for (int i = 0; i < NGR; i++) clmoe_tensor_destroy(&s->t[i]);
}

/* clmoe_kda_backward with the fast path on: the tile result for covered calls, the portable
 * result for the unbounded gate and K not a multiple of 16, which the explicit entry
 * refuses. */
static void test_dispatch(void)
{
  clmoe_tensor q, b, A, dt, dO, q2, dt2, dO2;
  const int64_t sk[4] = {1, T, H, D}, sb[3] = {1, T, H}, sdt[2] = {H, D}, nh = H;
  const int64_t sk2[4] = {1, T, H, D2}, sdt2[2] = {H, D2};
  TEST_OK(clmoe_tensor_create(test_ctx, &q, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &b, CLMOE_F32, 3, sb));
  TEST_OK(clmoe_tensor_create(test_ctx, &A, CLMOE_F32, 1, &nh));
  TEST_OK(clmoe_tensor_create(test_ctx, &dt, CLMOE_F32, 2, sdt));
  TEST_OK(clmoe_tensor_create(test_ctx, &dO, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &q2, CLMOE_F32, 4, sk2));
  TEST_OK(clmoe_tensor_create(test_ctx, &dt2, CLMOE_F32, 2, sdt2));
  TEST_OK(clmoe_tensor_create(test_ctx, &dO2, CLMOE_F32, 4, sk2));
  TEST_OK(clmoe_tensor_fill_uniform(&q, test_seed, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&b, test_seed + 2, -2.0f, 2.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&A, test_seed + 3, -0.5f, 0.5f));
  TEST_OK(clmoe_tensor_fill_uniform(&dt, test_seed + 4, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&dO, test_seed + 5, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&q2, test_seed + 6, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&dt2, test_seed + 7, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&dO2, test_seed + 8, -1.0f, 1.0f));
  clmoe_kda_inputs in = {&q, &q, &q, &q, &b, &A, &dt, NULL, NULL};
  clmoe_kda_options bnd = {0}, unb = {.gate = CLMOE_KDA_GATE_UNBOUNDED};
  grads_set g1, g2;
  grads_make(&g1, D);
  grads_make(&g2, D);

  clmoe_ctx_set_fastpath(test_ctx, 1);
  TEST_OK(clmoe_kda_backward(test_ctx, &bnd, &in, &dO, NULL, &g1.g));
  TEST_OK(clmoe_kda_backward_tile(test_ctx, &bnd, &in, &dO, NULL, &g2.g, NULL));
  CU_ASSERT(grads_equal(&g1, &g2)); /* the tile path was taken */
  clmoe_ctx_set_fastpath(test_ctx, 0);
  TEST_OK(clmoe_kda_backward(test_ctx, &bnd, &in, &dO, NULL, &g2.g));
  CU_ASSERT(!grads_equal(&g1, &g2)); /* a different computation (the values: test_vs_portable) */

  /* Unbounded gate: not covered; the portable backward either way, bit for bit. */
  TEST_OK(clmoe_kda_backward(test_ctx, &unb, &in, &dO, NULL, &g2.g));
  clmoe_ctx_set_fastpath(test_ctx, 1);
  TEST_OK(clmoe_kda_backward(test_ctx, &unb, &in, &dO, NULL, &g1.g));
  CU_ASSERT(grads_equal(&g1, &g2));
  CU_ASSERT_EQUAL(clmoe_kda_backward_tile(test_ctx, &unb, &in, &dO, NULL, &g1.g, NULL), CLMOE_ERR_UNSUPPORTED);
  grads_free(&g1);
  grads_free(&g2);

  /* K = V = 24: refused by the explicit entry, portable through the dispatcher. */
  clmoe_kda_inputs in2 = {&q2, &q2, &q2, &q2, &b, &A, &dt2, NULL, NULL};
  grads_make(&g1, D2);
  grads_make(&g2, D2);
  CU_ASSERT_EQUAL(clmoe_kda_backward_tile(test_ctx, &bnd, &in2, &dO2, NULL, &g1.g, NULL), CLMOE_ERR_UNSUPPORTED);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "multiples of 16"));
  TEST_OK(clmoe_kda_backward(test_ctx, &bnd, &in2, &dO2, NULL, &g1.g));
  clmoe_ctx_set_fastpath(test_ctx, 0);
  TEST_OK(clmoe_kda_backward(test_ctx, &bnd, &in2, &dO2, NULL, &g2.g));
  CU_ASSERT(grads_equal(&g1, &g2));
  clmoe_ctx_set_fastpath(test_ctx, 1);
  grads_free(&g1);
  grads_free(&g2);

  clmoe_tensor *all[] = {&q, &b, &A, &dt, &dO, &q2, &dt2, &dO2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
}

/* The copy ring of the two state passes with 1 and 3 chunks copied ahead (2 and 4 stages;
 * the default is 2 ahead): T 1, 17 and 70 (the ring's turns, partial chunks), B 2, packed
 * sequences with an empty one, initial state and dfinal_state, the saturated gate. */
static void test_ring(void)
{
  static const int32_t lens[] = {5, 0, 33, 17};
  static const kda_tile_case c[] = {
      {2, 1, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 1},
      {2, 17, 1, 32, 32, NULL, 0, 0, F, F, UNI, 0.0f, 0, 0, 1},
      {1, 70, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 1},
      {1, 0, 2, 32, 32, lens, 4, 1, F, F, UNI, 0.0f, 0, 0, 1},
      {1, 90, 1, 32, 32, NULL, 0, 1, F, F, KDA_TILE_Z_SATURATE, -5.0f, 0, 0, 1},
      {1, 70, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 3},
      {1, 0, 2, 32, 32, lens, 4, 1, F, F, UNI, 0.0f, 0, 0, 3},
  };
  run_cases(c, (int)(sizeof c / sizeof c[0]));
}

/* The two state passes in one launch and in two (CLMOE_KDA_TCB_FUSE=1 / 0; by default one
 * launch when their work-groups leave compute units free): partial chunks, B 2, packed
 * sequences with an empty one, initial state and dfinal_state, V 64 with 2 warps. */
static void test_fuse(void)
{
  static const int32_t lens[] = {5, 0, 33, 17};
  static const kda_tile_case c[] = {
      {2, 40, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {1, 0, 2, 32, 32, lens, 4, 1, F, F, UNI, 0.0f, 0, 0, 0},
      {1, 37, 1, 32, 64, NULL, 0, 1, F, F, UNI, 0.0f, 0, 2, 0},
  };
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_TCB_FUSE", "1"));
  run_cases(c, (int)(sizeof c / sizeof c[0]));
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_TCB_FUSE", "0"));
  run_cases(c, (int)(sizeof c / sizeof c[0]));
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_TCB_FUSE", NULL));
}

/* An odd chunk count with initial state and dfinal_state, packed sequences (one empty): the
 * cases of the two tests below (one shape: each new shape is one more program build on PoCL). */
static const int32_t mix_lens[] = {5, 0, 33, 17};
static const kda_tile_case mix_cases[] = {
    {1, 40, 2, 32, 32, NULL, 0, 1, F, F, UNI, 0.0f, 0, 0, 0},
    {1, 0, 2, 32, 32, mix_lens, 4, 1, F, F, UNI, 0.0f, 0, 0, 0},
};

/* kda_tile_bwd_chunk with two (chunk, head) pairs per work-group (the default on NVIDIA's matrix
 * unit) and copy rings of 2 stages (3 where they fit: the default elsewhere). */
static void test_pair(void)
{
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_TCB_PAIR", "2"));
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_TCB_STAGES", "2"));
  run_cases(mix_cases, (int)(sizeof mix_cases / sizeof mix_cases[0]));
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_TCB_PAIR", NULL));
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_TCB_STAGES", NULL));
}

/* The backward on the factors the forward kept (clmoe_kda_tile_saved). */
static void test_kept(void) { run_cases_with(mix_cases, (int)(sizeof mix_cases / sizeof mix_cases[0]), 1); }

/* CLMOE_KDA_KEEP_MAX_MB: the first case needs 6 x 13056 bytes (3 chunks x 2 heads at K = V =
 * 32: blocks 7936, U^T 2048, states 2048, Vnew 1024), so a cap of 0.01 MiB keeps nothing and
 * the backward recomputes, 1 MiB keeps; a cap that is not a number is refused, naming it. */
static void test_keep_cap(void)
{
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_KEEP_MAX_MB", "0.01"));
  run_cases_with(mix_cases, 1, 2);
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_KEEP_MAX_MB", "1"));
  run_cases_with(mix_cases, 1, 1);
  CU_ASSERT_EQUAL(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_KEEP_MAX_MB", "lots"), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "CLMOE_KDA_KEEP_MAX_MB=lots"));
  TEST_OK(clmoe_ctx_set_knob(test_ctx, "CLMOE_KDA_KEEP_MAX_MB", NULL));
}

/* One KDA layer forward (with a cache) + backward on the tile path: every parameter's
 * gradient and dx into G / dx. Returns the chunks whose factors the forward kept; with
 * forget the backward is told none were (it recomputes them). */
static int64_t layer_grads(clmoe_kda_layer *L, const clmoe_tensor *x, clmoe_tensor *y, const clmoe_tensor *dy,
                           clmoe_kda_layer *G, clmoe_tensor *dx, int forget)
{
  clmoe_kda_layer_cache cache = {0};
  clmoe_tensor *gt[CLMOE_KDA_LAYER_PARAMS];
  const int np = clmoe_kda_layer_params(G, gt, NULL, NULL);
  for (int i = 0; i < np; i++) TEST_OK(clmoe_tensor_fill(gt[i], 0.0));
  TEST_OK(clmoe_tensor_fill(dx, 0.0));
  TEST_OK(clmoe_kda_layer_forward(test_ctx, L, x, NULL, y, &cache, NULL));
  clmoe_kda_tile_saved *kept = clmoe__kda_kept_saved(cache.kda_kept);
  const int64_t chunks = kept ? kept->nchunks : 0;
  if (forget && kept) kept->nchunks = 0;
  TEST_OK(clmoe_kda_layer_backward(test_ctx, L, x, NULL, &cache, dy, G, dx));
  clmoe_kda_layer_cache_destroy(&cache);
  return chunks;
}

/* The KDA layer keeps the tile forward's factors for its backward: the same gradients as a
 * backward that recomputes them, within bf16 rounding, none NaN; and the forward did keep
 * them (B 2, T 37: 3 chunks per sequence; head dim 16 for the tile path). */
static void test_layer_kept(void)
{
  enum { LD = 32, LH = 2, LDH = 16, LB = 2, LT = 37 };
  clmoe_kda_layer L = {0}, G[2] = {{0}};
  clmoe_tensor x = {0}, y = {0}, dy = {0}, dx[2] = {{0}};
  const int64_t sx[3] = {LB, LT, LD};
  TEST_OK(clmoe_kda_layer_create(test_ctx, &L, LD, LH, LDH, 4, 4, 1e-5f, NULL));
  TEST_OK(clmoe_kda_layer_init(&L, test_seed));
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 3, sx));
  TEST_OK(clmoe_tensor_create(test_ctx, &y, CLMOE_F32, 3, sx));
  TEST_OK(clmoe_tensor_create(test_ctx, &dy, CLMOE_F32, 3, sx));
  TEST_OK(clmoe_tensor_fill_uniform(&x, test_seed + 1, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&dy, test_seed + 2, -1.0f, 1.0f));
  for (int k = 0; k < 2; k++) {
    TEST_OK(clmoe_kda_layer_create(test_ctx, &G[k], LD, LH, LDH, 4, 4, 1e-5f, NULL));
    TEST_OK(clmoe_tensor_create(test_ctx, &dx[k], CLMOE_F32, 3, sx));
  }
  CU_ASSERT_EQUAL(layer_grads(&L, &x, &y, &dy, &G[0], &dx[0], 0), LB * 3);
  CU_ASSERT_EQUAL(layer_grads(&L, &x, &y, &dy, &G[1], &dx[1], 1), LB * 3);
  clmoe_tensor *g0[CLMOE_KDA_LAYER_PARAMS + 1], *g1[CLMOE_KDA_LAYER_PARAMS + 1];
  const int np = clmoe_kda_layer_params(&G[0], g0, NULL, NULL); /* the form's tensors, then dx */
  clmoe_kda_layer_params(&G[1], g1, NULL, NULL);
  g0[np] = &dx[0], g1[np] = &dx[1];
  for (int i = 0; i <= np; i++) {
    const size_t n = (size_t)clmoe_tensor_numel(g0[i]);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    CU_ASSERT_FATAL(a && b);
    TEST_OK(clmoe_tensor_read(g0[i], a, n * sizeof *a));
    TEST_OK(clmoe_tensor_read(g1[i], b, n * sizeof *b));
    double diff = 0.0, scale = 0.0;
    for (size_t e = 0; e < n; e++) {
      diff = fmax(diff, fabs((double)a[e] - (double)b[e]));
      scale = fmax(scale, fabs((double)b[e]));
      CU_ASSERT(!isnan(a[e]) && !isnan(b[e]));
    }
    CU_ASSERT(diff <= 3e-2 * scale); /* (isnan(diff) fails it too) */
    free(a), free(b);
  }
  for (int k = 0; k < 2; k++) clmoe_kda_layer_destroy(&G[k]), clmoe_tensor_destroy(&dx[k]);
  clmoe_kda_layer_destroy(&L);
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&dy);
}

static void add_tests(CU_pSuite suite)
{
  clmoe_ctx_set_fastpath(test_ctx, 1); /* the tile path on any device */
  CU_add_test(suite, "T 1..70 across chunk boundaries, B 2, H 1-2", test_lengths);
  CU_add_test(suite, "K, V 16..128, K != V, bf16 storage, state warps", test_shapes);
  CU_add_test(suite, "packed sequences, one empty", test_packed);
  CU_add_test(suite, "gate extremes: +-1e4, g = lb on every channel", test_extremes);
  CU_add_test(suite, "tile backward against the portable backward", test_vs_portable);
  CU_add_test(suite, "copy ring of 2 and 4 stages: turns, packed, extremes", test_ring);
  CU_add_test(suite, "state passes in one launch and in two", test_fuse);
  CU_add_test(suite, "chunk kernel with two chunks per work-group", test_pair);
  CU_add_test(suite, "backward on the factors the forward kept", test_kept);
  CU_add_test(suite, "kept factors over CLMOE_KDA_KEEP_MAX_MB: none kept, recomputed", test_keep_cap);
  CU_add_test(suite, "KDA layer: kept factors or recomputed, same gradients", test_layer_kept);
  CU_add_test(suite, "clmoe_kda_backward dispatch", test_dispatch);
  test_add_checks(suite, "kda_tile.backward");
}

int main(void) { return test_main("kda_tile_bwd", add_tests); }
