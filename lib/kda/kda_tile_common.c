/* What the KDA tile forward (kda_tile_fwd.c) and backward (kda_tile_bwd.c) share: the launch
 * of the tile prep (kernel kda_tile_prep of kernels_cl/kda/kda_tile.cl), whether the state
 * passes stage their saved rows for stmatrix, and how they spread their warps over the
 * device. (The kernels' local memory: kernels_cl/kda/kda_common.cl's layouts.) */
#include "kda_internal.h"

#include <stdlib.h>
#include <string.h>

#include "tile/tile_internal.h"

int clmoe__kda_tile_stsm(clmoe_ctx *ctx)
{
  if (!clmoe__knob_int(ctx, CLMOE_K_KDA_TC_STSM)) return 0;
  return clmoe__tile_features(ctx)->matrix_store;
}

int clmoe__kda_tile_spread_warps(clmoe_ctx *ctx, const kda_plan *p, int most)
{
  const size_t units = clmoe_ctx_caps(ctx)->compute_units, cols = (size_t)(p->V / 16) * (size_t)p->H * (size_t)p->N;
  int warps = 1;
  while (warps < most && cols / (size_t)warps > units) warps *= 2;
  return warps;
}

/* kda_tile_prep (kernel kp, from a kda_tile.cl build) on every (chunk, head) of the plan:
 * the blocks into blk and U into U (their layouts: the build's). */
clmoe_status clmoe__kda_tile_prep_launch(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                         cl_kernel kp, cl_mem blk, cl_mem U, cl_mem bb)
{
  if (p->nchunks == 0) return CLMOE_OK;
  cl_ulong qo = (cl_ulong)in->q->offset, ko = (cl_ulong)in->k->offset, vo = (cl_ulong)in->v->offset;
  cl_ulong zo = (cl_ulong)in->g->offset, bo = (cl_ulong)in->beta->offset;
  cl_ulong ao = (cl_ulong)in->A_log->offset, dto = (cl_ulong)in->dt_bias->offset;
  cl_int H = (cl_int)p->H;
  float scale = p->scale, lb = p->lb;
  CLMOE_TRY(clmoe__args(kp, 21, KA(in->q->buf), KA(qo), KA(in->k->buf), KA(ko), KA(in->v->buf), KA(vo),
                        KA(in->g->buf), KA(zo), KA(in->beta->buf), KA(bo), KA(in->A_log->buf), KA(ao),
                        KA(in->dt_bias->buf), KA(dto), KA(p->chunks), KA(H), KA(scale), KA(lb), KA(blk),
                        KA(U), KA(bb)));
  size_t global[2] = {(size_t)p->nchunks * KDA_TILE_PREP_WG, (size_t)p->H};
  size_t local[2] = {KDA_TILE_PREP_WG, 1};
  return clmoe__launch(ctx, kp, 2, global, local);
}
