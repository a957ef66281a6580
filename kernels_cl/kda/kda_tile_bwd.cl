/* kda_tile_bwd.cl: the KDA backward on the tile interface. Appended to the forward's
 * files in the program "tile+kda_common+kda_tile+kda_tile_state+kda_tile_bwd", built with
 * kda_common's -DKD -DVD (multiples of 16, <= 128), the tile options, -DTC_STEP=64
 * -DTC_BWD=1 (kda_tile.cl's prep writes the backward's blocks; kda_tile_state.cl gives its
 * fragment helpers, not its kernel), -DTB_NW (computing warps of a state pass's
 * work-group), -DTB_NS (stages of its copy ring, 2..4) and -DTB_PROD (0/1: a producer
 * warp, tiles with asynchronous copies only). Every product over K or V is tile_mma (D[16 x 8] += A[16 x 16]
 * B[16 x 8], bf16 operands, fp32 accumulators). The per-chunk factors: one bf16 block per
 * (chunk, head) from the prep (kda_common.cl's KDA_BB_*: B operands in fragment order, where
 * each pass reads them) and U^T [chunks, H, V, 16] fp32, with the forward
 *   Vnew = U - W S,  O = Qg S + Aqk Vnew,  S' = gl (.) S + Kd^T Vnew.
 *
 * The two head-parallel passes keep their state transposed in fp32 accumulators, as the
 * forward's state pass does (kda_tile_state.cl): each warp owns 16 columns of V, and every
 * product takes the state, dO^T or Vnew^T / dVnew^T as its A operand (accumulator pairs
 * packed to bf16, no memory with TILE_HAS_A_FROM_C) and the chunk's fragments as B. On the H200 this
 * formulation took the two passes from 1.78 + 1.88 ms (S [K, 8] with a bf16 copy in local
 * memory, 8 columns per warp) to 1.03 + 1.16 at H 16, T 16384 (2 warps per work-group).
 * kda_tile_fwd_save / kda_tile_state_bwd run them one after the other, kda_tile_states both in
 * one launch (they do not depend on each other).
 * The save pass (ts_pass, TB_NW warps): the forward again,
 *     Vnew^T = U^T + S^T (-W)^T,   S^T = S^T Diag(gl) + Vnew^T Kd,
 *   keeping the state entering each chunk S_c^T [chunks, H, V, K] and Vnew^T [chunks, H,
 *   V, 16], both bf16 (every later use is a bf16 tile operand; only dgl's elementwise sum
 *   sees the rounding). Not run when the forward kept them (kda_tile_state.cl's -DTC_SAVE=1
 *   stores the same values).
 * The reverse pass (tr_pass), chunks in reverse, dS (the gradient of the state after
 *   the chunk):
 *     dVnew^T = dO^T Aqk + dS^T Kd^T  (-> dU [chunks, H, 16, V], fp32),
 *     dS^T    = dS^T Diag(gl) + dO^T Qg + dVnew^T (-W),
 *   keeping every chunk's dS^T [chunks, H, V, K] bf16 and dS at the start as dinitial_state.
 * Both copy each chunk's part of the block into a ring of TB_NS local stages TB_NS - 1
 * chunks ahead (tile_cp16: cp.async on NVIDIA, by the producer warp with TB_PROD; plain copies elsewhere),
 * one work-group barrier per chunk. The portable tiles pass the state and Vnew^T through a
 * per-warp fp32 scratch instead (two more barriers a chunk); with -DTC_STSM=1 the saved
 * rows leave through a per-warp staging area there (tc_save_rows).
 * kda_tile_bwd_chunk.cl's kda_tile_bwd_chunk (token-parallel) reads S_c^T, dS^T, Vnew^T and dU and
 * finishes the backward. */
#ifndef TB_NW
#define TB_NW 2
#endif
#ifndef TB_NS
#define TB_NS 3
#endif
#if !defined(TB_PROD) || !TILE_HAS_ASYNC_COPY
#undef TB_PROD
#define TB_PROD 0
#endif
#if KD % 16 || VD % 16
#error "kda_tile_bwd needs KD and VD multiples of 16"
#endif
#define TB_NWG (32 * TB_NW + 32 * TB_PROD) /* work-group sizes of the two passes */
#define TB_AL __attribute__((aligned(16)))
#define TB_BLK4 (KDA_BB_SIZE / 8)                 /* uint4 of a block */
#define TB_FWD4 (KDA_BB_SAVE / 8)                 /* ... of the save pass's part */
#define TB_REV4 (KDA_TILE_BWD_REV_PART(KD) / 8)   /* ... of the reverse pass's, after it */

#if TB_NS == 2
#define TB_CP_WAIT() TILE_CP_WAIT(0)
#elif TB_NS == 3
#define TB_CP_WAIT() TILE_CP_WAIT(1)
#else
#define TB_CP_WAIT() TILE_CP_WAIT(2)
#endif
#if TILE_HAS_A_FROM_C
/* [16 x KD] state^T tiles st (fp32 accumulators) as A operand of k-step ks */
#define TB_A_ST(st, ks) tc_a_pair((st)[2 * (ks)], (st)[2 * (ks) + 1])
#if TC_STSM /* sS, sV: the warp's staging of the saved rows (tc_save_rows) */
#define TB_SCRATCH(nw)                                                                      \
  __local ushort stg_[nw][16 * TC_LDG] TC_STG_AL;                                           \
  __local float *sS = (__local float *)stg_[cw], *sV = sS
#else
#define TB_SCRATCH(nw) __local float *sS = NULL, *sV = NULL /* (no scratch) */
#endif
#else
#define TB_A_ST(st, ks) tile_load_a_f32(sS + 16 * (ks), TC_LDS, lane)
/* the per-warp fp32 scratch of the portable tiles: sS (the state^T), sV (Vnew^T, dVnew^T) */
#define TB_SCRATCH(nw)                                                                      \
  __local float scr_[nw][16 * TC_LDS + 16 * CH];                                            \
  __local float *sS = scr_[cw], *sV = scr_[cw] + 16 * TC_LDS
#endif

/* Copies n4 uint4 of block cc from its uint4 o4 (when valid) into stage st, copier i of n;
 * commits a group either way (so the waits count the same everywhere). */
inline void tb_issue(__local uint4 *st, __global const uint4 *blkg, ulong cc, int H, int h, int valid,
                     int o4, int n4, int i, int n)
{
  if (valid) {
    __global const uint4 *src = blkg + ((ulong)cc * (ulong)H + (ulong)h) * TB_BLK4 + o4;
    for (int e = i; e < n4; e += n) tile_cp16(st + e, src + e, 16);
  }
  tile_cp_commit();
}

/* A warp's state^T tiles st [TC_NKT] (rows: its 16 columns of V) as bf16 rows of KD at p
 * (tc_save_rows, staged in sS with TC_STSM); on the portable tiles also into the fp32
 * scratch sS, for TB_A_ST (the caller's barrier follows). */
inline void tb_put_state(const tile_c *st, __global ushort *p, __local float *sS, int lane)
{
  tc_save_rows(st, TC_NKT, p, (__local ushort *)sS, lane);
#if !TILE_HAS_A_FROM_C
  for (int nt = 0; nt < TC_NKT; nt++) tile_store_c_local(st[nt], sS + 8 * nt, TC_LDS, lane);
#endif
}

/* Two token tiles x (Vnew^T or dVnew^T, [16 columns x 16 tokens]) as an A operand (the
 * portable tiles through the scratch sV; every work-item calls it there). */
inline tile_a tb_a_tokens(tile_c x0, tile_c x1, __local float *sV, int lane)
{
#if TILE_HAS_A_FROM_C
  return tc_a_pair(x0, x1);
#else
  tile_store_c_local(x0, sV, CH, lane);
  tile_store_c_local(x1, sV + 8, CH, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
  return tile_load_a_f32(sV, CH, lane);
#endif
}

/* The state's initial value: tile nt of x^T holds x[8 nt + col][j0 + row] of src (or 0). */
inline void tb_load_state(tile_c *x, __global const float *src, ulong o, int has, int j0, int lane)
{
  TC_UNROLL
  for (int nt = 0; nt < TC_NKT; nt++)
    for (int i = 0; i < TILE_C_NE; i++)
      TILE_C_AT(x[nt], i) = has ? src[o + (ulong)(8 * nt + tile_c_col(lane, i)) * VD + j0 + tile_c_row(lane, i)] : 0.0f;
}

/* ---- the save pass --------------------------------------------------------------------- */

/* One chunk of a warp's 16 columns: S^T in S, the save part of the chunk's block at sb
 * (ring), this chunk's U^T at the lane's positions in u ([token tile][row g, g + 8]).
 * Stores S^T (entering) at ssp ([16 columns][KD]) and Vnew^T at vnp ([16 columns][16]). */
__attribute__((always_inline)) inline void
ts_chunk(tile_c *S, __local const ushort *sb, const float2 *u, __global ushort *ssp, __global ushort *vnp,
         int lane, __local float *sS, __local float *sV)
{
  tb_put_state(S, ssp, sS, lane);
#if !TILE_HAS_A_FROM_C
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
  /* Vnew^T by token tile: two chains over the k-steps, the first from U^T */
  tile_c acc[2][2];
  for (int nt = 0; nt < 2; nt++) {
    for (int i = 0; i < TILE_C_NE; i += 2) /* u: [token tile][this lane's rows], column pairs */
      TILE_C_AT(acc[0][nt], i) = u[2 * nt + i / 2].x, TILE_C_AT(acc[0][nt], i + 1) = u[2 * nt + i / 2].y;
    acc[1][nt] = tile_c_zero();
  }
  TC_UNROLL
  for (int ks = 0; ks < TC_NKS; ks++) {
    const tile_a a = TB_A_ST(S, ks);
    for (int nt = 0; nt < 2; nt++)
      tile_mma(&acc[ks & 1][nt], a, tc_frag(sb + KDA_BB_S0 + (nt * TC_NKS + ks) * TC_FRAG, lane));
  }
  tile_c vn[2];
  for (int nt = 0; nt < 2; nt++)
    for (int i = 0; i < TILE_C_NE; i++) TILE_C_AT(vn[nt], i) = TILE_C_AT(acc[0][nt], i) + TILE_C_AT(acc[1][nt], i);
  tc_save_rows(vn, 2, vnp, (__local ushort *)sS, lane);
  const tile_a av = tb_a_tokens(vn[0], vn[1], sV, lane);
  tc_state_update(S, (__local const float *)(sb + KDA_BB_S2), av, sb + KDA_BB_S1, av, sb, 0, lane);
}

/* The save pass of work-group column gx (V columns 16 TB_NW gx ..) of (head, sequence)
 * (group ids 1, 2): its stages in ring (TB_NS x TB_FWD4), sS / sV its warp's scratch
 * (portable tiles). Every work-item of the work-group calls it (it holds barriers). */
__attribute__((always_inline)) inline void
ts_pass(__local uint4 *ring, __local float *sS, __local float *sV, int gx, __global const uint4 *blkg,
        __global const float *Ug, __global const int2 *seqs, int H, __global const float *h0, ulong h0o,
        int has_h0, __global ushort *Ssave, __global ushort *Vnsave)
{
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int computes = TB_PROD ? warp < TB_NW : 1, cw = computes ? warp : 0;
  const int j0 = (gx * TB_NW + cw) * 16; /* this warp's V columns */
  const int g = tile_c_row(lane, 0), t2 = tile_c_col(lane, 0); /* rows g, g + 8; columns t2, + 1 */
  const int copier = TB_PROD ? !computes : 1, ci0 = TB_PROD ? lane : lid, cn = TB_PROD ? 32 : 32 * TB_NW;
  tile_c S[TC_NKT]; /* S^T: tile nt holds S^T[row][8 nt + col] = S[8 nt + col][j0 + row] */
  tb_load_state(S, h0, h0o + ((ulong)n * (ulong)H + (ulong)h) * KD * VD, has_h0 & computes, j0, lane);
  const int2 sq = seqs[n];
  if (copier)
    for (int p = 0; p < TB_NS - 1; p++)
      tb_issue(ring + p * TB_FWD4, blkg, (ulong)(sq.x + p), H, h, p < sq.y, 0, TB_FWD4, ci0, cn);
  /* U^T of the next chunk at this lane's accumulator positions: [token tile][row g, g + 8] */
  float2 pu[4] = {(float2)(0.0f), (float2)(0.0f), (float2)(0.0f), (float2)(0.0f)};
#define TS_FETCH_U(cc)                                                                      \
  do {                                                                                      \
    __global const float *u_ = Ug + (((ulong)(cc) * (ulong)H + (ulong)h) * VD + j0 + g) * CH + t2; \
    pu[0] = vload2(0, u_), pu[1] = vload2(0, u_ + 8 * CH);                                  \
    pu[2] = vload2(0, u_ + 8), pu[3] = vload2(0, u_ + 8 * CH + 8);                          \
  } while (0)
  if ((sq.y > 0) & computes) TS_FETCH_U(sq.x);
  for (int ci = 0, s = 0; ci < sq.y; ci++) {
    const ulong base = (ulong)(sq.x + ci) * (ulong)H + (ulong)h;
    if (copier) TB_CP_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE); /* chunk ci in stage s; every warp done with chunk ci - 1 */
    if (copier)
      tb_issue(ring + (s == 0 ? TB_NS - 1 : s - 1) * TB_FWD4, blkg, (ulong)(sq.x + ci + TB_NS - 1), H, h,
               ci + TB_NS - 1 < sq.y, 0, TB_FWD4, ci0, cn);
    if (computes) { /* (portable: every work-item, which computes; the chunk holds barriers) */
      const float2 u[4] = {pu[0], pu[1], pu[2], pu[3]};
      if (ci + 1 < sq.y) TS_FETCH_U(sq.x + ci + 1);
      ts_chunk(S, (__local const ushort *)(ring + s * TB_FWD4), u, Ssave + (base * VD + j0) * KD, Vnsave + (base * VD + j0) * CH,
               lane, sS, sV);
    }
    s = s == TB_NS - 1 ? 0 : s + 1;
  }
#undef TS_FETCH_U
}

/* ---- the reverse pass ------------------------------------------------------------------ */

#define TR_LDO KDA_TILE_LD16 /* bf16 row of a warp's dO scratch */

/* One chunk of a warp's 16 columns: dS^T in dS, the reverse part of the chunk's block at rb
 * (ring), this chunk's dO rows (bf16) in dol. Stores dS^T (after the chunk, for
 * kda_tile_bwd_chunk) at dsp ([16 columns][KD]) and dVnew at dup ([16 tokens][VD], fp32). */
__attribute__((always_inline)) inline void
tr_chunk(tile_c *dS, __local const ushort *rb, __local const ushort *dol, __global ushort *dsp,
         __global float *dup, int lane, __local float *sS, __local float *sV)
{
  tb_put_state(dS, dsp, sS, lane);
#if !TILE_HAS_A_FROM_C
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
  const tile_a ao = tile_load_at_bf16(dol, TR_LDO, lane); /* dO^T [16 columns x 16 tokens] */
  __local const ushort *r0 = rb, *r3 = rb + (KDA_BB_R3 - KDA_BB_R0);
  /* dVnew^T by token tile: two chains over the k-steps, the first from dO^T Aqk */
  tile_c acc[2][2];
  for (int nt = 0; nt < 2; nt++) {
    acc[0][nt] = tile_c_zero();
    acc[1][nt] = tile_c_zero();
    tile_mma(&acc[0][nt], ao, tc_frag(r3 + nt * TC_FRAG, lane));
  }
  TC_UNROLL
  for (int ks = 0; ks < TC_NKS; ks++) {
    const tile_a a = TB_A_ST(dS, ks);
    for (int nt = 0; nt < 2; nt++) tile_mma(&acc[ks & 1][nt], a, tc_frag(r0 + (nt * TC_NKS + ks) * TC_FRAG, lane));
  }
  tile_c dv[2];
  for (int nt = 0; nt < 2; nt++)
    for (int i = 0; i < TILE_C_NE; i++) {
      TILE_C_AT(dv[nt], i) = TILE_C_AT(acc[0][nt], i) + TILE_C_AT(acc[1][nt], i);
      dup[(8 * nt + tile_c_col(lane, i)) * VD + tile_c_row(lane, i)] = TILE_C_AT(dv[nt], i); /* dU[token][column] */
    }
  const tile_a av = tb_a_tokens(dv[0], dv[1], sV, lane);
  tc_state_update(dS, (__local const float *)(rb + (KDA_BB_R4 - KDA_BB_R0)), ao, rb + (KDA_BB_R1 - KDA_BB_R0), av,
                  rb + (KDA_BB_R2 - KDA_BB_R0), 1, lane);
}

/* The reverse pass of work-group column gx (as ts_pass): its stages in ring (TB_NS x
 * TB_REV4), dO [TB_NW][CH * TR_LDO] the warps' dO rows. */
__attribute__((always_inline)) inline void
tr_pass(__local uint4 *ring, __local ushort *dO, __local float *sS, __local float *sV, int gx,
        __global const uint4 *blkg, __global const int2 *chunks, __global const int2 *seqs, int H,
        __global const float *dout, ulong doo, __global const float *dht, ulong dhto, int has_dht,
        __global float *dUg, __global ushort *dSsave, __global float *dh0, ulong dh0o, int has_dh0)
{
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int computes = TB_PROD ? warp < TB_NW : 1, cw = computes ? warp : 0;
  const int j0 = (gx * TB_NW + cw) * 16; /* this warp's V columns */
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD * VD;
  const int copier = TB_PROD ? !computes : 1, ci0 = TB_PROD ? lane : lid, cn = TB_PROD ? 32 : 32 * TB_NW;
  __local ushort *dol = dO + cw * (CH * TR_LDO);
  tile_c dS[TC_NKT]; /* dS^T: tile nt holds dS^T[row][8 nt + col] = dS[8 nt + col][j0 + row] */
  tb_load_state(dS, dht, dhto + sbase, has_dht & computes, j0, lane);
  const int2 sq = seqs[n];
  const int last = sq.x + sq.y - 1; /* chunks in reverse: the p-th is last - p */
  if (copier)
    for (int p = 0; p < TB_NS - 1; p++)
      tb_issue(ring + p * TB_REV4, blkg, (ulong)(last - p), H, h, p < sq.y, TB_FWD4, TB_REV4, ci0, cn);
  /* this lane's dO share of the next chunk: row lane / 2, columns 8 (lane % 2) .. + 7 */
  const int orow = lane >> 1, ocol = (lane & 1) << 3;
  float4 pa = (float4)(0.0f), pb = (float4)(0.0f);
#define TR_FETCH_DO(cc)                                                                     \
  do {                                                                                      \
    const int2 ch_ = chunks[cc];                                                            \
    const int ok_ = orow < ch_.y;                                                           \
    const ulong e_ = doo + ((ulong)(ch_.x + (ok_ ? orow : 0)) * (ulong)H + (ulong)h) * VD + j0 + ocol; \
    pa = ok_ ? vload4(0, dout + e_) : (float4)(0.0f);                                       \
    pb = ok_ ? vload4(0, dout + e_ + 4) : (float4)(0.0f);                                   \
  } while (0)
  if ((sq.y > 0) & computes) TR_FETCH_DO(last);
  for (int p = 0, s = 0; p < sq.y; p++) {
    const int c = last - p;
    const ulong base = (ulong)c * (ulong)H + (ulong)h;
    if (copier) TB_CP_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE); /* chunk c in stage s; every warp done with the previous */
    if (copier)
      tb_issue(ring + (s == 0 ? TB_NS - 1 : s - 1) * TB_REV4, blkg, (ulong)(last - p - TB_NS + 1), H, h,
               p + TB_NS - 1 < sq.y, TB_FWD4, TB_REV4, ci0, cn);
    if (computes) { /* (portable: every work-item, which computes; the chunk holds barriers) */
      *(__local uint4 *)(dol + orow * TR_LDO + ocol) =
          (uint4)(tc_pack2(pa.x, pa.y), tc_pack2(pa.z, pa.w), tc_pack2(pb.x, pb.y), tc_pack2(pb.z, pb.w));
      if (p + 1 < sq.y) TR_FETCH_DO(c - 1);
      TILE_WARP_SYNC(); /* dO rows complete */
      tr_chunk(dS, (__local const ushort *)(ring + s * TB_REV4), dol, dSsave + (base * VD + j0) * KD,
               dUg + base * CH * VD + j0, lane, sS, sV);
    }
    s = s == TB_NS - 1 ? 0 : s + 1;
  }
#undef TR_FETCH_DO
  if (has_dh0 & computes) {
    TC_UNROLL
    for (int nt = 0; nt < TC_NKT; nt++)
      for (int i = 0; i < TILE_C_NE; i++)
        dh0[dh0o + sbase + (ulong)(8 * nt + tile_c_col(lane, i)) * VD + j0 + tile_c_row(lane, i)] = TILE_C_AT(dS[nt], i);
  }
}

/* ---- the kernels: each pass alone, or both in one launch --------------------------------- */

/* Grid (VD / 16 / TB_NW work-groups, H, sequences) each. */
__kernel __attribute__((reqd_work_group_size(TB_NWG, 1, 1)))
void kda_tile_fwd_save(__global const uint4 *blkg, __global const float *Ug, __global const int2 *seqs,
                       int H, __global const float *h0, ulong h0o, int has_h0, __global ushort *Ssave,
                       __global ushort *Vnsave)
{
  __local uint4 ring[TB_NS * TB_FWD4]; /* (the reverse pass's ring is the larger) */
  const int warp = (int)get_local_id(0) >> 5, cw = warp < TB_NW ? warp : 0; /* (the producer: 0) */
  TB_SCRATCH(TB_NW);
  ts_pass(ring, sS, sV, (int)get_group_id(0), blkg, Ug, seqs, H, h0, h0o, has_h0, Ssave, Vnsave);
}

__kernel __attribute__((reqd_work_group_size(TB_NWG, 1, 1)))
void kda_tile_state_bwd(__global const uint4 *blkg, __global const int2 *chunks, __global const int2 *seqs,
                        int H, __global const float *dout, ulong doo, __global const float *dht,
                        ulong dhto, int has_dht, __global float *dUg, __global ushort *dSsave,
                        __global float *dh0, ulong dh0o, int has_dh0)
{
  __local uint4 ring[TB_NS * TB_REV4]; /* (bytes in all: KDA_TILE_BWD_STATES_LOCAL_BYTES) */
  __local ushort dO[TB_NW * CH * TR_LDO] TB_AL;
  const int warp = (int)get_local_id(0) >> 5, cw = warp < TB_NW ? warp : 0;
  TB_SCRATCH(TB_NW);
#if !TILE_HAS_A_FROM_C
  KDA_LAYOUT_CHECK(sizeof ring + sizeof dO + sizeof scr_ ==
                   KDA_TILE_BWD_STATES_LOCAL_BYTES(KD, TB_NW, TB_NS, 0, 0));
#endif
  tr_pass(ring, dO, sS, sV, (int)get_group_id(0), blkg, chunks, seqs, H, dout, doo, dht, dhto, has_dht, dUg,
          dSsave, dh0, dh0o, has_dh0);
}

/* The two passes do not depend on each other (the reverse pass needs dO and the factors,
 * not the saved states), so when they leave compute units idle one launch runs them side
 * by side: work-group columns 0 .. VD / 16 / TB_NW - 1 run the save pass, the next as many
 * the reverse pass (grid (2 VD / 16 / TB_NW, H, sequences)); every work-group holds the
 * reverse pass's larger ring. On the H200 at T 16384 with 1 warp per work-group: H 16 1.31
 * ms against 0.84 + 0.96 one after the other, H 32 2.44 against 1.08 + 1.36. */
__kernel __attribute__((reqd_work_group_size(TB_NWG, 1, 1)))
void kda_tile_states(__global const uint4 *blkg, __global const float *Ug, __global const int2 *chunks,
                     __global const int2 *seqs, int H, __global const float *h0, ulong h0o, int has_h0,
                     __global const float *dout, ulong doo, __global const float *dht, ulong dhto,
                     int has_dht, __global ushort *Ssave, __global ushort *Vnsave, __global float *dUg,
                     __global ushort *dSsave, __global float *dh0, ulong dh0o, int has_dh0)
{
  __local uint4 ring[TB_NS * TB_REV4]; /* (bytes in all: KDA_TILE_BWD_STATES_LOCAL_BYTES) */
  __local ushort dO[TB_NW * CH * TR_LDO] TB_AL;
  const int warp = (int)get_local_id(0) >> 5, cw = warp < TB_NW ? warp : 0;
  TB_SCRATCH(TB_NW);
#if !TILE_HAS_A_FROM_C
  KDA_LAYOUT_CHECK(sizeof ring + sizeof dO + sizeof scr_ ==
                   KDA_TILE_BWD_STATES_LOCAL_BYTES(KD, TB_NW, TB_NS, 0, 0));
#endif
  const int gx = (int)get_group_id(0), nsave = VD / 16 / TB_NW;
  if (gx < nsave)
    ts_pass(ring, sS, sV, gx, blkg, Ug, seqs, H, h0, h0o, has_h0, Ssave, Vnsave);
  else
    tr_pass(ring, dO, sS, sV, gx - nsave, blkg, chunks, seqs, H, dout, doo, dht, dhto, has_dht, dUg, dSsave, dh0,
            dh0o, has_dh0);
}
