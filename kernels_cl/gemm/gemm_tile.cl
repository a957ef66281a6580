/* gemm_tile.cl: bf16 GEMM on the tile interface, built as "tile+gemm_common+gemm_tile".
 *
 *   C[b] = alpha op(A[b]) op(B[b]) + beta C[b]      (beta == 0: C is not read)
 *   A: [M, K] row-major (GT_TA=0) or [K, M] (GT_TA=1), bf16 as ushort, row stride lda
 *   B: [K, N] (GT_TB=0) or [N, K] (GT_TB=1), bf16, row stride ldb
 *   C: [M, N] fp32 (or bf16 with GT_C_BF16=1), row stride ldc
 *   offsets and batch strides in elements (a batch stride of 0 broadcasts the operand)
 *   flags: the layout when not fixed at build time (see GT_TA below)
 *
 * A work-group of GT_WARPS_M x GT_WARPS_N groups of 32 lanes computes one GT_BM x GT_BN
 * block of C; each group of 32 lanes ("warp") a (GT_BM / GT_WARPS_M) x (GT_BN / GT_WARPS_N)
 * part of it as 16 x 8 accumulator tiles, every product through tile_mma. K advances in
 * steps of GT_BK = 32: the next step's slices of A and B are read from global memory into
 * registers (8 bf16 per uint4 load) while the current step's are multiplied out of local
 * memory, then stored into the other of two local buffers (one barrier per step).
 *
 * Local layout of an operand slice of R rows (the M rows of A, the N columns of B) and 32
 * k: two planes of 16 k, each R rows of 16 bf16 (8 uints), k contiguous. Both operands are
 * stored k-contiguous whatever their global layout; a global layout with rows of M (or N)
 * is transposed on the way in by packing the bf16 of two (or four) k rows into one uint
 * (or uint2) per column.
 *   portable tiles: plane p, row r at uint (p R + r) 8: tile_load_a_bf16 / tile_load_bt_bf16
 *                   with ld 16.
 *   packed tiles (TILE_HAS_PACKED_REGS, the m16n8k16 register order of tile_nv_mma.cl):
 *                   rows are permuted, r -> r ^ ((r >> 3) & 3), so that the fragment loads
 *                   below and the transposing stores hit 32 different banks; and a lane
 *                   reads its 4 bf16 of a row (k = 4t..4t+3) as one uint2, giving them to
 *                   mma.sync's k slots 2t, 2t+1, 2t+8, 2t+9. A and B use the same k-to-slot
 *                   map, so each product A[m][k] B[k][n] is formed once with its true k.
 * Ragged M, N, K: loads past an edge read 0, stores past an edge are skipped. Vector loads
 * (GT_VEC_A / GT_VEC_B = 1) need the operand's offset, row stride and batch stride to be
 * multiples of 8 elements; the host passes 0 otherwise (bf16 by bf16 loads). */
#ifdef CLMOE_TILE_CL /* only as "tile+gemm_tile"; built alone (clmoe-info --warm) it is empty */

#ifndef GT_BM
#define GT_BM 128
#endif
#ifndef GT_BN
#define GT_BN 128
#endif
#ifndef GT_WARPS_M
#define GT_WARPS_M 2
#endif
#ifndef GT_WARPS_N
#define GT_WARPS_N 4
#endif
/* Layout flags: compile-time with -DGT_TA=.. -DGT_TB=.. -DGT_VEC_A=.. -DGT_VEC_B=..
 * -DGT_C_BF16=.. (the host does so for matrix units, where every instruction counts), else
 * read from the kernel's `flags` argument (bit 0 TA, 1 TB, 2 VEC_A, 3 VEC_B, 4 C_BF16): one
 * program for every layout, which is what a CPU device with slow compiles wants. */
#ifndef GT_TA
#define GT_TA (flags & 1)
#endif
#ifndef GT_TB
#define GT_TB ((flags >> 1) & 1)
#endif
#ifndef GT_VEC_A
#define GT_VEC_A ((flags >> 2) & 1)
#endif
#ifndef GT_VEC_B
#define GT_VEC_B ((flags >> 3) & 1)
#endif
#ifndef GT_C_BF16
#define GT_C_BF16 ((flags >> 4) & 1)
#endif
#define GT_BK 32
#define GT_THREADS (GT_WARPS_M * GT_WARPS_N * 32)
#define GT_WTM (GT_BM / GT_WARPS_M) /* rows of C per warp */
#define GT_WTN (GT_BN / GT_WARPS_N) /* columns of C per warp */
#define GT_MT (GT_WTM / 16)         /* accumulator tiles per warp: GT_MT x GT_NT */
#define GT_NT (GT_WTN / 8)
#define GT_SLICE(R) ((R) * 16)      /* uints of an R-row slice: 2 planes x R rows x 8 */
#define GT_STAGE (GT_SLICE(GT_BM) + GT_SLICE(GT_BN))
#define GT_REGS(R) ((R) * GT_BK / 8 / GT_THREADS) /* uint4 of 8 bf16 per work-item */
#if GT_WTM % 16 || GT_WTN % 8 || GT_REGS(GT_BM) % 2 || GT_REGS(GT_BN) % 2 ||                    \
    GT_REGS(GT_BM) < 2 || GT_REGS(GT_BN) < 2 ||                                                  \
    GT_REGS(GT_BM) * GT_THREADS * 8 != GT_BM * GT_BK || GT_REGS(GT_BN) * GT_THREADS * 8 != GT_BN * GT_BK
#error "gemm_tile: unsupported block shape"
#endif

#if TILE_HAS_PACKED_REGS
#define GT_PHYS(r) ((r) ^ (((r) >> 3) & 3))
#else
#define GT_PHYS(r) (r)
#endif
#define GT_UNROLL TILE_UNROLL

/* Two bf16 x[i + j], x[i + j + 1] as one uint (low half first), 0 at or past `valid`. */
inline uint gt_pair(__global const ushort *x, ulong i, int j, int valid)
{
  uint lo = j < valid ? x[i + j] : 0u, hi = j + 1 < valid ? x[i + j + 1] : 0u;
  return lo | (hi << 16);
}

/* x[i .. i + 7] (elements at or past `valid` read as 0); one 16-byte load when allowed. */
inline uint4 gt_load8(__global const ushort *x, ulong i, int valid, int vec)
{
  if (vec && valid >= 8) return *(__global const uint4 *)(x + i);
  return (uint4)(gt_pair(x, i, 0, valid), gt_pair(x, i, 2, valid), gt_pair(x, i, 4, valid),
                 gt_pair(x, i, 6, valid));
}

/* k-contiguous operand (x[r ld + k]): the slice rows r0 .. r0 + R - 1, k0 .. k0 + 31 into
 * regs[GT_REGS(R)]. Chunk q of 8 bf16: half q % 2 of plane q / 2R, row (q / 2) % R; a warp
 * reads 16 rows x 32 bytes. */
inline void gt_fetch_kc(uint4 *regs, int R, __global const ushort *x, ulong base, int ld, int r0,
                        int rows, int k0, int K, int vec, int tid)
{
GT_UNROLL
  for (int j = 0; j < GT_REGS(R); j++) {
    int q = tid + j * GT_THREADS, hf = q & 1, row = (q >> 1) % R, plane = (q >> 1) / R;
    int r = r0 + row, k = k0 + plane * 16 + hf * 8;
    regs[j] = gt_load8(x, base + (ulong)r * (ulong)ld + (ulong)k, r < rows ? K - k : 0, vec);
  }
}
inline void gt_store_kc(__local uint *s, const uint4 *regs, int R, int tid)
{
GT_UNROLL
  for (int j = 0; j < GT_REGS(R); j++) {
    int q = tid + j * GT_THREADS, hf = q & 1, row = (q >> 1) % R, plane = (q >> 1) / R;
    *(__local uint4 *)(s + (plane * R + GT_PHYS(row)) * 8 + hf * 4) = regs[j];
  }
}

/* Row-contiguous operand (x[k ld + r]): unit u = rows k, k + 1 (k = 2 (u % 8) in plane
 * (u / 8) / (R / 8)) of the 8 columns starting at 8 ((u / 8) % (R / 8)), into two uint4. */
inline void gt_fetch_rc(uint4 *regs, int R, __global const ushort *x, ulong base, int ld, int r0,
                        int rows, int k0, int K, int vec, int tid)
{
GT_UNROLL
  for (int j = 0; j < GT_REGS(R) / 2; j++) {
    int u = tid + j * GT_THREADS, kp = u & 7, c = (u >> 3) % (R / 8), plane = (u >> 3) / (R / 8);
    int k = k0 + plane * 16 + 2 * kp, r = r0 + c * 8, valid = rows - r;
    ulong i = base + (ulong)k * (ulong)ld + (ulong)r;
    regs[2 * j] = gt_load8(x, i, k < K ? valid : 0, vec);
    regs[2 * j + 1] = gt_load8(x, i + (ulong)ld, k + 1 < K ? valid : 0, vec);
  }
}
/* Transposes on the way: row r + e of the slice gets the uint {x[k][r + e], x[k + 1][r + e]}. */
inline void gt_store_rc(__local uint *s, const uint4 *regs, int R, int tid)
{
GT_UNROLL
  for (int j = 0; j < GT_REGS(R) / 2; j++) {
    int u = tid + j * GT_THREADS, kp = u & 7, c = (u >> 3) % (R / 8), plane = (u >> 3) / (R / 8);
    __local uint *p = s + plane * R * 8 + kp;
    int r = c * 8;
    uint4 lo = regs[2 * j], hi = regs[2 * j + 1];
    p[GT_PHYS(r + 0) * 8] = (lo.x & 0xffffu) | (hi.x << 16);
    p[GT_PHYS(r + 1) * 8] = (lo.x >> 16) | (hi.x & 0xffff0000u);
    p[GT_PHYS(r + 2) * 8] = (lo.y & 0xffffu) | (hi.y << 16);
    p[GT_PHYS(r + 3) * 8] = (lo.y >> 16) | (hi.y & 0xffff0000u);
    p[GT_PHYS(r + 4) * 8] = (lo.z & 0xffffu) | (hi.z << 16);
    p[GT_PHYS(r + 5) * 8] = (lo.z >> 16) | (hi.z & 0xffff0000u);
    p[GT_PHYS(r + 6) * 8] = (lo.w & 0xffffu) | (hi.w << 16);
    p[GT_PHYS(r + 7) * 8] = (lo.w >> 16) | (hi.w & 0xffff0000u);
  }
}

/* Row-contiguous operand, when each work-item has 4 uint4 of it: unit u = rows k .. k + 3 (k = 4 (u % 4) in plane
 * (u / 4) / (R / 8)) of the 8 columns from 8 ((u / 4) % (R / 8)), into four uint4; each of
 * the 8 columns is stored as one uint2 {x[k][c], .., x[k + 3][c]} (half the stores of
 * gt_store_rc, and 128-byte rows per warp on the global side). */
#define GT_RC4(R) (GT_REGS(R) % 4 == 0)
inline void gt_fetch_rc4(uint4 *regs, int R, __global const ushort *x, ulong base, int ld, int r0,
                         int rows, int k0, int K, int vec, int tid)
{
GT_UNROLL
  for (int j = 0; j < GT_REGS(R) / 4; j++) {
    int u = tid + j * GT_THREADS, kq = u & 3, c = (u >> 2) % (R / 8), plane = (u >> 2) / (R / 8);
    int k = k0 + plane * 16 + 4 * kq, r = r0 + c * 8, valid = rows - r;
    ulong i = base + (ulong)k * (ulong)ld + (ulong)r;
GT_UNROLL
    for (int e = 0; e < 4; e++)
      regs[4 * j + e] = gt_load8(x, i + (ulong)e * (ulong)ld, k + e < K ? valid : 0, vec);
  }
}
inline uint gt_pk_lo(uint a, uint b) { return (a & 0xffffu) | (b << 16); }
inline uint gt_pk_hi(uint a, uint b) { return (a >> 16) | (b & 0xffff0000u); }
inline void gt_store_rc4(__local uint *s, const uint4 *regs, int R, int tid)
{
GT_UNROLL
  for (int j = 0; j < GT_REGS(R) / 4; j++) {
    int u = tid + j * GT_THREADS, kq = u & 3, c = (u >> 2) % (R / 8), plane = (u >> 2) / (R / 8);
    __local uint *p = s + plane * R * 8 + 2 * kq;
    int r = c * 8;
    uint4 a = regs[4 * j], b = regs[4 * j + 1], d = regs[4 * j + 2], e = regs[4 * j + 3];
    *(__local uint2 *)(p + GT_PHYS(r + 0) * 8) = (uint2)(gt_pk_lo(a.x, b.x), gt_pk_lo(d.x, e.x));
    *(__local uint2 *)(p + GT_PHYS(r + 1) * 8) = (uint2)(gt_pk_hi(a.x, b.x), gt_pk_hi(d.x, e.x));
    *(__local uint2 *)(p + GT_PHYS(r + 2) * 8) = (uint2)(gt_pk_lo(a.y, b.y), gt_pk_lo(d.y, e.y));
    *(__local uint2 *)(p + GT_PHYS(r + 3) * 8) = (uint2)(gt_pk_hi(a.y, b.y), gt_pk_hi(d.y, e.y));
    *(__local uint2 *)(p + GT_PHYS(r + 4) * 8) = (uint2)(gt_pk_lo(a.z, b.z), gt_pk_lo(d.z, e.z));
    *(__local uint2 *)(p + GT_PHYS(r + 5) * 8) = (uint2)(gt_pk_hi(a.z, b.z), gt_pk_hi(d.z, e.z));
    *(__local uint2 *)(p + GT_PHYS(r + 6) * 8) = (uint2)(gt_pk_lo(a.w, b.w), gt_pk_lo(d.w, e.w));
    *(__local uint2 *)(p + GT_PHYS(r + 7) * 8) = (uint2)(gt_pk_hi(a.w, b.w), gt_pk_hi(d.w, e.w));
  }
}

/* op(A) rows are M (A[M][K] k-contiguous, or A[K][M] row-contiguous when transposed);
 * op(B) columns are N (B[K][N] row-contiguous, or B[N][K] k-contiguous when transposed). */
#define GT_FETCH_A(regs, k0)                                                                 \
  do {                                                                                       \
    if (GT_TA && GT_RC4(GT_BM)) gt_fetch_rc4(regs, GT_BM, A, abase, lda, m0, M, k0, K, GT_VEC_A, tid); \
    else if (GT_TA) gt_fetch_rc(regs, GT_BM, A, abase, lda, m0, M, k0, K, GT_VEC_A, tid);    \
    else gt_fetch_kc(regs, GT_BM, A, abase, lda, m0, M, k0, K, GT_VEC_A, tid);               \
  } while (0)
#define GT_STORE_A(s, regs)                                                                  \
  do {                                                                                       \
    if (GT_TA && GT_RC4(GT_BM)) gt_store_rc4(s, regs, GT_BM, tid);                           \
    else if (GT_TA) gt_store_rc(s, regs, GT_BM, tid);                                        \
    else gt_store_kc(s, regs, GT_BM, tid);                                                   \
  } while (0)
#define GT_FETCH_B(regs, k0)                                                                 \
  do {                                                                                       \
    if (GT_TB) gt_fetch_kc(regs, GT_BN, B, bbase, ldb, n0, N, k0, K, GT_VEC_B, tid);         \
    else if (GT_RC4(GT_BN)) gt_fetch_rc4(regs, GT_BN, B, bbase, ldb, n0, N, k0, K, GT_VEC_B, tid); \
    else gt_fetch_rc(regs, GT_BN, B, bbase, ldb, n0, N, k0, K, GT_VEC_B, tid);               \
  } while (0)
#define GT_STORE_B(s, regs)                                                                  \
  do {                                                                                       \
    if (GT_TB) gt_store_kc(s, regs, GT_BN, tid);                                             \
    else if (GT_RC4(GT_BN)) gt_store_rc4(s, regs, GT_BN, tid);                               \
    else gt_store_rc(s, regs, GT_BN, tid);                                                   \
  } while (0)

/* Fragments of one 16-k plane: A rows rb .. rb + 15 of the slice, B rows (columns of op(B))
 * nb .. nb + 7: read as packed registers where the tiles have them, else by the loads. */
#if TILE_HAS_PACKED_REGS
inline tile_a gt_frag_a(__local const uint *plane, int rb, int lane)
{
  int g = tile_a_row(lane, 0), t = tile_a_col(lane, 0) >> 1; /* rows g, g + 8; uint t, t + 4 */
  uint2 lo = *(__local const uint2 *)(plane + GT_PHYS(rb + g) * 8 + 2 * t);
  uint2 hi = *(__local const uint2 *)(plane + GT_PHYS(rb + g + 8) * 8 + 2 * t);
  tile_a a;
  TILE_A_REG(a, 0) = lo.x, TILE_A_REG(a, 1) = hi.x, TILE_A_REG(a, 2) = lo.y, TILE_A_REG(a, 3) = hi.y;
  return a;
}
inline tile_b gt_frag_b(__local const uint *plane, int nb, int lane)
{
  uint2 v = *(__local const uint2 *)(plane + GT_PHYS(nb + tile_b_col(lane, 0)) * 8 + tile_b_row(lane, 0));
  tile_b b;
  TILE_B_REG(b, 0) = v.x, TILE_B_REG(b, 1) = v.y;
  return b;
}
#else
inline tile_a gt_frag_a(__local const uint *plane, int rb, int lane)
{
  return tile_load_a_bf16((__local const ushort *)plane + rb * 16, 16, lane);
}
inline tile_b gt_frag_b(__local const uint *plane, int nb, int lane)
{
  return tile_load_bt_bf16((__local const ushort *)plane + nb * 16, 16, lane);
}
#endif

__kernel __attribute__((reqd_work_group_size(GT_THREADS, 1, 1))) void
gemm_tile(int M, int N, int K, float alpha, float beta, __global const ushort *A, ulong aoff,
          int lda, ulong astride, __global const ushort *B, ulong boff, int ldb, ulong bstride,
          __global float *C, ulong coff, int ldc, ulong cstride, int flags)
{
  __local uint4 smem4[2 * GT_STAGE / 4]; /* two stages of [A slice | B slice] */
  __local uint *smem = (__local uint *)smem4;
  const int tid = (int)get_local_id(0), lane = tid & 31, warp = tid >> 5;
  const int3 blk = gemm_block(M, N, GT_BM, GT_BN, 8); /* bands of 8 block rows */
  const int batch = blk.x, m0 = blk.y, n0 = blk.z;
  const int wm = (warp / GT_WARPS_N) * GT_WTM, wn = (warp % GT_WARPS_N) * GT_WTN;
  const ulong abase = aoff + (ulong)batch * astride, bbase = boff + (ulong)batch * bstride;

  uint4 ra[GT_REGS(GT_BM)], rb[GT_REGS(GT_BN)];
  tile_c acc[GT_MT][GT_NT];
GT_UNROLL
  for (int i = 0; i < GT_MT; i++)
GT_UNROLL
    for (int j = 0; j < GT_NT; j++) acc[i][j] = tile_c_zero();

  const int nk = (K + GT_BK - 1) / GT_BK;
  if (nk > 0) {
    GT_FETCH_A(ra, 0);
    GT_FETCH_B(rb, 0);
    GT_STORE_A(smem, ra);
    GT_STORE_B(smem + GT_SLICE(GT_BM), rb);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int kt = 0; kt < nk; kt++) {
    __local const uint *sa = smem + (kt & 1) * GT_STAGE, *sb = sa + GT_SLICE(GT_BM);
    if (kt + 1 < nk) { /* next step's loads in flight during this step's products */
      GT_FETCH_A(ra, (kt + 1) * GT_BK);
      GT_FETCH_B(rb, (kt + 1) * GT_BK);
    }
GT_UNROLL
    for (int p = 0; p < 2; p++) {
      tile_a af[GT_MT];
GT_UNROLL
      for (int i = 0; i < GT_MT; i++) af[i] = gt_frag_a(sa + p * GT_BM * 8, wm + i * 16, lane);
GT_UNROLL
      for (int j = 0; j < GT_NT; j++) {
        tile_b bf = gt_frag_b(sb + p * GT_BN * 8, wn + j * 8, lane);
GT_UNROLL
        for (int i = 0; i < GT_MT; i++) tile_mma(&acc[i][j], af[i], bf);
      }
    }
    if (kt + 1 < nk) {
      __local uint *next = smem + ((kt + 1) & 1) * GT_STAGE;
      GT_STORE_A(next, ra);
      GT_STORE_B(next + GT_SLICE(GT_BM), rb);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  const ulong cbase = coff + (ulong)batch * cstride;
GT_UNROLL
  for (int i = 0; i < GT_MT; i++)
GT_UNROLL
    for (int j = 0; j < GT_NT; j++)
      gemm_store_tile(C, cbase, ldc, M, N, m0 + wm + i * 16, n0 + wn + j * 8, acc[i][j], alpha,
                      beta, GT_C_BF16, lane);
}

#endif /* CLMOE_TILE_CL */
