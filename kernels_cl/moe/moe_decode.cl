/* moe_decode.cl: the routed experts of a MoE layer for few tokens, straight from the
 * router's top-k on the device (lib/moe/moe_decode.c): no sort, no dispatch, no host read.
 * Every (token, slot) pair runs its expert's FFN on its own copy of the token's row.
 *
 * Work-groups have MD_LANES (64) work-items whatever the device, and each dot product is
 * summed as MD_LANES strided partials added in lane order, so the bits do not depend on
 * the device's work-group size. MD_ROWS output rows per work-group (a tunable). */
#ifndef MD_ROWS
#define MD_ROWS 8
#endif
#define MD_LANES 64
/* Expert weights fp32, or bf16 with -DMD_WBF16=1 (fp32 sums either way). */
#if defined(MD_WBF16) && MD_WBF16
typedef ushort md_w_t;
#define MD_W(p, i) bf16_to_f32((p)[i])
#else
typedef float md_w_t;
#define MD_W(p, i) ((p)[i])
#endif

/* act [m k, f] = glu(W_gate[e] x[t], W_upp[e] x[t]) for pair p = t k + j, e = topk[p].
 * x [m, l] at xoff; w_gate, w_upp [E, f, l]; an expert outside [0, E) gives act 0.
 * Grid: (MD_LANES, m k ceil(f / MD_ROWS)), work-groups (MD_LANES, 1). */
__kernel __attribute__((reqd_work_group_size(MD_LANES, 1, 1)))
void moe_dec_up(__global const int *topk, __global const float *x, ulong xoff,
                __global const md_w_t *w_gate, __global const md_w_t *w_upp, int E, int k, int l,
                int f, int glu, __global float *act)
{
  __local float su[MD_ROWS][MD_LANES], sw[MD_ROWS][MD_LANES];
  const int lane = get_local_id(0), nb = (f + MD_ROWS - 1) / MD_ROWS;
  const int p = get_group_id(1) / nb, r0 = (get_group_id(1) % nb) * MD_ROWS;
  const int e = topk[p];
  const int ok = e >= 0 && e < E;
  __global const float *xr = x + xoff + (ulong)(p / k) * (ulong)l;
  for (int r = 0; r < MD_ROWS; r++) {
    float au = 0.0f, aw = 0.0f;
    if (ok && r0 + r < f) {
      const ulong base = ((ulong)e * (ulong)f + (ulong)(r0 + r)) * (ulong)l;
      for (int c = lane; c < l; c += MD_LANES) {
        const float xv = xr[c];
        au += MD_W(w_gate, base + c) * xv;
        aw += MD_W(w_upp, base + c) * xv;
      }
    }
    su[r][lane] = au;
    sw[r][lane] = aw;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane < MD_ROWS && r0 + lane < f) {
    float u = 0.0f, w = 0.0f;
    for (int i = 0; i < MD_LANES; i++) u += su[lane][i], w += sw[lane][i];
    act[(ulong)p * (ulong)f + (ulong)(r0 + lane)] = ok ? glu_act(glu, u, w) : 0.0f;
  }
}

/* z[t, c] (+)= sum over slots j in order of probs[t, j] (W_dn[e_j] act[t k + j])[c]: the
 * down products and the weighted combine, added to z when beta is 1. act [m k, f]; w_dn
 * [E, l, f]; probs [m, k]; z [m, l] at zoff. Grid: (MD_LANES, m ceil(l / MD_ROWS)),
 * work-groups (MD_LANES, 1). */
__kernel __attribute__((reqd_work_group_size(MD_LANES, 1, 1)))
void moe_dec_down(__global const int *topk, __global const float *probs,
                  __global const float *act, __global const md_w_t *w_dn, int E, int k, int l,
                  int f, __global float *z, ulong zoff, int beta)
{
  __local float part[MD_ROWS][MD_LANES];
  const int lane = get_local_id(0), nb = (l + MD_ROWS - 1) / MD_ROWS;
  const int t = get_group_id(1) / nb, c0 = (get_group_id(1) % nb) * MD_ROWS;
  float acc = 0.0f; /* lane r < MD_ROWS: row c0 + r */
  for (int j = 0; j < k; j++) {
    const int p = t * k + j, e = topk[p];
    const int ok = e >= 0 && e < E;
    __global const float *ar = act + (ulong)p * (ulong)f;
    for (int r = 0; r < MD_ROWS; r++) {
      float a = 0.0f;
      if (ok && c0 + r < l) {
        const ulong base = ((ulong)e * (ulong)l + (ulong)(c0 + r)) * (ulong)f;
        for (int i = lane; i < f; i += MD_LANES) a += MD_W(w_dn, base + i) * ar[i];
      }
      part[r][lane] = a;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane < MD_ROWS && ok) {
      float s = 0.0f;
      for (int i = 0; i < MD_LANES; i++) s += part[lane][i];
      acc += probs[p] * s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lane < MD_ROWS && c0 + lane < l) {
    const ulong o = zoff + (ulong)t * (ulong)l + (ulong)(c0 + lane);
    z[o] = beta ? z[o] + acc : acc;
  }
}
