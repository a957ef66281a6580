/* Block Attention Residuals: forward and backward (kernels_cl/model/attn_res.cl). */
#include "runtime/internal.h"

#include <math.h>
#include "clmoe/attn_res.h"
#include "clmoe/ops.h"

#define AR_LANES 256
#define AR_MAX_S 32 /* must match kernels_cl/model/attn_res.cl */

typedef struct ar_dims { int64_t S, T, d; } ar_dims;

static clmoe_status check(const char *op, const clmoe_tensor *src, const clmoe_tensor *w,
                          const clmoe_tensor *gain, float eps, ar_dims *dm)
{
  char desc[96];
  if (!src || src->ndim != 3 || src->dtype != CLMOE_F32 || !clmoe_tensor_is_contiguous(src))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: sources is %s, expected [S, T, d] f32 (contiguous)", op,
                        src ? clmoe_tensor_describe(src, desc, sizeof desc) : "NULL");
  dm->S = src->shape[0], dm->T = src->shape[1], dm->d = src->shape[2];
  if (dm->S < 1 || dm->S > AR_MAX_S)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %lld sources; 1 to %d are supported", op,
                        (long long)dm->S, AR_MAX_S);
  if (!(eps >= 0.0f) || !isfinite(eps))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: eps %g is not a finite number >= 0", op, (double)eps);
  CLMOE_TRY(clmoe__want_shape(w, op, "w", 0, 1, dm->d, 0, 0, 0));
  CLMOE_TRY(clmoe__want_shape(gain, op, "gain", 0, 1, dm->d, 0, 0, 0));
  return CLMOE_OK;
}

static clmoe_status launch_tokens(clmoe_ctx *ctx, cl_kernel k, const ar_dims *dm)
{
  size_t local = 0;
  CLMOE_TRY(clmoe__row_local(ctx, k, dm->d, &local));
  return clmoe__launch_groups(ctx, k, dm->T, local);
}

clmoe_status clmoe_attn_res(clmoe_ctx *ctx, const clmoe_tensor *src, const clmoe_tensor *w,
                            const clmoe_tensor *gain, float eps, clmoe_tensor *h, clmoe_tensor *alpha)
{
  const char *op = "clmoe_attn_res";
  ar_dims dm;
  CLMOE_TRY(check(op, src, w, gain, eps, &dm));
  CLMOE_TRY(clmoe__want_shape(h, op, "h", 0, 2, dm.T, dm.d, 0, 0));
  if (alpha) CLMOE_TRY(clmoe__want_shape(alpha, op, "alpha", 0, 2, dm.T, dm.S, 0, 0));
  if (dm.T == 0 || dm.d == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "attn_res", NULL, "attn_res_forward", &k));
  cl_ulong so = (cl_ulong)src->offset, T = (cl_ulong)dm.T, d = (cl_ulong)dm.d;
  cl_ulong wo = (cl_ulong)w->offset, go = (cl_ulong)gain->offset, ho = (cl_ulong)h->offset;
  cl_ulong ao = alpha ? (cl_ulong)alpha->offset : 0;
  cl_mem am = alpha ? alpha->buf : NULL;
  cl_int S = (cl_int)dm.S, has_alpha = alpha != NULL;
  CLMOE_TRY(clmoe__args(k, 15, KA(src->buf), KA(so), KA(S), KA(T), KA(d), KA(w->buf), KA(wo),
                        KA(gain->buf), KA(go), KA(eps), KA(h->buf), KA(ho), KA(am), KA(ao), KA(has_alpha)));
  return launch_tokens(ctx, k, &dm);
}

clmoe_status clmoe_attn_res_backward(clmoe_ctx *ctx, const clmoe_tensor *src,
                                     const clmoe_tensor *w, const clmoe_tensor *gain, float eps,
                                     const clmoe_tensor *alpha, const clmoe_tensor *dh,
                                     clmoe_tensor *dsrc, clmoe_tensor *dw, clmoe_tensor *dgain)
{
  const char *op = "clmoe_attn_res_backward";
  ar_dims dm;
  CLMOE_TRY(check(op, src, w, gain, eps, &dm));
  CLMOE_TRY(clmoe__want_shape(alpha, op, "alpha", 0, 2, dm.T, dm.S, 0, 0));
  CLMOE_TRY(clmoe__want_shape(dh, op, "dh", 0, 2, dm.T, dm.d, 0, 0));
  CLMOE_TRY(clmoe__want_shape(dsrc, op, "dsources", 0, 3, dm.S, dm.T, dm.d, 0));
  CLMOE_TRY(clmoe__want_shape(dw, op, "dw", 0, 1, dm.d, 0, 0, 0));
  CLMOE_TRY(clmoe__want_shape(dgain, op, "dgain", 0, 1, dm.d, 0, 0, 0));
  if (dm.d == 0) return CLMOE_OK;
  if (dm.T == 0) {
    CLMOE_TRY(clmoe_tensor_fill(dw, 0.0));
    return clmoe_tensor_fill(dgain, 0.0);
  }
  /* Per-token contributions to dw and dgain [T, 2d], then column sums in a fixed order. */
  clmoe_tensor part = {0}, sums = {0}, half = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &part, CLMOE_F32, 2, (int64_t[]){dm.T, 2 * dm.d}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &sums, CLMOE_F32, 1, (int64_t[]){2 * dm.d}), done);
  cl_kernel k;
  CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "attn_res", NULL, "attn_res_backward", &k), done);
  cl_ulong so = (cl_ulong)src->offset, T = (cl_ulong)dm.T, d = (cl_ulong)dm.d;
  cl_ulong wo = (cl_ulong)w->offset, go = (cl_ulong)gain->offset, ao = (cl_ulong)alpha->offset;
  cl_ulong dho = (cl_ulong)dh->offset, dso = (cl_ulong)dsrc->offset;
  cl_int S = (cl_int)dm.S;
  CLMOE_TRY_GOTO(st, clmoe__args(k, 17, KA(src->buf), KA(so), KA(S), KA(T), KA(d), KA(w->buf), KA(wo),
                                 KA(gain->buf), KA(go), KA(eps), KA(alpha->buf), KA(ao), KA(dh->buf),
                                 KA(dho), KA(dsrc->buf), KA(dso), KA(part.buf)), done);
  CLMOE_TRY_GOTO(st, launch_tokens(ctx, k, &dm), done);
  CLMOE_TRY_GOTO(st, clmoe_sum_rows(ctx, &part, &sums), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view(&sums, &half, 1, &dm.d, 0), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_copy(dw, &half), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view(&sums, &half, 1, &dm.d, dm.d), done);
  st = clmoe_tensor_copy(dgain, &half);
done:
  clmoe_tensor_destroy(&part);
  clmoe_tensor_destroy(&sums);
  return st;
}
