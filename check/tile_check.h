/* The tile GEMM conformance case (check_tile.c), shared with the CUnit suite's sweep of
 * shapes and transposes (tests/unit/test_tile.c). */
#ifndef CLMOE_TILE_CHECK_H
#define CLMOE_TILE_CHECK_H

#include "conformance.h"

/* Tolerances with ck_compare's measure |got - ref| / (|ref| + rms(ref)), against the double
 * product of the bf16 operands: an fp32 C sees only fp32 accumulation error (K up to a few
 * hundred here: far below 2e-5); a bf16 C adds one bf16 rounding (2^-8 relative at most
 * where the device's and the reference's roundings differ). */
#define TILE_GEMM_TOL_F32 2e-5
#define TILE_GEMM_TOL_BF16 1e-2

typedef struct tile_gemm_case {
  int ta, tb;
  int64_t m, n, k, batch;
  int a_batch1, b_batch1; /* A or B broadcast over the batch */
  clmoe_dtype dc;         /* C: f32 or bf16 (A and B are bf16) */
  float alpha, beta;
  int pad_c;    /* C is a column slice of a matrix 5 columns wider */
  int a_offset; /* A starts 3 elements into its buffer: no 16-byte loads */
  int bm, bn;   /* tile GEMM block (clmoe_ctx_set_gemm_tile_block); 0, 0: the device's */
} tile_gemm_case;

/* C = alpha op(A) op(B) + beta C on CLMOE_GEMM_TILE with fresh inputs from seed, compared
 * whole (padding included) with the double reference. */
clmoe_status check_tile_gemm_case(clmoe_ctx *ctx, uint64_t seed, const tile_gemm_case *g,
                                  clmoe_check_result *res);

#endif
