/* MLA attention on the tile interface: host side of kernels_cl/mla/mla_tile.cl (forward,
 * with its double-buffered and warp-group variants) and mla_tile_bwd.cl (backward).
 * Decides whether the tile kernel covers a call (head sizes, local memory, work-group
 * size), picks the query tile (64 or 128 rows) and the staging width, and launches one
 * work-group per (query tile, head) over the plan's tile table. */
#include "mla_internal.h"
#include "tile/tile_internal.h"
#include "clmoe/paths.h"
#include "runtime/ptx_sm90a.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TILE_MAX_DQK 256 /* A fragments of Q in registers: 16 k-steps at most */
#define TILE_MAX_DV 128  /* O accumulators in registers: 16 tiles of 8 columns at most */

/* The local memory sizes come from kernels_cl/mla/mla_layout.cl, the kernels' own; the
 * checks against the device keep 64 bytes of slack beyond them. */
static size_t dqk_of(const mla_attn_desc *a) { return (size_t)(a->Dn + a->Dr); }

/* Local memory of mla_tile_fwd with bq query rows. */
static size_t tile_local_bytes(const mla_attn_desc *a, int bq)
{
  return MLA_TILE_FWD_LOCAL_BYTES(dqk_of(a), (size_t)a->Dv, (size_t)bq) + 64;
}

/* 1 when every operand offset, stride and head size is a multiple of 4 elements (so the
 * kernel stages 4 elements per load: 8 bytes of bf16 or 16 of fp32, naturally aligned). */
static int tile_vec_ok(const mla_attn_desc *a)
{
  const cl_ulong v[] = {(cl_ulong)a->Dn, (cl_ulong)a->Dr, (cl_ulong)a->Dv, a->q.off, a->q.ts, a->q.hs,
                        a->kn.off, a->kn.ts, a->kn.hs, a->kr.off, a->kr.ts, a->v.off, a->v.ts, a->v.hs};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (v[i] % 4) return 0;
  return 1;
}

/* Shape and device limits for tiles of bq rows; an UNSUPPORTED status says which. */
static clmoe_status tile_covers(clmoe_ctx *ctx, const mla_attn_desc *a, int bq)
{
  const char *op = "MLA attention forward (tiles)";
  if (a->Dn + a->Dr > TILE_MAX_DQK || a->Dv > TILE_MAX_DV)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: Dn + Dr = %lld, Dv = %lld; the tile kernel covers Dn + Dr "
                        "<= %d and Dv <= %d", op, (long long)(a->Dn + a->Dr), (long long)a->Dv, TILE_MAX_DQK,
                        TILE_MAX_DV);
  const size_t wg = MLA_TILE_WG((size_t)bq), need = tile_local_bytes(a, bq);
  if (ctx->caps.max_work_group_size < wg)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %d-row query tiles need work-groups of %zu work-items; the "
                        "device allows %zu", op, bq, wg, ctx->caps.max_work_group_size);
  if (need > ctx->caps.local_mem_bytes)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: head sizes Dn + Dr = %lld, Dv = %lld need %zu bytes of local "
                        "memory; the device has %llu", op, (long long)(a->Dn + a->Dr), (long long)a->Dv, need,
                        (unsigned long long)ctx->caps.local_mem_bytes);
  return CLMOE_OK;
}

/* 1 when the double-buffered kernel (kernels_cl/mla/mla_tile_async.cl) takes the call: bf16
 * storage, every offset and stride a multiple of 8 elements (16-byte copies), Dn and Dr
 * multiples of 8, Dv of 16, its local memory on the device; CLMOE_MLA_TC_ASYNC=0 turns it
 * off (to compare with mla_tile_fwd). */
static int tile_async_ok(clmoe_ctx *ctx, const mla_attn_desc *a, int bq)
{
  if (!clmoe__knob_int(ctx, CLMOE_K_MLA_TC_ASYNC) || !a->in_bf16 || a->Dn % 8 || a->Dr % 8 || a->Dv % 16) return 0;
  const cl_ulong v[] = {a->q.off, a->q.ts, a->q.hs, a->kn.off, a->kn.ts, a->kn.hs, a->kr.off, a->kr.ts,
                        a->v.off, a->v.ts, a->v.hs};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (v[i] % 8) return 0;
  const int regs = clmoe__tile_features(ctx)->a_from_c; /* P in registers: no scratch */
  const size_t need =
      MLA_TILE_ASYNC_LOCAL_BYTES(dqk_of(a), (size_t)a->Dv, (size_t)bq, regs) + 64;
  return need <= ctx->caps.local_mem_bytes;
}

/* The warp-group kernel's pipeline (kernels_cl/mla/mla_tile_wgmma.cl): keys per block, blocks
 * copied ahead, the warp groups taking turns (a V buffer more). */
typedef struct tile_wgmma_cfg {
  int bk, ahead, pp;
} tile_wgmma_cfg;

static size_t tile_wgmma_local(clmoe_ctx *ctx, const mla_attn_desc *a, int bq, const tile_wgmma_cfg *cfg)
{
  const int regs = clmoe__tile_features(ctx)->a_from_c; /* P in registers: no scratch */
  return MLA_TILE_WGMMA_LOCAL_BYTES(dqk_of(a), (size_t)cfg->bk, (size_t)cfg->ahead, (size_t)cfg->pp,
                                    (size_t)bq, regs);
}

/* 1 when the pipeline fits the local memory the device grants (clmoe__local_mem_optin);
 * turns need two warp groups, so 64-row tiles drop them. */
static int tile_wgmma_fits(clmoe_ctx *ctx, const mla_attn_desc *a, int bq, tile_wgmma_cfg *cfg)
{
  cfg->pp = cfg->pp && bq == 128;
  return tile_wgmma_local(ctx, a, bq, cfg) <= clmoe__local_mem_optin(ctx);
}

/* 1 when the warp-group kernel takes the call, with its pipeline in *cfg. By default on
 * NVIDIA sm_90 with the PTX tiles (unless its sm_90a build failed here): 64-key blocks with
 * the two warp groups of a 128-row tile taking turns when the local memory the device
 * grants (clmoe__local_mem_optin) holds them (113 KB), else in step (98 KB), else 32-key
 * blocks; 1 block ahead (the fastest on the H200: docs/benchmarks-tiles.md).
 * CLMOE_MLA_TC_WGMMA: "0" never; "1" that choice on any device (the portable tiles run its
 * layouts: tests); "bk,ahead[,turns]" that pipeline. Also the double-buffered kernel's
 * conditions and Dv = 128; the local memory counted without the 1 KB the compiler may add
 * to align it. */
static int tile_wgmma_ok(clmoe_ctx *ctx, const mla_attn_desc *a, int bq, tile_wgmma_cfg *cfg)
{
  const char *e = clmoe__knob_text(ctx, CLMOE_K_MLA_TC_WGMMA); /* validated by knobs.c */
  if (e && !strcmp(e, "0")) return 0;
  if (!e && (!clmoe__tile_features(ctx)->warp_group || !clmoe__wgmma_usable(ctx)))
    return 0;
  if (!tile_async_ok(ctx, a, bq) || a->Dv != 128) return 0;
  if (e && strcmp(e, "1")) {
    *cfg = (tile_wgmma_cfg){0, 0, 1};
    const int n = sscanf(e, "%d,%d,%d", &cfg->bk, &cfg->ahead, &cfg->pp);
    if (n < 2 || (cfg->bk != 32 && cfg->bk != 64) || cfg->ahead < 1 || cfg->ahead > 3 || cfg->pp < 0 || cfg->pp > 1)
      return 0;
    return tile_wgmma_fits(ctx, a, bq, cfg);
  }
  static const tile_wgmma_cfg order[] = {{64, 1, 1}, {64, 1, 0}, {32, 1, 1}, {32, 1, 0}};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    *cfg = order[i];
    if (tile_wgmma_fits(ctx, a, bq, cfg)) return 1;
  }
  return 0;
}

/* Builds (or finds) the kernel for tiles of bq rows and checks that the compiled kernel
 * runs work-groups of that size (registers permitting). */
static clmoe_status tile_kernel(clmoe_ctx *ctx, const mla_attn_desc *a, int bq, int out_bf16, cl_kernel *k)
{
  char opts[384], wgopts[96] = "";
  tile_wgmma_cfg cfg;
  const int wg = tile_wgmma_ok(ctx, a, bq, &cfg), async = !wg && tile_async_ok(ctx, a, bq);
  const int ptx = clmoe__tile_features(ctx)->inline_ptx; /* warp-group code: retargeted PTX */
  if (wg)
    snprintf(wgopts, sizeof wgopts, " -DMT_WGMMA=1 -DTW_BK=%d -DTW_AHEAD=%d -DTW_PP=%d%s", cfg.bk, cfg.ahead,
             cfg.pp, ptx ? " " CLMOE_PTX_SM90A_OPTION : "");
  snprintf(opts, sizeof opts, "-DDN=%d -DDR=%d -DDV=%d -DSTORE_BF16=%d -DOUT_BF16=%d -DMT_BQ=%d -DMT_VEC=%d%s %s",
           (int)a->Dn, (int)a->Dr, (int)a->Dv, a->in_bf16, out_bf16, bq, tile_vec_ok(a),
           wg ? wgopts : async ? " -DMT_ASYNC=1" : "", clmoe__tile_options(ctx));
  if (wg) {
    clmoe_status st = clmoe__wgmma_kernel(ctx, "tile+mla_layout+mla+mla_tile+mla_tile_wgmma", opts,
                                          "mla_tile_fwd_wgmma", "CLMOE_MLA_TC_WGMMA", k);
    if (st == CLMOE_ERR_UNSUPPORTED) return tile_kernel(ctx, a, bq, out_bf16, k); /* the async kernel */
    CLMOE_TRY(st);
  } else if (async) {
    CLMOE_TRY(clmoe__kernel(ctx, "tile+mla_layout+mla+mla_tile+mla_tile_async", opts, "mla_tile_fwd_async",
                            k));
  } else {
    CLMOE_TRY(clmoe__kernel(ctx, "tile+mla_layout+mla+mla_tile", opts, "mla_tile_fwd", k));
  }
  return clmoe__kernels_fit(ctx, "MLA attention forward (tiles)", k, 1, MLA_TILE_WG((size_t)bq));
}

clmoe_status clmoe__mla_tile_fwd_prepare(clmoe_ctx *ctx, const mla_attn_desc *a, int64_t max_len,
                                         int *bq)
{
  if (*bq != 0 && *bq != 64 && *bq != 128)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "MLA attention forward (tiles): query tiles of %d rows; "
                        "64 or 128 (0: chosen)", *bq);
  cl_kernel k;
  if (*bq == 0) {
    /* 128 rows halve the K/V traffic per query; 64 keep more work-groups on short inputs
     * and waste less on a sequence's last tile. */
    *bq = max_len >= 1024 && tile_covers(ctx, a, 128) == CLMOE_OK ? 128 : 64;
    if (*bq == 128 && tile_kernel(ctx, a, 128, 0, &k) != CLMOE_OK) {
      clmoe_clear_error();
      *bq = 64;
    }
  }
  CLMOE_TRY(tile_covers(ctx, a, *bq));
  return tile_kernel(ctx, a, *bq, 0, &k);
}

clmoe_status clmoe__mla_tile_fwd_launch(clmoe_ctx *ctx, const mla_attn_desc *a, int bq,
                                        cl_mem tiles, int ntiles, clmoe_tensor *o, clmoe_tensor *lse)
{
  cl_kernel k = NULL;
  CLMOE_TRY(tile_covers(ctx, a, bq));
  CLMOE_TRY(tile_kernel(ctx, a, bq, o->dtype == CLMOE_BF16, &k));
  if (ntiles == 0) return CLMOE_OK;
  cl_int H = (cl_int)a->H, has_lse = lse != NULL, nt = ntiles;
  float sl2 = a->scale * 1.4426950408889634f;
  cl_mem lm = lse ? lse->buf : o->buf;
  cl_ulong oo = (cl_ulong)o->offset, lo = lse ? (cl_ulong)lse->offset : 0;
  CLMOE_TRY(clmoe__args(k, 24, KA(a->q.buf), KA(a->q.off), KA(a->q.ts), KA(a->q.hs), KA(a->kn.buf),
                        KA(a->kn.off), KA(a->kn.ts), KA(a->kn.hs), KA(a->kr.buf), KA(a->kr.off), KA(a->kr.ts),
                        KA(a->v.buf), KA(a->v.off), KA(a->v.ts), KA(a->v.hs), KA(tiles), KA(nt), KA(H),
                        KA(sl2), KA(o->buf), KA(oo), KA(lm), KA(lo), KA(has_lse)));
  /* heads in dimension 0 (started first: tile_fwd_tile), tiles in dimension 1, at most
   * 65535 of them per launch (CLMOE_MLA_TC_TILES_PER_LAUNCH: fewer, for tests); argument 16
   * (ntiles) counts the tiles not yet launched, the longest first */
  int per = (int)clmoe__knob_int(ctx, CLMOE_K_MLA_TC_TILES_PER_LAUNCH);
  const int most = clmoe__device_defaults_for(ctx, clmoe__tile_features(ctx))->mla_tiles_per_launch;
  if (per <= 0 || per > most) per = most;
  for (int done = 0; done < ntiles; done += per) {
    cl_int left = ntiles - done;
    CLMOE_CL(clSetKernelArg(k, 16, sizeof left, &left));
    size_t global[2] = {(size_t)a->H * MLA_TILE_WG((size_t)bq), (size_t)(left < per ? left : per)};
    size_t local[2] = {MLA_TILE_WG((size_t)bq), 1};
    CLMOE_TRY(clmoe__launch(ctx, k, 2, global, local));
  }
  return CLMOE_OK;
}

clmoe_status clmoe__mla_tile_fwd_run(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p, int bq,
                                     clmoe_tensor *o, clmoe_tensor *lse)
{
  /* fp32 operands on a matrix unit: packed bf16 copies first, so the double-buffered or
   * warp-group kernel reads them (the same bf16 values the fp32 kernel rounds per tile) */
  if (!a->in_bf16 && p->M > 0 && clmoe__mla_tile_bf16_wanted(ctx, a)) {
    mla_attn_desc ab;
    mla_bf16_copies c;
    CLMOE_TRY(clmoe__mla_tile_bf16_copies(ctx, a, &ab, &c));
    clmoe_status st = clmoe__mla_tile_fwd_run(ctx, &ab, p, bq, o, lse);
    clmoe__mla_tile_bf16_release(ctx, &c);
    return st;
  }
  CLMOE_TRY(clmoe__mla_tile_fwd_prepare(ctx, a, p->max_len, &bq));
  if (p->M == 0) return CLMOE_OK;
  CLMOE_TRY(clmoe__mla_plan_fwd_tiles(ctx, p, bq));
  return clmoe__mla_tile_fwd_launch(ctx, a, bq, p->fwd_tiles, p->nfwd, o, lse);
}

/* ---- backward (kernels_cl/mla/mla_tile_bwd.cl) ---------------------------------------------- */

#define TILE_BWD_WG MLA_TILE_WG(64) /* 4 warps: 64 keys (dK/dV) or 64 queries (dQ) per work-group */

static size_t tile_bwd_local_bytes(clmoe_ctx *ctx, const mla_attn_desc *a)
{
  const int regs = clmoe__tile_features(ctx)->a_from_c; /* P^T, dS^T in registers: no scratch */
  return MLA_TILE_BWD_LOCAL_BYTES(dqk_of(a), (size_t)a->Dv, regs) + 64;
}

enum { TB_D, TB_KR, TB_COUNT };

clmoe_status clmoe__mla_tile_bwd_run(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p,
                                     const clmoe_tensor *o, const clmoe_tensor *lse,
                                     const clmoe_tensor *dout, clmoe_tensor *dq, mla_operand dkn,
                                     mla_operand dv, clmoe_tensor *dkr)
{
  const char *op = "MLA attention backward (tiles)";
  if (clmoe__mla_tile_bwa_covers(ctx, a)) return clmoe__mla_tile_bwa_run(ctx, a, p, o, lse, dout, dq, dkn, dv, dkr);
  if (a->Dn + a->Dr > TILE_MAX_DQK || a->Dv > TILE_MAX_DV)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: Dn + Dr = %lld, Dv = %lld; the tile kernels cover Dn + Dr "
                        "<= %d and Dv <= %d", op, (long long)(a->Dn + a->Dr), (long long)a->Dv, TILE_MAX_DQK,
                        TILE_MAX_DV);
  const size_t need = tile_bwd_local_bytes(ctx, a);
  if (need > ctx->caps.local_mem_bytes || ctx->caps.max_work_group_size < TILE_BWD_WG)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: needs %zu bytes of local memory and work-groups of %d; the "
                        "device has %llu and %zu", op, need, TILE_BWD_WG,
                        (unsigned long long)ctx->caps.local_mem_bytes, ctx->caps.max_work_group_size);
  const int out_bf16 = o->dtype == CLMOE_BF16, vec = tile_vec_ok(a) && dout->offset % 4 == 0;
  char opts[256], bopts[160];
  snprintf(opts, sizeof opts, "-DDN=%d -DDR=%d -DDV=%d -DSTORE_BF16=%d -DOUT_BF16=%d -DMT_BQ=64 -DMT_VEC=%d "
           "-DMT_BWD=1 %s", (int)a->Dn, (int)a->Dr, (int)a->Dv, a->in_bf16, out_bf16, vec, clmoe__tile_options(ctx));
  /* the portable backward's program (mla_attn.c's options) for the k_rope sum over heads */
  snprintf(bopts, sizeof bopts, "-DDN=%d -DDR=%d -DDV=%d -DSTORE_BF16=%d -DOUT_BF16=%d", (int)a->Dn, (int)a->Dr,
           (int)a->Dv, a->in_bf16, out_bf16);
  cl_kernel kkv, kq, kdot, kred;
  const char *family = "tile+mla_layout+mla+mla_tile+mla_tile_bwd";
  CLMOE_TRY(clmoe__kernel(ctx, family, opts, "mla_tile_bwd_kv", &kkv));
  CLMOE_TRY(clmoe__kernel(ctx, family, opts, "mla_tile_bwd_q", &kq));
  CLMOE_TRY(clmoe__kernel(ctx, family, opts, "mla_tile_bwd_dot", &kdot));
  CLMOE_TRY(clmoe__kernel(ctx, "mla_layout+mla+mla_bwd", bopts, "mla_krope_reduce", &kred));
  CLMOE_TRY(clmoe__kernels_fit(ctx, op, (cl_kernel[]){kkv, kq}, 2, TILE_BWD_WG));
  if (p->M == 0) return CLMOE_OK;
  const size_t bytes[TB_COUNT] = {(size_t)(p->M * a->H) * 4, (size_t)(p->M * a->H * a->Dr) * 4};
  cl_mem m[TB_COUNT] = {NULL, NULL}, tkv = NULL, tq = NULL;
  size_t bkv = 0, bq = 0;
  int nkv = 0, nq = 0;
  clmoe_status st = CLMOE_OK;
  for (int i = 0; i < TB_COUNT; i++) CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, bytes[i], &m[i]), done);
  CLMOE_TRY_GOTO(st, clmoe__mla_build_tiles(ctx, p, MLA_TILE_BK, 0, &tkv, &bkv, &nkv), done);
  CLMOE_TRY_GOTO(st, clmoe__mla_build_tiles(ctx, p, MLA_TILE_BK, 1, &tq, &bq, &nq), done);
  cl_int rows = (cl_int)(p->M * a->H), H = (cl_int)a->H, M = (cl_int)p->M;
  cl_ulong oo = (cl_ulong)o->offset, doo = (cl_ulong)dout->offset, lo = (cl_ulong)lse->offset;
  cl_ulong dqo = (cl_ulong)dq->offset, dkro = (cl_ulong)dkr->offset;
  cl_uint dkr_ts = (cl_uint)a->Dr;
  float sl2 = a->scale * 1.4426950408889634f, scale = a->scale;
  CLMOE_TRY_GOTO(st, clmoe__args(kdot, 6, KA(o->buf), KA(oo), KA(dout->buf), KA(doo), KA(rows), KA(m[TB_D])), done);
  CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, kdot, (size_t)rows), done);
  /* the 24 arguments both kernels share (MT_BWD_ARGS), then each one's outputs */
  cl_kernel both[2] = {kkv, kq};
  cl_int nt[2] = {nkv, nq};
  cl_mem tt[2] = {tkv, tq};
  for (int i = 0; i < 2; i++)
    CLMOE_TRY_GOTO(st, clmoe__args(both[i], 24, KA(a->q.buf), KA(a->q.off), KA(a->q.ts), KA(a->q.hs),
                                   KA(a->kn.buf), KA(a->kn.off), KA(a->kn.ts), KA(a->kn.hs), KA(a->kr.buf),
                                   KA(a->kr.off), KA(a->kr.ts), KA(a->v.buf), KA(a->v.off), KA(a->v.ts),
                                   KA(a->v.hs), KA(dout->buf), KA(doo), KA(lse->buf), KA(lo), KA(m[TB_D]),
                                   KA(tt[i]), KA(nt[i]), KA(H), KA(sl2)), done);
  const void *kv_args[10] = {&scale, &dkn.buf, &dkn.off, &dkn.ts, &dkn.hs, &dv.buf, &dv.off, &dv.ts, &dv.hs, &m[TB_KR]};
  const size_t kv_sizes[10] = {sizeof scale, sizeof dkn.buf, sizeof dkn.off, sizeof dkn.ts, sizeof dkn.hs,
                               sizeof dv.buf, sizeof dv.off, sizeof dv.ts, sizeof dv.hs, sizeof m[TB_KR]};
  for (cl_uint i = 0; i < 10; i++) CLMOE_CL_GOTO(st, clSetKernelArg(kkv, 24 + i, kv_sizes[i], kv_args[i]), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kq, 24, sizeof scale, &scale), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kq, 25, sizeof dq->buf, &dq->buf), done);
  CLMOE_CL_GOTO(st, clSetKernelArg(kq, 26, sizeof dqo, &dqo), done);
  size_t lwg[2] = {TILE_BWD_WG, 1};
  size_t gkv[2] = {(size_t)nkv * TILE_BWD_WG, (size_t)a->H}, gq[2] = {(size_t)nq * TILE_BWD_WG, (size_t)a->H};
  if (nkv) CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kkv, 2, gkv, lwg), done);
  if (nq) CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kq, 2, gq, lwg), done);
  CLMOE_TRY_GOTO(st, clmoe__args(kred, 6, KA(m[TB_KR]), KA(H), KA(M), KA(dkr->buf), KA(dkro), KA(dkr_ts)), done);
  st = clmoe__launch1d(ctx, kred, (size_t)(p->M * a->Dr));
done:
  for (int i = 0; i < TB_COUNT; i++) clmoe__scratch_release(ctx, m[i], bytes[i]);
  clmoe__scratch_release(ctx, tkv, bkv);
  clmoe__scratch_release(ctx, tq, bq);
  return st;
}
