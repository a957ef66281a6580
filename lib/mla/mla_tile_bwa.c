/* MLA attention on tiles, the double-buffered backward and the bf16 operand copies: host side
 * of kernels_cl/mla/mla_tile_bwd_async.cl. Decides whether the kernels take a call (head
 * sizes, alignment, local memory), makes packed bf16 copies of fp32 operands on devices with
 * a matrix unit (so that the forward's double-buffered and warp-group kernels and this
 * backward read bf16 once instead of rounding fp32 per tile), and launches the dO rounding
 * with D, the dK/dV kernel, the dQ kernel and the k_rope sum over heads. */
#include "mla_internal.h"
#include "tile/tile_internal.h"
#include "clmoe/paths.h"

#include <stdio.h>
#include <string.h>

#define BWA_WG MLA_TILE_WG(64) /* 4 warps: 64 keys (dK/dV) or 64 queries (dQ) per work-group */

static int mult_of(const mla_operand *o, int heads, unsigned n)
{
  return o->off % n == 0 && o->ts % n == 0 && (!heads || o->hs % n == 0);
}

/* On unless CLMOE_MLA_TC_ASYNC=0 or CLMOE_MLA_TC_BWD=0 (both default on: on an H100 this
 * backward and the copies took the `gpu` preset's MLA family from 73.5 to 23.6 ms per
 * training step, checks equal to the digit with PoCL's). */
static int bwa_enabled(clmoe_ctx *ctx)
{
  if (!clmoe__knob_int(ctx, CLMOE_K_MLA_TC_ASYNC)) return 0;
  const char *v = clmoe__knob_text(ctx, CLMOE_K_MLA_TC_BWD);
  return !(v && !strcmp(v, "0"));
}

/* 1 when head sizes and the device suit the kernels (bf16 operands aside). */
static int bwa_shape_ok(clmoe_ctx *ctx, const mla_attn_desc *a)
{
  if (!bwa_enabled(ctx)) return 0;
  if (a->Dn % 8 || a->Dr % 8 || a->Dv % 16 || a->Dn + a->Dr > 256 || a->Dv > 128) return 0;
  const int regs = clmoe__tile_features(ctx)->a_from_c;
  const size_t need = MLA_TILE_BWA_LOCAL_BYTES((size_t)(a->Dn + a->Dr), (size_t)a->Dv, regs) + 64;
  return need <= ctx->caps.local_mem_bytes && ctx->caps.max_work_group_size >= BWA_WG;
}

/* 1 when fp32 operands are worth packed bf16 copies: a matrix unit runs the products (and
 * the copy kernel's 4-element loads fit the operands). */
static int bwa_copy_ok(clmoe_ctx *ctx, const mla_attn_desc *a)
{
  return !a->in_bf16 && clmoe__tile_features(ctx)->matrix_unit && a->Dn % 8 == 0 && a->Dr % 8 == 0 &&
         a->Dv % 16 == 0 && mult_of(&a->q, 1, 4) && mult_of(&a->kn, 1, 4) && mult_of(&a->kr, 0, 4) &&
         mult_of(&a->v, 1, 4);
}

int clmoe__mla_tile_bf16_wanted(clmoe_ctx *ctx, const mla_attn_desc *a)
{
  return bwa_copy_ok(ctx, a) && bwa_enabled(ctx);
}

void clmoe__mla_tile_bf16_release(clmoe_ctx *ctx, mla_bf16_copies *c)
{
  for (int i = 0; i < 4; i++) clmoe__scratch_release(ctx, c->mem[i], c->bytes[i]);
  memset(c, 0, sizeof *c);
}

clmoe_status clmoe__mla_tile_bf16_copies(clmoe_ctx *ctx, const mla_attn_desc *a, mla_attn_desc *ab,
                                         mla_bf16_copies *c)
{
  memset(c, 0, sizeof *c);
  *ab = *a;
  ab->in_bf16 = 1;
  if (a->M == 0) return CLMOE_OK;
  char opts[160];
  snprintf(opts, sizeof opts, "-DDN=%d -DDR=%d -DDV=%d -DSTORE_BF16=1 -DOUT_BF16=0 -DMT_BQ=64 -DMT_VEC=1 -DMT_BWD=1 "
           "-DMT_BWA=1 %s", (int)a->Dn, (int)a->Dr, (int)a->Dv, clmoe__tile_options(ctx));
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "tile+mla_layout+mla+mla_tile+mla_tile_bwd_async", opts, "mla_tile_to_bf16", &k));
  const mla_operand *src[4] = {&a->q, &a->kn, &a->kr, &a->v};
  mla_operand *dst[4] = {&ab->q, &ab->kn, &ab->kr, &ab->v};
  const cl_int width[4] = {(cl_int)(a->Dn + a->Dr), (cl_int)a->Dn, (cl_int)a->Dr, (cl_int)a->Dv};
  clmoe_status st = CLMOE_OK;
  for (int i = 0; i < 4; i++) {
    const cl_int heads = i == 2 ? 1 : (cl_int)a->H, M = (cl_int)a->M;
    const cl_uint hs = i == 2 ? 0 : src[i]->hs;
    if (src[i]->off % 4 || src[i]->ts % 4 || hs % 4) {
      st = clmoe__error(CLMOE_ERR_UNSUPPORTED, "MLA attention (tiles): fp32 operand offsets and strides not "
                        "multiples of 4");
      break;
    }
    c->bytes[i] = (size_t)a->M * (size_t)heads * (size_t)width[i] * 2;
    CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, c->bytes[i], &c->mem[i]), fail);
    CLMOE_TRY_GOTO(st, clmoe__args(k, 8, KA(src[i]->buf), KA(src[i]->off), KA(src[i]->ts), KA(hs), KA(width[i]),
                                   KA(heads), KA(M), KA(c->mem[i])), fail);
    CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, k, (size_t)a->M * (size_t)heads * (size_t)(width[i] / 4)), fail);
    *dst[i] = (mla_operand){c->mem[i], 0, (cl_uint)(heads * width[i]), i == 2 ? 0 : (cl_uint)width[i]};
  }
  if (st == CLMOE_OK) return CLMOE_OK;
fail:
  clmoe__mla_tile_bf16_release(ctx, c);
  return st;
}

int clmoe__mla_tile_bwa_covers(clmoe_ctx *ctx, const mla_attn_desc *a)
{
  if (!bwa_shape_ok(ctx, a)) return 0;
  if (a->in_bf16) return mult_of(&a->q, 1, 8) && mult_of(&a->kn, 1, 8) && mult_of(&a->kr, 0, 8) && mult_of(&a->v, 1, 8);
  return bwa_copy_ok(ctx, a);
}

enum { BW_D, BW_KR, BW_DO, BW_COUNT };

/* The kernels on bf16 operands (a->in_bf16, aligned: clmoe__mla_tile_bwa_covers). */
static clmoe_status bwa_launch(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p, const clmoe_tensor *o,
                               const clmoe_tensor *lse, const clmoe_tensor *dout, clmoe_tensor *dq, mla_operand dkn,
                               mla_operand dv, clmoe_tensor *dkr)
{
  const char *op = "MLA attention backward (tiles, double-buffered)";
  const int out_bf16 = o->dtype == CLMOE_BF16;
  char opts[256], bopts[160];
  snprintf(opts, sizeof opts, "-DDN=%d -DDR=%d -DDV=%d -DSTORE_BF16=1 -DOUT_BF16=%d -DMT_BQ=64 -DMT_VEC=1 "
           "-DMT_BWD=1 -DMT_BWA=1 %s", (int)a->Dn, (int)a->Dr, (int)a->Dv, out_bf16, clmoe__tile_options(ctx));
  snprintf(bopts, sizeof bopts, "-DDN=%d -DDR=%d -DDV=%d -DSTORE_BF16=1 -DOUT_BF16=%d", (int)a->Dn, (int)a->Dr,
           (int)a->Dv, out_bf16);
  cl_kernel kkv, kq, kprep, kred;
  const char *family = "tile+mla_layout+mla+mla_tile+mla_tile_bwd_async";
  CLMOE_TRY(clmoe__kernel(ctx, family, opts, "mla_tile_bwd_kv_async", &kkv));
  CLMOE_TRY(clmoe__kernel(ctx, family, opts, "mla_tile_bwd_q_async", &kq));
  CLMOE_TRY(clmoe__kernel(ctx, family, opts, "mla_tile_bwd_prep", &kprep));
  CLMOE_TRY(clmoe__kernel(ctx, "mla_layout+mla+mla_bwd", bopts, "mla_krope_reduce", &kred));
  CLMOE_TRY(clmoe__kernels_fit(ctx, op, (cl_kernel[]){kkv, kq}, 2, BWA_WG));
  if (p->M == 0) return CLMOE_OK;
  const size_t rows_n = (size_t)(p->M * a->H);
  const size_t bytes[BW_COUNT] = {rows_n * 4, rows_n * (size_t)a->Dr * 4, rows_n * (size_t)a->Dv * 2};
  cl_mem m[BW_COUNT] = {NULL, NULL, NULL}, tkv = NULL, tq = NULL;
  size_t bkv = 0, bq = 0;
  int nkv = 0, nq = 0;
  clmoe_status st = CLMOE_OK;
  for (int i = 0; i < BW_COUNT; i++) CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, bytes[i], &m[i]), done);
  CLMOE_TRY_GOTO(st, clmoe__mla_build_tiles(ctx, p, MLA_TILE_BK, 0, &tkv, &bkv, &nkv), done);
  CLMOE_TRY_GOTO(st, clmoe__mla_build_tiles(ctx, p, MLA_TILE_BK, 1, &tq, &bq, &nq), done);
  cl_int rows = (cl_int)rows_n, H = (cl_int)a->H, M = (cl_int)p->M;
  cl_ulong oo = (cl_ulong)o->offset, doo = (cl_ulong)dout->offset, lo = (cl_ulong)lse->offset;
  cl_ulong dqo = (cl_ulong)dq->offset, dkro = (cl_ulong)dkr->offset;
  cl_uint dkr_ts = (cl_uint)a->Dr;
  float sl2 = a->scale * 1.4426950408889634f, scale = a->scale;
  CLMOE_TRY_GOTO(st, clmoe__args(kprep, 7, KA(o->buf), KA(oo), KA(dout->buf), KA(doo), KA(rows), KA(m[BW_D]),
                                 KA(m[BW_DO])), done);
  CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, kprep, (size_t)rows), done);
  /* the 23 arguments both kernels share (MT_BWA_ARGS), then each one's outputs */
  cl_kernel both[2] = {kkv, kq};
  cl_int nt[2] = {nkv, nq};
  cl_mem tt[2] = {tkv, tq};
  for (int i = 0; i < 2; i++)
    CLMOE_TRY_GOTO(st, clmoe__args(both[i], 24, KA(a->q.buf), KA(a->q.off), KA(a->q.ts), KA(a->q.hs),
                                   KA(a->kn.buf), KA(a->kn.off), KA(a->kn.ts), KA(a->kn.hs), KA(a->kr.buf),
                                   KA(a->kr.off), KA(a->kr.ts), KA(a->v.buf), KA(a->v.off), KA(a->v.ts),
                                   KA(a->v.hs), KA(m[BW_DO]), KA(lse->buf), KA(lo), KA(m[BW_D]), KA(tt[i]),
                                   KA(nt[i]), KA(H), KA(sl2), KA(scale)), done);
  const void *kv_args[9] = {&dkn.buf, &dkn.off, &dkn.ts, &dkn.hs, &dv.buf, &dv.off, &dv.ts, &dv.hs, &m[BW_KR]};
  const size_t kv_sizes[9] = {sizeof dkn.buf, sizeof dkn.off, sizeof dkn.ts, sizeof dkn.hs, sizeof dv.buf,
                              sizeof dv.off, sizeof dv.ts, sizeof dv.hs, sizeof m[BW_KR]};
  for (cl_uint i = 0; i < 9; i++) CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 24 + i, kv_sizes[i], kv_args[i]), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kq, 24, sizeof dq->buf, &dq->buf), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kq, 25, sizeof dqo, &dqo), done);
  size_t lwg[2] = {BWA_WG, 1};
  size_t gkv[2] = {(size_t)nkv * BWA_WG, (size_t)a->H}, gq[2] = {(size_t)nq * BWA_WG, (size_t)a->H};
  if (nkv) CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kkv, 2, gkv, lwg), done);
  if (nq) CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kq, 2, gq, lwg), done);
  CLMOE_TRY_GOTO(st, clmoe__args(kred, 6, KA(m[BW_KR]), KA(H), KA(M), KA(dkr->buf), KA(dkro), KA(dkr_ts)), done);
  st = clmoe__launch1d(ctx, kred, (size_t)(p->M * a->Dr));
done:
  for (int i = 0; i < BW_COUNT; i++) clmoe__scratch_release(ctx, m[i], bytes[i]);
  clmoe__scratch_release(ctx, tkv, bkv);
  clmoe__scratch_release(ctx, tq, bq);
  return st;
}

clmoe_status clmoe__mla_tile_bwa_run(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p, const clmoe_tensor *o,
                                     const clmoe_tensor *lse, const clmoe_tensor *dout, clmoe_tensor *dq,
                                     mla_operand dkn, mla_operand dv, clmoe_tensor *dkr)
{
  if (a->in_bf16) return bwa_launch(ctx, a, p, o, lse, dout, dq, dkn, dv, dkr);
  mla_attn_desc ab;
  mla_bf16_copies c;
  CLMOE_TRY(clmoe__mla_tile_bf16_copies(ctx, a, &ab, &c));
  clmoe_status st = bwa_launch(ctx, &ab, p, o, lse, dout, dq, dkn, dv, dkr);
  clmoe__mla_tile_bf16_release(ctx, &c);
  return st;
}
