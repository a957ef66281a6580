/* Conformance checks of Gated MLA against the double-precision reference (check/ref/
 * ref_mla.c): the tiled attention forward and backward (T in {1, 17, 64, 300}, several
 * heads, packed sequences, bf16 storage, the report's head sizes), the materialised
 * baseline kernel, the whole layer forward and backward, and the absorbed decode (prefill +
 * token-by-token steps of sequences of different lengths) against the training-form
 * forward, both the reference's and the device's; chunked prefill (extend passes of uneven
 * sizes after prompts of 0 to 300 tokens) against the same. bf16 storage is modelled in the reference:
 * a bf16 cache rounds c and k_r, a bf16 o rounds o where the backward reads it (D = dO.o).
 * Tolerances: fp32 1e-4 (long sums over keys and
 * features), bf16 storage 1e-2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "check_mla.h"

enum { A_FWD, A_BWD, A_NAIVE };

typedef struct attn_case {
  int64_t B, T, H, Dn, Dr, Dv;
  const int32_t *lens; /* packed sequence lengths (then B = 1, T = their sum) */
  int nlens;
  clmoe_dtype dtype;   /* storage of q, k, v */
  clmoe_dtype odtype;  /* storage of o */
  int what;
} attn_case;

/* Packed lengths -> cu_seqlens (host and device); *T their sum. */
clmoe_status ck_mla_make_cu(clmoe_ctx *ctx, const int32_t *lens, int n, int32_t **cu, clmoe_tensor *t, int64_t *T)
{
  clmoe_status st = CLMOE_OK;
  CK_ALLOC(*cu, n + 1);
  (*cu)[0] = 0;
  for (int i = 0; i < n; i++) (*cu)[i + 1] = (*cu)[i] + lens[i];
  *T = (*cu)[n];
  const int64_t nc = n + 1;
  CK(clmoe_tensor_create(ctx, t, CLMOE_I32, 1, &nc));
  CK(clmoe_tensor_write(t, *cu, (size_t)nc * sizeof **cu));
done:
  return st;
}

static clmoe_status check_attn(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, const attn_case *ac)
{
  clmoe_status st = CLMOE_OK;
  enum { Q, KN, KR, V, O, LSE, DO, DQ, DKN, DKR, DV, NT };
  clmoe_tensor t[NT], cu_t = {0};
  double *h[NT], *r[NT];
  int32_t *cu = NULL;
  memset(t, 0, sizeof t), memset(h, 0, sizeof h), memset(r, 0, sizeof r);
  int64_t B = ac->B, T = ac->T;
  const int64_t H = ac->H, Dn = ac->Dn, Dr = ac->Dr, Dv = ac->Dv;
  if (ac->lens) {
    B = 1;
    CK(ck_mla_make_cu(ctx, ac->lens, ac->nlens, &cu, &cu_t, &T));
  }
  const int64_t M = B * T;
  const int64_t shp[NT][4] = {{B, T, H, Dn + Dr}, {B, T, H, Dn}, {B, T, Dr, 0}, {B, T, H, Dv}, {B, T, H, Dv},
                              {B, T, H, 0},       {B, T, H, Dv}, {B, T, H, Dn + Dr}, {B, T, H, Dn}, {B, T, Dr, 0},
                              {B, T, H, Dv}};
  const int64_t cnt[NT] = {M * H * (Dn + Dr), M * H * Dn, M * Dr, M * H * Dv, M * H * Dv, M * H,
                           M * H * Dv,        M * H * (Dn + Dr), M * H * Dn, M * Dr, M * H * Dv};
  const char *names[NT] = {"q", "k_nope", "k_rope", "v", "o", "lse", "dout", "dq", "dk_nope", "dk_rope", "dv"};
  for (int i = 0; i <= V; i++)
    CK(ck_uniform(ctx, &t[i], ac->dtype, shp[i][3] ? 4 : 3, shp[i], seed + (uint64_t)i, -2.0f, 2.0f, &h[i]));
  CK(clmoe_tensor_create(ctx, &t[O], ac->odtype, 4, shp[O]));
  CK(clmoe_tensor_create(ctx, &t[LSE], CLMOE_F32, 3, shp[LSE]));
  CK(clmoe_tensor_fill(&t[O], NAN)); /* every output element must be written */
  CK(clmoe_tensor_fill(&t[LSE], NAN));
  clmoe_mla_attn_inputs in = {&t[Q], &t[KN], &t[KR], &t[V], cu ? &cu_t : NULL};
  if (ac->what == A_NAIVE) CK(clmoe_mla_attention_naive(ctx, 0.0f, &in, &t[O], &t[LSE]));
  else CK(clmoe_mla_attention(ctx, 0.0f, &in, &t[O], &t[LSE]));
  ref_mla_shape s = {B, T, H, Dn, Dr, Dv, cu, ac->nlens, 1.0 / sqrt((double)(Dn + Dr)), ac->odtype == CLMOE_BF16};
  res->tolerance = ac->dtype == CLMOE_BF16 || ac->odtype == CLMOE_BF16 ? TOL_BF16 : TOL_F32;
  if (ac->what != A_BWD) {
    CK(ck_read(&t[O], &h[O]));
    CK(ck_read(&t[LSE], &h[LSE]));
    CK_ALLOC(r[O], cnt[O]);
    CK_ALLOC(r[LSE], cnt[LSE]);
    ref_mla_attention(&s, h[Q], h[KN], h[KR], h[V], r[O], r[LSE]);
    ck_compare("o", h[O], r[O], (size_t)cnt[O], res);
    ck_compare("lse", h[LSE], r[LSE], (size_t)cnt[LSE], res);
    goto done;
  }
  CK(ck_uniform(ctx, &t[DO], CLMOE_F32, 4, shp[DO], seed + 10, -1.0f, 1.0f, &h[DO]));
  for (int i = DQ; i < NT; i++) {
    CK(clmoe_tensor_create(ctx, &t[i], CLMOE_F32, shp[i][3] ? 4 : 3, shp[i]));
    CK(clmoe_tensor_fill(&t[i], NAN));
  }
  clmoe_mla_attn_grads g = {&t[DQ], &t[DKN], &t[DKR], &t[DV]};
  CK(clmoe_mla_attention_backward(ctx, 0.0f, &in, &t[O], &t[LSE], &t[DO], &g));
  for (int i = DQ; i < NT; i++) {
    CK(ck_read(&t[i], &h[i]));
    CK_ALLOC(r[i], cnt[i]);
  }
  ref_mla_attention_backward(&s, h[Q], h[KN], h[KR], h[V], h[DO], r[DQ], r[DKN], r[DKR], r[DV]);
  for (int i = DQ; i < NT; i++) ck_compare(names[i], h[i], r[i], (size_t)cnt[i], res);
done:
  for (int i = 0; i < NT; i++) {
    clmoe_tensor_destroy(&t[i]);
    free(h[i]), free(r[i]);
  }
  clmoe_tensor_destroy(&cu_t);
  free(cu);
  return st;
}

/* ---- the layer and decoding --------------------------------------------------------------- */

void ck_mla_layer_free(layer_data *L)
{
  clmoe_mla_weights_destroy(&L->w);
  for (int i = 0; i < REF_MLA_NWEIGHTS; i++) free(L->hw[i]);
}

/* Random weights of a scale that keeps every activation near 1 (so the softmax is neither
 * uniform nor one-hot): matrices uniform in +-sqrt(3 / fan_in), gains in (0.5, 1.5]. */
layer_case ck_mla_sized(layer_case lc)
{
  if (clmoe_check_small() && lc.d > 32) lc.d = 32;
  return lc;
}

clmoe_status ck_mla_layer_setup(clmoe_ctx *ctx, uint64_t seed, const layer_case *lc, layer_data *L)
{
  clmoe_status st = CLMOE_OK;
  memset(L, 0, sizeof *L);
  clmoe_mla_config cfg = {lc->d, lc->H, lc->rq, lc->dc, lc->Dn, lc->Dr, lc->Dv, 0.0f, 0.0f};
  L->cfg = cfg;
  ref_mla_layer rl = {{1, 0, lc->H, lc->Dn, lc->Dr, lc->Dv, NULL, 0, 1.0 / sqrt((double)(lc->Dn + lc->Dr)), 0},
                      lc->d, lc->rq, lc->dc, 1e-5, 0, lc->ungated};
  L->rl = rl;
  CK(clmoe_mla_weights_create_form(ctx, &cfg, !lc->ungated, &L->w));
  for (int i = 0; i < CLMOE_MLA_NWEIGHTS; i++) {
    clmoe_tensor *t = clmoe_mla_weight_at(&L->w, i);
    if (!t->buf) continue; /* absent in this form: hw[i] stays NULL */
    float a = t->ndim == 1 ? 0.5f : sqrtf(3.0f / (float)t->shape[1]), lo = t->ndim == 1 ? 1.0f - a : -a;
    CK(clmoe_tensor_fill_uniform(t, seed + 100 + (uint64_t)i, lo, lo + 2.0f * a));
    CK(ck_read(t, &L->hw[i]));
  }
done:
  if (st != CLMOE_OK) ck_mla_layer_free(L);
  return st;
}

static clmoe_status check_layer(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, const layer_case *lc,
                                int backward)
{
  clmoe_status st = CLMOE_OK;
  layer_data L;
  clmoe_tensor x = {0}, y = {0}, dy = {0}, dx = {0}, cu_t = {0};
  clmoe_mla_weights g = {0};
  clmoe_mla_saved saved = {0};
  double *hx = NULL, *hy = NULL, *ry = NULL, *hdy = NULL, *hdx = NULL, *rdx = NULL;
  double *rg[REF_MLA_NWEIGHTS] = {0}, *gg[REF_MLA_NWEIGHTS] = {0};
  int32_t *cu = NULL;
  CK(ck_mla_layer_setup(ctx, seed, lc, &L));
  int64_t B = lc->B, T = lc->T;
  if (lc->lens) {
    B = 1;
    CK(ck_mla_make_cu(ctx, lc->lens, lc->nlens, &cu, &cu_t, &T));
  }
  const int64_t M = B * T, d = lc->d, sx[3] = {B, T, d};
  L.rl.s.B = B, L.rl.s.T = T, L.rl.s.cu_seqlens = cu, L.rl.s.nseq = lc->nlens;
  CK(ck_uniform(ctx, &x, CLMOE_F32, 3, sx, seed, -1.0f, 1.0f, &hx));
  CK(clmoe_tensor_create(ctx, &y, CLMOE_F32, 3, sx));
  CK(clmoe_tensor_fill(&y, NAN));
  CK(clmoe_mla_forward(ctx, &L.cfg, &L.w, &x, cu ? &cu_t : NULL, &y, backward ? &saved : NULL));
  res->tolerance = TOL_F32;
  if (!backward) {
    CK(ck_read(&y, &hy));
    CK_ALLOC(ry, M * d);
    ref_mla_forward(&L.rl, (const double *const *)L.hw, hx, ry);
    ck_compare("y", hy, ry, (size_t)(M * d), res);
    goto done;
  }
  CK(ck_uniform(ctx, &dy, CLMOE_F32, 3, sx, seed + 1, -1.0f, 1.0f, &hdy));
  CK(clmoe_tensor_create(ctx, &dx, CLMOE_F32, 3, sx));
  CK(clmoe_mla_weights_create_form(ctx, &L.cfg, !lc->ungated, &g));
  CK(clmoe_tensor_fill(&dx, NAN));
  for (int i = 0; i < CLMOE_MLA_NWEIGHTS; i++)
    if (clmoe_mla_weight_at(&g, i)->buf) CK(clmoe_tensor_fill(clmoe_mla_weight_at(&g, i), NAN));
  CK(clmoe_mla_backward(ctx, &L.cfg, &L.w, &x, cu ? &cu_t : NULL, &saved, &dy, &dx, &g));
  CK(ck_read(&dx, &hdx));
  CK_ALLOC(rdx, M * d);
  for (int i = 0; i < REF_MLA_NWEIGHTS; i++) {
    /* a tensor absent in the form: none on the device, none in the reference */
    if ((clmoe_mla_weight_at(&g, i)->buf != NULL) != (ref_mla_weight_numel(&L.rl, i) > 0)) {
      snprintf(res->worst, sizeof res->worst, "%s: the device and the reference disagree on its presence",
               clmoe_mla_weight_name(i));
      res->max_err = INFINITY;
      goto done;
    }
    if (!clmoe_mla_weight_at(&g, i)->buf) continue;
    CK(ck_read(clmoe_mla_weight_at(&g, i), &gg[i]));
    CK_ALLOC(rg[i], ref_mla_weight_numel(&L.rl, i));
  }
  ref_mla_backward(&L.rl, (const double *const *)L.hw, hx, hdy, rdx, rg);
  ck_compare("dx", hdx, rdx, (size_t)(M * d), res);
  for (int i = 0; i < REF_MLA_NWEIGHTS; i++)
    if (gg[i]) ck_compare(clmoe_mla_weight_name(i), gg[i], rg[i], (size_t)ref_mla_weight_numel(&L.rl, i), res);
done:
  clmoe_mla_saved_release(&saved);
  clmoe_mla_weights_destroy(&g);
  for (int i = 0; i < REF_MLA_NWEIGHTS; i++) free(rg[i]), free(gg[i]);
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&dy), clmoe_tensor_destroy(&dx);
  clmoe_tensor_destroy(&cu_t);
  free(hx), free(hy), free(ry), free(hdy), free(hdx), free(rdx), free(cu);
  ck_mla_layer_free(&L);
  return st;
}

/* Prompts of lc->lens tokens (prefilled together), then lc->steps decode steps for every
 * sequence; every output row is compared with the training-form forward over the whole
 * sequences: the reference's (y) and the device's clmoe_mla_forward (y_vs_forward). */
static clmoe_status check_decode(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, const layer_case *lc)
{
  clmoe_status st = CLMOE_OK;
  layer_data L;
  clmoe_mla_cache *cache = NULL;
  clmoe_tensor xa = {0}, ya = {0}, cua = {0}, xp = {0}, yp = {0}, cup = {0}, xs = {0}, ys = {0};
  double *hx = NULL, *ry = NULL, *rb = NULL, *dy = NULL, *got = NULL;
  float *xf = NULL, *buf = NULL;
  int32_t *cu = NULL, *cup_h = NULL, *full = NULL;
  const int N = lc->nlens, S = lc->steps;
  const int64_t d = lc->d;
  CK(ck_mla_layer_setup(ctx, seed, lc, &L));
  CK_ALLOC(full, N);
  for (int n = 0; n < N; n++) full[n] = lc->lens[n] + S;
  int64_t T, P;
  CK(ck_mla_make_cu(ctx, full, N, &cu, &cua, &T));
  CK(ck_mla_make_cu(ctx, lc->lens, N, &cup_h, &cup, &P));
  const int64_t sa[3] = {1, T, d}, sp[3] = {1, P, d}, ss[2] = {N, d};
  CK(ck_uniform(ctx, &xa, CLMOE_F32, 3, sa, seed, -1.0f, 1.0f, &hx));
  CK(clmoe_tensor_create(ctx, &ya, CLMOE_F32, 3, sa));
  CK(clmoe_mla_forward(ctx, &L.cfg, &L.w, &xa, &cua, &ya, NULL));
  CK(ck_read(&ya, &dy));
  CK_ALLOC(ry, T * d);
  L.rl.s.B = 1, L.rl.s.T = T, L.rl.s.cu_seqlens = cu, L.rl.s.nseq = N;
  ref_mla_forward(&L.rl, (const double *const *)L.hw, hx, ry);
  if (lc->cache == CLMOE_BF16) { /* decoded rows: the model of a bf16 cache */
    CK_ALLOC(rb, T * d);
    L.rl.cache_bf16 = 1;
    ref_mla_forward(&L.rl, (const double *const *)L.hw, hx, rb);
    for (int n = 0; n < N; n++)
      for (int64_t i = (cu[n] + lc->lens[n]) * d; i < cu[n + 1] * d; i++) ry[i] = rb[i];
  }
  /* The same tokens through the cache: outputs land in got [T, d] at their packed rows. */
  CK_ALLOC(got, T * d);
  CK_ALLOC(xf, T * d);
  CK_ALLOC(buf, (P > N ? P : N) * d);
  for (int64_t i = 0; i < T * d; i++) got[i] = NAN;
  CK(clmoe_mla_cache_create(ctx, &L.cfg, N, lc->cache, 0, &cache));
  for (int n = 0, row = 0; n < N; n++)
    for (int t = 0; t < lc->lens[n]; t++, row++)
      for (int64_t j = 0; j < d; j++) xf[row * d + j] = (float)hx[(cu[n] + t) * d + j];
  CK(clmoe_tensor_create(ctx, &xp, CLMOE_F32, 3, sp));
  CK(clmoe_tensor_create(ctx, &yp, CLMOE_F32, 3, sp));
  CK(clmoe_tensor_write_f32(&xp, xf));
  CK(clmoe_mla_prefill(ctx, &L.cfg, &L.w, cache, &xp, &cup, NULL, &yp));
  CK(clmoe_tensor_read_f32(&yp, buf));
  for (int n = 0, row = 0; n < N; n++)
    for (int t = 0; t < lc->lens[n]; t++, row++)
      for (int64_t j = 0; j < d; j++) got[(cu[n] + t) * d + j] = buf[row * d + j];
  CK(clmoe_tensor_create(ctx, &xs, CLMOE_F32, 2, ss));
  CK(clmoe_tensor_create(ctx, &ys, CLMOE_F32, 2, ss));
  for (int k = 0; k < S; k++) {
    for (int n = 0; n < N; n++)
      for (int64_t j = 0; j < d; j++) xf[n * d + j] = (float)hx[(cu[n] + lc->lens[n] + k) * d + j];
    CK(clmoe_tensor_write(&xs, xf, (size_t)(N * d) * sizeof *xf));
    CK(clmoe_mla_decode_step(ctx, &L.cfg, &L.w, cache, &xs, &ys));
    CK(clmoe_tensor_read_f32(&ys, buf));
    for (int n = 0; n < N; n++)
      for (int64_t j = 0; j < d; j++) got[(cu[n] + lc->lens[n] + k) * d + j] = buf[n * d + j];
  }
  for (int n = 0; n < N; n++)
    if (clmoe_mla_cache_length(cache, n) != full[n]) {
      snprintf(res->worst, sizeof res->worst, "cache length of sequence %d is %lld, expected %d", n,
               (long long)clmoe_mla_cache_length(cache, n), full[n]);
      res->max_err = INFINITY;
    }
  res->tolerance = lc->cache == CLMOE_BF16 ? TOL_BF16 : TOL_F32;
  ck_compare("y", got, ry, (size_t)(T * d), res);
  if (lc->cache == CLMOE_F32) ck_compare("y_vs_forward", got, dy, (size_t)(T * d), res);
done:
  clmoe_mla_cache_destroy(cache);
  clmoe_tensor *all[] = {&xa, &ya, &cua, &xp, &yp, &cup, &xs, &ys};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  free(hx), free(ry), free(rb), free(dy), free(got), free(xf), free(buf), free(cu), free(cup_h), free(full);
  ck_mla_layer_free(&L);
  return st;
}

#define F CLMOE_F32
#define H16 CLMOE_BF16
#define ATTN_CHECK(fname, ...)                                                             \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)               \
  {                                                                                        \
    const attn_case ac = __VA_ARGS__;                                                      \
    return check_attn(c, s, r, &ac);                                                       \
  }
#define LAYER_CHECK(fname, kind, ...)                                                      \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)               \
  {                                                                                        \
    const layer_case lc = ck_mla_sized((layer_case)__VA_ARGS__);                            \
    return kind == 2 ? check_decode(c, s, r, &lc) : check_layer(c, s, r, &lc, kind);        \
  }
static const int32_t lens_mixed[] = {1, 15, 16, 17, 40, 0, 3};
static const int32_t lens_layer[] = {7, 0, 33, 1};
static const int32_t prompts[] = {5, 0, 70};
/* a 2100-token context decodes in splits of 64, next to one of 300 (splits of 32) and one of
 * 3 (of 8: MLA_DECODE_SPLIT) */
static const int32_t prompts_long[] = {2100, 3, 300};
static const int32_t prompts_long_small[] = {100, 3}; /* (smallest sizes: still 13 splits) */

/*                       B  T    H  Dn   Dr  Dv   lens        nl q/k/v o    what */
ATTN_CHECK(fwd_t1,      {2, 1,   2, 16,  8,  16,  NULL,       0, F,    F,   A_FWD})
ATTN_CHECK(fwd_t17,     {2, 17,  3, 16,  8,  16,  NULL,       0, F,    F,   A_FWD})
ATTN_CHECK(fwd_t64,     {1, 64,  2, 16,  8,  16,  NULL,       0, F,    F,   A_FWD})
ATTN_CHECK(fwd_t300,    {1, 300, 2, 16,  8,  16,  NULL,       0, F,    F,   A_FWD})
ATTN_CHECK(fwd_packed,  {1, 0,   2, 16,  8,  16,  lens_mixed, 7, F,    F,   A_FWD})
ATTN_CHECK(fwd_bf16,    {1, 77,  2, 16,  8,  16,  NULL,       0, H16,  H16, A_FWD})
ATTN_CHECK(fwd_report,  {1, 40,  2, 128, 64, 128, NULL,       0, F,    F,   A_FWD})
ATTN_CHECK(naive,       {1, 0,   2, 16,  8,  16,  lens_mixed, 7, F,    F,   A_NAIVE})
ATTN_CHECK(bwd_t1,      {2, 1,   2, 16,  8,  16,  NULL,       0, F,    F,   A_BWD})
ATTN_CHECK(bwd_t17,     {2, 17,  3, 16,  8,  16,  NULL,       0, F,    F,   A_BWD})
ATTN_CHECK(bwd_t64,     {1, 64,  2, 16,  8,  16,  NULL,       0, F,    F,   A_BWD})
ATTN_CHECK(bwd_t300,    {1, 300, 2, 16,  8,  16,  NULL,       0, F,    F,   A_BWD})
ATTN_CHECK(bwd_packed,  {1, 0,   2, 16,  8,  16,  lens_mixed, 7, F,    F,   A_BWD})
ATTN_CHECK(bwd_bf16,    {1, 77,  2, 16,  8,  16,  NULL,       0, H16,  F,   A_BWD})
ATTN_CHECK(bwd_bf16o,   {1, 77,  2, 16,  8,  16,  NULL,       0, H16,  H16, A_BWD})
ATTN_CHECK(bwd_report,  {1, 40,  2, 128, 64, 128, NULL,       0, F,    F,   A_BWD})
/*                              d   H  rq  dc  Dn  Dr Dv  B  T   lens nl steps cache */
LAYER_CHECK(layer_fwd,     0, {64, 2, 32, 32, 16, 8, 16, 2, 20, NULL, 0, 0, F, 0})
LAYER_CHECK(layer_packed,  0, {64, 2, 32, 32, 16, 8, 16, 0, 0,  lens_layer, 4, 0, F, 0})
LAYER_CHECK(layer_bwd,     1, {64, 2, 32, 32, 16, 8, 16, 0, 0,  lens_layer, 4, 0, F, 0})
LAYER_CHECK(decode,        2, {64, 2, 32, 32, 16, 8, 16, 0, 0,  prompts, 3, 9, F, 0})
LAYER_CHECK(decode_bf16,   2, {64, 2, 32, 32, 16, 8, 16, 0, 0,  prompts, 3, 4, H16, 0})
/* Kimi Linear's forms: q = W_q x (rq 0), no output gate, and both */
LAYER_CHECK(qdirect_fwd,   0, {64, 2, 0,  32, 16, 8, 16, 0, 0,  lens_layer, 4, 0, F, 0})
LAYER_CHECK(qdirect_bwd,   1, {64, 2, 0,  32, 16, 8, 16, 0, 0,  lens_layer, 4, 0, F, 0})
LAYER_CHECK(ungated_fwd,   0, {64, 2, 32, 32, 16, 8, 16, 0, 0,  lens_layer, 4, 0, F, 1})
LAYER_CHECK(ungated_bwd,   1, {64, 2, 32, 32, 16, 8, 16, 0, 0,  lens_layer, 4, 0, F, 1})
LAYER_CHECK(kimi_fwd,      0, {64, 2, 0,  32, 16, 8, 16, 2, 20, NULL, 0, 0, F, 1})
LAYER_CHECK(kimi_bwd,      1, {64, 2, 0,  32, 16, 8, 16, 0, 0,  lens_layer, 4, 0, F, 1})
LAYER_CHECK(qdirect_decode, 2, {64, 2, 0, 32, 16, 8, 16, 0, 0,  prompts, 3, 9, F, 0})
LAYER_CHECK(ungated_decode, 2, {64, 2, 32, 32, 16, 8, 16, 0, 0, prompts, 3, 9, F, 1})
LAYER_CHECK(kimi_decode,   2, {64, 2, 0,  32, 16, 8, 16, 0, 0,  prompts, 3, 9, F, 1})
LAYER_CHECK(kimi_decode_bf16, 2, {64, 2, 0, 32, 16, 8, 16, 0, 0, prompts, 3, 4, H16, 1})
/* a latent width that is not a multiple of 8: the absorbed products' element loads */
LAYER_CHECK(kimi_decode_narrow, 2, {64, 2, 0, 20, 16, 8, 16, 0, 0, prompts, 3, 5, F, 1})
LAYER_CHECK(decode_long,   2, {64, 2, 32, 32, 16, 8, 16, 0, 0,  clmoe_check_small() ? prompts_long_small : prompts_long, clmoe_check_small() ? 2 : 3, 2, F, 0})

const clmoe_check clmoe_checks_mla[] = {
    {"mla.attention.t1", "tiled attention forward, T = 1, 2 sequences x 2 heads", fwd_t1},
    {"mla.attention.t17", "tiled attention forward, T = 17, 3 heads", fwd_t17},
    {"mla.attention.t64", "tiled attention forward, T = 64", fwd_t64},
    {"mla.attention.t300", "tiled attention forward, T = 300", fwd_t300},
    {"mla.attention.packed", "tiled attention forward, packed lengths 1,15,16,17,40,0,3", fwd_packed},
    {"mla.attention.bf16", "tiled attention forward, bf16 q, k, v and o", fwd_bf16},
    {"mla.attention.report", "tiled attention forward, Dn 128 + Dr 64, Dv 128", fwd_report},
    {"mla.attention.naive", "materialised baseline kernel, packed sequences", naive},
    {"mla.attention_backward.t1", "attention backward, T = 1", bwd_t1},
    {"mla.attention_backward.t17", "attention backward, T = 17, 3 heads", bwd_t17},
    {"mla.attention_backward.t64", "attention backward, T = 64", bwd_t64},
    {"mla.attention_backward.t300", "attention backward, T = 300", bwd_t300},
    {"mla.attention_backward.packed", "attention backward, packed lengths 1,15,16,17,40,0,3", bwd_packed},
    {"mla.attention_backward.bf16", "attention backward, bf16 q, k, v (o f32)", bwd_bf16},
    {"mla.attention_backward.bf16o", "attention backward, bf16 q, k, v and o", bwd_bf16o},
    {"mla.attention_backward.report", "attention backward, Dn 128 + Dr 64, Dv 128", bwd_report},
    {"mla.layer.forward", "layer forward, 2 sequences of 20 tokens", layer_fwd},
    {"mla.layer.packed", "layer forward, packed lengths 7,0,33,1", layer_packed},
    {"mla.layer.backward", "layer backward (dx and every weight), packed", layer_bwd},
    {"mla.decode", "prefill 5,0,70 + 9 absorbed decode steps = training-form forward", decode},
    {"mla.decode.bf16", "prefill + decode with a bf16 cache", decode_bf16},
    {"mla.decode.long", "contexts of 2100, 300 and 3 tokens (splits of 64, 32 and 8)", decode_long},
    {"mla.layer.qdirect", "layer forward with q_rank 0 (q = W_q x), packed", qdirect_fwd},
    {"mla.layer.qdirect.backward", "layer backward with q_rank 0 (dx, w_q and the rest)", qdirect_bwd},
    {"mla.layer.ungated", "layer forward without the output gate, packed", ungated_fwd},
    {"mla.layer.ungated.backward", "layer backward without the output gate", ungated_bwd},
    {"mla.layer.kimi", "layer forward in Kimi Linear's form (q_rank 0, ungated)", kimi_fwd},
    {"mla.layer.kimi.backward", "layer backward in Kimi Linear's form", kimi_bwd},
    {"mla.decode.qdirect", "prefill + absorbed decode with q_rank 0", qdirect_decode},
    {"mla.decode.ungated", "prefill + absorbed decode without the output gate", ungated_decode},
    {"mla.decode.kimi", "prefill + absorbed decode in Kimi Linear's form", kimi_decode},
    {"mla.decode.kimi.bf16", "prefill + decode in Kimi Linear's form, bf16 cache", kimi_decode_bf16},
    {"mla.decode.kimi.narrow", "prefill + decode in Kimi Linear's form, latent width 20", kimi_decode_narrow},
    {"mla.extend.kimi", "chunked prefill (absorbed) in Kimi Linear's form", check_mla_extend_kimi},
    {"mla.extend.flash.kimi", "training-form chunked prefill in Kimi Linear's form, bf16 cache", check_mla_extend_flash_kimi},
    {"mla.extend", "chunked prefill: prompts 0,5,70, then 5 uneven extend passes (1-token, across blocks)", check_mla_extend_f32},
    {"mla.extend.bf16", "chunked prefill with a bf16 cache", check_mla_extend_bf16},
    {"mla.extend.long", "extend 150 then 1 then 130 tokens after a 300-token prompt, 3 heads", check_mla_extend_long},
    {"mla.extend.wide", "extend with 192-number cache rows (the 32-row tile shape)", check_mla_extend_wide},
    {"mla.extend.wide.bf16", "extend with wide bf16 cache rows", check_mla_extend_wide_bf16},
    {"mla.extend.flash", "chunked prefill in the training form: prompts 0,5,70,33, 5 uneven passes", check_mla_extend_flash_f32},
    {"mla.extend.flash.bf16", "training-form chunked prefill with a bf16 cache", check_mla_extend_flash_bf16},
    {"mla.extend.flash.long", "training form: passes (150, 1) and (1, 130) after prompts 300 and 0, 3 heads", check_mla_extend_flash_long},
    {"mla.extend.flash.wide", "training form, bf16 cache, Dr 32, Dv 24, dc 160, 3 heads", check_mla_extend_flash_wide},
    {NULL, NULL, NULL}};
