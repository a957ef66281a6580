/* tile.cl: the contract of the matrix-unit tile interface, and the operations every
 * implementation shares. A kernel family names it "tile" ("tile+gemm_tile",
 * "tile+kda_common+kda_tile", ...); the program assembly (lib/runtime/program.c) puts the
 * device's implementation file in front of it, the one the build option
 * -DCLMOE_TILE_IMPL=<file> names (lib/tile/tile.c's feature table gives it; tile_portable
 * without it). Implementations: tile_portable.cl (any device), tile_nv_mma.cl (NVIDIA
 * sm_80+, inline PTX). A new matrix unit is one more file and one row of that table.
 *
 * The product. D[16 x 8] += A[16 x 16] B[16 x 8]: bf16 operands, fp32 accumulators,
 * computed by a group of TILE_LANES (32) work-items ("lanes", lane = 0..31) that hold
 * pieces of the operands in fragments:
 *   tile_a, tile_b   the operands' fragments; tile_c, the accumulator's
 *   tile_mma(&c, a, b)              c += a b
 *   tile_c_zero()                   a zero accumulator
 * Layout (after ggml's mma.cuh ne / get_i / get_j): a lane's fragment holds TILE_C_NE
 * (TILE_A_NE, TILE_B_NE) elements; element i of lane is
 *   D[tile_c_row(lane, i)][tile_c_col(lane, i)]    read and written as TILE_C_AT(c, i)
 *   A[tile_a_row(lane, i)][tile_a_col(lane, i)]
 *   B[tile_b_row(lane, i)][tile_b_col(lane, i)]
 * and tile_c_lane(row, col) is the lane that holds D[row][col] (rows r and r + 8 in one
 * lane), for lane shuffles. Kernels index fragments only through these. Where an
 * implementation keeps its operand elements addressable (TILE_HAS_PACKED_REGS 0),
 * TILE_A_AT(a, i) / TILE_B_AT(b, i) are the fp32 (bf16-rounded) elements; where it packs
 * them (TILE_HAS_PACKED_REGS 1), TILE_A_REG(a, j) / TILE_B_REG(b, j) are registers of two
 * bf16 (low half first): j of TILE_A_NREG (TILE_B_NREG) holds elements 2j and 2j + 1. The
 * kernels' packed fast paths (their own local layouts, feeding registers with 8-byte
 * loads) are written for the m16n8k16 register order of tile_nv_mma.cl; another packed
 * implementation brings its own, or sets TILE_HAS_PACKED_REGS 0.
 * Operands are loaded from local memory (bf16 as ushort, or fp32 rounded to bf16 on load,
 * nearest even), in either orientation:
 *   A: tile_load_a_*(p, ld, lane)    A[r][k] = p[r ld + k]        (row-major, 16 x 16)
 *      tile_load_at_*(p, ld, lane)   A[r][k] = p[k ld + r]        (stored transposed)
 *   B: tile_load_b_*(p, ld, lane)    B[k][n] = p[k ld + n]        (row-major, 16 x 8)
 *      tile_load_bt_*(p, ld, lane)   B[k][n] = p[n ld + k]        (stored transposed: "col")
 * (* = bf16 or f32; p + offset 4-byte aligned and ld even for bf16), stored by
 *   tile_store_c_local / tile_store_c_global(c, p, ld, lane)      p[r ld + n] = D[r][n]
 * and an accumulator pair [c0 | c1] (columns 0..7, 8..15) is reused as the A operand of a
 * next product (the 16 x 16 tile, rounded to bf16), as flash attention does with its
 * probabilities: tile_a_from_c_local(c0, c1, scratch, lane) through TILE_SCRATCH_FLOATS
 * of local memory (16 x 16 fp32, private to the 32 lanes; every lane of the work-group
 * calls it in uniform control flow: it holds two barriers), or in registers with
 * tile_a_from_c(c0, c1, lane) (tile_a_from_c_cvt: the same values through tile_cvt2)
 * where TILE_HAS_A_FROM_C.
 * B operands prepared once and read many times are kept in fragment order: B[k][n] of a
 * 16 x 8 operand at tile_b_order(k, n) of 128 bf16, read by tile_load_b_ordered(f, lane)
 * (f 8-byte aligned).
 * Conversions: tile_cvt2(lo, hi), two fp32 as a pair of bf16 in a uint (lo in the low
 * half), nearest even.
 * What kernels may assume of the accumulator's layout beyond the accessors: TILE_C_NE is 4,
 * a lane's elements are a 2 x 2 block, rows tile_c_row(lane, 0) (elements 0, 1) and
 * tile_c_row(lane, 2) (elements 2, 3), columns tile_c_col(lane, 0) and that + 1 (elements
 * 2j and 2j + 1), so that kernels load, scale and store them as pairs and reduce a row's
 * values over the lanes tile_c_lane(row, 0 .. 7).
 * Copies: tile_cp16(dst, src, bytes) moves 16 bytes from global to local memory (past
 * `bytes` zero), tile_cp_commit() closes a group of copies, TILE_CP_WAIT(n) waits until at
 * most n groups are in flight (a barrier must follow); TILE_WARP_SYNC() orders a group's
 * local writes before its own lanes' reads.
 *
 * Features: every implementation defines each of these, 0 or 1; kernels branch on them,
 * never on the implementation:
 *   TILE_HAS_MATRIX_UNIT   the products run on a matrix unit (else fp32 arithmetic)
 *   TILE_HAS_LANE_SHUFFLE  tile_shfl_xor / _up / _down / _idx(x, v): lanes read each
 *                          other's registers
 *   TILE_HAS_ASYNC_COPY    tile_cp16 bypasses registers and runs behind the kernel
 *   TILE_HAS_MATRIX_LOAD   tile_ldsm_x4(_trans)(row): four 8 x 8 bf16 matrices' fragments
 *                          from lane-named rows (lane names row tile_ldsm_row(lane) of
 *                          matrix tile_ldsm_mat(lane))
 *   TILE_HAS_MATRIX_STORE  tile_stsm_x4(row, r0..r3): the inverse
 *   TILE_HAS_WARP_GROUP    products of 4 groups of 32 lanes with operands in local memory
 *                          (tile_wg_desc, tile_wg_fence / _commit, TILE_WG_WAIT,
 *                          tile_wg_proxy_fence, TILE_BAR_SYNC, TILE_WG_C*, TILE_WG_R*;
 *                          where 0, fences, waits and pins do nothing)
 *   TILE_HAS_A_FROM_C      tile_a_from_c: accumulators become an A operand in registers
 *   TILE_HAS_PACKED_REGS   operands are registers of two bf16 (TILE_A_REG, TILE_B_REG);
 *                          else fp32 elements (TILE_A_AT, TILE_B_AT)
 *   TILE_SCRATCH_FLOATS    the local floats per 32 lanes a kernel sets aside for
 *                          tile_a_from_c_local where !TILE_HAS_A_FROM_C (0 otherwise)
 *   TILE_UNROLL            the unroll pragma for loops over tiles (unrolled on a matrix
 *                          unit; rolled where a CPU compiler would take minutes) */
#ifndef CLMOE_TILE_CL
#define CLMOE_TILE_CL

#if !defined(TILE_LANES) || !defined(TILE_C_NE) || !defined(TILE_A_NE) || !defined(TILE_B_NE)
#error "tile.cl: no tile implementation in front of the contract (lib/runtime/program.c)"
#endif
#if !defined(TILE_HAS_MATRIX_UNIT) || !defined(TILE_HAS_LANE_SHUFFLE) ||                         \
    !defined(TILE_HAS_ASYNC_COPY) || !defined(TILE_HAS_MATRIX_LOAD) ||                           \
    !defined(TILE_HAS_MATRIX_STORE) || !defined(TILE_HAS_WARP_GROUP) ||                          \
    !defined(TILE_HAS_A_FROM_C) || !defined(TILE_HAS_PACKED_REGS) ||                             \
    !defined(TILE_SCRATCH_FLOATS) || !defined(TILE_UNROLL)
#error "tile.cl: the tile implementation misses a feature macro"
#endif

inline tile_c tile_c_zero(void)
{
  tile_c c;
  for (int i = 0; i < TILE_C_NE; i++) TILE_C_AT(c, i) = 0.0f;
  return c;
}

/* Stores D (fp32) at p[r ld + n] (local or global through the two variants). */
inline void tile_store_c_local(tile_c c, __local float *p, int ld, int lane)
{
  for (int i = 0; i < TILE_C_NE; i++) p[tile_c_row(lane, i) * ld + tile_c_col(lane, i)] = TILE_C_AT(c, i);
}
inline void tile_store_c_global(tile_c c, __global float *p, int ld, int lane)
{
  for (int i = 0; i < TILE_C_NE; i++) p[tile_c_row(lane, i) * ld + tile_c_col(lane, i)] = TILE_C_AT(c, i);
}

/* [c0 | c1] as an A operand through local memory (any implementation): every lane of the
 * work-group must call it in uniform control flow (it holds two barriers); scratch is a
 * 16 x 16 fp32 area private to this group of 32 lanes. With TILE_HAS_A_FROM_C prefer
 * tile_a_from_c. */
inline tile_a tile_a_from_c_local(tile_c c0, tile_c c1, __local float *scratch, int lane)
{
  tile_store_c_local(c0, scratch, 16, lane);
  tile_store_c_local(c1, scratch + 8, 16, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
  tile_a a = tile_load_a_f32(scratch, 16, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
  return a;
}

#endif /* CLMOE_TILE_CL */
