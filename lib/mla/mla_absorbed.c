/* MLA attention of absorbed queries over the paged latent cache (mla_cache.c), for the
 * decode step (mla_decode.c) and chunked prefill (mla_extend.c). Absorbed form, per head h
 * with W_uk[h] [Dn, dc] and W_uv[h] [Dv, dc] the rows of W_ukv:
 *   q_c = W_uk[h]^T q_n            (batched GEMM over heads)
 *   s_t = scale (q_c . c_t + q_r . k_r,t),  p = softmax(s)   over the cached tokens t
 *   o_h = W_uv[h] (sum_t p_t c_t)  (batched GEMM over heads)
 * which equals the training form exactly in exact arithmetic (no rotation: NoPE).
 *
 * A decode step's rows (one per sequence) run the split kernel of
 * kernels_cl/mla/mla_decode.cl. An extend's rows run the tiled kernel of
 * kernels_cl/mla/mla_extend.cl: a work-group takes ER rows of one sequence (a few
 * consecutive tokens with all their heads) and streams the sequence's cache through local
 * memory in tiles of EK rows with an online softmax. Cost O(new tokens x context) work and
 * O(new tokens) memory (a tile table and the token positions); no per-row block tables or
 * per-split partials. */
#include "mla_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/gemm.h"

/* A strided 3-D view [d0, d1, d2] of base's buffer with the given element strides, starting
 * `offset` elements after base's first (for head-batched GEMMs over interleaved columns). */
static void strided_view(const clmoe_tensor *base, int64_t offset, int64_t d0, int64_t d1,
                         int64_t d2, int64_t s0, int64_t s1, clmoe_tensor *out)
{
  *out = *base;
  out->ndim = 3;
  out->shape[0] = d0, out->shape[1] = d1, out->shape[2] = d2, out->shape[3] = 1;
  out->stride[0] = s0, out->stride[1] = s1, out->stride[2] = 1, out->stride[3] = 1;
  out->offset = base->offset + offset;
  out->is_view = 1;
}

/* oc [N, H, dc] (offset 0) = absorbed attention of qc [N, H, dc] and q_r (in q [N, H, Dqk]) over
 * the cache, for N query rows: row n reads the block-table row `table[n]` ([N, maxb] i32)
 * up to lens[n] tokens (i32 [N]); maxlen bounds lens. Splits of MLA_DECODE_SPLIT(lens[n]) tokens. */
static clmoe_status attend_rows(clmoe_ctx *ctx, const clmoe_mla_config *cfg, clmoe_mla_cache *c, cl_mem table,
                                int64_t tmaxb, cl_mem lens, int64_t N, int64_t maxlen, const clmoe_tensor *qc, const clmoe_tensor *q, clmoe_tensor *oc)
{
  const int64_t H = cfg->n_heads, dqk = cfg->qk_nope + cfg->qk_rope;
  const int64_t nsplit = MLA_DECODE_SPLITS(maxlen);
  int hg, bt;
  CLMOE_TRY(clmoe__mla_decode_shape(ctx, c, &hg, &bt));
  char opts[128];
  clmoe__mla_decode_options(c, hg, bt, opts, sizeof opts);
  cl_kernel ka, kc;
  CLMOE_TRY(clmoe__kernel(ctx, "mla_layout+mla+mla_decode", opts, "mla_decode_attn", &ka));
  CLMOE_TRY(clmoe__kernel(ctx, "mla_layout+mla+mla_decode", opts, "mla_decode_combine", &kc));
  const size_t nb = (size_t)(N * H * nsplit) * sizeof(float);
  const size_t bytes[3] = {nb, nb, nb * (size_t)c->dc};
  cl_mem m[3] = {NULL, NULL, NULL};
  clmoe_status st = CLMOE_OK;
  for (int i = 0; i < 3; i++) CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, bytes[i], &m[i]), done);
  cl_ulong qco = (cl_ulong)qc->offset, qo = (cl_ulong)(q->offset + cfg->qk_nope);
  cl_uint q_ts = (cl_uint)(H * dqk), q_hs = (cl_uint)dqk;
  cl_int maxb = (cl_int)tmaxb, Hi = (cl_int)H, ns = (cl_int)nsplit;
  float sl2 = clmoe__mla_scale(cfg) * 1.4426950408889634f;
  CLMOE_TRY_GOTO(st, clmoe__args(ka, 16, KA(qc->buf), KA(qco), KA(q->buf), KA(qo), KA(q_ts), KA(q_hs),
                                 KA(c->store.buf), KA(table), KA(maxb), KA(lens), KA(Hi), KA(ns), KA(sl2), KA(m[0]), KA(m[1]), KA(m[2])), done);
  size_t global[3] = {(size_t)nsplit * MLA_WG, (size_t)((H + hg - 1) / hg), (size_t)N}, local[3] = {MLA_WG, 1, 1};
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, ka, 3, global, local), done);
  CLMOE_TRY_GOTO(st, clmoe__args(kc, 7, KA(m[0]), KA(m[1]), KA(m[2]), KA(lens), KA(Hi), KA(ns), KA(oc->buf)),
                 done);
  size_t gc[3] = {(size_t)c->dc, (size_t)H, (size_t)N};
  st = clmoe__launch(ctx, kc, 3, gc, NULL);
done:
  for (int i = 0; i < 3; i++) clmoe__scratch_release(ctx, m[i], bytes[i]);
  return st;
}

clmoe_status clmoe__mla_decode_attend(clmoe_ctx *ctx, const clmoe_mla_config *cfg, clmoe_mla_cache *c,
                                      const clmoe_tensor *qc, const clmoe_tensor *q, clmoe_tensor *oc)
{
  int64_t maxlen = 0;
  for (int64_t n = 0; n < c->nseq; n++) maxlen = c->len[n] > maxlen ? c->len[n] : maxlen;
  return attend_rows(ctx, cfg, c, c->d_table.buf, c->maxb, c->d_len.buf, c->nseq, maxlen, qc, q,
                     oc);
}

/* Rows per work-group and cache rows per tile, from the row width only (DL = dc + Dr), so a
 * configuration sums in the same order on every device: narrow rows (the tiny and demo
 * presets) take 64 rows x 4 lanes, wide ones (576 numbers: the gpu preset) 32 rows x 8 lanes,
 * which keeps the query (DL / 8) and the output (dc / 8) of a row in registers. */
static void extend_shape(const clmoe_mla_cache *c, int *er, int *ek)
{
  const int narrow = c->row <= 128;
  *er = narrow ? 64 : 32;
  *ek = narrow ? 16 : 8;
}

static size_t extend_local_bytes(const clmoe_mla_cache *c, int er, int ek)
{
  return MLA_EXTEND_LOCAL_BYTES((size_t)c->row, (size_t)er, (size_t)ek);
}

/* Tiles of at most ER rows, one sequence each: (first row, rows, last position + 1,
 * sequence), the longest contexts first (they take longest; a GPU starts them early). */
static int64_t extend_tiles(const clmoe_mla_cache *c, const mla_extend_rows *r, int64_t H, int er, cl_int *t)
{
  int64_t nt = 0;
  for (int64_t n = c->nseq - 1, i1 = r->M; n >= 0; n--) {
    const int64_t i0 = i1 - r->counts[n];
    for (int64_t g1 = i1 * H; g1 > i0 * H; g1 -= er, nt++) {
      const int64_t g0 = g1 - er > i0 * H ? g1 - er : i0 * H;
      t[4 * nt] = (cl_int)g0, t[4 * nt + 1] = (cl_int)(g1 - g0);
      t[4 * nt + 2] = r->pos[(g1 - 1) / H] + 1, t[4 * nt + 3] = (cl_int)n;
    }
    i1 = i0;
  }
  return nt;
}

/* oc [M, H, dc] = the absorbed attention of qc [M, H, dc] and q_r (in q [M, H Dqk]) of an
 * extend's new rows over their sequences' caches, by the tiled kernel
 * (kernels_cl/mla/mla_extend.cl). */
static clmoe_status extend_attend(clmoe_ctx *ctx, const clmoe_mla_config *cfg, clmoe_mla_cache *c,
                                  const mla_extend_rows *rows, const clmoe_tensor *qc,
                                  const clmoe_tensor *q, clmoe_tensor *oc)
{
  const int64_t H = cfg->n_heads, dqk = cfg->qk_nope + cfg->qk_rope, M = rows->M;
  if (M * H > INT32_MAX)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_mla_extend: %lld tokens x %lld heads exceed 2^31 query "
                        "rows; use smaller prefill chunks", (long long)M, (long long)H);
  if (oc->offset != 0)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_mla_extend: the output must start its buffer");
  int er, ek;
  extend_shape(c, &er, &ek);
  const size_t local = extend_local_bytes(c, er, ek);
  if (local > ctx->caps.local_mem_bytes)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_mla_extend: cache rows of %lld numbers need %zu bytes of local "
                        "memory; the device has %llu", (long long)c->row, local,
                        (unsigned long long)ctx->caps.local_mem_bytes);
  char opts[160];
  snprintf(opts, sizeof opts, "-DDC=%d -DDR=%d -DCACHE_BF16=%d -DER=%d -DEK=%d", (int)c->dc, (int)c->dr,
           c->dtype == CLMOE_BF16, er, ek);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "mla_layout+mla+mla_decode+mla_extend", opts, "mla_extend_attn", &k));
  CLMOE_TRY(clmoe__mla_cache_sync(c));
  const int64_t maxt = (M * H + er - 1) / er + c->nseq;
  cl_int *tiles = malloc((size_t)maxt * 4 * sizeof *tiles);
  if (!tiles) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_mla_extend: out of host memory (tile table)");
  const int64_t nt = extend_tiles(c, rows, H, er, tiles);
  const size_t tbytes = (size_t)nt * 4 * sizeof(cl_int), pbytes = (size_t)M * sizeof(cl_int);
  cl_mem dt = NULL, dp = NULL;
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, tbytes, &dt), done);
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, pbytes, &dp), done);
  CLMOE_TRY_GOTO(st, clmoe__write_staged(ctx, dt, 0, tbytes, tiles), done);
  CLMOE_TRY_GOTO(st, clmoe__write_staged(ctx, dp, 0, pbytes, rows->pos), done);
  cl_ulong qco = (cl_ulong)qc->offset, qo = (cl_ulong)(q->offset + cfg->qk_nope);
  cl_uint q_ts = (cl_uint)(H * dqk), q_hs = (cl_uint)dqk;
  cl_int maxb = (cl_int)c->maxb, Hi = (cl_int)H;
  float sl2 = clmoe__mla_scale(cfg) * 1.4426950408889634f;
  CLMOE_TRY_GOTO(st, clmoe__args(k, 14, KA(qc->buf), KA(qco), KA(q->buf), KA(qo), KA(q_ts), KA(q_hs),
                                 KA(c->store.buf), KA(c->d_table.buf), KA(maxb), KA(dp), KA(dt), KA(Hi), KA(sl2),
                                 KA(oc->buf)), done);
  size_t global[1] = {(size_t)nt * MLA_WG}, lsize[1] = {MLA_WG};
  st = clmoe__launch(ctx, k, 1, global, lsize);
done:
  clmoe__scratch_release(ctx, dt, tbytes);
  clmoe__scratch_release(ctx, dp, pbytes);
  free(tiles);
  return st;
}

/* The absorbed attention and output of M new tokens whose c and k_r are already cached and
 * whose projections are in s: y [M, d]. rows NULL: a decode step (one row per sequence). */
clmoe_status clmoe__mla_absorbed(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                 const clmoe_mla_weights *w, clmoe_mla_cache *c, clmoe_mla_saved *s,
                                 int64_t N, const mla_extend_rows *rows, clmoe_tensor *y)
{
  const int64_t H = cfg->n_heads, dn = cfg->qk_nope, dqk = dn + cfg->qk_rope;
  const int64_t dv = cfg->v_dim, dc = cfg->kv_rank, dkv = dn + dv;
  clmoe_tensor qc = {0}, oc = {0}, o = {0};
  clmoe_status st = CLMOE_OK;
  /* q_c[h] = q_n[h] W_uk[h]: [N, Dn] x [Dn, dc] per head */
  int64_t s3[3] = {N, H, dc}, sv[3] = {N, H, dv};
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &qc, CLMOE_F32, 3, s3), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &oc, CLMOE_F32, 3, s3), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &o, CLMOE_F32, 3, sv), done);
  clmoe_tensor A, Bm, C;
  strided_view(&s->q, 0, H, N, dn, dqk, H * dqk, &A);
  strided_view(&w->w_ukv, 0, H, dn, dc, dkv * dc, dc, &Bm);
  strided_view(&qc, 0, H, N, dc, dc, H * dc, &C);
  CLMOE_TRY_GOTO(st, clmoe_gemm_batched(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &Bm, 0.0f, &C), done);
  if (rows) CLMOE_TRY_GOTO(st, extend_attend(ctx, cfg, c, rows, &qc, &s->q, &oc), done);
  else CLMOE_TRY_GOTO(st, clmoe__mla_decode_attend(ctx, cfg, c, &qc, &s->q, &oc), done);
  /* o[h] = oc[h] W_uv[h]^T: [N, dc] x [dc, Dv] per head */
  strided_view(&oc, 0, H, N, dc, dc, H * dc, &A);
  strided_view(&w->w_ukv, dn * dc, H, dv, dc, dkv * dc, dc, &Bm);
  strided_view(&o, 0, H, N, dv, dv, H * dv, &C);
  CLMOE_TRY_GOTO(st, clmoe_gemm_batched(ctx, CLMOE_NOTRANS, CLMOE_TRANS, 1.0f, &A, &Bm, 0.0f, &C), done);
  clmoe_tensor o2;
  int64_t so[2] = {N, H * dv};
  CLMOE_TRY_GOTO(st, clmoe_tensor_view(&o, &o2, 2, so, 0), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &s->u, CLMOE_F32, 2, so), done);
  st = clmoe__mla_output(ctx, w, &s->gate, &o2, &s->u, y);
done:
  clmoe_tensor_destroy(&qc), clmoe_tensor_destroy(&oc), clmoe_tensor_destroy(&o);
  return st;
}
