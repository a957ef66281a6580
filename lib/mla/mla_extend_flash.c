/* MLA chunked prefill in the training form ("flash extend"): new tokens of sequences whose
 * latent cache already holds a prefix, attended like the one-pass prefill does rather than
 * in absorbed form. Per pass:
 *   1. the new tokens' c and k_r are appended to the cache (clmoe__mla_extend_append);
 *   2. the whole context of every extended sequence (prefix and new tokens) is read back
 *      from the cache into contiguous f32 c [K, dc] and k_r [K, Dr] (bf16 rows as stored),
 *      K = sum of the extended sequences' lengths;
 *   3. kv [K, H (Dn + Dv)] = c W_ukv^T (one clmoe_gemm): per head [k_n; v];
 *   4. the tiled flash forward (kernels_cl/mla/mla_fwd.cl) runs the new tokens' queries against
 *      those keys with a query shift: new token i of a sequence with prefix P sits at key
 *      position P + i and attends to keys 0 .. P + i. The key tiles start at the sequence's
 *      first token, so the sums run in the order of the one-pass prefill.
 * Work: O(new x context) attention with 192 + 128 multiply-adds per (query, key, head) at
 * the report's dims, against 576 + 512 in absorbed form, plus the decompression GEMM
 * (K dc H (Dn + Dv)). Memory beyond the cache: (dc + Dr + H (Dn + Dv)) f32 per context token
 * of the extended sequences (gpu preset: 576 + 8 x 256 floats = 10.3 KiB per token, 10.3 GiB
 * at 1M tokens), freed after the pass, and an 8-byte map per context token. */
#include "mla_internal.h"
#include "clmoe/tile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clmoe/gemm.h"

int clmoe_mla_extend_flash_cheaper(const clmoe_mla_config *cfg, const clmoe_mla_cache *c, const int64_t *counts)
{
  if (!cfg || !c || !counts) return 0;
  const double dn = (double)cfg->qk_nope, dr = (double)cfg->qk_rope, dv = (double)cfg->v_dim;
  const double dc = (double)cfg->kv_rank;
  double flash = 0.0, absorbed = 0.0;
  for (int64_t n = 0; n < c->nseq; n++) {
    const double C = (double)counts[n], P = (double)c->len[n];
    if (C <= 0) continue;
    const double pairs = C * P + C * (C + 1) / 2;
    flash += pairs * (dn + dr + dv) + (P + C) * dc * (dn + dv);
    absorbed += pairs * (2 * dc + dr) + C * dc * (dn + dv); /* q_c = W_uk^T q_n and W_uv o_c */
  }
  return flash <= absorbed;
}

/* Host tables: map [K] (sequence, position) of every context key, and the int4 query tiles
 * (first key of the sequence, first query row, rows, shift) of at most fq rows. */
static int64_t flash_tables(const clmoe_mla_cache *c, const int64_t *counts, int fq, cl_int *map, cl_int *tiles)
{
  int64_t nt = 0;
  for (int64_t n = 0, q0 = 0, k0 = 0; n < c->nseq; n++) {
    const int64_t C = counts[n], L = c->len[n], P = L - C;
    if (C == 0) continue;
    for (int64_t j = 0; j < L; j++) map[2 * (k0 + j)] = (cl_int)n, map[2 * (k0 + j) + 1] = (cl_int)j;
    for (int64_t t0 = q0; t0 < q0 + C; t0 += fq, nt++) {
      tiles[4 * nt] = (cl_int)k0, tiles[4 * nt + 1] = (cl_int)t0;
      tiles[4 * nt + 2] = (cl_int)(q0 + C - t0 < fq ? q0 + C - t0 : fq);
      tiles[4 * nt + 3] = (cl_int)(k0 + P - q0);
    }
    q0 += C, k0 += L;
  }
  return nt;
}

/* Steps 2-4 and the output projection, for M new tokens already appended (lengths updated). */
#define EXTEND_GEMM_ROWS ((int64_t)1 << 18) /* context keys per decompression product */

static clmoe_status flash_attend(clmoe_ctx *ctx, const char *op, const clmoe_mla_config *cfg,
                                 const clmoe_mla_weights *w, clmoe_mla_cache *c, const int64_t *counts,
                                 clmoe_mla_saved *s, int64_t M, clmoe_tensor *y)
{
  const int64_t H = cfg->n_heads, dn = cfg->qk_nope, dr = cfg->qk_rope, dv = cfg->v_dim, dqk = dn + dr;
  const int64_t dkv = dn + dv, dc = cfg->kv_rank;
  int64_t K = 0, ntmax = 0;
  mla_attn_desc a = {M, H, dn, dr, dv, 0, clmoe__mla_scale(cfg), {0}, {0}, {0}, {0}};
  int fq, bq = 0, maxc = 0;
  CLMOE_TRY(clmoe__mla_attn_fwd_shape(ctx, op, &a, &fq));
  for (int64_t n = 0; n < c->nseq; n++) maxc = counts[n] > maxc ? (int)counts[n] : maxc;
  /* The tile kernel on the fast path: the operands here are fp32 (decompressed
   * K/V), rounded to bf16 by the kernel, so only when the fast path is forced or the cache
   * is bf16 already. Tiles of bq rows; else the portable kernel's fq. */
  if (clmoe_ctx_fastpath_for(ctx, c->dtype == CLMOE_BF16)) {
    if (clmoe__mla_tile_fwd_prepare(ctx, &a, maxc, &bq) == CLMOE_OK) fq = bq;
    else bq = 0, clmoe_clear_error();
  }
  for (int64_t n = 0; n < c->nseq; n++)
    if (counts[n] > 0) K += c->len[n], ntmax += (counts[n] + fq - 1) / fq;
  if (K > INT32_MAX / 2)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %lld context tokens exceed 2^30; use fewer sequences per "
                        "pass", op, (long long)K);
  clmoe_tensor lat = {0}, kr = {0}, kv = {0}, o = {0}, u = {0};
  cl_int *map = malloc((size_t)(2 * K + 4 * ntmax) * sizeof *map), *tiles = map ? map + 2 * K : NULL;
  cl_mem dt = NULL;
  size_t tbytes = (size_t)ntmax * 4 * sizeof(cl_int);
  clmoe_status st = CLMOE_OK;
  if (!map) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory (map of %lld keys)", op, (long long)K);
  const int64_t nt = flash_tables(c, counts, fq, map, tiles);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &lat, CLMOE_F32, 2, (int64_t[]){K, dc}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &kr, CLMOE_F32, 2, (int64_t[]){K, dr}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &kv, CLMOE_F32, 2, (int64_t[]){K, H * dkv}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &o, CLMOE_F32, 2, (int64_t[]){M, H * dv}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &u, CLMOE_F32, 2, (int64_t[]){M, H * dv}), done);
  if (lat.offset != 0 || kr.offset != 0) {
    st = clmoe__error(CLMOE_ERR_INTERNAL, "%s: scratch tensors must start their buffers", op);
    goto done;
  }
  CLMOE_TRY_GOTO(st, clmoe__mla_cache_gather(ctx, c, map, K, &lat, &kr), done);
  /* per head [k_n; v] = W_ukv c, for every context token, in blocks of rows: one product
   * over a million keys (n = 10^6 in CLBlast's column-major view) is beyond what its
   * kernels' launch sizes were made for */
  for (int64_t r0 = 0; r0 < K; r0 += EXTEND_GEMM_ROWS) {
    const int64_t rows = K - r0 < EXTEND_GEMM_ROWS ? K - r0 : EXTEND_GEMM_ROWS;
    clmoe_tensor lv, kvv;
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&lat, &lv, 2, (int64_t[]){rows, dc}, r0 * dc), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&kv, &kvv, 2, (int64_t[]){rows, H * dkv}, r0 * H * dkv), done);
    CLMOE_TRY_GOTO(st, clmoe_gemm(ctx, CLMOE_NOTRANS, CLMOE_TRANS, 1.0f, &lv, &w->w_ukv, 0.0f, &kvv), done);
  }
  a.q = (mla_operand){s->q.buf, (cl_ulong)s->q.offset, (cl_uint)(H * dqk), (cl_uint)dqk};
  a.kn = (mla_operand){kv.buf, (cl_ulong)kv.offset, (cl_uint)(H * dkv), (cl_uint)dkv};
  a.kr = (mla_operand){kr.buf, (cl_ulong)kr.offset, (cl_uint)dr, 0};
  a.v = (mla_operand){kv.buf, (cl_ulong)(kv.offset + dn), (cl_uint)(H * dkv), (cl_uint)dkv};
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, tbytes, &dt), done);
  CLMOE_TRY_GOTO(st, clmoe__write_staged(ctx, dt, 0, tbytes, tiles), done);
  if (bq) CLMOE_TRY_GOTO(st, clmoe__mla_tile_fwd_launch(ctx, &a, bq, dt, (int)nt, &o, NULL), done);
  else CLMOE_TRY_GOTO(st, clmoe__mla_attn_fwd_launch(ctx, &a, fq, dt, (int)nt, &o, NULL), done);
  st = clmoe__mla_output(ctx, w, &s->gate, &o, &u, y);
done:
  clmoe__scratch_release(ctx, dt, tbytes);
  clmoe_tensor *t[] = {&lat, &kr, &kv, &o, &u};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
  free(map);
  /* The decompressed K/V grow with the context at every pass, so their size classes never
   * come back: kept in the pool they would add up (tens of GB by a million tokens). Hand
   * the cached buffers back to the driver; the next pass allocates what it needs. */
  clmoe_ctx_pool_trim(ctx);
  return st;
}

clmoe_status clmoe_mla_extend_flash(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                                    clmoe_mla_cache *c, const clmoe_tensor *x, const int64_t *counts,
                                    clmoe_tensor *y)
{
  const char *op = "clmoe_mla_extend_flash";
  clmoe_mla_saved s;
  memset(&s, 0, sizeof s);
  cl_int *pos;
  int64_t M;
  CLMOE_TRY(clmoe__mla_extend_append(ctx, op, cfg, w, c, x, counts, y, &s, &pos, &M));
  if (M == 0) return CLMOE_OK;
  free(pos);
  clmoe_status st = flash_attend(ctx, op, cfg, w, c, counts, &s, M, y);
  clmoe_mla_saved_release(&s);
  return st;
}
