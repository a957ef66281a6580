/* The routed experts of a bf16 training step on the tile interface: the grouped GEMMs of
 * moe_experts.c (gate/up with the gated unit fused, down, the down product's backward with
 * the unit's gradient fused, the input gradient, the per-expert weight gradients) over the
 * dispatch's row tiles and offsets, with the layer's expert weights as bf16 copies [E, ...]
 * (clmoe_model_set_precision) and the fp32 activations rounded to bf16 as the kernels stage
 * them; fp32 accumulation, fp32 results. Kernels: kernels_cl/moe/moe_gemm_tile.cl. */
#include "moe_internal.h"

/* Row-tile kernels: (column tiles of MOE_TILE_BN) x (groups walking the tile table). */
static clmoe_status launch_rows(clmoe_ctx *ctx, cl_kernel k, int64_t n, int64_t max_tiles)
{
  const size_t local[2] = {128, 1};
  const size_t global[2] = {(size_t)((n + MOE_TILE_BN - 1) / MOE_TILE_BN) * local[0],
                            clmoe__moe_group_count(ctx, max_tiles)};
  return clmoe__launch(ctx, k, 2, global, local);
}

/* C[e] [n1, n2] = A_e^T B_e over each expert's rows of A [R, n1], B [R, n2] (fp32). */
static clmoe_status wgrad(clmoe_ctx *ctx, const clmoe_moe_dispatch *d, const clmoe_tensor *A,
                          int64_t n1, const clmoe_tensor *B, int64_t n2, clmoe_tensor *C)
{
  cl_kernel k;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_GEMM_TILE, "moe_tile_wgrad", &k));
  cl_int i1 = (cl_int)n1, i2 = (cl_int)n2, iE = (cl_int)d->n_experts;
  CLMOE_TRY(clmoe__args(k, 7, KA(d->offsets.buf), KA(iE), KA(A->buf), KA(i1), KA(B->buf), KA(i2),
                        KA(C->buf)));
  const int64_t tm = d->tile_rows;
  const size_t local[3] = {128, 1, 1};
  const size_t global[3] = {(size_t)((n2 + MOE_TILE_BN - 1) / MOE_TILE_BN) * local[0],
                            (size_t)((n1 + tm - 1) / tm), clmoe__moe_group_count(ctx, d->n_experts)};
  return clmoe__launch(ctx, k, 3, global, local);
}

clmoe_status clmoe__moe_experts_forward_bf16(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                             const clmoe_moe_dispatch *d, const clmoe_tensor *xs,
                                             clmoe_tensor *u, clmoe_tensor *w, clmoe_tensor *act,
                                             clmoe_tensor *ys)
{
  CLMOE_TRY(clmoe__moe_want_stacks(L, CLMOE_BF16, "clmoe_moe_forward (bf16 experts)"));
  const int64_t l = clmoe__moe_width(&L->cfg), f = L->cfg.expert_ff;
  cl_kernel kgu, knt;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_GEMM_TILE, "moe_tile_gu", &kgu));
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_GEMM_TILE, "moe_tile_nt", &knt));
  cl_int il = (cl_int)l, iff = (cl_int)f, save = u && w, nt = (cl_int)d->max_tiles, glu = (cl_int)L->cfg.glu;
  cl_mem ub = save ? u->buf : act->buf, wb = save ? w->buf : act->buf; /* unused when !save */
  CLMOE_TRY(clmoe__args(kgu, 13, KA(d->tiles.buf), KA(nt), KA(d->offsets.buf), KA(xs->buf), KA(il),
                        KA(L->w_gate.buf), KA(L->w_upp.buf), KA(iff), KA(act->buf), KA(ub), KA(wb),
                        KA(save), KA(glu)));
  CLMOE_TRY(launch_rows(ctx, kgu, f, d->max_tiles));
  CLMOE_TRY(clmoe__args(knt, 8, KA(d->tiles.buf), KA(nt), KA(d->offsets.buf), KA(act->buf), KA(iff),
                        KA(L->w_dn.buf), KA(il), KA(ys->buf)));
  return launch_rows(ctx, knt, l, d->max_tiles);
}

clmoe_status clmoe__moe_experts_backward_bf16(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                              const clmoe_moe_saved *s, const clmoe_tensor *dys,
                                              clmoe_moe_grads *g, clmoe_tensor *dxs, clmoe_tensor *du,
                                              clmoe_tensor *dw)
{
  CLMOE_TRY(clmoe__moe_want_stacks(L, CLMOE_BF16, "clmoe_moe_backward (bf16 experts)"));
  const clmoe_moe_dispatch *d = &s->disp;
  const int64_t l = clmoe__moe_width(&L->cfg), f = L->cfg.expert_ff;
  cl_kernel kda, kdx;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_GEMM_TILE, "moe_tile_dact", &kda));
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_GEMM_TILE, "moe_tile_dx", &kdx));
  cl_int il = (cl_int)l, iff = (cl_int)f, nt = (cl_int)d->max_tiles, glu = (cl_int)L->cfg.glu;
  CLMOE_TRY(clmoe__args(kda, 12, KA(d->tiles.buf), KA(nt), KA(d->offsets.buf), KA(dys->buf), KA(il),
                        KA(L->w_dn.buf), KA(iff), KA(s->u.buf), KA(s->w.buf), KA(du->buf), KA(dw->buf),
                        KA(glu)));
  CLMOE_TRY(launch_rows(ctx, kda, f, d->max_tiles));
  CLMOE_TRY(wgrad(ctx, d, dys, l, &s->act, f, &g->w_dn));
  CLMOE_TRY(wgrad(ctx, d, du, f, &s->xs, l, &g->w_gate));
  CLMOE_TRY(wgrad(ctx, d, dw, f, &s->xs, l, &g->w_upp));
  CLMOE_TRY(clmoe__args(kdx, 10, KA(d->tiles.buf), KA(nt), KA(d->offsets.buf), KA(du->buf), KA(dw->buf), KA(iff),
                        KA(L->w_gate.buf), KA(L->w_upp.buf), KA(il), KA(dxs->buf)));
  return launch_rows(ctx, kdx, l, d->max_tiles);
}
