/* kda_tile_state.cl: the register-state pass of the KDA forward on tiles (TC_STEP 64),
 * appended to kda_tile.cl in the program ("tile+kda_common+kda_tile+kda_tile_state16+
 * kda_tile_state"), whose prep writes the blocks it reads (fragment order, -W, U^T: TC_IW in
 * kda_tile.cl).
 *
 * kda_tile_state, head-parallel (work-group: TC_NW warps of one (sequence, head), each warp
 * owning 16 columns of V). The state is kept transposed, S^T [16 V columns x KD], as KD / 8
 * fp32 accumulator tiles per lane, so that every product takes S^T or Vnew^T as its A
 * operand straight from accumulators (two tiles packed to bf16 pairs: tile_a_from_c's
 * trick, no memory) and the chunk's factors as B operands in fragment order (one 8-byte
 * local read per lane per fragment). Per 16-token chunk, with its anchored factors from the
 * prep (the same products as TC_STEP 16, so the same numerics):
 *   Vnew^T = U^T + S^T (-W)^T                     (KD / 16 k-steps, 2 token tiles, 2 chains)
 *   O^T    = S^T Qg^T + Vnew^T Aqk^T              (causal and scaled in Aqk)
 *   S^T    = S^T Diag(gl) + Vnew^T Kd             (KD / 8 column tiles)
 * The chunks' blocks (and the work-group's U^T rows) travel into a ring of TC_NS local
 * stages by asynchronous copies (tile_cp16: cp.async on NVIDIA) issued TC_NS - 1 chunks ahead, so no
 * register holds them and their latency hides behind that many chunks: one barrier per
 * chunk. On the H200 this cut the pass ~2x against staging through registers, whose
 * global latency and local stores were most of its time (docs/benchmarks-tiles.md). The
 * portable tiles cannot exchange fragments between lanes without memory: there S^T and
 * Vnew^T also go through a per-warp local scratch (2 more barriers a chunk). The backward's
 * program (-DTC_BWD=1) appends kda_tile_bwd.cl and uses the helpers below (tc_frag,
 * tc_a_pair, TC_CP_WAIT) for its reverse pass, without this file's kernel. */
#if TC_STEP == 64

#define TC_NKS (KD / 16) /* k-steps over the key dimension */
#define TC_NKT (KD / 8)  /* 8-column tiles of S^T */
#define TC_FRAG 128      /* ushorts of one B fragment */
#define TC_NT (32 * TC_NW)
/* TC_PROD 1 (asynchronous copies only): one more warp issues every copy, so the TC_NW
 * computing warps spend no instructions on them. */
#if !defined(TC_PROD) || !TILE_HAS_ASYNC_COPY
#undef TC_PROD
#define TC_PROD 0
#endif
#define TC_NWG (TC_NT + 32 * TC_PROD) /* work-group size */
#define TC_LDS KDA_TILE_LDS(KD) /* fp32 row of the portable S^T scratch */
#ifndef TC_NS
#define TC_NS 3          /* stages of the copy ring (2..4) */
#endif
#if TC_NS < 2 || TC_NS > 4
#error "TC_NS must be 2, 3 or 4"
#endif
#define TC_U4 KDA_TILE_S64_U4(TC_NW)           /* uint4 of the work-group's U^T rows */
#define TC_STG4 KDA_TILE_S64_STAGE4(KD, TC_NW) /* uint4 of one stage: the block, then U^T */

#define TC_UNROLL TILE_UNROLL
/* The B fragment at f (TC_FRAG ushorts in fragment order, 8-byte aligned). */
#define tc_frag tile_load_b_ordered
#if TILE_HAS_A_FROM_C
/* [c0 | c1] as an A operand, in registers. */
#define tc_a_pair(c0, c1) tile_a_from_c_cvt(c0, c1, lane)
#define TC_A_S(ks) tc_a_pair(S[2 * (ks)], S[2 * (ks) + 1])
#else
#define TC_A_S(ks) tile_load_a_f32(sS + 16 * (ks), TC_LDS, lane)
#endif
/* Waits for the copies of the chunk about to run: TC_NS - 2 younger groups may fly. */
#if TC_NS == 2
#define TC_CP_WAIT() TILE_CP_WAIT(0)
#elif TC_NS == 3
#define TC_CP_WAIT() TILE_CP_WAIT(1)
#else
#define TC_CP_WAIT() TILE_CP_WAIT(2)
#endif

/* Two fp32 as a bf16 pair (lo in the low half), nearest even. */
#define tc_pack2 tile_cvt2

/* n accumulator tiles x (8 columns each, rows: this warp's 16 columns of V) as bf16 rows
 * of ld at p: row r holds x[nt][r][c] at p[r ld + 8 nt + c]; one 4-byte store per pair. The
 * backward's saved states S_c^T, dS^T (ld KD) and Vnew^T (ld 16). */
inline void tc_store_rows(const tile_c *x, int n, __global ushort *p, int ld, int lane)
{
  /* this lane's rows g0 (elements 0, 1), g1 (2, 3), columns t2, t2 + 1 (tile.cl) */
  const int g0 = tile_c_row(lane, 0), g1 = tile_c_row(lane, 2), t2 = tile_c_col(lane, 0);
  TC_UNROLL
  for (int nt = 0; nt < n; nt++) {
    *(__global uint *)(p + g0 * ld + 8 * nt + t2) = tc_pack2(TILE_C_AT(x[nt], 0), TILE_C_AT(x[nt], 1));
    *(__global uint *)(p + g1 * ld + 8 * nt + t2) = tc_pack2(TILE_C_AT(x[nt], 2), TILE_C_AT(x[nt], 3));
  }
}

/* tc_save_rows: tc_store_rows for a warp's rows of contiguous storage (width 8 n, rows
 * contiguous), with -DTC_STSM=1 (tiles with matrix stores) through a per-warp staging area stg
 * ([16][TC_LDG] bf16): stmatrix puts the tiles there, then every lane stores whole 16-byte
 * pieces, so a warp's store writes full 32-byte sectors in order (the 4-byte pairs of
 * tc_store_rows fill half a sector per row: twice the store transactions, on the state
 * passes' serial path). */
#if !defined(TC_STSM) || !TILE_HAS_MATRIX_STORE
#undef TC_STSM
#define TC_STSM 0
#endif
#define TC_STG_AL __attribute__((aligned(16)))
#define TC_LDG KDA_TILE_LDK(KD) /* staging row (ushorts): 16-byte shift a row, no bank conflicts */
#if TC_STSM
inline void tc_save_rows(const tile_c *x, int n, __global ushort *p, __local ushort *stg, int lane)
{
  const int m = tile_ldsm_mat(lane), i = tile_ldsm_row(lane), ld = 8 * n + 8, per = n; /* uint4 a row: n */
  TILE_WARP_SYNC(); /* every lane done reading the previous rows */
  TC_UNROLL
  for (int nt = 0; nt < n; nt += 2)
    tile_stsm_x4(stg + ((m & 1) * 8 + i) * ld + 8 * (nt + (m >> 1)), tc_pack2(TILE_C_AT(x[nt], 0), TILE_C_AT(x[nt], 1)),
                 tc_pack2(TILE_C_AT(x[nt], 2), TILE_C_AT(x[nt], 3)), tc_pack2(TILE_C_AT(x[nt + 1], 0), TILE_C_AT(x[nt + 1], 1)),
                 tc_pack2(TILE_C_AT(x[nt + 1], 2), TILE_C_AT(x[nt + 1], 3)));
  TILE_WARP_SYNC();
  TC_UNROLL
  for (int e = lane; e < 16 * per; e += 32) {
    const int r = e / per, c = e - r * per;
    *(__global uint4 *)(p + r * 8 * n + 8 * c) = *(__local const uint4 *)(stg + r * ld + 8 * c);
  }
}
#else
inline void tc_save_rows(const tile_c *x, int n, __global ushort *p, __local ushort *stg, int lane)
{
  (void)stg;
  tc_store_rows(x, n, p, 8 * n, lane);
}
#endif

/* The state update: x^T = x^T Diag(gl) + a0 B0[nt] (+ a1 B1[nt] when two), over the KD / 8
 * column tiles of x^T (B fragments in order at b0, b1); the backward's passes too. */
__attribute__((always_inline)) inline void
tc_state_update(tile_c *x, __local const float *gl, tile_a a0, __local const ushort *b0, tile_a a1,
                __local const ushort *b1, int two, int lane)
{
  const int t2 = tile_c_col(lane, 0); /* this lane's two columns: t2, t2 + 1 */
  TC_UNROLL
  for (int nt = 0; nt < TC_NKT; nt++) {
    const float2 d = vload2(0, gl + 8 * nt + t2);
    TILE_C_AT(x[nt], 0) *= d.x;
    TILE_C_AT(x[nt], 1) *= d.y;
    TILE_C_AT(x[nt], 2) *= d.x;
    TILE_C_AT(x[nt], 3) *= d.y;
    tile_mma(&x[nt], a0, tc_frag(b0 + nt * TC_FRAG, lane));
    if (two) tile_mma(&x[nt], a1, tc_frag(b1 + nt * TC_FRAG, lane));
  }
}

#if !(defined(TC_BWD) && TC_BWD) /* (the backward's build takes the helpers above) */
/* One 16-token chunk ch of this warp's 16 V columns j0..: S^T in S [TC_NKT] (fp32), the
 * chunk's block at blk, its U^T rows of these columns at ut ([16 columns][16 rows] fp32),
 * both in the ring. sS [16][TC_LDS], sV [16][16]: the warp's scratch (portable tiles only).
 * Every work-item calls it (portable: it holds barriers). */
__attribute__((always_inline)) inline void
tc_chunk64(tile_c *S, __local const ushort *blk, __local const float *ut, int2 ch, int h,
           int H, int j0, int lane, __global out_t *o, ulong oo, __local float *sS,
           __local float *sV, __global ushort *ssp, __global ushort *vnp, __local ushort *stg)
{
  /* this lane's rows g0 (elements 0, 1), g1 (2, 3), columns t2, t2 + 1 (tile.cl) */
  const int g0 = tile_c_row(lane, 0), g1 = tile_c_row(lane, 2), t2 = tile_c_col(lane, 0);
#if defined(TC_SAVE) && TC_SAVE
  tc_save_rows(S, TC_NKT, ssp, stg, lane); /* S^T entering the chunk, for the backward */
#else
  (void)ssp, (void)vnp, (void)stg;
#endif
  /* Partial sums [chain][Vnew^T token tiles 0, 1, O^T token tiles 0, 1]: two chains over
   * the k-steps for latency, the first starting from U^T. */
  tile_c acc[2][4];
  for (int j = 0; j < 4; j++) {
    acc[0][j] = tile_c_zero();
    acc[1][j] = tile_c_zero();
  }
  for (int nt = 0; nt < 2; nt++) {
    const float2 a = vload2(0, ut + g0 * CH + 8 * nt + t2), b = vload2(0, ut + g1 * CH + 8 * nt + t2);
    TILE_C_AT(acc[0][nt], 0) = a.x, TILE_C_AT(acc[0][nt], 1) = a.y, TILE_C_AT(acc[0][nt], 2) = b.x,
    TILE_C_AT(acc[0][nt], 3) = b.y;
  }
#if !TILE_HAS_A_FROM_C
  for (int nt = 0; nt < TC_NKT; nt++) tile_store_c_local(S[nt], sS + 8 * nt, TC_LDS, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
  /* Vnew^T = U^T + S^T (-W)^T and S^T Qg^T: A = S^T [16 x 16] of k-step ks. */
  TC_UNROLL
  for (int ks = 0; ks < TC_NKS; ks++) {
    const tile_a a = TC_A_S(ks);
    TC_UNROLL
    for (int j = 0; j < 4; j++) /* fragment (token tile j % 2, ks) of -W^T, then of Qg^T */
      tile_mma(&acc[ks & 1][j], a, tc_frag(blk + (j >> 1) * 16 * KD + ((j & 1) * TC_NKS + ks) * TC_FRAG, lane));
  }
  tile_c vn[2], oc[2];
  for (int nt = 0; nt < 2; nt++)
    for (int i = 0; i < TILE_C_NE; i++) {
      TILE_C_AT(vn[nt], i) = TILE_C_AT(acc[0][nt], i) + TILE_C_AT(acc[1][nt], i);
      TILE_C_AT(oc[nt], i) = TILE_C_AT(acc[0][2 + nt], i) + TILE_C_AT(acc[1][2 + nt], i);
    }
#if defined(TC_SAVE) && TC_SAVE
  tc_save_rows(vn, 2, vnp, stg, lane); /* Vnew^T, for the backward */
#endif
#if TILE_HAS_A_FROM_C
  const tile_a av = tc_a_pair(vn[0], vn[1]); /* Vnew^T [16 columns x 16 tokens] */
#else
  tile_store_c_local(vn[0], sV, CH, lane);
  tile_store_c_local(vn[1], sV + 8, CH, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
  const tile_a av = tile_load_a_f32(sV, CH, lane);
#endif
  /* S^T = S^T Diag(gl) + Vnew^T Kd (first: the next chunk waits on it) */
  tc_state_update(S, (__local const float *)(blk + 48 * KD + 256), av, blk + 32 * KD, av, blk, 0, lane);
  /* O^T += Vnew^T Aqk^T; o [tokens, H, VD] at (token 8 nt + col, column j0 + row). */
  for (int nt = 0; nt < 2; nt++) {
    tile_mma(&oc[nt], av, tc_frag(blk + 48 * KD + nt * TC_FRAG, lane));
    for (int i = 0; i < TILE_C_NE; i++) {
      const int tok = 8 * nt + tile_c_col(lane, i);
      if (tok < ch.y)
        STORE_OUT(o, oo + ((ulong)(ch.x + tok) * (ulong)H + (ulong)h) * VD + j0 + tile_c_row(lane, i), TILE_C_AT(oc[nt], i));
    }
  }
}

/* Copies chunk cc's block and the work-group's U^T rows (from column jg) into ring stage
 * st when cc < end, then commits the group (empty past the end: the counts stay aligned);
 * copier i of n. */
inline void tc_issue(__local uint4 *st, __global const uint4 *blkg, __global const float *Ug,
                     int cc, int end, int h, int H, int jg, int i, int n)
{
  if (cc < end) {
    const ulong b = (ulong)cc * (ulong)H + (ulong)h;
    __global const uint4 *bs = blkg + b * TC_BLK4;
    __global const uint4 *us = (__global const uint4 *)(Ug + b * (CH * VD) + (ulong)jg * CH);
    for (int e = i; e < TC_STG4; e += n)
      tile_cp16(st + e, e < TC_BLK4 ? bs + e : us + (e - TC_BLK4), 16);
  }
  tile_cp_commit();
}

/* Grid (VD / 16 / TC_NW work-groups, H, sequences); the same arguments as TC_STEP 16's, then,
 * with -DTC_SAVE=1, where the backward's states go (kda_tile_bwd.cl's save pass's outputs, so
 * that the backward skips that pass): S_c^T [chunks, H, VD, KD] entering each chunk and
 * Vnew^T [chunks, H, VD, 16], bf16 (unused otherwise). */
__kernel __attribute__((reqd_work_group_size(TC_NWG, 1, 1)))
void kda_tile_state(__global const uint4 *blkg, __global const float *Ug,
                    __global const int2 *chunks, __global const int2 *seqs, int H,
                    __global const float *h0, ulong h0o, int has_h0, __global out_t *o, ulong oo,
                    __global float *ht, ulong hto, int has_ht, __global ushort *Ssave,
                    __global ushort *Vnsave)
{
  /* (bytes in all: KDA_TILE_STATE64_LOCAL_BYTES) */
  __local uint4 ring[TC_NS][TC_STG4];
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int jg = (int)get_group_id(0) * TC_NW * 16, j0 = jg + warp * 16; /* V columns */
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD;
#if TC_STSM && defined(TC_SAVE) && TC_SAVE
  __local ushort stg_[TC_NW][16 * TC_LDG] TC_STG_AL; /* the saved rows' staging */
  __local ushort *stg = stg_[warp < TC_NW ? warp : 0];
#else
  __local ushort *stg = NULL;
#endif
#if TILE_HAS_A_FROM_C
  __local float *sS = NULL, *sV = NULL; /* unused */
#else
  __local float scr[TC_NW][16 * TC_LDS + 16 * CH];
  __local float *sS = scr[warp], *sV = scr[warp] + 16 * TC_LDS;
  KDA_LAYOUT_CHECK(sizeof ring + sizeof scr ==
                   KDA_TILE_STATE64_LOCAL_BYTES(KD, TC_NW, TC_NS, 0, 0));
#endif
  /* S^T [16 x KD]: tile nt holds S^T[row][8 nt + col] = S[8 nt + col][j0 + row]. */
  const int load_h0 = TC_PROD ? has_h0 && warp < TC_NW : has_h0; /* (not the producer) */
  tile_c S[TC_NKT];
  TC_UNROLL
  for (int nt = 0; nt < TC_NKT; nt++)
    for (int i = 0; i < TILE_C_NE; i++)
      TILE_C_AT(S[nt], i) = load_h0 ? h0[h0o + (sbase + 8 * nt + tile_c_col(lane, i)) * VD + j0 + tile_c_row(lane, i)] : 0.0f;
  const int2 sq = seqs[n];
  const int end = sq.x + sq.y;
  /* the copiers: every work-item, or the producer warp's lanes */
  const int copier = TC_PROD ? warp == TC_NW : 1, ci = TC_PROD ? lane : lid, cn = TC_PROD ? 32 : TC_NT;
  if (copier)
    for (int p = 0; p < TC_NS - 1; p++) tc_issue(ring[p], blkg, Ug, sq.x + p, end, h, H, jg, ci, cn);
  for (int c = sq.x, s = 0; c < end; c++) {
    if (copier) TC_CP_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE); /* chunk c in the ring; every warp done with chunk c - 1 */
    const int sn = s == 0 ? TC_NS - 1 : s - 1; /* chunk c - 1's stage, refilled */
    if (copier) tc_issue(ring[sn], blkg, Ug, c + TC_NS - 1, end, h, H, jg, ci, cn);
    const ulong sb = (ulong)c * (ulong)H + (ulong)h;
    if (!TC_PROD || warp < TC_NW) /* (portable: every work-item; the chunk holds barriers) */
      tc_chunk64(S, (__local const ushort *)ring[s], (__local const float *)(ring[s] + TC_BLK4) + warp * 16 * CH,
                 chunks[c], h, H, j0, lane, o, oo, sS, sV, Ssave + (sb * VD + j0) * KD, Vnsave + (sb * VD + j0) * CH,
                 stg);
    s = s == TC_NS - 1 ? 0 : s + 1;
  }
  if (TC_PROD && warp == TC_NW) return; /* (after the last barrier) */
  if (has_ht) {
    TC_UNROLL
    for (int nt = 0; nt < TC_NKT; nt++)
      for (int i = 0; i < TILE_C_NE; i++)
        ht[hto + (sbase + 8 * nt + tile_c_col(lane, i)) * VD + j0 + tile_c_row(lane, i)] = TILE_C_AT(S[nt], i);
  }
}

#endif /* !TC_BWD */
#endif /* TC_STEP == 64 */
