/* Conformance checks of the MoE layer's few-token inference forward (clmoe_moe_decode_forward,
 * lib/moe/moe_decode.c) against the double-precision token loop (check/ref/ref_moe.c) and
 * against clmoe_moe_forward on the same device: 1, 3 and 16 tokens in the K3 form (SiTU-GLU,
 * latent, shared experts), SwiGLU, no latent projection, the Kimi Linear form (grouped
 * selection, plain weights times a scale, latent 0) and widths that are not multiples of a
 * work-group's rows. The decode path's own top-k (its router product sums in another order)
 * must be a top-k of the double scores (within 1e-5); the reference then uses that choice,
 * and clmoe_moe_forward's output is compared where its choice is the same; the forward that
 * accumulates into a random residual u must give u + y.
 *
 * The .bf16 cases store every matrix of the layer in bf16 (clmoe-generate --weights bf16) and
 * round the reference's copies alike, so the same tolerance holds; they compare against the
 * reference only (clmoe_moe_forward takes fp32 weights there).
 *
 * Tolerance: fp32 1e-5 in ck_compare's measure (|got - ref| / (|ref| + rms(ref))), the
 * layer checks' own; the dot products here are summed in another order than the grouped
 * GEMM's, so the two device paths agree to fp32 rounding, not to the bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_moe.h"

/* The layer's matrices stored as bf16 (rounded to nearest even on the device), and the host
 * copies the reference uses read back as stored. Order of ck_moe_setup's parameters
 * (check_moe_layer.c): router, W_down, W_gate, W_upp, W_dn, the gain (kept fp32), W_up, the
 * shared experts' gate, up and down. */
static clmoe_status to_bf16(clmoe_ctx *ctx, moe_data *D)
{
  clmoe_status st = CLMOE_OK;
  clmoe_moe_layer *L = &D->L;
  clmoe_tensor *t[CK_MOE_NPARAM] = {&L->w_router, &L->w_down, &L->w_gate, &L->w_upp, &L->w_dn, NULL,
                                    &L->w_up, &L->shared.w_gate, &L->shared.w_upp, &L->shared.w_dn};
  for (int i = 0; i < CK_MOE_NPARAM; i++) {
    if (!t[i] || !t[i]->buf) continue;
    clmoe_tensor b = {0};
    CK(clmoe_tensor_create(ctx, &b, CLMOE_BF16, t[i]->ndim, t[i]->shape));
    if ((st = clmoe_tensor_copy(&b, t[i])) != CLMOE_OK) {
      clmoe_tensor_destroy(&b);
      goto done;
    }
    clmoe_tensor_destroy(t[i]);
    *t[i] = b;
    free(D->hp[i]);
    D->hp[i] = NULL;
    CK(ck_read(t[i], &D->hp[i]));
  }
  D->P = (ref_moe_params){D->hp[0], D->hp[1], D->hp[2], D->hp[3], D->hp[4],
                          D->hp[5], D->hp[6], D->hp[7], D->hp[8], D->hp[9]};
done:
  return st;
}

static clmoe_status check_decode(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, const moe_case *mc,
                                 int wbf16)
{
  clmoe_status st = CLMOE_OK;
  moe_data D;
  clmoe_tensor y = {0}, y2 = {0}, y3 = {0}, s_all = {0}, topk = {0}, topk2 = {0}, scores = {0}, probs = {0};
  double *gy = NULL, *gy2 = NULL, *gy3 = NULL, *hu = NULL, *ry = NULL, *rp = NULL, *sall = NULL;
  int32_t *top = NULL, *top2 = NULL, *rtop = NULL;
  CK(ck_moe_setup(ctx, seed, mc, &D));
  if (wbf16) CK(to_bf16(ctx, &D));
  const int64_t m = mc->m, d = mc->d, k = mc->k, E = mc->E, sy[2] = {m, d};
  CK(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, sy));
  CK(clmoe_tensor_create(ctx, &y2, CLMOE_F32, 2, sy));
  CK(clmoe_tensor_fill(&y, NAN)); /* every element must be written */
  CK(clmoe_tensor_fill(&y2, NAN));
  CK(clmoe_tensor_create(ctx, &topk, CLMOE_I32, 2, (int64_t[]){m, k}));
  CK(clmoe_tensor_fill(&topk, -1.0));
  CK(clmoe_moe_decode_forward(ctx, &D.L, &D.x, 0, &y, &topk));
  if (!wbf16) CK(clmoe_moe_forward(ctx, &D.L, &D.x, &y2, NULL));
  /* accumulating into a residual stream u: y3 = u + MoE(x) */
  CK(ck_uniform(ctx, &y3, CLMOE_F32, 2, sy, seed + 60, -1.0f, 1.0f, &hu));
  CK(clmoe_moe_decode_forward(ctx, &D.L, &D.x, 1, &y3, NULL));
  CK(ck_read(&y3, &gy3));
  /* the grouped path's choice, to compare the two device paths where they chose alike */
  CK(clmoe_tensor_create(ctx, &s_all, CLMOE_F32, 2, (int64_t[]){m, E}));
  CK(clmoe_tensor_create(ctx, &topk2, CLMOE_I32, 2, (int64_t[]){m, k}));
  CK(clmoe_tensor_create(ctx, &scores, CLMOE_F32, 2, (int64_t[]){m, k}));
  CK(clmoe_tensor_create(ctx, &probs, CLMOE_F32, 2, (int64_t[]){m, k}));
  if (!wbf16) {
    CK(clmoe_moe_route(ctx, &D.L, &D.x, &s_all, &topk2, &scores, &probs, NULL));
    CK(ck_read(&y2, &gy2));
    CK(ck_moe_read_i32(&topk2, &top2));
  }
  CK(ck_read(&y, &gy));
  CK(ck_moe_read_i32(&topk, &top));
  CK_ALLOC(sall, m * E);
  CK_ALLOC(rtop, m * k);
  CK_ALLOC(ry, m * d);
  CK_ALLOC(rp, m * k);
  ref_moe_route(&D.s, D.P.w_router, D.hbias, D.hx, k, rtop, sall);
  res->tolerance = CK_MOE_TOL_FWD;
  ck_moe_check_choice(&D.s, sall, D.hbias, top, k, res); /* the decode path's own choice */
  if (isinf(res->max_err)) goto done;
  ref_moe_forward(&D.s, &D.P, D.hx, top, ry, rp);
  ck_compare("y", gy, ry, (size_t)(m * d), res);
  for (int64_t i = 0; i < m * d; i++) hu[i] += ry[i];
  ck_compare("y_accumulated", gy3, hu, (size_t)(m * d), res);
  if (!wbf16 && !memcmp(top, top2, (size_t)(m * k) * sizeof *top)) /* else a near-tie went the other way */
    ck_compare("y_vs_moe_forward", gy, gy2, (size_t)(m * d), res);
done:
  free(gy), free(gy2), free(gy3), free(hu), free(ry), free(rp), free(sall), free(top), free(top2), free(rtop);
  clmoe_tensor *t[] = {&y, &y2, &y3, &s_all, &topk, &topk2, &scores, &probs};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
  ck_moe_data_free(&D);
  return st;
}

/* m, d, l, E, k, f, n_shared, shared_ff, gemm, balance, then the Kimi Linear options */
static const moe_case k3_1 = {1, 64, 32, 896, 16, 16, 2, 16, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_QB, CK_MOE_K3};
static const moe_case k3_3 = {3, 64, 32, 896, 8, 16, 1, 16, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_QB, CK_MOE_K3};
static const moe_case k3_16 = {16, 64, 32, 896, 16, 16, 1, 16, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_QB, CK_MOE_K3};
/* widths past several lanes' strides and not multiples of any work-group's rows */
static const moe_case odd = {5, 24, 136, 6, 2, 150, 1, 20, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_QB, CK_MOE_K3};
static const moe_case swiglu = {4, 48, 24, 64, 4, 24, 1, 16, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_NONE,
                                CLMOE_GLU_SWIGLU, 0, 0, 0, 0.0f, 0};
static const moe_case nolatent = {3, 48, 0, 64, 4, 24, 0, 0, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_NONE,
                                  CLMOE_GLU_SITU, 0, 0, 0, 1.5f, 0};
static const moe_case kimi = {2, 48, 0, 64, 4, 24, 1, 16, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_NONE,
                              CLMOE_GLU_SWIGLU, 4, 2, 1, 2.5f, 0};

#define DECODE_CHECK(fname, mc)                                                              \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)                 \
  {                                                                                          \
    const moe_case sc = ck_moe_sized(&(mc));                                                 \
    return check_decode(c, s, r, &sc, 0);                                                    \
  }
#define DECODE_CHECK_BF16(fname, mc)                                                         \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)                 \
  {                                                                                          \
    const moe_case sc = ck_moe_sized(&(mc));                                                 \
    return check_decode(c, s, r, &sc, 1);                                                    \
  }
DECODE_CHECK(dec_k3_1, k3_1)
DECODE_CHECK(dec_k3_3, k3_3)
DECODE_CHECK(dec_k3_16, k3_16)
DECODE_CHECK(dec_odd, odd)
DECODE_CHECK(dec_swiglu, swiglu)
DECODE_CHECK(dec_nolatent, nolatent)
DECODE_CHECK(dec_kimi, kimi)
DECODE_CHECK_BF16(dec_bf16_k3_3, k3_3)
DECODE_CHECK_BF16(dec_bf16_odd, odd)
DECODE_CHECK_BF16(dec_bf16_kimi, kimi)

const clmoe_check clmoe_checks_moe_decode[] = {
    {"moe.decode.top16", "few-token forward, 1 token, 896 experts, top-16, 2 shared", dec_k3_1},
    {"moe.decode.top8", "few-token forward, 3 tokens, top-8", dec_k3_3},
    {"moe.decode.batch16", "few-token forward, 16 tokens, top-16", dec_k3_16},
    {"moe.decode.odd", "few-token forward, 6 experts, widths 136 and 150", dec_odd},
    {"moe.decode.swiglu", "few-token forward, SwiGLU routed and shared experts", dec_swiglu},
    {"moe.decode.no_latent", "few-token forward, latent 0, scale 1.5, no shared expert", dec_nolatent},
    {"moe.decode.kimi", "few-token forward, SwiGLU, 4 groups keep 2, p = 2.5 s, latent 0", dec_kimi},
    {"moe.decode.bf16.top8", "few-token forward, bf16 weights, 3 tokens, top-8, latent, shared", dec_bf16_k3_3},
    {"moe.decode.bf16.odd", "few-token forward, bf16 weights, widths 136 and 150", dec_bf16_odd},
    {"moe.decode.bf16.kimi", "few-token forward, bf16 weights, the Kimi Linear form", dec_bf16_kimi},
    {NULL, NULL, NULL}};
