/* MLA chunked prefill ("extend"): new tokens of sequences whose latent cache already holds
 * a prefix. The tokens' c and k_r are appended to the cache, then every (token, head) query
 * row attends in absorbed form to the cached prefix and the chunk's tokens causally
 * (mla_absorbed.c). The first half (checks, projections, cache append:
 * clmoe__mla_extend_append) is shared with the training form (mla_extend_flash.c). */
#include "mla_internal.h"

#include <stdlib.h>
#include <string.h>

clmoe_status clmoe__mla_extend_append(clmoe_ctx *ctx, const char *op, const clmoe_mla_config *cfg,
                                      const clmoe_mla_weights *w, clmoe_mla_cache *c,
                                      const clmoe_tensor *x, const int64_t *counts,
                                      const clmoe_tensor *y, clmoe_mla_saved *s, cl_int **pos,
                                      int64_t *M)
{
  *pos = NULL, *M = 0;
  CLMOE_TRY(clmoe__mla_check_absorbed_weights(op, cfg, w));
  CLMOE_TRY(clmoe__mla_check_cache(op, cfg, c));
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
  CLMOE_TRY_GOTO(st, clmoe__mla_project(ctx, cfg, w, x, s, 0), done);
  for (int64_t n = 0, i = 0; n < c->nseq; n++) {
    CLMOE_TRY_GOTO(st, clmoe__mla_cache_reserve(c, n, c->len[n] + counts[n]), done);
    for (int64_t t = 0; t < counts[n]; t++, i++) {
      p[i] = (cl_int)(c->len[n] + t);
      map[2 * i] = (cl_int)n, map[2 * i + 1] = p[i];
    }
  }
  CLMOE_TRY_GOTO(st, clmoe__mla_cache_write(ctx, c, &s->c, &s->kr, map, m), done);
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
  CLMOE_TRY(clmoe__mla_extend_append(ctx, "clmoe_mla_extend", cfg, w, c, x, counts, y, &s, &pos, &M));
  if (M == 0) return CLMOE_OK;
  const mla_extend_rows rows = {counts, pos, M};
  clmoe_status st = clmoe__mla_absorbed(ctx, cfg, w, c, &s, M, &rows, y);
  free(pos);
  clmoe_mla_saved_release(&s);
  return st;
}
