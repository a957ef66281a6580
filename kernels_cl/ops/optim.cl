/* optim.cl: fused optimizer steps, one work-item per parameter. */

/* AdamW (decoupled weight decay), as include/clmoe/ops.h states it:
 *   g = grad_scale grad;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   param -= lr (wd param + (m / bc1) / (sqrt(v / bc2) + eps)),  bc = 1 - b^t.
 * The host computes 1 - b and the bias corrections in double; the old param is the one
 * that decays. */
/* One element's step; returns the new parameter. */
inline float adamw_one(__global const float *grad, __global float *m, __global float *v, float p,
                       ulong i, float lr, float beta1, float beta2, float one_m_beta1,
                       float one_m_beta2, float bc1, float bc2, float eps, float weight_decay,
                       float grad_scale)
{
  const float g = grad_scale * grad[i];
  const float mi = beta1 * m[i] + one_m_beta1 * g;
  const float vi = beta2 * v[i] + one_m_beta2 * (g * g);
  const float update = (mi / bc1) / (sqrt(vi / bc2) + eps);
  m[i] = mi;
  v[i] = vi;
  return p - lr * (weight_decay * p + update);
}

__kernel void adamw_step(__global float *param, ulong poff, __global const float *grad, ulong goff,
                         __global float *m, ulong moff, __global float *v, ulong voff, ulong n,
                         float lr, float beta1, float beta2, float one_m_beta1, float one_m_beta2,
                         float bc1, float bc2, float eps, float weight_decay, float grad_scale)
{
  const ulong i = get_global_id(0);
  if (i >= n) return;
  param[poff + i] = adamw_one(grad + goff, m + moff, v + voff, param[poff + i], i, lr, beta1, beta2,
                              one_m_beta1, one_m_beta2, bc1, bc2, eps, weight_decay, grad_scale);
}

/* The same step, also writing the new parameter rounded to bf16 into copy (the weights a
 * bf16 training step multiplies with): one pass over the parameter instead of two. */
__kernel void adamw_step_bf16(__global float *param, ulong poff, __global const float *grad,
                              ulong goff, __global float *m, ulong moff, __global float *v,
                              ulong voff, ulong n, float lr, float beta1, float beta2,
                              float one_m_beta1, float one_m_beta2, float bc1, float bc2, float eps,
                              float weight_decay, float grad_scale, __global ushort *copy,
                              ulong coff)
{
  const ulong i = get_global_id(0);
  if (i >= n) return;
  const float p = adamw_one(grad + goff, m + moff, v + voff, param[poff + i], i, lr, beta1, beta2,
                            one_m_beta1, one_m_beta2, bc1, bc2, eps, weight_decay, grad_scale);
  param[poff + i] = p;
  copy[coff + i] = f32_to_bf16(p);
}

/* The same steps with the gradient's scale read on the device (scale[soff], written by
 * grad_clip_scale): no wait for the host between the norm and the step. A NaN scale (the
 * norm was not finite) leaves param, m, v and copy as they were: the step is not taken. */
__kernel void adamw_step_dev(__global float *param, ulong poff, __global const float *grad, ulong goff,
                             __global float *m, ulong moff, __global float *v, ulong voff, ulong n,
                             float lr, float beta1, float beta2, float one_m_beta1,
                             float one_m_beta2, float bc1, float bc2, float eps, float weight_decay,
                             __global const float *scale, ulong soff)
{
  const ulong i = get_global_id(0);
  const float s = scale[soff];
  if (i >= n || isnan(s)) return;
  param[poff + i] = adamw_one(grad + goff, m + moff, v + voff, param[poff + i], i, lr, beta1, beta2,
                              one_m_beta1, one_m_beta2, bc1, bc2, eps, weight_decay, s);
}

__kernel void adamw_step_bf16_dev(__global float *param, ulong poff, __global const float *grad,
                                  ulong goff, __global float *m, ulong moff, __global float *v,
                                  ulong voff, ulong n, float lr, float beta1, float beta2,
                                  float one_m_beta1, float one_m_beta2, float bc1, float bc2,
                                  float eps, float weight_decay, __global const float *scale,
                                  ulong soff, __global ushort *copy, ulong coff)
{
  const ulong i = get_global_id(0);
  const float s = scale[soff];
  if (i >= n || isnan(s)) return;
  const float p = adamw_one(grad + goff, m + moff, v + voff, param[poff + i], i, lr, beta1, beta2,
                            one_m_beta1, one_m_beta2, bc1, bc2, eps, weight_decay, s);
  param[poff + i] = p;
  copy[coff + i] = f32_to_bf16(p);
}

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
/* Global gradient-norm clipping on the device, one work-item: sums [n] fp32 are the
 * gradients' sums of squares; norm = sqrt of their sum in double, in index order (the order
 * of the host's sum, so the same bits); scale = clip / norm rounded to fp32 when clip > 0 and
 * norm > clip, else 1, NaN when norm is not finite. out[0] = norm (the double's bits as two
 * uints, low word first), out[1] = scale. */
__kernel void grad_clip_scale(__global const float *sums, ulong soff, ulong n, double clip,
                              __global uint *out, ulong ooff, __global float *scale, ulong scoff)
{
  if (get_global_id(0) != 0) return;
  double total = 0.0;
  for (ulong i = 0; i < n; i++) total += (double)sums[soff + i];
  const double norm = sqrt(total);
  const ulong bits = as_ulong(norm);
  out[ooff] = (uint)bits;
  out[ooff + 1] = (uint)(bits >> 32);
  float s = 1.0f;
  if (isnan(norm) || isinf(norm)) s = NAN;
  else if (clip > 0.0 && norm > clip) s = (float)(clip / norm);
  scale[scoff] = s;
}
#endif
