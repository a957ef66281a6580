/* kda_tile_state16.cl: the 16-token state pass of the KDA forward on tiles (kda_tile_state
 * built with -DTC_STEP=16: CLMOE_KDA_TC_STEP=16), appended to kda_tile.cl in the program
 * ("tile+kda_common+kda_tile+kda_tile_state16+kda_tile_state"), whose prep writes the blocks
 * it reads in TC_STEP 16's layout (TC_IW in kda_tile.cl). What it computes: kda_tile.cl's
 * opening comment. Nothing here for the default TC_STEP 64 (kda_tile_state.cl) or the
 * backward's prep (-DTC_BWD=1). */

/* ---- kda_tile_state (TC_STEP 16) ----------------------------------------------------------- */
#if TC_STEP != 64 && !(defined(TC_BWD) && TC_BWD)

/* The block's uint4 e in local memory: rows of W and Qg padded to TC_LDK, the 16-wide
 * rows of Kd^T and Aqk to TC_LDA, gl packed after them (kda_common.cl's KDA_TILE_S16_*). */
#define TC_RS4 (TC_LDK / 8)
#define TC_KT4 KDA_TILE_S16_KT4(KD)
#define TC_LA4 KDA_TILE_S16_LA4(KD)
#define TC_GL4 KDA_TILE_S16_GL4(KD)
#define TC_LOC4 KDA_TILE_S16_LOC4(KD)
inline int tc_local4(int e)
{
  if (e < 4 * KD) return (e / (KD / 8)) * TC_RS4 + e % (KD / 8);
  e -= 4 * KD;
  if (e < 2 * KD + 32) return TC_KT4 + (e >> 1) * (TC_LDA / 8) + (e & 1);
  return TC_GL4 + e - 2 * KD - 32;
}

#define TC_NT (32 * TC_NW)
#define TC_NPF ((TC_BLK4 + TC_NT - 1) / TC_NT) /* uint4 of a block per work-item */

/* One chunk of the state pass, its block in local memory (Wl, Ql, Kl, Al, gl), U at this
 * lane's accumulator positions in u0 (row g) and u1 (row g + 8); S^T (bf16) in st. Every
 * work-item calls it (it holds a barrier). */
__attribute__((always_inline)) inline void
tc_state_chunk(tile_c *S, float2 u0, float2 u1, int2 ch, int h, int H, int j0, int lane,
               __local const ushort *Wl, __local const ushort *Ql, __local const ushort *Kl,
               __local const ushort *Al, __local const float *gl, __local ushort *st,
               __local ushort *vt, __global out_t *o, ulong oo)
{
  const int g0 = tile_c_row(lane, 0), g1 = tile_c_row(lane, 2); /* this lane's rows (tile.cl) */
  /* W S and Qg S over KD in 16-row steps (two chains each, for latency). */
  tile_c ws0 = tile_c_zero(), ws1 = tile_c_zero(), qs0 = tile_c_zero(), qs1 = tile_c_zero();
#pragma unroll
  for (int ks = 0; ks < TC_NMT; ks += 2) {
    tile_b b = tile_load_bt_bf16(st + 16 * ks, TC_LDK, lane);
    tile_mma(&ws0, tile_load_a_bf16(Wl + 16 * ks, TC_LDK, lane), b);
    tile_mma(&qs0, tile_load_a_bf16(Ql + 16 * ks, TC_LDK, lane), b);
    if (ks + 1 < TC_NMT) {
      b = tile_load_bt_bf16(st + 16 * (ks + 1), TC_LDK, lane);
      tile_mma(&ws1, tile_load_a_bf16(Wl + 16 * (ks + 1), TC_LDK, lane), b);
      tile_mma(&qs1, tile_load_a_bf16(Ql + 16 * (ks + 1), TC_LDK, lane), b);
    }
  }
  tile_c vn, oc;
  /* u0: the row of elements 0, 1; u1: of 2, 3 (tile.cl) */
  TILE_C_AT(vn, 0) = u0.x - (TILE_C_AT(ws0, 0) + TILE_C_AT(ws1, 0));
  TILE_C_AT(vn, 1) = u0.y - (TILE_C_AT(ws0, 1) + TILE_C_AT(ws1, 1));
  TILE_C_AT(vn, 2) = u1.x - (TILE_C_AT(ws0, 2) + TILE_C_AT(ws1, 2));
  TILE_C_AT(vn, 3) = u1.y - (TILE_C_AT(ws0, 3) + TILE_C_AT(ws1, 3));
  for (int i = 0; i < TILE_C_NE; i++) {
    vt[tile_c_col(lane, i) * TC_LDA + tile_c_row(lane, i)] = f32_to_bf16(TILE_C_AT(vn, i));
    TILE_C_AT(oc, i) = TILE_C_AT(qs0, i) + TILE_C_AT(qs1, i);
  }
  TILE_WARP_SYNC(); /* Vnew^T complete; every read of S^T is done (the warp's scratch) */
  const tile_b bv = tile_load_bt_bf16(vt, TC_LDA, lane);
  tile_mma(&oc, tile_load_a_bf16(Al, TC_LDA, lane), bv);
  for (int i = 0; i < TILE_C_NE; i++) {
    const int row = tile_c_row(lane, i);
    if (row < ch.y)
      if (!(TC_DIAG & 4)) STORE_OUT(o, oo + ((ulong)(ch.x + row) * (ulong)H + (ulong)h) * VD + j0 + tile_c_col(lane, i), TILE_C_AT(oc, i));
  }
  /* S = gl (.) S + Kd^T Vnew, then its bf16 copy for the next chunk. */
#pragma unroll
  for (int m = 0; m < TC_NMT; m++) {
    const float ga = gl[16 * m + g0], gb = gl[16 * m + g1];
    TILE_C_AT(S[m], 0) *= ga;
    TILE_C_AT(S[m], 1) *= ga;
    TILE_C_AT(S[m], 2) *= gb;
    TILE_C_AT(S[m], 3) *= gb;
    tile_mma(&S[m], tile_load_a_bf16(Kl + 16 * m * TC_LDA, TC_LDA, lane), bv);
    for (int i = 0; i < TILE_C_NE; i++)
      if (!(TC_DIAG & 8)) st[tile_c_col(lane, i) * TC_LDK + 16 * m + tile_c_row(lane, i)] = f32_to_bf16(TILE_C_AT(S[m], i));
  }
}

/* Global -> registers: chunk cc's block share of this work-item and its U entries. */
#define TC_LOAD(pf, u0, u1, cc)                                                             \
  do {                                                                                      \
    const ulong b_ = (ulong)(cc) * (ulong)H + (ulong)h;                                     \
    _Pragma("unroll") for (int p = 0; p < TC_NPF; p++) {                                    \
      const int e = lid + p * TC_NT;                                                        \
      if (e < TC_BLK4) pf[p] = (TC_DIAG & 1) ? (uint4)(0) : blkg[b_ * TC_BLK4 + e];        \
    }                                                                                       \
    u0 = vload2(0, Ug + (b_ * CH + g) * VD + j0 + t2);                                      \
    u1 = vload2(0, Ug + (b_ * CH + g + 8) * VD + j0 + t2);                                  \
  } while (0)
/* Registers -> local memory, between barriers (the previous chunk is done with it). */
#define TC_STAGE(pf)                                                                        \
  do {                                                                                      \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    _Pragma("unroll") for (int p = 0; p < TC_NPF; p++) {                                    \
      const int e = lid + p * TC_NT;                                                        \
      if (e < TC_BLK4) if (!(TC_DIAG & 2)) tl[tc_local4(e)] = pf[p];                        \
    }                                                                                       \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
  } while (0)
#define TC_CHUNK(ci, u0, u1)                                                                \
  tc_state_chunk(S, u0, u1, chunks[sq.x + (ci)], h, H, j0, lane, Wl, Ql, Kl, Al, gl, st, vt, o, oo)

/* TC_PF: chunks of look-ahead of the block loads (1 or 2 register sets): global latency
 * is hidden behind that many chunks of compute. */
#ifndef TC_PF
#define TC_PF 2
#endif

__kernel __attribute__((reqd_work_group_size(TC_NT, 1, 1)))
void kda_tile_state(__global const uint4 *blkg, __global const float *Ug,
                    __global const int2 *chunks, __global const int2 *seqs, int H,
                    __global const float *h0, ulong h0o, int has_h0, __global out_t *o, ulong oo,
                    __global float *ht, ulong hto, int has_ht, __global ushort *Ssave_unused,
                    __global ushort *Vnsave_unused) /* (the 64-token pass's, which saves) */
{
  (void)Ssave_unused, (void)Vnsave_unused;
  __local uint4 tl[TC_LOC4]; /* (bytes in all: KDA_TILE_STATE16_LOCAL_BYTES) */
  __local ushort St[TC_NW][8][TC_LDK] TC_AL; /* bf16 S^T of each warp's 8 columns */
  __local ushort Vt[TC_NW][8][TC_LDA] TC_AL; /* bf16 Vnew^T */
#if !TILE_HAS_MATRIX_UNIT /* (checked on the portable builds, which CI runs) */
  KDA_LAYOUT_CHECK(sizeof tl + sizeof St + sizeof Vt == KDA_TILE_STATE16_LOCAL_BYTES(KD, TC_NW));
#endif
  __local const ushort *Wl = (__local const ushort *)tl, *Ql = Wl + 16 * TC_LDK;
  __local const ushort *Kl = (__local const ushort *)(tl + TC_KT4); /* Kd^T, rows TC_LDA */
  __local const ushort *Al = (__local const ushort *)(tl + TC_LA4);
  __local const float *gl = (__local const float *)(tl + TC_GL4);
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int j0 = ((int)get_group_id(0) * TC_NW + warp) * 8; /* this warp's V columns */
  const int g = tile_c_row(lane, 0), t2 = tile_c_col(lane, 0); /* rows g, g + 8; columns t2, + 1 */
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD;
  __local ushort *st = &St[warp][0][0], *vt = &Vt[warp][0][0];

  tile_c S[TC_NMT];
#pragma unroll
  for (int m = 0; m < TC_NMT; m++)
    for (int i = 0; i < TILE_C_NE; i++) {
      const int row = 16 * m + tile_c_row(lane, i), col = tile_c_col(lane, i);
      TILE_C_AT(S[m], i) = has_h0 ? h0[h0o + (sbase + row) * VD + j0 + col] : 0.0f;
      st[col * TC_LDK + row] = f32_to_bf16(TILE_C_AT(S[m], i));
    }
  const int2 sq = seqs[n];
  uint4 pa[TC_NPF];
  float2 ua0 = (float2)(0.0f), ua1 = (float2)(0.0f), u0, u1; /* U at (g, 2t..), (g + 8, 2t..) */
  if (sq.y > 0) TC_LOAD(pa, ua0, ua1, sq.x);
#if TC_PF == 2
  uint4 pb[TC_NPF];
  float2 ub0 = (float2)(0.0f), ub1 = (float2)(0.0f);
  if (sq.y > 1) TC_LOAD(pb, ub0, ub1, sq.x + 1);
  for (int ci = 0; ci < sq.y; ci += 2) {
    TC_STAGE(pa);
    u0 = ua0, u1 = ua1;
    if (ci + 2 < sq.y) TC_LOAD(pa, ua0, ua1, sq.x + ci + 2);
    TC_CHUNK(ci, u0, u1);
    if (ci + 1 < sq.y) { /* uniform over the work-group */
      TC_STAGE(pb);
      u0 = ub0, u1 = ub1;
      if (ci + 3 < sq.y) TC_LOAD(pb, ub0, ub1, sq.x + ci + 3);
      TC_CHUNK(ci + 1, u0, u1);
    }
  }
#else
  for (int ci = 0; ci < sq.y; ci++) {
    TC_STAGE(pa);
    u0 = ua0, u1 = ua1;
    if (ci + 1 < sq.y) TC_LOAD(pa, ua0, ua1, sq.x + ci + 1);
    TC_CHUNK(ci, u0, u1);
  }
#endif
  barrier(CLK_LOCAL_MEM_FENCE);
  if (has_ht) {
#pragma unroll
    for (int m = 0; m < TC_NMT; m++)
      for (int i = 0; i < TILE_C_NE; i++)
        ht[hto + (sbase + 16 * m + tile_c_row(lane, i)) * VD + j0 + tile_c_col(lane, i)] = TILE_C_AT(S[m], i);
  }
}
#endif /* TC_STEP != 64 && !TC_BWD */
