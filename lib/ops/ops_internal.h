/* Internal to the ops subsystem: what its files share beyond include/clmoe/ops.h. Not
 * installed. */
#ifndef CLMOE_OPS_INTERNAL_H
#define CLMOE_OPS_INTERNAL_H

#include "clmoe/runtime.h"
#include "clmoe/status.h"
#include "clmoe/tensor.h"

/* y[r, :] += bias for every row r of y [rows, n]; bias [n]; both contiguous fp32
 * (ops_elementwise.c; the messages name op). */
clmoe_status clmoe__ops_add_rows(clmoe_ctx *ctx, const char *op, const clmoe_tensor *bias,
                                 clmoe_tensor *y);

/* ---- ops_gemv.c: products for few tokens (kernels_cl/ops/gemv.cl) ---- */
#define CLMOE__GEMV_SLOTS 6
typedef struct clmoe__gemv_slot {
  const clmoe_tensor *w; /* [n, K] f32 or bf16 (every slot of a call alike) */
  clmoe_tensor *y;       /* [T, n] f32 */
  const clmoe_tensor *x; /* NULL: the call's x; else this slot's own [T, K] f32 input in the
                          * call's x's buffer (mode 0 only) */
} clmoe__gemv_slot;
/* 1 when w is an f32 or bf16 matrix the GEMV takes. */
int clmoe__ops_gemv_ok(const clmoe_tensor *w);
/* y_s = beta y_s + in(x) w_s^T for the n <= 6 slots sharing x [T, K]; in: mode 0 x, 1
 * RMSNorm(x) times gain [K] with eps, 2 glu(x, x2) (glu: clmoe_glu), 3 x sigmoid(x2), 4
 * sigmoid(x2) times RMSNorm of each group of glu columns of x (a multiple of 8 dividing K,
 * at most 64 groups) with the groups' gain [glu]. beta 0 or 1; op names the caller in
 * errors. */
clmoe_status clmoe__ops_gemv(clmoe_ctx *ctx, const char *op, const clmoe_tensor *x, const clmoe_tensor *x2,
                             const clmoe_tensor *gain, int mode, int glu, float eps, int beta, int n,
                             const clmoe__gemv_slot *sl);
/* The same, also writing in(x) [T, K] to xn (f32, T K values; NULL: not written) for a kernel
 * after it that reads the normed or gated input. */
clmoe_status clmoe__ops_gemv_xn(clmoe_ctx *ctx, const char *op, const clmoe_tensor *x, const clmoe_tensor *x2,
                                const clmoe_tensor *gain, int mode, int glu, float eps, int beta, int n,
                                const clmoe__gemv_slot *sl, clmoe_tensor *xn);

#endif
