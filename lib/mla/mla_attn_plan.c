/* MLA attention plan: the sequences of a [B, T] batch (or cu_seqlens) and the int4 tile
 * tables the attention kernels walk (kernels_cl/mla/mla.cl), shared by the portable kernels
 * (mla_attn.c) and the tile kernels (mla_tile.c). */
#include "mla_internal.h"

#include <stdlib.h>
#include <string.h>

clmoe_status clmoe__mla_plan_make(clmoe_ctx *ctx, const char *op, int64_t B, int64_t T,
                                  const clmoe_tensor *cu, mla_plan *p)
{
  (void)ctx;
  memset(p, 0, sizeof *p);
  p->B = B, p->T = T, p->M = B * T;
  if (p->M > INT32_MAX / 2)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %lld tokens exceed 2^30", op, (long long)p->M);
  CLMOE_TRY(clmoe__seq_bounds(op, cu, B, T, &p->N, &p->bounds));
  for (int64_t n = 0; n < p->N; n++)
    if (p->bounds[n + 1] - p->bounds[n] > p->max_len) p->max_len = p->bounds[n + 1] - p->bounds[n];
  return CLMOE_OK;
}

void clmoe__mla_plan_release(clmoe_ctx *ctx, mla_plan *p)
{
  clmoe__scratch_release(ctx, p->fwd_tiles, p->fwd_bytes);
  clmoe__scratch_release(ctx, p->bwd_tiles, p->bwd_bytes);
  free(p->bounds);
  memset(p, 0, sizeof *p);
}

/* int4 tiles of `rows` rows over every sequence (see kernels_cl/mla/mla.cl); forward tiles
 * (fwd) have no query shift. */
clmoe_status clmoe__mla_build_tiles(clmoe_ctx *ctx, const mla_plan *p, int rows, int fwd,
                                    cl_mem *mem, size_t *bytes, int *count)
{
  int64_t n = 0;
  for (int64_t s = 0; s < p->N; s++) n += (p->bounds[s + 1] - p->bounds[s] + rows - 1) / rows;
  *count = (int)n;
  *bytes = (size_t)(n ? n : 1) * 4 * sizeof(cl_int);
  cl_int *t = malloc(*bytes);
  if (!t) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "MLA: out of host memory (tile table)");
  int64_t i = 0;
  for (int64_t s = 0; s < p->N; s++)
    for (cl_int t0 = p->bounds[s]; t0 < p->bounds[s + 1]; t0 += rows, i++) {
      t[4 * i] = p->bounds[s];
      t[4 * i + 1] = t0;
      t[4 * i + 2] = p->bounds[s + 1] - t0 < rows ? p->bounds[s + 1] - t0 : rows;
      t[4 * i + 3] = fwd ? 0 : p->bounds[s + 1];
    }
  clmoe_status st = clmoe__scratch(ctx, *bytes, mem);
  if (st == CLMOE_OK && n) {
    st = clmoe__write_staged(ctx, *mem, 0, (size_t)n * 4 * sizeof(cl_int), t);
    if (st != CLMOE_OK) {
      clmoe__scratch_release(ctx, *mem, *bytes);
      *mem = NULL;
    }
  }
  free(t);
  return st;
}

clmoe_status clmoe__mla_plan_fwd_tiles(clmoe_ctx *ctx, mla_plan *p, int rows)
{
  if (p->fwd_tiles && p->fq == rows) return CLMOE_OK;
  clmoe__scratch_release(ctx, p->fwd_tiles, p->fwd_bytes);
  p->fwd_tiles = NULL;
  CLMOE_TRY(clmoe__mla_build_tiles(ctx, p, rows, 1, &p->fwd_tiles, &p->fwd_bytes, &p->nfwd));
  p->fq = rows;
  return CLMOE_OK;
}
