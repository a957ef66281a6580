/* norm.cl: RMSNorm forward and backward over the last dimension of x [rows, n].
 *
 * One work-group per row. Row sums use a summation order fixed by ROW_LANES, not by the
 * device's work-group size (as reduce.cl does): lane l adds elements l, l + ROW_LANES,
 * l + 2 ROW_LANES, ... in order (a work-group with fewer work-items loops over lanes),
 * then the lanes combine by halving. Consecutive work-items read consecutive elements, so
 * loads coalesce on GPUs. The order depends only on n, so a device gives the same bits on
 * every run. */

#define ROW_LANES 256 /* must match lib/ops/ops_norm.c */
#define DGAIN_ROWS 64 /* rows per partial of the dgain column sums; must match lib/ops/ops_norm.c */

/* Lanes that can hold data: the power of two >= n, at most ROW_LANES. Lanes past n hold
 * 0, and adding 0 changes nothing, so starting the halving there gives the same sum as
 * starting at ROW_LANES while skipping idle steps on short rows. */
inline int lanes_used(ulong n)
{
  int used = ROW_LANES;
  while (used > 1 && (ulong)(used / 2) >= n) used /= 2;
  return used;
}

/* Sums acc[0 .. used) by halving; every work-item gets the result. */
inline float lanes_sum(__local float *acc, int used)
{
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int w = used / 2; w > 0; w >>= 1) {
    for (int lane = lid; lane < w; lane += lsize) acc[lane] += acc[lane + w];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  return acc[0];
}

/* rstd = 1 / sqrt(mean(x^2) + eps) of the row xr [n], every work-item gets it; acc: ROW_LANES
 * floats of local memory. A NaN in x gives NaN. */
inline float row_rstd(__global const float *xr, ulong n, float eps, __local float *acc)
{
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0), used = lanes_used(n);
  for (int lane = lid; lane < used; lane += lsize) {
    float s = 0.0f;
    for (ulong i = (ulong)lane; i < n; i += ROW_LANES) s += xr[i] * xr[i];
    acc[lane] = s;
  }
  return rsqrt(lanes_sum(acc, used) / (float)n + eps);
}

/* y = x rstd gain, rstd = 1 / sqrt(mean(x^2) + eps). x, y: [rows, n]; gain: [n] when
 * has_gain; rstd: [rows] written when has_rstd. Buffers not used may be any buffer. */
__kernel void rmsnorm_fwd(__global const float *x, ulong xoff, __global const float *gain,
                          ulong goff, int has_gain, __global float *y, ulong yoff,
                          __global float *rstd, ulong roff, int has_rstd, ulong n, float eps)
{
  __local float acc[ROW_LANES];
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
  const ulong row = get_group_id(0);
  __global const float *xr = x + xoff + row * n;
  __global float *yr = y + yoff + row * n;
  const float r = row_rstd(xr, n, eps, acc);
  if (has_rstd && lid == 0) rstd[roff + row] = r;
  /* Each work-item reads only the elements it writes, after the sum: y may alias x. */
  for (ulong i = (ulong)lid; i < n; i += (ulong)lsize) {
    float v = xr[i] * r;
    yr[i] = has_gain ? v * gain[goff + i] : v;
  }
}

/* rmsnorm_fwd with y [rows, n] in bf16 storage: the fp32 value of rmsnorm_fwd rounded to
 * nearest even, the same bits as rmsnorm_fwd followed by convert_f32_to_bf16 (for a y that
 * feeds only bf16 products). y must not alias x. */
__kernel void rmsnorm_fwd_bf16(__global const float *x, ulong xoff, __global const float *gain,
                               ulong goff, int has_gain, __global ushort *y, ulong yoff,
                               __global float *rstd, ulong roff, int has_rstd, ulong n, float eps)
{
  __local float acc[ROW_LANES];
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
  const ulong row = get_group_id(0);
  __global const float *xr = x + xoff + row * n;
  __global ushort *yr = y + yoff + row * n;
  const float r = row_rstd(xr, n, eps, acc);
  if (has_rstd && lid == 0) rstd[roff + row] = r;
  for (ulong i = (ulong)lid; i < n; i += (ulong)lsize) {
    float v = xr[i] * r;
    yr[i] = f32_to_bf16(has_gain ? v * gain[goff + i] : v);
  }
}

/* dx = rstd (g dy - x rstd^2 mean(g dy x)), the gradient of y = x rstd g with rstd
 * depending on x. rstd: the forward's [rows]. dx may alias x or dy. */
__kernel void rmsnorm_bwd(__global const float *x, ulong xoff, __global const float *gain,
                          ulong goff, int has_gain, __global const float *rstd, ulong roff,
                          __global const float *dy, ulong dyoff, __global float *dx, ulong dxoff,
                          ulong n)
{
  __local float acc[ROW_LANES];
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0), used = lanes_used(n);
  const ulong row = get_group_id(0);
  __global const float *xr = x + xoff + row * n;
  __global const float *dyr = dy + dyoff + row * n;
  __global float *dxr = dx + dxoff + row * n;
  for (int lane = lid; lane < used; lane += lsize) {
    float s = 0.0f;
    for (ulong i = (ulong)lane; i < n; i += ROW_LANES) {
      float gdy = has_gain ? dyr[i] * gain[goff + i] : dyr[i];
      s += gdy * xr[i];
    }
    acc[lane] = s;
  }
  const float dot = lanes_sum(acc, used);
  const float r = rstd[roff + row];
  const float c = r * r * (dot / (float)n);
  for (ulong i = (ulong)lid; i < n; i += (ulong)lsize) {
    float gdy = has_gain ? dyr[i] * gain[goff + i] : dyr[i];
    dxr[i] = r * (gdy - xr[i] * c);
  }
}

/* dgain, first pass: part[c, j] = sum over rows c*DGAIN_ROWS .. (c+1)*DGAIN_ROWS - 1, in
 * order, of dy[r, j] x[r, j] rstd[r]. Work-item (j, c); neighbours in j read neighbouring
 * addresses. With one chunk the caller points part at dgain itself. */
__kernel void rmsnorm_dgain_part(__global const float *x, ulong xoff, __global const float *rstd,
                                 ulong roff, __global const float *dy, ulong dyoff, ulong rows,
                                 ulong n, __global float *part, ulong poff)
{
  const ulong j = get_global_id(0), c = get_global_id(1);
  if (j >= n) return;
  const ulong r0 = c * DGAIN_ROWS, r1 = min(rows, r0 + DGAIN_ROWS);
  float s = 0.0f;
  for (ulong r = r0; r < r1; r++) s += dy[dyoff + r * n + j] * (x[xoff + r * n + j] * rstd[roff + r]);
  part[poff + c * n + j] = s;
}

/* dgain, second pass: out[j] = sum over chunks c, in order, of part[c, j]. */
__kernel void rmsnorm_dgain_final(__global const float *part, ulong chunks, ulong n,
                                  __global float *out, ulong ooff)
{
  const ulong j = get_global_id(0);
  if (j >= n) return;
  float s = 0.0f;
  for (ulong c = 0; c < chunks; c++) s += part[c * n + j];
  out[ooff + j] = s;
}
