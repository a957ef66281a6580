/* gemv.cl: products of few token rows with weight matrices (GEMV-shaped: a decode step's
 * projections), several matrices that read the same x in one launch.
 *
 *   Y_s [T, N_s] = beta Y_s + in(x) W_s^T       W_s [N_s, K] row-major, s = 0 .. 5
 *
 * W is fp32, or bf16 with -DGV_WBF16=1 (every slot of a launch alike); x, Y and the sums are
 * fp32.
 *
 * in(x) is x [T, K] itself (mode 0), RMSNorm of x with gain g [K] at goff (mode 1: x rstd g, rstd =
 * 1 / sqrt(mean(x^2) + eps) per token), or the gated unit of two inputs (mode 2: glu(x, x2),
 * glu 0 SiTU-GLU, 1 SwiGLU), the product with a sigmoid gate (mode 3: x sigmoid(x2), an
 * attention output gate) or a gated group norm (mode 4, glu = the group width G, a multiple
 * of 8 dividing K: sigmoid(x2) (x rstd_g g) with rstd_g = 1 / sqrt(mean(x^2) + eps) over
 * each group of G columns and the gain g [G] shared by the groups, at most GV_GROUPS of
 * them: a KDA layer's output norm and gate). beta is 0 (Y is only written) or 1. With xout 1, in(x) [T, K] is
 * also written to xn at xnoff (by the first work-group of each token tile), for a kernel
 * after this one that reads the normed row.
 *
 * A work-group of GV_LANES (64) work-items takes GV_ROWS rows of one matrix and GV_TOK
 * tokens. Each output is GV_LANES partial sums added in lane order; lane l's partial runs in
 * order over the columns 8 l .. 8 l + 7, then 512 + 8 l .. 512 + 8 l + 7, and so on (eight
 * adjacent columns a lane: one 16-byte load of bf16 weights; GV_PASSES passes' loads are
 * issued before their products, so that more bytes are in flight where few work-groups cover a
 * matrix). The bits depend on neither the device's work-group size nor GV_ROWS, GV_TOK,
 * GV_PASSES or GV_VEC: with GV_VEC=1 (K a multiple of 8
 * and every slot's rows 16-byte aligned, as the host checks) the eight weights come from one
 * vector load, else element by element, and both add the same products in the same order. */
#ifndef GV_ROWS
#define GV_ROWS 4
#endif
#ifndef GV_TOK
#define GV_TOK 4
#endif
#ifndef GV_VEC
#define GV_VEC 0
#endif
#ifndef GV_PASSES
#define GV_PASSES 1 /* passes over a row whose weight loads are issued together */
#endif
#define GV_LANES 64
#define GV_SLOTS 6
#define GV_GROUPS 64 /* groups of mode 4 */
#define GV_SPAN (8 * GV_LANES) /* columns of one pass of the work-group over a row */
#if defined(GV_WBF16) && GV_WBF16
typedef ushort gv_w_t;
#define GV_W(p, i) bf16_to_f32((p)[i])
#define GV_W8A(p, i) bf16x8_load_a16(p, i)
#else
typedef float gv_w_t;
#define GV_W(p, i) ((p)[i])
#define GV_W8A(p, i) f32x8_load_a16(p, i)
#endif

/* Weights [i, i + 8) of a row whose column c sits at i; past column K they are 0 (only
 * without GV_VEC: with it K is a multiple of 8). */
inline float8 gv_w8(__global const gv_w_t *w, ulong i, int c, int K)
{
#if GV_VEC
  return GV_W8A(w, i);
#else
  float v[8];
  for (int e = 0; e < 8; e++) v[e] = c + e < K ? GV_W(w, i + (ulong)e) : 0.0f;
  return vload8(0, v);
#endif
}

/* Eight floats of p from p[i] where columns c .. c + 7 are below K, else 0. */
inline float8 gv_f8(__global const float *p, ulong i, int c, int K)
{
  if (c + 8 <= K) return vload8(0, p + i);
  float v[8];
  for (int e = 0; e < 8; e++) v[e] = c + e < K ? p[i + (ulong)e] : 0.0f;
  return vload8(0, v);
}

/* p[i ..] = the columns c .. c + 7 of v that are below K. */
inline void gv_put8(__global float *p, ulong i, float8 v, int c, int K)
{
  if (c + 8 <= K) {
    vstore8(v, 0, p + i);
    return;
  }
  float a[8];
  vstore8(v, 0, a);
  for (int e = 0; c + e < K; e++) p[i + (ulong)e] = a[e];
}

inline float8 gv_sigmoid8(float8 v) { return 1.0f / (1.0f + exp(-v)); }

/* The gated units of kernels_cl/moe/moe_common.cl (b1 = 4, b2 = 25), on eight columns. */
inline float8 gv_glu8(int glu, float8 u, float8 w)
{
  return glu ? u * gv_sigmoid8(u) * w : 4.0f * tanh(u / 4.0f) * gv_sigmoid8(u) * (25.0f * tanh(w / 25.0f));
}

/* One weight slot: W at woff with n rows; Y at yoff, rows of n; its x at xo in x's buffer
 * (mode 0: slots may read different rows of one buffer; the other modes read x at xoff). */
#define GV_SLOT_ARGS(i)                                                                        \
  __global const gv_w_t *w##i, ulong woff##i, int n##i, __global float *y##i, ulong yoff##i, ulong xo##i

__kernel __attribute__((reqd_work_group_size(GV_LANES, 1, 1)))
void gemv_multi(__global const float *x, ulong xoff, __global const float *x2, ulong x2off,
                __global const float *gain, ulong goff, int mode, int glu, float eps, int T, int K, int beta,
                __global float *xn, ulong xnoff, int xout, GV_SLOT_ARGS(0), GV_SLOT_ARGS(1), GV_SLOT_ARGS(2),
                GV_SLOT_ARGS(3), GV_SLOT_ARGS(4), GV_SLOT_ARGS(5))
{
  __local float part[GV_TOK * GV_ROWS][GV_LANES];
  __local float rs[GV_TOK];
  __local float rsg[GV_TOK][GV_GROUPS];
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
  const ulong xso = mode != 0 ? xoff : s == 0 ? xo0 : s == 1 ? xo1 : s == 2 ? xo2 : s == 3 ? xo3 : s == 4 ? xo4 : xo5;
  const int n = s == 0 ? n0 : s == 1 ? n1 : s == 2 ? n2 : s == 3 ? n3 : s == 4 ? n4 : n5;
  const int r0 = b * GV_ROWS;
  const int put = xout && get_group_id(1) % blocks == 0; /* this group writes in(x) */
  if (mode == 1) { /* each token's rstd, summed in the same lane order */
    for (int t = 0; t < GV_TOK; t++) {
      float a = 0.0f;
      if (t0 + t < T)
        for (int c = lane; c < K; c += GV_LANES) {
          const float v = x[xoff + (ulong)(t0 + t) * (ulong)K + (ulong)c];
          a = fma(v, v, a);
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
  if (mode == 4) { /* each (token, group)'s rstd: lane h sums group h's squares in order */
    const int ng = K / glu;
    for (int t = 0; t < GV_TOK; t++)
      for (int h = lane; h < ng; h += GV_LANES) {
        float a = 0.0f;
        if (t0 + t < T)
          for (int i = 0; i < glu; i++) {
            const float v = x[xoff + (ulong)(t0 + t) * (ulong)K + (ulong)(h * glu + i)];
            a = fma(v, v, a);
          }
        rsg[t][h] = rsqrt(a / (float)glu + eps);
      }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float acc[GV_TOK][GV_ROWS];
  for (int t = 0; t < GV_TOK; t++)
    for (int r = 0; r < GV_ROWS; r++) acc[t][r] = 0.0f;
  for (int c0 = 8 * lane; c0 < K; c0 += GV_PASSES * GV_SPAN) {
    float8 wv[GV_PASSES][GV_ROWS];
#pragma unroll
    for (int p = 0; p < GV_PASSES; p++) { /* the loads of GV_PASSES passes first: in flight together */
      const int c = c0 + p * GV_SPAN;
      for (int r = 0; r < GV_ROWS; r++)
        wv[p][r] = c < K && r0 + r < n ? gv_w8(w, woff + (ulong)(r0 + r) * (ulong)K + (ulong)c, c, K)
                                       : (float8)(0.0f);
    }
#pragma unroll
    for (int p = 0; p < GV_PASSES; p++) {
      const int c = c0 + p * GV_SPAN;
      if (c >= K) break;
      for (int t = 0; t < GV_TOK; t++) {
        const ulong xi = (ulong)(t0 + t < T ? t0 + t : t0) * (ulong)K + (ulong)c;
        const float8 v = gv_f8(x, xso + xi, c, K);
        float8 xv;
        if (mode == 1) {
          xv = v * rs[t] * gv_f8(gain, goff + (ulong)c, c, K);
        } else if (mode == 2 || mode == 3) {
          const float8 v2 = gv_f8(x2, x2off + xi, c, K);
          xv = mode == 2 ? gv_glu8(glu, v, v2) : v * gv_sigmoid8(v2);
        } else if (mode == 4) { /* eight columns of one group (G a multiple of 8) */
          const float8 v2 = gv_f8(x2, x2off + xi, c, K);
          xv = gv_sigmoid8(v2) * (v * rsg[t][c / glu] * vload8(0, gain + goff + (ulong)(c % glu)));
        } else {
          xv = v;
        }
        if (put && t0 + t < T) gv_put8(xn, xnoff + xi, xv, c, K);
        for (int r = 0; r < GV_ROWS; r++) acc[t][r] = fma8_acc(acc[t][r], wv[p][r], xv);
      }
    }
  }
  for (int t = 0; t < GV_TOK; t++)
    for (int r = 0; r < GV_ROWS; r++) part[t * GV_ROWS + r][lane] = acc[t][r];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane < GV_TOK * GV_ROWS) {
    const int t = lane / GV_ROWS, r = lane % GV_ROWS;
    if (t0 + t < T && r0 + r < n) {
      float a = 0.0f;
      for (int i = 0; i < GV_LANES; i++) a += part[lane][i];
      const ulong o = yoff + (ulong)(t0 + t) * (ulong)n + (ulong)(r0 + r);
      if (beta) y[o] += a; /* y is read only when it is accumulated into */
      else y[o] = a;
    }
  }
}
