/* Optimizer steps (kernels_cl/ops/optim.cl). */
#include <math.h>

#include "clmoe/ops.h"
#include "runtime/internal.h"

/* Hyperparameters must be finite and in range; NaN fails every comparison below. */
static clmoe_status check_adamw(const clmoe_adamw *hp)
{
  const char *op = "clmoe_adamw_step";
  if (!hp) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: hyperparameters are NULL", op);
  if (!(hp->lr >= 0.0f && isfinite(hp->lr)))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: lr %g must be finite and >= 0", op,
                        (double)hp->lr);
  if (!(hp->beta1 >= 0.0f && hp->beta1 < 1.0f))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: beta1 %g must be in [0, 1)", op,
                        (double)hp->beta1);
  if (!(hp->beta2 >= 0.0f && hp->beta2 < 1.0f))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: beta2 %g must be in [0, 1)", op,
                        (double)hp->beta2);
  if (!(hp->eps > 0.0f && isfinite(hp->eps)))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: eps %g must be finite and > 0", op,
                        (double)hp->eps);
  if (!isfinite(hp->weight_decay))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: weight_decay %g must be finite", op,
                        (double)hp->weight_decay);
  if (!isfinite(hp->grad_scale))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: grad_scale %g must be finite", op,
                        (double)hp->grad_scale);
  if (hp->step < 1)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: step %lld must be >= 1 (t counts from 1)",
                        op, (long long)hp->step);
  return CLMOE_OK;
}

/* The step, and with copy (bf16, numel of param) the new parameter rounded to bf16 in the
 * same kernel; with scale (fp32 [1] on the device) the gradient's scale is read there
 * instead of hp->grad_scale. */
static clmoe_status adamw(clmoe_ctx *ctx, const char *op, clmoe_tensor *param, const clmoe_tensor *grad,
                          clmoe_tensor *m, clmoe_tensor *v, const clmoe_adamw *hp, const clmoe_tensor *scale,
                          clmoe_tensor *copy)
{
  CLMOE_TRY(clmoe__want(param, CLMOE_F32, op, "param"));
  CLMOE_TRY(clmoe__want(grad, CLMOE_F32, op, "grad"));
  CLMOE_TRY(clmoe__want(m, CLMOE_F32, op, "m"));
  CLMOE_TRY(clmoe__want(v, CLMOE_F32, op, "v"));
  CLMOE_TRY(clmoe__want_numel(param, grad, op, "param", "grad"));
  CLMOE_TRY(clmoe__want_numel(param, m, op, "param", "m"));
  CLMOE_TRY(clmoe__want_numel(param, v, op, "param", "v"));
  if (copy) {
    CLMOE_TRY(clmoe__want(copy, CLMOE_BF16, op, "copy"));
    CLMOE_TRY(clmoe__want_numel(param, copy, op, "param", "copy"));
  }
  if (scale) {
    CLMOE_TRY(clmoe__want(scale, CLMOE_F32, op, "scale"));
    if (clmoe_tensor_numel(scale) != 1)
      return clmoe__error(CLMOE_ERR_SHAPE, "%s: scale must hold one element", op);
  }
  CLMOE_TRY(check_adamw(hp));
  cl_ulong n = (cl_ulong)clmoe_tensor_numel(param);
  if (n == 0) return CLMOE_OK;
  cl_kernel k;
  static const char *const names[2][2] = {{"adamw_step", "adamw_step_bf16"},
                                          {"adamw_step_dev", "adamw_step_bf16_dev"}};
  CLMOE_TRY(clmoe__kernel(ctx, "optim", NULL, names[scale != NULL][copy != NULL], &k));
  /* Bias corrections in double: b^t for large t underflows to 0, giving 1, as it should. */
  double t = (double)hp->step;
  float bc1 = (float)(1.0 - pow((double)hp->beta1, t));
  float bc2 = (float)(1.0 - pow((double)hp->beta2, t));
  float omb1 = (float)(1.0 - (double)hp->beta1), omb2 = (float)(1.0 - (double)hp->beta2);
  cl_ulong po = (cl_ulong)param->offset, go = (cl_ulong)grad->offset, mo = (cl_ulong)m->offset,
           vo = (cl_ulong)v->offset;
  CLMOE_TRY(clmoe__args(k, 18, KA(param->buf), KA(po), KA(grad->buf), KA(go), KA(m->buf), KA(mo),
                        KA(v->buf), KA(vo), KA(n), KA(hp->lr), KA(hp->beta1), KA(hp->beta2),
                        KA(omb1), KA(omb2), KA(bc1), KA(bc2), KA(hp->eps), KA(hp->weight_decay)));
  cl_uint next = 18;
  cl_int err = CL_SUCCESS;
  if (scale) {
    cl_ulong so = (cl_ulong)scale->offset;
    err = clSetKernelArg(k, next++, sizeof scale->buf, &scale->buf);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, next++, sizeof so, &so);
  } else {
    err = clSetKernelArg(k, next++, sizeof hp->grad_scale, &hp->grad_scale);
  }
  if (err != CL_SUCCESS) return clmoe__error(err, "%s: clSetKernelArg (the gradient's scale) failed", op);
  if (copy) {
    cl_ulong co = (cl_ulong)copy->offset;
    err = clSetKernelArg(k, next++, sizeof copy->buf, &copy->buf);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, next, sizeof co, &co);
    if (err != CL_SUCCESS) return clmoe__error(err, "%s: clSetKernelArg (the bf16 copy) failed", op);
  }
  return clmoe__launch1d(ctx, k, (size_t)n);
}

clmoe_status clmoe_adamw_step(clmoe_ctx *ctx, clmoe_tensor *param, const clmoe_tensor *grad,
                              clmoe_tensor *m, clmoe_tensor *v, const clmoe_adamw *hp)
{
  return adamw(ctx, "clmoe_adamw_step", param, grad, m, v, hp, NULL, NULL);
}

clmoe_status clmoe_adamw_step_bf16(clmoe_ctx *ctx, clmoe_tensor *param, const clmoe_tensor *grad,
                                   clmoe_tensor *m, clmoe_tensor *v, const clmoe_adamw *hp,
                                   clmoe_tensor *copy)
{
  if (!copy)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_adamw_step_bf16: copy is NULL");
  return adamw(ctx, "clmoe_adamw_step_bf16", param, grad, m, v, hp, NULL, copy);
}

clmoe_status clmoe_adamw_step_scaled(clmoe_ctx *ctx, clmoe_tensor *param, const clmoe_tensor *grad,
                                     clmoe_tensor *m, clmoe_tensor *v, const clmoe_adamw *hp,
                                     const clmoe_tensor *scale, clmoe_tensor *copy)
{
  if (!scale) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_adamw_step_scaled: scale is NULL");
  return adamw(ctx, "clmoe_adamw_step_scaled", param, grad, m, v, hp, scale, copy);
}

clmoe_status clmoe_grad_clip_scale(clmoe_ctx *ctx, const clmoe_tensor *sums, double clip, clmoe_tensor *norm,
                                   clmoe_tensor *scale)
{
  static const char op[] = "clmoe_grad_clip_scale";
  CLMOE_TRY(clmoe__want(sums, CLMOE_F32, op, "sums"));
  CLMOE_TRY(clmoe__want(norm, CLMOE_I32, op, "norm"));
  CLMOE_TRY(clmoe__want(scale, CLMOE_F32, op, "scale"));
  if (clmoe_tensor_numel(norm) != 2 || clmoe_tensor_numel(scale) != 1)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: norm must hold 2 elements (a double's bits) and scale 1", op);
  if (!(clip >= 0.0 && isfinite(clip)))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: clip %g must be finite and >= 0", op, clip);
  if (!ctx->caps.has_fp64)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: the device has no fp64 (cl_khr_fp64)", op);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "optim", NULL, "grad_clip_scale", &k));
  cl_ulong so = (cl_ulong)sums->offset, n = (cl_ulong)clmoe_tensor_numel(sums);
  cl_ulong no = (cl_ulong)norm->offset, sco = (cl_ulong)scale->offset;
  CLMOE_TRY(clmoe__args(k, 8, KA(sums->buf), KA(so), KA(n), KA(clip), KA(norm->buf), KA(no), KA(scale->buf),
                        KA(sco)));
  return clmoe__launch1d(ctx, k, 1);
}
