/* MLA decoding: the paged latent cache, prefill (training-form forward + one cache write
 * for the whole prompt batch) and the absorbed decode step (kernels_cl/mla/mla_decode.cl).
 *
 * Absorbed form, per head h with W_uk[h] [Dn, dc] and W_uv[h] [Dv, dc] the rows of W_ukv:
 *   q_c = W_uk[h]^T q_n            (batched GEMM over heads)
 *   s_t = scale (q_c . c_t + q_r . k_r,t),  p = softmax(s)   over the cached tokens t
 *   o_h = W_uv[h] (sum_t p_t c_t)  (batched GEMM over heads)
 * which equals the training form exactly in exact arithmetic (no rotation: NoPE). Chunked
 * prefill into a cache that holds context (clmoe_mla_extend) is in mla_extend.c. */
#include "mla_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/gemm.h"


static clmoe_status oom(const char *what)
{
  return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "MLA cache: out of host memory (%s)", what);
}

/* Grows the pool to `blocks` physical blocks, keeping the contents (one copy per doubling). */
static clmoe_status grow_pool(clmoe_mla_cache *c, int64_t blocks)
{
  clmoe_tensor bigger = {0};
  int64_t shape[3] = {blocks, CBLK, c->row};
  CLMOE_TRY(clmoe_tensor_create(c->ctx, &bigger, c->dtype, 3, shape));
  int32_t *fl = realloc(c->free_blocks, (size_t)blocks * sizeof *fl);
  if (!fl) {
    clmoe_tensor_destroy(&bigger);
    return oom("free list");
  }
  c->free_blocks = fl;
  if (c->cap_blocks > 0) {
    clmoe_tensor dst, src;
    int64_t n = c->cap_blocks * CBLK * c->row;
    clmoe_status st = clmoe_tensor_view(&bigger, &dst, 1, &n, 0);
    if (st == CLMOE_OK) st = clmoe_tensor_view(&c->store, &src, 1, &n, 0);
    if (st == CLMOE_OK) st = clmoe_tensor_copy(&dst, &src);
    if (st != CLMOE_OK) {
      clmoe_tensor_destroy(&bigger);
      return st;
    }
  }
  clmoe_tensor_destroy(&c->store);
  c->store = bigger;
  for (int64_t b = blocks - 1; b >= c->cap_blocks; b--) c->free_blocks[c->nfree++] = (int32_t)b;
  c->cap_blocks = blocks;
  return CLMOE_OK;
}

/* Widens the block table to `cols` logical blocks per sequence. */
static clmoe_status grow_table(clmoe_mla_cache *c, int64_t cols)
{
  int32_t *t = calloc((size_t)(c->nseq * cols), sizeof *t);
  if (!t) return oom("block table");
  for (int64_t s = 0; s < c->nseq; s++)
    for (int64_t b = 0; b < c->maxb; b++) t[s * cols + b] = c->table[s * c->maxb + b];
  clmoe_tensor_destroy(&c->d_table);
  int64_t shape[2] = {c->nseq, cols};
  clmoe_status st = clmoe_tensor_create(c->ctx, &c->d_table, CLMOE_I32, 2, shape);
  if (st != CLMOE_OK) {
    free(t);
    return st;
  }
  free(c->table);
  c->table = t;
  c->maxb = cols;
  c->table_dirty = 1;
  return CLMOE_OK;
}

/* Makes room for `tokens` tokens in sequence s (blocks from the pool, table widened). */
clmoe_status mla_cache_reserve(clmoe_mla_cache *c, int64_t s, int64_t tokens)
{
  const int64_t have = blocks_for(c->len[s]), need = blocks_for(tokens);
  if (need > c->maxb) {
    int64_t cols = c->maxb;
    while (cols < need) cols *= 2;
    CLMOE_TRY(grow_table(c, cols));
  }
  if (need - have > c->nfree) {
    int64_t want = c->cap_blocks * 2;
    while (want - c->cap_blocks + c->nfree < need - have) want *= 2;
    CLMOE_TRY(grow_pool(c, want));
  }
  for (int64_t b = have; b < need; b++) c->table[s * c->maxb + b] = c->free_blocks[--c->nfree];
  if (need > have) c->table_dirty = 1;
  return CLMOE_OK;
}

clmoe_status clmoe_mla_cache_create(clmoe_ctx *ctx, const clmoe_mla_config *cfg, int64_t nseq,
                                    clmoe_dtype storage, int64_t reserve_tokens, clmoe_mla_cache **out)
{
  const char *op = "clmoe_mla_cache_create";
  if (!out) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: cache is NULL", op);
  *out = NULL;
  CLMOE_TRY(clmoe_mla_config_check(cfg));
  if (nseq < 1 || nseq > (1 << 20) || reserve_tokens < 0 || reserve_tokens > ((int64_t)1 << 36))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: nseq = %lld must be in [1, 2^20] and reserve_tokens = %lld "
                        "in [0, 2^36]", op, (long long)nseq, (long long)reserve_tokens);
  if (storage != CLMOE_F32 && storage != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: storage must be f32 or bf16", op);
  clmoe_mla_cache *c = calloc(1, sizeof *c);
  if (!c) return oom("cache");
  c->ctx = ctx, c->nseq = nseq, c->dc = cfg->kv_rank, c->dr = cfg->qk_rope, c->row = c->dc + c->dr;
  c->dtype = storage;
  c->len = calloc((size_t)nseq, sizeof *c->len);
  c->table = calloc((size_t)nseq, sizeof *c->table);
  c->maxb = 1;
  clmoe_status st = CLMOE_OK;
  if (!c->len || !c->table) {
    st = oom("cache");
    goto fail;
  }
  int64_t blocks = blocks_for(reserve_tokens);
  CLMOE_TRY_GOTO(st, grow_pool(c, blocks > nseq ? blocks : nseq), fail);
  int64_t tshape[2] = {nseq, 1};
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &c->d_table, CLMOE_I32, 2, tshape), fail);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &c->d_len, CLMOE_I32, 1, &nseq), fail);
  c->table_dirty = c->len_dirty = 1;
  *out = c;
  return CLMOE_OK;
fail:
  clmoe_mla_cache_destroy(c);
  return st;
}

void clmoe_mla_cache_destroy(clmoe_mla_cache *c)
{
  if (!c) return;
  clmoe_tensor_destroy(&c->store);
  clmoe_tensor_destroy(&c->d_table);
  clmoe_tensor_destroy(&c->d_len);
  free(c->free_blocks), free(c->len), free(c->table);
  free(c);
}

int64_t clmoe_mla_cache_nseq(const clmoe_mla_cache *c) { return c ? c->nseq : 0; }

int64_t clmoe_mla_cache_length(const clmoe_mla_cache *c, int64_t seq)
{
  return c && seq >= 0 && seq < c->nseq ? c->len[seq] : -1;
}

clmoe_status clmoe_mla_cache_reset(clmoe_mla_cache *c, int64_t seq)
{
  if (!c || seq < 0 || seq >= c->nseq)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_mla_cache_reset: sequence %lld is out of range",
                        (long long)seq);
  for (int64_t b = blocks_for(c->len[seq]) - 1; b >= 0; b--) c->free_blocks[c->nfree++] = c->table[seq * c->maxb + b];
  c->len[seq] = 0;
  c->len_dirty = 1;
  return CLMOE_OK;
}

size_t clmoe_mla_cache_token_bytes(const clmoe_mla_cache *c)
{
  return c ? (size_t)c->row * clmoe_dtype_size(c->dtype) : 0;
}

size_t clmoe_mla_cache_device_bytes(const clmoe_mla_cache *c)
{
  return c ? clmoe_tensor_bytes(&c->store) + clmoe_tensor_bytes(&c->d_table) + clmoe_tensor_bytes(&c->d_len) : 0;
}

clmoe_status mla_check_cache(const char *op, const clmoe_mla_config *cfg, const clmoe_mla_cache *c)
{
  if (!c) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: cache is NULL", op);
  if (c->dc != cfg->kv_rank || c->dr != cfg->qk_rope)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: the cache holds kv_rank %lld + qk_rope %lld per token; the "
                        "configuration has %lld + %lld", op, (long long)c->dc, (long long)c->dr,
                        (long long)cfg->kv_rank, (long long)cfg->qk_rope);
  return CLMOE_OK;
}

static void decode_options(const clmoe_mla_cache *c, int hg, int bt, char *buf, size_t len)
{
  snprintf(buf, len, "-DDC=%d -DDR=%d -DCACHE_BF16=%d -DHG=%d -DBT=%d", (int)c->dc, (int)c->dr,
           c->dtype == CLMOE_BF16, hg, bt);
}

/* Heads per work-group and rows per tile of the decode kernel that fit local memory. */
static clmoe_status decode_shape(clmoe_ctx *ctx, const clmoe_mla_cache *c, int *hg, int *bt)
{
  static const int choice[3][2] = {{8, 8}, {4, 4}, {2, 2}};
  for (int i = 0; i < 3; i++) {
    int h = choice[i][0], b = choice[i][1], nsub = MLA_WG / h / b;
    size_t need = 4 * (size_t)((h + b) * (c->row + 1) + h * b * (nsub + 1));
    if (need <= ctx->caps.local_mem_bytes) {
      *hg = h, *bt = b;
      return CLMOE_OK;
    }
  }
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "MLA decode: rows of %lld numbers do not fit the device's %llu bytes "
                      "of local memory", (long long)c->row, (unsigned long long)ctx->caps.local_mem_bytes);
}

/* Uploads the block table and the lengths if the host changed them (the table changes
 * once per 64 tokens of a sequence; decode steps advance the lengths on the device). */
clmoe_status mla_cache_sync(clmoe_mla_cache *c)
{
  if (c->table_dirty)
    CLMOE_TRY(clmoe_tensor_write(&c->d_table, c->table, (size_t)(c->nseq * c->maxb) * sizeof *c->table));
  c->table_dirty = 0;
  if (!c->len_dirty) return CLMOE_OK;
  cl_int *l = malloc((size_t)c->nseq * sizeof *l);
  if (!l) return oom("lengths");
  for (int64_t n = 0; n < c->nseq; n++) l[n] = (cl_int)c->len[n];
  clmoe_status st = clmoe_tensor_write(&c->d_len, l, (size_t)c->nseq * sizeof *l);
  free(l);
  if (st == CLMOE_OK) c->len_dirty = 0;
  return st;
}

/* Writes c [M, dc] and kr [M, Dr] of M tokens to the cache: at map[i] = (sequence,
 * position), or with map NULL (a decode step, M = nseq) at the end of every sequence, whose
 * device lengths then advance by one. */
clmoe_status mla_cache_write(clmoe_ctx *ctx, clmoe_mla_cache *c, const clmoe_tensor *lat, const clmoe_tensor *kr,
                                const cl_int *map, int64_t M)
{
  if (M == 0) return CLMOE_OK;
  CLMOE_TRY(mla_cache_sync(c));
  char opts[128];
  int hg, bt;
  CLMOE_TRY(decode_shape(ctx, c, &hg, &bt));
  decode_options(c, hg, bt, opts, sizeof opts);
  cl_kernel k, kinc;
  CLMOE_TRY(clmoe__kernel(ctx, "mla+mla_decode", opts, "mla_cache_write", &k));
  CLMOE_TRY(clmoe__kernel(ctx, "mla+mla_decode", opts, "mla_lens_inc", &kinc));
  const size_t bytes = (size_t)(map ? M : 1) * 2 * sizeof(cl_int);
  cl_mem m = NULL;
  CLMOE_TRY(clmoe__scratch(ctx, bytes, &m));
  clmoe_status st = CLMOE_OK;
  if (map) CLMOE_CL_GOTO(st, clEnqueueWriteBuffer(ctx->queue, m, CL_TRUE, 0, bytes, map, 0, NULL, NULL), done);
  cl_ulong co = (cl_ulong)lat->offset, kro = (cl_ulong)kr->offset;
  cl_uint c_ts = (cl_uint)c->dc, kr_ts = (cl_uint)c->dr;
  cl_int tokens = (cl_int)M, maxb = (cl_int)c->maxb, append = map == NULL;
  CLMOE_TRY_GOTO(st, clmoe__args(k, 13, KA(lat->buf), KA(co), KA(c_ts), KA(kr->buf), KA(kro), KA(kr_ts), KA(m),
                                 KA(tokens), KA(c->d_table.buf), KA(maxb), KA(c->store.buf), KA(c->d_len.buf),
                                 KA(append)), done);
  size_t global[2] = {(size_t)c->row, (size_t)M};
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, k, 2, global, NULL), done);
  if (append) {
    CLMOE_TRY_GOTO(st, clmoe__args(kinc, 2, KA(c->d_len.buf), KA(tokens)), done);
    st = clmoe__launch1d(ctx, kinc, (size_t)M);
  }
done:
  clmoe__scratch_release(ctx, m, bytes);
  return st;
}

clmoe_status mla_cache_gather(clmoe_ctx *ctx, clmoe_mla_cache *c, const cl_int *map, int64_t keys,
                              clmoe_tensor *lat, clmoe_tensor *kr)
{
  if (keys == 0) return CLMOE_OK;
  CLMOE_TRY(mla_cache_sync(c));
  char opts[128];
  int hg, bt;
  CLMOE_TRY(decode_shape(ctx, c, &hg, &bt));
  decode_options(c, hg, bt, opts, sizeof opts);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "mla+mla_decode", opts, "mla_cache_gather", &k));
  const size_t bytes = (size_t)keys * 2 * sizeof(cl_int);
  cl_mem m = NULL;
  CLMOE_TRY(clmoe__scratch(ctx, bytes, &m));
  clmoe_status st = CLMOE_OK;
  CLMOE_CL_GOTO(st, clEnqueueWriteBuffer(ctx->queue, m, CL_TRUE, 0, bytes, map, 0, NULL, NULL), done);
  cl_int n = (cl_int)keys, maxb = (cl_int)c->maxb;
  CLMOE_TRY_GOTO(st, clmoe__args(k, 7, KA(c->store.buf), KA(c->d_table.buf), KA(maxb), KA(m), KA(n), KA(lat->buf),
                                 KA(kr->buf)), done);
  st = clmoe__launch1d(ctx, k, (size_t)c->row * (size_t)keys);
done:
  clmoe__scratch_release(ctx, m, bytes);
  return st;
}

clmoe_status clmoe_mla_prefill(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                               clmoe_mla_cache *cache, const clmoe_tensor *x, const clmoe_tensor *cu_seqlens,
                               const int32_t *slots, clmoe_tensor *y)
{
  const char *op = "clmoe_mla_prefill";
  char desc[96];
  CLMOE_TRY(mla_check_weights(op, cfg, w));
  CLMOE_TRY(mla_check_cache(op, cfg, cache));
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
  CLMOE_TRY(mla_plan_make(ctx, op, B, T, cu_seqlens, &p));
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
  CLMOE_TRY_GOTO(st, mla_layer_forward(ctx, cfg, w, &x2, &p, &y2, &s), done);
  map = malloc((size_t)(p.M ? p.M : 1) * 2 * sizeof *map);
  if (!map) {
    st = oom("token map");
    goto done;
  }
  for (int64_t n = 0; n < p.N; n++) {
    const int64_t slot = slots ? slots[n] : n, L = p.bounds[n + 1] - p.bounds[n];
    CLMOE_TRY_GOTO(st, mla_cache_reserve(cache, slot, L), done);
    for (int64_t t = 0; t < L; t++) map[2 * (p.bounds[n] + t)] = (cl_int)slot, map[2 * (p.bounds[n] + t) + 1] = (cl_int)t;
  }
  CLMOE_TRY_GOTO(st, mla_cache_write(ctx, cache, &s.c, &s.kr, map, p.M), done);
  for (int64_t n = 0; n < p.N; n++) cache->len[slots ? slots[n] : n] = p.bounds[n + 1] - p.bounds[n];
  cache->len_dirty = 1;
done:
  free(map);
  clmoe_mla_saved_release(&s);
  mla_plan_release(ctx, &p);
  return st;
}

/* oc [N, H, dc] (offset 0) = absorbed attention of qc [N, H, dc] and q_r (in q [N, H, Dqk]) over
 * the cache, for N query rows: row n reads the block-table row `table[n]` ([N, maxb] i32)
 * up to lens[n] tokens (i32 [N]); maxlen bounds lens. Splits of `split` tokens. */
static clmoe_status attend_rows(clmoe_ctx *ctx, const clmoe_mla_config *cfg, clmoe_mla_cache *c, cl_mem table,
                                int64_t tmaxb, cl_mem lens, int64_t N, int64_t maxlen, int64_t split_len,
                                const clmoe_tensor *qc, const clmoe_tensor *q, clmoe_tensor *oc)
{
  const int64_t H = cfg->n_heads, dqk = cfg->qk_nope + cfg->qk_rope;
  const int64_t nsplit = (maxlen + split_len - 1) / split_len;
  int hg, bt;
  CLMOE_TRY(decode_shape(ctx, c, &hg, &bt));
  char opts[128];
  decode_options(c, hg, bt, opts, sizeof opts);
  cl_kernel ka, kc;
  CLMOE_TRY(clmoe__kernel(ctx, "mla+mla_decode", opts, "mla_decode_attn", &ka));
  CLMOE_TRY(clmoe__kernel(ctx, "mla+mla_decode", opts, "mla_decode_combine", &kc));
  const size_t nb = (size_t)(N * H * nsplit) * sizeof(float);
  const size_t bytes[3] = {nb, nb, nb * (size_t)c->dc};
  cl_mem m[3] = {NULL, NULL, NULL};
  clmoe_status st = CLMOE_OK;
  for (int i = 0; i < 3; i++) CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, bytes[i], &m[i]), done);
  cl_ulong qco = (cl_ulong)qc->offset, qo = (cl_ulong)(q->offset + cfg->qk_nope);
  cl_uint q_ts = (cl_uint)(H * dqk), q_hs = (cl_uint)dqk;
  cl_int maxb = (cl_int)tmaxb, Hi = (cl_int)H, split = (cl_int)split_len, ns = (cl_int)nsplit;
  float sl2 = mla_scale(cfg) * 1.4426950408889634f;
  CLMOE_TRY_GOTO(st, clmoe__args(ka, 17, KA(qc->buf), KA(qco), KA(q->buf), KA(qo), KA(q_ts), KA(q_hs),
                                 KA(c->store.buf), KA(table), KA(maxb), KA(lens), KA(Hi),
                                 KA(split), KA(ns), KA(sl2), KA(m[0]), KA(m[1]), KA(m[2])), done);
  size_t global[3] = {(size_t)nsplit * MLA_WG, (size_t)((H + hg - 1) / hg), (size_t)N}, local[3] = {MLA_WG, 1, 1};
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, ka, 3, global, local), done);
  CLMOE_TRY_GOTO(st, clmoe__args(kc, 8, KA(m[0]), KA(m[1]), KA(m[2]), KA(lens), KA(Hi), KA(split), KA(ns),
                                 KA(oc->buf)), done);
  size_t gc[3] = {(size_t)c->dc, (size_t)H, (size_t)N};
  st = clmoe__launch(ctx, kc, 3, gc, NULL);
done:
  for (int i = 0; i < 3; i++) clmoe__scratch_release(ctx, m[i], bytes[i]);
  return st;
}

/* The decode step's attention: one row per cache sequence over its whole cache. */
static clmoe_status decode_attend(clmoe_ctx *ctx, const clmoe_mla_config *cfg, clmoe_mla_cache *c,
                                  const clmoe_tensor *qc, const clmoe_tensor *q, clmoe_tensor *oc)
{
  int64_t maxlen = 0;
  for (int64_t n = 0; n < c->nseq; n++) maxlen = c->len[n] > maxlen ? c->len[n] : maxlen;
  return attend_rows(ctx, cfg, c, c->d_table.buf, c->maxb, c->d_len.buf, c->nseq, maxlen, MLA_DECODE_SPLIT, qc, q,
                     oc);
}

/* The absorbed attention and output of M new tokens whose c and k_r are already cached and
 * whose projections are in s: y [M, d]. rows NULL: a decode step (one row per sequence). */
clmoe_status mla_absorbed(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                          clmoe_mla_cache *c, clmoe_mla_saved *s, int64_t N, const mla_extend_rows *rows,
                          clmoe_tensor *y)
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
  mla_strided_view(&s->q, 0, H, N, dn, dqk, H * dqk, &A);
  mla_strided_view(&w->w_ukv, 0, H, dn, dc, dkv * dc, dc, &Bm);
  mla_strided_view(&qc, 0, H, N, dc, dc, H * dc, &C);
  CLMOE_TRY_GOTO(st, clmoe_gemm_batched(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &Bm, 0.0f, &C), done);
  if (rows) CLMOE_TRY_GOTO(st, mla_extend_attend(ctx, cfg, c, rows, &qc, &s->q, &oc), done);
  else CLMOE_TRY_GOTO(st, decode_attend(ctx, cfg, c, &qc, &s->q, &oc), done);
  /* o[h] = oc[h] W_uv[h]^T: [N, dc] x [dc, Dv] per head */
  mla_strided_view(&oc, 0, H, N, dc, dc, H * dc, &A);
  mla_strided_view(&w->w_ukv, dn * dc, H, dv, dc, dkv * dc, dc, &Bm);
  mla_strided_view(&o, 0, H, N, dv, dv, H * dv, &C);
  CLMOE_TRY_GOTO(st, clmoe_gemm_batched(ctx, CLMOE_NOTRANS, CLMOE_TRANS, 1.0f, &A, &Bm, 0.0f, &C), done);
  clmoe_tensor o2;
  int64_t so[2] = {N, H * dv};
  CLMOE_TRY_GOTO(st, clmoe_tensor_view(&o, &o2, 2, so, 0), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &s->u, CLMOE_F32, 2, so), done);
  st = mla_output(ctx, w, &s->gate, &o2, &s->u, y);
done:
  clmoe_tensor_destroy(&qc), clmoe_tensor_destroy(&oc), clmoe_tensor_destroy(&o);
  return st;
}

clmoe_status clmoe_mla_decode_step(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                                   clmoe_mla_cache *c, const clmoe_tensor *x, clmoe_tensor *y)
{
  const char *op = "clmoe_mla_decode_step";
  CLMOE_TRY(mla_check_weights(op, cfg, w));
  CLMOE_TRY(mla_check_cache(op, cfg, c));
  const int64_t N = c->nseq;
  CLMOE_TRY(clmoe__want_shape(x, op, "x", 0, 2, N, cfg->d_model, 0, 0));
  CLMOE_TRY(clmoe__want_shape(y, op, "y", 0, 2, N, cfg->d_model, 0, 0));
  clmoe_mla_saved s;
  memset(&s, 0, sizeof s);
  clmoe_status st = CLMOE_OK;
  /* Projections of the new tokens, then their c and k_r appended to the cache (positions
   * and lengths on the device: no upload unless a block was added). */
  CLMOE_TRY_GOTO(st, mla_project(ctx, cfg, w, x, &s, 0), done);
  for (int64_t n = 0; n < N; n++) CLMOE_TRY_GOTO(st, mla_cache_reserve(c, n, c->len[n] + 1), done);
  CLMOE_TRY_GOTO(st, mla_cache_write(ctx, c, &s.c, &s.kr, NULL, N), done);
  for (int64_t n = 0; n < N; n++) c->len[n]++;
  st = mla_absorbed(ctx, cfg, w, c, &s, N, NULL, y);
done:
  clmoe_mla_saved_release(&s);
  return st;
}
