/* mla_tile_wgmma.cl: the MLA attention forward on Hopper's warp-group matrix instructions,
 * built as "tile+mla_layout+mla+mla_tile+mla_tile_wgmma" with mla_tile.cl's options and
 * -DMT_WGMMA=1 (plus -DCLMOE_PTX_SM90A=1 with warp-group products: tile_nv_mma.cl's warp-group section). Same
 * arguments, tile table, results and lse as mla_tile_fwd; it takes bf16 storage whose
 * offsets and strides are multiples of 8 elements, Dn and Dr multiples of 8 and Dv = 128
 * (the host checks).
 *
 * Each 64-row half of the 128 (or 64) query rows is one warp group (4 warps, warp w of the
 * work-group owning rows 16 w .. 16 w + 15 as in mla_tile_fwd). Per block of TW_BK keys
 * (32 or 64):
 *   S[64 x TW_BK] = Q K^T: DQP / 16 wgmma m64nTW_BKk16, Q from registers (this warp's
 *     fragments, loaded once), K from local memory through descriptors;
 *   the online softmax (mt_softmax_p, mt_rescale in mla_tile.cl: base 2, fp32 statistics);
 *   O[64 x 128] += P V: TW_BK / 16 wgmma m64n128k16, P from S's accumulators rounded to
 *     bf16 (they are the A fragments), V from local memory.
 * Block j's S is issued together with block j - 1's P V, and the softmax of block j runs
 * while that P V is still on the matrix unit (the intra-warp-group overlap of
 * FlashAttention-3; 5-7% over issuing them in turn on the H200); O is rescaled after it
 * lands. With TW_PP (128-row tiles with warp-group products) the two warp groups take turns: one's
 * softmax runs while the other's products do (FlashAttention-3's ping-pong; 10% on the
 * H200). K and V blocks arrive by cp.async TW_AHEAD blocks ahead into rings of TW_AHEAD + 1
 * K buffers and TW_AHEAD + 2 + TW_PP V buffers (a V block is read one block later, two
 * with turns); one barrier per block. Layout of a K or V block: the hardware's 128-byte swizzle, columns in blocks of
 * 64, each block TW_BK key rows of 128 bytes, 16-byte chunk c of key r at c ^ (r % 8)
 * (tw_off): K-major for K (S's B operand, k = head dimension), N-major for V (O's B
 * operand, k = keys). The portable tiles compute the same products with tile_mma from the
 * same layouts. The prologue is mla_tile.cl's MT_FWD_PROLOGUE, shared with
 * mla_tile_async.cl. */
#if defined(MT_WGMMA) && MT_WGMMA && (!defined(MT_BWD) || !MT_BWD)
#ifndef TW_BK
#define TW_BK 32                        /* keys per block: 32 or 64 */
#endif
#ifndef TW_AHEAD
#define TW_AHEAD 1                      /* blocks whose copies are in flight: 1 .. 3 */
#endif
#if !STORE_BF16 || DN % 8 || DR % 8 || DV != 128 || (TW_BK != 32 && TW_BK != 64) || TW_AHEAD < 1 || TW_AHEAD > 3
#error "MT_WGMMA needs bf16 storage, Dn and Dr multiples of 8, Dv = 128, TW_BK 32 or 64, TW_AHEAD 1 to 3"
#endif
#define TW_KBLK MLA_TILE_WGMMA_KBLK(DQK, TW_BK) /* ushorts of a K block (64-column blocks) */
#define TW_VBLK MLA_TILE_WGMMA_VBLK(TW_BK) /* ushorts of a V block (128 columns) */
#define TW_KST MLA_TILE_WGMMA_KST(TW_AHEAD)
#ifndef TW_PP
#define TW_PP 0                         /* 1: the two warp groups take turns (see the loop) */
#endif
#if TW_PP && MT_NW != 8
#error "TW_PP needs two warp groups (128-row tiles)"
#endif
#define TW_VST MLA_TILE_WGMMA_VST(TW_AHEAD, TW_PP)
#define TW_NSN (TW_BK / 8)              /* 8-key tiles of S */
/* Q is staged 64 rows at a time through the same memory. */
#define TW_ELEMS MLA_TILE_WGMMA_ELEMS(DQK, TW_BK, TW_AHEAD, TW_PP)
#if TW_AHEAD == 1
#define TW_WAIT_COPY() TILE_CP_WAIT(0)
#elif TW_AHEAD == 2
#define TW_WAIT_COPY() TILE_CP_WAIT(1)
#else
#define TW_WAIT_COPY() TILE_CP_WAIT(2)
#endif

/* Element (key r, column d) of a K or V block. */
inline int tw_off(int r, int d) { return (d >> 6) * (TW_BK * 64) + r * 64 + ((((d >> 3) & 7) ^ (r & 7)) << 3) + (d & 7); }

/* Issues the copies of keys kb .. kb + nk - 1 (nk <= TW_BK; the rest zero) into a K and a
 * V buffer: k_nope's, k_rope's and V's chunks in separate loops whose chunk counts are
 * build-time constants (no per-chunk source choice, divisions by constants), and zeros for
 * the columns from Dn + Dr up to the last 16-column k-step (the products read them). */
#define TW_CN (DN / 8)
#define TW_CR (DR / 8)
inline void tw_issue(__local ushort *kst, __local ushort *vst, int kb, int nk, __global const store_t *kn,
                     ulong kno, uint kn_ts, __global const store_t *kr, ulong kro, uint kr_ts,
                     __global const store_t *v, ulong vo, uint v_ts, int lid)
{
  MT_UNROLL
  for (int e = lid; e < TW_BK * TW_CN; e += MT_WG) {
    const int r = e / TW_CN, c = e - r * TW_CN, ok = r < nk;
    tile_cp16(kst + tw_off(r, 8 * c), ok ? kn + kno + (ulong)(kb + r) * kn_ts + 8 * c : kn, ok ? 16 : 0);
  }
  MT_UNROLL
  for (int e = lid; e < TW_BK * TW_CR; e += MT_WG) {
    const int r = e / TW_CR, c = e - r * TW_CR, ok = r < nk;
    tile_cp16(kst + tw_off(r, DN + 8 * c), ok ? kr + kro + (ulong)(kb + r) * kr_ts + 8 * c : kr, ok ? 16 : 0);
  }
#if DQP > DQK
  for (int e = lid; e < TW_BK * ((DQP - DQK) / 8); e += MT_WG)
    tile_cp16(kst + tw_off(e / ((DQP - DQK) / 8), DQK + 8 * (e % ((DQP - DQK) / 8))), kn, 0);
#endif
  MT_UNROLL
  for (int e = lid; e < TW_BK * 16; e += MT_WG) {
    const int r = e >> 4, c = e & 15, ok = r < nk;
    tile_cp16(vst + tw_off(r, 8 * c), ok ? v + vo + (ulong)(kb + r) * v_ts + 8 * c : v, ok ? 16 : 0);
  }
}

#if TILE_HAS_WARP_GROUP
/* S (TW_BK / 8 tiles) += Q (64 x 16, this warp's 16 rows in registers) K^T (keys K-major). */
#if TW_BK == 32
#define TW_S_SHAPE "m64n32k16"
#define TW_S_REGS TILE_WG_R16 "}, {%16, %17, %18, %19}, %20"
#define TW_S_PRED "%21"
#define TW_S_ACC(d) TILE_WG_C4(d)
#define tw_pin_s tile_wg_pin4
#else
#define TW_S_SHAPE "m64n64k16"
#define TW_S_REGS TILE_WG_R32 "}, {%32, %33, %34, %35}, %36"
#define TW_S_PRED "%37"
#define TW_S_ACC(d) TILE_WG_C8(d)
#define tw_pin_s tile_wg_pin8
#endif
inline void tw_mma_s(tile_c *d, tile_a a, ulong db)
{
  asm volatile(TILE_WG_MARK "{\n" TILE_WG_MARK ".reg .pred p;\n" TILE_WG_MARK "setp.ne.b32 p, " TW_S_PRED ", 0;\n"
               TILE_WG_MARK "wgmma.mma_async.sync.aligned." TW_S_SHAPE ".f32.bf16.bf16 {" TW_S_REGS ", p, 1, 1, 0;\n"
               TILE_WG_MARK "}"
               : TW_S_ACC(d)
               : "r"(TILE_A_REG(a, 0)), "r"(TILE_A_REG(a, 1)), "r"(TILE_A_REG(a, 2)), "r"(TILE_A_REG(a, 3)), "l"(db), "r"(1));
}
/* O (16 tiles) += P (64 x 16 keys, registers) V (16 keys x 128, N-major). */
inline void tw_mma_o(tile_c *d, tile_a a, ulong db)
{
  asm volatile(TILE_WG_MARK "{\n" TILE_WG_MARK ".reg .pred p;\n" TILE_WG_MARK "setp.ne.b32 p, %69, 0;\n"
               TILE_WG_MARK "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" TILE_WG_R64 "}, "
               "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n" TILE_WG_MARK "}"
               : TILE_WG_C16(d)
               : "r"(TILE_A_REG(a, 0)), "r"(TILE_A_REG(a, 1)), "r"(TILE_A_REG(a, 2)), "r"(TILE_A_REG(a, 3)), "l"(db), "r"(1));
}
#define tw_pin_o tile_wg_pin16
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
    tile_b b;
    for (int i = 0; i < TILE_B_NE; i++)
      TILE_B_AT(b, i) = bf16_to_f32(ks[tw_off(8 * n + tile_b_col(lane, i), 16 * kstep + tile_b_row(lane, i))]);
    tile_mma(&s[n], qf, b);
  }
}
inline void tw_o_portable(tile_c *acc, tile_a pa, __local const ushort *vs, int kk, int lane)
{
  for (int j = 0; j < 16; j++) {
    tile_b b;
    for (int i = 0; i < TILE_B_NE; i++)
      TILE_B_AT(b, i) = bf16_to_f32(vs[tw_off(16 * kk + tile_b_row(lane, i), 8 * j + tile_b_col(lane, i))]);
    tile_mma(&acc[j], pa, b);
  }
}
#define TW_S(s, qf, ks_, kstep, lane) tw_s_portable(s, qf, ks_, kstep, lane)
#define TW_O(acc, pa, vs_, kk, lane) tw_o_portable(acc, pa, vs_, kk, lane)
#define tw_pin_s(s) ((void)0)
#define tw_pin_o(acc) ((void)0)
#endif

__kernel __attribute__((reqd_work_group_size(MT_WG, 1, 1)))
void mla_tile_fwd_wgmma(__global const store_t *q, ulong qo, uint q_ts, uint q_hs,
                      __global const store_t *kn, ulong kno, uint kn_ts, uint kn_hs,
                      __global const store_t *kr, ulong kro, uint kr_ts,
                      __global const store_t *v, ulong vo, uint v_ts, uint v_hs,
                      __global const int4 *tiles, int ntiles, int H, float sl2,
                      __global out_t *o, ulong oo, __global float *lse, ulong lo, int has_lse)
{
  __local uint4 sm4[MLA_TILE_U4(TW_ELEMS)] __attribute__((aligned(1024)));
  MT_FWD_PROLOGUE;
  const int wq_first = t0 + 16 * w + shift;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  tile_c acc[NON];
  MT_UNROLL
  for (int j = 0; j < NON; j++) acc[j] = tile_c_zero();

  const int nblocks = (kend - s0 + TW_BK - 1) / TW_BK;
#define TW_KBUF(i) (sm + ((i) % TW_KST) * TW_KBLK)
#define TW_VBUF(i) (sm + TW_KST * TW_KBLK + ((i) % TW_VST) * TW_VBLK)
#define TW_ISSUE(j_)                                                                           \
  tw_issue(TW_KBUF(j_), TW_VBUF(j_), s0 + (j_) * TW_BK, min(TW_BK, kend - s0 - (j_) * TW_BK), kn, kno_h, \
           kn_ts, kr, kro, kr_ts, v, vo_h, v_ts, lid)
  /* Sync point m: this lane's copies of block m are in and visible to the matrix unit, the
   * barrier, then the copies of block m + TW_AHEAD (into buffers nobody reads any more). */
#define TW_SYNC(m_, bar_)                                                                      \
  do {                                                                                         \
    TW_WAIT_COPY();                                                                            \
    tile_wg_proxy_fence();                                                                     \
    bar_;                                                                                      \
    if ((m_) + TW_AHEAD < nblocks) TW_ISSUE((m_) + TW_AHEAD);                                  \
    tile_cp_commit();                                                                          \
  } while (0)
  for (int j = 0; j < TW_AHEAD; j++) {
    if (j < nblocks) TW_ISSUE(j);
    tile_cp_commit(); /* empty groups keep the count per block fixed */
  }
  /* Every warp group takes every block (rows past a block's keys see them masked) and the
   * first P V multiplies P = 0 by a zeroed V buffer, so that no product sits on a path
   * ptxas cannot prove uniform (it serialises wgmma there: warning C7520). */
  tile_a pp[TW_BK / 16]; /* P of the block whose P V is pending */
  MT_UNROLL
  for (int kk = 0; kk < TW_BK / 16; kk++) pp[kk] = MT_A_FROM_C(tile_c_zero(), tile_c_zero(), pscr, lane);
  {
    __local uint *vz = (__local uint *)TW_VBUF(TW_VST - 1); /* "block -1" */
    for (int i = lid; i < TW_VBLK / 2; i += MT_WG) vz[i] = 0u;
  }
  TW_SYNC(0, barrier(CLK_LOCAL_MEM_FENCE));
#if TW_PP && TILE_HAS_WARP_GROUP
  /* The warp groups take turns on the matrix unit: group 0 meets the others at sync point j
   * before block j's products, group 1 after them, so each group's softmax runs while the
   * other's products do (FlashAttention-3's ping-pong) with one barrier per block. Group
   * 1's P V crosses the barrier (hence a V buffer more: TW_VST). Barrier 1 because the two
   * groups reach it from different places. */
  const int wg = w >> 2;
#define TW_SYNC_BEFORE(j_) if (wg == 0 && (j_) > 0) TW_SYNC(j_, TILE_BAR_SYNC(1, 256))
#define TW_SYNC_AFTER(j_) if (wg == 1 && (j_) + 1 < nblocks) TW_SYNC((j_) + 1, TILE_BAR_SYNC(1, 256))
#else
#define TW_SYNC_BEFORE(j_) if ((j_) > 0) TW_SYNC(j_, barrier(CLK_LOCAL_MEM_FENCE))
#define TW_SYNC_AFTER(j_) ((void)0)
#endif
  for (int j = 0; j < nblocks; j++) {
    const int kb = s0 + j * TW_BK;
    /* Past sync point j: block j is in; nobody reads block j - 1's K or block j - 2 -
     * TW_PP's V any more, so their buffers take block j + TW_AHEAD. */
    TW_SYNC_BEFORE(j);
    __local const ushort *ks = TW_KBUF(j), *vp = TW_VBUF(j + TW_VST - 1);
    tile_c s[TW_NSN];
    MT_UNROLL
    for (int n = 0; n < TW_NSN; n++) s[n] = tile_c_zero();
    tile_wg_fence();
    MT_UNROLL
    for (int kstep = 0; kstep < NKS; kstep++) TW_S(s, qf[kstep], ks, kstep, lane);
    tile_wg_commit();
    MT_UNROLL
    for (int kk = 0; kk < TW_BK / 16; kk++) TW_O(acc, pp[kk], vp, kk, lane);
    tile_wg_commit();
    TILE_WG_WAIT(1); /* S is in; P V may still run */
    tw_pin_s(s);
    TW_SYNC_AFTER(j);
    const float2 c = mt_softmax_p(s, TW_NSN, kb, kb + TW_BK - 1 > wq_first, sl2, qp0, qp1, &m0, &m1, &l0, &l1,
                                  wred, lane);
    TILE_WG_WAIT(0);
    tw_pin_o(acc);
    mt_rescale(acc, NON, c);
    MT_UNROLL
    for (int kk = 0; kk < TW_BK / 16; kk++) pp[kk] = MT_A_FROM_C(s[2 * kk], s[2 * kk + 1], pscr, lane);
  }
#undef TW_SYNC_BEFORE
#undef TW_SYNC_AFTER
#undef TW_SYNC
  { /* the last block's P V (no copies follow the loop: its V is still in) */
    __local const ushort *vs = TW_VBUF(nblocks - 1);
    tile_wg_fence();
    MT_UNROLL
    for (int kk = 0; kk < TW_BK / 16; kk++) TW_O(acc, pp[kk], vs, kk, lane);
    tile_wg_commit();
    TILE_WG_WAIT(0);
    tw_pin_o(acc);
  }
#undef TW_ISSUE
#undef TW_KBUF
#undef TW_VBUF

  mt_store_rows(acc, m0, m1, l0, l1, w, lane, t0, rows, H, h, o, oo, lse, lo, has_lse, wred);
}
#endif
