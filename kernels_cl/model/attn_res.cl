/* attn_res.cl: Block Attention Residuals, one work-group per token; sums over d in a fixed
 * order (256 virtual lanes, then halving) whatever the work-group size. S (sources) is at
 * most AR_MAX_S. */
#define AR_LANES 256
#define AR_MAX_S 32

/* Per-lane partial over the columns c = lane, lane + 256, ... that work-item lid owns. A
 * work-item owns lanes lid, lid + lsize, ...; for a fixed order each lane's partial is summed
 * separately and only then added across lanes. */
#define LANE_LOOP(lid, lsize, body_acc)                                                     \
  for (int lane = lid; lane < AR_LANES; lane += lsize) {                                    \
    float acc_ = 0.0f;                                                                      \
    for (ulong c = (ulong)lane; c < d; c += AR_LANES) { body_acc; }                         \
    red[lane] = acc_;                                                                       \
  }

/* Fixed-order reduction of the lanes written by LANE_LOOP. */
inline float ar_reduce(__local float *red, int lid, int lsize)
{
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int w = AR_LANES / 2; w > 0; w >>= 1) {
    for (int l = lid; l < w; l += lsize) red[l] += red[l + w];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float s = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return s;
}

/* a[0 .. S) = softmax of a[0 .. S), in order by work-item 0; every work-item calls it. */
inline void ar_softmax(__local float *a, int S, int lid)
{
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    float m = a[0];
    for (int i = 1; i < S; i++) m = fmax(m, a[i]);
    float z = 0.0f;
    for (int i = 0; i < S; i++) z += (a[i] = exp(a[i] - m));
    for (int i = 0; i < S; i++) a[i] /= z; /* a NaN source makes every weight NaN */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

/* The mixing weights of token t: a[i] = softmax_i(<w, g * b_i> / rms(b_i)), b_i = src[i, t, :],
 * in local memory for every work-item of the group (src [S, T, d]). */
inline void ar_weights(__global const float *src, ulong so, int S, ulong T, ulong d, __global const float *w,
                       ulong wo, __global const float *g, ulong go, float eps, ulong t, int lid, int lsize,
                       __local float *red, __local float *a)
{
  for (int i = 0; i < S; i++) {
    __global const float *b = src + so + ((ulong)i * T + t) * d;
    LANE_LOOP(lid, lsize, acc_ += b[c] * b[c]);
    const float ss = ar_reduce(red, lid, lsize);
    LANE_LOOP(lid, lsize, acc_ += w[wo + c] * g[go + c] * b[c]);
    const float dot = ar_reduce(red, lid, lsize);
    if (lid == 0) a[i] = dot / sqrt(ss / (float)d + eps);
  }
  ar_softmax(a, S, lid);
}

/* h[t] = sum_i a_i b_i[t]; alpha[t, i] = a_i; rinv[t, i] = 1 / r_i. */
__kernel void attn_res_forward(__global const float *src, ulong so, int S, ulong T, ulong d,
                               __global const float *w, ulong wo, __global const float *g, ulong go,
                               float eps, __global float *h, ulong ho, __global float *alpha,
                               ulong ao, int has_alpha)
{
  __local float red[AR_LANES];
  __local float a[AR_MAX_S];
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
  const ulong t = get_group_id(0);
  ar_weights(src, so, S, T, d, w, wo, g, go, eps, t, lid, lsize, red, a);
  if (lid == 0 && has_alpha)
    for (int i = 0; i < S; i++) alpha[ao + t * (ulong)S + i] = a[i];
  for (ulong c = (ulong)lid; c < d; c += (ulong)lsize) {
    float s = 0.0f;
    for (int i = 0; i < S; i++) s += a[i] * src[so + ((ulong)i * T + t) * d + c];
    h[ho + t * d + c] = s;
  }
}

/* Backward for one token: dsrc += a_i dh + dl_i (u / r_i - l_i b_i / (d r_i^2)), and the
 * token's contributions to dw and dgain (sum over i of dl_i b_i / r_i, times g or w) into
 * part[t, c] (first d: dw, next d: dgain), summed over tokens by a second pass. */
__kernel void attn_res_backward(__global const float *src, ulong so, int S, ulong T, ulong d,
                                __global const float *w, ulong wo, __global const float *g,
                                ulong go, float eps, __global const float *alpha, ulong ao,
                                __global const float *dh, ulong dho, __global float *dsrc,
                                ulong dso, __global float *part)
{
  __local float red[AR_LANES];
  __local float rinv[AR_MAX_S], l[AR_MAX_S], dl[AR_MAX_S], da[AR_MAX_S];
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
  const ulong t = get_group_id(0);
  for (int i = 0; i < S; i++) {
    __global const float *b = src + so + ((ulong)i * T + t) * d;
    LANE_LOOP(lid, lsize, acc_ += b[c] * b[c]);
    const float ss = ar_reduce(red, lid, lsize);
    LANE_LOOP(lid, lsize, acc_ += w[wo + c] * g[go + c] * b[c]);
    const float dot = ar_reduce(red, lid, lsize);
    LANE_LOOP(lid, lsize, acc_ += dh[dho + t * d + c] * b[c]);
    const float dai = ar_reduce(red, lid, lsize);
    if (lid == 0) {
      rinv[i] = 1.0f / sqrt(ss / (float)d + eps);
      l[i] = dot * rinv[i];
      da[i] = dai;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) { /* softmax backward: dl_i = a_i (da_i - sum_j a_j da_j) */
    float s = 0.0f;
    for (int i = 0; i < S; i++) s += alpha[ao + t * (ulong)S + i] * da[i];
    for (int i = 0; i < S; i++) dl[i] = alpha[ao + t * (ulong)S + i] * (da[i] - s);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (ulong c = (ulong)lid; c < d; c += (ulong)lsize) {
    const float u = w[wo + c] * g[go + c], dhc = dh[dho + t * d + c];
    float pw = 0.0f;
    for (int i = 0; i < S; i++) {
      const ulong e = ((ulong)i * T + t) * d + c;
      const float b = src[so + e], ai = alpha[ao + t * (ulong)S + i];
      dsrc[dso + e] += ai * dhc + dl[i] * (u * rinv[i] - l[i] * b * rinv[i] * rinv[i] / (float)d);
      pw += dl[i] * b * rinv[i];
    }
    part[t * 2 * d + c] = pw * g[go + c];
    part[t * 2 * d + d + c] = pw * w[wo + c];
  }
}
