/* moe_dispatch.cl: grouping the (token, slot) pairs by expert and moving rows between token
 * order and expert order, forward and backward; the elementwise SiTU-GLU of the padded and
 * dense paths. Built after moe_common.cl.
 *
 * Pair i = token k + slot. keys[i] = expert << 32 | i, sorted by the device sort, put each
 * expert's pairs together in token order; offsets[e] (binary search) is where expert e's run
 * starts. pos[i] is the pair's row in the expert buffers: its sorted position (grouped), or
 * e cap + its rank inside the expert (padded to cap rows per expert).
 *
 * Row kernels are 2-D: dimension 0 over the columns c, dimension 1 over rows. Every sum has
 * a fixed order (slots in order), so results repeat bit for bit. */

/* An expert outside [0, E) becomes E: its pairs sort past every run and get no row. */
__kernel void moe_keys(__global const int *topk, int mk, int E, __global ulong *keys)
{
  const int i = (int)get_global_id(0);
  if (i >= mk) return;
  const int e = topk[i] >= 0 && topk[i] < E ? topk[i] : E;
  keys[i] = ((ulong)(uint)e << 32) | (ulong)(uint)i;
}

/* offsets[e] = the first sorted position whose expert is >= e, e = 0 .. E. */
__kernel void moe_offsets(__global const ulong *keys, int mk, int E, __global int *offsets)
{
  const int e = (int)get_global_id(0);
  if (e > E) return;
  const ulong target = (ulong)e << 32;
  int lo = 0, hi = mk;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (keys[mid] < target) lo = mid + 1;
    else hi = mid;
  }
  offsets[e] = lo;
}

/* perm[r] = the pair at sorted position r; pos[pair] = its row (cap 0: grouped), or -1 for
 * a pair without a valid expert. */
__kernel void moe_positions(__global const ulong *keys, int mk, int E, __global const int *offsets,
                            int cap, __global int *perm, __global int *pos)
{
  const int r = (int)get_global_id(0);
  if (r >= mk) return;
  const ulong key = keys[r];
  const int e = (int)(key >> 32), i = (int)(uint)key;
  perm[r] = i;
  pos[i] = e >= E ? -1 : cap ? e * cap + (r - offsets[e]) : r;
}

/* The grouped GEMM's row tiles: (expert, first row) for every tm rows of every expert, in
 * expert order, then (-1, 0) up to max_tiles. One work-group: each lane takes a run of
 * experts, counts their tiles, a scan over the lanes (local start[]) places them. */
__kernel void moe_tiles(__global const int *offsets, int E, int tm, int max_tiles,
                        __global int *tiles, __local int *start)
{
  const int lid = (int)get_local_id(0), L = (int)get_local_size(0);
  const int per = (E + L - 1) / L, e0 = min(E, lid * per), e1 = min(E, e0 + per);
  int n = 0;
  for (int e = e0; e < e1; e++) n += (offsets[e + 1] - offsets[e] + tm - 1) / tm;
  start[lid] = n;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) { /* exclusive scan; start[L] = the total */
    int sum = 0;
    for (int i = 0; i < L; i++) {
      const int c = start[i];
      start[i] = sum;
      sum += c;
    }
    start[L] = sum;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  int t = start[lid];
  for (int e = e0; e < e1; e++)
    for (int r = offsets[e]; r < offsets[e + 1] && t < max_tiles; r += tm, t++) {
      tiles[2 * t] = e;
      tiles[2 * t + 1] = r;
    }
  for (int q = start[L] + lid; q < max_tiles; q += L) {
    tiles[2 * q] = -1;
    tiles[2 * q + 1] = 0;
  }
}

/* xs[pos[i], c] = x[i / k, c] */
__kernel void moe_gather(__global const float *x, int l, int k, int mk, __global const int *pos,
                         __global float *xs)
{
  const int c = (int)get_global_id(0), i = (int)get_global_id(1);
  if (c >= l || i >= mk || pos[i] < 0) return;
  xs[(ulong)pos[i] * l + c] = x[(ulong)(i / k) * l + c];
}

/* z[t, c] = sum over slots s, in order, of probs[t, s] ys[pos[t k + s], c] */
__kernel void moe_combine(__global const float *ys, int l, int k, int m, __global const int *pos,
                          __global const float *probs, __global float *z)
{
  const int c = (int)get_global_id(0), t = (int)get_global_id(1);
  if (c >= l || t >= m) return;
  float acc = 0.0f;
  for (int s = 0; s < k; s++) {
    const int i = t * k + s;
    if (pos[i] >= 0) acc += probs[i] * ys[(ulong)pos[i] * l + c];
  }
  z[(ulong)t * l + c] = acc;
}

/* Combine backward, rows: dys[pos[i], c] = probs[i] dz[i / k, c] */
__kernel void moe_scatter_grad(__global const float *dz, int l, int k, int mk,
                               __global const int *pos, __global const float *probs,
                               __global float *dys)
{
  const int c = (int)get_global_id(0), i = (int)get_global_id(1);
  if (c >= l || i >= mk || pos[i] < 0) return;
  dys[(ulong)pos[i] * l + c] = probs[i] * dz[(ulong)(i / k) * l + c];
}

/* Combine backward, weights: dp[i] = dz[i / k] . ys[pos[i]] (columns in order). */
__kernel void moe_dprob(__global const float *dz, __global const float *ys, int l, int k, int mk,
                        __global const int *pos, __global float *dp)
{
  const int i = (int)get_global_id(0);
  if (i >= mk) return;
  if (pos[i] < 0) {
    dp[i] = 0.0f;
    return;
  }
  __global const float *a = dz + (ulong)(i / k) * l, *b = ys + (ulong)pos[i] * l;
  float acc = 0.0f;
  for (int c = 0; c < l; c++) acc += a[c] * b[c];
  dp[i] = acc;
}

/* Gather backward: dx[t, c] = sum over slots s, in order, of dxs[pos[t k + s], c] */
__kernel void moe_gather_sum(__global const float *dxs, int l, int k, int m,
                             __global const int *pos, __global float *dx)
{
  const int c = (int)get_global_id(0), t = (int)get_global_id(1);
  if (c >= l || t >= m) return;
  float acc = 0.0f;
  for (int s = 0; s < k; s++)
    if (pos[t * k + s] >= 0) acc += dxs[(ulong)pos[t * k + s] * l + c];
  dx[(ulong)t * l + c] = acc;
}

/* act = glu(u, w), n elements (glu: clmoe_glu) */
__kernel void moe_situ_fwd(__global const float *u, __global const float *w, ulong n,
                           __global float *act, int glu)
{
  const ulong i = get_global_id(0);
  if (i < n) act[i] = glu_act(glu, u[i], w[i]);
}

/* (du, dw) = glu'(u, w) dact; du, dw may alias u, w. */
__kernel void moe_situ_bwd(__global const float *dact, __global const float *u,
                           __global const float *w, ulong n, __global float *du,
                           __global float *dw, int glu)
{
  const ulong i = get_global_id(0);
  if (i >= n) return;
  const float2 g = glu_grad(glu, u[i], w[i], dact[i]);
  du[i] = g.x;
  dw[i] = g.y;
}
