/* MLA chunked prefill ("extend"): new tokens of sequences whose latent cache already holds
 * a prefix. The tokens' c and k_r are appended to the cache, then every (token, head) query
 * row attends in absorbed form to the cached prefix and the chunk's tokens causally, by the
 * tiled kernel of kernels_cl/mla/mla_extend.cl: a work-group takes ER rows of one sequence (a few
 * consecutive tokens with all their heads) and streams the sequence's cache through local
 * memory in tiles of EK rows with an online softmax. Cost O(new tokens x context) work and
 * O(new tokens) memory (a tile table and the token positions); no per-row block tables or
 * per-split partials. The decode step (mla_decode.c) keeps its split kernel. The first half
 * (checks, projections, cache append: mla_extend_append) is shared with the training form
 * (mla_extend_flash.c). */
#include "mla_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  const int el = MLA_WG / er;
  return 4 * ((size_t)ek * (size_t)(c->row + 1) + (size_t)er * (size_t)ek * (size_t)(el + 1) +
              (size_t)er * (size_t)(ek + 1));
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

clmoe_status mla_extend_attend(clmoe_ctx *ctx, const clmoe_mla_config *cfg, clmoe_mla_cache *c,
                               const mla_extend_rows *rows, const clmoe_tensor *qc, const clmoe_tensor *q,
                               clmoe_tensor *oc)
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
  CLMOE_TRY(clmoe__kernel(ctx, "mla+mla_decode+mla_extend", opts, "mla_extend_attn", &k));
  CLMOE_TRY(mla_cache_sync(c));
  const int64_t maxt = (M * H + er - 1) / er + c->nseq;
  cl_int *tiles = malloc((size_t)maxt * 4 * sizeof *tiles);
  if (!tiles) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_mla_extend: out of host memory (tile table)");
  const int64_t nt = extend_tiles(c, rows, H, er, tiles);
  const size_t tbytes = (size_t)nt * 4 * sizeof(cl_int), pbytes = (size_t)M * sizeof(cl_int);
  cl_mem dt = NULL, dp = NULL;
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, tbytes, &dt), done);
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, pbytes, &dp), done);
  CLMOE_CL_GOTO(st, clEnqueueWriteBuffer(ctx->queue, dt, CL_TRUE, 0, tbytes, tiles, 0, NULL, NULL), done);
  CLMOE_CL_GOTO(st, clEnqueueWriteBuffer(ctx->queue, dp, CL_TRUE, 0, pbytes, rows->pos, 0, NULL, NULL), done);
  cl_ulong qco = (cl_ulong)qc->offset, qo = (cl_ulong)(q->offset + cfg->qk_nope);
  cl_uint q_ts = (cl_uint)(H * dqk), q_hs = (cl_uint)dqk;
  cl_int maxb = (cl_int)c->maxb, Hi = (cl_int)H;
  float sl2 = mla_scale(cfg) * 1.4426950408889634f;
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

clmoe_status mla_extend_append(clmoe_ctx *ctx, const char *op, const clmoe_mla_config *cfg,
                               const clmoe_mla_weights *w, clmoe_mla_cache *c, const clmoe_tensor *x,
                               const int64_t *counts, const clmoe_tensor *y, clmoe_mla_saved *s, cl_int **pos,
                               int64_t *M)
{
  *pos = NULL, *M = 0;
  CLMOE_TRY(mla_check_weights(op, cfg, w));
  CLMOE_TRY(mla_check_cache(op, cfg, c));
  if (!counts) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: counts is NULL", op);
  int64_t m = 0;
  for (int64_t n = 0; n < c->nseq; n++) {
    if (counts[n] < 0 || counts[n] > ((int64_t)1 << 30))
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: counts[%lld] = %lld is out of range", op, (long long)n,
                          (long long)counts[n]);
    m += counts[n];
  }
  if (m == 0) return CLMOE_OK;
  CLMOE_TRY(clmoe__want_shape(x, op, "x", 0, 2, m, cfg->d_model, 0, 0));
  CLMOE_TRY(clmoe__want_shape(y, op, "y", 0, 2, m, cfg->d_model, 0, 0));
  for (int64_t n = 0; n < c->nseq; n++)
    if (c->len[n] + counts[n] > INT32_MAX)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: sequence %lld would exceed 2^31 tokens", op, (long long)n);
  cl_int *map = malloc((size_t)m * 3 * sizeof *map);
  if (!map) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory (token map)", op);
  cl_int *p = map + 2 * m;
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY_GOTO(st, mla_project(ctx, cfg, w, x, s, 0), done);
  for (int64_t n = 0, i = 0; n < c->nseq; n++) {
    CLMOE_TRY_GOTO(st, mla_cache_reserve(c, n, c->len[n] + counts[n]), done);
    for (int64_t t = 0; t < counts[n]; t++, i++) {
      p[i] = (cl_int)(c->len[n] + t);
      map[2 * i] = (cl_int)n, map[2 * i + 1] = p[i];
    }
  }
  CLMOE_TRY_GOTO(st, mla_cache_write(ctx, c, &s->c, &s->kr, map, m), done);
  for (int64_t n = 0; n < c->nseq; n++) c->len[n] += counts[n];
  c->len_dirty = 1;
  /* keep the positions (the tail of the block) for the caller */
  memmove(map, p, (size_t)m * sizeof *map);
  *pos = map, *M = m;
  return CLMOE_OK;
done:
  free(map);
  clmoe_mla_saved_release(s);
  return st;
}

clmoe_status clmoe_mla_extend(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                              clmoe_mla_cache *c, const clmoe_tensor *x, const int64_t *counts, clmoe_tensor *y)
{
  clmoe_mla_saved s;
  memset(&s, 0, sizeof s);
  cl_int *pos;
  int64_t M;
  CLMOE_TRY(mla_extend_append(ctx, "clmoe_mla_extend", cfg, w, c, x, counts, y, &s, &pos, &M));
  if (M == 0) return CLMOE_OK;
  const mla_extend_rows rows = {counts, pos, M};
  clmoe_status st = mla_absorbed(ctx, cfg, w, c, &s, M, &rows, y);
  free(pos);
  clmoe_mla_saved_release(&s);
  return st;
}
