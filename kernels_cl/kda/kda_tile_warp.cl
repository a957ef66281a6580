/* kda_tile_warp.cl: warp-level helpers of kda_tile_bwd_chunk.cl's kda_tile_bwd_chunk, prepended
 * to it in the program "tile+kda_common+kda_tile_warp+kda_tile_bwd_chunk". A warp holds a 16 x
 * 16 block as 8 values per lane in the accumulator layout of two 16 x 8 tiles (tile.cl): element
 * e = 4 n + i of lane (g = lane / 4, t = lane % 4) is row TD_ROW(e) = g (+ 8 for i >= 2),
 * column TD_COL(e) = 8 n + 2 t + i % 2 of the warp's 16. Column scans, a row's values,
 * column sums and row sums of such blocks: warp shuffles on PTX (shfl.sync), a per-warp
 * 16 x 16 scratch in local memory with work-group barriers on the portable tiles (every
 * work-item calls them in uniform control flow there). td_pair_b: the B fragments of both
 * 8-column halves of a 16 x 16 bf16 slice (ldmatrix.trans on PTX). */
#define TD_LDF KDA_TILE_LDT  /* fp32 16 x 16 matrices */
#define TD_LDR KDA_TILE_LD16 /* bf16 rows of a warp's 16 x 16 slice (48 bytes: no bank conflicts) */
#define TD_ROW(e) (g + (((e) & 2) << 2))               /* row of element e of a lane */
#define TD_COL(e) (8 * ((e) >> 2) + 2 * t + ((e) & 1)) /* its column within the warp's 16 */
#define TD_CI(e) (2 * ((e) >> 2) + ((e) & 1))           /* its column's index 0..3 in the lane */

#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
#define TD_UNROLL _Pragma("unroll")
#define TD_SCRATCH(n) __local float *sw = NULL
/* Inclusive scan down the rows (rev: from the last row up). */
inline void td_scan(float *x, int rev, __local float *sw, int lane)
{
  (void)sw;
  const int g = lane >> 2, t = lane & 3;
  TD_UNROLL
  for (int off = 1; off < 8; off <<= 1)
    TD_UNROLL
    for (int e = 0; e < 8; e++) {
      const float y = rev ? tile_shfl_down(x[e], 4 * off) : tile_shfl_up(x[e], 4 * off);
      if (rev ? g + off < 8 : g >= off) x[e] += y;
    }
  TD_UNROLL
  for (int e = 0; e < 8; e++)
    if (!(e & 2)) {
      if (rev) x[e] += tile_shfl_idx(x[e | 2], t);
      else x[e | 2] += tile_shfl_idx(x[e], 28 + t);
    }
}
/* The lane's 4 columns at row `row` (uniform). */
inline void td_at_row(const float *x, int row, float *out, __local float *sw, int lane)
{
  (void)sw;
  const int t = lane & 3, src = 4 * (row & 7) + t;
  TD_UNROLL
  for (int e = 0; e < 8; e++)
    if (!(e & 2)) out[TD_CI(e)] = tile_shfl_idx(row < 8 ? x[e] : x[e | 2], src);
}
/* Column sums (every lane gets its 4 columns'). */
inline void td_colsum(const float *x, float *out, __local float *sw, int lane)
{
  (void)sw, (void)lane;
  TD_UNROLL
  for (int e = 0; e < 8; e++)
    if (!(e & 2)) {
      float s = x[e] + x[e | 2];
      s += tile_shfl_xor(s, 4);
      s += tile_shfl_xor(s, 8);
      s += tile_shfl_xor(s, 16);
      out[TD_CI(e)] = s;
    }
}
/* Sums over the warp's 16 columns of rows g (out[0]) and g + 8 (out[1]) of m blocks. */
inline void td_rowsum(const float *x, float *out, __local float *sw, int lane)
{
  (void)sw, (void)lane;
  float a = x[0] + x[1] + x[4] + x[5], b = x[2] + x[3] + x[6] + x[7];
  a += tile_shfl_xor(a, 1), b += tile_shfl_xor(b, 1);
  a += tile_shfl_xor(a, 2), b += tile_shfl_xor(b, 2);
  out[0] = a, out[1] = b;
}
inline tile_b td_pair_b(__local const ushort *p, int lane, tile_b *b1)
{ /* B[k][n] = p[k TD_LDR + n] for n-tiles 0 (returned) and 1 (b1) of a 16 x 16 slice */
  const uint4 x = tile_ldsm_x4_trans(p + ((lane & 7) + (((lane >> 3) & 1) << 3)) * TD_LDR + ((lane >> 4) << 3));
  tile_b b0;
  b0.r[0] = x.x, b0.r[1] = x.y, b1->r[0] = x.z, b1->r[1] = x.w;
  return b0;
}
#else
#define TD_UNROLL _Pragma("unroll 1") /* unrolled portable tiles build slowly on PoCL */
/* the portable versions go through a per-warp 16 x 16 scratch (two barriers each: every
 * work-item calls them in uniform control flow) */
#define TD_SCRATCH(n) \
  __local float scr_[TD_PAIR][n][16 * TD_LDF]; \
  __local float *sw = scr_[sub][warp]
inline void td_put(const float *x, __local float *sw, int lane)
{
  const int g = lane >> 2, t = lane & 3;
  for (int e = 0; e < 8; e++) sw[TD_ROW(e) * TD_LDF + TD_COL(e)] = x[e];
  barrier(CLK_LOCAL_MEM_FENCE);
}
inline void td_scan(float *x, int rev, __local float *sw, int lane)
{
  const int g = lane >> 2, t = lane & 3;
  td_put(x, sw, lane);
  for (int e = 0; e < 8; e++) {
    float s = 0.0f;
    for (int i = 0; i < CH; i++)
      if (rev ? i >= TD_ROW(e) : i <= TD_ROW(e)) s += sw[i * TD_LDF + TD_COL(e)];
    x[e] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}
inline void td_at_row(const float *x, int row, float *out, __local float *sw, int lane)
{
  const int g = lane >> 2, t = lane & 3;
  td_put(x, sw, lane);
  for (int e = 0; e < 8; e++)
    if (!(e & 2)) out[TD_CI(e)] = sw[row * TD_LDF + TD_COL(e)];
  barrier(CLK_LOCAL_MEM_FENCE);
}
inline void td_colsum(const float *x, float *out, __local float *sw, int lane)
{
  const int g = lane >> 2, t = lane & 3;
  td_put(x, sw, lane);
  for (int e = 0; e < 8; e++)
    if (!(e & 2)) {
      float s = 0.0f;
      for (int i = 0; i < CH; i++) s += sw[i * TD_LDF + TD_COL(e)];
      out[TD_CI(e)] = s;
    }
  barrier(CLK_LOCAL_MEM_FENCE);
}
inline void td_rowsum(const float *x, float *out, __local float *sw, int lane)
{
  const int g = lane >> 2;
  td_put(x, sw, lane);
  float a = 0.0f, b = 0.0f;
  for (int l = 0; l < 16; l++) a += sw[g * TD_LDF + l], b += sw[(g + 8) * TD_LDF + l];
  out[0] = a, out[1] = b;
  barrier(CLK_LOCAL_MEM_FENCE);
}
inline tile_b td_pair_b(__local const ushort *p, int lane, tile_b *b1)
{
  *b1 = tile_load_b_bf16(p + 8, TD_LDR, lane);
  return tile_load_b_bf16(p, TD_LDR, lane);
}
#endif

