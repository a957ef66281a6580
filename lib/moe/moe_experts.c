/* MoE experts on the expert buffers: our grouped GEMM kernels (kernels_cl/moe/moe_gemm.cl, with
 * the gated unit fused) or CLBlast batched GEMMs over groups padded to the largest expert. */
#include "moe_internal.h"

#include <string.h>

/* ---- grouped ------------------------------------------------------------------------------ */

/* Row-tile kernels: (column tiles) x (groups walking the tile table). */
static clmoe_status launch_tiles(clmoe_ctx *ctx, cl_kernel k, int64_t n, int64_t max_tiles)
{
  moe_tiles t;
  clmoe__moe_tiles(ctx, &t);
  size_t local[2] = {(size_t)(t.tn / t.wn), (size_t)(t.tm / t.wm)};
  size_t global[2] = {(size_t)((n + t.tn - 1) / t.tn) * local[0], clmoe__moe_group_count(ctx, max_tiles) * local[1]};
  return clmoe__launch(ctx, k, 2, global, local);
}

/* C[e] [n1, n2] = A_e^T B_e over each expert's rows of A [R, n1], B [R, n2]. */
static clmoe_status wgrad(clmoe_ctx *ctx, const clmoe_moe_dispatch *d, const clmoe_tensor *A,
                          int64_t n1, const clmoe_tensor *B, int64_t n2, clmoe_tensor *C)
{
  cl_kernel k;
  moe_tiles t;
  clmoe__moe_tiles(ctx, &t);
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_GEMM, "moe_gemm_wgrad", &k));
  cl_int i1 = (cl_int)n1, i2 = (cl_int)n2, iE = (cl_int)d->n_experts;
  CLMOE_TRY(clmoe__args(k, 7, KA(d->offsets.buf), KA(iE), KA(A->buf), KA(i1), KA(B->buf), KA(i2),
                        KA(C->buf)));
  size_t local[3] = {(size_t)(t.tn / t.wn), (size_t)(t.tm / t.wm), 1};
  size_t global[3] = {(size_t)((n2 + t.tn - 1) / t.tn) * local[0], (size_t)((n1 + t.tm - 1) / t.tm) * local[1],
                      clmoe__moe_group_count(ctx, d->n_experts)};
  return clmoe__launch(ctx, k, 3, global, local);
}

/* family: MOE_GEMM (fp32 stacks) or MOE_GEMM_W16 (bf16 stacks, inference). */
static clmoe_status grouped_forward(clmoe_ctx *ctx, enum moe_family family, const clmoe_moe_layer *L,
                                    const clmoe_moe_dispatch *d, const clmoe_tensor *xs, clmoe_tensor *u,
                                    clmoe_tensor *w, clmoe_tensor *act, clmoe_tensor *ys)
{
  const int64_t l = clmoe__moe_width(&L->cfg), f = L->cfg.expert_ff;
  cl_kernel kgu, knt;
  CLMOE_TRY(clmoe__moe_kernel(ctx, family, "moe_gemm_gu", &kgu));
  CLMOE_TRY(clmoe__moe_kernel(ctx, family, "moe_gemm_nt", &knt));
  cl_int il = (cl_int)l, iff = (cl_int)f, save = u && w, nt = (cl_int)d->max_tiles, glu = (cl_int)L->cfg.glu;
  cl_mem ub = save ? u->buf : act->buf, wb = save ? w->buf : act->buf; /* unused when !save */
  CLMOE_TRY(clmoe__args(kgu, 13, KA(d->tiles.buf), KA(nt), KA(d->offsets.buf), KA(xs->buf), KA(il),
                        KA(L->w_gate.buf), KA(L->w_upp.buf), KA(iff), KA(act->buf), KA(ub), KA(wb),
                        KA(save), KA(glu)));
  CLMOE_TRY(launch_tiles(ctx, kgu, f, d->max_tiles));
  CLMOE_TRY(clmoe__args(knt, 8, KA(d->tiles.buf), KA(nt), KA(d->offsets.buf), KA(act->buf), KA(iff),
                        KA(L->w_dn.buf), KA(il), KA(ys->buf)));
  return launch_tiles(ctx, knt, l, d->max_tiles);
}

static clmoe_status grouped_backward(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_moe_saved *s,
                                     const clmoe_tensor *dys, clmoe_moe_grads *g, clmoe_tensor *dxs,
                                     clmoe_tensor *du, clmoe_tensor *dw)
{
  const clmoe_moe_dispatch *d = &s->disp;
  const int64_t l = clmoe__moe_width(&L->cfg), f = L->cfg.expert_ff;
  cl_kernel kda, kdx;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_GEMM, "moe_gemm_dact", &kda));
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_GEMM, "moe_gemm_dx", &kdx));
  cl_int il = (cl_int)l, iff = (cl_int)f, nt = (cl_int)d->max_tiles, glu = (cl_int)L->cfg.glu;
  CLMOE_TRY(clmoe__args(kda, 12, KA(d->tiles.buf), KA(nt), KA(d->offsets.buf), KA(dys->buf), KA(il),
                        KA(L->w_dn.buf), KA(iff), KA(s->u.buf), KA(s->w.buf), KA(du->buf), KA(dw->buf),
                        KA(glu)));
  CLMOE_TRY(launch_tiles(ctx, kda, f, d->max_tiles));
  CLMOE_TRY(wgrad(ctx, d, dys, l, &s->act, f, &g->w_dn));
  CLMOE_TRY(wgrad(ctx, d, du, f, &s->xs, l, &g->w_gate));
  CLMOE_TRY(wgrad(ctx, d, dw, f, &s->xs, l, &g->w_upp));
  CLMOE_TRY(clmoe__args(kdx, 10, KA(d->tiles.buf), KA(nt), KA(d->offsets.buf), KA(du->buf), KA(dw->buf), KA(iff),
                        KA(L->w_gate.buf), KA(L->w_upp.buf), KA(il), KA(dxs->buf)));
  return launch_tiles(ctx, kdx, l, d->max_tiles);
}

/* ---- padded: [R, n] buffers seen as [E, cap, n] ------------------------------------------- */

static clmoe_status batched(clmoe_ctx *ctx, clmoe_trans ta, clmoe_trans tb, const clmoe_tensor *A,
                            const clmoe_tensor *B, float beta, clmoe_tensor *C)
{
  return clmoe_gemm_ex(ctx, CLMOE_GEMM_CLBLAST, ta, tb, 1.0f, A, B, beta, C);
}

static clmoe_status padded_forward(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_moe_dispatch *d,
                                   const clmoe_tensor *xs, clmoe_tensor *u, clmoe_tensor *w,
                                   clmoe_tensor *act, clmoe_tensor *ys)
{
  const int64_t E = d->n_experts, cap = d->cap, l = clmoe__moe_width(&L->cfg), f = L->cfg.expert_ff;
  clmoe_tensor tu = {0}, tw = {0}, x3, u3, w3, a3, y3;
  clmoe_status st;
  if (!u || !w) { /* inference: the products are temporary */
    CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &tu, CLMOE_F32, d->rows, f), done);
    CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &tw, CLMOE_F32, d->rows, f), done);
    u = &tu, w = &tw;
  }
  CLMOE_TRY_GOTO(st, clmoe_tensor_view3d(xs, &x3, E, cap, l), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view3d(u, &u3, E, cap, f), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view3d(w, &w3, E, cap, f), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view3d(act, &a3, E, cap, f), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view3d(ys, &y3, E, cap, l), done);
  CLMOE_TRY_GOTO(st, batched(ctx, CLMOE_NOTRANS, CLMOE_TRANS, &x3, &L->w_gate, 0.0f, &u3), done);
  CLMOE_TRY_GOTO(st, batched(ctx, CLMOE_NOTRANS, CLMOE_TRANS, &x3, &L->w_upp, 0.0f, &w3), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_situ_forward(ctx, L->cfg.glu, u, w, act), done);
  st = batched(ctx, CLMOE_NOTRANS, CLMOE_TRANS, &a3, &L->w_dn, 0.0f, &y3);
done:
  clmoe_tensor_destroy(&tu);
  clmoe_tensor_destroy(&tw);
  return st;
}

static clmoe_status padded_backward(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_moe_saved *s,
                                    const clmoe_tensor *dys, clmoe_moe_grads *g, clmoe_tensor *dxs,
                                    clmoe_tensor *du, clmoe_tensor *dw)
{
  const clmoe_moe_dispatch *d = &s->disp;
  const int64_t E = d->n_experts, cap = d->cap, l = clmoe__moe_width(&L->cfg), f = L->cfg.expert_ff;
  clmoe_tensor dy3, x3, a3, du3, dw3, dx3;
  CLMOE_TRY(clmoe_tensor_view3d(dys, &dy3, E, cap, l));
  CLMOE_TRY(clmoe_tensor_view3d(&s->xs, &x3, E, cap, l));
  CLMOE_TRY(clmoe_tensor_view3d(&s->act, &a3, E, cap, f));
  CLMOE_TRY(clmoe_tensor_view3d(du, &du3, E, cap, f));
  CLMOE_TRY(clmoe_tensor_view3d(dw, &dw3, E, cap, f));
  CLMOE_TRY(clmoe_tensor_view3d(dxs, &dx3, E, cap, l));
  /* dact into du, then the gated unit's gradient in place (du = dact, dw from it) */
  CLMOE_TRY(batched(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, &dy3, &L->w_dn, 0.0f, &du3));
  CLMOE_TRY(clmoe__moe_situ_backward(ctx, L->cfg.glu, du, &s->u, &s->w, du, dw));
  CLMOE_TRY(batched(ctx, CLMOE_TRANS, CLMOE_NOTRANS, &dy3, &a3, 0.0f, &g->w_dn));
  CLMOE_TRY(batched(ctx, CLMOE_TRANS, CLMOE_NOTRANS, &du3, &x3, 0.0f, &g->w_gate));
  CLMOE_TRY(batched(ctx, CLMOE_TRANS, CLMOE_NOTRANS, &dw3, &x3, 0.0f, &g->w_upp));
  CLMOE_TRY(batched(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, &du3, &L->w_gate, 0.0f, &dx3));
  return batched(ctx, CLMOE_NOTRANS, CLMOE_NOTRANS, &dw3, &L->w_upp, 1.0f, &dx3);
}

/* ---- entry points ------------------------------------------------------------------------- */

clmoe_status clmoe__moe_experts_forward(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                        const clmoe_moe_dispatch *d, const clmoe_tensor *xs,
                                        clmoe_tensor *u, clmoe_tensor *w, clmoe_tensor *act,
                                        clmoe_tensor *ys)
{
  if (d->rows == 0) return CLMOE_OK;
  if (d->cap) return padded_forward(ctx, L, d, xs, u, w, act, ys);
  if (L->w_gate.dtype == CLMOE_BF16) return clmoe__moe_experts_forward_bf16(ctx, L, d, xs, u, w, act, ys);
  return grouped_forward(ctx, MOE_GEMM, L, d, xs, u, w, act, ys);
}

clmoe_status clmoe__moe_experts_forward_infer(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                              const clmoe_moe_dispatch *d, const clmoe_tensor *xs,
                                              clmoe_tensor *act, clmoe_tensor *ys, int tile)
{
  static const char op[] = "clmoe_moe_forward_infer";
  const clmoe_dtype dt = L->w_gate.dtype;
  if (d->cap) return clmoe__error(CLMOE_ERR_INTERNAL, "%s: the dispatch must be grouped", op);
  if (dt != CLMOE_F32 && dt != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: expert weights must be fp32 or bf16", op);
  CLMOE_TRY(clmoe__moe_want_stacks(L, dt, op));
  if (d->rows == 0) return CLMOE_OK;
  if (tile && dt == CLMOE_BF16) return clmoe__moe_experts_forward_bf16(ctx, L, d, xs, NULL, NULL, act, ys);
  return grouped_forward(ctx, dt == CLMOE_BF16 ? MOE_GEMM_W16 : MOE_GEMM, L, d, xs, NULL, NULL, act, ys);
}

clmoe_status clmoe__moe_experts_backward(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                         const clmoe_moe_saved *s, const clmoe_tensor *dys,
                                         clmoe_moe_grads *g, clmoe_tensor *dxs)
{
  const clmoe_moe_dispatch *d = &s->disp;
  const int64_t f = L->cfg.expert_ff;
  if (d->rows == 0) {
    CLMOE_TRY(clmoe_tensor_fill(&g->w_gate, 0.0));
    CLMOE_TRY(clmoe_tensor_fill(&g->w_upp, 0.0));
    return clmoe_tensor_fill(&g->w_dn, 0.0);
  }
  clmoe_tensor du = {0}, dw = {0}; /* [R, f] */
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &du, CLMOE_F32, d->rows, f), done);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &dw, CLMOE_F32, d->rows, f), done);
  if (d->cap) st = padded_backward(ctx, L, s, dys, g, dxs, &du, &dw);
  else if (L->w_gate.dtype == CLMOE_BF16) st = clmoe__moe_experts_backward_bf16(ctx, L, s, dys, g, dxs, &du, &dw);
  else st = grouped_backward(ctx, L, s, dys, g, dxs, &du, &dw);
done:
  clmoe_tensor_destroy(&du);
  clmoe_tensor_destroy(&dw);
  return st;
}
