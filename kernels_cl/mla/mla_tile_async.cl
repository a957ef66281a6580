/* mla_tile_async.cl: the MLA attention forward on tiles with asynchronous, double-buffered
 * K/V blocks, built as "tile+mla_layout+mla+mla_tile+mla_tile_async" with mla_tile.cl's
 * options and -DMT_ASYNC=1. Same arguments, tile table, results and lse as mla_tile_fwd; it
 * takes bf16 storage whose offsets and strides are multiples of 8 elements (16-byte copies)
 * and Dv a multiple of 16 (the host checks).
 *
 * Differences from mla_tile_fwd (mla_tile.cl):
 *   - key blocks of TA_BK = 32 (or 16) keys in TA_STAGES = 2 (or 3) local stages: while a
 *     block is multiplied, the next ones' K (k_nope of the head, then the shared k_rope) and V are in flight as 16-byte
 *     asynchronous copies (tile_cp16: cp.async on NVIDIA; plain copies elsewhere); one barrier per
 *     block;
 *   - K and V keep their global layout (rows of keys, no transposed staging): K fragments
 *     come from ldmatrix, V fragments from ldmatrix.trans (two 8-column tiles per load),
 *     both from rows whose 16-byte chunks are XOR-swizzled by the key (ta_k, ta_v), so the 8
 *     rows a load reads hit 8 different bank groups;
 *   - Q fragments in tile.cl's k order (the same order as the K fragments).
 * The softmax (base 2, fp32 statistics, per-lane partial row sums) and the stores are
 * mla_tile_fwd's (mt_softmax_block, mt_store_rows in mla_tile.cl); the prologue (Q
 * fragments, the tile, the head's offsets) is MT_FWD_PROLOGUE there, shared with
 * mla_tile_wgmma.cl. */
#if defined(MT_ASYNC) && MT_ASYNC && (!defined(MT_BWD) || !MT_BWD)
#ifndef TA_BK
#define TA_BK MLA_TILE_ASYNC_BK         /* keys per block: 16 or 32 */
#endif
#ifndef TA_STAGES
#define TA_STAGES MLA_TILE_ASYNC_STAGES /* blocks in local memory: 2 or 3 */
#endif
#if !STORE_BF16 || DN % 8 || DR % 8 || DV % 16 || (TA_BK != 16 && TA_BK != 32) || TA_STAGES < 2 || TA_STAGES > 3
#error "MT_ASYNC needs bf16 storage, Dn and Dr multiples of 8, Dv a multiple of 16 (and TA_BK 16 or 32, TA_STAGES 2 or 3)"
#endif
#define TA_KROW MLA_TILE_ASYNC_ROW(DQP) /* K row in local memory (whole groups of 8 chunks) */
#define TA_VROW MLA_TILE_ASYNC_ROW(DV)
#define TA_STAGE MLA_TILE_ASYNC_STAGE(DQK, DV, TA_BK) /* ushorts: K block, then V block */
#define TA_NSN (TA_BK / 8)              /* 8-key tiles of S */
/* Q is staged 64 rows at a time through the same memory. */
#define TA_ELEMS MLA_TILE_ASYNC_ELEMS(DQK, DV, TA_BK, TA_STAGES)
#if TA_STAGES == 2
#define TA_WAIT() TILE_CP_WAIT(0)
#else
#define TA_WAIT() TILE_CP_WAIT(1)
#endif

/* Element (key r, column d) of a K or V block: chunk d / 8 XOR-swizzled by r within its
 * group of 8 chunks. */
inline int ta_swz(int row, int d, int width)
{
  const int c = d >> 3;
  return row * width + (((c & ~7) | ((c ^ row) & 7)) << 3) + (d & 7);
}
#define ta_k(r, d) ta_swz(r, d, TA_KROW)
#define ta_v(r, d) ta_swz(r, d, TA_VROW)

/* Issues the copies of keys kb .. kb + nk - 1 (nk <= TA_BK; the rest zero) into a stage. */
inline void ta_issue(__local ushort *st, int kb, int nk, __global const store_t *kn, ulong kno, uint kn_ts,
                     __global const store_t *kr, ulong kro, uint kr_ts, __global const store_t *v, ulong vo,
                     uint v_ts, int lid)
{
  for (int e = lid; e < TA_BK * (TA_KROW / 8); e += MT_WG) {
    const int r = e / (TA_KROW / 8), d = 8 * (e % (TA_KROW / 8));
    const ulong row = (ulong)(kb + r);
    __global const store_t *src = kn;
    int bytes = 0;
    if (r < nk && d < DN) src = kn + kno + row * kn_ts + d, bytes = 16;
    else if (r < nk && d < DN + DR) src = kr + kro + row * kr_ts + (d - DN), bytes = 16;
    tile_cp16(st + ta_k(r, d), src, bytes);
  }
  __local ushort *vs = st + TA_BK * TA_KROW;
  for (int e = lid; e < TA_BK * (TA_VROW / 8); e += MT_WG) {
    const int r = e / (TA_VROW / 8), d = 8 * (e % (TA_VROW / 8));
    const int ok = r < nk && d < DV;
    tile_cp16(vs + ta_v(r, d), ok ? v + vo + (ulong)(kb + r) * v_ts + d : v, ok ? 16 : 0);
  }
}

/* B fragments of S = Q K^T for keys nb .. nb + 15 (two tiles), dims 16 ks ..; and of
 * O = P V for keys 16 kk .., dv columns nb .. nb + 15. */
#if TILE_HAS_MATRIX_LOAD && TILE_HAS_PACKED_REGS
inline void ta_frag_k(__local const ushort *ks, int nb, int kstep, int lane, tile_b *b0, tile_b *b1)
{
  const int r = tile_ldsm_row(lane), lo = (tile_ldsm_mat(lane) & 1) << 3, hi = (tile_ldsm_mat(lane) >> 1) << 3;
  const uint4 x = tile_ldsm_x4(ks + ta_k(nb + r + hi, 16 * kstep + lo));
  TILE_B_REG(*b0, 0) = x.x, TILE_B_REG(*b0, 1) = x.y, TILE_B_REG(*b1, 0) = x.z, TILE_B_REG(*b1, 1) = x.w;
}
inline void ta_frag_v(__local const ushort *vs, int kk, int nb, int lane, tile_b *b0, tile_b *b1)
{
  const int r = tile_ldsm_row(lane), lo = (tile_ldsm_mat(lane) & 1) << 3, hi = (tile_ldsm_mat(lane) >> 1) << 3;
  const uint4 x = tile_ldsm_x4_trans(vs + ta_v(16 * kk + r + lo, nb + hi));
  TILE_B_REG(*b0, 0) = x.x, TILE_B_REG(*b0, 1) = x.y, TILE_B_REG(*b1, 0) = x.z, TILE_B_REG(*b1, 1) = x.w;
}
#else
inline tile_b ta_frag_k1(__local const ushort *ks, int nb, int kstep, int lane)
{
  tile_b b;
  for (int i = 0; i < TILE_B_NE; i++)
    TILE_B_AT(b, i) = bf16_to_f32(ks[ta_k(nb + tile_b_col(lane, i), 16 * kstep + tile_b_row(lane, i))]);
  return b;
}
inline tile_b ta_frag_v1(__local const ushort *vs, int kk, int nb, int lane)
{
  tile_b b;
  for (int i = 0; i < TILE_B_NE; i++)
    TILE_B_AT(b, i) = bf16_to_f32(vs[ta_v(16 * kk + tile_b_row(lane, i), nb + tile_b_col(lane, i))]);
  return b;
}
inline void ta_frag_k(__local const ushort *ks, int nb, int kstep, int lane, tile_b *b0, tile_b *b1)
{
  *b0 = ta_frag_k1(ks, nb, kstep, lane), *b1 = ta_frag_k1(ks, nb + 8, kstep, lane);
}
inline void ta_frag_v(__local const ushort *vs, int kk, int nb, int lane, tile_b *b0, tile_b *b1)
{
  *b0 = ta_frag_v1(vs, kk, nb, lane), *b1 = ta_frag_v1(vs, kk, nb + 8, lane);
}
#endif

__kernel __attribute__((reqd_work_group_size(MT_WG, 1, 1)))
void mla_tile_fwd_async(__global const store_t *q, ulong qo, uint q_ts, uint q_hs,
                      __global const store_t *kn, ulong kno, uint kn_ts, uint kn_hs,
                      __global const store_t *kr, ulong kro, uint kr_ts,
                      __global const store_t *v, ulong vo, uint v_ts, uint v_hs,
                      __global const int4 *tiles, int ntiles, int H, float sl2,
                      __global out_t *o, ulong oo, __global float *lse, ulong lo, int has_lse)
{
  __local uint4 sm4[MLA_TILE_U4(TA_ELEMS)];
  MT_FWD_PROLOGUE;
  const int wq_first = t0 + 16 * w + shift, wq_last = wq_first + 15;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  tile_c acc[NON];
  MT_UNROLL
  for (int j = 0; j < NON; j++) acc[j] = tile_c_zero();

  const int nblocks = (kend - s0 + TA_BK - 1) / TA_BK;
  for (int b = 0; b < TA_STAGES - 1; b++) {
    const int kb = s0 + b * TA_BK;
    if (b < nblocks)
      ta_issue(sm + b * TA_STAGE, kb, min(TA_BK, kend - kb), kn, kno_h, kn_ts, kr, kro, kr_ts, v, vo_h, v_ts, lid);
    tile_cp_commit(); /* empty groups keep the count per block fixed */
  }
  for (int b = 0; b < nblocks; b++) {
    const int kb = s0 + b * TA_BK, bn = b + TA_STAGES - 1, kn0 = s0 + bn * TA_BK;
    TA_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE); /* block b is in; everyone is done with block b - 1 */
    if (bn < nblocks)
      ta_issue(sm + (bn % TA_STAGES) * TA_STAGE, kn0, min(TA_BK, kend - kn0), kn, kno_h, kn_ts, kr, kro, kr_ts, v,
               vo_h, v_ts, lid);
    tile_cp_commit();
    __local const ushort *ks = sm + (b % TA_STAGES) * TA_STAGE, *vs = ks + TA_BK * TA_KROW;
#if TILE_HAS_LANE_SHUFFLE && TILE_HAS_A_FROM_C /* (no barrier below with these) */
    if (kb > wq_last) continue; /* this warp's rows all precede the block */
#endif
    tile_c s[TA_NSN];
    MT_UNROLL
    for (int n = 0; n < TA_NSN; n++) s[n] = tile_c_zero();
    MT_UNROLL
    for (int kstep = 0; kstep < NKS; kstep++) {
      MT_UNROLL
      for (int n = 0; n < TA_NSN; n += 2) {
        tile_b b0, b1;
        ta_frag_k(ks, 8 * n, kstep, lane, &b0, &b1);
        tile_mma(&s[n], qf[kstep], b0);
        tile_mma(&s[n + 1], qf[kstep], b1);
      }
    }
    mt_softmax_block(s, TA_NSN, acc, NON, kb, kb + TA_BK - 1 > wq_first, sl2, qp0, qp1, &m0, &m1, &l0, &l1, wred,
                     lane);
    MT_UNROLL
    for (int kk = 0; kk < TA_BK / 16; kk++) {
      const tile_a pa = MT_A_FROM_C(s[2 * kk], s[2 * kk + 1], pscr, lane);
      MT_UNROLL
      for (int j = 0; j < NON; j += 2) {
        tile_b b0, b1;
        ta_frag_v(vs, kk, 8 * j, lane, &b0, &b1);
        tile_mma(&acc[j], pa, b0);
        tile_mma(&acc[j + 1], pa, b1);
      }
    }
  }

  mt_store_rows(acc, m0, m1, l0, l1, w, lane, t0, rows, H, h, o, oo, lse, lo, has_lse, wred);
}
#endif
