/* kda_tc_bwd.cl: the KDA backward on the tile interface (issue 9). Built as
 * "tile+kda_common+kda_tc_bwd" with kda_common's -DKD -DVD (multiples of 16, <= 128), the
 * tile implementation's options and -DTB_NW (warps of a state work-group). Every product
 * over K or V is tile_mma (D[16 x 8] += A[16 x 16] B[16 x 8], bf16 operands, fp32
 * accumulators). The per-chunk factors come from the portable kda_prep (fp32, rounded to
 * bf16 when staged here):
 *   W, Qg, Kd [chunks, H, 16, K], U [chunks, H, 16, V], Aqk [chunks, H, 16, 16], gl [chunks, H, K]
 * with the forward  Vnew = U - W S,  O = Qg S + Aqk Vnew,  S' = gl (.) S + Kd^T Vnew.
 *
 * kda_tcb_fwd_save, head-parallel (TB_NW warps of one (sequence, head), 8 columns of V per
 *   warp, S in fp32 accumulators as the forward's state pass): the forward again, keeping
 *   the state entering each chunk S_c [chunks, H, K, V] and Vnew [chunks, H, 16, V], both
 *   bf16 (every later use is a bf16 tile operand, so bf16 storage loses nothing there and
 *   halves the largest buffers' traffic; only dgl's elementwise sum sees the rounding).
 * kda_tcb_state_bwd, head-parallel, chunks in reverse, dS (the gradient of the state after
 *   the chunk) in fp32 accumulators:
 *     dVnew = Aqk^T dO + Kd dS   (-> dU, fp32),   dS <- gl (.) dS + Qg^T dO - W^T dVnew,
 *   keeping every chunk's dS [chunks, H, K, V] bf16 and dS at the start as dinitial_state.
 * kda_tcb_inter, token-parallel (4 warps per (chunk, head)), sums over V in slices of 32:
 *     dQg = dO S_c^T,  dW = -dVnew S_c^T,  dKd = Vnew dS^T  [16, K],
 *     dAqk = dO Vnew^T (c <= r) [16, 16],  dgl = rowsum(S_c (.) dS) [K]  (fp32 outputs),
 *   the inputs of kda_tcb_chunk (kda_tc_bwdc.cl), which finishes the backward. */
#ifndef TB_NW
#define TB_NW 2
#endif
#if KD % 16 || VD % 16
#error "kda_tc_bwd needs KD and VD multiples of 16"
#endif

#define TB_NT (32 * TB_NW) /* work-items of a state work-group */
#define TB_LDK (KD + 8)    /* padded bf16 rows of K-wide local tiles (even: paired loads) */
#define TB_LDA 24          /* padded bf16 rows of 16-wide local tiles */
#define TB_NMT (KD / 16)   /* 16-row tiles of a warp's state slice [K, 8] */
#define TB_AL __attribute__((aligned(16)))

#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
#define TB_UNROLL _Pragma("unroll")
#else
/* unrolled, the portable tiles make straight-line code that PoCL compiles slowly */
#define TB_UNROLL _Pragma("unroll 1")
#endif

/* The next chunk's tiles travel through registers: loaded from global memory while the
 * current chunk computes, converted to bf16 into local memory at the top of the next. */
#define TB_F4 (CH * KD / 4)                 /* float4 of a [16][K] fp32 tile */
#define TB_PF ((TB_F4 + TB_NT - 1) / TB_NT) /* ... per work-item */
#define TB_PA ((CH * CH / 4 + TB_NT - 1) / TB_NT) /* float4 of Aqk per work-item */

inline void tb_fetch(__global const float4 *src, float4 *r, int lid)
{
  TB_UNROLL
  for (int p = 0; p < TB_PF; p++) {
    const int e = lid + p * TB_NT;
    if (e < TB_F4) r[p] = src[e];
  }
}
/* Four fp32 as bf16 at dst[0..3]. */
inline void tb_put4(__local ushort *dst, float4 x)
{
  dst[0] = f32_to_bf16(x.x);
  dst[1] = f32_to_bf16(x.y);
  dst[2] = f32_to_bf16(x.z);
  dst[3] = f32_to_bf16(x.w);
}
/* A [16][K] tile from tb_fetch's registers into bf16 local rows of TB_LDK. */
inline void tb_put(const float4 *r, __local ushort *dst, int lid)
{
  TB_UNROLL
  for (int p = 0; p < TB_PF; p++) {
    const int e = lid + p * TB_NT;
    if (e < TB_F4) tb_put4(dst + (4 * e / KD) * TB_LDK + 4 * e % KD, r[p]);
  }
}

/* An accumulator tile's rows g and g + 8 (columns 2t, 2t + 1 each) as bf16 pairs at
 * p[row ld + 2t]: one 4-byte store per pair (p and ld even). */
inline void tb_store_c_bf16(tile_c c, __global ushort *p, ulong ld, int lane)
{
  const int g = lane >> 2, t2 = (lane & 3) << 1;
  *(__global uint *)(p + (ulong)g * ld + t2) = (uint)f32_to_bf16(c.v[0]) | ((uint)f32_to_bf16(c.v[1]) << 16);
  *(__global uint *)(p + (ulong)(g + 8) * ld + t2) = (uint)f32_to_bf16(c.v[2]) | ((uint)f32_to_bf16(c.v[3]) << 16);
}

/* The sync between a warp's writes of its own local scratch and its reads: mid-chunk, the
 * register-staged passes keep their work-group barrier (wsync 0), the ring passes
 * (kda_tc_bwd_ring.cl) take a warp barrier on PTX (wsync 1). */
#define TB_MID_SYNC(wsync)                                                                  \
  do {                                                                                      \
    if (wsync) TILE_WARP_SYNC();                                                            \
    else barrier(CLK_LOCAL_MEM_FENCE);                                                      \
  } while (0)

/* One chunk of the save pass after its staging: Vnew = U - W S (stored bf16 at Vnsave and
 * as Vnew^T in vt), then S = gl (.) S + Kd^T Vnew and its bf16 copy in st. */
__attribute__((always_inline)) inline void
tcb_save_chunk(tile_c *S, float2 u0, float2 u1, __local const ushort *Wl, __local const ushort *Kl,
               __local const float *gl, __local ushort *st, __local ushort *vt, __global ushort *vnp,
               int lane, int wsync)
{
  const int g = lane >> 2;
  tile_c ws = tile_c_zero();
  TB_UNROLL
  for (int ks = 0; ks < TB_NMT; ks++)
    tile_mma(&ws, tile_load_a_bf16(Wl + 16 * ks, TB_LDK, lane), tile_load_bt_bf16(st + 16 * ks, TB_LDK, lane));
  tile_c vn;
  vn.v[0] = u0.x - ws.v[0];
  vn.v[1] = u0.y - ws.v[1];
  vn.v[2] = u1.x - ws.v[2];
  vn.v[3] = u1.y - ws.v[3];
  tb_store_c_bf16(vn, vnp, VD, lane);
  for (int i = 0; i < 4; i++) vt[tile_c_col(lane, i) * TB_LDA + tile_c_row(lane, i)] = f32_to_bf16(vn.v[i]);
  TB_MID_SYNC(wsync); /* Vnew^T complete; every read of S^T is done */
  const tile_b bv = tile_load_bt_bf16(vt, TB_LDA, lane);
  TB_UNROLL
  for (int m = 0; m < TB_NMT; m++) {
    const float ga = gl[16 * m + g], gb = gl[16 * m + g + 8];
    S[m].v[0] *= ga;
    S[m].v[1] *= ga;
    S[m].v[2] *= gb;
    S[m].v[3] *= gb;
    tile_mma(&S[m], tile_load_at_bf16(Kl + 16 * m, TB_LDK, lane), bv);
    for (int i = 0; i < 4; i++)
      st[tile_c_col(lane, i) * TB_LDK + 16 * m + tile_c_row(lane, i)] = f32_to_bf16(S[m].v[i]);
  }
}

/* One chunk of the reverse pass after its staging (dO^T in dot): dVnew = Aqk^T dO + Kd dS
 * (stored fp32 at dUp), then dS = gl (.) dS + Qg^T dO - W^T dVnew and its bf16 copy in dst. */
__attribute__((always_inline)) inline void
tcb_bwd_chunk(tile_c *dS, __local const ushort *Wl, __local const ushort *Ql, __local const ushort *Kl,
              __local const ushort *Al, __local const float *gl, __local ushort *dst, __local const ushort *dot,
              __local ushort *dvt, __global float *dUp, int lane, int wsync)
{
  tile_c dv = tile_c_zero();
  tile_mma(&dv, tile_load_at_bf16(Al, TB_LDA, lane), tile_load_bt_bf16(dot, TB_LDA, lane));
  TB_UNROLL
  for (int ks = 0; ks < TB_NMT; ks++)
    tile_mma(&dv, tile_load_a_bf16(Kl + 16 * ks, TB_LDK, lane), tile_load_bt_bf16(dst + 16 * ks, TB_LDK, lane));
  vstore2((float2)(dv.v[0], dv.v[1]), 0, dUp + (lane >> 2) * VD + ((lane & 3) << 1));
  vstore2((float2)(dv.v[2], dv.v[3]), 0, dUp + ((lane >> 2) + 8) * VD + ((lane & 3) << 1));
  for (int i = 0; i < 4; i++) dvt[tile_c_col(lane, i) * TB_LDA + tile_c_row(lane, i)] = f32_to_bf16(-dv.v[i]);
  TB_MID_SYNC(wsync); /* -dVnew^T complete; every read of dS^T is done */
  const tile_b bo = tile_load_bt_bf16(dot, TB_LDA, lane), bv = tile_load_bt_bf16(dvt, TB_LDA, lane);
  TB_UNROLL
  for (int m = 0; m < TB_NMT; m++) {
    const float ga = gl[16 * m + (lane >> 2)], gb = gl[16 * m + (lane >> 2) + 8];
    dS[m].v[0] *= ga;
    dS[m].v[1] *= ga;
    dS[m].v[2] *= gb;
    dS[m].v[3] *= gb;
    tile_mma(&dS[m], tile_load_at_bf16(Ql + 16 * m, TB_LDK, lane), bo);
    tile_mma(&dS[m], tile_load_at_bf16(Wl + 16 * m, TB_LDK, lane), bv);
    for (int i = 0; i < 4; i++)
      dst[tile_c_col(lane, i) * TB_LDK + 16 * m + tile_c_row(lane, i)] = f32_to_bf16(dS[m].v[i]);
  }
}

/* ---- kda_tcb_fwd_save ---------------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(TB_NT, 1, 1)))
void kda_tcb_fwd_save(__global const float *Wg, __global const float *Ug, __global const float *Kdg,
                      __global const float *glg, __global const int2 *seqs, int H,
                      __global const float *h0, ulong h0o, int has_h0, __global ushort *Ssave,
                      __global ushort *Vnsave)
{
  /* (lib/kda_tc_bwd.c counts these bytes) */
  __local ushort Wl[CH * TB_LDK] TB_AL, Kl[CH * TB_LDK] TB_AL; /* W, Kd [16][K] bf16 */
  __local float gl[KD];
  __local ushort St[TB_NW][8][TB_LDK] TB_AL; /* bf16 S^T of each warp's 8 columns */
  __local ushort Vt[TB_NW][8][TB_LDA] TB_AL; /* bf16 Vnew^T */
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int j0 = ((int)get_group_id(0) * TB_NW + warp) * 8; /* this warp's V columns */
  const int g = lane >> 2, t2 = (lane & 3) << 1;
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD;
  __local ushort *st = &St[warp][0][0], *vt = &Vt[warp][0][0];

  tile_c S[TB_NMT]; /* S [K, 8]: rows 16 m .. 16 m + 15 */
  TB_UNROLL
  for (int m = 0; m < TB_NMT; m++)
    for (int i = 0; i < 4; i++) {
      const int row = 16 * m + tile_c_row(lane, i), col = tile_c_col(lane, i);
      S[m].v[i] = has_h0 ? h0[h0o + (sbase + row) * VD + j0 + col] : 0.0f;
      st[col * TB_LDK + row] = f32_to_bf16(S[m].v[i]);
    }
  const int2 sq = seqs[n];
  float4 pw[TB_PF], pk[TB_PF], pg = (float4)(0.0f);
  float2 pu0 = (float2)(0.0f), pu1 = (float2)(0.0f); /* U at (g, 2t..), (g + 8, 2t..) */
#define TB_FETCH_FWD(cc)                                                                    \
  do {                                                                                      \
    const ulong b_ = (ulong)(cc) * (ulong)H + (ulong)h;                                     \
    tb_fetch((__global const float4 *)(Wg + b_ * CH * KD), pw, lid);                        \
    tb_fetch((__global const float4 *)(Kdg + b_ * CH * KD), pk, lid);                       \
    if (lid < KD / 4) pg = vload4(lid, glg + b_ * KD);                                      \
    pu0 = vload2(0, Ug + (b_ * CH + g) * VD + j0 + t2);                                     \
    pu1 = vload2(0, Ug + (b_ * CH + g + 8) * VD + j0 + t2);                                 \
  } while (0)
  if (sq.y > 0) TB_FETCH_FWD(sq.x);
  for (int ci = 0; ci < sq.y; ci++) {
    const ulong base = (ulong)(sq.x + ci) * (ulong)H + (ulong)h;
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk is done with Wl, Kl, gl */
    tb_put(pw, Wl, lid);
    tb_put(pk, Kl, lid);
    if (lid < KD / 4) vstore4(pg, lid, gl);
    const float2 u0 = pu0, u1 = pu1;
    TB_UNROLL
    for (int m = 0; m < TB_NMT; m++) tb_store_c_bf16(S[m], Ssave + (base * KD + 16 * m) * VD + j0, VD, lane);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ci + 1 < sq.y) TB_FETCH_FWD(sq.x + ci + 1);
    tcb_save_chunk(S, u0, u1, Wl, Kl, gl, st, vt, Vnsave + base * CH * VD + j0, lane, 0);
  }
#undef TB_FETCH_FWD
}

/* ---- kda_tcb_state_bwd --------------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(TB_NT, 1, 1)))
void kda_tcb_state_bwd(__global const float *Wg, __global const float *Ag, __global const float *Qgg,
                       __global const float *Kdg, __global const float *glg,
                       __global const int2 *chunks, __global const int2 *seqs, int H,
                       __global const float *dout, ulong doo, __global const float *dht, ulong dhto,
                       int has_dht, __global float *dUg, __global ushort *dSsave,
                       __global float *dh0, ulong dh0o, int has_dh0)
{
  /* (lib/kda_tc_bwd.c counts these bytes) */
  __local ushort Wl[CH * TB_LDK] TB_AL, Ql[CH * TB_LDK] TB_AL, Kl[CH * TB_LDK] TB_AL;
  __local ushort Al[CH * TB_LDA] TB_AL; /* Aqk [16][16] */
  __local float gl[KD];
  __local ushort dSt[TB_NW][8][TB_LDK] TB_AL; /* bf16 dS^T of each warp's 8 columns */
  __local ushort dOt[TB_NW][8][TB_LDA] TB_AL; /* bf16 dO^T */
  __local ushort dVt[TB_NW][8][TB_LDA] TB_AL; /* bf16 -dVnew^T */
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int j0 = ((int)get_group_id(0) * TB_NW + warp) * 8;
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD;
  __local ushort *dst = &dSt[warp][0][0], *dot = &dOt[warp][0][0], *dvt = &dVt[warp][0][0];

  tile_c dS[TB_NMT]; /* dS [K, 8], fp32 */
  TB_UNROLL
  for (int m = 0; m < TB_NMT; m++)
    for (int i = 0; i < 4; i++) {
      const int row = 16 * m + tile_c_row(lane, i), col = tile_c_col(lane, i);
      dS[m].v[i] = has_dht ? dht[dhto + (sbase + row) * VD + j0 + col] : 0.0f;
      dst[col * TB_LDK + row] = f32_to_bf16(dS[m].v[i]);
    }
  const int2 sq = seqs[n];
  /* registers of the next chunk: W, Qg, Kd shares, Aqk and gl float4s, this lane's four dO
   * entries (rows lane / 8 + 4 i, column lane % 8 of the warp's columns) */
  float4 pw[TB_PF], pq[TB_PF], pk[TB_PF], pa[TB_PA], pg = (float4)(0.0f);
  float pd[4];
#define TB_FETCH_BWD(cc)                                                                    \
  do {                                                                                      \
    const ulong b_ = (ulong)(cc) * (ulong)H + (ulong)h;                                     \
    const int2 ch_ = chunks[cc];                                                            \
    tb_fetch((__global const float4 *)(Wg + b_ * CH * KD), pw, lid);                        \
    tb_fetch((__global const float4 *)(Qgg + b_ * CH * KD), pq, lid);                       \
    tb_fetch((__global const float4 *)(Kdg + b_ * CH * KD), pk, lid);                       \
    for (int p_ = 0; p_ < TB_PA; p_++)                                                      \
      if (lid + p_ * TB_NT < CH * CH / 4) pa[p_] = vload4(lid + p_ * TB_NT, Ag + b_ * CH * CH); \
    if (lid < KD / 4) pg = vload4(lid, glg + b_ * KD);                                      \
    for (int i_ = 0; i_ < 4; i_++) {                                                        \
      const int row_ = (lane >> 3) + 4 * i_;                                                \
      pd[i_] = row_ < ch_.y ? dout[doo + ((ulong)(ch_.x + row_) * (ulong)H + (ulong)h) * VD + j0 + (lane & 7)] \
                            : 0.0f;                                                         \
    }                                                                                       \
  } while (0)
  if (sq.y > 0) TB_FETCH_BWD(sq.x + sq.y - 1);
  for (int ci = sq.y - 1; ci >= 0; ci--) {
    const ulong base = (ulong)(sq.x + ci) * (ulong)H + (ulong)h;
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk is done with the staged tiles */
    tb_put(pw, Wl, lid);
    tb_put(pq, Ql, lid);
    tb_put(pk, Kl, lid);
    for (int p = 0; p < TB_PA; p++) {
      const int e = lid + p * TB_NT; /* Aqk elements 4 e .. 4 e + 3 */
      if (e < CH * CH / 4) tb_put4(Al + (e >> 2) * TB_LDA + 4 * (e & 3), pa[p]);
    }
    if (lid < KD / 4) vstore4(pg, lid, gl);
    for (int i = 0; i < 4; i++) dot[(lane & 7) * TB_LDA + (lane >> 3) + 4 * i] = f32_to_bf16(pd[i]);
    TB_UNROLL
    for (int m = 0; m < TB_NMT; m++) /* dS after this chunk, for kda_tcb_inter */
      tb_store_c_bf16(dS[m], dSsave + (base * KD + 16 * m) * VD + j0, VD, lane);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ci > 0) TB_FETCH_BWD(sq.x + ci - 1);
    tcb_bwd_chunk(dS, Wl, Ql, Kl, Al, gl, dst, dot, dvt, dUg + base * CH * VD + j0, lane, 0);
  }
#undef TB_FETCH_BWD
  if (has_dh0) {
    TB_UNROLL
    for (int m = 0; m < TB_NMT; m++)
      for (int i = 0; i < 4; i++)
        dh0[dh0o + (sbase + 16 * m + tile_c_row(lane, i)) * VD + j0 + tile_c_col(lane, i)] = dS[m].v[i];
  }
}

/* ---- kda_tcb_inter ------------------------------------------------------------------------- */

#define TB_IW 128              /* kda_tcb_inter: 4 warps */
#define TB_IS 32               /* V columns per slice */
#define TB_LDI (TB_IS + 8)     /* padded bf16 rows of a slice */
#define TB_NTK (KD / 8)        /* 8-column output tiles of a [16, K] gradient */
#define TB_NTW ((TB_NTK + 3) / 4) /* ... per warp: tiles warp, warp + 4, ... */

__kernel __attribute__((reqd_work_group_size(TB_IW, 1, 1)))
void kda_tcb_inter(__global const ushort *Ssave, __global const ushort *dSsave,
                   __global const ushort *Vnsave, __global const float *dUg,
                   __global const float *dout, ulong doo, __global const int2 *chunks, int H,
                   __global float *dQgg, __global float *dWg, __global float *dKdg,
                   __global float *dglg, __global float *dAg)
{
  /* (lib/kda_tc_bwd.c counts these bytes) */
  __local ushort Sl[KD * TB_LDI] TB_AL, dSl[KD * TB_LDI] TB_AL; /* S_c, dS [K][slice] */
  __local ushort Ol[CH * TB_LDI] TB_AL, Ul[CH * TB_LDI] TB_AL;  /* dO, -dVnew [16][slice] */
  __local ushort Vl[CH * TB_LDI] TB_AL;                         /* Vnew [16][slice] */
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int c = (int)get_group_id(0), h = (int)get_group_id(1);
  const int2 ch = chunks[c];
  const ulong base = (ulong)c * (ulong)H + (ulong)h;
  tile_c aQ[TB_NTW], aW[TB_NTW], aK[TB_NTW], aA = tile_c_zero();
  for (int w = 0; w < TB_NTW; w++) aQ[w] = aW[w] = aK[w] = tile_c_zero();
  float agl = 0.0f;
  for (int jt = 0; jt < VD; jt += TB_IS) {
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous slice is done */
    /* bf16 rows in 8-element (16-byte) pieces: VD and jt are multiples of 16, so a piece is
     * wholly inside V or wholly past it (zeros) */
    for (int e = lid; e < KD * (TB_IS / 8); e += TB_IW) {
      const int d = e / (TB_IS / 8), jc = 8 * (e % (TB_IS / 8)), j = jt + jc;
      const ulong gi = ((base * KD + d) * VD + j) / 8;
      *(__local uint4 *)(Sl + d * TB_LDI + jc) = j < VD ? ((__global const uint4 *)Ssave)[gi] : (uint4)(0);
      *(__local uint4 *)(dSl + d * TB_LDI + jc) = j < VD ? ((__global const uint4 *)dSsave)[gi] : (uint4)(0);
    }
    for (int e = lid; e < CH * (TB_IS / 8); e += TB_IW) {
      const int r = e / (TB_IS / 8), jc = 8 * (e % (TB_IS / 8)), j = jt + jc;
      *(__local uint4 *)(Vl + r * TB_LDI + jc) =
          j < VD ? ((__global const uint4 *)Vnsave)[((base * CH + r) * VD + j) / 8] : (uint4)(0);
    }
    for (int e = lid; e < CH * TB_IS; e += TB_IW) {
      const int r = e / TB_IS, jc = e % TB_IS, j = jt + jc;
      const float o = j < VD && r < ch.y ? dout[doo + ((ulong)(ch.x + r) * (ulong)H + (ulong)h) * VD + j] : 0.0f;
      Ol[r * TB_LDI + jc] = f32_to_bf16(o);
      Ul[r * TB_LDI + jc] = f32_to_bf16(j < VD ? -dUg[(base * CH + r) * VD + j] : 0.0f);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < KD)
      for (int jc = 0; jc < TB_IS; jc++)
        agl += bf16_to_f32(Sl[lid * TB_LDI + jc]) * bf16_to_f32(dSl[lid * TB_LDI + jc]);
    TB_UNROLL
    for (int ks = 0; ks < TB_IS / 16; ks++) {
      const tile_a ao = tile_load_a_bf16(Ol + 16 * ks, TB_LDI, lane);
      const tile_a au = tile_load_a_bf16(Ul + 16 * ks, TB_LDI, lane);
      const tile_a av = tile_load_a_bf16(Vl + 16 * ks, TB_LDI, lane);
      TB_UNROLL
      for (int w = 0; w < TB_NTW; w++) {
        const int nt = warp + 4 * w; /* uniform over the warp */
        if (nt < TB_NTK) {
          /* B[k = v][n = d] = S[8 nt + n][v] */
          const tile_b bs = tile_load_bt_bf16(Sl + 8 * nt * TB_LDI + 16 * ks, TB_LDI, lane);
          tile_mma(&aQ[w], ao, bs);
          tile_mma(&aW[w], au, bs);
          tile_mma(&aK[w], av, tile_load_bt_bf16(dSl + 8 * nt * TB_LDI + 16 * ks, TB_LDI, lane));
        }
      }
      if (warp < 2) /* dAqk columns 8 warp .. 8 warp + 7: B[k = v][n = c] = Vnew[c][v] */
        tile_mma(&aA, ao, tile_load_bt_bf16(Vl + 8 * warp * TB_LDI + 16 * ks, TB_LDI, lane));
    }
  }
  for (int w = 0; w < TB_NTW; w++) {
    const int nt = warp + 4 * w;
    if (nt < TB_NTK)
      for (int i = 0; i < 4; i++) {
        const ulong e = (base * CH + tile_c_row(lane, i)) * KD + 8 * nt + tile_c_col(lane, i);
        dQgg[e] = aQ[w].v[i];
        dWg[e] = aW[w].v[i];
        dKdg[e] = aK[w].v[i];
      }
  }
  if (warp < 2)
    for (int i = 0; i < 4; i++) {
      const int row = tile_c_row(lane, i), col = 8 * warp + tile_c_col(lane, i);
      dAg[base * CH * CH + row * CH + col] = col <= row ? aA.v[i] : 0.0f;
    }
  if (lid < KD) dglg[base * KD + lid] = agl;
}
