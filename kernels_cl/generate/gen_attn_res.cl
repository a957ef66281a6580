/* gen_attn_res.cl: Block Attention Residuals and the sub-layer's RMSNorm of a decode step in
 * one launch (built after kernels_cl/model/attn_res.cl, whose lane loops and fixed-order
 * reduction it uses): h as attn_res_forward computes it, to the bit, then
 *   hn = h rstd gain_n,  rstd = rsqrt(mean(h^2) + eps)
 * with the sum of squares over AR_LANES lanes in the same fixed order. One work-group per
 * token; src [S, T, d], h, hn [T, d]. The two sums of every source (sum of squares, dot
 * with w g) go through one reduction for up to GAR_SRC sources at once, each over the same
 * lanes and the same halving tree as ar_weights, so a step waits on few barriers. */
#define GAR_SRC 4

/* The reductions of ar_reduce for n values at once: red [n][AR_LANES]; out[i] = the sum of
 * red[i]. */
inline void gar_reduce(__local float *red, int n, int lid, int lsize, __local float *out)
{
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int w = AR_LANES / 2; w > 0; w >>= 1) {
    for (int q = lid; q < n * w; q += lsize) {
      const int i = q / w, l = q % w;
      red[i * AR_LANES + l] += red[i * AR_LANES + l + w];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = lid; i < n; i += lsize) out[i] = red[i * AR_LANES];
  barrier(CLK_LOCAL_MEM_FENCE);
}

/* ar_weights of kernels_cl/model/attn_res.cl (the same values): a[i], i < S. */
inline void gar_weights(__global const float *src, ulong so, int S, ulong T, ulong d, __global const float *w,
                        ulong wo, __global const float *g, ulong go, float eps, ulong t, int lid, int lsize,
                        __local float *red, __local float *sums, __local float *a)
{
  for (int i0 = 0; i0 < S; i0 += GAR_SRC) {
    const int ns = min(GAR_SRC, S - i0);
    for (int q = lid; q < ns * AR_LANES; q += lsize) { /* the lane loops of ar_weights */
      const int i = q / AR_LANES, lane = q % AR_LANES;
      __global const float *b = src + so + ((ulong)(i0 + i) * T + t) * d;
      float ss = 0.0f, dt = 0.0f;
      for (ulong c = (ulong)lane; c < d; c += AR_LANES) ss += b[c] * b[c];
      for (ulong c = (ulong)lane; c < d; c += AR_LANES) dt += w[wo + c] * g[go + c] * b[c];
      red[(2 * i) * AR_LANES + lane] = ss;
      red[(2 * i + 1) * AR_LANES + lane] = dt;
    }
    gar_reduce(red, 2 * ns, lid, lsize, sums);
    for (int i = lid; i < ns; i += lsize) a[i0 + i] = sums[2 * i + 1] / sqrt(sums[2 * i] / (float)d + eps);
  }
  ar_softmax(a, S, lid);
}

/* h[t, c] = sum_i a[i] src[i, t, c], in order (attn_res_forward's sum). */
inline float gar_mix(__global const float *src, ulong so, int S, ulong T, ulong d, __local const float *a, ulong t,
                     ulong c)
{
  float s = 0.0f;
  for (int i = 0; i < S; i++) s += a[i] * src[so + ((ulong)i * T + t) * d + c];
  return s;
}

__kernel void gen_attn_res_norm(__global const float *src, ulong so, int S, ulong T, ulong d,
                                __global const float *w, ulong wo, __global const float *g, ulong go,
                                __global const float *gn, ulong gno, float eps, __global float *h,
                                __global float *hn)
{
  __local float red[2 * GAR_SRC * AR_LANES];
  __local float sums[2 * GAR_SRC];
  __local float a[AR_MAX_S];
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
  const ulong t = get_group_id(0);
  gar_weights(src, so, S, T, d, w, wo, g, go, eps, t, lid, lsize, red, sums, a);
  /* h is not read back: each element is mixed again where it is needed (the same sum, the
   * same bits), once for the sum of squares and once with the output. */
  LANE_LOOP(lid, lsize, const float v = gar_mix(src, so, S, T, d, a, t, c); acc_ += v * v);
  const float r = rsqrt(ar_reduce(red, lid, lsize) / (float)d + eps); /* as kernels_cl/ops/norm.cl */
  for (ulong c = (ulong)lid; c < d; c += (ulong)lsize) {
    const float v = gar_mix(src, so, S, T, d, a, t, c);
    h[t * d + c] = v;
    hn[t * d + c] = v * r * gn[gno + c];
  }
}
