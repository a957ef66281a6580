/* MLA decoding: prefill (training-form forward + one cache write for the whole prompt
 * batch) and the absorbed decode step (projections, one cache append, then the absorbed
 * attention and output of mla_absorbed.c). The cache is in mla_cache.c; chunked prefill
 * into a cache that holds context (clmoe_mla_extend) is in mla_extend.c. */
#include "mla_internal.h"

#include <stdlib.h>
#include <string.h>

clmoe_status clmoe_mla_prefill(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                               clmoe_mla_cache *cache, const clmoe_tensor *x, const clmoe_tensor *cu_seqlens,
                               const int32_t *slots, clmoe_tensor *y)
{
  const char *op = "clmoe_mla_prefill";
  char desc[96];
  CLMOE_TRY(clmoe__mla_check_weights(op, cfg, w));
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

clmoe_status clmoe_mla_decode_step(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                                   clmoe_mla_cache *c, const clmoe_tensor *x, clmoe_tensor *y)
{
  const char *op = "clmoe_mla_decode_step";
  CLMOE_TRY(clmoe__mla_check_weights(op, cfg, w));
  CLMOE_TRY(clmoe__mla_check_cache(op, cfg, c));
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
