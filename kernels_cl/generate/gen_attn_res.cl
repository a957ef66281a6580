/* gen_attn_res.cl: Block Attention Residuals and the sub-layer's RMSNorm of a decode step in
 * one launch (built after kernels_cl/model/attn_res.cl, whose weights, lane loops and
 * fixed-order reduction it uses): h as attn_res_forward computes it, then
 *   hn = h rstd gain_n,  rstd = rsqrt(mean(h^2) + eps)
 * with the sum of squares over AR_LANES lanes in the same fixed order. One work-group per
 * token; src [S, T, d], h, hn [T, d]. */
__kernel void gen_attn_res_norm(__global const float *src, ulong so, int S, ulong T, ulong d,
                                __global const float *w, ulong wo, __global const float *g, ulong go,
                                __global const float *gn, ulong gno, float eps, __global float *h,
                                __global float *hn)
{
  __local float red[AR_LANES];
  __local float a[AR_MAX_S];
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
  const ulong t = get_group_id(0);
  ar_weights(src, so, S, T, d, w, wo, g, go, eps, t, lid, lsize, red, a);
  for (ulong c = (ulong)lid; c < d; c += (ulong)lsize) {
    float s = 0.0f;
    for (int i = 0; i < S; i++) s += a[i] * src[so + ((ulong)i * T + t) * d + c];
    h[t * d + c] = s;
  }
  barrier(CLK_GLOBAL_MEM_FENCE); /* h of this token, written by this work-group */
  __global const float *hr = h + t * d;
  LANE_LOOP(lid, lsize, acc_ += hr[c] * hr[c]);
  const float r = rsqrt(ar_reduce(red, lid, lsize) / (float)d + eps); /* as kernels_cl/ops/norm.cl */
  for (ulong c = (ulong)lid; c < d; c += (ulong)lsize) hn[t * d + c] = hr[c] * r * gn[gno + c];
}
