/* gemm_wgmma.cl: the bf16 tile GEMM on Hopper's warp-group matrix instructions,
 * built as "tile+gemm_common+gemm_wgmma". Same product and arguments as gemm_tile.cl and
 * gemm_async.cl:
 *
 *   C[b] = alpha op(A[b]) op(B[b]) + beta C[b]      (beta == 0: C is not read)
 *   A: [M, K] (GT_TA=0) or [K, M] (GT_TA=1), B: [K, N] (GT_TB=0) or [N, K] (GT_TB=1), bf16
 *   as ushort; C: [M, N] fp32 (or bf16 with GT_C_BF16=1); offsets, row strides and batch
 *   strides of A and B multiples of 8 elements (16-byte copies; the host checks).
 *
 * A work-group is GW_BM / 64 warp groups of 128 work-items (4 warps); warp group w computes
 * rows 64 w .. 64 w + 63 of the GW_BM x GW_BN block of C, GW_BN / 128 products of 64 x 128
 * per 16 k. With warp-group products (TILE_HAS_WARP_GROUP: sm_90a) each product is one wgmma.mma_async.m64n128k16 reading both
 * operands straight from local memory through matrix descriptors, so the operands never
 * pass through registers (mma.sync needs ldmatrix for every fragment: the limit of
 * gemm_async.cl); its accumulators (64 fp32 per work-item) stay in registers.
 *
 * Pipeline: GW_STAGES local buffers of GW_BK k; copies run GW_STAGES - 1 - GW_INFLIGHT
 * steps ahead (cp.async, 16 bytes, no registers), and each warp group keeps GW_INFLIGHT
 * (0 or 1) groups of products in flight across the barrier, so the matrix unit has work
 * while the next step's copies are issued. One barrier per step.
 *
 * Local layouts are the hardware's swizzled canonical layouts (the descriptors name them):
 *   k contiguous (A, or B when transposed: "K-major"): R rows of GW_BK bf16 (32, 64 or 128
 *     bytes); 16-byte chunk c of row r at c ^ (r / (8 / chunks per row)): the 32, 64 and
 *     128-byte swizzles, descriptor stride 8 rows;
 *   rows of M or N contiguous ("MN-major"): blocks of 64 columns, each GW_BK rows of k by
 *     128 bytes, chunk c of row k at c ^ (k % 8): the 128-byte swizzle; leading offset = one
 *     block, stride offset = 8 k rows.
 * Both need the stage buffers aligned to 1024 bytes. The portable tiles compute the same
 * products element by element from the same layouts (so CI runs the addressing on PoCL).
 * Ragged M, N, K: copies past an edge are zero-filled; stores past an edge are skipped. */
#ifdef CLMOE_TILE_CL

#ifndef GW_BM
#define GW_BM 128
#endif
#ifndef GW_BN
#define GW_BN 128
#endif
#ifndef GW_BK
#define GW_BK 16
#endif
#ifndef GW_STAGES
#define GW_STAGES 6
#endif
#ifndef GW_INFLIGHT
#define GW_INFLIGHT 1
#endif
#ifndef GW_BAND
#define GW_BAND 8 /* block rows per band of the launch order */
#endif
#if TILE_HAS_WARP_GROUP && (!defined(GT_TA) || !defined(GT_TB))
#error "gemm_wgmma: with warp-group products the transposes are immediates: build with -DGT_TA=0|1 -DGT_TB=0|1"
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
#define GW_WGS (GW_BM / 64)             /* warp groups */
#define GW_THREADS (GW_WGS * 128)
#define GW_NI (GW_BN / 128)             /* 64 x 128 products per warp group and 16 k */
#define GW_CPR (GW_BK / 8)              /* 16-byte chunks per K-major row */
#define GW_AHEAD (GW_STAGES - 1 - GW_INFLIGHT) /* steps whose copies are in flight */
#define GW_SLICE(R) ((R) * GW_BK)       /* ushorts of an R-row slice */
#define GW_STAGE (GW_SLICE(GW_BM) + GW_SLICE(GW_BN))
#define GW_CHUNKS(R) ((R) * GW_BK / 8)
#if GW_BM % 64 || GW_BN % 128 || GW_BM > 256 || GW_BN > 256 || (GW_BK != 16 && GW_BK != 32 && GW_BK != 64) || \
    GW_INFLIGHT < 0 || GW_INFLIGHT > 1 || GW_AHEAD < 1 || GW_AHEAD > 5 || GW_CHUNKS(GW_BM) % GW_THREADS || \
    GW_CHUNKS(GW_BN) % GW_THREADS
#error "gemm_wgmma: unsupported block shape"
#endif

#define GW_UNROLL TILE_UNROLL

/* Element offsets (ushort) in a slice: K-major row r, k; MN-major k, column r. */
inline int gw_kc(int r, int k)
{
  return r * GW_BK + ((((k >> 3) ^ (r / (8 / GW_CPR))) & (GW_CPR - 1)) << 3) + (k & 7);
}
inline int gw_mn(int k, int r)
{
  return (r >> 6) * (GW_BK * 64) + k * 64 + ((((r >> 3) & 7) ^ (k & 7)) << 3) + (r & 7);
}

/* The copies of one slice: rows r0.. of x (rows valid), k0.. (K valid); gemm_common.cl. */
#define GW_MN_AT(R, k, r) gw_mn(k, r)
GEMM_COPY_LOOPS(gw_copy_kc, gw_copy_mn, GW_THREADS, GW_CPR, GW_CHUNKS, GW_UNROLL, gw_kc, GW_MN_AT)

#if TILE_HAS_WARP_GROUP
#if GT_TB
#define GW_TNSP_B 0 /* B [N, K]: K-major */
#else
#define GW_TNSP_B 1 /* B [K, N]: N-major */
#endif
#define GW_STR_(x) #x
#define GW_STR(x) GW_STR_(x)
#define GW_KC_SWIZZLE (GW_BK == 16 ? 3u : GW_BK == 32 ? 2u : 1u)
/* Descriptors of the operands of product (h: 16-k step of the stage, rows r0 of A for the
 * warp group, columns n0 of B). */
inline ulong gw_desc_a(__local const ushort *st, int r0, int h)
{
  if (GT_TA) return tile_wg_desc(st + gw_mn(16 * h, r0), GW_BK * 128, 1024, 1u);
  return tile_wg_desc(st + r0 * GW_BK + 16 * h, 16, 16 * GW_BK, GW_KC_SWIZZLE);
}
inline ulong gw_desc_b(__local const ushort *st, int n0, int h)
{
  st += GW_SLICE(GW_BM);
  if (GT_TB) return tile_wg_desc(st + n0 * GW_BK + 16 * h, 16, 16 * GW_BK, GW_KC_SWIZZLE);
  return tile_wg_desc(st + gw_mn(16 * h, n0), GW_BK * 128, 1024, 1u);
}
/* d (16 tiles of 8 columns) += A (64 x 16) B (16 x 128), issued asynchronously for the warp
 * group; d is the warp's 16 rows as mma.sync's tile_c for 16 column tiles. Transposes: A
 * M-major when GT_TA; B N-major unless GT_TB. */
inline void gw_mma(tile_c *d, ulong da, ulong db)
{
  asm volatile(TILE_WG_MARK "{\n" TILE_WG_MARK ".reg .pred p;\n" TILE_WG_MARK "setp.ne.b32 p, %66, 0;\n"
               TILE_WG_MARK "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" TILE_WG_R64 "}, "
               "%64, %65, p, 1, 1, " GW_STR(GT_TA) ", " GW_STR(GW_TNSP_B) ";\n" TILE_WG_MARK "}"
               : TILE_WG_C16(d)
               : "l"(da), "l"(db), "r"(1));
}
#define GW_MMA(d, st, r0, n0, h, lane, flags) gw_mma(d, gw_desc_a(st, r0, h), gw_desc_b(st, n0, h))
#else
inline float gw_a_at(__local const ushort *s, int r, int k, int flags)
{
  return bf16_to_f32(GT_TA ? s[gw_mn(k, r)] : s[gw_kc(r, k)]);
}
inline float gw_b_at(__local const ushort *s, int k, int n, int flags)
{
  s += GW_SLICE(GW_BM);
  return bf16_to_f32(GT_TB ? s[gw_kc(n, k)] : s[gw_mn(k, n)]);
}
/* The same 64 x 128 x 16 product, each work-item its own 16 tiles (rows of its warp
 * r0 + 16 warp + ..., the map of gw_mma). */
inline void gw_mma_portable(tile_c *d, __local const ushort *st, int r0, int n0, int h, int lid, int flags)
{
  int lane = lid & 31, row = r0 + 16 * ((lid >> 5) & 3);
  for (int j = 0; j < 16; j++)
    for (int i = 0; i < TILE_C_NE; i++) {
      int r = row + tile_c_row(lane, i), n = n0 + 8 * j + tile_c_col(lane, i);
      float s = TILE_C_AT(d[j], i);
      for (int k = 0; k < 16; k++) s += gw_a_at(st, r, 16 * h + k, flags) * gw_b_at(st, 16 * h + k, n, flags);
      TILE_C_AT(d[j], i) = s;
    }
}
#define GW_MMA(d, st, r0, n0, h, lid, flags) gw_mma_portable(d, st, r0, n0, h, lid, flags)
#endif

/* Before step kt: this work-item's copies for it have landed (GW_AHEAD - 1 younger groups
 * may still be in flight). */
#if GW_AHEAD == 1
#define GW_WAIT_COPY() TILE_CP_WAIT(0)
#elif GW_AHEAD == 2
#define GW_WAIT_COPY() TILE_CP_WAIT(1)
#elif GW_AHEAD == 3
#define GW_WAIT_COPY() TILE_CP_WAIT(2)
#elif GW_AHEAD == 4
#define GW_WAIT_COPY() TILE_CP_WAIT(3)
#else
#define GW_WAIT_COPY() TILE_CP_WAIT(4)
#endif
#if GW_INFLIGHT
#define GW_WAIT_STEP() TILE_WG_WAIT(1)
#else
#define GW_WAIT_STEP() TILE_WG_WAIT(0)
#endif

__kernel __attribute__((reqd_work_group_size(GW_THREADS, 1, 1))) void
gemm_wgmma(int M, int N, int K, float alpha, float beta, __global const ushort *A, ulong aoff,
           int lda, ulong astride, __global const ushort *B, ulong boff, int ldb, ulong bstride,
           __global float *C, ulong coff, int ldc, ulong cstride, int flags)
{
  __local uint4 smem4[GW_STAGES * GW_STAGE / 8] __attribute__((aligned(1024)));
  __local ushort *smem = (__local ushort *)smem4;
  const int tid = (int)get_local_id(0), lane = tid & 31, wg = tid >> 7;
  const int3 blk = gemm_block(M, N, GW_BM, GW_BN, GW_BAND);
  const int batch = blk.x, m0 = blk.y, n0 = blk.z;
  const ulong abase = aoff + (ulong)batch * astride, bbase = boff + (ulong)batch * bstride;

  tile_c acc[GW_NI][16];
GW_UNROLL
  for (int i = 0; i < GW_NI; i++)
GW_UNROLL
    for (int j = 0; j < 16; j++) acc[i][j] = tile_c_zero();

  const int nk = (K + GW_BK - 1) / GW_BK;
#define GW_ISSUE(step)                                                                         \
  do {                                                                                         \
    __local ushort *st_ = smem + ((step) % GW_STAGES) * GW_STAGE;                              \
    int k0_ = (step) * GW_BK;                                                                  \
    if (GT_TA) gw_copy_mn(st_, GW_BM, A, abase, lda, m0, M, k0_, K, tid);                      \
    else gw_copy_kc(st_, GW_BM, A, abase, lda, m0, M, k0_, K, tid);                            \
    if (GT_TB) gw_copy_kc(st_ + GW_SLICE(GW_BM), GW_BN, B, bbase, ldb, n0, N, k0_, K, tid);    \
    else gw_copy_mn(st_ + GW_SLICE(GW_BM), GW_BN, B, bbase, ldb, n0, N, k0_, K, tid);          \
  } while (0)
  for (int s = 0; s < GW_AHEAD; s++) {
    if (s < nk) GW_ISSUE(s);
    tile_cp_commit(); /* empty groups keep the count of groups per step fixed */
  }
  for (int kt = 0; kt < nk; kt++) {
    GW_WAIT_COPY();
    tile_wg_proxy_fence();
    /* Everyone's copies of step kt have landed; every warp group's products of step
     * kt - 1 - GW_INFLIGHT are done (waited for last step), so that buffer is free. */
    barrier(CLK_LOCAL_MEM_FENCE);
    if (kt + GW_AHEAD < nk) GW_ISSUE(kt + GW_AHEAD);
    tile_cp_commit();
    __local const ushort *st = smem + (kt % GW_STAGES) * GW_STAGE;
    tile_wg_fence();
GW_UNROLL
    for (int h = 0; h < GW_BK / 16; h++)
GW_UNROLL
      for (int i = 0; i < GW_NI; i++) GW_MMA(acc[i], st, 64 * wg, 128 * i, h, tid, flags);
    tile_wg_commit();
    GW_WAIT_STEP();
  }
#undef GW_ISSUE
  TILE_WG_WAIT(0);
GW_UNROLL
  for (int i = 0; i < GW_NI; i++) tile_wg_pin16(acc[i]);

  const ulong cbase = coff + (ulong)batch * cstride;
  const int rw = m0 + 64 * wg + 16 * ((tid >> 5) & 3);
GW_UNROLL
  for (int i = 0; i < GW_NI; i++)
GW_UNROLL
    for (int j = 0; j < 16; j++)
      gemm_store_tile(C, cbase, ldc, M, N, rw, n0 + 128 * i + 8 * j, acc[i][j], alpha, beta,
                      GT_C_BF16, lane);
}

#endif /* CLMOE_TILE_CL */
