/* Matrix products: C = alpha op(A) op(B) + beta C, row-major, fp32 arithmetic.
 *
 * Matrices are 2-D tensors whose rows are contiguous (stride[1] == 1; the row stride is
 * the leading dimension, so slices of wider matrices work). The batched form takes 3-D
 * tensors [batch, rows, cols]; a batch size of 1 in A or B is broadcast over C's batch.
 * A, B and C may each be fp32 or bf16 storage.
 *
 * Backends: CLBlast (the default for fp32; its kernels are compiled once per context and
 * reused), our tiled kernel (kernels_cl/gemm/gemm.cl, reads bf16 directly), and a naive kernel
 * (one work-item per element; the on-device reference and benchmark baseline). AUTO uses
 * CLBlast, converting bf16 operands to fp32 scratch buffers first, except for bf16 A and B
 * when the matrix-unit fast path is on (CLMOE_GEMM_TILE below). */
#ifndef CLMOE_GEMM_H
#define CLMOE_GEMM_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum clmoe_trans { CLMOE_NOTRANS = 0, CLMOE_TRANS = 1 } clmoe_trans;

typedef enum clmoe_gemm_backend {
  CLMOE_GEMM_AUTO = 0,
  CLMOE_GEMM_CLBLAST,
  CLMOE_GEMM_TILED,
  CLMOE_GEMM_NAIVE,
  CLMOE_GEMM_TILE /* bf16 A and B on the matrix-unit tiles (kernels_cl/gemm/gemm_tile.cl) */
} clmoe_gemm_backend;

/* A: [m, k] ([k, m] when ta), B: [k, n] ([n, k] when tb), C: [m, n]. */
CLMOE_API clmoe_status clmoe_gemm(clmoe_ctx *ctx, clmoe_trans ta, clmoe_trans tb, float alpha,
                                  const clmoe_tensor *A, const clmoe_tensor *B, float beta,
                                  clmoe_tensor *C);
/* A: [batch or 1, m, k], B: [batch or 1, k, n], C: [batch, m, n] (with transposes as above). */
CLMOE_API clmoe_status clmoe_gemm_batched(clmoe_ctx *ctx, clmoe_trans ta, clmoe_trans tb,
                                          float alpha, const clmoe_tensor *A, const clmoe_tensor *B,
                                          float beta, clmoe_tensor *C);
/* Either of the above (by C's rank) on an explicit backend. */
CLMOE_API clmoe_status clmoe_gemm_ex(clmoe_ctx *ctx, clmoe_gemm_backend backend, clmoe_trans ta,
                                     clmoe_trans tb, float alpha, const clmoe_tensor *A,
                                     const clmoe_tensor *B, float beta, clmoe_tensor *C);

/* The product of a bf16 training step: C = alpha op(A) op(B) + beta C on the tile GEMM
 * (CLMOE_GEMM_TILE) on any device, A or B given in fp32 rounded to bf16 first (to nearest
 * even, into pool scratch), fp32 accumulation; C fp32 or bf16. Shapes as clmoe_gemm (2-D). */
CLMOE_API clmoe_status clmoe_gemm_bf16(clmoe_ctx *ctx, clmoe_trans ta, clmoe_trans tb, float alpha,
                                       const clmoe_tensor *A, const clmoe_tensor *B, float beta,
                                       clmoe_tensor *C);

/* The backend clmoe_gemm uses on this context (default AUTO). */
CLMOE_API void clmoe_ctx_set_gemm_backend(clmoe_ctx *ctx, clmoe_gemm_backend backend);

/* The tile GEMM: TILE takes bf16 A and B only (C fp32 or bf16; any transposes,
 * batches and sizes) and computes every product on the tile interface (kernels_cl/tile/tile.cl):
 * NVIDIA tensor cores where the fast-path probe found them, portable arithmetic elsewhere.
 * AUTO uses it for bf16 A and B when clmoe_ctx_fastpath(ctx) is on (include/clmoe/tile.h), and
 * CLBlast otherwise. Products of bf16 values are exact in fp32 and accumulate in fp32, so it
 * differs from the CLBlast path only in the order of the sums.
 * Its work-group block of C (bm x bn: 128x256, 128x128 or 64x64) is chosen from the device;
 * this overrides the choice for ctx (0, 0: back to the device's choice). */
CLMOE_API clmoe_status clmoe_ctx_set_gemm_tile_block(clmoe_ctx *ctx, int bm, int bn);

/* CLBlast tuner results applied to ctx's device: CLMOE_CLBLAST_TUNING=FILE[:FILE...] names
 * JSON files written by CLBlast's tuners (clblast_tuner_xgemm and others, Debian package
 * clblast-utils); before the context's first CLBlast call, each file for this device and
 * single precision overrides CLBlast's parameters for its kernel (CLBlastOverrideParameters);
 * files for other devices are skipped; an unreadable or malformed file makes that first
 * GEMM fail with an error naming it. Returns how many files were applied (0 before the
 * first CLBlast call). */
CLMOE_API int clmoe_gemm_tuned_kernels(const clmoe_ctx *ctx);
CLMOE_API const char *clmoe_gemm_backend_name(clmoe_gemm_backend backend);

#ifdef __cplusplus
}
#endif
#endif
