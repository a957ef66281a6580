/* Conformance checks: the tile interface and the tile GEMM. They run on the
 * device's own tile implementation (NVIDIA mma.sync where the probe found it, portable
 * arithmetic elsewhere), so `clmoe-xcheck --op tile` compares vendors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "clmoe/paths.h"
#include "ref/reference.h"
#include "tile_check.h"

static double bf16r(double x) { return clmoe_f32_from_bf16(clmoe_bf16_from_f32((float)x)); }

/* Folds one value into res with the error measure of a single tile product:
 * |got - ref| / sum |a_k b_k| (the scale of the fp32 sum's rounding), NaN/Inf infinite. */
static void fold_dot(clmoe_check_result *res, const char *what, int idx, double got, double ref,
                     double scale)
{
  double err = isfinite(got) ? fabs(got - ref) / (scale > 0 ? scale : 1.0) : INFINITY;
  if (!(err <= res->max_err)) {
    res->max_err = err;
    snprintf(res->worst, sizeof res->worst, "%s[%d]: got %.9g, expected %.9g", what, idx, got, ref);
  }
}

/* ---- the interface: every load variant and tile_a_from_c(_local) -----------------------
 * clmoe_tile_selftest (paths.h); one 16 x 16 x 8 product per variant against
 * a double sum of the bf16-rounded operands. Tolerance 4e-6 of sum |a_k b_k|: 16 fp32
 * additions in any order (or a matrix unit's fp32 accumulation) stay within 16 x 2^-24. */
#define TILE_TOL 4e-6

static clmoe_status check_interface(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor ta = {0}, tb = {0}, tb2 = {0}, tout = {0};
  float a[2 * 256], b[2 * 128], b2[2 * 128], out[2 * 7 * 128];
  /* every variant's 2 x 128 outputs with their references and measures, for comparing devices */
  double kept_got[7][256], kept_ref[7][256], kept_den[7][256];
  for (int i = 0; i < 2 * 256; i++) a[i] = (float)ck_host_uniform(seed, (uint64_t)i, -2.0, 2.0);
  for (int i = 0; i < 2 * 128; i++) {
    b[i] = (float)ck_host_uniform(seed + 1, (uint64_t)i, -2.0, 2.0);
    b2[i] = (float)ck_host_uniform(seed + 2, (uint64_t)i, -2.0, 2.0);
  }
  CK(clmoe_tensor_create(ctx, &ta, CLMOE_F32, 1, (int64_t[]){2 * 256}));
  CK(clmoe_tensor_create(ctx, &tb, CLMOE_F32, 1, (int64_t[]){2 * 128}));
  CK(clmoe_tensor_create(ctx, &tb2, CLMOE_F32, 1, (int64_t[]){2 * 128}));
  CK(clmoe_tensor_create(ctx, &tout, CLMOE_F32, 1, (int64_t[]){2 * 7 * 128}));
  CK(clmoe_tensor_write(&ta, a, sizeof a));
  CK(clmoe_tensor_write(&tb, b, sizeof b));
  CK(clmoe_tensor_write(&tb2, b2, sizeof b2));
  CK(clmoe_tensor_fill(&tout, NAN)); /* a value the kernel does not write must fail */
  CK(clmoe_tile_selftest(ctx, &ta, &tb, &tb2, &tout));
  CK(clmoe_tensor_read(&tout, out, sizeof out));
  res->tolerance = TILE_TOL;
  static const char *names[7] = {"a.b",      "at.bt",    "a_f32.b_f32",       "at_f32.bt_f32",
                                 "a.bt(b2)", "from_c_local", "from_c"};
  for (int w = 0; w < 2; w++) {
    const float *aw = a + w * 256, *bw = b + w * 128, *b2w = b2 + w * 128, *ow = out + w * 7 * 128;
    for (int r = 0; r < 16; r++)
      for (int n = 0; n < 8; n++) {
        double s = 0, sa = 0, s2 = 0, sa2 = 0, s5 = 0, sa5 = 0;
        for (int q = 0; q < 16; q++) {
          double x = bf16r(aw[r * 16 + q]), y = bf16r(bw[q * 8 + n]), y2 = bf16r(b2w[q * 8 + n]);
          s += x * y, sa += fabs(x * y), s2 += x * y2, sa2 += fabs(x * y2);
          /* [out0 | out4] as A: the device's own first products, rounded to bf16 */
          double c = bf16r(q < 8 ? ow[r * 8 + q] : ow[4 * 128 + r * 8 + q - 8]);
          s5 += c * y2, sa5 += fabs(c * y2);
        }
        const int i = r * 8 + n, j = w * 128 + i;
        const double ref[7] = {s, s, s, s, s2, s5, s5}, den[7] = {sa, sa, sa, sa, sa2, sa5, sa5};
        for (int v = 0; v < 7; v++) {
          fold_dot(res, names[v], j, ow[v * 128 + i], ref[v], den[v]);
          kept_got[v][j] = ow[v * 128 + i], kept_ref[v][j] = ref[v], kept_den[v][j] = den[v] > 0 ? den[v] : 1.0;
        }
      }
  }
  for (int v = 0; v < 7; v++) ck_capture_den(names[v], kept_got[v], kept_ref[v], kept_den[v], 256, res);
done:
  clmoe_tensor_destroy(&ta), clmoe_tensor_destroy(&tb), clmoe_tensor_destroy(&tb2);
  clmoe_tensor_destroy(&tout);
  return st;
}

/* ---- the tile GEMM against the double reference of its bf16 operands ---- */
clmoe_status check_tile_gemm_case(clmoe_ctx *ctx, uint64_t seed, const tile_gemm_case *g,
                                  clmoe_check_result *res)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor Abase = {0}, A = {0}, B = {0}, Cfull = {0}, C = {0};
  double *abase = NULL, *b = NULL, *c = NULL, *got = NULL, *ref = NULL;
  int batched = g->batch > 1 || g->a_batch1 || g->b_batch1;
  int64_t ab = g->a_batch1 ? 1 : g->batch, bb = g->b_batch1 ? 1 : g->batch;
  int64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
  int64_t br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
  int64_t cw = g->n + (g->pad_c ? 5 : 0), aoff = g->a_offset ? 3 : 0;
  int64_t sa[3] = {ab, ar, ac}, sb[3] = {bb, br, bc}, sc[3] = {g->batch, g->m, cw};
  int off = batched ? 0 : 1; /* 2-D tensors skip the batch dimension */
  int64_t an = ab * ar * ac + aoff;
  CK(ck_uniform(ctx, &Abase, CLMOE_BF16, 1, &an, seed, -1.0f, 1.0f, &abase));
  CK(clmoe_tensor_view(&Abase, &A, 3 - off, sa + off, aoff));
  CK(ck_uniform(ctx, &B, CLMOE_BF16, 3 - off, sb + off, seed + 1, -1.0f, 1.0f, &b));
  CK(ck_uniform(ctx, &Cfull, g->dc, 3 - off, sc + off, seed + 2, -1.0f, 1.0f, &c));
  CK(clmoe_tensor_slice(&Cfull, &C, 2 - off, 0, g->n));
  CK(clmoe_ctx_set_gemm_tile_block(ctx, g->bm, g->bn));
  st = clmoe_gemm_ex(ctx, CLMOE_GEMM_TILE, g->ta, g->tb, g->alpha, &A, &B, g->beta, &C);
  clmoe_ctx_set_gemm_tile_block(ctx, 0, 0);
  if (st != CLMOE_OK) goto done;
  CK(ck_read(&Cfull, &got));
  size_t total = (size_t)(g->batch * g->m * cw);
  CK_ALLOC(ref, total);
  memcpy(ref, c, total * sizeof *ref);
  for (int64_t q = 0; q < g->batch; q++)
    ref_gemm(g->ta, g->tb, g->m, g->n, g->k, g->alpha, abase + aoff + (g->a_batch1 ? 0 : q) * ar * ac,
             ac, b + (g->b_batch1 ? 0 : q) * br * bc, bc, g->beta, ref + q * g->m * cw, cw);
  if (g->dc == CLMOE_BF16) /* the device rounds C to bf16 on store */
    for (size_t i = 0; i < total; i++) ref[i] = bf16r(ref[i]);
  res->tolerance = g->dc == CLMOE_BF16 ? TILE_GEMM_TOL_BF16 : TILE_GEMM_TOL_F32;
  /* Compared whole: the padding columns must be untouched. */
  ck_compare("C", got, ref, total, res);
done:
  free(abase), free(b), free(c), free(got), free(ref);
  clmoe_tensor_destroy(&Abase), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&Cfull);
  return st;
}

#define F CLMOE_F32
#define H CLMOE_BF16
#define TILE_GEMM_CHECK(fname, ...)                                                         \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)               \
  {                                                                                         \
    const tile_gemm_case g = __VA_ARGS__;                                                   \
    return check_tile_gemm_case(c, s, &g, r);                                               \
  }
/*                              ta tb  m    n    k  batch a1 b1 dc alpha beta pad aoff bm bn */
TILE_GEMM_CHECK(tile_gemm_nn, {0, 0, 130, 67, 257, 1, 0, 0, F, 1.0f, 0.0f, 1, 0, 0, 0})
TILE_GEMM_CHECK(tile_gemm_nt, {0, 1, 96, 80, 64, 2, 0, 1, F, 0.5f, 0.5f, 0, 0, 0, 0})
TILE_GEMM_CHECK(tile_gemm_tn, {1, 0, 33, 130, 40, 1, 0, 0, H, 1.0f, 1.0f, 0, 1, 0, 0})

const clmoe_check clmoe_checks_tile[] = {
    {"tile.interface", "every tile load (bf16/f32, plain/transposed) and tile_a_from_c", check_interface},
    {"tile.gemm.nn", "tile GEMM, ragged 130x67x257, padded C", tile_gemm_nn},
    {"tile.gemm.nt", "tile GEMM, B transposed, batch 2 with B broadcast, beta 0.5", tile_gemm_nt},
    {"tile.gemm.tn", "tile GEMM, A transposed and unaligned, bf16 C, beta 1", tile_gemm_tn},
    {NULL},
};
