/* The bf16 GEMM on the tile interface: the choice among its three kernels (register-staged,
 * pipelined, warp-group) and of their blocks by the tile implementation's features, build
 * options, launch. Kernels and data layout: kernels_cl/gemm/gemm_tile.cl, gemm_async.cl,
 * gemm_wgmma.cl. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/gemm.h"
#include "gemm/gemm_internal.h"
#include "runtime/internal.h"
#include "runtime/ptx_sm90a.h"
#include "tile/tile_internal.h"

/* Work-group blocks of C the kernel is built for: bm x bn, warps_m x warps_n groups of 32
 * lanes (a warp computes (bm / warps_m) x (bn / warps_n)). */
typedef struct tile_block {
  int bm, bn, warps_m, warps_n;
} tile_block;

static const tile_block blocks[] = {
    /* 64 x 64 per warp (32 accumulator tiles, 1.5 fragment loads per mma), 4 warps: two
     * work-groups fit an SM (registers, 32 KB of local memory), one computing while the
     * other waits for memory. The matrix units' default: 166-186 TFLOP/s at 8192^3 on the
     * H200 against 149-183 for 128x256 (docs/benchmarks.md). */
    {128, 128, 2, 2},
    {128, 256, 2, 4}, /* 64 x 64 per warp, 8 warps, 48 KB: one work-group per SM */
    {64, 64, 2, 2},   /* 32 x 32 per warp: small problems, devices without a matrix unit */
};
#define NBLOCKS ((int)(sizeof blocks / sizeof blocks[0]))

static size_t block_local_bytes(const tile_block *b) { return (size_t)2 * 16 * 4 * (size_t)(b->bm + b->bn); }
static size_t block_threads(const tile_block *b) { return (size_t)b->warps_m * b->warps_n * 32; }

static int block_fits(const clmoe_ctx *ctx, const tile_block *b)
{
  return block_local_bytes(b) <= ctx->caps.local_mem_bytes &&
         block_threads(b) <= ctx->caps.max_work_group_size;
}

clmoe_status clmoe_ctx_set_gemm_tile_block(clmoe_ctx *ctx, int bm, int bn)
{
  if (bm == 0 && bn == 0) {
    ctx->gemm_tile_bm = ctx->gemm_tile_bn = 0;
    return CLMOE_OK;
  }
  for (int i = 0; i < NBLOCKS; i++)
    if (blocks[i].bm == bm && blocks[i].bn == bn) {
      if (!block_fits(ctx, &blocks[i]))
        return clmoe__error(CLMOE_ERR_UNSUPPORTED,
                            "gemm tile block %dx%d needs %zu bytes of local memory and %zu "
                            "work-items; the device has %llu and %zu", bm, bn,
                            block_local_bytes(&blocks[i]), block_threads(&blocks[i]),
                            (unsigned long long)ctx->caps.local_mem_bytes,
                            ctx->caps.max_work_group_size);
      ctx->gemm_tile_bm = bm, ctx->gemm_tile_bn = bn;
      return CLMOE_OK;
    }
  return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT,
                      "gemm tile block %dx%d: not one of 128x256, 128x128, 64x64", bm, bn);
}

/* The block for an m x n (x batch) product: the caller's; else on a matrix unit 128 x 128
 * when it fits the device and gives every compute unit a work-group; else 64 x 64. */
static const tile_block *choose_block(clmoe_ctx *ctx, const clmoe__gemm_shape *s)
{
  for (int i = 0; i < NBLOCKS; i++)
    if (blocks[i].bm == ctx->gemm_tile_bm && blocks[i].bn == ctx->gemm_tile_bn) return &blocks[i];
  const tile_block *big = &blocks[0], *small = &blocks[NBLOCKS - 1];
  if (!clmoe__tile_features(ctx)->matrix_unit || !block_fits(ctx, big)) return small;
  int64_t groups = (s->m + big->bm - 1) / big->bm * ((s->n + big->bn - 1) / big->bn) * s->batch;
  return groups >= (int64_t)ctx->caps.compute_units ? big : small;
}

/* The pipelined kernel (kernels_cl/gemm/gemm_async.cl) for operands it can copy 16 bytes at a
 * time: bm x bn blocks, warps, local stages of 32 k. */
typedef struct async_block {
  int bm, bn, warps_m, warps_n, stages, bk;
} async_block;

static const async_block async_blocks[] = {
    {128, 128, 2, 2, 3, 32}, /* 64 x 64 per warp, 3 stages = 48 KB: matrix units */
    {64, 64, 2, 2, 2, 32},   /* 32 x 32 per warp, 16 KB: small problems, portable tiles */
};

static size_t async_local_bytes(const async_block *b)
{
  return (size_t)b->stages * (size_t)(b->bm + b->bn) * (size_t)b->bk * 2;
}

/* CLMOE_GEMM_ASYNC: unset = the table above; "0" = never (the register-staged kernel
 * only); "bm,bn,warps_m,warps_n,stages[,bk]" = that block, bk 32 (default) or 16 (for
 * tuning). NULL: not used. */
static const async_block *choose_async(clmoe_ctx *ctx, const clmoe__gemm_shape *s, async_block *own)
{
  const char *e = clmoe__knob_text(ctx, CLMOE_K_GEMM_ASYNC); /* validated by knobs.c */
  if (e && !strcmp(e, "0")) return NULL;
  if (ctx->gemm_tile_bm) return NULL; /* the caller chose a block of gemm_tile */
  const async_block *b = NULL;
  own->bk = 32;
  if (e && *e && sscanf(e, "%d,%d,%d,%d,%d,%d", &own->bm, &own->bn, &own->warps_m, &own->warps_n,
                        &own->stages, &own->bk) >= 5)
    b = own;
  else {
    const async_block *big = &async_blocks[0], *small = &async_blocks[1];
    int64_t groups = (s->m + big->bm - 1) / big->bm * ((s->n + big->bn - 1) / big->bn) * s->batch;
    int use_big =
        clmoe__tile_features(ctx)->matrix_unit && groups >= (int64_t)ctx->caps.compute_units;
    b = use_big ? big : small;
  }
  if (async_local_bytes(b) > ctx->caps.local_mem_bytes ||
      (size_t)b->warps_m * b->warps_n * 32 > ctx->caps.max_work_group_size)
    return NULL;
  return b;
}

/* The warp-group kernel (kernels_cl/gemm/gemm_wgmma.cl): bm x bn blocks (bm / 64 warp groups),
 * stages of bk k, products kept in flight across steps (0 or 1). NVIDIA compute
 * capability 9.x (sm_90a). */
typedef struct wgmma_block {
  int bm, bn, bk, stages, inflight;
} wgmma_block;

static const wgmma_block wgmma_blocks[] = {
    /* 2 warp groups, 6 stages of 32 k (96 KB: where clmoe__local_mem_optin grants it),
     * products waited for within the step: 2-5% over the next in all four layouts, more
     * than 2 stages of 64 k (docs/benchmarks-tiles.md) */
    {128, 128, 32, 6, 0},
    /* 3 stages of 32 k (48 KB): 94-112 registers, 2 work-groups per SM; 393 / 439 TFLOP/s
     * (NT) at 4096^3 / 8192^3 on the H200, against 269 / 280 for 16-k stages with products
     * in flight */
    {128, 128, 32, 3, 0},
    {64, 128, 32, 3, 0}, /* 1 warp group: problems with fewer blocks than compute units */
};

static size_t wgmma_local_bytes(const wgmma_block *b)
{
  return (size_t)b->stages * (size_t)(b->bm + b->bn) * (size_t)b->bk * 2;
}

/* CLMOE_GEMM_WGMMA: unset = the table above on NVIDIA compute capability 9.x (while its
 * build has not failed here); "0" = never; "bm,bn,bk,stages[,inflight]" = that block on any device (the
 * portable tiles run it too: tests, tuning). NULL: not used. */
static const wgmma_block *choose_wgmma(clmoe_ctx *ctx, const clmoe__gemm_shape *s, wgmma_block *own)
{
  const char *e = clmoe__knob_text(ctx, CLMOE_K_GEMM_WGMMA); /* validated by knobs.c */
  if ((e && !strcmp(e, "0")) || ctx->gemm_tile_bm || !clmoe__wgmma_usable(ctx)) return NULL;
  const wgmma_block *b = NULL;
  own->inflight = 1;
  if (e && *e && sscanf(e, "%d,%d,%d,%d,%d", &own->bm, &own->bn, &own->bk, &own->stages, &own->inflight) >= 4)
    b = own;
  else {
    /* wgmma is sm_90a's alone (Blackwell has other matrix instructions) */
    if (!clmoe__tile_features(ctx)->warp_group) return NULL;
    const wgmma_block *big = &wgmma_blocks[0];
    if (wgmma_local_bytes(big) > clmoe__local_mem_optin(ctx)) big = &wgmma_blocks[1]; /* 48 KB */
    int64_t groups = (s->m + big->bm - 1) / big->bm * ((s->n + big->bn - 1) / big->bn) * s->batch;
    b = groups >= (int64_t)ctx->caps.compute_units ? big : &wgmma_blocks[2];
  }
  if (wgmma_local_bytes(b) > clmoe__local_mem_optin(ctx) || (size_t)b->bm * 2 > ctx->caps.max_work_group_size)
    return NULL;
  return b;
}

/* Builds the warp-group kernel for a block (CLMOE_ERR_UNSUPPORTED: the driver cannot; the
 * pipelined kernel instead, see clmoe__wgmma_kernel). */
static clmoe_status wgmma_kernel(clmoe_ctx *ctx, const wgmma_block *b, const char *layout, cl_kernel *k)
{
  char opts[384];
  int ptx = clmoe__tile_features(ctx)->inline_ptx;
  snprintf(opts, sizeof opts, "-DGW_BM=%d -DGW_BN=%d -DGW_BK=%d -DGW_STAGES=%d -DGW_INFLIGHT=%d %s%s%s%s",
           b->bm, b->bn, b->bk, b->stages, b->inflight, layout, clmoe__tile_options(ctx),
           ptx ? " " : "", ptx ? CLMOE_PTX_SM90A_OPTION : "");
  return clmoe__wgmma_kernel(ctx, "tile+gemm_common+gemm_wgmma", opts, "gemm_wgmma", "CLMOE_GEMM_WGMMA", k);
}

int clmoe__gemm_tile_accepts(const clmoe_tensor *A, const clmoe_tensor *B, const clmoe_tensor *C)
{
  return A->dtype == CLMOE_BF16 && B->dtype == CLMOE_BF16 &&
         (C->dtype == CLMOE_F32 || C->dtype == CLMOE_BF16);
}

/* 16-byte global loads need 8-element alignment of every row and batch start. */
static int vec_ok(int64_t offset, int64_t ld, int64_t bstride)
{
  return offset % 8 == 0 && ld % 8 == 0 && bstride % 8 == 0;
}

clmoe_status clmoe__gemm_tile(clmoe_ctx *ctx, int ta, int tb, float alpha, const clmoe_tensor *A,
                              const clmoe_tensor *B, float beta, clmoe_tensor *C,
                              const clmoe__gemm_shape *s)
{
  if (!clmoe__gemm_tile_accepts(A, B, C))
    return clmoe__error(CLMOE_ERR_UNSUPPORTED,
                        "gemm: the tile backend takes bf16 A and B and an f32 or bf16 C (got %s, "
                        "%s, %s)", clmoe_dtype_name(A->dtype), clmoe_dtype_name(B->dtype),
                        clmoe_dtype_name(C->dtype));
  if (s->m == 0 || s->n == 0 || s->batch == 0) return CLMOE_OK;
  int va = vec_ok(A->offset, s->lda, s->astride), vb = vec_ok(B->offset, s->ldb, s->bstride);
  async_block own;
  wgmma_block wown;
  const wgmma_block *wb = va && vb ? choose_wgmma(ctx, s, &wown) : NULL;
  const async_block *ab = va && vb && !wb ? choose_async(ctx, s, &own) : NULL;
  const tile_block *b = choose_block(ctx, s);
  tile_block as_tile;
  if (wb) {
    /* bm / 64 warp groups of 4 warps: bm / 16 warps, for block_threads */
    as_tile.bm = wb->bm, as_tile.bn = wb->bn, as_tile.warps_m = wb->bm / 16, as_tile.warps_n = 1;
    b = &as_tile;
  } else if (ab) {
    as_tile.bm = ab->bm, as_tile.bn = ab->bn, as_tile.warps_m = ab->warps_m, as_tile.warps_n = ab->warps_n;
    b = &as_tile;
  }
  int64_t groups = (s->m + b->bm - 1) / b->bm * ((s->n + b->bn - 1) / b->bn) * s->batch;
  if (groups > INT32_MAX)
    return clmoe__error(CLMOE_ERR_SHAPE, "gemm: %lld work-groups for the tile GEMM (at most 2^31 - 1)",
                        (long long)groups);
  int cb = C->dtype == CLMOE_BF16;
  cl_int flags = (ta != 0) | (tb != 0) << 1 | va << 2 | vb << 3 | cb << 4;
  /* On a matrix unit the layout is compiled in (a program per layout); elsewhere it is a
   * kernel argument, so that slow compilers (PoCL) build one program per block. */
  char layout[96] = "";
  if (clmoe__tile_features(ctx)->matrix_unit)
    snprintf(layout, sizeof layout, "-DGT_TA=%d -DGT_TB=%d -DGT_VEC_A=%d -DGT_VEC_B=%d -DGT_C_BF16=%d ",
             ta != 0, tb != 0, va, vb, cb);
  char opts[320];
  cl_kernel k;
  if (wb) {
    clmoe_status st = wgmma_kernel(ctx, wb, layout, &k);
    if (st == CLMOE_ERR_UNSUPPORTED) return clmoe__gemm_tile(ctx, ta, tb, alpha, A, B, beta, C, s);
    CLMOE_TRY(st);
  } else if (ab) {
    snprintf(opts, sizeof opts, "-DGA_BM=%d -DGA_BN=%d -DGA_WARPS_M=%d -DGA_WARPS_N=%d -DGA_STAGES=%d -DGA_BK=%d %s%s",
             ab->bm, ab->bn, ab->warps_m, ab->warps_n, ab->stages, ab->bk, layout, clmoe__tile_options(ctx));
    CLMOE_TRY(clmoe__kernel(ctx, "tile+gemm_common+gemm_async", opts, "gemm_async", &k));
  } else {
    snprintf(opts, sizeof opts, "-DGT_BM=%d -DGT_BN=%d -DGT_WARPS_M=%d -DGT_WARPS_N=%d %s%s", b->bm,
             b->bn, b->warps_m, b->warps_n, layout, clmoe__tile_options(ctx));
    CLMOE_TRY(clmoe__kernel(ctx, "tile+gemm_common+gemm_tile", opts, "gemm_tile", &k));
  }
  cl_int m = (cl_int)s->m, n = (cl_int)s->n, kk = (cl_int)s->k;
  cl_int lda = (cl_int)s->lda, ldb = (cl_int)s->ldb, ldc = (cl_int)s->ldc;
  cl_ulong aoff = (cl_ulong)A->offset, boff = (cl_ulong)B->offset, coff = (cl_ulong)C->offset;
  cl_ulong as = (cl_ulong)s->astride, bs = (cl_ulong)s->bstride, cs = (cl_ulong)s->cstride;
  CLMOE_TRY(clmoe__args(k, 18, KA(m), KA(n), KA(kk), KA(alpha), KA(beta), KA(A->buf), KA(aoff),
                        KA(lda), KA(as), KA(B->buf), KA(boff), KA(ldb), KA(bs), KA(C->buf),
                        KA(coff), KA(ldc), KA(cs), KA(flags)));
  return clmoe__launch_groups(ctx, k, groups, block_threads(b));
}
