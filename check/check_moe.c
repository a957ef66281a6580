/* Conformance checks of the Stable LatentMoE layer (include/clmoe/moe.h) against the double-precision
 * token loop (check/ref/ref_moe.c): forward and backward with 896 experts and top-8/top-16 at
 * the tiny preset's widths, a few experts with many rows each (several row and column tiles
 * of the grouped GEMM), the padded CLBlast path (the shared experts run the dense SiTU-GLU
 * FFN, accumulating); dispatch invariants; Quantile Balancing (exact, histogram) and the
 * sign rule.
 *
 * Tolerances: fp32 1e-5 in ck_compare's measure (|got - ref| / (|ref| + rms(ref))); the
 * weight gradients sum over every token routed to an expert and get 2e-5. The device's
 * top-k is accepted when it is a top-k of the double scores within 1e-5 (a near-tie may
 * fall either way in fp32), and the reference then uses the device's choice. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "ref/ref_moe.h"

#define TOL_FWD 1e-5
#define TOL_GRAD 2e-5
#define TOL_CHOICE 1e-5
#define NPARAM 10

typedef struct moe_case {
  int64_t m, d, l, E, k, f, n_shared, shared_ff;
  clmoe_moe_gemm gemm;
  clmoe_moe_balance balance;
} moe_case;

/* A layer with random parameters and bias, x, and their host copies. */
typedef struct moe_data {
  clmoe_moe_layer L;
  clmoe_tensor x;
  double *hx, *hbias, *hp[NPARAM];
  ref_moe_shape s;
  ref_moe_params P;
} moe_data;

static void moe_data_free(moe_data *D)
{
  clmoe_moe_layer_destroy(&D->L);
  clmoe_tensor_destroy(&D->x);
  free(D->hx), free(D->hbias);
  for (int i = 0; i < NPARAM; i++) free(D->hp[i]);
  memset(D, 0, sizeof *D);
}

static void layer_params(clmoe_moe_layer *L, clmoe_tensor *t[NPARAM])
{
  t[0] = &L->w_router, t[1] = &L->w_down, t[2] = &L->w_gate, t[3] = &L->w_upp, t[4] = &L->w_dn;
  t[5] = &L->norm_gain, t[6] = &L->w_up, t[7] = &L->shared.w_gate, t[8] = &L->shared.w_upp;
  t[9] = &L->shared.w_dn;
}

static void grad_params(clmoe_moe_grads *g, clmoe_tensor *t[NPARAM])
{
  t[0] = &g->w_router, t[1] = &g->w_down, t[2] = &g->w_gate, t[3] = &g->w_upp, t[4] = &g->w_dn;
  t[5] = &g->norm_gain, t[6] = &g->w_up, t[7] = &g->shared.w_gate, t[8] = &g->shared.w_upp;
  t[9] = &g->shared.w_dn;
}

static const char *const param_names[NPARAM] = {"dw_router", "dw_down", "dw_gate", "dw_upp", "dw_dn",
                                                "dgain", "dw_up", "dsh_gate", "dsh_upp", "dsh_dn"};

static ref_moe_params ref_params(double *p[NPARAM])
{
  ref_moe_params r = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9]};
  return r;
}

static clmoe_status moe_setup(clmoe_ctx *ctx, uint64_t seed, const moe_case *mc, moe_data *D)
{
  clmoe_status st = CLMOE_OK;
  memset(D, 0, sizeof *D);
  clmoe_moe_config cfg = {.d = mc->d, .latent = mc->l, .n_experts = mc->E, .top_k = mc->k,
                          .expert_ff = mc->f, .n_shared = mc->n_shared, .shared_ff = mc->shared_ff,
                          .gemm = mc->gemm, .balance = mc->balance};
  CK(clmoe_moe_layer_create(ctx, &D->L, &cfg));
  const int64_t S = mc->n_shared * mc->shared_ff;
  /* Scales that keep every stage near unit size; gate products of a few units exercise the
   * tanh and sigmoid of SiTU well away from their linear range. */
  const double a[NPARAM] = {3.0 / sqrt((double)mc->d), 3.0 / sqrt((double)mc->d), 5.0 / sqrt((double)mc->l),
                            3.0 / sqrt((double)mc->l), 3.0 / sqrt((double)mc->f), 0.0,
                            2.0 / sqrt((double)mc->l), 3.0 / sqrt((double)mc->d),
                            3.0 / sqrt((double)mc->d), S ? 2.0 / sqrt((double)S) : 0.0};
  clmoe_tensor *t[NPARAM];
  layer_params(&D->L, t);
  for (int i = 0; i < NPARAM; i++) {
    if (!t[i]->buf) continue;
    if (i == 5) CK(clmoe_tensor_fill_uniform(t[i], seed + 20 + i, 0.5f, 1.5f));
    else CK(clmoe_tensor_fill_uniform(t[i], seed + 20 + i, (float)-a[i], (float)a[i]));
    CK(ck_read(t[i], &D->hp[i]));
  }
  CK(clmoe_tensor_fill_uniform(&D->L.bias, seed + 40, -0.05f, 0.05f));
  CK(ck_read(&D->L.bias, &D->hbias));
  const int64_t sx[2] = {mc->m, mc->d};
  CK(ck_uniform(ctx, &D->x, CLMOE_F32, 2, sx, seed + 41, -1.0f, 1.0f, &D->hx));
  ref_moe_shape s = {mc->m, mc->d, mc->l, mc->E, mc->k, mc->f, S, 1e-5};
  D->s = s;
  D->P = ref_params(D->hp);
done:
  if (st != CLMOE_OK) moe_data_free(D);
  return st;
}

/* The device's choice topk [m, k1] must be a top-k1 of s + bias in the double scores. */
static void check_choice(const ref_moe_shape *s, const double *s_all, const double *bias,
                         const int32_t *topk, int64_t k1, clmoe_check_result *res)
{
  char *in = malloc((size_t)s->E);
  for (int64_t t = 0; t < s->m && in; t++) {
    const double *z = s_all + t * s->E;
    const int32_t *sel = topk + t * k1;
    memset(in, 0, (size_t)s->E);
    double worst = 0.0, lowest = INFINITY;
    for (int64_t j = 0; j < k1; j++) {
      if (sel[j] < 0 || sel[j] >= s->E || in[sel[j]]) {
        worst = INFINITY;
        break;
      }
      in[sel[j]] = 1;
      const double v = z[sel[j]] + bias[sel[j]];
      if (j > 0) worst = fmax(worst, v - (z[sel[j - 1]] + bias[sel[j - 1]])); /* descending */
      lowest = fmin(lowest, v);
    }
    for (int64_t e = 0; e < s->E && isfinite(worst); e++)
      if (!in[e]) worst = fmax(worst, z[e] + bias[e] - lowest);
    if (!(worst <= TOL_CHOICE)) {
      res->max_err = INFINITY;
      snprintf(res->worst, sizeof res->worst, "token %lld: the device's top-%lld is not a top-%lld of "
               "s + b (violation %.3g)", (long long)t, (long long)k1, (long long)k1, worst);
      break;
    }
  }
  free(in);
}

static clmoe_status read_i32(const clmoe_tensor *t, int32_t **out)
{
  size_t n = (size_t)clmoe_tensor_numel(t);
  *out = malloc(n * sizeof **out + 1);
  if (!*out) return CLMOE_ERR_OUT_OF_MEMORY;
  return clmoe_tensor_read(t, *out, n * sizeof **out);
}

/* Forward and, with `backward`, the gradients against the reference with the device's choice. */
static clmoe_status check_layer(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                const moe_case *mc, int backward)
{
  clmoe_status st = CLMOE_OK;
  moe_data D;
  clmoe_moe_saved sv;
  clmoe_moe_grads g;
  clmoe_tensor y = {0}, y2 = {0}, dy = {0}, dx = {0};
  double *gy = NULL, *gy2 = NULL, *gp = NULL, *ry = NULL, *rp = NULL, *sall = NULL, *hdy = NULL;
  double *gdx = NULL, *rdx = NULL, *gg[NPARAM] = {0}, *rg[NPARAM] = {0};
  int32_t *topk = NULL, *rtop = NULL;
  memset(&sv, 0, sizeof sv);
  memset(&g, 0, sizeof g);
  CK(moe_setup(ctx, seed, mc, &D));
  const int64_t m = mc->m, d = mc->d, k = mc->k, sy[2] = {m, d};
  CK(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, sy));
  CK(clmoe_tensor_create(ctx, &y2, CLMOE_F32, 2, sy));
  CK(clmoe_tensor_fill(&y, NAN));
  CK(clmoe_tensor_fill(&y2, NAN));
  CK(clmoe_moe_forward(ctx, &D.L, &D.x, &y, &sv)); /* train mode */
  CK(clmoe_moe_forward(ctx, &D.L, &D.x, &y2, NULL)); /* inference: the same bits */
  CK(ck_read(&y, &gy));
  CK(ck_read(&y2, &gy2));
  CK(ck_read(&sv.probs, &gp));
  CK(read_i32(&sv.topk, &topk));
  CK_ALLOC(sall, m * mc->E);
  CK_ALLOC(rtop, m * k);
  CK_ALLOC(ry, m * d);
  CK_ALLOC(rp, m * k);
  ref_moe_route(&D.s, D.P.w_router, D.hbias, D.hx, k, rtop, sall);
  res->tolerance = TOL_FWD;
  check_choice(&D.s, sall, D.hbias, topk, k, res);
  if (isinf(res->max_err)) goto done;
  ref_moe_forward(&D.s, &D.P, D.hx, topk, ry, rp);
  ck_compare("y", gy, ry, (size_t)(m * d), res);
  ck_compare("probs", gp, rp, (size_t)(m * k), res);
  for (int64_t i = 0; i < m * d; i++)
    if (memcmp(&gy[i], &gy2[i], sizeof gy[i])) {
      res->max_err = INFINITY;
      snprintf(res->worst, sizeof res->worst, "y[%lld]: inference %.9g differs from train mode %.9g",
               (long long)i, gy2[i], gy[i]);
      break;
    }
  if (!backward) goto done;
  res->tolerance = TOL_GRAD;
  CK(ck_uniform(ctx, &dy, CLMOE_F32, 2, sy, seed + 50, -1.0f, 1.0f, &hdy));
  CK(clmoe_tensor_create(ctx, &dx, CLMOE_F32, 2, sy));
  CK(clmoe_tensor_fill(&dx, NAN));
  CK(clmoe_moe_grads_create(ctx, &D.L, &g));
  clmoe_tensor *gt[NPARAM];
  grad_params(&g, gt);
  for (int i = 0; i < NPARAM; i++)
    if (gt[i]->buf) CK(clmoe_tensor_fill(gt[i], NAN));
  CK(clmoe_moe_backward(ctx, &D.L, &D.x, &sv, &dy, &g, &dx));
  CK(ck_read(&dx, &gdx));
  CK_ALLOC(rdx, m * d);
  for (int i = 0; i < NPARAM; i++)
    if (gt[i]->buf) {
      CK(ck_read(gt[i], &gg[i]));
      CK_ALLOC(rg[i], clmoe_tensor_numel(gt[i]));
    }
  ref_moe_params rgp = ref_params(rg);
  ref_moe_backward(&D.s, &D.P, D.hx, topk, hdy, &rgp, rdx);
  ck_compare("dx", gdx, rdx, (size_t)(m * d), res);
  for (int i = 0; i < NPARAM; i++)
    if (gt[i]->buf) ck_compare(param_names[i], gg[i], rg[i], (size_t)clmoe_tensor_numel(gt[i]), res);
done:
  free(gy), free(gy2), free(gp), free(ry), free(rp), free(sall), free(hdy), free(gdx), free(rdx);
  free(topk), free(rtop);
  for (int i = 0; i < NPARAM; i++) free(gg[i]), free(rg[i]);
  clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&y2), clmoe_tensor_destroy(&dy);
  clmoe_tensor_destroy(&dx);
  clmoe_moe_grads_destroy(&g);
  clmoe_moe_saved_destroy(&sv);
  moe_data_free(&D);
  return st;
}

/* tiny preset widths: d 64, latent 32, expert ff 16, 896 experts, 1 shared expert of 16 */
static const moe_case tiny8 = {48, 64, 32, 896, 8, 16, 1, 16, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_QB};
static const moe_case tiny16 = {40, 64, 32, 896, 16, 16, 2, 16, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_QB};
/* 6 experts with ~70 rows each; widths above one column tile and not tile multiples */
static const moe_case few = {210, 24, 136, 6, 2, 150, 1, 20, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_QB};
static const moe_case tiny8_pad = {48, 64, 32, 896, 8, 16, 1, 16, CLMOE_MOE_GEMM_PADDED, CLMOE_MOE_BALANCE_QB};
static const moe_case few_pad = {210, 24, 136, 6, 2, 150, 0, 0, CLMOE_MOE_GEMM_PADDED, CLMOE_MOE_BALANCE_QB};

/* The case at the checks' sizes: at the smallest (clmoe_check_small) 32 experts instead of
 * 896, at most 140 tokens, and the few-expert case's widths just above one tile (72 and 80
 * for 136 and 150):
 * the same routing, grouping, ragged tiles and balancing paths. */
static moe_case sized(const moe_case *c)
{
  moe_case m = *c;
  if (!clmoe_check_small()) return m;
  if (m.E > 32) m.E = 32;
  if (m.m > 140) m.m = 140; /* (the few-expert case: still ~47 rows an expert, past a tile) */
  if (m.l > 72) m.l = 72;
  if (m.f > 80) m.f = 80;
  return m;
}

#define LAYER_CHECK(fname, mc, backward)                                                  \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)              \
  {                                                                                       \
    const moe_case sc = sized(&(mc));                                                     \
    return check_layer(c, s, r, &sc, backward);                                           \
  }
LAYER_CHECK(fwd_top8, tiny8, 0)
LAYER_CHECK(fwd_top16, tiny16, 0)
LAYER_CHECK(fwd_few, few, 0)
LAYER_CHECK(fwd_pad, tiny8_pad, 0)
LAYER_CHECK(bwd_top8, tiny8, 1)
LAYER_CHECK(bwd_top16, tiny16, 1)
LAYER_CHECK(bwd_few, few, 1)
LAYER_CHECK(bwd_pad, tiny8_pad, 1)
LAYER_CHECK(bwd_few_pad, few_pad, 1)


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
    CK(read_i32(&dp.perm, &perm));
    CK(read_i32(&dp.offsets, &off));
    CK(read_i32(&dp.pos, &pos));
    if (!padded) CK(read_i32(&dp.tiles, &tiles));
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
  CK(read_i32(&topk, ht));
done:
  clmoe_tensor_destroy(&topk), clmoe_tensor_destroy(&sc), clmoe_tensor_destroy(&p);
  return st;
}

/* QB: the router's s and cut-offs against the double reference, then the device's thresholds
 * (exact, or from its histogram) against the reference applied to the device's margins. */
static clmoe_status check_qb(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, int hist)
{
  static const moe_case full = {256, 64, 32, 896, 8, 16, 0, 0, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_QB};
  const moe_case qc = sized(&full);
  const int bins = 1000;
  clmoe_status st = CLMOE_OK;
  moe_data D;
  clmoe_tensor s_all = {0}, cut = {0}, thr = {0}, counts = {0}, range = {0};
  double *hs = NULL, *hc = NULL, *rs = NULL, *rc = NULL, *gthr = NULL, *rthr = NULL, *gb = NULL;
  double *rb = NULL, *ex = NULL, *hr = NULL;
  int32_t *ht = NULL, *rt = NULL, *gc = NULL, *rcnt = NULL;
  CK(moe_setup(ctx, seed, &qc, &D));
  const int64_t m = qc.m, E = qc.E, k = qc.k, sc2[2] = {E, bins};
  CK(route_cutoff(ctx, &D, &s_all, &cut, &hs, &hc, &ht));
  CK_ALLOC(rs, m * E);
  CK_ALLOC(rt, m * (k + 1));
  CK_ALLOC(rc, m);
  CK_ALLOC(rthr, E);
  CK_ALLOC(rb, E);
  CK_ALLOC(ex, E);
  ref_moe_route(&D.s, D.P.w_router, D.hbias, D.hx, k + 1, rt, rs);
  res->tolerance = TOL_FWD;
  check_choice(&D.s, rs, D.hbias, ht, k, res);
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
    CK(read_i32(&counts, &gc));
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
  moe_data_free(&D);
  return st;
}

static clmoe_status qb_exact(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_qb(c, s, r, 0); }
static clmoe_status qb_hist(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_qb(c, s, r, 1); }

/* The sign rule through a train-mode forward and clmoe_moe_balance_update. */
static clmoe_status sign_rule(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  static const moe_case full = {64, 64, 32, 896, 8, 16, 0, 0, CLMOE_MOE_GEMM_GROUPED, CLMOE_MOE_BALANCE_SIGN};
  const moe_case sc = sized(&full);
  clmoe_status st = CLMOE_OK;
  moe_data D;
  clmoe_moe_saved sv;
  clmoe_tensor y = {0};
  int32_t *ht = NULL;
  int64_t *cnt = NULL;
  double *gb = NULL;
  memset(&sv, 0, sizeof sv);
  CK(moe_setup(ctx, seed, &sc, &D));
  CK(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, (int64_t[]){sc.m, sc.d}));
  CK(clmoe_moe_forward(ctx, &D.L, &D.x, &y, &sv));
  CK(clmoe_moe_balance_update(ctx, &D.L, &sv));
  CK(read_i32(&sv.topk, &ht));
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
  moe_data_free(&D);
  return st;
}

const clmoe_check clmoe_checks_moe[] = {
    {"moe.forward.top8", "layer forward, 896 experts, top-8, tiny widths", fwd_top8},
    {"moe.forward.top16", "layer forward, 896 experts, top-16, 2 shared experts", fwd_top16},
    {"moe.forward.few", "layer forward, 6 experts of ~70 rows, odd widths", fwd_few},
    {"moe.forward.padded", "layer forward through CLBlast over padded groups", fwd_pad},
    {"moe.backward.top8", "layer backward, 896 experts, top-8", bwd_top8},
    {"moe.backward.top16", "layer backward, 896 experts, top-16", bwd_top16},
    {"moe.backward.few", "layer backward, 6 experts of ~70 rows", bwd_few},
    {"moe.backward.padded", "layer backward through CLBlast over padded groups", bwd_pad},
    {"moe.backward.few_padded", "padded backward, 6 experts, no shared expert", bwd_few_pad},
    {"moe.dispatch", "every (token, slot) once, stable order, counts, tiles; combine(gather) = id", dispatch_check},
    {"moe.dispatch.padded", "the same over groups padded to the largest expert", dispatch_check_padded},
    {"moe.qb.exact", "QB cut-offs and exact thresholds, 896 experts, top-8", qb_exact},
    {"moe.qb.hist", "QB histogram counts (exact), thresholds from counts", qb_hist},
    {"moe.sign", "DeepSeek sign rule update", sign_rule},
    {NULL, NULL, NULL}};
