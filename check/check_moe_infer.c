/* Conformance checks of the MoE layer's inference forward on bf16 expert stacks
 * (clmoe_moe_forward_infer: lib/moe/moe_layer.c, moe_experts.c; the grouped kernels of
 * kernels_cl/moe/moe_gemm.cl built with -DMG_WBF16=1), the form of a prefill pass of an
 * inference model: the routed experts' w_gate, w_upp, w_dn stored as bf16 (rounded to
 * nearest even on the device), the router, latent and shared matrices fp32 (generation
 * widens those small ones), the rows and every sum fp32. Against:
 *  - the double-precision token loop (check/ref/ref_moe.c) with the stored bf16 values: fp32
 *    tolerance 1e-5 in ck_compare's measure (nothing but the weights is rounded to bf16);
 *  - clmoe_moe_forward on fp32 stacks holding the same values (the grouped path, which
 *    generation ran on fp32 copies of the layer's stacks before): the same bits, output by
 *    output, since the two kernels differ only in how a weight is loaded.
 * The device's top-k (clmoe_moe_route, the same router call as the forward's) must be a top-k
 * of the double scores within 1e-5; the reference then uses it. Cases: top-8 of 896 experts
 * at the tiny preset's widths, 6 experts of many rows at widths of several row and column
 * tiles that are not multiples of a tile, the Kimi Linear form (SwiGLU, grouped selection,
 * plain weights times a scale, latent 0), and a layer configured for the padded CLBlast
 * path (the inference forward takes the grouped one: compared with clmoe_moe_forward on the
 * grouped path). At the checks' small sizes they run under Oclgrind in seconds.
 * These checks pin CLMOE_INFER_TILE to 0 (on a matrix unit its auto takes the tile path).
 * moe.infer.bf16.tile.*: CLMOE_INFER_TILE=1, the routed experts on the bf16 tile kernels of a
 * training step (kernels_cl/moe/moe_gemm_tile.cl; here the tile interface's portable
 * emulation), the expert rows and the unit's outputs rounded to bf16 as they are staged:
 * against the double reference that rounds the same operands (ref_moe_forward_bf16, bf16
 * tolerance 1e-2 as the training checks), and the same bits as clmoe_moe_forward on the same
 * bf16 stacks (the training step's inference forward: the same kernels). At the small sizes
 * they take 6 tokens, 8 experts, top-2 at most and l <= 20: the tile kernels' emulation is
 * Oclgrind's slowest (tile.kimi about 12 s; tile.top8 is skipped there, the same kernels). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_moe.h"
#include "clmoe/paths.h" /* clmoe_ctx_set_knob */

static clmoe_status check_infer(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, const moe_case *mc, int tile)
{
  clmoe_status st = clmoe_ctx_set_knob(ctx, "CLMOE_INFER_TILE", tile ? "1" : "0");
  if (st != CLMOE_OK) return st;
  moe_data D;
  clmoe_moe_layer Lb, Lf;
  clmoe_tensor wb[3] = {{0}}, y = {0}, y2 = {0}, s_all = {0}, topk = {0}, scores = {0}, probs = {0};
  double *gy = NULL, *gy2 = NULL, *ry = NULL, *rp = NULL, *sall = NULL;
  int32_t *top = NULL, *rtop = NULL;
  CK(ck_moe_setup(ctx, seed, mc, &D));
  CK(ck_moe_bf16_experts(ctx, &D.L, wb, &Lb));
  clmoe_tensor *wf[3] = {&D.L.w_gate, &D.L.w_upp, &D.L.w_dn};
  for (int i = 0; i < 3; i++) { /* the fp32 stacks and the reference take the stored values */
    CK(clmoe_tensor_copy(wf[i], &wb[i]));
    free(D.hp[2 + i]);
    D.hp[2 + i] = NULL;
    CK(ck_read(&wb[i], &D.hp[2 + i]));
  }
  D.P = (ref_moe_params){D.hp[0], D.hp[1], D.hp[2], D.hp[3], D.hp[4],
                         D.hp[5], D.hp[6], D.hp[7], D.hp[8], D.hp[9]};
  Lf = tile ? Lb : D.L; /* the tile path: clmoe_moe_forward on the bf16 stacks */
  Lf.cfg.gemm = CLMOE_MOE_GEMM_GROUPED;
  const int64_t m = mc->m, d = mc->d, k = mc->k, E = mc->E, sy[2] = {m, d};
  CK(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, sy));
  CK(clmoe_tensor_create(ctx, &y2, CLMOE_F32, 2, sy));
  CK(clmoe_tensor_fill(&y, NAN)); /* every element must be written */
  CK(clmoe_tensor_fill(&y2, NAN));
  CK(clmoe_moe_forward_infer(ctx, &Lb, &D.x, &y));
  CK(clmoe_moe_forward(ctx, &Lf, &D.x, &y2, NULL));
  CK(clmoe_tensor_create(ctx, &s_all, CLMOE_F32, 2, (int64_t[]){m, E}));
  CK(clmoe_tensor_create(ctx, &topk, CLMOE_I32, 2, (int64_t[]){m, k}));
  CK(clmoe_tensor_create(ctx, &scores, CLMOE_F32, 2, (int64_t[]){m, k}));
  CK(clmoe_tensor_create(ctx, &probs, CLMOE_F32, 2, (int64_t[]){m, k}));
  CK(clmoe_moe_route(ctx, &Lb, &D.x, &s_all, &topk, &scores, &probs, NULL));
  CK(ck_read(&y, &gy));
  CK(ck_read(&y2, &gy2));
  CK(ck_moe_read_i32(&topk, &top));
  CK_ALLOC(sall, m * E);
  CK_ALLOC(ry, m * d);
  CK_ALLOC(rp, m * k);
  CK_ALLOC(rtop, m * k);
  ref_moe_route(&D.s, D.P.w_router, D.hbias, D.hx, k, rtop, sall);
  res->tolerance = CK_MOE_TOL_FWD;
  ck_moe_check_choice(&D.s, sall, D.hbias, top, k, res);
  if (isinf(res->max_err)) goto done;
  (tile ? ref_moe_forward_bf16 : ref_moe_forward)(&D.s, &D.P, D.hx, top, ry, rp);
  if (tile) res->tolerance = CK_MOE_TOL_BF16;
  ck_compare("y", gy, ry, (size_t)(m * d), res);
  for (int64_t i = 0; i < m * d; i++)
    if (memcmp(&gy[i], &gy2[i], sizeof gy[i])) { /* NaN in either differs too */
      res->max_err = INFINITY;
      snprintf(res->worst, sizeof res->worst, "y[%lld]: bf16 stacks %.9g, %s %.9g", (long long)i, gy[i],
               tile ? "clmoe_moe_forward on them" : "fp32 stacks of the same values", gy2[i]);
      break;
    }
done:
  if (clmoe_ctx_set_knob(ctx, "CLMOE_INFER_TILE", "") != CLMOE_OK && st == CLMOE_OK) st = CLMOE_ERR_INTERNAL;
  free(gy), free(gy2), free(ry), free(rp), free(sall), free(top), free(rtop);
  clmoe_tensor *t[] = {&wb[0], &wb[1], &wb[2], &y, &y2, &s_all, &topk, &scores, &probs};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
  ck_moe_data_free(&D);
  return st;
}

/* m, d, l, E, k, f, n_shared, shared_ff, gemm, balance, then the Kimi Linear options */
static const moe_case top8 = {48, 64, 32, 896, 8, 16, 1, 16, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_QB, CK_MOE_K3};
static const moe_case few = {120, 24, 136, 6, 2, 150, 1, 20, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_QB, CK_MOE_K3};
static const moe_case kimi = {40, 48, 0, 64, 4, 24, 1, 16, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_NONE,
                              CLMOE_GLU_SWIGLU, 4, 2, 1, 2.5f, 0};
static const moe_case padded = {40, 48, 24, 16, 4, 24, 0, 0, CLMOE_MOE_GEMM_PADDED, CLMOE_MOE_BALANCE_NONE,
                                CLMOE_GLU_SITU, 0, 0, 0, 0.0f, 0};

/* At the checks' small sizes (Oclgrind) 16 tokens, 16 experts, l <= 36, f <= 40 (one column
 * tile, inner widths not multiples of the 16-wide k steps): the grouped kernels, run twice a
 * check, take nearly all the simulator's time. */
#define INFER_CHECK(fname, mc, tile)                                                         \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)                 \
  {                                                                                          \
    moe_case sc = ck_moe_sized(&(mc));                                                       \
    if (clmoe_check_small()) {                                                               \
      sc.m = sc.m < 16 ? sc.m : 16, sc.E = sc.E < 16 ? sc.E : 16;                            \
      sc.l = sc.l < 36 ? sc.l : 36, sc.f = sc.f < 40 ? sc.f : 40;                            \
      if (tile) sc.m = 6, sc.E = 8, sc.k = sc.k < 2 ? sc.k : 2, sc.l = sc.l < 20 ? sc.l : 20; \
    }                                                                                        \
    return check_infer(c, s, r, &sc, tile);                                                  \
  }
INFER_CHECK(inf_top8, top8, 0)
INFER_CHECK(inf_few, few, 0)
INFER_CHECK(inf_kimi, kimi, 0)
INFER_CHECK(inf_padded, padded, 0)
INFER_CHECK(inf_tile_top8, top8, 1)
INFER_CHECK(inf_tile_kimi, kimi, 1)

const clmoe_check clmoe_checks_moe_infer[] = {
    {"moe.infer.bf16.top8", "inference forward, bf16 expert stacks, 896 experts, top-8, latent, shared", inf_top8},
    {"moe.infer.bf16.few", "inference forward, bf16 expert stacks, 6 experts, widths 136 and 150", inf_few},
    {"moe.infer.bf16.kimi", "inference forward, bf16 expert stacks, the Kimi Linear form", inf_kimi},
    {"moe.infer.bf16.padded", "inference forward, bf16 expert stacks of a layer set to the padded path",
     inf_padded},
    {"moe.infer.bf16.tile.top8", "inference forward on the tile path (CLMOE_INFER_TILE=1), 896 experts, top-8",
     inf_tile_top8},
    {"moe.infer.bf16.tile.kimi", "inference forward on the tile path, the Kimi Linear form", inf_tile_kimi},
    {NULL, NULL, NULL}};
