/* moe_decode.cl: the routed experts of a MoE layer for few tokens, straight from the
 * router's top-k on the device (lib/moe/moe_decode.c): no sort, no dispatch, no host read.
 * Every (token, slot) pair runs its expert's FFN on its own copy of the token's row.
 *
 * Work-groups have MD_LANES (64) work-items whatever the device. Every dot product is read
 * in vectors of 8 elements and summed as MD_CH (16) partials added in order, partial ch
 * over the vectors ch, ch + 16, ... (as kernels_cl/ops/gemv.cl): the work-items of one row
 * read adjacent vectors, and the bits do not depend on the device's work-group size. */
#define MD_LANES 64
#define MD_CH 16
#define MD_UP_ROWS (MD_LANES / MD_CH) /* rows of W_gate / W_upp per work-group */
#ifndef MD_DN_ROWS
#define MD_DN_ROWS 2 /* rows of W_dn per work-group */
#endif
#define MD_KMAX 64 /* top-k at most (the host checks) */
#ifndef MD_DN_ILV
#define MD_DN_ILV 4 /* moe_dec_down: a lane's (slot, row) items whose loads are in flight together */
#endif
/* Expert weights fp32, or bf16 with -DMD_WBF16=1 (fp32 sums either way). With -DMD_VEC=1
 * (rows of a multiple of 8 elements in whole tensors: every vector 16-byte aligned) each
 * vector is one 16-byte load; without, vload8 reads it element by element. */
#if defined(MD_WBF16) && MD_WBF16
typedef ushort md_w_t;
#define MD_W(p, i) bf16_to_f32((p)[i])
#if defined(MD_VEC) && MD_VEC
#define MD_W8(p, i) bf16x8_load_a16(p, i)
#else
#define MD_W8(p, i) bf16x8_to_f32(vload8(0, (p) + (i)))
#endif
#else
typedef float md_w_t;
#define MD_W(p, i) ((p)[i])
#if defined(MD_VEC) && MD_VEC
#define MD_W8(p, i) f32x8_load_a16(p, i)
#else
#define MD_W8(p, i) vload8(0, (p) + (i))
#endif
#endif

/* Partial ch of the dot products of two rows, w1 and w2 [wb .. wb + n), with x[0 .. n): over
 * the vectors ch, ch + MD_CH, ... in order, the two rows' loads interleaved (both in flight). */
inline void md_part2(__global const md_w_t *w1, __global const md_w_t *w2, ulong wb, __global const float *x, int n,
                     int ch, float *a1, float *a2)
{
  float s1 = 0.0f, s2 = 0.0f;
#pragma unroll 4
  for (int c = 8 * ch; c < n; c += 8 * MD_CH) {
    if (c + 8 <= n) {
      const float8 u = MD_W8(w1, wb + (ulong)c), v = MD_W8(w2, wb + (ulong)c), xv = vload8(0, x + c);
      s1 = dot8_acc(s1, u, xv);
      s2 = dot8_acc(s2, v, xv);
    } else {
      for (int i = c; i < n; i++) s1 += MD_W(w1, wb + (ulong)i) * x[i];
      for (int i = c; i < n; i++) s2 += MD_W(w2, wb + (ulong)i) * x[i];
    }
  }
  *a1 = s1;
  *a2 = s2;
}

/* Partial ch of MD_DN_ILV dot products (row i at w[wb[i] ..] with xr[i], skipped where ok[i]
 * is 0), each summed as md_part2 sums its rows, all rows' loads in flight together. */
inline void md_part_ilv(__global const md_w_t *w, const ulong *wb, __global const float *const *xr, const int *ok,
                        int n, int ch, float *a)
{
  for (int i = 0; i < MD_DN_ILV; i++) a[i] = 0.0f;
#pragma unroll 2
  for (int c = 8 * ch; c < n; c += 8 * MD_CH) {
    if (c + 8 <= n) {
      float8 wv[MD_DN_ILV];
      for (int i = 0; i < MD_DN_ILV; i++) wv[i] = ok[i] ? MD_W8(w, wb[i] + (ulong)c) : (float8)(0.0f);
      for (int i = 0; i < MD_DN_ILV; i++) a[i] = dot8_acc(a[i], wv[i], vload8(0, xr[i] + c));
    } else {
      for (int i = 0; i < MD_DN_ILV; i++)
        if (ok[i])
          for (int u = c; u < n; u++) a[i] += MD_W(w, wb[i] + (ulong)u) * xr[i][u];
    }
  }
}

/* act [m k, f] = glu(W_gate[e] x[t], W_upp[e] x[t]) for pair p = t k + j, e = topk[p].
 * x [m, l] at xoff; w_gate, w_upp [E, f, l]; an expert outside [0, E) gives act 0.
 * Grid: (MD_LANES, m k ceil(f / MD_UP_ROWS)), work-groups (MD_LANES, 1). */
__kernel __attribute__((reqd_work_group_size(MD_LANES, 1, 1)))
void moe_dec_up(__global const int *topk, __global const float *x, ulong xoff,
                __global const md_w_t *w_gate, __global const md_w_t *w_upp, int E, int k, int l,
                int f, int glu, __global float *act)
{
  __local float su[MD_UP_ROWS * MD_CH], sw[MD_UP_ROWS * MD_CH];
  const int lane = get_local_id(0), nb = (f + MD_UP_ROWS - 1) / MD_UP_ROWS;
  const int p = get_group_id(1) / nb, r0 = (get_group_id(1) % nb) * MD_UP_ROWS;
  const int e = topk[p];
  const int ok = e >= 0 && e < E;
  __global const float *xr = x + xoff + (ulong)(p / k) * (ulong)l;
  const int r = lane / MD_CH, ch = lane % MD_CH;
  float au = 0.0f, aw = 0.0f;
  if (ok && r0 + r < f) {
    const ulong base = ((ulong)e * (ulong)f + (ulong)(r0 + r)) * (ulong)l;
    md_part2(w_gate, w_upp, base, xr, l, ch, &au, &aw);
  }
  su[lane] = au;
  sw[lane] = aw;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane < MD_UP_ROWS && r0 + lane < f) {
    float u = 0.0f, w = 0.0f;
    for (int i = 0; i < MD_CH; i++) u += su[lane * MD_CH + i], w += sw[lane * MD_CH + i];
    act[(ulong)p * (ulong)f + (ulong)(r0 + lane)] = ok ? glu_act(glu, u, w) : 0.0f;
  }
}

/* z[t, c] (+)= sum over slots j in order of probs[t, j] (W_dn[e_j] act[t k + j])[c]: the
 * down products and the weighted combine, added to z when beta is 1. act [m k, f]; w_dn
 * [E, l, f]; probs [m, k]; z [m, l] at zoff; k <= MD_KMAX. All k slots' products of a
 * work-group's MD_DN_ROWS rows run at once, (slot, row, partial) spread over the lanes.
 * Grid: (MD_LANES, m ceil(l / MD_DN_ROWS)), work-groups (MD_LANES, 1). */
__kernel __attribute__((reqd_work_group_size(MD_LANES, 1, 1)))
void moe_dec_down(__global const int *topk, __global const float *probs,
                  __global const float *act, __global const md_w_t *w_dn, int E, int k, int l,
                  int f, __global float *z, ulong zoff, int beta)
{
  __local float part[MD_KMAX * MD_DN_ROWS * MD_CH];
  __local float dot[MD_KMAX * MD_DN_ROWS];
  const int lane = get_local_id(0), nb = (l + MD_DN_ROWS - 1) / MD_DN_ROWS;
  const int t = get_group_id(1) / nb, c0 = (get_group_id(1) % nb) * MD_DN_ROWS;
  /* item q = (slot j, row r, partial ch); a lane takes q, q + 64, q + 128, q + 192 at once
   * (one partial ch: 64 is a multiple of MD_CH), their loads interleaved */
  const int nq = k * MD_DN_ROWS * MD_CH, ch = lane % MD_CH;
  for (int q0 = lane; q0 < nq; q0 += MD_DN_ILV * MD_LANES) {
    ulong wb[MD_DN_ILV];
    __global const float *xr[MD_DN_ILV];
    int ok[MD_DN_ILV];
    for (int i = 0; i < MD_DN_ILV; i++) {
      const int q = q0 + i * MD_LANES, j = q / (MD_DN_ROWS * MD_CH), r = (q / MD_CH) % MD_DN_ROWS;
      const int p = t * k + (q < nq ? j : 0), e = topk[p];
      ok[i] = q < nq && e >= 0 && e < E && c0 + r < l;
      wb[i] = ok[i] ? ((ulong)e * (ulong)l + (ulong)(c0 + r)) * (ulong)f : 0;
      xr[i] = act + (ulong)p * (ulong)f;
    }
    float a[MD_DN_ILV];
    md_part_ilv(w_dn, wb, xr, ok, f, ch, a);
    for (int i = 0; i < MD_DN_ILV; i++)
      if (q0 + i * MD_LANES < nq) part[q0 + i * MD_LANES] = ok[i] ? a[i] : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int q = lane; q < k * MD_DN_ROWS; q += MD_LANES) {
    float s = 0.0f;
    for (int i = 0; i < MD_CH; i++) s += part[q * MD_CH + i];
    dot[q] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane < MD_DN_ROWS && c0 + lane < l) {
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
      const int p = t * k + j, e = topk[p];
      if (e >= 0 && e < E) acc += probs[p] * dot[j * MD_DN_ROWS + lane];
    }
    const ulong o = zoff + (ulong)t * (ulong)l + (ulong)(c0 + lane);
    z[o] = beta ? z[o] + acc : acc;
  }
}
