/* kda_tile_warp.cl: warp-level helpers of kda_tile_bwd_chunk.cl's kda_tile_bwd_chunk, prepended
 * to it in the program "tile+kda_common+kda_tile_warp+kda_tile_bwd_chunk". A warp holds a 16 x
 * 16 block as 8 values per lane in the accumulator layout of two 16 x 8 tiles (tile.cl): element
 * e = 4 n + i of lane is row TD_ROW(e) = tile_c_row(lane, i), column TD_COL(e) =
 * 8 n + tile_c_col(lane, i) of the warp's 16. Column scans, a row's values, column sums and
 * row sums of such blocks: lane shuffles where the tiles have them (TILE_HAS_LANE_SHUFFLE:
 * the lanes of a row are tile_c_lane(row, col), rows r and r + 8 in one lane), a per-warp
 * 16 x 16 scratch in local memory with work-group barriers elsewhere (every work-item calls
 * them in uniform control flow there). td_pair_b: the B fragments of both 8-column halves
 * of a 16 x 16 bf16 slice (a transposed matrix load where the tiles have one). */
#define TD_LDF KDA_TILE_LDT  /* fp32 16 x 16 matrices */
#define TD_LDR KDA_TILE_LD16 /* bf16 rows of a warp's 16 x 16 slice (48 bytes: no bank conflicts) */
#define TD_ROW(e) tile_c_row(lane, (e) % TILE_C_NE)                          /* row of element e */
#define TD_COL(e) (8 * ((e) / TILE_C_NE) + tile_c_col(lane, (e) % TILE_C_NE)) /* its column of the 16 */
#define TD_CI(e) (2 * ((e) >> 2) + ((e) & 1))           /* its column's index 0..3 in the lane */

#define TD_UNROLL TILE_UNROLL
#if TILE_HAS_LANE_SHUFFLE
#define TD_SCRATCH(n) __local float *sw = NULL
/* Inclusive scan down the rows (rev: from the last row up). */
inline void td_scan(float *x, int rev, __local float *sw, int lane)
{
  (void)sw;
  const int g = tile_c_row(lane, 0), c = tile_c_col(lane, 0), dl = tile_c_lane(1, c) - tile_c_lane(0, c);
  TD_UNROLL
  for (int off = 1; off < 8; off <<= 1)
    TD_UNROLL
    for (int e = 0; e < 8; e++) {
      const float y = rev ? tile_shfl_down(x[e], dl * off) : tile_shfl_up(x[e], dl * off);
      if (rev ? g + off < 8 : g >= off) x[e] += y;
    }
  TD_UNROLL
  for (int e = 0; e < 8; e++)
    if (!(e & 2)) {
      if (rev) x[e] += tile_shfl_idx(x[e | 2], tile_c_lane(0, c));
      else x[e | 2] += tile_shfl_idx(x[e], tile_c_lane(7, c));
    }
}
/* The lane's 4 columns at row `row` (uniform). */
inline void td_at_row(const float *x, int row, float *out, __local float *sw, int lane)
{
  (void)sw;
  const int src = tile_c_lane(row & 7, tile_c_col(lane, 0));
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
#else
/* the portable versions go through a per-warp 16 x 16 scratch (two barriers each: every
 * work-item calls them in uniform control flow) */
#define TD_SCRATCH(n) \
  __local float scr_[TD_PAIR][n][16 * TD_LDF]; \
  __local float *sw = scr_[sub][warp]
inline void td_put(const float *x, __local float *sw, int lane)
{
  for (int e = 0; e < 8; e++) sw[TD_ROW(e) * TD_LDF + TD_COL(e)] = x[e];
  barrier(CLK_LOCAL_MEM_FENCE);
}
inline void td_scan(float *x, int rev, __local float *sw, int lane)
{
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
  td_put(x, sw, lane);
  for (int e = 0; e < 8; e++)
    if (!(e & 2)) out[TD_CI(e)] = sw[row * TD_LDF + TD_COL(e)];
  barrier(CLK_LOCAL_MEM_FENCE);
}
inline void td_colsum(const float *x, float *out, __local float *sw, int lane)
{
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
  const int g0 = tile_c_row(lane, 0), g1 = tile_c_row(lane, 2);
  td_put(x, sw, lane);
  float a = 0.0f, b = 0.0f;
  for (int l = 0; l < 16; l++) a += sw[g0 * TD_LDF + l], b += sw[g1 * TD_LDF + l];
  out[0] = a, out[1] = b;
  barrier(CLK_LOCAL_MEM_FENCE);
}
#endif

inline tile_b td_pair_b(__local const ushort *p, int lane, tile_b *b1)
{ /* B[k][n] = p[k TD_LDR + n] for n-tiles 0 (returned) and 1 (b1) of a 16 x 16 slice */
#if TILE_HAS_MATRIX_LOAD && TILE_HAS_PACKED_REGS
  const int r = tile_ldsm_row(lane), lo = (tile_ldsm_mat(lane) & 1) << 3, hi = (tile_ldsm_mat(lane) >> 1) << 3;
  const uint4 x = tile_ldsm_x4_trans(p + (r + lo) * TD_LDR + hi);
  tile_b b0;
  TILE_B_REG(b0, 0) = x.x, TILE_B_REG(b0, 1) = x.y, TILE_B_REG(*b1, 0) = x.z, TILE_B_REG(*b1, 1) = x.w;
  return b0;
#else
  *b1 = tile_load_b_bf16(p + 8, TD_LDR, lane);
  return tile_load_b_bf16(p, TD_LDR, lane);
#endif
}
