/* MLA paged latent cache: per token the latent c and k_r (dc + Dr numbers, f32 or bf16) in
 * blocks of CLMOE_MLA_CACHE_BLOCK tokens from a pool that grows by doubling, a block table
 * per sequence, and the kernels that write and gather its rows (kernels_cl/mla/mla_decode.cl).
 * Used by prefill and the decode step (mla_decode.c), extend (mla_extend.c,
 * mla_extend_flash.c) and the absorbed attention (mla_absorbed.c). */
#include "mla_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int64_t blocks_for(int64_t tokens) { return (tokens + CBLK - 1) / CBLK; }

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
clmoe_status clmoe__mla_cache_reserve(clmoe_mla_cache *c, int64_t s, int64_t tokens)
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

clmoe_status clmoe__mla_check_cache(const char *op, const clmoe_mla_config *cfg,
                                    const clmoe_mla_cache *c)
{
  if (!c) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: cache is NULL", op);
  if (c->dc != cfg->kv_rank || c->dr != cfg->qk_rope)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: the cache holds kv_rank %lld + qk_rope %lld per token; the "
                        "configuration has %lld + %lld", op, (long long)c->dc, (long long)c->dr,
                        (long long)cfg->kv_rank, (long long)cfg->qk_rope);
  return CLMOE_OK;
}

void clmoe__mla_decode_options(const clmoe_mla_cache *c, int hg, int bt, char *buf, size_t len)
{
  snprintf(buf, len, "-DDC=%d -DDR=%d -DCACHE_BF16=%d -DHG=%d -DBT=%d", (int)c->dc, (int)c->dr,
           c->dtype == CLMOE_BF16, hg, bt);
}

/* Heads per work-group and rows per tile of the decode kernel that fit local memory. */
clmoe_status clmoe__mla_decode_shape(clmoe_ctx *ctx, const clmoe_mla_cache *c, int *hg, int *bt)
{
  static const int choice[3][2] = {{8, 8}, {4, 4}, {2, 2}};
  for (int i = 0; i < 3; i++) {
    const int h = choice[i][0], b = choice[i][1];
    const size_t need = MLA_DECODE_LOCAL_BYTES((size_t)c->row, (size_t)h, (size_t)b);
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
clmoe_status clmoe__mla_cache_sync(clmoe_mla_cache *c)
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

/* The cache's kernel `name` (built for its decode shape), after the table and lengths are
 * on the device. */
static clmoe_status cache_kernel(clmoe_ctx *ctx, clmoe_mla_cache *c, const char *name, cl_kernel *k)
{
  CLMOE_TRY(clmoe__mla_cache_sync(c));
  char opts[128];
  int hg, bt;
  CLMOE_TRY(clmoe__mla_decode_shape(ctx, c, &hg, &bt));
  clmoe__mla_decode_options(c, hg, bt, opts, sizeof opts);
  return clmoe__kernel(ctx, "mla_layout+mla+mla_decode", opts, name, k);
}

clmoe_status clmoe__mla_cache_append_norm(clmoe_ctx *ctx, clmoe_mla_cache *c, const clmoe_tensor *lat,
                                          const clmoe_tensor *gain, float eps, const clmoe_tensor *kr)
{
  cl_kernel k;
  CLMOE_TRY(cache_kernel(ctx, c, "mla_cache_append_norm", &k));
  cl_ulong co = (cl_ulong)lat->offset, go = (cl_ulong)gain->offset, kro = (cl_ulong)kr->offset;
  cl_uint c_ts = (cl_uint)c->dc, kr_ts = (cl_uint)c->dr;
  cl_int maxb = (cl_int)c->maxb;
  cl_float feps = eps;
  CLMOE_TRY(clmoe__args(k, 13, KA(lat->buf), KA(co), KA(c_ts), KA(gain->buf), KA(go), KA(feps), KA(kr->buf), KA(kro),
                        KA(kr_ts), KA(c->d_table.buf), KA(maxb), KA(c->store.buf), KA(c->d_len.buf)));
  size_t local[1] = {MLA_APPEND_WG}, global[1] = {(size_t)c->nseq * MLA_APPEND_WG};
  return clmoe__launch(ctx, k, 1, global, local);
}

/* Writes c [M, dc] and kr [M, Dr] of M tokens to the cache: at map[i] = (sequence,
 * position), or with map NULL (a decode step, M = nseq) at the end of every sequence, whose
 * device lengths then advance by one. */
clmoe_status clmoe__mla_cache_write(clmoe_ctx *ctx, clmoe_mla_cache *c, const clmoe_tensor *lat,
                                    const clmoe_tensor *kr, const cl_int *map, int64_t M)
{
  if (M == 0) return CLMOE_OK;
  cl_kernel k, kinc;
  CLMOE_TRY(cache_kernel(ctx, c, "mla_cache_write", &k));
  CLMOE_TRY(cache_kernel(ctx, c, "mla_lens_inc", &kinc));
  const size_t bytes = (size_t)(map ? M : 1) * 2 * sizeof(cl_int);
  cl_mem m = NULL;
  CLMOE_TRY(clmoe__scratch(ctx, bytes, &m));
  clmoe_status st = CLMOE_OK;
  if (map) CLMOE_TRY_GOTO(st, clmoe__write_staged(ctx, m, 0, bytes, map), done);
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

clmoe_status clmoe__mla_cache_gather(clmoe_ctx *ctx, clmoe_mla_cache *c, const cl_int *map,
                                     int64_t keys, clmoe_tensor *lat, clmoe_tensor *kr)
{
  if (keys == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(cache_kernel(ctx, c, "mla_cache_gather", &k));
  const size_t bytes = (size_t)keys * 2 * sizeof(cl_int);
  cl_mem m = NULL;
  CLMOE_TRY(clmoe__scratch(ctx, bytes, &m));
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY_GOTO(st, clmoe__write_staged(ctx, m, 0, bytes, map), done);
  cl_int n = (cl_int)keys, maxb = (cl_int)c->maxb;
  CLMOE_TRY_GOTO(st, clmoe__args(k, 7, KA(c->store.buf), KA(c->d_table.buf), KA(maxb), KA(m), KA(n), KA(lat->buf),
                                 KA(kr->buf)), done);
  st = clmoe__launch1d(ctx, k, (size_t)c->row * (size_t)keys);
done:
  clmoe__scratch_release(ctx, m, bytes);
  return st;
}
