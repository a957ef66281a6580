/* reduce.cl: reductions with a summation order fixed by the constants below, not by the
 * device's work-group size: a work-group walks RED_LANES "lanes" (looping when it has
 * fewer work-items), each lane combines RED_PER_LANE elements in order, then the lanes
 * combine by halving. The same device therefore gives the same bits on every run. */

#define RED_LANES 256
#define RED_PER_LANE 8
#define RED_BLOCK (RED_LANES * RED_PER_LANE) /* elements per work-group */

#define RED_SUM 0
#define RED_SUMSQ 1
#define RED_MAXABS 2

/* max that lets a NaN through (fmax would hide it). */
inline float max_nan(float a, float b) { return (isnan(a) || a > b) ? a : b; }

inline float red_map(int op, float v)
{
  return op == RED_SUMSQ ? v * v : op == RED_MAXABS ? fabs(v) : v;
}

inline float red_combine(int op, float a, float b) { return op == RED_MAXABS ? max_nan(a, b) : a + b; }

/* partial[group] = reduction of x[off + group*RED_BLOCK .. +RED_BLOCK). `op` maps and
 * combines; pass RED_SUM or RED_MAXABS with `mapped` = 1 for the later passes over partials. */
__kernel void reduce_blocks(int op, int mapped, __global const float *x, ulong off, ulong n,
                            __global float *partial, ulong poff)
{
  __local float acc[RED_LANES];
  const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
  const ulong base = get_group_id(0) * (ulong)RED_BLOCK;
  for (int lane = lid; lane < RED_LANES; lane += lsize) {
    float s = 0.0f;
    for (int j = 0; j < RED_PER_LANE; j++) {
      ulong i = base + lane + (ulong)j * RED_LANES;
      if (i < n) {
        float v = x[off + i];
        s = red_combine(op, s, mapped ? v : red_map(op, v));
      }
    }
    acc[lane] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int w = RED_LANES / 2; w > 0; w >>= 1) {
    for (int lane = lid; lane < w; lane += lsize) acc[lane] = red_combine(op, acc[lane], acc[lane + w]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) partial[poff + get_group_id(0)] = acc[0];
}

#define ROWS_PER_CHUNK 64

/* Column sums of x [rows, n], first pass: part[c, j] = sum of rows c*64 .. c*64+63. */
__kernel void sum_rows_chunks(__global const float *x, ulong off, ulong rows, ulong n,
                              __global float *part)
{
  ulong j = get_global_id(0), c = get_global_id(1);
  if (j >= n) return;
  ulong r0 = c * ROWS_PER_CHUNK, r1 = min(rows, r0 + ROWS_PER_CHUNK);
  float s = 0.0f;
  for (ulong r = r0; r < r1; r++) s += x[off + r * n + j];
  part[c * n + j] = s;
}

/* Second pass: out[j] = sum over chunks c in order of part[c, j]. */
__kernel void sum_rows_final(__global const float *part, ulong chunks, ulong n,
                             __global float *out, ulong ooff)
{
  ulong j = get_global_id(0);
  if (j >= n) return;
  float s = 0.0f;
  for (ulong c = 0; c < chunks; c++) s += part[c * n + j];
  out[ooff + j] = s;
}
