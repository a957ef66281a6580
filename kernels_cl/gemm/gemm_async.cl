/* gemm_async.cl: the bf16 tile GEMM with a multi-stage asynchronous pipeline,
 * built as "tile+gemm_common+gemm_async". Same product and arguments as gemm_tile.cl:
 *
 *   C[b] = alpha op(A[b]) op(B[b]) + beta C[b]      (beta == 0: C is not read)
 *   A: [M, K] (GT_TA=0) or [K, M] (GT_TA=1), B: [K, N] (GT_TB=0) or [N, K] (GT_TB=1), bf16
 *   as ushort; C: [M, N] fp32 (or bf16 with GT_C_BF16=1); offsets, row strides and batch
 *   strides of A and B multiples of 8 elements (16-byte copies; the host checks).
 *
 * K advances in steps of GA_BK through GA_STAGES local buffers: slices for GA_STAGES - 1 steps
 * ahead are in flight as asynchronous 16-byte copies (tile_cp16: cp.async on NVIDIA, no registers, no
 * stores by the work-items) while the current step is multiplied; one barrier per step.
 * Each slice keeps its global layout (no transposes on the way):
 *   "kc" (k contiguous: A, or B when transposed): R rows of GA_BK k (32 or 16: 64 or 32
 *        bytes); the 16-byte chunk c of row r sits at chunk c ^ ((r >> 1) & 3) (or, for 16
 *        k, c ^ ((r >> 2) & 1)), so that the 8 rows an ldmatrix reads are 8 different bank
 *        groups;
 *   "rc" (rows of M or N contiguous): GA_BK k rows of R elements; chunk c of row k at
 *        c ^ (k & 7); fragments come from ldmatrix.trans.
 * Fragments are read with ldmatrix.x4 (one per 16 x 16 A tile or per two 8-column B tiles)
 * where the tiles have matrix loads; the portable tiles read the same layout element by element, so CI runs the
 * addressing on PoCL. Ragged M, N, K: copies past an edge are zero-filled; stores past an
 * edge are skipped. */
#ifdef CLMOE_TILE_CL

#ifndef GA_BM
#define GA_BM 128
#endif
#ifndef GA_BN
#define GA_BN 128
#endif
#ifndef GA_WARPS_M
#define GA_WARPS_M 2
#endif
#ifndef GA_WARPS_N
#define GA_WARPS_N 2
#endif
#ifndef GA_STAGES
#define GA_STAGES 3
#endif
#ifndef GT_TA
#define GT_TA (flags & 1)
#endif
#ifndef GT_TB
#define GT_TB ((flags >> 1) & 1)
#endif
#ifndef GT_C_BF16
#define GT_C_BF16 ((flags >> 4) & 1)
#endif
#ifndef GA_PRELOAD
#define GA_PRELOAD 0
#endif
#ifndef GA_BAND
#define GA_BAND 8 /* block rows per band of the launch order */
#endif
#ifndef GA_BK
#define GA_BK 32 /* k per stage: 32, or 16 (more, smaller stages in the same local memory) */
#endif
#define GA_CPR (GA_BK / 8) /* 16-byte chunks per kc row */
#define GA_NH (GA_BK / 16) /* 16-k halves per stage */
#define GA_THREADS (GA_WARPS_M * GA_WARPS_N * 32)
#define GA_WTM (GA_BM / GA_WARPS_M)
#define GA_WTN (GA_BN / GA_WARPS_N)
#define GA_MT (GA_WTM / 16)
#define GA_NT (GA_WTN / 8)
#define GA_SLICE(R) ((R) * GA_BK)  /* ushorts of an R-row slice */
#define GA_STAGE (GA_SLICE(GA_BM) + GA_SLICE(GA_BN))
#define GA_CHUNKS(R) ((R) * GA_BK / 8) /* 16-byte chunks of a slice */
#if GA_WTM % 16 || GA_WTN % 16 || GA_CHUNKS(GA_BM) % GA_THREADS || GA_CHUNKS(GA_BN) % GA_THREADS || \
    GA_BM < 64 || GA_BN < 64 || GA_STAGES < 2 || GA_STAGES > 6 || (GA_BK != 16 && GA_BK != 32)
#error "gemm_async: unsupported block shape"
#endif

#define GA_UNROLL TILE_UNROLL

/* Element offsets (ushort) in a slice. */
inline int ga_kc(int r, int k)
{
  return r * GA_BK + ((((k >> 3) ^ (r / (8 / GA_CPR))) & (GA_CPR - 1)) << 3) + (k & 7);
}
inline int ga_rc(int R, int k, int r) { return k * R + ((((r >> 3) ^ k) & 7) | ((r >> 3) & ~7)) * 8 + (r & 7); }

/* The copies of one slice: rows r0.. of x (rows valid), k0.. (K valid); gemm_common.cl. */
GEMM_COPY_LOOPS(ga_copy_kc, ga_copy_rc, GA_THREADS, GA_CPR, GA_CHUNKS, GA_UNROLL, ga_kc, ga_rc)

/* Fragments of the 16-k half h of a stage: A rows rb..rb+15; B columns nb..nb+15 (two
 * tiles). ga_off_* give a lane's element offset in a stage (computed once, before the K
 * loop); ga_ld_* read at it (matrix loads where the tiles have them, else element by element). */
#if TILE_HAS_MATRIX_LOAD && TILE_HAS_PACKED_REGS
/* (the lane's matrix-load row r of matrix m: lo = 8 (m % 2), hi = 8 (m / 2)) */
inline int ga_off_a(int rb, int h, int lane)
{
  const int r = tile_ldsm_row(lane), lo = (tile_ldsm_mat(lane) & 1) << 3, hi = (tile_ldsm_mat(lane) >> 1) << 3;
  if (GT_TA) return ga_rc(GA_BM, 16 * h + r + hi, rb + lo);
  return ga_kc(rb + r + lo, 16 * h + hi);
}
inline int ga_off_b(int nb, int h, int lane)
{
  const int r = tile_ldsm_row(lane), lo = (tile_ldsm_mat(lane) & 1) << 3, hi = (tile_ldsm_mat(lane) >> 1) << 3;
  if (GT_TB) return GA_SLICE(GA_BM) + ga_kc(nb + r + hi, 16 * h + lo);
  return GA_SLICE(GA_BM) + ga_rc(GA_BN, 16 * h + r + lo, nb + hi);
}
inline tile_a ga_ld_a(__local const ushort *p)
{
  uint4 v = GT_TA ? tile_ldsm_x4_trans(p) : tile_ldsm_x4(p);
  tile_a a;
  TILE_A_REG(a, 0) = v.x, TILE_A_REG(a, 1) = v.y, TILE_A_REG(a, 2) = v.z, TILE_A_REG(a, 3) = v.w;
  return a;
}
inline void ga_ld_b(__local const ushort *p, tile_b *b0, tile_b *b1)
{
  uint4 v = GT_TB ? tile_ldsm_x4(p) : tile_ldsm_x4_trans(p);
  TILE_B_REG(*b0, 0) = v.x, TILE_B_REG(*b0, 1) = v.y, TILE_B_REG(*b1, 0) = v.z, TILE_B_REG(*b1, 1) = v.w;
}
#define GA_LD_A(stage, off) ga_ld_a((stage) + (off))
#define GA_LD_B(stage, off, b0, b1) ga_ld_b((stage) + (off), b0, b1)
#else
inline float ga_a_at(__local const ushort *s, int r, int k, int flags)
{
  return bf16_to_f32(GT_TA ? s[ga_rc(GA_BM, k, r)] : s[ga_kc(r, k)]);
}
inline float ga_b_at(__local const ushort *s, int k, int n, int flags)
{
  return bf16_to_f32(GT_TB ? s[ga_kc(n, k)] : s[ga_rc(GA_BN, k, n)]);
}
inline tile_a ga_frag_a(__local const ushort *s, int rb, int h, int lane, int flags)
{
  tile_a a;
  for (int i = 0; i < TILE_A_NE; i++)
    TILE_A_AT(a, i) = ga_a_at(s, rb + tile_a_row(lane, i), 16 * h + tile_a_col(lane, i), flags);
  return a;
}
inline tile_b ga_frag_b1(__local const ushort *s, int nb, int h, int lane, int flags)
{
  tile_b b;
  for (int i = 0; i < TILE_B_NE; i++)
    TILE_B_AT(b, i) = ga_b_at(s, 16 * h + tile_b_row(lane, i), nb + tile_b_col(lane, i), flags);
  return b;
}
/* Here an "offset" names the fragment: 2 rb + h (the stage pointer is the stage's start). */
#define ga_off_a(rb, h, lane) (2 * (rb) + (h))
#define ga_off_b(nb, h, lane) (2 * (nb) + (h))
#define GA_LD_A(stage, off) ga_frag_a(stage, (off) >> 1, (off) & 1, lane, flags)
#define GA_LD_B(stage, off, b0, b1)                                                            \
  (*(b0) = ga_frag_b1((stage) + GA_SLICE(GA_BM), (off) >> 1, (off) & 1, lane, flags),          \
   *(b1) = ga_frag_b1((stage) + GA_SLICE(GA_BM), ((off) >> 1) + 8, (off) & 1, lane, flags))
#endif

/* Before step kt: at most GA_STAGES - 2 younger groups may still be in flight. */
#if GA_STAGES == 2
#define GA_WAIT() TILE_CP_WAIT(0)
#elif GA_STAGES == 3
#define GA_WAIT() TILE_CP_WAIT(1)
#elif GA_STAGES == 4
#define GA_WAIT() TILE_CP_WAIT(2)
#elif GA_STAGES == 5
#define GA_WAIT() TILE_CP_WAIT(3)
#else
#define GA_WAIT() TILE_CP_WAIT(4)
#endif

__kernel __attribute__((reqd_work_group_size(GA_THREADS, 1, 1))) void
gemm_async(int M, int N, int K, float alpha, float beta, __global const ushort *A, ulong aoff,
           int lda, ulong astride, __global const ushort *B, ulong boff, int ldb, ulong bstride,
           __global float *C, ulong coff, int ldc, ulong cstride, int flags)
{
  __local uint4 smem4[GA_STAGES * GA_STAGE / 8];
  __local ushort *smem = (__local ushort *)smem4;
  const int tid = (int)get_local_id(0), lane = tid & 31, warp = tid >> 5;
  const int3 blk = gemm_block(M, N, GA_BM, GA_BN, GA_BAND);
  const int batch = blk.x, m0 = blk.y, n0 = blk.z;
  const int wm = (warp / GA_WARPS_N) * GA_WTM, wn = (warp % GA_WARPS_N) * GA_WTN;
  const ulong abase = aoff + (ulong)batch * astride, bbase = boff + (ulong)batch * bstride;

  tile_c acc[GA_MT][GA_NT];
GA_UNROLL
  for (int i = 0; i < GA_MT; i++)
GA_UNROLL
    for (int j = 0; j < GA_NT; j++) acc[i][j] = tile_c_zero();

  const int nk = (K + GA_BK - 1) / GA_BK;
#define GA_ISSUE(step)                                                                         \
  do {                                                                                         \
    __local ushort *st_ = smem + ((step) % GA_STAGES) * GA_STAGE;                              \
    int k0_ = (step) * GA_BK;                                                                  \
    if (GT_TA) ga_copy_rc(st_, GA_BM, A, abase, lda, m0, M, k0_, K, tid);                      \
    else ga_copy_kc(st_, GA_BM, A, abase, lda, m0, M, k0_, K, tid);                            \
    if (GT_TB) ga_copy_kc(st_ + GA_SLICE(GA_BM), GA_BN, B, bbase, ldb, n0, N, k0_, K, tid);    \
    else ga_copy_rc(st_ + GA_SLICE(GA_BM), GA_BN, B, bbase, ldb, n0, N, k0_, K, tid);          \
  } while (0)
  for (int s = 0; s < GA_STAGES - 1; s++) {
    if (s < nk) GA_ISSUE(s);
    tile_cp_commit(); /* empty groups keep the count of groups per step fixed */
  }
  int fa_off[GA_NH][GA_MT], fb_off[GA_NH][GA_NT / 2]; /* fragment offsets in a stage */
GA_UNROLL
  for (int h = 0; h < GA_NH; h++) {
GA_UNROLL
    for (int i = 0; i < GA_MT; i++) fa_off[h][i] = ga_off_a(wm + i * 16, h, lane);
GA_UNROLL
    for (int j = 0; j < GA_NT / 2; j++) fb_off[h][j] = ga_off_b(wn + j * 16, h, lane);
  }
  for (int kt = 0; kt < nk; kt++) {
    GA_WAIT(); /* this lane's copies of step kt have landed */
    barrier(CLK_LOCAL_MEM_FENCE); /* everyone's have; everyone is done with step kt - 1 */
    if (kt + GA_STAGES - 1 < nk) GA_ISSUE(kt + GA_STAGES - 1);
    tile_cp_commit();
    __local const ushort *st = smem + (kt % GA_STAGES) * GA_STAGE;
#if GA_PRELOAD
    /* Both halves' fragments first, then the products (more registers, more overlap). */
    tile_a af[GA_NH][GA_MT];
    tile_b bf[GA_NH][GA_NT];
GA_UNROLL
    for (int h = 0; h < GA_NH; h++) {
GA_UNROLL
      for (int i = 0; i < GA_MT; i++) af[h][i] = GA_LD_A(st, fa_off[h][i]);
GA_UNROLL
      for (int j = 0; j < GA_NT; j += 2) GA_LD_B(st, fb_off[h][j / 2], &bf[h][j], &bf[h][j + 1]);
    }
GA_UNROLL
    for (int h = 0; h < GA_NH; h++)
GA_UNROLL
      for (int j = 0; j < GA_NT; j++)
GA_UNROLL
        for (int i = 0; i < GA_MT; i++) tile_mma(&acc[i][j], af[h][i], bf[h][j]);
#else
GA_UNROLL
    for (int h = 0; h < GA_NH; h++) {
      tile_a af[GA_MT];
GA_UNROLL
      for (int i = 0; i < GA_MT; i++) af[i] = GA_LD_A(st, fa_off[h][i]);
GA_UNROLL
      for (int j = 0; j < GA_NT; j += 2) {
        tile_b b0, b1;
        GA_LD_B(st, fb_off[h][j / 2], &b0, &b1);
GA_UNROLL
        for (int i = 0; i < GA_MT; i++) {
          tile_mma(&acc[i][j], af[i], b0);
          tile_mma(&acc[i][j + 1], af[i], b1);
        }
      }
    }
#endif
  }
#undef GA_ISSUE

  const ulong cbase = coff + (ulong)batch * cstride;
GA_UNROLL
  for (int i = 0; i < GA_MT; i++)
GA_UNROLL
    for (int j = 0; j < GA_NT; j++)
      gemm_store_tile(C, cbase, ldc, M, N, m0 + wm + i * 16, n0 + wn + j * 8, acc[i][j], alpha,
                      beta, GT_C_BF16, lane);
}

#endif /* CLMOE_TILE_CL */
