/* GEMV-shaped products for few tokens (kernels_cl/ops/gemv.cl): up to six matrices (fp32, or
 * bf16 read as such with fp32 sums) that read the same input in one launch, the input optionally passed through RMSNorm or a gated unit
 * on the way in. The decode step's products (lib/generate) and the few-token MoE layer
 * (lib/moe/moe_decode.c) use it: at batch 1 one launch replaces several CLBlast calls, each
 * of which costs more host and device time than the product itself. */
#include "ops/ops_internal.h"

#include <stdio.h>
#include "runtime/internal.h"

#define GEMV_LANES 64 /* GV_LANES of gemv.cl */
#define GEMV_TOK 4       /* tokens per work-group at most */
#define GEMV_TOK_WIDE 16 /* the same for CLMOE_GEMV_WIDE_ROWS rows or more */
#define GEMV_GROUPS 64   /* GV_GROUPS of gemv.cl */
#define GEMV_SLOT_ARGS 6 /* a slot's arguments (GV_SLOT_ARGS) */

/* Work-groups of a launch at `rows` rows per work-group and `tok` tokens. */
static int64_t gemv_groups(int n, const clmoe__gemv_slot *sl, int64_t T, int tok, int rows)
{
  int64_t b = 0;
  for (int i = 0; i < n; i++) b += (sl[i].w->shape[0] + rows - 1) / rows;
  return b * ((T + tok - 1) / tok);
}

/* Rows per work-group: fewer on GPUs, where a batch-1 step needs many work-groups to fill
 * the device, and with GEMV_TOK_WIDE tokens (their partials in local memory); the sums do
 * not depend on it. */
static int gemv_rows(const clmoe_ctx *ctx, int tok) { return ctx->caps.is_gpu || tok > GEMV_TOK ? 4 : 8; }

int clmoe__ops_gemv_ok(const clmoe_tensor *w)
{
  return w->buf && (w->dtype == CLMOE_F32 || w->dtype == CLMOE_BF16) && w->ndim == 2;
}

clmoe_status clmoe__ops_gemv_xn(clmoe_ctx *ctx, const char *op, const clmoe_tensor *x, const clmoe_tensor *x2,
                                const clmoe_tensor *gain, int mode, int glu, float eps, int beta, int n,
                                const clmoe__gemv_slot *sl, clmoe_tensor *xn)
{
  if (n < 1 || n > CLMOE__GEMV_SLOTS)
    return clmoe__error(CLMOE_ERR_INTERNAL, "%s: %d matrices (1 to %d)", op, n, CLMOE__GEMV_SLOTS);
  const int64_t K = sl[0].w->shape[1], T = clmoe_tensor_numel(x) / K;
  int64_t rows_all = 0;
  const int wbf16 = sl[0].w->dtype == CLMOE_BF16;
  CLMOE_TRY(clmoe__want(x, CLMOE_F32, op, "x"));
  for (int i = 0; i < n; i++) {
    CLMOE_TRY(clmoe__want_shape(sl[i].w, op, "weight", 1, 2, sl[i].w->shape[0], K, 0, 0));
    if ((sl[i].w->dtype == CLMOE_BF16) != wbf16)
      return clmoe__error(CLMOE_ERR_INTERNAL, "%s: weights of one launch mix fp32 and bf16", op);
    CLMOE_TRY(clmoe__want_shape(sl[i].y, op, "output", 0, 2, T, sl[i].w->shape[0], 0, 0));
    if (sl[i].x && (mode != 0 || sl[i].x->buf != x->buf || sl[i].x->dtype != CLMOE_F32 ||
                    !clmoe_tensor_is_contiguous(sl[i].x) || clmoe_tensor_numel(sl[i].x) != T * K))
      return clmoe__error(CLMOE_ERR_INTERNAL, "%s: matrix %d's own input must be [%lld, %lld] f32 in x's buffer, "
                          "with the plain input form", op, i, (long long)T, (long long)K);
    rows_all += sl[i].w->shape[0];
  }
  if (xn) {
    CLMOE_TRY(clmoe__want(xn, CLMOE_F32, op, "normed input"));
    if (clmoe_tensor_numel(xn) != T * K)
      return clmoe__error(CLMOE_ERR_SHAPE, "%s: the normed input holds %lld values, not %lld", op,
                          (long long)clmoe_tensor_numel(xn), (long long)(T * K));
  }
  if (mode == 4 && (glu < 8 || glu % 8 || K % glu || K / glu > GEMV_GROUPS))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: groups of %d columns for the group norm of %lld columns (a multiple of "
                        "8 dividing them, at most %d groups)", op, glu, (long long)K, GEMV_GROUPS);
  if (T == 0) return CLMOE_OK;
  cl_kernel k;
  char opts[128];
  /* Tokens per work-group: 4, or 16 when the matrices alone make enough work-groups (the
   * head of a large vocabulary: it is read a quarter as often); no work on absent tokens.
   * The sums do not depend on it (nor on the CLMOE_GEMV_TOK and _ROWS knobs' forms). */
  const int ktok = (int)clmoe__knob_int(ctx, CLMOE_K_GEMV_TOK), krows = (int)clmoe__knob_int(ctx, CLMOE_K_GEMV_ROWS);
  const int want = ktok                                                            ? ktok
                   : rows_all >= clmoe__knob_int(ctx, CLMOE_K_GEMV_WIDE_ROWS) ? GEMV_TOK_WIDE
                                                                                   : GEMV_TOK;
  const int tok = T < want ? (int)T : want;
  /* the final sums take one work-item per (token, row): at most GEMV_LANES of them */
  int rows = krows ? krows : gemv_rows(ctx, tok);
  while (rows * tok > GEMV_LANES) rows--;
  /* 16-byte weight loads where every row starts aligned (the sums are the same either way) */
  int vec = clmoe__knob_int(ctx, CLMOE_K_GEMV_VEC) != 0 && K % 8 == 0;
  for (int i = 0; i < n; i++) vec = vec && sl[i].w->offset % (wbf16 ? 8 : 4) == 0;
  const int passes = (int)clmoe__knob_int(ctx, CLMOE_K_GEMV_PASSES);
  snprintf(opts, sizeof opts, "-DGV_ROWS=%d -DGV_TOK=%d -DGV_WBF16=%d -DGV_VEC=%d -DGV_PASSES=%d", rows, tok, wbf16,
           vec, passes);
  CLMOE_TRY(clmoe__kernel(ctx, "gemv", opts, "gemv_multi", &k));
  cl_ulong xoff = (cl_ulong)x->offset, x2off = x2 ? (cl_ulong)x2->offset : 0;
  cl_mem x2b = x2 ? x2->buf : x->buf, gb = gain ? gain->buf : x->buf; /* read only in their modes */
  cl_int imode = mode, iglu = glu, iT = (cl_int)T, iK = (cl_int)K, ibeta = beta;
  cl_float feps = eps;
  cl_ulong goff = gain ? (cl_ulong)gain->offset : 0;
  cl_mem xnb = xn ? xn->buf : x->buf; /* written only with xout */
  cl_ulong xnoff = xn ? (cl_ulong)xn->offset : 0;
  cl_int xout = xn != NULL;
  CLMOE_TRY(clmoe__args(k, 15, KA(x->buf), KA(xoff), KA(x2b), KA(x2off), KA(gb), KA(goff), KA(imode), KA(iglu),
                        KA(feps), KA(iT), KA(iK), KA(ibeta), KA(xnb), KA(xnoff), KA(xout)));
  for (int i = 0; i < CLMOE__GEMV_SLOTS; i++) { /* unused slots: 0 rows */
    const clmoe__gemv_slot *q = &sl[i < n ? i : 0];
    cl_ulong wo = (cl_ulong)q->w->offset, yo = (cl_ulong)q->y->offset;
    cl_ulong xo = q->x ? (cl_ulong)q->x->offset : xoff;
    cl_int rn = i < n ? (cl_int)q->w->shape[0] : 0;
    const cl_uint a = (cl_uint)(15 + GEMV_SLOT_ARGS * i);
    cl_int e = clSetKernelArg(k, a, sizeof q->w->buf, &q->w->buf);
    if (e == CL_SUCCESS) e = clSetKernelArg(k, a + 1, sizeof wo, &wo);
    if (e == CL_SUCCESS) e = clSetKernelArg(k, a + 2, sizeof rn, &rn);
    if (e == CL_SUCCESS) e = clSetKernelArg(k, a + 3, sizeof q->y->buf, &q->y->buf);
    if (e == CL_SUCCESS) e = clSetKernelArg(k, a + 4, sizeof yo, &yo);
    if (e == CL_SUCCESS) e = clSetKernelArg(k, a + 5, sizeof xo, &xo);
    if (e != CL_SUCCESS) return clmoe__cl_error(e, "clSetKernelArg (gemv_multi)", __FILE__, __LINE__);
  }
  size_t local[2] = {GEMV_LANES, 1};
  size_t global[2] = {GEMV_LANES, (size_t)gemv_groups(n, sl, T, tok, rows)};
  return clmoe__launch(ctx, k, 2, global, local);
}

clmoe_status clmoe__ops_gemv(clmoe_ctx *ctx, const char *op, const clmoe_tensor *x, const clmoe_tensor *x2,
                             const clmoe_tensor *gain, int mode, int glu, float eps, int beta, int n,
                             const clmoe__gemv_slot *sl)
{
  return clmoe__ops_gemv_xn(ctx, op, x, x2, gain, mode, glu, eps, beta, n, sl, NULL);
}
