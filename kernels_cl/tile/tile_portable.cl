/* tile_portable.cl: the portable implementation of the tile interface (contract: tile.cl),
 * the default of every device without another (build option -DCLMOE_TILE_IMPL=tile_portable
 * or none). Ordinary fp32 arithmetic that computes the same products from the same
 * bf16-rounded operands (exact products; the sum over k in order 0..15, so results may
 * differ from a matrix unit's in the last bits of the sum). A fragment holds whole rows /
 * columns of its operand, so no lane needs another lane's data: any device, any work-group
 * size that is a multiple of 32.
 *
 * Fragments (g = lane / 4, t = lane % 4), fp32 values rounded to bf16:
 *   tile_a: r[0][k] = A[g][k], r[1][k] = A[g+8][k]          (k = 0..15)
 *   tile_b: c[0][k] = B[k][2t], c[1][k] = B[k][2t+1]
 *   tile_c: v[0..3] = D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]  (as on NVIDIA) */
#ifndef CLMOE_TILE_PORTABLE_CL
#define CLMOE_TILE_PORTABLE_CL

/* ---- features (tile.cl lists their meaning) ---------------------------------------------- */
#define TILE_HAS_MATRIX_UNIT 0
#define TILE_HAS_LANE_SHUFFLE 0
#define TILE_HAS_ASYNC_COPY 0
#define TILE_HAS_MATRIX_LOAD 0
#define TILE_HAS_MATRIX_STORE 0
#define TILE_HAS_WARP_GROUP 0
#define TILE_HAS_A_FROM_C 0
#define TILE_HAS_PACKED_REGS 0
#define TILE_SCRATCH_FLOATS 256
/* Unrolled, the portable tiles make straight-line code that CPU compilers (PoCL) take
 * minutes over; rolled loops build in seconds. */
#define TILE_UNROLL _Pragma("unroll 1")

/* ---- types and layout ------------------------------------------------------------------- */
#define TILE_LANES 32
#define TILE_C_NE 4
#define TILE_A_NE 32
#define TILE_B_NE 32

typedef struct tile_c {
  float v[4]; /* D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1] */
} tile_c;
typedef struct tile_a {
  float r[2][16]; /* rows g and g+8, bf16-rounded */
} tile_a;
typedef struct tile_b {
  float c[2][16]; /* columns 2t and 2t+1, bf16-rounded */
} tile_b;

#define TILE_C_AT(c, i) ((c).v[i])
#define TILE_A_AT(a, i) ((a).r[(i) >> 4][(i) & 15])
#define TILE_B_AT(b, i) ((b).c[(i) >> 4][(i) & 15])

inline int tile_c_row(int lane, int i) { return (lane >> 2) + ((i & 2) ? 8 : 0); }
inline int tile_c_col(int lane, int i) { return ((lane & 3) << 1) + (i & 1); }
inline int tile_a_row(int lane, int i) { return (lane >> 2) + ((i & 16) ? 8 : 0); }
inline int tile_a_col(int lane, int i) { return i & 15; }
inline int tile_b_row(int lane, int i) { return i & 15; }
/* The lane whose accumulator holds D[row][col] (and D[row + 8][col]). */
inline int tile_c_lane(int row, int col) { return ((row & 7) << 2) + ((col >> 1) & 3); }
inline int tile_b_col(int lane, int i) { return ((lane & 3) << 1) + ((i & 16) ? 1 : 0); }

/* bf16 rounding of an fp32 value, returned as fp32 (what the matrix unit multiplies). */
inline float tile_round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

/* ---- operands --------------------------------------------------------------------------- */
inline tile_a tile_load_a_bf16(__local const ushort *p, int ld, int lane)
{
  int g = lane >> 2;
  tile_a a;
  for (int k = 0; k < 16; k++) {
    a.r[0][k] = bf16_to_f32(p[g * ld + k]);
    a.r[1][k] = bf16_to_f32(p[(g + 8) * ld + k]);
  }
  return a;
}
inline tile_a tile_load_a_f32(__local const float *p, int ld, int lane)
{
  int g = lane >> 2;
  tile_a a;
  for (int k = 0; k < 16; k++) {
    a.r[0][k] = tile_round_bf16(p[g * ld + k]);
    a.r[1][k] = tile_round_bf16(p[(g + 8) * ld + k]);
  }
  return a;
}
inline tile_a tile_load_at_bf16(__local const ushort *p, int ld, int lane)
{
  int g = lane >> 2;
  tile_a a;
  for (int k = 0; k < 16; k++) {
    a.r[0][k] = bf16_to_f32(p[k * ld + g]);
    a.r[1][k] = bf16_to_f32(p[k * ld + g + 8]);
  }
  return a;
}
inline tile_a tile_load_at_f32(__local const float *p, int ld, int lane)
{
  int g = lane >> 2;
  tile_a a;
  for (int k = 0; k < 16; k++) {
    a.r[0][k] = tile_round_bf16(p[k * ld + g]);
    a.r[1][k] = tile_round_bf16(p[k * ld + g + 8]);
  }
  return a;
}
inline tile_b tile_load_b_bf16(__local const ushort *p, int ld, int lane)
{
  int n = (lane & 3) << 1;
  tile_b b;
  for (int k = 0; k < 16; k++) {
    b.c[0][k] = bf16_to_f32(p[k * ld + n]);
    b.c[1][k] = bf16_to_f32(p[k * ld + n + 1]);
  }
  return b;
}
inline tile_b tile_load_b_f32(__local const float *p, int ld, int lane)
{
  int n = (lane & 3) << 1;
  tile_b b;
  for (int k = 0; k < 16; k++) {
    b.c[0][k] = tile_round_bf16(p[k * ld + n]);
    b.c[1][k] = tile_round_bf16(p[k * ld + n + 1]);
  }
  return b;
}
inline tile_b tile_load_bt_bf16(__local const ushort *p, int ld, int lane)
{
  int n = (lane & 3) << 1;
  tile_b b;
  for (int k = 0; k < 16; k++) {
    b.c[0][k] = bf16_to_f32(p[n * ld + k]);
    b.c[1][k] = bf16_to_f32(p[(n + 1) * ld + k]);
  }
  return b;
}
inline tile_b tile_load_bt_f32(__local const float *p, int ld, int lane)
{
  int n = (lane & 3) << 1;
  tile_b b;
  for (int k = 0; k < 16; k++) {
    b.c[0][k] = tile_round_bf16(p[n * ld + k]);
    b.c[1][k] = tile_round_bf16(p[(n + 1) * ld + k]);
  }
  return b;
}
/* Fragment order: a 16 x 8 B[k][n] kept in memory as 128 bf16 in the order of the NVIDIA
 * fragment (lane 4 n + (k % 8) / 2, element (k / 8) * 2 + k % 2), read element by element. */
inline int tile_b_order(int k, int n) { return (n << 4) | (((k & 7) >> 1) << 2) | ((k >> 3) << 1) | (k & 1); }
inline tile_b tile_load_b_ordered(__local const ushort *f, int lane)
{
  const int n = (lane & 3) << 1;
  tile_b b;
  TILE_UNROLL
  for (int k = 0; k < 16; k++) {
    b.c[0][k] = bf16_to_f32(f[tile_b_order(k, n)]);
    b.c[1][k] = bf16_to_f32(f[tile_b_order(k, n + 1)]);
  }
  return b;
}
/* Two fp32 as a bf16 pair (lo in the low half), nearest even. */
inline uint tile_cvt2(float lo, float hi) { return (uint)f32_to_bf16(lo) | ((uint)f32_to_bf16(hi) << 16); }
/* (tile_a_from_c needs the other lanes' accumulators, out of reach here without memory:
 * kernels use tile_a_from_c_local, tile.cl, with TILE_SCRATCH_FLOATS of local memory.) */

/* ---- the product ------------------------------------------------------------------------ */
inline void tile_mma(tile_c *c, tile_a a, tile_b b)
{
  for (int i = 0; i < 4; i++) {
    float s = c->v[i];
    for (int k = 0; k < 16; k++) s = fma(a.r[i >> 1][k], b.c[i & 1][k], s);
    c->v[i] = s;
  }
}

/* ---- copies and synchronisation --------------------------------------------------------- */
/* Copies "asynchronously" (plainly here: the wait and the barrier after it order them):
 * the first `bytes` bytes of 16 (even), the rest zero. No ldmatrix: kernels read fragments
 * through their own portable loads. */
inline void tile_cp16(__local void *dst, __global const void *src, int bytes)
{
  __local ushort *d = (__local ushort *)dst;
  __global const ushort *x = (__global const ushort *)src;
  for (int i = 0; i < 8; i++) d[i] = 2 * i < bytes ? x[i] : (ushort)0;
}
inline void tile_cp_commit(void) {}
#define TILE_CP_WAIT(n) ((void)0)
#define TILE_WARP_SYNC() barrier(CLK_LOCAL_MEM_FENCE)
/* Warp-group products: kernels compute them through tile_mma / element reads here, in
 * order, so the fences and waits have nothing to do. */
#define tile_wg_fence() ((void)0)
#define tile_wg_commit() ((void)0)
#define TILE_WG_WAIT(n) ((void)0)
#define tile_wg_proxy_fence() ((void)0)
#define tile_wg_pin4(d) ((void)0)
#define tile_wg_pin8(d) ((void)0)
#define tile_wg_pin16(d) ((void)0)

#endif /* CLMOE_TILE_PORTABLE_CL */
