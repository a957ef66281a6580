/* Conformance checks of GEMM: every backend (CLBlast, our tiled and naive kernels, the
 * default) with transposes, batches and broadcasts, bf16 storage, padded C, k = 0, and
 * beta 0 ignoring NaN in C. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "ref/reference.h"

#define TOL_F32 1e-5
#define TOL_BF16 1e-2
#define F CLMOE_F32
#define H CLMOE_BF16

/* ---- GEMM ----
 * A case: sizes, transposes, dtypes, batch (with broadcast of A or B), and a padded
 * leading dimension (C is a column slice of a wider matrix). */
typedef struct gemm_case {
  clmoe_gemm_backend backend;
  int ta, tb;
  int64_t m, n, k, batch;
  int a_batch1, b_batch1; /* A or B broadcast over the batch */
  clmoe_dtype da, db, dc;
  float alpha, beta;
  int pad_c; /* C is a slice of a matrix with 5 extra columns */
} gemm_case;

static clmoe_status check_gemm(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                               const gemm_case *g)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor A = {0}, B = {0}, Cfull = {0}, C = {0};
  double *a = NULL, *b = NULL, *c = NULL, *got = NULL, *ref = NULL;
  int batched = g->batch > 1 || g->a_batch1 || g->b_batch1;
  int64_t ab = g->a_batch1 ? 1 : g->batch, bb = g->b_batch1 ? 1 : g->batch;
  int64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
  int64_t br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
  int64_t cw = g->n + (g->pad_c ? 5 : 0);
  int64_t sa[3] = {ab, ar, ac}, sb[3] = {bb, br, bc}, sc[3] = {g->batch, g->m, cw};
  int off = batched ? 0 : 1; /* 2-D tensors skip the batch dimension */
  CK(ck_uniform(ctx, &A, g->da, 3 - off, sa + off, seed, -1.0f, 1.0f, &a));
  CK(ck_uniform(ctx, &B, g->db, 3 - off, sb + off, seed + 1, -1.0f, 1.0f, &b));
  CK(ck_uniform(ctx, &Cfull, g->dc, 3 - off, sc + off, seed + 2, -1.0f, 1.0f, &c));
  CK(clmoe_tensor_slice(&Cfull, &C, 2 - off, 0, g->n));
  CK(clmoe_gemm_ex(ctx, g->backend, g->ta, g->tb, g->alpha, &A, &B, g->beta, &C));
  CK(ck_read(&Cfull, &got));
  size_t total = (size_t)(g->batch * g->m * cw);
  CK_ALLOC(ref, total);
  memcpy(ref, c, total * sizeof *ref);
  for (int64_t q = 0; q < g->batch; q++)
    ref_gemm(g->ta, g->tb, g->m, g->n, g->k, g->alpha, a + (g->a_batch1 ? 0 : q) * ar * ac, ac,
             b + (g->b_batch1 ? 0 : q) * br * bc, bc, g->beta, ref + q * g->m * cw, cw);
  if (g->dc == CLMOE_BF16) /* the device rounds C to bf16 on store */
    for (size_t i = 0; i < total; i++) ref[i] = clmoe_f32_from_bf16(clmoe_bf16_from_f32((float)ref[i]));
  res->tolerance = g->dc == CLMOE_BF16 ? TOL_BF16 : TOL_F32;
  /* Compared whole: the padding columns must be untouched. */
  ck_compare("C", got, ref, total, res);
done:
  free(a), free(b), free(c), free(got), free(ref);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&Cfull);
  return st;
}

#define GEMM_CHECK(fname, ...)                                                              \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)               \
  {                                                                                         \
    const gemm_case g = __VA_ARGS__;                                                        \
    return check_gemm(c, s, r, &g);                                                         \
  }
/*                         backend            ta tb  m    n    k  batch a1 b1 da db dc alpha beta pad */
GEMM_CHECK(gemm_clblast_nn, {CLMOE_GEMM_CLBLAST, 0, 0, 67, 45, 83, 1, 0, 0, F, F, F, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_clblast_nt, {CLMOE_GEMM_CLBLAST, 0, 1, 64, 33, 70, 1, 0, 0, F, F, F, 0.5f, 1.0f, 1})
GEMM_CHECK(gemm_clblast_tn, {CLMOE_GEMM_CLBLAST, 1, 0, 31, 64, 19, 1, 0, 0, F, F, F, 1.0f, -0.5f, 0})
GEMM_CHECK(gemm_clblast_tt, {CLMOE_GEMM_CLBLAST, 1, 1, 17, 29, 64, 1, 0, 0, F, F, F, 2.0f, 0.0f, 1})
GEMM_CHECK(gemm_clblast_batched, {CLMOE_GEMM_CLBLAST, 0, 1, 19, 23, 37, 3, 0, 0, F, F, F, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_clblast_bcast, {CLMOE_GEMM_CLBLAST, 0, 0, 21, 16, 35, 4, 0, 1, F, F, F, 1.0f, 1.0f, 0})
GEMM_CHECK(gemm_clblast_bf16, {CLMOE_GEMM_CLBLAST, 0, 1, 40, 24, 56, 1, 0, 0, H, H, F, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_clblast_bf16out, {CLMOE_GEMM_CLBLAST, 0, 0, 33, 20, 48, 1, 0, 0, F, H, H, 1.0f, 1.0f, 0})
GEMM_CHECK(gemm_clblast_k0, {CLMOE_GEMM_CLBLAST, 0, 0, 5, 7, 0, 1, 0, 0, F, F, F, 1.0f, 0.5f, 0})
GEMM_CHECK(gemm_tiled_nn, {CLMOE_GEMM_TILED, 0, 0, 130, 67, 75, 1, 0, 0, F, F, F, 1.0f, 0.0f, 1})
GEMM_CHECK(gemm_tiled_nt, {CLMOE_GEMM_TILED, 0, 1, 64, 64, 64, 1, 0, 0, F, F, F, 1.0f, 1.0f, 0})
GEMM_CHECK(gemm_tiled_tn, {CLMOE_GEMM_TILED, 1, 0, 45, 70, 33, 1, 0, 0, F, F, F, -1.0f, 0.5f, 0})
GEMM_CHECK(gemm_tiled_tt, {CLMOE_GEMM_TILED, 1, 1, 1, 65, 17, 1, 0, 0, F, F, F, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_tiled_batched, {CLMOE_GEMM_TILED, 0, 1, 20, 30, 40, 3, 1, 0, F, F, F, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_tiled_bf16, {CLMOE_GEMM_TILED, 1, 1, 50, 40, 30, 2, 0, 0, H, H, H, 1.0f, 0.0f, 0})
GEMM_CHECK(gemm_naive_nn, {CLMOE_GEMM_NAIVE, 0, 0, 23, 19, 41, 1, 0, 0, F, F, F, 1.0f, 0.0f, 1})
GEMM_CHECK(gemm_naive_tt_bf16, {CLMOE_GEMM_NAIVE, 1, 1, 16, 24, 40, 2, 0, 0, H, F, H, 0.5f, 1.0f, 0})
GEMM_CHECK(gemm_auto_nt, {CLMOE_GEMM_AUTO, 0, 1, 48, 36, 24, 1, 0, 0, F, F, F, 1.0f, 0.0f, 0})

/* beta = 0 must ignore C, even when C holds NaN (pool buffers are never cleared). */
static clmoe_status check_gemm_nan_c(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                     clmoe_gemm_backend backend)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor A = {0}, B = {0}, C = {0};
  double *a = NULL, *b = NULL, *got = NULL, *ref = NULL;
  const int64_t m = 24, n = 20, k = 16;
  CK(ck_uniform(ctx, &A, F, 2, (int64_t[]){m, k}, seed, -1.0f, 1.0f, &a));
  CK(ck_uniform(ctx, &B, F, 2, (int64_t[]){k, n}, seed + 1, -1.0f, 1.0f, &b));
  CK(clmoe_tensor_create(ctx, &C, F, 2, (int64_t[]){m, n}));
  CK(clmoe_tensor_fill(&C, NAN));
  CK(clmoe_gemm_ex(ctx, backend, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &B, 0.0f, &C));
  CK(ck_read(&C, &got));
  CK_ALLOC(ref, m * n);
  ref_gemm(0, 0, m, n, k, 1.0, a, k, b, n, 0.0, ref, n);
  res->tolerance = TOL_F32;
  ck_compare("C", got, ref, (size_t)(m * n), res);
done:
  free(a), free(b), free(got), free(ref);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&C);
  return st;
}
static clmoe_status gemm_clblast_nan_c(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_gemm_nan_c(c, s, r, CLMOE_GEMM_CLBLAST); }
static clmoe_status gemm_tiled_nan_c(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_gemm_nan_c(c, s, r, CLMOE_GEMM_TILED); }

const clmoe_check clmoe_checks_gemm[] = {
    {"gemm.clblast.nn", "CLBlast SGEMM, no transposes", gemm_clblast_nn},
    {"gemm.clblast.nt", "CLBlast SGEMM, B transposed, beta 1, padded C", gemm_clblast_nt},
    {"gemm.clblast.tn", "CLBlast SGEMM, A transposed, beta -0.5", gemm_clblast_tn},
    {"gemm.clblast.tt", "CLBlast SGEMM, both transposed, padded C", gemm_clblast_tt},
    {"gemm.clblast.batched", "CLBlast strided-batched SGEMM", gemm_clblast_batched},
    {"gemm.clblast.broadcast", "batched SGEMM with B broadcast over the batch", gemm_clblast_bcast},
    {"gemm.clblast.bf16in", "bf16 A and B converted for CLBlast", gemm_clblast_bf16},
    {"gemm.clblast.bf16out", "bf16 B and C through CLBlast, beta 1", gemm_clblast_bf16out},
    {"gemm.clblast.k0", "k = 0: C = beta C", gemm_clblast_k0},
    {"gemm.clblast.nanc", "beta 0 ignores a C full of NaN", gemm_clblast_nan_c},
    {"gemm.tiled.nn", "tiled kernel, ragged edges, padded C", gemm_tiled_nn},
    {"gemm.tiled.nt", "tiled kernel, B transposed, beta 1", gemm_tiled_nt},
    {"gemm.tiled.tn", "tiled kernel, A transposed", gemm_tiled_tn},
    {"gemm.tiled.tt", "tiled kernel, m = 1, both transposed", gemm_tiled_tt},
    {"gemm.tiled.batched", "tiled kernel, batched with A broadcast", gemm_tiled_batched},
    {"gemm.tiled.bf16", "tiled kernel, all operands bf16", gemm_tiled_bf16},
    {"gemm.tiled.nanc", "tiled kernel, beta 0 ignores NaN in C", gemm_tiled_nan_c},
    {"gemm.naive.nn", "naive kernel, padded C", gemm_naive_nn},
    {"gemm.naive.bf16", "naive kernel, bf16 A and C, batched", gemm_naive_tt_bf16},
    {"gemm.auto.nt", "default backend", gemm_auto_nt},
    {NULL, NULL, NULL}};
