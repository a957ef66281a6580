/* tile_nv_mma.cl: the NVIDIA implementation of the tile interface (contract: tile.cl),
 * for sm_80 and newer, in inline PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32.
 * Chosen by the host (lib/tile/tile.c) with the build option
 * -DCLMOE_TILE_IMPL=tile_nv_mma, plus -DTILE_NV_ARCH=90 or 100 on those generations
 * (stmatrix from sm_90, the warp-group products on sm_90 alone).
 * Lanes must be the 32 threads of one warp: a 1-D work-group whose size is a multiple of
 * 32, lane = lid % 32, every lane of the warp calling in convergent control flow.
 *
 * Fragments (g = lane / 4, t = lane % 4), registers of two bf16 (low half first):
 *   tile_a: r[0] = {A[g][2t], A[g][2t+1]}, r[1] = {A[g+8][2t..]}, r[2] = {A[g][2t+8..]},
 *           r[3] = {A[g+8][2t+8..]}
 *   tile_b: r[0] = {B[2t][g], B[2t+1][g]}, r[1] = {B[2t+8][g], B[2t+9][g]}
 *   tile_c: v[0..3] = D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]
 * The loads read pairs of adjacent bf16 as one uint where the layout allows it (row-major
 * A, transposed B): p + offset must then be 4-byte aligned and ld even. */
#ifndef CLMOE_TILE_NV_MMA_CL
#define CLMOE_TILE_NV_MMA_CL

#ifndef TILE_NV_ARCH
#define TILE_NV_ARCH 80
#endif

/* ---- features (tile.cl lists their meaning) ---------------------------------------------- */
#define TILE_HAS_MATRIX_UNIT 1
#define TILE_HAS_LANE_SHUFFLE 1
#define TILE_HAS_ASYNC_COPY 1
#define TILE_HAS_MATRIX_LOAD 1
#define TILE_HAS_MATRIX_STORE (TILE_NV_ARCH >= 90)
#define TILE_HAS_WARP_GROUP (TILE_NV_ARCH == 90)
#define TILE_HAS_A_FROM_C 1
#define TILE_HAS_PACKED_REGS 1
#define TILE_SCRATCH_FLOATS 0
#define TILE_UNROLL _Pragma("unroll")

/* ---- types and layout ------------------------------------------------------------------- */
#define TILE_LANES 32
#define TILE_C_NE 4
#define TILE_A_NE 8
#define TILE_B_NE 4
#define TILE_A_NREG 4
#define TILE_B_NREG 2

typedef struct tile_c {
  float v[4]; /* D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1] */
} tile_c;
typedef struct tile_a {
  uint r[4]; /* {A[g][2t..2t+1]}, {A[g+8][2t..]}, {A[g][2t+8..]}, {A[g+8][2t+8..]} */
} tile_a;
typedef struct tile_b {
  uint r[2]; /* {B[2t..2t+1][g]}, {B[2t+8..2t+9][g]} */
} tile_b;

#define TILE_C_AT(c, i) ((c).v[i])
#define TILE_A_REG(a, j) ((a).r[j])
#define TILE_B_REG(b, j) ((b).r[j])

inline int tile_c_row(int lane, int i) { return (lane >> 2) + ((i & 2) ? 8 : 0); }
inline int tile_c_col(int lane, int i) { return ((lane & 3) << 1) + (i & 1); }
inline int tile_a_row(int lane, int i) { return (lane >> 2) + ((i & 2) ? 8 : 0); }
inline int tile_a_col(int lane, int i) { return ((lane & 3) << 1) + (i & 1) + ((i & 4) ? 8 : 0); }
inline int tile_b_row(int lane, int i) { return ((lane & 3) << 1) + (i & 1) + ((i & 2) ? 8 : 0); }
/* The lane whose accumulator holds D[row][col] (and D[row + 8][col]). */
inline int tile_c_lane(int row, int col) { return ((row & 7) << 2) + ((col >> 1) & 3); }
inline int tile_b_col(int lane, int i) { return lane >> 2; }

/* ---- operands --------------------------------------------------------------------------- */
inline uint tile_pack(ushort lo, ushort hi) { return (uint)lo | ((uint)hi << 16); }
inline uint tile_pack_f32(float lo, float hi) { return tile_pack(f32_to_bf16(lo), f32_to_bf16(hi)); }

inline tile_a tile_load_a_bf16(__local const ushort *p, int ld, int lane)
{
  int g = lane >> 2, t = (lane & 3) << 1;
  tile_a a;
  a.r[0] = *(__local const uint *)(p + g * ld + t);
  a.r[1] = *(__local const uint *)(p + (g + 8) * ld + t);
  a.r[2] = *(__local const uint *)(p + g * ld + t + 8);
  a.r[3] = *(__local const uint *)(p + (g + 8) * ld + t + 8);
  return a;
}
inline tile_a tile_load_a_f32(__local const float *p, int ld, int lane)
{
  int g = lane >> 2, t = (lane & 3) << 1;
  tile_a a;
  a.r[0] = tile_pack_f32(p[g * ld + t], p[g * ld + t + 1]);
  a.r[1] = tile_pack_f32(p[(g + 8) * ld + t], p[(g + 8) * ld + t + 1]);
  a.r[2] = tile_pack_f32(p[g * ld + t + 8], p[g * ld + t + 9]);
  a.r[3] = tile_pack_f32(p[(g + 8) * ld + t + 8], p[(g + 8) * ld + t + 9]);
  return a;
}
inline tile_a tile_load_at_bf16(__local const ushort *p, int ld, int lane)
{
  int g = lane >> 2, t = (lane & 3) << 1;
  tile_a a;
  a.r[0] = tile_pack(p[t * ld + g], p[(t + 1) * ld + g]);
  a.r[1] = tile_pack(p[t * ld + g + 8], p[(t + 1) * ld + g + 8]);
  a.r[2] = tile_pack(p[(t + 8) * ld + g], p[(t + 9) * ld + g]);
  a.r[3] = tile_pack(p[(t + 8) * ld + g + 8], p[(t + 9) * ld + g + 8]);
  return a;
}
inline tile_a tile_load_at_f32(__local const float *p, int ld, int lane)
{
  int g = lane >> 2, t = (lane & 3) << 1;
  tile_a a;
  a.r[0] = tile_pack_f32(p[t * ld + g], p[(t + 1) * ld + g]);
  a.r[1] = tile_pack_f32(p[t * ld + g + 8], p[(t + 1) * ld + g + 8]);
  a.r[2] = tile_pack_f32(p[(t + 8) * ld + g], p[(t + 9) * ld + g]);
  a.r[3] = tile_pack_f32(p[(t + 8) * ld + g + 8], p[(t + 9) * ld + g + 8]);
  return a;
}
inline tile_b tile_load_b_bf16(__local const ushort *p, int ld, int lane)
{
  int g = lane >> 2, t = (lane & 3) << 1;
  tile_b b;
  b.r[0] = tile_pack(p[t * ld + g], p[(t + 1) * ld + g]);
  b.r[1] = tile_pack(p[(t + 8) * ld + g], p[(t + 9) * ld + g]);
  return b;
}
inline tile_b tile_load_b_f32(__local const float *p, int ld, int lane)
{
  int g = lane >> 2, t = (lane & 3) << 1;
  tile_b b;
  b.r[0] = tile_pack_f32(p[t * ld + g], p[(t + 1) * ld + g]);
  b.r[1] = tile_pack_f32(p[(t + 8) * ld + g], p[(t + 9) * ld + g]);
  return b;
}
inline tile_b tile_load_bt_bf16(__local const ushort *p, int ld, int lane)
{
  int g = lane >> 2, t = (lane & 3) << 1;
  tile_b b;
  b.r[0] = *(__local const uint *)(p + g * ld + t);
  b.r[1] = *(__local const uint *)(p + g * ld + t + 8);
  return b;
}
inline tile_b tile_load_bt_f32(__local const float *p, int ld, int lane)
{
  int g = lane >> 2, t = (lane & 3) << 1;
  tile_b b;
  b.r[0] = tile_pack_f32(p[g * ld + t], p[g * ld + t + 1]);
  b.r[1] = tile_pack_f32(p[g * ld + t + 8], p[g * ld + t + 9]);
  return b;
}
/* Fragment order: a 16 x 8 B[k][n] kept in memory as 32 lanes x 4 bf16, lane
 * 4 n + (k % 8) / 2 holding B[k][n] at (k / 8) * 2 + k % 2 (this fragment), so that a lane
 * loads its fragment as one uint2 (f 8-byte aligned). */
inline int tile_b_order(int k, int n) { return (n << 4) | (((k & 7) >> 1) << 2) | ((k >> 3) << 1) | (k & 1); }
inline tile_b tile_load_b_ordered(__local const ushort *f, int lane)
{
  const uint2 u = ((__local const uint2 *)f)[lane];
  tile_b b;
  b.r[0] = u.x;
  b.r[1] = u.y;
  return b;
}
/* Two fp32 as a bf16 pair (lo in the low half), nearest even, one instruction. */
inline uint tile_cvt2(float lo, float hi)
{
  uint r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/* [c0 | c1] (D tiles of columns 0..7 and 8..15) as the A operand of a next product: the
 * accumulator layout of two tiles is the A fragment layout, so no data moves. */
inline tile_a tile_a_from_c(tile_c c0, tile_c c1, int lane)
{
  tile_a a;
  a.r[0] = tile_pack_f32(c0.v[0], c0.v[1]);
  a.r[1] = tile_pack_f32(c0.v[2], c0.v[3]);
  a.r[2] = tile_pack_f32(c1.v[0], c1.v[1]);
  a.r[3] = tile_pack_f32(c1.v[2], c1.v[3]);
  return a;
}
/* tile_a_from_c with packed conversions (tile_cvt2: one instruction a pair). */
inline tile_a tile_a_from_c_cvt(tile_c c0, tile_c c1, int lane)
{
  tile_a a;
  a.r[0] = tile_cvt2(c0.v[0], c0.v[1]);
  a.r[1] = tile_cvt2(c0.v[2], c0.v[3]);
  a.r[2] = tile_cvt2(c1.v[0], c1.v[1]);
  a.r[3] = tile_cvt2(c1.v[2], c1.v[3]);
  return a;
}

/* ---- the product ------------------------------------------------------------------------ */
/* The product has no side effects: without `volatile` the compiler may schedule it among
 * loads; -DTILE_MMA_ASM_QUAL=volatile pins the source order (for experiments). */
#ifndef TILE_MMA_ASM_QUAL
#define TILE_MMA_ASM_QUAL volatile
#endif
inline void tile_mma(tile_c *c, tile_a a, tile_b b)
{
  asm TILE_MMA_ASM_QUAL("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c->v[0]), "+f"(c->v[1]), "+f"(c->v[2]), "+f"(c->v[3])
               : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}

/* ---- asynchronous copies, matrix loads, shuffles ---------------------------------------- */
/* Asynchronous copies and matrix loads (sm_80): cp.async moves 16 bytes from global to
 * local memory without registers (bytes < 16: the rest is zero-filled; 16-byte aligned
 * addresses); groups of copies are committed and waited for by count; ldmatrix gives four
 * 8 x 8 bf16 matrices' fragments from 8-row address lists (lane l names row l % 8 of matrix
 * l / 8), plain or transposed. Local addresses are the shared window's 32-bit offsets. */
inline uint tile_local_addr(__local const void *p) { return (uint)(size_t)p; }
/* The row address a lane gives ldmatrix / stmatrix: row tile_ldsm_row(lane) (0..7) of
 * matrix tile_ldsm_mat(lane) (0..3). */
inline int tile_ldsm_row(int lane) { return lane & 7; }
inline int tile_ldsm_mat(int lane) { return lane >> 3; }
inline void tile_cp16(__local void *dst, __global const void *src, int bytes)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(tile_local_addr(dst)), "l"((ulong)(size_t)src), "r"(bytes) : "memory");
}
inline void tile_cp_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Waits until at most n (a literal) committed groups of this lane are still in flight;
 * a barrier must follow before other lanes read the data. */
#define TILE_CP_WAIT(n) asm volatile("cp.async.wait_group " #n ";" ::: "memory")
inline uint4 tile_ldsm_x4(__local const ushort *row)
{
  uint4 r;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(tile_local_addr(row)));
  return r;
}
inline uint4 tile_ldsm_x4_trans(__local const ushort *row)
{
  uint4 r;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(tile_local_addr(row)));
  return r;
}
/* Warp shuffles (shfl.sync over all 32 lanes): tile_shfl_xor, the value of lane ^ v;
 * tile_shfl_up, of lane - v (lanes below v keep their own); tile_shfl_down, of lane + v
 * (lanes past 31 - v keep theirs); tile_shfl_idx, of lane v. */
#define TILE_SHFL(name, mode, clamp)                                                        \
  inline float name(float x, int v)                                                         \
  {                                                                                         \
    uint r;                                                                                 \
    asm volatile("shfl.sync." mode ".b32 %0, %1, %2, " clamp ", 0xffffffff;"                 \
                 : "=r"(r) : "r"(as_uint(x)), "r"(v));                                      \
    return as_float(r);                                                                     \
  }
TILE_SHFL(tile_shfl_xor, "bfly", "0x1f")
TILE_SHFL(tile_shfl_up, "up", "0")
TILE_SHFL(tile_shfl_down, "down", "0x1f")
TILE_SHFL(tile_shfl_idx, "idx", "0x1f")

/* stmatrix (sm_90): the inverse of tile_ldsm_x4, four 8 x 8 bf16 matrices from fragments
 * (lane l holds row l / 4, elements 2 (l % 4) and + 1 of each: an accumulator tile's
 * layout, packed) to the rows lane l names (row l % 8 of matrix l / 8). */
inline void tile_stsm_x4(__local ushort *row, uint r0, uint r1, uint r2, uint r3)
{
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(tile_local_addr(row)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

/* ---- warp groups (sm_90a) --------------------------------------------------------------- */
/* Warp-group matrix instructions (sm_90a): the 128 lanes of 4 consecutive warps ("warp
 * group") issue wgmma.mma_async together; operands in local memory are named by matrix
 * descriptors (start, leading and stride byte offsets, swizzle 1: 128 B, 2: 64 B, 3: 32 B,
 * of the hardware's canonical layouts), accumulators stay in registers. The products run
 * asynchronously: tile_wg_fence before a batch (after registers it reads were written),
 * tile_wg_commit after it, TILE_WG_WAIT(n) until at most n batches are in flight; copies
 * that wrote local memory through the generic proxy (cp.async, stores) need
 * tile_wg_proxy_fence and a barrier before a product reads them. The shapes' own asm
 * statements live with their kernels (gemm_wgmma.cl, mla_tile_wgmma.cl).
 * NVIDIA's OpenCL compiler writes PTX for ".target sm_90", where these instructions do not
 * exist, so they are written as PTX comments marked TILE_WG_MARK: the compiler still
 * allocates their operands' registers; the host (lib/runtime/ptx_sm90a.c, asked for by the build
 * option -DCLMOE_PTX_SM90A=1) retargets the built PTX to sm_90a, removes the marks and
 * builds that. */
#define TILE_WG_MARK "//sm90a "
inline ulong tile_wg_desc(__local const ushort *p, uint lbo, uint sbo, uint swizzle)
{
  ulong a = (ulong)((tile_local_addr(p) & 0x3FFFFu) >> 4);
  return a | ((ulong)((lbo >> 4) & 0x3FFFu) << 16) | ((ulong)((sbo >> 4) & 0x3FFFu) << 32) |
         ((ulong)swizzle << 62);
}
inline void tile_wg_fence(void) { asm volatile(TILE_WG_MARK "wgmma.fence.sync.aligned;" ::: "memory"); }
inline void tile_wg_commit(void) { asm volatile(TILE_WG_MARK "wgmma.commit_group.sync.aligned;" ::: "memory"); }
#define TILE_WG_WAIT(n) asm volatile(TILE_WG_MARK "wgmma.wait_group.sync.aligned " #n ";" ::: "memory")
inline void tile_wg_proxy_fence(void) { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* Barrier `id` (literal; 0 is barrier()'s) for `n` work-items (literal, a multiple of 32)
 * that may reach it from different places in the code (warp groups taking turns). */
#define TILE_BAR_SYNC(id, n) asm volatile("bar.sync " #id ", " #n ";" ::: "memory")
/* Orders a warp's local-memory writes before its own lanes' reads (scratch private to the
 * warp): a warp barrier here, the work-group barrier with the portable tiles. Every lane
 * of the warp must reach it. */
#define TILE_WARP_SYNC() asm volatile("bar.warp.sync -1;" ::: "memory")
/* Operand lists of the warp-group asm statements: accumulators as tile_c arrays (4, 8 or 16
 * tiles of 8 columns: n = 32, 64, 128), read and written, and their %-placeholders
 * (operands 0 .. 4 n / 8 - 1; the statement's other operands follow). */
#define TILE_WG_C1(d, j) "+f"((d)[j].v[0]), "+f"((d)[j].v[1]), "+f"((d)[j].v[2]), "+f"((d)[j].v[3])
#define TILE_WG_C4(d) TILE_WG_C1(d, 0), TILE_WG_C1(d, 1), TILE_WG_C1(d, 2), TILE_WG_C1(d, 3)
#define TILE_WG_C8(d) TILE_WG_C4(d), TILE_WG_C1(d, 4), TILE_WG_C1(d, 5), TILE_WG_C1(d, 6), TILE_WG_C1(d, 7)
#define TILE_WG_C16(d)                                                                         \
  TILE_WG_C8(d), TILE_WG_C1(d, 8), TILE_WG_C1(d, 9), TILE_WG_C1(d, 10), TILE_WG_C1(d, 11),     \
      TILE_WG_C1(d, 12), TILE_WG_C1(d, 13), TILE_WG_C1(d, 14), TILE_WG_C1(d, 15)
#define TILE_WG_R16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define TILE_WG_R32 TILE_WG_R16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define TILE_WG_R64                                                                            \
  TILE_WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
              "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
/* Pin accumulators after a wait: later uses may not move above it. */
inline void tile_wg_pin4(tile_c *d) { asm volatile("" : TILE_WG_C4(d)::"memory"); }
inline void tile_wg_pin8(tile_c *d) { asm volatile("" : TILE_WG_C8(d)::"memory"); }
inline void tile_wg_pin16(tile_c *d) { asm volatile("" : TILE_WG_C16(d)::"memory"); }

#endif /* CLMOE_TILE_NV_MMA_CL */
