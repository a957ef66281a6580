/* softmax.cl: softmax over the last dimension and cross-entropy over a vocabulary.
 *
 * Row kernels run one work-group per row. Row reductions use an order fixed by ROW_LANES,
 * not by the work-group size (see reduce.cl): lane l combines elements l, l + ROW_LANES,
 * ... in order (work-groups with fewer work-items loop over lanes), then the lanes
 * combine by halving. The max and the sum of exponentials are found in one pass as an
 * "online" pair (m, s = sum exp(x - m)), rescaling s when m grows, so a row is read twice
 * (reduce, write) instead of three times. A NaN anywhere in a row reaches s through
 * exp(NaN) (and m through max_nan when lanes merge), so the whole row's output is NaN. */

#define ROW_LANES 256 /* must match lib/ops/ops_softmax.c */

/* max that lets a NaN through (fmax would hide it). */
inline float max_nan(float a, float b) { return (isnan(a) || a > b) ? a : b; }

/* Lanes that can hold data: the power of two >= n, at most ROW_LANES. Lanes past n hold
 * the identity, so starting the halving there gives the same result. */
inline int lanes_used(ulong n)
{
  int used = ROW_LANES;
  while (used > 1 && (ulong)(used / 2) >= n) used /= 2;
  return used;
}

/* (m, s) <- (m, s) combined with (m2, s2). The `==` tests avoid exp(-inf - -inf) = NaN
 * for empty lanes and rows that start with -inf, and skip an exp in the common case;
 * a NaN fails both tests, so exp(NaN) carries it into s. */
inline void lse_merge(float *m, float *s, float m2, float s2)
{
  const float mm = max_nan(*m, m2);
  const float a = *m == mm ? *s : *s * exp(*m - mm);
  const float b = m2 == mm ? s2 : s2 * exp(m2 - mm);
  *m = mm;
  *s = a + b;
}

/* (m, s) <- (m, s) combined with one element x: for a number x the same as
 * lse_merge(m, s, x, 1), with one exp instead of two selects of exps. x == m (also
 * -inf == -inf) adds exp(0) = 1; a NaN x fails both tests and exp(NaN) makes s NaN. */
inline void lse_add(float *m, float *s, float x)
{
  const int up = x > *m;
  const float e = exp(x == *m ? 0.0f : up ? *m - x : x - *m);
  *s = up ? *s * e + 1.0f : *s + e;
  *m = up ? x : *m;
}

/* Max m and sum s of exp(x - m) over x[0 .. n) in the fixed lane order; every work-item
 * gets both. */
inline void row_max_sumexp(__global const float *x, ulong n, __local float *lm, __local float *ls,
                           float *m_out, float *s_out)
{
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0), used = lanes_used(n);
  for (int lane = lid; lane < used; lane += lsize) {
    float m = -INFINITY, s = 0.0f;
    for (ulong i = (ulong)lane; i < n; i += ROW_LANES) lse_add(&m, &s, x[i]);
    lm[lane] = m;
    ls[lane] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int w = used / 2; w > 0; w >>= 1) {
    for (int lane = lid; lane < w; lane += lsize) {
      float m = lm[lane], s = ls[lane];
      lse_merge(&m, &s, lm[lane + w], ls[lane + w]);
      lm[lane] = m;
      ls[lane] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  *m_out = lm[0];
  *s_out = ls[0];
}

/* y = exp(x - max) / sum exp(x - max), per row of n. y may alias x. */
__kernel void softmax_fwd(__global const float *x, ulong xoff, __global float *y, ulong yoff,
                          ulong n)
{
  __local float lm[ROW_LANES], ls[ROW_LANES];
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
  const ulong row = get_group_id(0);
  __global const float *xr = x + xoff + row * n;
  __global float *yr = y + yoff + row * n;
  float m, s;
  row_max_sumexp(xr, n, lm, ls, &m, &s);
  const float inv = 1.0f / s; /* one division per row, not per element */
  for (ulong i = (ulong)lid; i < n; i += (ulong)lsize) yr[i] = exp(xr[i] - m) * inv;
}

/* dx = y (dy - sum(y dy)), per row. dx may alias y or dy. */
__kernel void softmax_bwd(__global const float *y, ulong yoff, __global const float *dy,
                          ulong dyoff, __global float *dx, ulong dxoff, ulong n)
{
  __local float acc[ROW_LANES];
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0), used = lanes_used(n);
  const ulong row = get_group_id(0);
  __global const float *yr = y + yoff + row * n;
  __global const float *dyr = dy + dyoff + row * n;
  __global float *dxr = dx + dxoff + row * n;
  for (int lane = lid; lane < used; lane += lsize) {
    float s = 0.0f;
    for (ulong i = (ulong)lane; i < n; i += ROW_LANES) s += yr[i] * dyr[i];
    acc[lane] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int w = used / 2; w > 0; w >>= 1) {
    for (int lane = lid; lane < w; lane += lsize) acc[lane] += acc[lane + w];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float dot = acc[0];
  for (ulong i = (ulong)lid; i < n; i += (ulong)lsize) dxr[i] = yr[i] * (dyr[i] - dot);
}

/* Records the lowest row with a target >= n in *bad (the host reads it back). */
inline void flag_bad_row(__global uint *bad, ulong row)
{
  atomic_min(bad, (uint)min(row, (ulong)0xfffffffeu));
}

/* Cross-entropy, one work-group per row of logits [rows, n]: lse = log sum exp(logits),
 * loss = lse - logits[target]; 0 for a negative (ignored) target; NaN and a flag for a
 * target >= n, which is never read. lse written when has_lse. */
__kernel void xent_fwd(__global const float *logits, ulong loff, __global const int *targets,
                       ulong toff, __global float *loss, ulong lossoff, __global float *lse,
                       ulong lseoff, int has_lse, ulong n, __global uint *bad)
{
  __local float lm[ROW_LANES], ls[ROW_LANES];
  const ulong row = get_group_id(0);
  __global const float *xr = logits + loff + row * n;
  float m, s;
  row_max_sumexp(xr, n, lm, ls, &m, &s);
  if (get_local_id(0) != 0) return;
  const float l = m + log(s);
  const int t = targets[toff + row];
  float out;
  if (t < 0) {
    out = 0.0f;
  } else if ((ulong)t >= n) {
    flag_bad_row(bad, row);
    out = NAN;
  } else {
    out = l - xr[t];
  }
  loss[lossoff + row] = out;
  if (has_lse) lse[lseoff + row] = l;
}

/* dlogits = scale (exp(logits - lse) - onehot(target)); zero rows for ignored targets,
 * NaN rows (and the flag) for targets >= n. Work-group g covers columns
 * [tile tile_cols, (tile + 1) tile_cols) of row g / tiles: a 1-D launch, so the row count
 * is not bounded by a device's limit on the second grid dimension. Element-wise given
 * lse, so dlogits may alias logits. */
__kernel void xent_bwd(__global const float *logits, ulong loff, __global const int *targets,
                       ulong toff, __global const float *lse, ulong lseoff, float scale,
                       __global float *dlogits, ulong doff, ulong n, ulong tile_cols,
                       ulong tiles, __global uint *bad)
{
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
  const ulong g = get_group_id(0), row = g / tiles, tile = g - row * tiles;
  const int t = targets[toff + row];
  const int ignored = t < 0, out_of_range = !ignored && (ulong)t >= n;
  const float l = lse[lseoff + row];
  if (out_of_range && tile == 0 && lid == 0) flag_bad_row(bad, row);
  __global const float *xr = logits + loff + row * n;
  __global float *dr = dlogits + doff + row * n;
  const ulong j1 = min(n, (tile + 1) * tile_cols);
  for (ulong j = tile * tile_cols + (ulong)lid; j < j1; j += (ulong)lsize) {
    float d;
    if (ignored) d = 0.0f;
    else if (out_of_range) d = NAN;
    else d = scale * (exp(xr[j] - l) - (j == (ulong)t ? 1.0f : 0.0f));
    dr[j] = d;
  }
}
