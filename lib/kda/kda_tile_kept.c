/* The factors a KDA tile forward keeps for the tile backward (paths.h's clmoe_kda_tile_saved),
 * in one place: the layout and byte sizes of what is kept (the backward's per-(chunk, head)
 * block, U^T, the states entering each chunk, Vnew), whether a forward keeps them
 * (CLMOE_KDA_KEEP_MAX_MB) and into which buffers, whether a backward's plan matches them, and
 * the KDA layer's holder of them (clmoe__kda_kept_*). */
#include "kda_internal.h"

#include <stdlib.h>
#include <string.h>

void clmoe__kda_tile_kept_sizes(size_t nch, int64_t K, int64_t V, size_t sizes[4])
{
  const size_t k = (size_t)K, v = (size_t)V, hf = sizeof(cl_ushort), C = KDA_CHUNK;
  sizes[0] = nch * KDA_TILE_BWD_BLOCK(k) * hf; /* the backward's blocks (kda_common.cl) */
  sizes[1] = nch * C * v * sizeof(float); /* U^T */
  sizes[2] = nch * v * k * hf;            /* S_c^T */
  sizes[3] = nch * v * C * hf;            /* Vnew^T */
}

size_t clmoe_kda_tile_kept_bytes(int64_t K, int64_t V)
{
  if (K < 16 || V < 16 || K % 16 || V % 16 || K > 128 || V > 128) return 0;
  size_t sz[4];
  clmoe__kda_tile_kept_sizes(1, K, V, sz);
  return sz[0] + sz[1] + sz[2] + sz[3];
}

int clmoe__kda_tile_kept_matches(const clmoe_kda_tile_saved *saved, const kda_plan *p)
{
  size_t ks[4];
  clmoe__kda_tile_kept_sizes((size_t)p->nchunks * (size_t)p->H, p->K, p->V, ks);
  return saved && saved->nchunks == p->nchunks && saved->H == p->H && saved->K == p->K &&
         saved->V == p->V && saved->blocks_bytes == ks[0] && saved->ut_bytes == ks[1] &&
         saved->states_bytes == ks[2] && saved->vnew_bytes == ks[3];
}

void clmoe_kda_tile_saved_release(clmoe_ctx *ctx, clmoe_kda_tile_saved *s)
{
  if (!s) return;
  clmoe__scratch_release(ctx, s->blocks, s->blocks_bytes);
  clmoe__scratch_release(ctx, s->ut, s->ut_bytes);
  clmoe__scratch_release(ctx, s->states, s->states_bytes);
  clmoe__scratch_release(ctx, s->vnew, s->vnew_bytes);
  memset(s, 0, sizeof *s);
}

/* saved's buffers at the plan's sizes (kept when they already are), marked empty. */
static clmoe_status saved_fit(clmoe_ctx *ctx, const kda_plan *p, clmoe_kda_tile_saved *s)
{
  size_t sz[4];
  clmoe__kda_tile_kept_sizes((size_t)p->nchunks * (size_t)p->H, p->K, p->V, sz);
  if (s->blocks_bytes != sz[0] || s->ut_bytes != sz[1] || s->states_bytes != sz[2] || s->vnew_bytes != sz[3]) {
    clmoe_kda_tile_saved_release(ctx, s);
    cl_mem *mem[4] = {&s->blocks, &s->ut, &s->states, &s->vnew};
    size_t *bytes[4] = {&s->blocks_bytes, &s->ut_bytes, &s->states_bytes, &s->vnew_bytes};
    for (int i = 0; i < 4; i++) {
      CLMOE_TRY(clmoe__scratch(ctx, sz[i], mem[i]));
      *bytes[i] = sz[i];
    }
  }
  s->nchunks = 0;
  return CLMOE_OK;
}

/* Whether the forward keeps the factors for the backward (*save): only within
 * CLMOE_KDA_KEEP_MAX_MB (MiB, the context's knob; unset: no cap) and where their buffers can
 * be had; otherwise saved is emptied and the backward recomputes them (keeping is only a
 * shortcut, never a reason for the forward to fail). */
clmoe_status clmoe__kda_tile_keep_or_not(clmoe_ctx *ctx, const kda_plan *p, clmoe_kda_tile_saved *s,
                                         int *save)
{
  *save = 0;
  if (clmoe__knob_is_set(ctx, CLMOE_K_KDA_KEEP_MAX_MB)) { /* a number of MiB >= 0 (knobs.c) */
    const double mb = clmoe__knob(ctx, CLMOE_K_KDA_KEEP_MAX_MB)->r;
    const double need =
        (double)p->nchunks * (double)p->H * (double)clmoe_kda_tile_kept_bytes(p->K, p->V);
    if (need > mb * 1048576.0) {
      clmoe_kda_tile_saved_release(ctx, s);
      return CLMOE_OK;
    }
  }
  if (saved_fit(ctx, p, s) != CLMOE_OK) {
    clmoe_kda_tile_saved_release(ctx, s);
    return CLMOE_OK;
  }
  *save = 1;
  return CLMOE_OK;
}

/* The KDA layer's holder of kept factors (include/clmoe/kda_layer.h's opaque type). */
struct clmoe_kda_kept {
  clmoe_ctx *ctx;
  clmoe_kda_tile_saved s;
};

struct clmoe_kda_kept *clmoe__kda_kept_new(clmoe_ctx *ctx)
{
  if (!clmoe__knob_int(ctx, CLMOE_K_KDA_KEEP)) return NULL;
  struct clmoe_kda_kept *k = calloc(1, sizeof *k);
  if (k) k->ctx = ctx;
  return k;
}

clmoe_kda_tile_saved *clmoe__kda_kept_saved(struct clmoe_kda_kept *kept)
{
  return kept ? &kept->s : NULL;
}

void clmoe__kda_kept_free(struct clmoe_kda_kept *kept)
{
  if (!kept) return;
  clmoe_kda_tile_saved_release(kept->ctx, &kept->s);
  free(kept);
}
