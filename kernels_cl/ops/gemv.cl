/* gemv.cl: products of few token rows with weight matrices (GEMV-shaped: a decode step's
 * projections), several matrices that read the same x in one launch.
 *
 *   Y_s [T, N_s] = beta Y_s + in(x) W_s^T       W_s [N_s, K] row-major, s = 0 .. 5
 *
 * W is fp32, or bf16 with -DGV_WBF16=1 (every slot of a launch alike); x, Y and the sums are
 * fp32.
 *
 * in(x) is x [T, K] itself (mode 0), RMSNorm of x with gain g [K] (mode 1: x rstd g, rstd =
 * 1 / sqrt(mean(x^2) + eps) per token), or the gated unit of two inputs (mode 2: glu(x, x2),
 * glu 0 SiTU-GLU, 1 SwiGLU) or the product with a sigmoid gate (mode 3: x sigmoid(x2), an
 * attention output gate). beta is 0 (Y is only written) or 1.
 *
 * A work-group of GV_LANES (64) work-items takes GV_ROWS rows of one matrix and GV_TOK
 * tokens; each output is GV_LANES strided partial sums over K added in lane order (partial p
 * over the columns p, p + 64, ...), so the bits do not depend on the device's work-group
 * size or on GV_ROWS, GV_TOK, GV_UNROLL and GV_VEC. With GV_VEC a work-item computes the
 * partials of 8 adjacent lanes from 8-element vector loads (16 bytes of bf16 where a lane
 * reads 2), 8 work-items a row. */
#ifndef GV_ROWS
#define GV_ROWS 4
#endif
#ifndef GV_TOK
#define GV_TOK 4
#endif
#ifndef GV_UNROLL
#define GV_UNROLL 1 /* columns per work-item whose weights are loaded at once */
#endif
#ifndef GV_VEC
#define GV_VEC 0 /* 1: a work-item takes 8 adjacent lanes' partials, read as vectors */
#endif
#if GV_VEC
#if GV_ROWS % 8 != 0
#error "GV_VEC needs GV_ROWS a multiple of 8"
#endif
#define GV_RPI (GV_ROWS / 8) /* rows per work-item */
#endif
#define GV_LANES 64
#define GV_SLOTS 6
#if defined(GV_WBF16) && GV_WBF16
typedef ushort gv_w_t;
#define GV_W(p, i) bf16_to_f32((p)[i])
#define GV_W8(p, i) bf16x8_to_f32(vload8(0, (p) + (i)))
#else
typedef float gv_w_t;
#define GV_W(p, i) ((p)[i])
#define GV_W8(p, i) vload8(0, (p) + (i))
#endif

inline float gv_sigmoid(float v) { return 1.0f / (1.0f + exp(-v)); }

/* The gated units of kernels_cl/moe/moe_common.cl (b1 = 4, b2 = 25). */
inline float gv_glu(int glu, float u, float w)
{
  return glu ? u * gv_sigmoid(u) * w : 4.0f * tanh(u / 4.0f) * gv_sigmoid(u) * (25.0f * tanh(w / 25.0f));
}

/* in(x) of token t0 + t (an absent token reads t0's: its outputs are not written) at column c;
 * rs: the token's rstd in mode 1. Both forms below compute it alike. */
inline float gv_in(__global const float *x, ulong xoff, __global const float *x2, ulong x2off,
                   __global const float *gain, int mode, int glu, float rs, int t0, int t, int T, int K, int c)
{
  const ulong xi = (ulong)(t0 + t < T ? t0 + t : t0) * (ulong)K + (ulong)c;
  const float v = x[xoff + xi];
  return mode == 1   ? v * rs * gain[c]
         : mode == 2 ? gv_glu(glu, v, x2[x2off + xi])
         : mode == 3 ? v * gv_sigmoid(x2[x2off + xi])
                     : v;
}

/* One weight slot: W at woff with n rows; Y at yoff, rows of n. */
#define GV_SLOT_ARGS(i) __global const gv_w_t *w##i, ulong woff##i, int n##i, __global float *y##i, ulong yoff##i

__kernel __attribute__((reqd_work_group_size(GV_LANES, 1, 1)))
void gemv_multi(__global const float *x, ulong xoff, __global const float *x2, ulong x2off,
                __global const float *gain, int mode, int glu, float eps, int T, int K, int beta,
                GV_SLOT_ARGS(0), GV_SLOT_ARGS(1), GV_SLOT_ARGS(2), GV_SLOT_ARGS(3), GV_SLOT_ARGS(4),
                GV_SLOT_ARGS(5))
{
  __local float part[GV_TOK * GV_ROWS][GV_LANES];
  __local float rs[GV_TOK];
  const int lane = get_local_id(0);
  /* which slot and rows: blocks of GV_ROWS rows, slot after slot, then token tiles */
  const int nb[GV_SLOTS] = {(n0 + GV_ROWS - 1) / GV_ROWS, (n1 + GV_ROWS - 1) / GV_ROWS,
                            (n2 + GV_ROWS - 1) / GV_ROWS, (n3 + GV_ROWS - 1) / GV_ROWS,
                            (n4 + GV_ROWS - 1) / GV_ROWS, (n5 + GV_ROWS - 1) / GV_ROWS};
  const int blocks = nb[0] + nb[1] + nb[2] + nb[3] + nb[4] + nb[5];
  const int t0 = (get_group_id(1) / blocks) * GV_TOK;
  int b = get_group_id(1) % blocks, s = 0;
  while (s < GV_SLOTS - 1 && b >= nb[s]) b -= nb[s++];
  __global const gv_w_t *w = s == 0 ? w0 : s == 1 ? w1 : s == 2 ? w2 : s == 3 ? w3 : s == 4 ? w4 : w5;
  __global float *y = s == 0 ? y0 : s == 1 ? y1 : s == 2 ? y2 : s == 3 ? y3 : s == 4 ? y4 : y5;
  const ulong woff = s == 0 ? woff0 : s == 1 ? woff1 : s == 2 ? woff2 : s == 3 ? woff3 : s == 4 ? woff4 : woff5;
  const ulong yoff = s == 0 ? yoff0 : s == 1 ? yoff1 : s == 2 ? yoff2 : s == 3 ? yoff3 : s == 4 ? yoff4 : yoff5;
  const int n = s == 0 ? n0 : s == 1 ? n1 : s == 2 ? n2 : s == 3 ? n3 : s == 4 ? n4 : n5;
  const int r0 = b * GV_ROWS;
  if (mode == 1) { /* each token's rstd, summed in the same lane order */
    for (int t = 0; t < GV_TOK; t++) {
      float a = 0.0f;
      if (t0 + t < T)
        for (int c = lane; c < K; c += GV_LANES) {
          const float v = x[xoff + (ulong)(t0 + t) * (ulong)K + (ulong)c];
          a += v * v;
        }
      part[t][lane] = a;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane < GV_TOK) {
      float a = 0.0f;
      for (int i = 0; i < GV_LANES; i++) a += part[lane][i];
      rs[lane] = rsqrt(a / (float)K + eps); /* as kernels_cl/ops/norm.cl */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#if GV_VEC
  { /* work-item (row slot q, octet o): partials 8 o .. 8 o + 7 of rows q GV_RPI .. + GV_RPI - 1
     * (GV_RPI = GV_ROWS / 8), read as 8-element vectors: the lanes' partials, each over the
     * same columns in the same order */
    const int q = lane / 8, o = lane % 8;
    float acc[GV_TOK][GV_RPI][8];
    for (int t = 0; t < GV_TOK; t++)
      for (int j = 0; j < GV_RPI; j++)
        for (int e = 0; e < 8; e++) acc[t][j][e] = 0.0f;
    for (int c0 = 8 * o; c0 < K; c0 += GV_LANES) {
      if (c0 + 8 <= K) { /* whole vectors: no private arrays, components by name */
        float8 wv[GV_RPI];
        for (int j = 0; j < GV_RPI; j++) {
          const int r = r0 + q * GV_RPI + j;
          wv[j] = GV_W8(w, woff + (ulong)(r < n ? r : r0) * (ulong)K + (ulong)c0);
        }
        for (int t = 0; t < GV_TOK; t++) {
          float8 xv;
          if (mode == 0) {
            xv = vload8(0, x + xoff + (ulong)(t0 + t < T ? t0 + t : t0) * (ulong)K + (ulong)c0);
          } else {
            const float rt = mode == 1 ? rs[t] : 1.0f;
#define GV_IN(e) gv_in(x, xoff, x2, x2off, gain, mode, glu, rt, t0, t, T, K, c0 + (e))
            xv = (float8)(GV_IN(0), GV_IN(1), GV_IN(2), GV_IN(3), GV_IN(4), GV_IN(5), GV_IN(6), GV_IN(7));
#undef GV_IN
          }
          for (int j = 0; j < GV_RPI; j++) {
            acc[t][j][0] += wv[j].s0 * xv.s0;
            acc[t][j][1] += wv[j].s1 * xv.s1;
            acc[t][j][2] += wv[j].s2 * xv.s2;
            acc[t][j][3] += wv[j].s3 * xv.s3;
            acc[t][j][4] += wv[j].s4 * xv.s4;
            acc[t][j][5] += wv[j].s5 * xv.s5;
            acc[t][j][6] += wv[j].s6 * xv.s6;
            acc[t][j][7] += wv[j].s7 * xv.s7;
          }
        }
      } else { /* the last columns of a K that is not a multiple of 8 */
        for (int e = 0; c0 + e < K; e++)
          for (int t = 0; t < GV_TOK; t++) {
            const float xe = gv_in(x, xoff, x2, x2off, gain, mode, glu, mode == 1 ? rs[t] : 1.0f, t0, t, T, K, c0 + e);
            for (int j = 0; j < GV_RPI; j++) {
              const int r = r0 + q * GV_RPI + j;
              acc[t][j][e] += GV_W(w, woff + (ulong)(r < n ? r : r0) * (ulong)K + (ulong)(c0 + e)) * xe;
            }
          }
      }
    }
    for (int t = 0; t < GV_TOK; t++)
      for (int j = 0; j < GV_RPI; j++)
        for (int e = 0; e < 8; e++) part[t * GV_ROWS + q * GV_RPI + j][8 * o + e] = acc[t][j][e];
  }
#else
  float acc[GV_TOK][GV_ROWS];
  for (int t = 0; t < GV_TOK; t++)
    for (int r = 0; r < GV_ROWS; r++) acc[t][r] = 0.0f;
  for (int c0 = lane; c0 < K; c0 += GV_LANES * GV_UNROLL) {
    /* the weights of GV_UNROLL columns loaded before any is used (loads in flight), then
     * added column after column: the same sums as one column at a time */
    float wv[GV_UNROLL][GV_ROWS];
    for (int u = 0; u < GV_UNROLL; u++) {
      const int c = c0 + u * GV_LANES;
      for (int r = 0; r < GV_ROWS; r++)
        wv[u][r] = c < K && r0 + r < n ? GV_W(w, woff + (ulong)(r0 + r) * (ulong)K + (ulong)c) : 0.0f;
    }
    for (int u = 0; u < GV_UNROLL; u++) {
      const int c = c0 + u * GV_LANES;
      if (c >= K) break;
      float xv[GV_TOK];
      for (int t = 0; t < GV_TOK; t++)
        xv[t] = gv_in(x, xoff, x2, x2off, gain, mode, glu, mode == 1 ? rs[t] : 1.0f, t0, t, T, K, c);
      for (int r = 0; r < GV_ROWS; r++)
        for (int t = 0; t < GV_TOK; t++) acc[t][r] += wv[u][r] * xv[t];
    }
  }
  for (int t = 0; t < GV_TOK; t++)
    for (int r = 0; r < GV_ROWS; r++) part[t * GV_ROWS + r][lane] = acc[t][r];
#endif
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane < GV_TOK * GV_ROWS) {
    const int t = lane / GV_ROWS, r = lane % GV_ROWS;
    if (t0 + t < T && r0 + r < n) {
      float a = 0.0f;
      for (int i = 0; i < GV_LANES; i++) a += part[lane][i];
      const ulong o = yoff + (ulong)(t0 + t) * (ulong)n + (ulong)(r0 + r);
      y[o] = beta ? y[o] + a : a;
    }
  }
}
