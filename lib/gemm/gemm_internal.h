/* Internal to the GEMM subsystem: a GEMM's sizes as the dispatcher (gemm.c) derives them from
 * the tensors, and the backends it calls with them: CLBlast (gemm_clblast.c), our tiled and
 * naive kernels (gemm_own.c) and the bf16 GEMM on the tile interface (gemm_tile.c). Each
 * backend takes a shape gemm.c has checked (m, n, batch > 0). Not installed. */
#ifndef CLMOE_GEMM_INTERNAL_H
#define CLMOE_GEMM_INTERNAL_H

#include <stdint.h>

#include "clmoe/runtime.h"
#include "clmoe/status.h"
#include "clmoe/tensor.h"

/* A GEMM's sizes (row strides and batch strides in elements; a batch stride of 0
 * broadcasts). Every size and row stride fits in an int32. */
typedef struct clmoe__gemm_shape {
  int64_t batch, m, n, k;
  int64_t lda, ldb, ldc;             /* row strides */
  int64_t astride, bstride, cstride; /* batch strides (0: broadcast) */
} clmoe__gemm_shape;

/* C = alpha op(A) op(B) + beta C with op(X) = X^T when tX != 0; A, B and C as in
 * include/clmoe/gemm.h. */

/* CLBlast's SGEMM, bf16 operands converted to fp32 copies first (which must then be
 * contiguous); k >= 1. The first call on a context applies CLMOE_CLBLAST_TUNING. */
clmoe_status clmoe__gemm_clblast(clmoe_ctx *ctx, int ta, int tb, float alpha, const clmoe_tensor *A,
                                 const clmoe_tensor *B, float beta, clmoe_tensor *C,
                                 const clmoe__gemm_shape *s);

/* Our tiled (tiled != 0) or naive kernel (kernels_cl/gemm/gemm.cl), any storage types. */
clmoe_status clmoe__gemm_own(clmoe_ctx *ctx, int tiled, int ta, int tb, float alpha,
                            const clmoe_tensor *A, const clmoe_tensor *B, float beta,
                            clmoe_tensor *C, const clmoe__gemm_shape *s);

/* 1 when the tile GEMM takes these operands: A and B bf16, C fp32 or bf16. */
int clmoe__gemm_tile_accepts(const clmoe_tensor *A, const clmoe_tensor *B, const clmoe_tensor *C);

/* The tile GEMM (kernels_cl/gemm/gemm_tile.cl, gemm_async.cl, gemm_wgmma.cl: any
 * transposes, batch, ragged sizes); CLMOE_ERR_UNSUPPORTED when !clmoe__gemm_tile_accepts. */
clmoe_status clmoe__gemm_tile(clmoe_ctx *ctx, int ta, int tb, float alpha, const clmoe_tensor *A,
                              const clmoe_tensor *B, float beta, clmoe_tensor *C,
                              const clmoe__gemm_shape *s);

#endif
