/* The expert-parallel MoE layer's parts on a rank (include/clmoe/moe_ep.h): the local expert
 * tables from the expert map, the rank's tensors (the dense ones whole, the local experts'
 * rows of the [E, ...] stacks) made, initialised with the whole layer's streams, or copied
 * from a whole layer. The forward is moe_ep.c, the backward moe_ep_backward.c. */
#include "clmoe/moe_ep.h"

#include <stdlib.h>
#include <string.h>

#include "moe_internal.h"

/* ---- building a rank's part -------------------------------------------------------------- */

/* Expert `e` of a [E, a, b] tensor into slot i of a [n, a, b] tensor. */
static clmoe_status copy_expert(const clmoe_tensor *src, int64_t e, clmoe_tensor *dst, int64_t i)
{
  const int64_t shape[2] = {src->shape[1], src->shape[2]}, n = shape[0] * shape[1];
  clmoe_tensor s, d;
  CLMOE_TRY(clmoe_tensor_view(src, &s, 2, shape, e * n));
  CLMOE_TRY(clmoe_tensor_view(dst, &d, 2, shape, i * n));
  return clmoe_tensor_copy(&d, &s);
}

/* The local expert tables from the map's row of `rank`. */
static clmoe_status local_tables(const clmoe_expert_map *map, int rank, clmoe_moe_ep_layer *ep)
{
  const int E = map->experts;
  ep->local_index = malloc((size_t)E * sizeof *ep->local_index);
  ep->local_expert = malloc((size_t)(map->slots > 0 ? map->slots : 1) * sizeof *ep->local_expert);
  if (!ep->local_index || !ep->local_expert)
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_moe_ep_layer_from_full: expert tables");
  for (int e = 0; e < E; e++) ep->local_index[e] = -1;
  ep->n_local = 0;
  for (int s = 0; s < map->slots; s++) {
    const int32_t e = map->slot_expert[(size_t)rank * (size_t)map->slots + (size_t)s];
    if (e < 0) continue;
    if (e >= E || ep->local_index[e] >= 0)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "the expert map puts "
                          "expert %d twice (or out of range) on rank %d", (int)e, rank);
    ep->local_index[e] = (int32_t)ep->n_local;
    ep->local_expert[ep->n_local++] = e;
  }
  return CLMOE_OK;
}

/* The rank's tensors for config c: the dense ones whole, the local experts [n_local, ...];
 * copied from `full` when given, else left for clmoe_moe_ep_layer_init. The weight matrices
 * (router, W_down, W_up, the shared and the local experts) are made as `mat`. */
static clmoe_status build(clmoe_ctx *ctx, const clmoe_moe_config *c, const clmoe_moe_layer *full, clmoe_dtype mat,
                          clmoe_moe_ep_layer *ep)
{
  clmoe_moe_layer *D = &ep->dense, *X = &ep->experts;
  const int64_t E = c->n_experts, d = c->d, l = clmoe__moe_width(c), f = c->expert_ff;
  const int64_t S = c->n_shared * c->shared_ff;
  D->cfg = *c;
  D->shared.glu = c->glu;
  CLMOE_TRY(clmoe__moe_new2(ctx, &D->w_router, mat, E, d));
  if (c->latent > 0) { /* latent 0: no W_down, latent norm or W_up */
    CLMOE_TRY(clmoe__moe_new2(ctx, &D->w_down, mat, l, d));
    CLMOE_TRY(clmoe_tensor_create(ctx, &D->norm_gain, CLMOE_F32, 1, &l));
    CLMOE_TRY(clmoe__moe_new2(ctx, &D->w_up, mat, d, l));
  }
  CLMOE_TRY(clmoe_tensor_zeros(ctx, &D->bias, CLMOE_F32, 1, &E));
  if (S) {
    CLMOE_TRY(clmoe__moe_new2(ctx, &D->shared.w_gate, mat, S, d));
    CLMOE_TRY(clmoe__moe_new2(ctx, &D->shared.w_upp, mat, S, d));
    CLMOE_TRY(clmoe__moe_new2(ctx, &D->shared.w_dn, mat, d, S));
  }
  if (full) {
    const clmoe_tensor *src[8] = {&full->w_router, &full->w_down, &full->norm_gain, &full->w_up,
                                  &full->bias, &full->shared.w_gate, &full->shared.w_upp, &full->shared.w_dn};
    clmoe_tensor *dst[8] = {&D->w_router, &D->w_down, &D->norm_gain, &D->w_up,
                            &D->bias, &D->shared.w_gate, &D->shared.w_upp, &D->shared.w_dn};
    for (int i = 0; i < 8; i++)
      if (src[i]->buf && dst[i]->buf) CLMOE_TRY(clmoe_tensor_copy(dst[i], src[i]));
  }
  X->cfg = *c;
  X->cfg.n_experts = ep->n_local;
  if (ep->n_local == 0) return CLMOE_OK;
  CLMOE_TRY(clmoe_tensor_create(ctx, &X->w_gate, mat, 3, (int64_t[]){ep->n_local, f, l}));
  CLMOE_TRY(clmoe_tensor_create(ctx, &X->w_upp, mat, 3, (int64_t[]){ep->n_local, f, l}));
  CLMOE_TRY(clmoe_tensor_create(ctx, &X->w_dn, mat, 3, (int64_t[]){ep->n_local, l, f}));
  for (int64_t i = 0; full && i < ep->n_local; i++) {
    const int64_t e = ep->local_expert[i];
    CLMOE_TRY(copy_expert(&full->w_gate, e, &X->w_gate, i));
    CLMOE_TRY(copy_expert(&full->w_upp, e, &X->w_upp, i));
    CLMOE_TRY(copy_expert(&full->w_dn, e, &X->w_dn, i));
  }
  return CLMOE_OK;
}

static clmoe_status check_map(const char *op, const clmoe_moe_config *c, const clmoe_expert_map *map, int rank)
{
  if (!map || map->experts != c->n_experts)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the map has %d experts, the layer %lld", op,
                        map ? map->experts : 0, (long long)c->n_experts);
  if (rank < 0 || rank >= map->ranks)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: rank %d is not one of the map's %d", op, rank,
                        map->ranks);
  return CLMOE_OK;
}

clmoe_status clmoe_moe_ep_layer_create(clmoe_ctx *ctx, const clmoe_moe_config *cfg,
                                       const clmoe_expert_map *map, int rank, clmoe_moe_ep_layer *ep)
{
  return clmoe__moe_ep_layer_create_dtype(ctx, cfg, map, rank, CLMOE_F32, ep);
}

clmoe_status clmoe__moe_ep_layer_create_dtype(clmoe_ctx *ctx, const clmoe_moe_config *cfg,
                                             const clmoe_expert_map *map, int rank, clmoe_dtype matrices,
                                             clmoe_moe_ep_layer *ep)
{
  static const char op[] = "clmoe_moe_ep_layer_create";
  if (!ep) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: ep is NULL", op);
  memset(ep, 0, sizeof *ep);
  if (!cfg) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: cfg is NULL", op);
  if (matrices != CLMOE_F32 && matrices != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: matrices must be fp32 or bf16", op);
  CLMOE_TRY(check_map(op, cfg, map, rank));
  CLMOE_TRY(clmoe__moe_config_check(op, cfg, &ep->cfg));
  ep->map = map;
  ep->rank = rank;
  clmoe_status st;
  CLMOE_TRY_GOTO(st, local_tables(map, rank, ep), fail);
  CLMOE_TRY_GOTO(st, build(ctx, &ep->cfg, NULL, matrices, ep), fail);
  return CLMOE_OK;
fail:
  clmoe_moe_ep_layer_destroy(ep);
  return st;
}

/* The values clmoe_moe_layer_init gives the whole layer (the same streams: seed 16 s + i for
 * tensor i of its list), each local expert taking its rows' elements of the stream. */
clmoe_status clmoe_moe_ep_layer_init(clmoe_moe_ep_layer *ep, uint64_t seed, float stddev)
{
  clmoe_moe_layer *D = &ep->dense, *X = &ep->experts;
  clmoe_tensor *dense[10] = {&D->w_router, &D->w_down, NULL, NULL, NULL, &D->norm_gain, &D->w_up,
                             &D->shared.w_gate, &D->shared.w_upp, &D->shared.w_dn};
  clmoe_tensor *expert[10] = {NULL, NULL, &X->w_gate, &X->w_upp, &X->w_dn};
  for (int i = 0; i < 10; i++) {
    if (dense[i] && dense[i]->buf) {
      if (i == 5) CLMOE_TRY(clmoe_tensor_fill(dense[i], 1.0));
      else CLMOE_TRY(clmoe_tensor_fill_normal(dense[i], seed * 16 + (uint64_t)i, 0.0f, stddev));
    }
    if (!expert[i] || !expert[i]->buf) continue;
    const int64_t shape[2] = {expert[i]->shape[1], expert[i]->shape[2]}, n = shape[0] * shape[1];
    for (int64_t j = 0; j < ep->n_local; j++) {
      clmoe_tensor row;
      CLMOE_TRY(clmoe_tensor_view(expert[i], &row, 2, shape, j * n));
      CLMOE_TRY(clmoe_tensor_fill_normal_at(&row, seed * 16 + (uint64_t)i, (uint64_t)ep->local_expert[j] * (uint64_t)n,
                                            0.0f, stddev));
    }
  }
  return clmoe_tensor_fill(&D->bias, 0.0);
}

clmoe_status clmoe_moe_ep_layer_from_full(clmoe_ctx *ctx, const clmoe_moe_layer *full,
                                          const clmoe_expert_map *map, int rank,
                                          clmoe_moe_ep_layer *ep)
{
  static const char op[] = "clmoe_moe_ep_layer_from_full";
  if (!ep) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: ep is NULL", op);
  memset(ep, 0, sizeof *ep);
  if (!full || !full->w_router.buf || !full->w_gate.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the whole layer is not created", op);
  CLMOE_TRY(check_map(op, &full->cfg, map, rank));
  ep->cfg = full->cfg;
  ep->map = map;
  ep->rank = rank;
  clmoe_status st;
  CLMOE_TRY_GOTO(st, local_tables(map, rank, ep), fail);
  CLMOE_TRY_GOTO(st, build(ctx, &full->cfg, full, full->w_router.dtype == CLMOE_BF16 ? CLMOE_BF16 : CLMOE_F32, ep), fail);
  return CLMOE_OK;
fail:
  clmoe_moe_ep_layer_destroy(ep);
  return st;
}

void clmoe_moe_ep_layer_destroy(clmoe_moe_ep_layer *ep)
{
  if (!ep) return;
  clmoe_moe_layer_destroy(&ep->dense);
  clmoe_moe_layer_destroy(&ep->experts);
  free(ep->local_expert);
  free(ep->local_index);
  memset(ep, 0, sizeof *ep);
}
