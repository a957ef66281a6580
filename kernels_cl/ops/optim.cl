/* optim.cl: fused optimizer steps, one work-item per parameter. */

/* AdamW (decoupled weight decay), as include/clmoe/ops.h states it:
 *   g = grad_scale grad;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   param -= lr (wd param + (m / bc1) / (sqrt(v / bc2) + eps)),  bc = 1 - b^t.
 * The host computes 1 - b and the bias corrections in double; the old param is the one
 * that decays. */
__kernel void adamw_step(__global float *param, ulong poff, __global const float *grad, ulong goff,
                         __global float *m, ulong moff, __global float *v, ulong voff, ulong n,
                         float lr, float beta1, float beta2, float one_m_beta1, float one_m_beta2,
                         float bc1, float bc2, float eps, float weight_decay, float grad_scale)
{
  const ulong i = get_global_id(0);
  if (i >= n) return;
  const float g = grad_scale * grad[goff + i];
  const float mi = beta1 * m[moff + i] + one_m_beta1 * g;
  const float vi = beta2 * v[voff + i] + one_m_beta2 * (g * g);
  const float p = param[poff + i];
  const float update = (mi / bc1) / (sqrt(vi / bc2) + eps);
  m[moff + i] = mi;
  v[voff + i] = vi;
  param[poff + i] = p - lr * (weight_decay * p + update);
}
