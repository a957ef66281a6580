/* MLA decoding: prefill (training-form forward + one cache write for the whole prompt
 * batch) and the absorbed decode step (projections, one cache append, then the absorbed
 * attention and output). A step of few rows (at most MLA_GEMV_ROWS sequences, matrices the
 * GEMV takes) makes its products with the GEMV of lib/ops/ops_gemv.c and the per-head
 * products of kernels_cl/mla/mla_decode.cl, with no CLBlast call; a larger step takes the
 * batched GEMMs of mla_absorbed.c. The cache is in mla_cache.c; chunked prefill into a
 * cache that holds context (clmoe_mla_extend) is in mla_extend.c. */
#include "mla_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/ops.h"
#include "ops/ops_internal.h"

#define MLA_GEMV_ROWS 16 /* GEN_GEMV_TOKENS of lib/generate */

#define AQ_COLS 128 /* columns per work-group of mla_dec_absorb_q (8 AQ_CH) */
#define AQ_WG 256   /* ... and its work-items (AQ_CH x AQ_PARTS) */
#define AO_ROWS 8   /* rows per work-group of mla_dec_absorb_o */
#define AO_WG 64    /* ... and its work-items (AO_ROWS x AO_LANES) */

clmoe_status clmoe_mla_prefill(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                               clmoe_mla_cache *cache, const clmoe_tensor *x, const clmoe_tensor *cu_seqlens,
                               const int32_t *slots, clmoe_tensor *y)
{
  const char *op = "clmoe_mla_prefill";
  char desc[96];
  CLMOE_TRY(clmoe__mla_check_layer_weights(op, cfg, w)); /* f32 or bf16 matrices (clmoe_linear) */
  CLMOE_TRY(clmoe__mla_check_cache(op, cfg, cache));
  if (!x || x->ndim != 3)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: x is %s, expected [B, T, d_model] f32", op,
                        x ? clmoe_tensor_describe(x, desc, sizeof desc) : "NULL");
  const int64_t B = x->shape[0], T = x->shape[1], d = cfg->d_model;
  CLMOE_TRY(clmoe__want_shape(x, op, "x", 0, 3, B, T, d, 0));
  CLMOE_TRY(clmoe__want_shape(y, op, "y", 0, 3, B, T, d, 0));
  clmoe_tensor x2, y2;
  int64_t s2[2] = {B * T, d};
  CLMOE_TRY(clmoe_tensor_view(x, &x2, 2, s2, 0));
  CLMOE_TRY(clmoe_tensor_view(y, &y2, 2, s2, 0));
  mla_plan p;
  CLMOE_TRY(clmoe__mla_plan_make(ctx, op, B, T, cu_seqlens, &p));
  clmoe_mla_saved s;
  memset(&s, 0, sizeof s);
  cl_int *map = NULL;
  clmoe_status st = CLMOE_OK;
  if (p.N > cache->nseq) {
    st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %lld prompts for a cache of %lld sequences", op,
                      (long long)p.N, (long long)cache->nseq);
    goto done;
  }
  for (int64_t n = 0; n < p.N; n++) {
    int64_t slot = slots ? slots[n] : n;
    int dup = 0;
    for (int64_t m = 0; m < n && slots; m++) dup |= slots[m] == slot;
    if (slot < 0 || slot >= cache->nseq || cache->len[slot] != 0 || dup) {
      st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: prompt %lld goes to cache sequence %lld, which is out of "
                        "range, not empty or used twice (reset it first)", op, (long long)n, (long long)slot);
      goto done;
    }
  }
  CLMOE_TRY_GOTO(st, clmoe__mla_layer_forward(ctx, cfg, w, &x2, &p, &y2, &s), done);
  map = malloc((size_t)(p.M ? p.M : 1) * 2 * sizeof *map);
  if (!map) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory (token map)", op);
    goto done;
  }
  for (int64_t n = 0; n < p.N; n++) {
    const int64_t slot = slots ? slots[n] : n, L = p.bounds[n + 1] - p.bounds[n];
    CLMOE_TRY_GOTO(st, clmoe__mla_cache_reserve(cache, slot, L), done);
    for (int64_t t = 0; t < L; t++) map[2 * (p.bounds[n] + t)] = (cl_int)slot, map[2 * (p.bounds[n] + t) + 1] = (cl_int)t;
  }
  CLMOE_TRY_GOTO(st, clmoe__mla_cache_write(ctx, cache, &s.c, &s.kr, map, p.M), done);
  for (int64_t n = 0; n < p.N; n++) cache->len[slots ? slots[n] : n] = p.bounds[n + 1] - p.bounds[n];
  cache->len_dirty = 1;
done:
  free(map);
  clmoe_mla_saved_release(&s);
  clmoe__mla_plan_release(ctx, &p);
  return st;
}

/* The weights' dtype when every matrix of w is one the GEMV path takes (all f32 or all
 * bf16), else -1. */
static int gemv_dtype(const clmoe_mla_weights *w)
{
  const clmoe_tensor *m[] = {&w->w_dq, &w->w_uq, &w->w_dkv, &w->w_ukv, &w->w_g, &w->w_o};
  int dt = -1;
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    if (!m[i]->buf) continue; /* absent in this form */
    if (!clmoe__ops_gemv_ok(m[i]) || (dt >= 0 && (int)m[i]->dtype != dt)) return -1;
    dt = (int)m[i]->dtype;
  }
  return dt;
}

int clmoe__mla_decode_gemv_ok(const clmoe_mla_weights *w, int64_t nseq)
{
  return nseq <= MLA_GEMV_ROWS && gemv_dtype(w) >= 0;
}

/* The step's temporaries, each [N, cols]. */
enum { DS_CQ, DS_CRAW, DS_KR, DS_Q, DS_G, DS_QC, DS_OC, DS_O, DS_N };

/* The decode step on the GEMV path: x [N, d]; y [N, d] = (accumulate ? y : 0) + the layer's
 * output. Launches: the products of x (W_dq or W_q, the two row blocks of W_dkv, W_g) in
 * one GEMV; W_uq on RMSNorm(c_q) (the norm inside the GEMV); the cache append of
 * RMSNorm(c) and k_r (the norm inside the append, the lengths advanced there too);
 * q_c = W_uk^T q_n; the attention and its merge; o = W_uv o_c; W_o on o (times sigmoid of
 * the gate inside the GEMV) adding into y. */
static clmoe_status decode_gemv(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                                clmoe_mla_cache *c, const clmoe_tensor *x, const clmoe_tensor *x_gain, float x_eps,
                                int accumulate, clmoe_tensor *y)
{
  static const char op[] = "clmoe_mla_decode_step (gemv)";
  const int64_t N = c->nseq, H = cfg->n_heads, dn = cfg->qk_nope, dqk = dn + cfg->qk_rope, dv = cfg->v_dim;
  const int64_t dc = cfg->kv_rank, rq = cfg->q_rank > 0 ? cfg->q_rank : 1;
  const int64_t cols[DS_N] = {rq, dc, cfg->qk_rope, H * dqk, H * dv, H * dc, H * dc, H * dv};
  const int latent_q = cfg->q_rank > 0, gated = w->w_g.buf != NULL;
  const float eps = clmoe__mla_eps(cfg);
  clmoe_tensor t[DS_N] = {{0}}, wc, wr;
  clmoe_status st = CLMOE_OK;
  int hg, bt;
  char opts[160];
  CLMOE_TRY(clmoe__mla_decode_shape(ctx, c, &hg, &bt));
  clmoe__mla_decode_options(c, hg, bt, opts, sizeof opts);
  const size_t ol = strlen(opts);
  /* 16-byte loads of W_ukv where its rows start aligned (the sums are the same either way) */
  const int wbf16 = w->w_ukv.dtype == CLMOE_BF16;
  const int wvec = clmoe__knob_int(ctx, CLMOE_K_GEMV_VEC) != 0 && dc % 8 == 0 && w->w_ukv.offset % (wbf16 ? 8 : 4) == 0;
  snprintf(opts + ol, sizeof opts - ol, " -DW_BF16=%d -DWVEC=%d", wbf16, wvec);
  for (int i = 0; i < DS_N && st == CLMOE_OK; i++)
    st = clmoe_tensor_create(ctx, &t[i], CLMOE_F32, 2, (int64_t[]){N, cols[i]});
  if (st != CLMOE_OK) goto done;
  CLMOE_TRY_GOTO(st, clmoe_tensor_rows(&w->w_dkv, &wc, 0, dc), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_rows(&w->w_dkv, &wr, dc, cfg->qk_rope), done);
  {
    const clmoe__gemv_slot xs[4] = {{latent_q ? &w->w_dq : &w->w_uq, latent_q ? &t[DS_CQ] : &t[DS_Q], NULL},
                                    {&wc, &t[DS_CRAW], NULL}, {&wr, &t[DS_KR], NULL}, {&w->w_g, &t[DS_G], NULL}};
    CLMOE_TRY_GOTO(st, clmoe__ops_gemv(ctx, op, x, NULL, x_gain, x_gain ? 1 : 0, 0, x_gain ? x_eps : 0.0f, 0,
                                       gated ? 4 : 3, xs), done);
  }
  if (latent_q) {
    const clmoe__gemv_slot uq = {&w->w_uq, &t[DS_Q], NULL};
    CLMOE_TRY_GOTO(st, clmoe__ops_gemv(ctx, op, &t[DS_CQ], NULL, &w->q_norm, 1, 0, eps, 0, 1, &uq), done);
  }
  /* c and k_r appended to the cache (positions and lengths on the device) */
  for (int64_t n = 0; n < N; n++) CLMOE_TRY_GOTO(st, clmoe__mla_cache_reserve(c, n, c->len[n] + 1), done);
  CLMOE_TRY_GOTO(st, clmoe__mla_cache_append_norm(ctx, c, &t[DS_CRAW], &w->kv_norm, eps, &t[DS_KR]), done);
  for (int64_t n = 0; n < N; n++) c->len[n]++;
  {
    cl_kernel k;
    CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "mla_layout+mla+mla_decode", opts, "mla_dec_absorb_q", &k), done);
    cl_ulong qo = (cl_ulong)t[DS_Q].offset, wo = (cl_ulong)w->w_ukv.offset;
    cl_int idqk = (cl_int)dqk, idn = (cl_int)dn, idkv = (cl_int)(dn + dv);
    CLMOE_TRY_GOTO(st, clmoe__args(k, 8, KA(t[DS_Q].buf), KA(qo), KA(idqk), KA(idn), KA(idkv), KA(w->w_ukv.buf),
                                   KA(wo), KA(t[DS_QC].buf)), done);
    size_t l[3] = {AQ_WG, 1, 1}, g[3] = {(size_t)((dc + AQ_COLS - 1) / AQ_COLS) * AQ_WG, (size_t)H, (size_t)N};
    CLMOE_TRY_GOTO(st, clmoe__launch(ctx, k, 3, g, l), done);
  }
  CLMOE_TRY_GOTO(st, clmoe__mla_decode_attend(ctx, cfg, c, &t[DS_QC], &t[DS_Q], &t[DS_OC]), done);
  {
    cl_kernel k;
    CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "mla_layout+mla+mla_decode", opts, "mla_dec_absorb_o", &k), done);
    cl_ulong wo = (cl_ulong)w->w_ukv.offset;
    cl_int iH = (cl_int)H, idn = (cl_int)dn, idv = (cl_int)dv, idkv = (cl_int)(dn + dv);
    CLMOE_TRY_GOTO(st, clmoe__args(k, 8, KA(t[DS_OC].buf), KA(iH), KA(idn), KA(idv), KA(idkv), KA(w->w_ukv.buf),
                                   KA(wo), KA(t[DS_O].buf)), done);
    size_t l[3] = {AO_WG, 1, 1}, g[3] = {AO_WG, (size_t)((dv + AO_ROWS - 1) / AO_ROWS), (size_t)(N * H)};
    CLMOE_TRY_GOTO(st, clmoe__launch(ctx, k, 3, g, l), done);
  }
  {
    const clmoe__gemv_slot out = {&w->w_o, y, NULL};
    st = clmoe__ops_gemv(ctx, op, &t[DS_O], gated ? &t[DS_G] : NULL, NULL, gated ? 3 : 0, 0, 0.0f, accumulate, 1,
                         &out);
  }
done:
  for (int i = 0; i < DS_N; i++) clmoe_tensor_destroy(&t[i]);
  return st;
}

clmoe_status clmoe__mla_decode_step_into(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                                         clmoe_mla_cache *c, const clmoe_tensor *x, const clmoe_tensor *x_gain,
                                         float x_eps, int accumulate, clmoe_tensor *y)
{
  const char *op = "clmoe_mla_decode_step";
  CLMOE_TRY(clmoe__mla_check_layer_weights(op, cfg, w)); /* f32 or bf16 matrices */
  CLMOE_TRY(clmoe__mla_check_cache(op, cfg, c));
  CLMOE_TRY(clmoe__want_shape(x, op, "x", 0, 2, c->nseq, cfg->d_model, 0, 0));
  CLMOE_TRY(clmoe__want_shape(y, op, "y", 0, 2, c->nseq, cfg->d_model, 0, 0));
  if (!clmoe__mla_decode_gemv_ok(w, c->nseq))
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %lld sequences (at most %d) or weights of mixed types for the "
                        "GEMV path", op, (long long)c->nseq, MLA_GEMV_ROWS);
  if (x_gain) CLMOE_TRY(clmoe__want_shape(x_gain, op, "x's norm gain", 0, 1, cfg->d_model, 0, 0, 0));
  return decode_gemv(ctx, cfg, w, c, x, x_gain, x_eps, accumulate, y);
}

clmoe_status clmoe_mla_decode_step(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                                   clmoe_mla_cache *c, const clmoe_tensor *x, clmoe_tensor *y)
{
  const char *op = "clmoe_mla_decode_step";
  CLMOE_TRY(clmoe__mla_check_layer_weights(op, cfg, w));
  CLMOE_TRY(clmoe__mla_check_cache(op, cfg, c));
  if (clmoe__mla_decode_gemv_ok(w, c->nseq)) return clmoe__mla_decode_step_into(ctx, cfg, w, c, x, NULL, 0.0f, 0, y);
  CLMOE_TRY(clmoe__mla_check_absorbed_weights(op, cfg, w));
  const int64_t N = c->nseq;
  CLMOE_TRY(clmoe__want_shape(x, op, "x", 0, 2, N, cfg->d_model, 0, 0));
  CLMOE_TRY(clmoe__want_shape(y, op, "y", 0, 2, N, cfg->d_model, 0, 0));
  clmoe_mla_saved s;
  memset(&s, 0, sizeof s);
  clmoe_status st = CLMOE_OK;
  /* Projections of the new tokens, then their c and k_r appended to the cache (positions
   * and lengths on the device: no upload unless a block was added). */
  CLMOE_TRY_GOTO(st, clmoe__mla_project(ctx, cfg, w, x, &s, 0), done);
  for (int64_t n = 0; n < N; n++) CLMOE_TRY_GOTO(st, clmoe__mla_cache_reserve(c, n, c->len[n] + 1), done);
  CLMOE_TRY_GOTO(st, clmoe__mla_cache_write(ctx, c, &s.c, &s.kr, NULL, N), done);
  for (int64_t n = 0; n < N; n++) c->len[n]++;
  st = clmoe__mla_absorbed(ctx, cfg, w, c, &s, N, NULL, y);
done:
  clmoe_mla_saved_release(&s);
  return st;
}
