/* MLA attention host side: the dispatch between the tile kernels (mla_tile.c) and the
 * portable ones, the portable tiled forward (kernels_cl/mla/mla_fwd.cl), the
 * flash-attention-2 backward (mla_bwd.cl), the materialised baseline, and the public ops over
 * contiguous tensors. The plan and its tile tables are in mla_attn_plan.c. */
#include "mla_internal.h"
#include "clmoe/tile.h"
#include "clmoe/paths.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the portable kernels --------------------------------------------------------------- */

/* Local memory of mla_attn_fwd (kernels_cl/mla/mla_fwd.cl) with fq query rows per tile and
 * of the backward kernels (mla_bwd.cl): kernels_cl/mla/mla_layout.cl. */
static size_t fwd_local_bytes(const mla_attn_desc *a, int fq)
{
  return MLA_FWD_LOCAL_BYTES((size_t)(a->Dn + a->Dr), (size_t)a->Dv, (size_t)fq);
}

static size_t bwd_local_bytes(const mla_attn_desc *a)
{
  return MLA_BWD_LOCAL_BYTES((size_t)(a->Dn + a->Dr), (size_t)a->Dv);
}

static clmoe_status check_device(clmoe_ctx *ctx, const char *op, const mla_attn_desc *a, int *fq)
{
  const uint64_t have = ctx->caps.local_mem_bytes;
  if (ctx->caps.max_work_group_size < MLA_WG)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: the device's work-groups hold %zu work-items; the MLA "
                        "kernels need %d", op, ctx->caps.max_work_group_size, MLA_WG);
  *fq = fwd_local_bytes(a, 32) <= have ? 32 : 16;
  size_t need = fwd_local_bytes(a, *fq) > bwd_local_bytes(a) ? fwd_local_bytes(a, *fq) : bwd_local_bytes(a);
  if (need > have)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: head sizes Dn + Dr = %lld, Dv = %lld need %zu bytes of "
                        "local memory; the device has %llu", op, (long long)(a->Dn + a->Dr), (long long)a->Dv,
                        need, (unsigned long long)have);
  return CLMOE_OK;
}

static void attn_options(const mla_attn_desc *a, int out_bf16, int fq, char *buf, size_t len)
{
  snprintf(buf, len, "-DDN=%d -DDR=%d -DDV=%d -DSTORE_BF16=%d -DOUT_BF16=%d%s", (int)a->Dn, (int)a->Dr,
           (int)a->Dv, a->in_bf16, out_bf16, fq == 16 ? " -DFQ=16" : "");
}

clmoe_status clmoe__mla_attn_fwd_launch(clmoe_ctx *ctx, const mla_attn_desc *a, int fq,
                                        cl_mem tiles, int ntiles, clmoe_tensor *o, clmoe_tensor *lse)
{
  if (ntiles == 0) return CLMOE_OK;
  char opts[160];
  attn_options(a, o->dtype == CLMOE_BF16, fq, opts, sizeof opts);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "mla_layout+mla+mla_fwd", opts, "mla_attn_fwd", &k));
  cl_int H = (cl_int)a->H, has_lse = lse != NULL;
  float sl2 = a->scale * 1.4426950408889634f;
  cl_mem lm = lse ? lse->buf : o->buf;
  cl_ulong oo = (cl_ulong)o->offset, lo = lse ? (cl_ulong)lse->offset : 0;
  CLMOE_TRY(clmoe__args(k, 23, KA(a->q.buf), KA(a->q.off), KA(a->q.ts), KA(a->q.hs), KA(a->kn.buf),
                        KA(a->kn.off), KA(a->kn.ts), KA(a->kn.hs), KA(a->kr.buf), KA(a->kr.off), KA(a->kr.ts),
                        KA(a->v.buf), KA(a->v.off), KA(a->v.ts), KA(a->v.hs), KA(tiles), KA(H), KA(sl2),
                        KA(o->buf), KA(oo), KA(lm), KA(lo), KA(has_lse)));
  size_t global[2] = {(size_t)ntiles * MLA_WG, (size_t)a->H}, local[2] = {MLA_WG, 1};
  return clmoe__launch(ctx, k, 2, global, local);
}

/* The portable forward (kernels_cl/mla/mla_fwd.cl) whatever the fast path says. */
static clmoe_status attn_fwd_portable(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p,
                                      clmoe_tensor *o, clmoe_tensor *lse)
{
  const char *op = "MLA attention forward";
  int fq;
  CLMOE_TRY(check_device(ctx, op, a, &fq));
  if (p->M == 0) return CLMOE_OK;
  CLMOE_TRY(clmoe__mla_plan_fwd_tiles(ctx, p, fq));
  return clmoe__mla_attn_fwd_launch(ctx, a, fq, p->fwd_tiles, p->nfwd, o, lse);
}

enum { BW_D, BW_KR, BW_COUNT };

/* The portable backward (kernels_cl/mla/mla_bwd.cl) whatever the fast path says. */
static clmoe_status attn_bwd_portable(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p,
                                      const clmoe_tensor *o, const clmoe_tensor *lse,
                                      const clmoe_tensor *dout, clmoe_tensor *dq, mla_operand dkn,
                                      mla_operand dv, clmoe_tensor *dkr)
{
  const char *op = "MLA attention backward";
  int fq;
  CLMOE_TRY(check_device(ctx, op, a, &fq));
  if (p->M == 0) return CLMOE_OK;
  if (!p->bwd_tiles) CLMOE_TRY(clmoe__mla_build_tiles(ctx, p, MLA_BB, 0, &p->bwd_tiles, &p->bwd_bytes, &p->nbwd));
  char opts[160];
  attn_options(a, o->dtype == CLMOE_BF16, 0, opts, sizeof opts);
  cl_kernel kdot, kkv, kq, kred;
  CLMOE_TRY(clmoe__kernel(ctx, "mla_layout+mla+mla_bwd", opts, "mla_bwd_dot", &kdot));
  CLMOE_TRY(clmoe__kernel(ctx, "mla_layout+mla+mla_bwd", opts, "mla_attn_bwd_kv", &kkv));
  CLMOE_TRY(clmoe__kernel(ctx, "mla_layout+mla+mla_bwd", opts, "mla_attn_bwd_q", &kq));
  CLMOE_TRY(clmoe__kernel(ctx, "mla_layout+mla+mla_bwd", opts, "mla_krope_reduce", &kred));
  /* Scratch: D [M, H] and the per-head k_rope gradients [M, H, Dr]. */
  const size_t bytes[BW_COUNT] = {(size_t)(p->M * a->H) * 4, (size_t)(p->M * a->H * a->Dr) * 4};
  cl_mem m[BW_COUNT] = {NULL, NULL};
  clmoe_status st = CLMOE_OK;
  for (int i = 0; i < BW_COUNT; i++) CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, bytes[i], &m[i]), done);
  cl_int rows = (cl_int)(p->M * a->H), H = (cl_int)a->H, M = (cl_int)p->M;
  cl_ulong oo = (cl_ulong)o->offset, doo = (cl_ulong)dout->offset, lo = (cl_ulong)lse->offset;
  cl_ulong dqo = (cl_ulong)dq->offset, dkro = (cl_ulong)dkr->offset;
  cl_uint dkr_ts = (cl_uint)a->Dr;
  float sl2 = a->scale * 1.4426950408889634f, scale = a->scale;
  CLMOE_TRY_GOTO(st, clmoe__args(kdot, 6, KA(o->buf), KA(oo), KA(dout->buf), KA(doo), KA(rows), KA(m[BW_D])), done);
  CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, kdot, (size_t)rows), done);
  /* The 24 arguments both tiled kernels share (ATTN_BWD_ARGS in mla_bwd.cl). */
  cl_kernel both[2] = {kkv, kq};
  for (int i = 0; i < 2; i++)
    CLMOE_TRY_GOTO(st, clmoe__args(both[i], 24, KA(a->q.buf), KA(a->q.off), KA(a->q.ts), KA(a->q.hs),
                                   KA(a->kn.buf), KA(a->kn.off), KA(a->kn.ts), KA(a->kn.hs), KA(a->kr.buf),
                                   KA(a->kr.off), KA(a->kr.ts), KA(a->v.buf), KA(a->v.off), KA(a->v.ts),
                                   KA(a->v.hs), KA(dout->buf), KA(doo), KA(lse->buf), KA(lo), KA(m[BW_D]),
                                   KA(p->bwd_tiles), KA(H), KA(sl2), KA(scale)), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 24, sizeof dkn.buf, &dkn.buf), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 25, sizeof dkn.off, &dkn.off), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 26, sizeof dkn.ts, &dkn.ts), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 27, sizeof dkn.hs, &dkn.hs), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 28, sizeof dv.buf, &dv.buf), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 29, sizeof dv.off, &dv.off), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 30, sizeof dv.ts, &dv.ts), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 31, sizeof dv.hs, &dv.hs), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 32, sizeof m[BW_KR], &m[BW_KR]), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kq, 24, sizeof dq->buf, &dq->buf), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kq, 25, sizeof dqo, &dqo), done);
  size_t global[2] = {(size_t)p->nbwd * MLA_WG, (size_t)a->H}, local[2] = {MLA_WG, 1};
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kkv, 2, global, local), done);
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kq, 2, global, local), done);
  CLMOE_TRY_GOTO(st, clmoe__args(kred, 6, KA(m[BW_KR]), KA(H), KA(M), KA(dkr->buf), KA(dkro), KA(dkr_ts)), done);
  st = clmoe__launch1d(ctx, kred, (size_t)(p->M * a->Dr));
done:
  for (int i = 0; i < BW_COUNT; i++) clmoe__scratch_release(ctx, m[i], bytes[i]);
  return st;
}

/* ---- dispatch --------------------------------------------------------------------------- */

/* The fast path: the tile kernel (mla_tile.c) when it is on for these operands (forced by
 * CLMOE_FASTPATH=1, or bf16 operands on a matrix unit: fp32 callers keep fp32 products
 * unless they ask) and covers the call, else the portable kernel, the reference. A tile
 * kernel that does not build falls back too (nothing was launched;
 * clmoe_mla_attention_path reports such errors). */
clmoe_status clmoe__mla_attn_fwd_run(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p,
                                     clmoe_tensor *o, clmoe_tensor *lse)
{
  if (clmoe_ctx_fastpath_for(ctx, a->in_bf16)) {
    clmoe_status st = clmoe__mla_tile_fwd_run(ctx, a, p, 0, o, lse);
    if (st != CLMOE_ERR_UNSUPPORTED && st != CLMOE_ERR_BUILD) return st;
    clmoe_clear_error();
  }
  return attn_fwd_portable(ctx, a, p, o, lse);
}

/* As the forward: the tile kernels (mla_tile.c) on the fast path when they cover the call. */
clmoe_status clmoe__mla_attn_bwd_run(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p,
                                     const clmoe_tensor *o, const clmoe_tensor *lse,
                                     const clmoe_tensor *dout, clmoe_tensor *dq, mla_operand dkn,
                                     mla_operand dv, clmoe_tensor *dkr)
{
  if (clmoe_ctx_fastpath_for(ctx, a->in_bf16)) {
    clmoe_status st = clmoe__mla_tile_bwd_run(ctx, a, p, o, lse, dout, dq, dkn, dv, dkr);
    if (st != CLMOE_ERR_UNSUPPORTED && st != CLMOE_ERR_BUILD) return st;
    clmoe_clear_error();
  }
  return attn_bwd_portable(ctx, a, p, o, lse, dout, dq, dkn, dv, dkr);
}

clmoe_status clmoe__mla_attn_fwd_shape(clmoe_ctx *ctx, const char *op, const mla_attn_desc *a,
                                       int *fq)
{
  return check_device(ctx, op, a, fq);
}

/* ---- the public op over contiguous tensors ---------------------------------------------- */

static mla_operand contiguous_operand(const clmoe_tensor *t, int64_t ts, int64_t hs)
{
  mla_operand o = {t->buf, (cl_ulong)t->offset, (cl_uint)ts, (cl_uint)hs};
  return o;
}

/* Validates the inputs and the outputs' shapes, fills the descriptor and the plan. */
static clmoe_status attn_setup(clmoe_ctx *ctx, const char *op, float scale,
                               const clmoe_mla_attn_inputs *in, const clmoe_tensor *o,
                               const clmoe_tensor *lse, int o_bf16_ok, mla_attn_desc *a, mla_plan *p)
{
  char desc[96];
  memset(a, 0, sizeof *a);
  memset(p, 0, sizeof *p);
  if (!in || !in->q || !in->k_nope || !in->k_rope || !in->v || !o)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: q, k_nope, k_rope, v and o are required", op);
  const clmoe_tensor *q = in->q, *kn = in->k_nope;
  if (q->ndim != 4 || kn->ndim != 4 || in->v->ndim != 4 || (q->dtype != CLMOE_F32 && q->dtype != CLMOE_BF16))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: q is %s; expected q [B, T, H, Dn + Dr], k_nope [B, T, H, Dn], "
                        "v [B, T, H, Dv] (f32 or bf16)", op, clmoe_tensor_describe(q, desc, sizeof desc));
  const int64_t B = q->shape[0], T = q->shape[1];
  a->H = q->shape[2], a->Dn = kn->shape[3], a->Dr = q->shape[3] - a->Dn, a->Dv = in->v->shape[3];
  a->in_bf16 = q->dtype == CLMOE_BF16;
  if (a->H < 1 || a->Dn < 1 || a->Dr < 1 || a->Dv < 1 || a->Dn + a->Dr > MLA_MAX_DQK || a->Dv > MLA_MAX_DV)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: H = %lld, Dn = %lld, Dr = %lld, Dv = %lld: every size must be "
                        ">= 1 with Dn + Dr <= %d and Dv <= %d", op, (long long)a->H, (long long)a->Dn,
                        (long long)a->Dr, (long long)a->Dv, MLA_MAX_DQK, MLA_MAX_DV);
  struct { const clmoe_tensor *t; const char *name; int rank; int64_t d2, d3; } want[] = {
      {q, "q", 4, a->H, a->Dn + a->Dr}, {kn, "k_nope", 4, a->H, a->Dn}, {in->k_rope, "k_rope", 3, a->Dr, 0},
      {in->v, "v", 4, a->H, a->Dv}};
  for (int i = 0; i < 4; i++) {
    CLMOE_TRY(clmoe__want_shape(want[i].t, op, want[i].name, 1, want[i].rank, B, T, want[i].d2, want[i].d3));
    if ((want[i].t->dtype == CLMOE_BF16) != a->in_bf16)
      return clmoe__error(CLMOE_ERR_SHAPE, "%s: q, k_nope, k_rope and v must share one storage type (q is %s, "
                          "%s is %s)", op, clmoe_dtype_name(q->dtype), want[i].name,
                          clmoe_dtype_name(want[i].t->dtype));
  }
  CLMOE_TRY(clmoe__want_shape(o, op, "o", o_bf16_ok, 4, B, T, a->H, a->Dv));
  if (lse) CLMOE_TRY(clmoe__want_shape(lse, op, "lse", 0, 3, B, T, a->H, 0));
  a->scale = scale == 0.0f ? 1.0f / sqrtf((float)(a->Dn + a->Dr)) : scale;
  if (!isfinite(a->scale)) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: scale is not finite", op);
  const int64_t H = a->H, dqk = a->Dn + a->Dr;
  a->q = contiguous_operand(q, H * dqk, dqk);
  a->kn = contiguous_operand(kn, H * a->Dn, a->Dn);
  a->kr = contiguous_operand(in->k_rope, a->Dr, 0);
  a->v = contiguous_operand(in->v, H * a->Dv, a->Dv);
  CLMOE_TRY(clmoe__mla_plan_make(ctx, op, B, T, in->cu_seqlens, p));
  a->M = p->M;
  return CLMOE_OK;
}

clmoe_status clmoe_mla_attention(clmoe_ctx *ctx, float scale, const clmoe_mla_attn_inputs *in,
                                 clmoe_tensor *o, clmoe_tensor *lse)
{
  mla_attn_desc a;
  mla_plan p;
  CLMOE_TRY(attn_setup(ctx, "clmoe_mla_attention", scale, in, o, lse, 1, &a, &p));
  clmoe_status st = clmoe__mla_attn_fwd_run(ctx, &a, &p, o, lse);
  clmoe__mla_plan_release(ctx, &p);
  return st;
}

clmoe_status clmoe_mla_attention_path(clmoe_ctx *ctx, clmoe_mla_attn_path path, float scale,
                                      const clmoe_mla_attn_inputs *in, clmoe_tensor *o, clmoe_tensor *lse)
{
  static const int bq[] = {0, 0, 0, 64, 128};
  if ((int)path < CLMOE_MLA_ATTN_AUTO || (int)path > CLMOE_MLA_ATTN_TILE128)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_mla_attention_path: unknown path %d", (int)path);
  mla_attn_desc a;
  mla_plan p;
  CLMOE_TRY(attn_setup(ctx, "clmoe_mla_attention_path", scale, in, o, lse, 1, &a, &p));
  clmoe_status st;
  if (path == CLMOE_MLA_ATTN_AUTO) st = clmoe__mla_attn_fwd_run(ctx, &a, &p, o, lse);
  else if (path == CLMOE_MLA_ATTN_PORTABLE) st = attn_fwd_portable(ctx, &a, &p, o, lse);
  else st = clmoe__mla_tile_fwd_run(ctx, &a, &p, bq[path], o, lse);
  clmoe__mla_plan_release(ctx, &p);
  return st;
}

const char *clmoe_mla_attn_path_name(clmoe_mla_attn_path path)
{
  switch (path) {
  case CLMOE_MLA_ATTN_AUTO: return "auto";
  case CLMOE_MLA_ATTN_PORTABLE: return "portable";
  case CLMOE_MLA_ATTN_TILE: return "tile";
  case CLMOE_MLA_ATTN_TILE64: return "tile64";
  case CLMOE_MLA_ATTN_TILE128: return "tile128";
  }
  return "?";
}

static clmoe_status attn_backward(clmoe_ctx *ctx, const char *op, clmoe_mla_attn_path path,
                                  float scale, const clmoe_mla_attn_inputs *in,
                                  const clmoe_tensor *o, const clmoe_tensor *lse,
                                  const clmoe_tensor *dout, const clmoe_mla_attn_grads *g)
{
  mla_attn_desc a;
  mla_plan p;
  if (!lse || !g || !g->dq || !g->dk_nope || !g->dk_rope || !g->dv)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: lse and every gradient are required", op);
  CLMOE_TRY(attn_setup(ctx, op, scale, in, o, lse, 1, &a, &p));
  const int64_t B = p.B, T = p.T, H = a.H;
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe__want_shape(dout, op, "dout", 0, 4, B, T, H, a.Dv), done);
  CLMOE_TRY_GOTO(st, clmoe__want_shape(g->dq, op, "dq", 0, 4, B, T, H, a.Dn + a.Dr), done);
  CLMOE_TRY_GOTO(st, clmoe__want_shape(g->dk_nope, op, "dk_nope", 0, 4, B, T, H, a.Dn), done);
  CLMOE_TRY_GOTO(st, clmoe__want_shape(g->dk_rope, op, "dk_rope", 0, 3, B, T, a.Dr, 0), done);
  CLMOE_TRY_GOTO(st, clmoe__want_shape(g->dv, op, "dv", 0, 4, B, T, H, a.Dv), done);
  const mla_operand dkn = contiguous_operand(g->dk_nope, H * a.Dn, a.Dn);
  const mla_operand dv = contiguous_operand(g->dv, H * a.Dv, a.Dv);
  if (path == CLMOE_MLA_ATTN_AUTO) st = clmoe__mla_attn_bwd_run(ctx, &a, &p, o, lse, dout, g->dq, dkn, dv, g->dk_rope);
  else if (path == CLMOE_MLA_ATTN_PORTABLE)
    st = attn_bwd_portable(ctx, &a, &p, o, lse, dout, g->dq, dkn, dv, g->dk_rope);
  else st = clmoe__mla_tile_bwd_run(ctx, &a, &p, o, lse, dout, g->dq, dkn, dv, g->dk_rope);
done:
  clmoe__mla_plan_release(ctx, &p);
  return st;
}

clmoe_status clmoe_mla_attention_backward(clmoe_ctx *ctx, float scale, const clmoe_mla_attn_inputs *in,
                                          const clmoe_tensor *o, const clmoe_tensor *lse,
                                          const clmoe_tensor *dout, const clmoe_mla_attn_grads *g)
{
  return attn_backward(ctx, "clmoe_mla_attention_backward", CLMOE_MLA_ATTN_AUTO, scale, in, o, lse, dout, g);
}

clmoe_status clmoe_mla_attention_backward_path(clmoe_ctx *ctx, clmoe_mla_attn_path path, float scale,
                                               const clmoe_mla_attn_inputs *in, const clmoe_tensor *o,
                                               const clmoe_tensor *lse, const clmoe_tensor *dout,
                                               const clmoe_mla_attn_grads *g)
{
  if ((int)path < CLMOE_MLA_ATTN_AUTO || (int)path > CLMOE_MLA_ATTN_TILE128)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_mla_attention_backward_path: unknown path %d",
                        (int)path);
  return attn_backward(ctx, "clmoe_mla_attention_backward_path", path, scale, in, o, lse, dout, g);
}

clmoe_status clmoe_mla_attention_naive(clmoe_ctx *ctx, float scale, const clmoe_mla_attn_inputs *in,
                                       clmoe_tensor *o, clmoe_tensor *lse)
{
  const char *op = "clmoe_mla_attention_naive";
  mla_attn_desc a;
  mla_plan p;
  CLMOE_TRY(attn_setup(ctx, op, scale, in, o, lse, 1, &a, &p));
  clmoe_status st = CLMOE_OK;
  cl_mem start = NULL, S = NULL;
  const size_t start_bytes = (size_t)(p.M ? p.M : 1) * sizeof(cl_int);
  const size_t s_bytes = (size_t)(p.M * a.H * (p.max_len ? p.max_len : 1)) * sizeof(float);
  cl_int *hs = malloc(start_bytes);
  if (!hs) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    goto done;
  }
  if (p.M == 0) goto done;
  if (s_bytes > ctx->caps.max_alloc_bytes) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: the score matrix needs %zu bytes; the device allows %llu "
                      "per buffer", op, s_bytes, (unsigned long long)ctx->caps.max_alloc_bytes);
    goto done;
  }
  for (int64_t n = 0; n < p.N; n++)
    for (cl_int t = p.bounds[n]; t < p.bounds[n + 1]; t++) hs[t] = p.bounds[n];
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, start_bytes, &start), done);
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, s_bytes, &S), done);
  CLMOE_TRY_GOTO(st, clmoe__write_staged(ctx, start, 0, start_bytes, hs), done);
  char opts[160];
  attn_options(&a, o->dtype == CLMOE_BF16, 32, opts, sizeof opts);
  cl_kernel ks, kp, kv;
  CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "mla_layout+mla+mla_fwd", opts, "mla_naive_scores", &ks), done);
  CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "mla_layout+mla+mla_fwd", opts, "mla_naive_softmax", &kp), done);
  CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "mla_layout+mla+mla_fwd", opts, "mla_naive_pv", &kv), done);
  cl_int H = (cl_int)a.H, L = (cl_int)p.max_len, has_lse = lse != NULL;
  cl_mem lm = lse ? lse->buf : o->buf;
  cl_ulong lo = lse ? (cl_ulong)lse->offset : 0, oo = (cl_ulong)o->offset;
  CLMOE_TRY_GOTO(st, clmoe__args(ks, 16, KA(a.q.buf), KA(a.q.off), KA(a.q.ts), KA(a.q.hs), KA(a.kn.buf),
                                 KA(a.kn.off), KA(a.kn.ts), KA(a.kn.hs), KA(a.kr.buf), KA(a.kr.off), KA(a.kr.ts),
                                 KA(start), KA(H), KA(L), KA(a.scale), KA(S)), done);
  size_t g3[3] = {(size_t)L, (size_t)a.H, (size_t)p.M};
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, ks, 3, g3, NULL), done);
  CLMOE_TRY_GOTO(st, clmoe__args(kp, 7, KA(start), KA(H), KA(L), KA(S), KA(lm), KA(lo), KA(has_lse)), done);
  size_t g2[2] = {(size_t)a.H, (size_t)p.M};
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kp, 2, g2, NULL), done);
  CLMOE_TRY_GOTO(st, clmoe__args(kv, 10, KA(a.v.buf), KA(a.v.off), KA(a.v.ts), KA(a.v.hs), KA(start), KA(H),
                                 KA(L), KA(S), KA(o->buf), KA(oo)), done);
  size_t gv[3] = {(size_t)a.Dv, (size_t)a.H, (size_t)p.M};
  st = clmoe__launch(ctx, kv, 3, gv, NULL);
done:
  clmoe__scratch_release(ctx, start, start_bytes);
  clmoe__scratch_release(ctx, S, s_bytes);
  free(hs);
  clmoe__mla_plan_release(ctx, &p);
  return st;
}

double clmoe_mla_attention_flops(const int64_t *lengths, int64_t nseq, int64_t H, int64_t Dqk, int64_t Dv)
{
  double pairs = 0.0;
  for (int64_t n = 0; n < nseq; n++) pairs += (double)lengths[n] * (double)(lengths[n] + 1) / 2.0;
  return 2.0 * pairs * (double)H * (double)(Dqk + Dv);
}
