/* Conformance checks of the model's layer pieces: Block AttnRes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conformance/conformance.h"
#include "ref/ref_layers.h"

#define TOL 1e-5

static clmoe_status check_attn_res(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                   int64_t S, int64_t T, int64_t d, int backward, float wscale)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor src = {0}, w = {0}, g = {0}, h = {0}, al = {0}, dh = {0}, ds = {0}, dw = {0}, dg = {0};
  double *hs = NULL, *hw = NULL, *hg = NULL, *hdh = NULL, *hds0 = NULL, *got = NULL, *ref = NULL;
  double *got2 = NULL, *ref2 = NULL, *got3 = NULL, *ref3 = NULL, *ref4 = NULL;
  const int64_t ss[3] = {S, T, d}, st2[2] = {T, d}, sa[2] = {T, S};
  const size_t nsrc = (size_t)(S * T * d), nh = (size_t)(T * d);
  CK(ck_uniform(ctx, &src, CLMOE_F32, 3, ss, seed, -2.0f, 2.0f, &hs));
  CK(ck_uniform(ctx, &w, CLMOE_F32, 1, &d, seed + 1, -wscale, wscale, &hw));
  CK(ck_uniform(ctx, &g, CLMOE_F32, 1, &d, seed + 2, 0.5f, 1.5f, &hg));
  CK(clmoe_tensor_create(ctx, &h, CLMOE_F32, 2, st2));
  CK(clmoe_tensor_create(ctx, &al, CLMOE_F32, 2, sa));
  CK(clmoe_tensor_fill(&h, NAN));
  CK(clmoe_attn_res(ctx, &src, &w, &g, 1e-5f, &h, &al));
  res->tolerance = TOL;
  if (!backward) {
    CK_ALLOC(ref, nh);
    CK_ALLOC(ref2, T * S);
    ref_attn_res(hs, S, T, d, hw, hg, 1e-5, ref, ref2);
    CK(ck_read(&h, &got));
    CK(ck_read(&al, &got2));
    ck_compare("h", got, ref, nh, res);
    ck_compare("alpha", got2, ref2, (size_t)(T * S), res);
    goto done;
  }
  CK(ck_uniform(ctx, &dh, CLMOE_F32, 2, st2, seed + 3, -1.0f, 1.0f, &hdh));
  CK(ck_uniform(ctx, &ds, CLMOE_F32, 3, ss, seed + 4, -1.0f, 1.0f, &hds0)); /* accumulated into */
  CK(clmoe_tensor_create(ctx, &dw, CLMOE_F32, 1, &d));
  CK(clmoe_tensor_create(ctx, &dg, CLMOE_F32, 1, &d));
  CK(clmoe_tensor_fill(&dw, NAN));
  CK(clmoe_tensor_fill(&dg, NAN));
  CK(clmoe_attn_res_backward(ctx, &src, &w, &g, 1e-5f, &al, &dh, &ds, &dw, &dg));
  CK_ALLOC(ref, nsrc);
  CK_ALLOC(ref3, d);
  CK_ALLOC(ref4, d);
  memcpy(ref, hds0, nsrc * sizeof *ref);
  ref_attn_res_backward(hs, S, T, d, hw, hg, 1e-5, hdh, ref, ref3, ref4);
  CK(ck_read(&ds, &got));
  CK(ck_read(&dw, &got2));
  CK(ck_read(&dg, &got3));
  ck_compare("dsources", got, ref, nsrc, res);
  ck_compare("dw", got2, ref3, (size_t)d, res);
  ck_compare("dgain", got3, ref4, (size_t)d, res);
done:
  free(hs), free(hw), free(hg), free(hdh), free(hds0), free(got), free(ref), free(got2), free(ref2);
  free(got3), free(ref3), free(ref4);
  clmoe_tensor *all[] = {&src, &w, &g, &h, &al, &dh, &ds, &dw, &dg};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  return st;
}

static clmoe_status ar_fwd(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 3, 37, 64, 0, 0.3f); }
static clmoe_status ar_fwd_one(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 1, 5, 300, 0, 0.3f); }
static clmoe_status ar_fwd_zero(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 4, 9, 33, 0, 0.0f); }
static clmoe_status ar_fwd_wide(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 9, 6, 2100, 0, 0.05f); }
static clmoe_status ar_bwd(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 3, 37, 64, 1, 0.3f); }
static clmoe_status ar_bwd_wide(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 7, 20, 1030, 1, 0.05f); }
static clmoe_status ar_bwd_one(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 1, 8, 16, 1, 0.3f); }

const clmoe_check clmoe_checks_layers[] = {
    {"attn_res.forward", "Block AttnRes, 3 sources, d 64", ar_fwd},
    {"attn_res.forward.one", "a single source (h = b_0)", ar_fwd_one},
    {"attn_res.forward.zero", "zero pseudo-query: uniform weights", ar_fwd_zero},
    {"attn_res.forward.wide", "9 sources, d 2100", ar_fwd_wide},
    {"attn_res.backward", "backward, 3 sources, d 64", ar_bwd},
    {"attn_res.backward.wide", "backward, 7 sources, d 1030", ar_bwd_wide},
    {"attn_res.backward.one", "backward, a single source", ar_bwd_one},
    {NULL, NULL, NULL}};
