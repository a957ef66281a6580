/* Internal: the bf16 GEMM on the tile interface (kernels_cl/gemm/gemm_tile.cl, issue 9), called
 * by clmoe_gemm_ex (lib/gemm/gemm.c) for the CLMOE_GEMM_TILE backend and, when the context's
 * fast path is on, for bf16 A and B under CLMOE_GEMM_AUTO. Not installed. */
#ifndef CLMOE_GEMM_TILE_H
#define CLMOE_GEMM_TILE_H

#include "runtime/internal.h"

/* A GEMM's sizes as lib/gemm/gemm.c derives them from the tensors (row strides and batch strides
 * in elements; a batch stride of 0 broadcasts). */
typedef struct clmoe__gemm_shape {
  int64_t batch, m, n, k;
  int64_t lda, ldb, ldc;             /* row strides */
  int64_t astride, bstride, cstride; /* batch strides (0: broadcast) */
} clmoe__gemm_shape;

/* 1 when the tile GEMM takes these operands: A and B bf16, C fp32 or bf16. */
int clmoe__gemm_tile_accepts(const clmoe_tensor *A, const clmoe_tensor *B, const clmoe_tensor *C);

/* C = alpha op(A) op(B) + beta C on the tile GEMM (any transposes, batch, ragged sizes);
 * CLMOE_ERR_UNSUPPORTED when !clmoe__gemm_tile_accepts. */
clmoe_status clmoe__gemm_tile(clmoe_ctx *ctx, int ta, int tb, float alpha, const clmoe_tensor *A,
                              const clmoe_tensor *B, float beta, clmoe_tensor *C,
                              const clmoe__gemm_shape *s);

#endif
