/* Conformance checks of the MoE pieces other than the layer's forward and backward (those are
 * in check_moe_layer.c; this file's table lists them all): dispatch invariants, Quantile
 * Balancing (exact, histogram) and the sign rule, against the double-precision reference
 * (check/ref/ref_moe.c). Tolerances as stated at each check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_moe.h"

/* ---- dispatch ------------------------------------------------------------------------------ */

/* Marks a failed invariant (infinite error) with its description; keeps the first. */
static int fail_at(clmoe_check_result *res, const char *what, int64_t where)
{
  if (isinf(res->max_err)) return 1;
  res->max_err = INFINITY;
  snprintf(res->worst, sizeof res->worst, "%s (at %lld)", what, (long long)where);
  return 1;
}

/* Random choices of k distinct experts per token, skewed towards low indices (many empty
 * experts, a few crowded ones). */
static void skewed_topk(uint64_t seed, int64_t m, int64_t E, int64_t k, int32_t *topk)
{
  uint64_t draw = 0;
  for (int64_t t = 0; t < m; t++)
    for (int64_t j = 0; j < k; j++) {
      int32_t e;
      int dup;
      do {
        double u = ck_host_uniform(seed, draw++, 0.0, 1.0);
        e = (int32_t)(u * u * u * (double)E);
        if (e >= E) e = (int32_t)E - 1;
        dup = 0;
        for (int64_t q = 0; q < j; q++) dup |= topk[t * k + q] == e;
      } while (dup);
      topk[t * k + j] = e;
    }
}

static void check_dispatch_tables(const clmoe_moe_dispatch *dp, const int32_t *topk, const int32_t *perm,
                                  const int32_t *off, const int32_t *pos, const int32_t *tiles,
                                  int padded, clmoe_check_result *res)
{
  const int64_t m = dp->tokens, k = dp->top_k, E = dp->n_experts, mk = m * k;
  int64_t *cnt = calloc((size_t)E, sizeof *cnt), cap = 0;
  char *seen = calloc((size_t)mk + 1, 1);
  if (!cnt || !seen) {
    fail_at(res, "out of host memory", 0);
    goto done;
  }
  for (int64_t i = 0; i < mk; i++) cnt[topk[i]]++;
  if (off[0] != 0 || off[E] != mk) fail_at(res, "offsets do not run from 0 to m k", 0);
  for (int64_t e = 0; e < E; e++) {
    if (off[e + 1] - off[e] != cnt[e]) fail_at(res, "an expert's count differs from the choices", e);
    if (cnt[e] > cap) cap = cnt[e];
  }
  if (padded ? dp->cap != cap || dp->rows != E * cap : dp->rows != mk)
    fail_at(res, "wrong number of expert-buffer rows", 0);
  for (int64_t e = 0; e < E; e++)
    for (int64_t r = off[e]; r < off[e + 1] && r >= 0 && r < mk; r++) {
      const int32_t i = perm[r];
      if (i < 0 || i >= mk || seen[i]) {
        fail_at(res, "a (token, slot) pair is missing or repeated", r);
        continue;
      }
      seen[i] = 1;
      if (topk[i] != e) fail_at(res, "a pair sits in another expert's run", r);
      if (r > off[e] && perm[r - 1] >= i) fail_at(res, "order inside an expert is not stable", r);
      if (pos[i] != (padded ? e * cap + (r - off[e]) : r)) fail_at(res, "pos is not the pair's row", i);
    }
  if (!padded) { /* tiles: each expert's rows in steps of tile_rows, in order, then -1 */
    int64_t n = 0;
    for (int64_t e = 0; e < E; e++)
      for (int64_t r = off[e]; r < off[e + 1]; r += dp->tile_rows, n++)
        if (n >= dp->max_tiles || tiles[2 * n] != e || tiles[2 * n + 1] != r) {
          fail_at(res, "the tile table does not cover the experts' rows in order", n);
          goto done;
        }
    for (; n < dp->max_tiles; n++)
      if (tiles[2 * n] != -1) fail_at(res, "a tile past the last is not marked -1", n);
  }
done:
  free(cnt), free(seen);
}

static clmoe_status check_dispatch(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, int padded)
{
  static const int64_t cases[3][3] = {{100, 896, 8}, {300, 5, 3}, {33, 896, 16}}; /* m, E, k */
  clmoe_status st = CLMOE_OK;
  clmoe_moe_dispatch dp;
  clmoe_tensor topk = {0}, x = {0}, xs = {0}, z = {0}, p = {0};
  int32_t *ht = NULL, *perm = NULL, *off = NULL, *pos = NULL, *tiles = NULL;
  double *hx = NULL, *gz = NULL;
  float *hp = NULL;
  memset(&dp, 0, sizeof dp);
  res->tolerance = 1e-6; /* sum of p x over slots, sum of p = 1 in fp32 */
  for (int c = 0; c < 3; c++) {
    const int64_t m = cases[c][0], E = clmoe_check_small() && cases[c][1] > 32 ? 32 : cases[c][1];
    const int64_t k = cases[c][2], l = 24;
    CK_ALLOC(ht, m * k);
    skewed_topk(seed + (uint64_t)c, m, E, k, ht);
    const int64_t st2[2] = {m, k}, sx[2] = {m, l};
    CK(clmoe_tensor_create(ctx, &topk, CLMOE_I32, 2, st2));
    CK(clmoe_tensor_write(&topk, ht, (size_t)(m * k) * sizeof *ht));
    CK(clmoe_moe_dispatch_create(ctx, &topk, E, padded, &dp));
    CK(ck_moe_read_i32(&dp.perm, &perm));
    CK(ck_moe_read_i32(&dp.offsets, &off));
    CK(ck_moe_read_i32(&dp.pos, &pos));
    if (!padded) CK(ck_moe_read_i32(&dp.tiles, &tiles));
    check_dispatch_tables(&dp, ht, perm, off, pos, tiles, padded, res);
    /* combine after gather with weights summing to 1 gives x back */
    CK(ck_uniform(ctx, &x, CLMOE_F32, 2, sx, seed + 70 + (uint64_t)c, -1.0f, 1.0f, &hx));
    CK_ALLOC(hp, m * k);
    for (int64_t t = 0; t < m; t++) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; j++) sum += hp[t * k + j] = (float)ck_host_uniform(seed + 80, t * k + j, 0.1, 1.0);
      for (int64_t j = 0; j < k; j++) hp[t * k + j] /= sum;
    }
    CK(clmoe_tensor_create(ctx, &p, CLMOE_F32, 2, st2));
    CK(clmoe_tensor_write_f32(&p, hp));
    const int64_t sxs[2] = {dp.rows, l};
    CK(clmoe_tensor_create(ctx, &xs, CLMOE_F32, 2, sxs));
    CK(clmoe_tensor_create(ctx, &z, CLMOE_F32, 2, sx));
    CK(clmoe_tensor_fill(&xs, NAN));
    CK(clmoe_tensor_fill(&z, NAN));
    CK(clmoe_moe_gather(ctx, &dp, &x, &xs));
    CK(clmoe_moe_combine(ctx, &dp, &p, &xs, &z));
    CK(ck_read(&z, &gz));
    ck_compare("combine(gather(x))", gz, hx, (size_t)(m * l), res);
    free(ht), free(perm), free(off), free(pos), free(tiles), free(hx), free(gz), free(hp);
    ht = perm = off = pos = tiles = NULL, hx = gz = NULL, hp = NULL;
    clmoe_moe_dispatch_destroy(&dp);
    clmoe_tensor_destroy(&topk), clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&xs);
    clmoe_tensor_destroy(&z), clmoe_tensor_destroy(&p);
  }
done:
  free(ht), free(perm), free(off), free(pos), free(tiles), free(hx), free(gz), free(hp);
  clmoe_moe_dispatch_destroy(&dp);
  clmoe_tensor_destroy(&topk), clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&xs);
  clmoe_tensor_destroy(&z), clmoe_tensor_destroy(&p);
  return st;
}

static clmoe_status dispatch_check(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_dispatch(c, s, r, 0); }
static clmoe_status dispatch_check_padded(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_dispatch(c, s, r, 1); }

/* ---- balancing ------------------------------------------------------------------------------ */

/* Routes the layer's x with cut-offs: device s_all, cutoff, topk read back. */
static clmoe_status route_cutoff(clmoe_ctx *ctx, moe_data *D, clmoe_tensor *s_all, clmoe_tensor *cut,
                                 double **hs, double **hc, int32_t **ht)
{
  clmoe_status st = CLMOE_OK;
  const int64_t m = D->s.m, k = D->s.k;
  clmoe_tensor topk = {0}, sc = {0}, p = {0};
  const int64_t sa[2] = {m, D->s.E}, sk[2] = {m, k};
  CK(clmoe_tensor_create(ctx, s_all, CLMOE_F32, 2, sa));
  CK(clmoe_tensor_create(ctx, cut, CLMOE_F32, 1, &m));
  CK(clmoe_tensor_create(ctx, &topk, CLMOE_I32, 2, sk));
  CK(clmoe_tensor_create(ctx, &sc, CLMOE_F32, 2, sk));
  CK(clmoe_tensor_create(ctx, &p, CLMOE_F32, 2, sk));
  CK(clmoe_moe_route(ctx, &D->L, &D->x, s_all, &topk, &sc, &p, cut));
  CK(ck_read(s_all, hs));
  CK(ck_read(cut, hc));
  CK(ck_moe_read_i32(&topk, ht));
done:
  clmoe_tensor_destroy(&topk), clmoe_tensor_destroy(&sc), clmoe_tensor_destroy(&p);
  return st;
}

/* QB: the router's s and cut-offs against the double reference, then the device's thresholds
 * (exact, or from its histogram) against the reference applied to the device's margins. */
static clmoe_status check_qb(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, int hist, int64_t experts)
{
  const moe_case full = {experts > 896 ? 64 : 256, 64, 32, experts, 8, 16, 0, 0, CLMOE_MOE_GEMM_GROUPED,
                         CLMOE_MOE_BALANCE_QB, CK_MOE_K3};
  const moe_case qc = ck_moe_sized(&full);
  const int bins = 1000;
  clmoe_status st = CLMOE_OK;
  moe_data D;
  clmoe_tensor s_all = {0}, cut = {0}, thr = {0}, counts = {0}, range = {0};
  double *hs = NULL, *hc = NULL, *rs = NULL, *rc = NULL, *gthr = NULL, *rthr = NULL, *gb = NULL;
  double *rb = NULL, *ex = NULL, *hr = NULL;
  int32_t *ht = NULL, *rt = NULL, *gc = NULL, *rcnt = NULL;
  CK(ck_moe_setup(ctx, seed, &qc, &D));
  const int64_t m = qc.m, E = qc.E, k = qc.k, sc2[2] = {E, bins};
  CK(route_cutoff(ctx, &D, &s_all, &cut, &hs, &hc, &ht));
  CK_ALLOC(rs, m * E);
  CK_ALLOC(rt, m * (k + 1));
  CK_ALLOC(rc, m);
  CK_ALLOC(rthr, E);
  CK_ALLOC(rb, E);
  CK_ALLOC(ex, E);
  ref_moe_route(&D.s, D.P.w_router, D.hbias, D.hx, k + 1, rt, rs);
  res->tolerance = CK_MOE_TOL_FWD;
  ck_moe_check_choice(&D.s, rs, D.hbias, ht, k, res);
  for (int64_t t = 0; t < m; t++) rc[t] = rs[t * E + rt[t * (k + 1) + k]] + D.hbias[rt[t * (k + 1) + k]];
  ck_compare("s_all", hs, rs, (size_t)(m * E), res);
  ck_compare("cutoff", hc, rc, (size_t)m, res);
  CK(clmoe_tensor_create(ctx, &thr, CLMOE_F32, 1, &E));
  ref_moe_qb_exact(m, E, k, hs, hc, ex);
  if (!hist) {
    CK(clmoe_moe_qb_threshold_exact(ctx, &s_all, &cut, k, &thr));
    for (int64_t j = 0; j < E; j++) rthr[j] = ex[j];
  } else {
    const int64_t three = 3;
    CK(clmoe_tensor_create(ctx, &counts, CLMOE_I32, 2, sc2));
    CK(clmoe_tensor_create(ctx, &range, CLMOE_F32, 1, &three));
    CK(clmoe_moe_qb_histogram(ctx, &s_all, &cut, &D.L.bias, &counts, &range));
    CK(ck_moe_read_i32(&counts, &gc));
    CK(ck_read(&range, &hr));
    /* the range from the bias, and every count exactly: the same float operations on the host */
    float mx = (float)D.hbias[0], mn = (float)D.hbias[0];
    for (int64_t j = 1; j < E; j++) mx = fmaxf(mx, (float)D.hbias[j]), mn = fminf(mn, (float)D.hbias[j]);
    if ((float)hr[0] != -1.0f - mx || (float)hr[1] != 1.0f - mn ||
        !(fabs(hr[2] - bins / (hr[1] - hr[0])) <= 1e-6 * hr[2]))
      fail_at(res, "range is not {-1 - max b, 1 - min b, bins / (hi - lo)}", 0);
    CK_ALLOC(rcnt, E * bins);
    memset(rcnt, 0, (size_t)(E * bins) * sizeof *rcnt);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < E; j++) {
        const float x = ((float)hs[i * E + j] - (float)hc[i] - (float)hr[0]) * (float)hr[2];
        const int b = (int)fminf(fmaxf(floorf(x), 0.0f), (float)(bins - 1));
        rcnt[j * bins + b]++;
      }
    for (int64_t i = 0; i < E * bins; i++)
      if (gc[i] != rcnt[i]) fail_at(res, "a histogram count differs", i);
    CK(clmoe_moe_qb_threshold_hist(ctx, &counts, &range, m, k, &thr));
    ref_moe_qb_from_hist(E, bins, gc, hr[0], hr[1], m, k, rthr);
    /* the estimate stays within one bin of the exact threshold */
    const double w = (hr[1] - hr[0]) / bins;
    for (int64_t j = 0; j < E; j++)
      if (!(fabs(rthr[j] - ex[j]) <= w * (1.0 + 1e-6))) fail_at(res, "histogram estimate off by more than a bin", j);
  }
  CK(ck_read(&thr, &gthr));
  ck_compare("thr", gthr, rthr, (size_t)E, res);
  CK(clmoe_moe_bias_from_threshold(ctx, &thr, &D.L.bias));
  CK(ck_read(&D.L.bias, &gb));
  ref_moe_bias_from_thr(E, rthr, rb);
  ck_compare("bias", gb, rb, (size_t)E, res);
done:
  free(hs), free(hc), free(rs), free(rc), free(gthr), free(rthr), free(gb), free(rb), free(ex);
  free(hr), free(ht), free(rt), free(gc), free(rcnt);
  clmoe_tensor_destroy(&s_all), clmoe_tensor_destroy(&cut), clmoe_tensor_destroy(&thr);
  clmoe_tensor_destroy(&counts), clmoe_tensor_destroy(&range);
  ck_moe_data_free(&D);
  return st;
}

static clmoe_status qb_exact(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_qb(c, s, r, 0, 896); }
static clmoe_status qb_hist(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_qb(c, s, r, 1, 896); }
/* more experts than the router has lanes times 16 */
static clmoe_status qb_wide(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_qb(c, s, r, 0, 1100); }

/* The sign rule through a train-mode forward and clmoe_moe_balance_update. */
static clmoe_status sign_rule(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  static const moe_case full = {64, 64, 32, 896, 8, 16, 0, 0, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_SIGN, CK_MOE_K3};
  const moe_case sc = ck_moe_sized(&full);
  clmoe_status st = CLMOE_OK;
  moe_data D;
  clmoe_moe_saved sv;
  clmoe_tensor y = {0};
  int32_t *ht = NULL;
  int64_t *cnt = NULL;
  double *gb = NULL;
  memset(&sv, 0, sizeof sv);
  CK(ck_moe_setup(ctx, seed, &sc, &D));
  CK(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, (int64_t[]){sc.m, sc.d}));
  CK(clmoe_moe_forward(ctx, &D.L, &D.x, &y, &sv));
  CK(clmoe_moe_balance_update(ctx, &D.L, &sv));
  CK(ck_moe_read_i32(&sv.topk, &ht));
  CK(ck_read(&D.L.bias, &gb));
  CK_ALLOC(cnt, sc.E);
  ref_moe_loads(sc.m, sc.E, sc.k, ht, cnt);
  ref_moe_sign_update(sc.E, sc.m, sc.k, cnt, 1e-3, D.hbias);
  res->tolerance = 1e-6;
  ck_compare("bias", gb, D.hbias, (size_t)sc.E, res);
done:
  free(ht), free(cnt), free(gb);
  clmoe_tensor_destroy(&y);
  clmoe_moe_saved_destroy(&sv);
  ck_moe_data_free(&D);
  return st;
}

const clmoe_check clmoe_checks_moe[] = {
    {"moe.forward.top8", "layer forward, 896 experts, top-8, tiny widths", ck_moe_fwd_top8},
    {"moe.forward.top16", "layer forward, 896 experts, top-16, 2 shared experts", ck_moe_fwd_top16},
    {"moe.forward.few", "layer forward, 6 experts of ~70 rows, odd widths", ck_moe_fwd_few},
    {"moe.forward.padded", "layer forward through CLBlast over padded groups", ck_moe_fwd_pad},
    {"moe.backward.top8", "layer backward, 896 experts, top-8", ck_moe_bwd_top8},
    {"moe.backward.top16", "layer backward, 896 experts, top-16", ck_moe_bwd_top16},
    {"moe.backward.few", "layer backward, 6 experts of ~70 rows", ck_moe_bwd_few},
    {"moe.backward.padded", "layer backward through CLBlast over padded groups", ck_moe_bwd_pad},
    {"moe.backward.few_padded", "padded backward, 6 experts, no shared expert", ck_moe_bwd_few_pad},
    {"moe.forward.swiglu", "layer forward, SwiGLU routed and shared experts", ck_moe_fwd_swiglu},
    {"moe.backward.swiglu", "layer backward, SwiGLU experts", ck_moe_bwd_swiglu},
    {"moe.backward.swiglu_padded", "padded backward, SwiGLU experts", ck_moe_bwd_swiglu_pad},
    {"moe.forward.grouped", "layer forward, 8 groups, the best 2 kept, top-4", ck_moe_fwd_grouped},
    {"moe.backward.grouped", "layer backward, grouped selection", ck_moe_bwd_grouped},
    {"moe.forward.plain_weights", "layer forward, p = 2.5 s (no renormalisation)", ck_moe_fwd_plain_p},
    {"moe.backward.plain_weights", "layer backward, p = 2.5 s", ck_moe_bwd_plain_p},
    {"moe.forward.no_latent", "layer forward, latent 0 (no W_down, norm, W_up), scale 1.5", ck_moe_fwd_nolatent},
    {"moe.backward.no_latent", "layer backward, latent 0", ck_moe_bwd_nolatent},
    {"moe.backward.no_latent_padded", "padded backward, latent 0", ck_moe_bwd_nolatent_pad},
    {"moe.forward.kimi", "layer forward, SwiGLU, 4 groups keep 2, p = 2.5 s, latent 0", ck_moe_fwd_kimi},
    {"moe.backward.kimi", "layer backward, the Kimi Linear form", ck_moe_bwd_kimi},
    {"moe.bf16.forward.top8", "bf16 expert weights on tiles: layer forward, 896 experts, top-8", ck_moe_bf16_fwd_top8},
    {"moe.bf16.backward.top8", "bf16 expert weights on tiles: layer backward, top-8", ck_moe_bf16_bwd_top8},
    {"moe.bf16.forward.few", "bf16 experts: forward, 6 experts of ~70 rows, odd widths", ck_moe_bf16_fwd_few},
    {"moe.bf16.backward.few", "bf16 experts: backward, 6 experts of ~70 rows", ck_moe_bf16_bwd_few},
    {"moe.bf16.backward.swiglu", "bf16 experts: backward, SwiGLU", ck_moe_bf16_bwd_swiglu},
    {"moe.ffn.situ.forward", "dense SiTU-GLU FFN forward, y accumulated", ck_moe_ffn_situ_fwd},
    {"moe.ffn.situ.backward", "dense SiTU-GLU FFN backward, dx accumulated", ck_moe_ffn_situ_bwd},
    {"moe.ffn.swiglu.forward", "dense SwiGLU FFN forward, y accumulated", ck_moe_ffn_swiglu_fwd},
    {"moe.ffn.swiglu.backward", "dense SwiGLU FFN backward, dx accumulated", ck_moe_ffn_swiglu_bwd},
    {"moe.dispatch", "every (token, slot) once, stable order, counts, tiles; combine(gather) = id", dispatch_check},
    {"moe.dispatch.padded", "the same over groups padded to the largest expert", dispatch_check_padded},
    {"moe.qb.exact", "QB cut-offs and exact thresholds, 896 experts, top-8", qb_exact},
    {"moe.qb.hist", "QB histogram counts (exact), thresholds from counts", qb_hist},
    {"moe.qb.wide", "the router and QB thresholds at 1100 experts, top-8", qb_wide},
    {"moe.sign", "DeepSeek sign rule update", sign_rule},
    {NULL, NULL, NULL}};
