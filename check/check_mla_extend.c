/* Conformance checks of MLA chunked prefill (clmoe_mla_extend, the tiled kernel of
 * kernels_cl/mla/mla_extend.cl): prompts prefilled by the training-form path (or none: an empty
 * cache), then extend passes of uneven sizes, 1-token passes and passes that cross the
 * 64-token cache blocks, for several sequences at once; every output row against the
 * double-precision reference forward over the whole sequences (a bf16 cache modelled for the
 * rows that read it) and, in f32, against the device's training-form forward. Narrow (40)
 * and wide (192) cache rows take the kernel's two tile shapes. The same passes through the
 * training form (clmoe_mla_extend_flash: decompressed K/V and the flash forward with a query
 * shift). Tolerances: fp32 1e-4, bf16 cache 1e-2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_mla.h"

#define F CLMOE_F32
#define H16 CLMOE_BF16

/* Chunked prefill: prompts of lc->lens tokens (0: an empty cache) prefilled together, then
 * `npass` extend passes of counts[pass][n] tokens per sequence (0: untouched); every row is
 * compared with the training-form forward over the whole sequences (the reference's, with a
 * bf16 cache modelled for the rows that went through it, and the device's in f32). */
typedef struct extend_case {
  layer_case lc;
  int npass;
  const int32_t *counts; /* [npass][lc.nlens] */
  int flash;             /* 1: clmoe_mla_extend_flash (training form), 0: clmoe_mla_extend */
} extend_case;

static clmoe_status check_extend(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, const extend_case *ec)
{
  clmoe_status st = CLMOE_OK;
  /* (smallest sizes: at most 2 heads, 1 with wide cache rows: the heads' rows run the same
   * code at other offsets, and a wide row costs 5 narrow ones on a simulator) */
  layer_case sized = ck_mla_sized(ec->lc);
  if (clmoe_check_small() && sized.H > 2) sized.H = 2;
  if (clmoe_check_small() && sized.dc + sized.Dr > 128) sized.H = 1;
  const layer_case *lc = &sized;
  layer_data L;
  clmoe_mla_cache *cache = NULL;
  clmoe_tensor xa = {0}, ya = {0}, cua = {0}, xp = {0}, yp = {0}, cup = {0}, xs = {0}, ys = {0};
  double *hx = NULL, *ry = NULL, *rb = NULL, *dy = NULL, *got = NULL;
  float *xf = NULL, *buf = NULL;
  int32_t *cu = NULL, *cup_h = NULL, *full = NULL, *done_len = NULL;
  int64_t *cnt = NULL;
  const int N = lc->nlens;
  const int64_t d = lc->d;
  CK(ck_mla_layer_setup(ctx, seed, lc, &L));
  CK_ALLOC(full, N);
  CK_ALLOC(done_len, N);
  CK_ALLOC(cnt, N);
  for (int n = 0; n < N; n++) {
    full[n] = lc->lens[n];
    for (int k = 0; k < ec->npass; k++) full[n] += ec->counts[k * N + n];
  }
  int64_t T, P;
  CK(ck_mla_make_cu(ctx, full, N, &cu, &cua, &T));
  CK(ck_mla_make_cu(ctx, lc->lens, N, &cup_h, &cup, &P));
  const int64_t sa[3] = {1, T, d}, sp[3] = {1, P > 0 ? P : 1, d};
  CK(ck_uniform(ctx, &xa, CLMOE_F32, 3, sa, seed, -1.0f, 1.0f, &hx));
  if (lc->cache == CLMOE_F32) { /* the device's training form, compared with in f32 only */
    CK(clmoe_tensor_create(ctx, &ya, CLMOE_F32, 3, sa));
    CK(clmoe_mla_forward(ctx, &L.cfg, &L.w, &xa, &cua, &ya, NULL));
    CK(ck_read(&ya, &dy));
  }
  CK_ALLOC(ry, T * d);
  L.rl.s.B = 1, L.rl.s.T = T, L.rl.s.cu_seqlens = cu, L.rl.s.nseq = N;
  ref_mla_forward(&L.rl, (const double *const *)L.hw, hx, ry);
  if (lc->cache == CLMOE_BF16) { /* rows after the prompts read the bf16 cache */
    CK_ALLOC(rb, T * d);
    L.rl.cache_bf16 = 1;
    ref_mla_forward(&L.rl, (const double *const *)L.hw, hx, rb);
    for (int n = 0; n < N; n++)
      for (int64_t i = (cu[n] + lc->lens[n]) * d; i < cu[n + 1] * d; i++) ry[i] = rb[i];
  }
  CK_ALLOC(got, T * d);
  CK_ALLOC(xf, T * d);
  CK_ALLOC(buf, T * d);
  for (int64_t i = 0; i < T * d; i++) got[i] = NAN;
  CK(clmoe_mla_cache_create(ctx, &L.cfg, N, lc->cache, 0, &cache));
  if (P > 0) {
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
  }
  for (int n = 0; n < N; n++) done_len[n] = lc->lens[n];
  for (int k = 0; k < ec->npass; k++) {
    int64_t M = 0;
    for (int n = 0; n < N; n++) {
      cnt[n] = ec->counts[k * N + n];
      for (int t = 0; t < cnt[n]; t++, M++)
        for (int64_t j = 0; j < d; j++) xf[M * d + j] = (float)hx[(cu[n] + done_len[n] + t) * d + j];
    }
    const int64_t ss[2] = {M, d};
    clmoe_tensor_destroy(&xs), clmoe_tensor_destroy(&ys);
    CK(clmoe_tensor_create(ctx, &xs, CLMOE_F32, 2, ss));
    CK(clmoe_tensor_create(ctx, &ys, CLMOE_F32, 2, ss));
    CK(clmoe_tensor_write_f32(&xs, xf));
    CK(clmoe_tensor_fill(&ys, NAN));
    CK(ec->flash ? clmoe_mla_extend_flash(ctx, &L.cfg, &L.w, cache, &xs, cnt, &ys)
                 : clmoe_mla_extend(ctx, &L.cfg, &L.w, cache, &xs, cnt, &ys));
    CK(clmoe_tensor_read_f32(&ys, buf));
    for (int n = 0, row = 0; n < N; n++)
      for (int t = 0; t < cnt[n]; t++, row++)
        for (int64_t j = 0; j < d; j++) got[(cu[n] + done_len[n] + t) * d + j] = buf[row * d + j];
    for (int n = 0; n < N; n++) done_len[n] += (int32_t)cnt[n];
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
  free(done_len), free(cnt);
  ck_mla_layer_free(&L);
  return st;
}

#define EXTEND_CHECK_FORM(fname, flash, counts, npass, ...)                               \
  clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)               \
  {                                                                                        \
    const extend_case ec = {__VA_ARGS__, npass, counts, flash};                            \
    return check_extend(c, s, r, &ec);                                                     \
  }
#define EXTEND_CHECK(fname, counts, npass, ...) EXTEND_CHECK_FORM(fname, 0, counts, npass, __VA_ARGS__)
#define FLASH_CHECK(fname, counts, npass, ...) EXTEND_CHECK_FORM(fname, 1, counts, npass, __VA_ARGS__)
/* Prompts 0, 5, 70 (an empty cache, a short and a 2-block one); passes of 1 token each,
 * uneven ones, and ones that cross the 64-token block boundary (0 -> 68, 6 -> 71). */
static const int32_t ext_prompts[] = {0, 5, 70};
static const int32_t ext_counts[] = {1, 1, 1, 7, 0, 3, 60, 1, 0, 1, 64, 2, 3, 2, 1};
static const int32_t ext_prompts_long[] = {300, 0};
static const int32_t ext_counts_long[] = {150, 1, 1, 130};
/* (smallest sizes: a 130-token prompt, passes of 70 and 66: still several blocks) */
static const int32_t ext_prompts_long_small[] = {130, 0};
static const int32_t ext_counts_long_small[] = {70, 1, 1, 66};
#define LONG_PROMPTS (clmoe_check_small() ? ext_prompts_long_small : ext_prompts_long)
#define LONG_COUNTS (clmoe_check_small() ? ext_counts_long_small : ext_counts_long)
/*                                                     d   H  rq  dc   Dn  Dr Dv  B  T  lens      nl st cache */
EXTEND_CHECK(check_mla_extend_f32,      ext_counts, 5,      {64, 2, 32, 32,  16, 8, 16, 0, 0, ext_prompts, 3, 0, F, 0})
EXTEND_CHECK(check_mla_extend_bf16, ext_counts, 5,      {64, 2, 32, 32,  16, 8, 16, 0, 0, ext_prompts, 3, 0, H16, 0})
EXTEND_CHECK(check_mla_extend_long, LONG_COUNTS, 2, {64, 3, 32, 32,  16, 8, 16, 0, 0, LONG_PROMPTS, 2, 0, F, 0})
EXTEND_CHECK(check_mla_extend_wide, ext_counts, 5,      {64, 3, 32, 160, 16, 32, 16, 0, 0, ext_prompts, 3, 0, F, 0})
EXTEND_CHECK(check_mla_extend_wide_bf16, ext_counts, 5, {64, 3, 32, 160, 16, 32, 16, 0, 0, ext_prompts, 3, 0, H16, 0})
/* The training form (clmoe_mla_extend_flash): the same passes; 40 query rows cross the
 * forward's 32-row query tiles, and the long case's 150 and 130-token passes take several. */
static const int32_t flash_prompts[] = {0, 5, 70, 33};
static const int32_t flash_counts[] = {1, 1, 1, 0, 7, 0, 3, 40, 60, 1, 0, 1, 1, 64, 2, 0, 3, 2, 1, 31};
/*                                                     d   H  rq  dc   Dn  Dr Dv  B  T  lens         nl st cache */
FLASH_CHECK(check_mla_extend_flash_f32,  flash_counts, 5,    {64, 2, 32, 32,  16, 8, 16, 0, 0, flash_prompts, 4, 0, F, 0})
FLASH_CHECK(check_mla_extend_flash_bf16, flash_counts, 5,    {64, 2, 32, 32,  16, 8, 16, 0, 0, flash_prompts, 4, 0, H16, 0})
FLASH_CHECK(check_mla_extend_flash_long, LONG_COUNTS, 2, {64, 3, 32, 32,  16, 8, 16, 0, 0, LONG_PROMPTS, 2, 0, F, 0})
FLASH_CHECK(check_mla_extend_flash_wide, flash_counts, 5,    {64, 3, 32, 160, 16, 32, 24, 0, 0, flash_prompts, 4, 0, H16, 0})
/* Kimi Linear's form: q = W_q x (rq 0) and no output gate */
EXTEND_CHECK(check_mla_extend_kimi,      ext_counts, 5,      {64, 2, 0,  32,  16, 8, 16, 0, 0, ext_prompts, 3, 0, F, 1})
FLASH_CHECK(check_mla_extend_flash_kimi, flash_counts, 5,    {64, 2, 0,  32,  16, 8, 16, 0, 0, flash_prompts, 4, 0, H16, 1})
