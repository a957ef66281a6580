/* mla_tc_wgmma.cl: the MLA attention forward on Hopper's warp-group matrix instructions
 * (issue 9), built as "tile+mla+mla_tc+mla_tc_wgmma" with mla_tc.cl's options and
 * -DTC_WGMMA=1 (plus -DCLMOE_PTX_SM90A=1 under PTX: tile.cl's warp-group section). Same
 * arguments, tile table, results and lse as mla_tc_fwd; it takes bf16 storage whose
 * offsets and strides are multiples of 8 elements, Dn and Dr multiples of 8 and Dv = 128
 * (the host checks).
 *
 * Each 64-row half of the 128 (or 64) query rows is one warp group (4 warps, warp w of the
 * work-group owning rows 16 w .. 16 w + 15 as in mla_tc_fwd). Per block of TW_BK = 32 keys:
 *   S[64 x 32] = Q K^T: wgmma m64n32k16, Q from registers (this warp's fragments, loaded
 *     once), K from local memory through descriptors, DQP / 16 products;
 *   the softmax of mla_tc_fwd on S (tc_softmax_block: base 2, fp32 statistics), which
 *     also rescales O;
 *   O[64 x 128] += P V: wgmma m64n128k16, P from registers (S's accumulators rounded to
 *     bf16 are the A fragments), V from local memory, 2 products.
 * K and V blocks arrive by cp.async in TW_STAGES = 2 local stages (one barrier per block)
 * in the hardware's 128-byte-swizzled layout: columns in blocks of 64, each block TW_BK key
 * rows of 128 bytes, 16-byte chunk c of key r at c ^ (r % 8) (tw_off). That is K-major for
 * K (S's B operand, k = head dimension) and N-major for V (O's B operand, k = keys). The
 * portable tiles compute the same products with tile_mma from the same layouts. */
#if defined(TC_WGMMA) && TC_WGMMA && (!defined(TC_BWD) || !TC_BWD)
#define TW_BK 32                        /* keys per block */
#define TW_STAGES 2
#if !STORE_BF16 || DN % 8 || DR % 8 || DV != 128
#error "TC_WGMMA needs bf16 storage, Dn and Dr multiples of 8 and Dv = 128"
#endif
#define TW_NDB ((DQP + 63) / 64)        /* 64-column blocks of a K row */
#define TW_KBLK (TW_NDB * TW_BK * 64)   /* ushorts of a K block */
#define TW_VBLK (2 * TW_BK * 64)        /* ushorts of a V block (128 columns) */
#define TW_STAGE (TW_KBLK + TW_VBLK)
#define TW_NSN (TW_BK / 8)              /* 8-key tiles of S */
/* Q is staged 64 rows at a time through the same memory. */
#define TW_ELEMS (64 * KLD > TW_STAGES * TW_STAGE ? 64 * KLD : TW_STAGES * TW_STAGE)

/* Element (key r, column d) of a K or V block. */
inline int tw_off(int r, int d) { return (d >> 6) * (TW_BK * 64) + r * 64 + ((((d >> 3) & 7) ^ (r & 7)) << 3) + (d & 7); }

/* Issues the copies of keys kb .. kb + nk - 1 (nk <= TW_BK; the rest zero) into a stage. */
inline void tw_issue(__local ushort *st, int kb, int nk, __global const store_t *kn, ulong kno, uint kn_ts,
                     __global const store_t *kr, ulong kro, uint kr_ts, __global const store_t *v, ulong vo,
                     uint v_ts, int lid)
{
  for (int e = lid; e < TW_BK * TW_NDB * 8; e += TC_WG) {
    const int r = e / (TW_NDB * 8), d = 8 * (e % (TW_NDB * 8));
    const ulong row = (ulong)(kb + r);
    __global const store_t *src = kn;
    int bytes = 0;
    if (r < nk && d < DN) src = kn + kno + row * kn_ts + d, bytes = 16;
    else if (r < nk && d < DN + DR) src = kr + kro + row * kr_ts + (d - DN), bytes = 16;
    tile_cp16(st + tw_off(r, d), src, bytes);
  }
  __local ushort *vs = st + TW_KBLK;
  for (int e = lid; e < TW_BK * 16; e += TC_WG) {
    const int r = e / 16, d = 8 * (e % 16);
    const int ok = r < nk;
    tile_cp16(vs + tw_off(r, d), ok ? v + vo + (ulong)(kb + r) * v_ts + d : v, ok ? 16 : 0);
  }
}

#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
/* S[64 x 32] += Q (64 x 16, this warp's 16 rows in registers) K^T (keys K-major). */
inline void tw_mma_s(tile_c *d, tile_a a, ulong db)
{
  asm volatile(TILE_WG_MARK "{\n" TILE_WG_MARK ".reg .pred p;\n" TILE_WG_MARK "setp.ne.b32 p, %21, 0;\n"
               TILE_WG_MARK "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
               "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n" TILE_WG_MARK "}"
               : "+f"(d[0].v[0]), "+f"(d[0].v[1]), "+f"(d[0].v[2]), "+f"(d[0].v[3]), "+f"(d[1].v[0]), "+f"(d[1].v[1]),
                 "+f"(d[1].v[2]), "+f"(d[1].v[3]), "+f"(d[2].v[0]), "+f"(d[2].v[1]), "+f"(d[2].v[2]), "+f"(d[2].v[3]),
                 "+f"(d[3].v[0]), "+f"(d[3].v[1]), "+f"(d[3].v[2]), "+f"(d[3].v[3])
               : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "l"(db), "r"(1));
}
/* O[64 x 128] += P (64 x 16 keys, registers) V (16 keys x 128, N-major). */
inline void tw_mma_o(tile_c *d, tile_a a, ulong db)
{
  asm volatile(TILE_WG_MARK "{\n" TILE_WG_MARK ".reg .pred p;\n" TILE_WG_MARK "setp.ne.b32 p, %69, 0;\n"
               TILE_WG_MARK "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
               "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n" TILE_WG_MARK "}"
               : "+f"(d[0].v[0]), "+f"(d[0].v[1]), "+f"(d[0].v[2]), "+f"(d[0].v[3]), "+f"(d[1].v[0]), "+f"(d[1].v[1]),
                 "+f"(d[1].v[2]), "+f"(d[1].v[3]), "+f"(d[2].v[0]), "+f"(d[2].v[1]), "+f"(d[2].v[2]), "+f"(d[2].v[3]),
                 "+f"(d[3].v[0]), "+f"(d[3].v[1]), "+f"(d[3].v[2]), "+f"(d[3].v[3]), "+f"(d[4].v[0]), "+f"(d[4].v[1]),
                 "+f"(d[4].v[2]), "+f"(d[4].v[3]), "+f"(d[5].v[0]), "+f"(d[5].v[1]), "+f"(d[5].v[2]), "+f"(d[5].v[3]),
                 "+f"(d[6].v[0]), "+f"(d[6].v[1]), "+f"(d[6].v[2]), "+f"(d[6].v[3]), "+f"(d[7].v[0]), "+f"(d[7].v[1]),
                 "+f"(d[7].v[2]), "+f"(d[7].v[3]), "+f"(d[8].v[0]), "+f"(d[8].v[1]), "+f"(d[8].v[2]), "+f"(d[8].v[3]),
                 "+f"(d[9].v[0]), "+f"(d[9].v[1]), "+f"(d[9].v[2]), "+f"(d[9].v[3]), "+f"(d[10].v[0]), "+f"(d[10].v[1]),
                 "+f"(d[10].v[2]), "+f"(d[10].v[3]), "+f"(d[11].v[0]), "+f"(d[11].v[1]), "+f"(d[11].v[2]), "+f"(d[11].v[3]),
                 "+f"(d[12].v[0]), "+f"(d[12].v[1]), "+f"(d[12].v[2]), "+f"(d[12].v[3]), "+f"(d[13].v[0]), "+f"(d[13].v[1]),
                 "+f"(d[13].v[2]), "+f"(d[13].v[3]), "+f"(d[14].v[0]), "+f"(d[14].v[1]), "+f"(d[14].v[2]), "+f"(d[14].v[3]),
                 "+f"(d[15].v[0]), "+f"(d[15].v[1]), "+f"(d[15].v[2]), "+f"(d[15].v[3])
               : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "l"(db), "r"(1));
}
/* Pin accumulators after a wait (later uses may not move above it). */
inline void tw_pin_s(tile_c *d)
{
  asm volatile(""
               : "+f"(d[0].v[0]), "+f"(d[0].v[1]), "+f"(d[0].v[2]), "+f"(d[0].v[3]), "+f"(d[1].v[0]), "+f"(d[1].v[1]),
                 "+f"(d[1].v[2]), "+f"(d[1].v[3]), "+f"(d[2].v[0]), "+f"(d[2].v[1]), "+f"(d[2].v[2]), "+f"(d[2].v[3]),
                 "+f"(d[3].v[0]), "+f"(d[3].v[1]), "+f"(d[3].v[2]), "+f"(d[3].v[3])
               :: "memory");
}

inline void tw_pin_o(tile_c *d)
{
  asm volatile(""
               : "+f"(d[0].v[0]), "+f"(d[0].v[1]), "+f"(d[0].v[2]), "+f"(d[0].v[3]), "+f"(d[1].v[0]), "+f"(d[1].v[1]),
                 "+f"(d[1].v[2]), "+f"(d[1].v[3]), "+f"(d[2].v[0]), "+f"(d[2].v[1]), "+f"(d[2].v[2]), "+f"(d[2].v[3]),
                 "+f"(d[3].v[0]), "+f"(d[3].v[1]), "+f"(d[3].v[2]), "+f"(d[3].v[3]), "+f"(d[4].v[0]), "+f"(d[4].v[1]),
                 "+f"(d[4].v[2]), "+f"(d[4].v[3]), "+f"(d[5].v[0]), "+f"(d[5].v[1]), "+f"(d[5].v[2]), "+f"(d[5].v[3]),
                 "+f"(d[6].v[0]), "+f"(d[6].v[1]), "+f"(d[6].v[2]), "+f"(d[6].v[3]), "+f"(d[7].v[0]), "+f"(d[7].v[1]),
                 "+f"(d[7].v[2]), "+f"(d[7].v[3]), "+f"(d[8].v[0]), "+f"(d[8].v[1]), "+f"(d[8].v[2]), "+f"(d[8].v[3]),
                 "+f"(d[9].v[0]), "+f"(d[9].v[1]), "+f"(d[9].v[2]), "+f"(d[9].v[3]), "+f"(d[10].v[0]), "+f"(d[10].v[1]),
                 "+f"(d[10].v[2]), "+f"(d[10].v[3]), "+f"(d[11].v[0]), "+f"(d[11].v[1]), "+f"(d[11].v[2]), "+f"(d[11].v[3]),
                 "+f"(d[12].v[0]), "+f"(d[12].v[1]), "+f"(d[12].v[2]), "+f"(d[12].v[3]), "+f"(d[13].v[0]), "+f"(d[13].v[1]),
                 "+f"(d[13].v[2]), "+f"(d[13].v[3]), "+f"(d[14].v[0]), "+f"(d[14].v[1]), "+f"(d[14].v[2]), "+f"(d[14].v[3]),
                 "+f"(d[15].v[0]), "+f"(d[15].v[1]), "+f"(d[15].v[2]), "+f"(d[15].v[3])
               :: "memory");
}
/* Descriptors: K for head-dimension step ks (K-major, stride 8 keys); V for keys 16 kk ..
 * (N-major, leading offset one 64-column block, stride 8 keys). */
#define TW_DESC_K(ks_, kstep) tile_wg_desc((ks_) + ((kstep) >> 2) * (TW_BK * 64) + ((kstep) & 3) * 16, 16, 1024, 1u)
#define TW_DESC_V(vs_, kk) tile_wg_desc((vs_) + (kk) * 16 * 64, TW_BK * 128, 1024, 1u)
#define TW_S(s, qf, ks_, kstep, lane) tw_mma_s(s, qf, TW_DESC_K(ks_, kstep))
#define TW_O(acc, pa, vs_, kk, lane) tw_mma_o(acc, pa, TW_DESC_V(vs_, kk))
#else
inline void tw_s_portable(tile_c *s, tile_a qf, __local const ushort *ks, int kstep, int lane)
{
  for (int n = 0; n < TW_NSN; n++) {
    const int key = 8 * n + tile_c_col(lane, 0);
    tile_b b;
    for (int k = 0; k < 16; k++) {
      b.c[0][k] = bf16_to_f32(ks[tw_off(key, 16 * kstep + k)]);
      b.c[1][k] = bf16_to_f32(ks[tw_off(key + 1, 16 * kstep + k)]);
    }
    tile_mma(&s[n], qf, b);
  }
}
inline void tw_o_portable(tile_c *acc, tile_a pa, __local const ushort *vs, int kk, int lane)
{
  for (int j = 0; j < 16; j++) {
    const int col = 8 * j + tile_c_col(lane, 0);
    tile_b b;
    for (int k = 0; k < 16; k++) {
      b.c[0][k] = bf16_to_f32(vs[tw_off(16 * kk + k, col)]);
      b.c[1][k] = bf16_to_f32(vs[tw_off(16 * kk + k, col + 1)]);
    }
    tile_mma(&acc[j], pa, b);
  }
}
#define TW_S(s, qf, ks_, kstep, lane) tw_s_portable(s, qf, ks_, kstep, lane)
#define TW_O(acc, pa, vs_, kk, lane) tw_o_portable(acc, pa, vs_, kk, lane)
#define tw_pin_s(s) ((void)0)
#define tw_pin_o(acc) ((void)0)
#endif

__kernel __attribute__((reqd_work_group_size(TC_WG, 1, 1)))
void mla_tc_fwd_wgmma(__global const store_t *q, ulong qo, uint q_ts, uint q_hs,
                      __global const store_t *kn, ulong kno, uint kn_ts, uint kn_hs,
                      __global const store_t *kr, ulong kro, uint kr_ts,
                      __global const store_t *v, ulong vo, uint v_ts, uint v_hs,
                      __global const int4 *tiles, int ntiles, int H, float sl2,
                      __global out_t *o, ulong oo, __global float *lse, ulong lo, int has_lse)
{
  __local uint4 sm4[(TW_ELEMS + 7) / 8] __attribute__((aligned(1024)));
  __local ushort *sm = (__local ushort *)sm4;
  __local float2 red[TC_WG];          /* portable quad reductions (unused under PTX) */
#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
  __local float *pscr = NULL;
#else
  __local float pscr_all[TC_NW * 256]; /* portable P scratch, 16 x 16 fp32 per warp */
#endif
  const int lid = (int)get_local_id(0), w = lid / 32, lane = lid % 32;
  const int g = lane >> 2;
#if !(defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX)
  __local float *pscr = pscr_all + 256 * w;
#endif
  const int4 tl = tiles[ntiles - 1 - (int)get_group_id(0)]; /* longest tiles first */
  const int h = (int)get_group_id(1);
  const int s0 = tl.x, t0 = tl.y, rows = tl.z, shift = tl.w, kend = t0 + rows + shift;
  __local float2 *wred = red + 32 * w;
  const ulong kno_h = kno + (ulong)h * kn_hs, vo_h = vo + (ulong)h * v_hs;

  /* Q fragments, 64 rows at a time through local memory (mla_tc.cl's staging). */
  tile_a qf[NKS];
  for (int c = 0; c < TC_BQ; c += 64) {
    tc_stage(sm, KLD, DQP, t0 + c, min(64, rows - c), q, qo + (ulong)h * q_hs, q_ts, DQK, q, 0, 0, 0, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (16 * w >= c && 16 * w < c + 64) {
      TC_UNROLL
      for (int ks = 0; ks < NKS; ks++) qf[ks] = tile_load_a_bf16(sm + (16 * w - c) * KLD + 16 * ks, KLD, lane);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  const int qp0 = t0 + 16 * w + g + shift, qp1 = qp0 + 8;
  const int wq_first = t0 + 16 * w + shift;
  const int grp_last = t0 + 64 * (w / 4) + 63 + shift; /* last query of this warp group */
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  tile_c acc[NON];
  TC_UNROLL
  for (int j = 0; j < NON; j++) acc[j] = tile_c_zero();

  const int nblocks = (kend - s0 + TW_BK - 1) / TW_BK;
  if (nblocks > 0) tw_issue(sm, s0, min(TW_BK, kend - s0), kn, kno_h, kn_ts, kr, kro, kr_ts, v, vo_h, v_ts, lid);
  tile_cp_commit();
  for (int b = 0; b < nblocks; b++) {
    const int kb = s0 + b * TW_BK, kn0 = kb + TW_BK;
    TILE_CP_WAIT(0);
    tile_wg_proxy_fence();
    barrier(CLK_LOCAL_MEM_FENCE); /* block b is in; everyone is done with block b - 1 */
    if (b + 1 < nblocks)
      tw_issue(sm + ((b + 1) % TW_STAGES) * TW_STAGE, kn0, min(TW_BK, kend - kn0), kn, kno_h, kn_ts, kr, kro, kr_ts,
               v, vo_h, v_ts, lid);
    tile_cp_commit();
    __local const ushort *ks = sm + (b % TW_STAGES) * TW_STAGE, *vs = ks + TW_KBLK;
#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
    if (kb > grp_last) continue; /* the warp group's rows all precede the block */
#endif
    tile_c s[TW_NSN];
    TC_UNROLL
    for (int n = 0; n < TW_NSN; n++) s[n] = tile_c_zero();
    tile_wg_fence();
    TC_UNROLL
    for (int kstep = 0; kstep < NKS; kstep++) TW_S(s, qf[kstep], ks, kstep, lane);
    tile_wg_commit();
    TILE_WG_WAIT(0);
    tw_pin_s(s);
    tc_softmax_block(s, TW_NSN, acc, NON, kb, kb + TW_BK - 1 > wq_first, sl2, qp0, qp1, &m0, &m1, &l0, &l1, wred,
                     lane);
    tile_a pa[TW_BK / 16];
    TC_UNROLL
    for (int kk = 0; kk < TW_BK / 16; kk++) pa[kk] = TC_A_FROM_C(s[2 * kk], s[2 * kk + 1], pscr, lane);
    tile_wg_fence();
    TC_UNROLL
    for (int kk = 0; kk < TW_BK / 16; kk++) TW_O(acc, pa[kk], vs, kk, lane);
    tile_wg_commit();
    TILE_WG_WAIT(0);
    tw_pin_o(acc);
  }

  tc_store_rows(acc, m0, m1, l0, l1, w, lane, t0, rows, H, h, o, oo, lse, lo, has_lse, wred);
}
#endif
