/* kda_conv.cl: causal depthwise short convolution over time with SiLU (KDA's ShortConv4):
 *   y[t, c] = silu(pre[t, c]),  pre[t, c] = sum_{j < W} w[c, j] x[t - W + 1 + j, c],
 * inputs before a sequence's first token taken from its conv state [N, W - 1, C].
 * Built per width and storage: -DCONV_W=W, -DSTORE_BF16 (x), -DOUT_BF16 (y), and per
 * device: -DCONV_VEC, -DCONV_SYNC (below).
 *
 * Layouts are channels last (x, y, dy, dx [tokens, C]; w [C, W]; states [N, W - 1, C]), so
 * dimension 0 of every launch runs along C: neighbouring work-items touch neighbouring
 * addresses. Dimension 1 splits the flat token range [0, B T) into chunks of `per` tokens;
 * a chunk may span sequence boundaries, so its work-item walks every sequence the chunk
 * overlaps, keeping the last W inputs in registers (each input is read once, plus W - 1
 * at the start of each piece). Sequence n is tokens [bounds[n], bounds[n + 1]) of the
 * cu_seqlens tensor when has_cu is set, else [n T, (n + 1) T). */

#ifndef CONV_W
#define CONV_W 4
#endif
#define CW1 (CONV_W - 1) /* state length */

#if defined(OUT_BF16) && OUT_BF16
typedef ushort out_t;
#define STORE_OUT(p, i, v) ((p)[i] = f32_to_bf16(v))
#else
typedef float out_t;
#define STORE_OUT(p, i, v) ((p)[i] = (v))
#endif

/* The token-range kernels (forward, backward chunks) handle CONV_VEC adjacent channels per
 * work-item: the device's preferred float vector width when it divides C (1 on GPUs, the
 * SIMD width on CPUs). A CPU compiler (PoCL) runs a work-group as a loop over its
 * work-items and cannot vectorise across them around the loop over tokens, so the
 * packing is explicit. vfloat holds CONV_VEC channels; lanes never mix, so each channel's
 * arithmetic is the same whatever CONV_VEC is.
 *
 * CONV_SYNC (CPUs): a barrier after each token. It makes such a compiler run one token
 * for the whole work-group before the next, so a group reads rows of contiguous channels
 * instead of walking one channel group down tokens C floats apart (2.4x faster backward
 * on PoCL). Every work-item of a group shares the chunk, so all reach the same barriers;
 * padding work-items past C run on the last channel group and store nothing. */
#ifndef CONV_VEC
#define CONV_VEC 1
#endif
#ifndef CONV_SYNC
#define CONV_SYNC 0
#endif
#define CONV_CAT_(a, b) a##b
#define CONV_CAT(a, b) CONV_CAT_(a, b)
#if CONV_VEC == 1
typedef float vfloat;
#define VLOAD_F(p, i) ((p)[i])
#define VSTORE_F(p, i, v) ((p)[i] = (v))
#define VLOAD_X(p, i) LOAD(p, i)
#define VSTORE_OUT(p, i, v) STORE_OUT(p, i, v)
#else
typedef CONV_CAT(float, CONV_VEC) vfloat;
typedef CONV_CAT(uint, CONV_VEC) vuint;
typedef CONV_CAT(int, CONV_VEC) vint;
typedef CONV_CAT(ushort, CONV_VEC) vushort;
#define VLOAD_F(p, i) CONV_CAT(vload, CONV_VEC)(0, (p) + (i))
#define VSTORE_F(p, i, v) CONV_CAT(vstore, CONV_VEC)((v), 0, (p) + (i))
/* bf16 <-> fp32 on CONV_VEC lanes, as bf16_to_f32 / f32_to_bf16 in common.cl. */
inline vfloat vbf16_to_f32(vushort h) { return CONV_CAT(as_float, CONV_VEC)(CONV_CAT(convert_uint, CONV_VEC)(h) << 16); }
inline vushort vf32_to_bf16(vfloat f)
{
  const vuint u = CONV_CAT(as_uint, CONV_VEC)(f);
  const vuint rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
  const vint nan = (u & 0x7fffffffu) > 0x7f800000u;
  return CONV_CAT(convert_ushort, CONV_VEC)(select(rounded, quiet, nan));
}
#if defined(STORE_BF16) && STORE_BF16
#define VLOAD_X(p, i) vbf16_to_f32(CONV_CAT(vload, CONV_VEC)(0, (p) + (i)))
#else
#define VLOAD_X(p, i) VLOAD_F(p, i)
#endif
#if defined(OUT_BF16) && OUT_BF16
#define VSTORE_OUT(p, i, v) CONV_CAT(vstore, CONV_VEC)(vf32_to_bf16(v), 0, (p) + (i))
#else
#define VSTORE_OUT(p, i, v) VSTORE_F(p, i, v)
#endif
#endif

inline float conv_sigmoid(float p) { return 1.0f / (1.0f + exp(-p)); }
inline vfloat conv_vsigmoid(vfloat p) { return 1.0f / (1.0f + exp(-p)); }

/* First token of sequence n (n = N gives the end of the last one). */
inline int seq_start(__global const int *bounds, ulong bo, int has_cu, int T, int n)
{
  return has_cu ? bounds[bo + n] : n * T;
}

/* The sequence holding token tok (< B T): the largest n < N with start(n) <= tok, which
 * skips empty sequences. */
inline int seq_find(__global const int *bounds, ulong bo, int has_cu, int T, int N, int tok)
{
  if (!has_cu) return tok / T;
  int lo = 0, hi = N - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (bounds[bo + mid] <= tok) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* Input at token tau of sequence n starting at `start`: x inside the sequence, the state
 * (or zero) for the W - 1 positions before it. Scalar and CONV_VEC-channel forms. */
inline float conv_in(__global const store_t *x, ulong xo, __global const float *st, ulong so,
                     int has_state, int C, int c, int n, int start, int tau)
{
  if (tau >= start) return LOAD(x, xo + (ulong)tau * (ulong)C + c);
  if (!has_state) return 0.0f;
  return st[so + ((ulong)n * CW1 + (ulong)(CW1 + tau - start)) * (ulong)C + c];
}

inline vfloat conv_vin(__global const store_t *x, ulong xo, __global const float *st, ulong so,
                       int has_state, int C, int c, int n, int start, int tau)
{
  if (tau >= start) return VLOAD_X(x, xo + (ulong)tau * (ulong)C + c);
  if (!has_state) return (vfloat)(0.0f);
  return VLOAD_F(st, so + ((ulong)n * CW1 + (ulong)(CW1 + tau - start)) * (ulong)C + c);
}

inline float conv_dot(const float *wr, const float *xw)
{
  float p = 0.0f;
  for (int j = 0; j < CONV_W; j++) p += wr[j] * xw[j];
  return p;
}

inline vfloat conv_vdot(const vfloat *wr, const vfloat *xw)
{
  vfloat p = 0.0f;
  for (int j = 0; j < CONV_W; j++) p += wr[j] * xw[j];
  return p;
}

/* wr[j] = w[c .. c + CONV_VEC - 1, j]: the taps of CONV_VEC channels (w is [C, W]). */
inline void conv_vweights(__global const float *w, ulong wo, int c, vfloat *wr)
{
  float tmp[CONV_VEC];
  for (int j = 0; j < CONV_W; j++) {
    for (int v = 0; v < CONV_VEC; v++) tmp[v] = w[wo + (ulong)(c + v) * CONV_W + j];
    wr[j] = VLOAD_F(tmp, 0);
  }
}

/* dL/dpre at a token from its input window and dL/dy. */
inline float conv_dpre(const float *wr, const float *xw, float dy)
{
  const float p = conv_dot(wr, xw), sg = conv_sigmoid(p);
  return dy * sg * (1.0f + p * (1.0f - sg));
}

inline vfloat conv_vdpre(const vfloat *wr, const vfloat *xw, vfloat dy)
{
  const vfloat p = conv_vdot(wr, xw), sg = conv_vsigmoid(p);
  return dy * sg * (1.0f + p * (1.0f - sg));
}

/* y for the tokens [k per, (k + 1) per) of channels c .. c + CONV_VEC - 1;
 * global (C / CONV_VEC, chunks). */
__kernel void conv_forward(__global const store_t *x, ulong xo, __global const float *w, ulong wo,
                           __global const int *bounds, ulong bo, int has_cu, int T, int N,
                           int ntok, int C, int per, __global const float *st, ulong so,
                           int has_state, __global out_t *y, ulong yo)
{
  const int c_raw = (int)get_global_id(0) * CONV_VEC;
  const long c0l = (long)get_global_id(1) * per;
  if (c0l >= ntok) return;
  const int active = c_raw < C, c = active ? c_raw : C - CONV_VEC; /* as in the backward */
  const int c0 = (int)c0l, c1 = (int)min((long)ntok, c0l + per);
  vfloat wr[CONV_W], xw[CONV_W];
  conv_vweights(w, wo, c, wr);
  for (int n = seq_find(bounds, bo, has_cu, T, N, c0); n < N; n++) {
    const int start = seq_start(bounds, bo, has_cu, T, n), end = seq_start(bounds, bo, has_cu, T, n + 1);
    if (start >= c1) break;
    const int s = max(c0, start), e = min(c1, end);
    for (int i = 0; i < CW1; i++) xw[i] = conv_vin(x, xo, st, so, has_state, C, c, n, start, s - CW1 + i);
    for (int t = s; t < e; t++) {
      const ulong r = (ulong)t * (ulong)C + c;
      xw[CW1] = VLOAD_X(x, xo + r);
      const vfloat p = conv_vdot(wr, xw);
      if (active) VSTORE_OUT(y, yo + r, p * conv_vsigmoid(p));
      for (int i = 0; i < CW1; i++) xw[i] = xw[i + 1];
#if CONV_SYNC
      barrier(CLK_GLOBAL_MEM_FENCE);
#endif
    }
  }
}

/* state_out[n, m, c] = input at token end - (W - 1) + m; global (C, N). One work-item owns
 * a (sequence, channel) column and writes m in ascending order after reading position
 * m + len >= m of state_in, so state_out may be state_in itself. */
__kernel void conv_state_out(__global const store_t *x, ulong xo, __global const int *bounds, ulong bo,
                             int has_cu, int T, int C, __global const float *st, ulong so,
                             int has_state, __global float *out, ulong oo)
{
  const int c = (int)get_global_id(0), n = (int)get_global_id(1);
  if (c >= C) return;
  const int start = seq_start(bounds, bo, has_cu, T, n), end = seq_start(bounds, bo, has_cu, T, n + 1);
  for (int m = 0; m < CW1; m++)
    out[oo + ((ulong)n * CW1 + m) * (ulong)C + c] =
        conv_in(x, xo, st, so, has_state, C, c, n, start, end - CW1 + m);
}

/* Decoding: x, y [N, C]; state [N, W - 1, C] read, then shifted by one with x appended.
 * Each work-item reads its whole column before writing it: in place is safe.
 * global (C, N). */
__kernel void conv_step(__global const store_t *x, ulong xo, __global const float *w, ulong wo,
                        int C, __global float *st, ulong so, __global out_t *y, ulong yo)
{
  const int c = (int)get_global_id(0), n = (int)get_global_id(1);
  if (c >= C) return;
  float wr[CONV_W], xw[CONV_W];
  for (int j = 0; j < CONV_W; j++) wr[j] = w[wo + (ulong)c * CONV_W + j];
  const ulong col = so + (ulong)n * CW1 * (ulong)C + c;
  for (int i = 0; i < CW1; i++) xw[i] = st[col + (ulong)i * C];
  xw[CW1] = LOAD(x, xo + (ulong)n * (ulong)C + c);
  const float p = conv_dot(wr, xw);
  STORE_OUT(y, yo + (ulong)n * (ulong)C + c, p * conv_sigmoid(p));
  for (int i = 0; i < CW1; i++) st[col + (ulong)i * C] = xw[i + 1];
}

/* One token t of the backward walk: with `live`, dpre at t from x and dy (else 0, past
 * the sequence's end); with `own`, its share of dw; then dx at t - (W - 1), all of whose
 * dpre are now known, if that token is >= s. Called with constant flags, so inlining
 * removes the branches. */
inline void conv_bwd_token(__global const store_t *x, ulong xo, __global const float *dy, ulong dyo,
                           __global float *dx, ulong dxo, int C, int c, const vfloat *wr,
                           vfloat *xw, vfloat *dp, vfloat *acc, int t, int s, int live, int own, int active)
{
  vfloat d = 0.0f;
  if (live) {
    const ulong r = (ulong)t * (ulong)C + c;
    xw[CW1] = VLOAD_X(x, xo + r);
    d = conv_vdpre(wr, xw, VLOAD_F(dy, dyo + r));
    if (own)
      for (int j = 0; j < CONV_W; j++) acc[j] += d * xw[j];
  }
  dp[CW1] = d;
  const int tau = t - CW1;
  if (tau >= s) {
    vfloat g = 0.0f;
    for (int j = 0; j < CONV_W; j++) g += wr[j] * dp[CW1 - j];
    if (active) VSTORE_F(dx, dxo + (ulong)tau * (ulong)C + c, g);
  }
  for (int i = 0; i < CW1; i++) {
    xw[i] = xw[i + 1];
    dp[i] = dp[i + 1];
  }
#if CONV_SYNC
  barrier(CLK_GLOBAL_MEM_FENCE);
#endif
}

/* Backward over the tokens [k per, (k + 1) per): dx of those tokens, and into
 * part[k, c, 0..W) the chunk's share of dw (its tokens summed in order). Token t's x feeds
 * pre at t .. t + W - 1, so each piece runs W - 1 tokens past its end (recomputing their
 * dpre; tokens past the sequence's end contribute 0). global (C / CONV_VEC, chunks). */
__kernel void conv_backward_chunks(__global const store_t *x, ulong xo, __global const float *w,
                                   ulong wo, __global const int *bounds, ulong bo, int has_cu,
                                   int T, int N, int ntok, int C, int per,
                                   __global const float *st, ulong so, int has_state,
                                   __global const float *dy, ulong dyo, __global float *dx,
                                   ulong dxo, __global float *part, ulong po)
{
  const int k = (int)get_global_id(1), c_raw = (int)get_global_id(0) * CONV_VEC;
  const long c0l = (long)k * per;
  if (c0l >= ntok) return;
  /* Padding work-items (c >= C) run on the last column without storing, so that every
   * work-item of a group reaches the barriers of CONV_SYNC. */
  const int active = c_raw < C, c = active ? c_raw : C - CONV_VEC;
  const int c0 = (int)c0l, c1 = (int)min((long)ntok, c0l + per);
  vfloat wr[CONV_W], xw[CONV_W], dp[CONV_W], acc[CONV_W];
  conv_vweights(w, wo, c, wr);
  for (int j = 0; j < CONV_W; j++) acc[j] = 0.0f;
  for (int n = seq_find(bounds, bo, has_cu, T, N, c0); n < N; n++) {
    const int start = seq_start(bounds, bo, has_cu, T, n), end = seq_start(bounds, bo, has_cu, T, n + 1);
    if (start >= c1) break;
    const int s = max(c0, start), e = min(c1, end);
    if (s >= e) continue;
    /* xw[i]: input at t - (W - 1) + i; dp[i]: dpre at t - (W - 1) + i (0 before s: dx of
     * tokens >= s never needs them). */
    for (int i = 0; i < CW1; i++) {
      xw[i] = conv_vin(x, xo, st, so, has_state, C, c, n, start, s - CW1 + i);
      dp[i] = 0.0f;
    }
    /* Own tokens (dw and dx), then up to W - 1 past e inside the sequence (dx only), then
     * past the sequence's end (dpre = 0); the split keeps branches out of the loops. */
    const int e_live = min(e + CW1, end);
    int t = s;
    for (; t < e; t++) conv_bwd_token(x, xo, dy, dyo, dx, dxo, C, c, wr, xw, dp, acc, t, s, 1, 1, active);
    for (; t < e_live; t++) conv_bwd_token(x, xo, dy, dyo, dx, dxo, C, c, wr, xw, dp, acc, t, s, 1, 0, active);
    for (; t < e + CW1; t++) conv_bwd_token(x, xo, dy, dyo, dx, dxo, C, c, wr, xw, dp, acc, t, s, 0, 0, active);
  }
  float tmp[CONV_VEC];
  if (!active) return;
  for (int j = 0; j < CONV_W; j++) {
    VSTORE_F(tmp, 0, acc[j]);
    for (int v = 0; v < CONV_VEC; v++) part[po + ((ulong)k * (ulong)C + c + v) * CONV_W + j] = tmp[v];
  }
}

/* dw[i] = sum over chunks k in order of part[k, i], i < n = C W: the fixed second pass. */
__kernel void conv_dw_final(__global const float *part, int chunks, int n, __global float *dw,
                            ulong dwo)
{
  const int i = (int)get_global_id(0);
  if (i >= n) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += part[(ulong)k * (ulong)n + i];
  dw[dwo + i] = s;
}

/* dstate_in[n, m, c] = sum_{j <= m} w[c, j] dpre[start + m - j] over tokens inside the
 * sequence: the state positions feed the first W - 1 outputs only. global (C, N). */
__kernel void conv_dstate(__global const store_t *x, ulong xo, __global const float *w, ulong wo,
                          __global const int *bounds, ulong bo, int has_cu, int T, int C,
                          __global const float *st, ulong so, int has_state,
                          __global const float *dy, ulong dyo, __global float *ds, ulong dso)
{
  const int c = (int)get_global_id(0), n = (int)get_global_id(1);
  if (c >= C) return;
  const int start = seq_start(bounds, bo, has_cu, T, n), end = seq_start(bounds, bo, has_cu, T, n + 1);
  float wr[CONV_W], xw[CONV_W], dp[CONV_W];
  for (int j = 0; j < CONV_W; j++) wr[j] = w[wo + (ulong)c * CONV_W + j];
  for (int i = 0; i < CW1; i++) xw[i] = conv_in(x, xo, st, so, has_state, C, c, n, start, start - CW1 + i);
  for (int i = 0; i < CW1; i++) {
    const int t = start + i;
    dp[i] = 0.0f;
    if (t < end) {
      const ulong r = (ulong)t * (ulong)C + c;
      xw[CW1] = LOAD(x, xo + r);
      dp[i] = conv_dpre(wr, xw, dy[dyo + r]);
      for (int q = 0; q < CW1; q++) xw[q] = xw[q + 1];
    }
  }
  for (int m = 0; m < CW1; m++) {
    float g = 0.0f;
    for (int j = 0; j <= m; j++) g += wr[j] * dp[m - j];
    ds[dso + ((ulong)n * CW1 + m) * (ulong)C + c] = g;
  }
}
