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
