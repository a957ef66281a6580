/* Conformance checks: KDA on the tile interface (issue 9). clmoe_kda_forward_tc (whatever
 * tile implementation the device has) against the double-precision token loop
 * (tests/ref/ref_kda.c), outputs and final states. Tolerance TOL_KDA_TC = 2e-2 in
 * ck_compare's measure: bf16 operand rounding (2^-9) through a few chained products. */
#include "conformance/check_kda_tc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance/kda_inputs.h"
#include "kda_tc.h"
#include "ref/ref_kda.h"

/* The case's inputs from the generator the portable KDA checks use (kda_inputs.h). */
static clmoe_status tc_setup(clmoe_ctx *ctx, uint64_t seed, const kda_tc_case *kc, kda_data *d)
{
  const kda_input_spec spec = {kc->B, kc->T, kc->H, kc->K, kc->V, kc->lens, kc->nlens, kc->h0, kc->dtype,
                               -4.0f, 4.0f, kc->z == KDA_TC_Z_EXTREME, kc->z == KDA_TC_Z_SATURATE};
  return ck_kda_setup(ctx, seed, &spec, d);
}

/* Folds max |got - ref| / max |ref| of one output into res (NaN or Inf in got: infinite). */
static void tc_compare(const char *what, const double *got, const double *ref, size_t n,
                       clmoe_check_result *res)
{
  double scale = 0.0, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
  if (scale == 0.0) scale = 1e-30;
  for (size_t i = 0; i < n; i++) {
    const double e = isfinite(got[i]) ? fabs(got[i] - ref[i]) / scale : INFINITY;
    if (e > worst || i == 0) worst = e, at = i;
  }
  if (n && (worst > res->max_err || res->worst[0] == '\0')) {
    res->max_err = fmax(res->max_err, worst);
    snprintf(res->worst, sizeof res->worst, "%s[%zu]: got %.9g, expected %.9g (max |ref| %.3g)",
             what, at, got[at], ref[at], scale);
  }
}

clmoe_status ck_kda_tc_case(clmoe_ctx *ctx, uint64_t seed, const kda_tc_case *kc,
                            clmoe_check_result *res)
{
  clmoe_status st = CLMOE_OK;
  kda_data d;
  clmoe_tensor o = {0}, ht = {0}, op = {0}, htp = {0};
  double *go = NULL, *ght = NULL, *ro = NULL, *rht = NULL, *po = NULL, *pht = NULL;
  CK(tc_setup(ctx, seed, kc, &d));
  const int64_t so[4] = {d.B, d.T, d.H, d.V}, sh[4] = {d.N, d.H, d.K, d.V};
  const size_t no = (size_t)(d.B * d.T * d.H * d.V), nh = (size_t)(d.N * d.H * d.K * d.V);
  CK(clmoe_tensor_create(ctx, &o, kc->out, 4, so));
  CK(clmoe_tensor_create(ctx, &ht, CLMOE_F32, 4, sh));
  CK(clmoe_tensor_fill(&o, NAN)); /* every element must be written */
  CK(clmoe_tensor_fill(&ht, NAN));
  clmoe_kda_inputs in = {&d.q, &d.k, &d.v, &d.z, &d.beta, &d.A_log, &d.dt_bias,
                         d.hh0 ? &d.h0 : NULL, d.cu ? &d.cu_t : NULL};
  clmoe_kda_options opts = {.lower_bound = kc->lb};
  clmoe_kda_tc_config cfg = {kc->warps, kc->lookahead};
  CK(clmoe_kda_forward_tc(ctx, &opts, &in, &o, &ht, &cfg));
  CK(ck_read(&o, &go));
  CK(ck_read(&ht, &ght));
  CK_ALLOC(ro, no);
  CK_ALLOC(rht, nh);
  ref_kda_shape s = {d.B, d.T, d.H, d.K, d.V, d.cu, d.N, 1.0 / sqrt((double)d.K),
                     kc->lb == 0.0f ? -5.0 : (double)kc->lb, 0};
  ref_kda_forward(&s, d.hq, d.hk, d.hv, d.hz, d.hbeta, d.hA, d.hdt, d.hh0, ro, rht);
  res->tolerance = TOL_KDA_TC;
  tc_compare("o", go, ro, no, res);
  tc_compare("final_state", ght, rht, nh, res);
  if (kc->vs_portable) { /* the portable chunked path on the same inputs */
    const int mode = clmoe_ctx_fastpath(ctx);
    CK(clmoe_tensor_create(ctx, &op, kc->out, 4, so));
    CK(clmoe_tensor_create(ctx, &htp, CLMOE_F32, 4, sh));
    clmoe_ctx_set_fastpath(ctx, 0);
    st = clmoe_kda_forward(ctx, &opts, &in, &op, &htp);
    clmoe_ctx_set_fastpath(ctx, mode);
    CK(st);
    CK(ck_read(&op, &po));
    CK(ck_read(&htp, &pht));
    tc_compare("o vs portable", go, po, no, res);
    tc_compare("final_state vs portable", ght, pht, nh, res);
  }
done:
  free(go), free(ght), free(ro), free(rht), free(po), free(pht);
  clmoe_tensor_destroy(&o), clmoe_tensor_destroy(&ht);
  clmoe_tensor_destroy(&op), clmoe_tensor_destroy(&htp);
  ck_kda_data_free(&d);
  return st;
}

#define F CLMOE_F32
#define BF CLMOE_BF16
#define TC_CHECK(fname, ...)                                                              \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)              \
  {                                                                                       \
    const kda_tc_case kc = __VA_ARGS__;                                                   \
    return ck_kda_tc_case(c, s, &kc, r);                                                  \
  }
static const int32_t lens_mixed[] = {1, 15, 16, 17, 40, 3};

/*                     B  T     H  K    V    lens nl h0 dtype out z                  lb    port warps ahead */
TC_CHECK(tc_mixed,   {2, 100,  2, 64,  64,  NULL, 0, 1, F,  F,  KDA_TC_Z_UNIFORM,  0.0f, 1, 0, 0})
TC_CHECK(tc_packed,  {1, 0,    2, 128, 128, lens_mixed, 6, 1, BF, BF, KDA_TC_Z_UNIFORM, 0.0f, 0, 0, 0})
TC_CHECK(tc_extreme, {1, 300,  2, 32,  32,  NULL, 0, 1, F,  F,  KDA_TC_Z_EXTREME,  0.0f, 0, 0, 0})
TC_CHECK(tc_long,    {1, 8192, 1, 16,  16,  NULL, 0, 1, BF, F,  KDA_TC_Z_SATURATE, -5.0f, 0, 0, 0})

const clmoe_check clmoe_checks_kda_tc[] = {
    {"kda_tc.forward.mixed", "tile forward, B 2, T 100, K = V = 64, initial state, vs portable", tc_mixed},
    {"kda_tc.forward.packed", "tile forward, packed lengths 1,15,16,17,40,3, bf16, K = V = 128", tc_packed},
    {"kda_tc.forward.extreme", "tile forward, gate logits of +-1e4", tc_extreme},
    {"kda_tc.forward.long", "tile forward, 8192 tokens with g = -5 on every channel", tc_long},
    {NULL, NULL, NULL}};
