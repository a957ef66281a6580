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

/* Partial ch of the dot product of w[wb .. wb + n) and x[0 .. n). */
inline float md_part(__global const md_w_t *w, ulong wb, __global const float *x, int n, int ch)
{
  float a = 0.0f;
#pragma unroll 4
  for (int c = 8 * ch; c < n; c += 8 * MD_CH) { /* (unrolled: several loads in flight) */
    if (c + 8 <= n) {
      a = dot8_acc(a, MD_W8(w, wb + (ulong)c), vload8(0, x + c));
    } else {
      for (int u = c; u < n; u++) a += MD_W(w, wb + (ulong)u) * x[u];
    }
  }
  return a;
}

/* md_part of two rows against one x, their loads interleaved (both in flight); the same
 * sums as two calls. */
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
  for (int q = lane; q < k * MD_DN_ROWS * MD_CH; q += MD_LANES) { /* (slot j, row r, partial ch) */
    const int j = q / (MD_DN_ROWS * MD_CH), r = (q / MD_CH) % MD_DN_ROWS, ch = q % MD_CH;
    const int p = t * k + j, e = topk[p];
    float a = 0.0f;
    if (e >= 0 && e < E && c0 + r < l)
      a = md_part(w_dn, ((ulong)e * (ulong)l + (ulong)(c0 + r)) * (ulong)f, act + (ulong)p * (ulong)f, f, ch);
    part[q] = a;
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
