/* kda_tile_bwd_chunk.cl: the per-chunk part of the KDA backward on the tile interface,
 * the tile counterpart of kda_bwd.cl's kda_bwd_chunk. Built as
 * "tile+kda_common+kda_tile_warp+kda_tile_bwd_chunk" (kda_tile_warp.cl: the warp-level helpers)
 * with kda_common's -DKD -DVD (multiples of 16, <= 128) and the tile options; bounded gate.
 *
 * kda_tile_bwd_chunk, token-parallel, 8 warps per (chunk, head). Warp w owns the 16 columns
 * 16 w .. 16 w + 15 of K (and of V): every per-element quantity lives in registers in the
 * accumulator layout of two 16 x 8 tiles (element e = 4 n + i of a lane: row
 * tile_c_row(lane, i), column 16 w + 8 n + tile_c_col(lane, i)), so that the products whose
 * results feed the elementwise work land where they are used, and column scans and sums are
 * warp shuffles (through local memory on the portable tiles). Steps:
 *  1. the factor gradients from the saved states, summed over V in 16-column slices that
 *     each warp streams for its own columns (cp.async ring on PTX):
 *       dQg = dO S_c^T,  dW = -dVnew S_c^T,  dKd = Vnew dS^T  [16, K],
 *       dAqk = dO Vnew^T (c <= r) [16, 16],  dgl = rowsum(S_c (.) dS) [K];
 *  2. the forward's factors again (gate, norms, sigmoid of beta, cumulative gate G, anchored
 *     Qp, Kp, Km with G0 the first row; P = Kp Km^T and Tm = (I + Akk)^-1 come from the
 *     backward prep's block), then back through
 *       W = Tm Kb (Kb = beta e^G kn),  U = Tm Vb (Vb = beta v),  Tm = (I + Akk)^-1,
 *       Akk = beta P (c < r),  Aqk = scale Qp Km^T (c <= r),
 *     the cumulative gate, the gate, beta and the L2 norms: dq, dk, dv, dg, dbeta, and
 *     per-chunk partials of ddt_bias and dA_log [chunks, H, K] (summed by kda_bwd.cl).
 * On tiles: the step 1 sums, Tm^T dW, Tm^T dU, dW Kb^T + dU Vb^T, dP Km, tA Km,
 * dP^T Kp + tA^T Qp (dP = d(Kp Km^T), tA = d(Qp Km^T)); fp32: the gradient through the
 * 16 x 16 inverse, the elementwise work. */
#if KD % 16 || VD % 16 || KD > 128 || VD > 128
#error "kda_tile_bwd_chunk needs KD and VD multiples of 16 up to 128"
#endif

/* (sizes from kda_common.cl's layouts, which the host reads too) */
#define TD_WG KDA_TILE_CHUNK_WG /* 8 warps per (chunk, head); warp w: columns 16 w .. 16 w + 15 */
#define TD_NW (TD_WG / 32)
#ifndef TD_PAIR
#define TD_PAIR 1          /* (chunk, head) pairs per work-group: 1 or 2 (lib/kda/kda_tile_bwd.c) */
#endif
#define TD_LDK KDA_TILE_LDK(KD) /* padded bf16 rows of K-wide local tiles */
#define TD_LDV KDA_TILE_LDV(VD)
#define TD_LDN KDA_TILE_LD16    /* bf16 rows of Vnew^T [V][16] */
#ifndef TD_NS
#define TD_NS 2            /* stages of a warp's ring: 2 or 3 (slices in flight: TD_NS - 1) */
#endif
#define TD_STG (2 * 16 * TD_LDR)           /* ushorts of a stage: S, dS */
#define TD_RING KDA_TILE_CHUNK_RING(TD_NS) /* ushorts of a warp's ring */
#if TD_NS == 2
#define TD_WAIT() TILE_CP_WAIT(1)
#elif TD_NS == 3
#define TD_WAIT() TILE_CP_WAIT(2)
#else
#error "TD_NS must be 2 or 3"
#endif
#define TD_AL __attribute__((aligned(16)))

inline uint td_pack2(float lo, float hi) { return (uint)f32_to_bf16(lo) | ((uint)f32_to_bf16(hi) << 16); }

/* Copies slice ks (16 rows of V) of the warp's 16 columns of S_c^T and dS^T into ring stage
 * ks % TD_NS (32 + 32 pieces of 16 bytes, two per lane) and commits a group either way. */
inline void td_issue(__local ushort *ring, __global const ushort *Ss, __global const ushort *dSs, ulong sbase,
                     int c0, int ks, int lane)
{
  if (ks < VD / 16) {
    const int row = lane >> 1, hoff = (lane & 1) << 3, j = 16 * ks + row;
    __local ushort *st = ring + (ks % TD_NS) * TD_STG + row * TD_LDR + hoff;
    const ulong o = (sbase + (ulong)j) * KD + (ulong)(c0 + hoff);
    tile_cp16(st, Ss + o, 16);
    tile_cp16(st + 16 * TD_LDR, dSs + o, 16);
  }
  tile_cp_commit();
}

/* Warp-wide sums of m quantities' row partials (out of td_rowsum) into red[m][warp][row]. */
#define TD_RED_PUT(q, p) \
  do { if (t == 0) red[q][warp][g] = (p)[0], red[q][warp][g + 8] = (p)[1]; } while (0)
inline float td_red_get(__local const float (*rq)[CH], int row)
{
  float s = 0.0f;
  for (int w = 0; w < TD_NW; w++) s += rq[w][row];
  return s;
}

__kernel __attribute__((reqd_work_group_size(TD_WG * TD_PAIR, 1, 1)))
void kda_tile_bwd_chunk(__global const store_t *q, ulong qo, __global const store_t *k, ulong ko,
                        __global const store_t *v, ulong vo, __global const store_t *z, ulong zo,
                        __global const store_t *bl, ulong bo, __global const float *A_log, ulong ao,
                        __global const float *dtb, ulong dto, __global const int2 *chunks, int nch, int H,
                        float scale, float lb, __global const ushort *blkg,
                        __global const ushort *Ssave, __global const ushort *dSsave,
                        __global const ushort *Vnsave, __global const float *dUg,
                        __global const float *dout, ulong doo,
                        __global float *dq, ulong dqo, __global float *dk, ulong dko,
                        __global float *dv, ulong dvo, __global float *dz, ulong dzo,
                        __global float *dbeta, ulong dbo, __global float *pddt, __global float *pdA)
{
  /* (bytes in all: KDA_TILE_CHUNK_LOCAL_BYTES a pair) Step 1's ring, dO and Vnew^T share a
   * pool with step 2's bf16 factors. With TD_PAIR 2 the halves of the work-group take two
   * chunks (every array twice): 512 work-items hold the compiler to 128 registers, so that
   * the SM runs 16 warps of this kernel (not 8 at 150-180 registers and 256 work-items). */
  __local ushort pool_[TD_PAIR][KDA_TILE_CHUNK_POOL(KD, VD, TD_NS)] TD_AL;
  __local ushort DU_[TD_PAIR][CH][TD_LDV] TD_AL; /* dVnew (bf16) */
  __local float Tm_[TD_PAIR][CH][TD_LDF], Pm_[TD_PAIR][CH][TD_LDF], M1_[TD_PAIR][CH][TD_LDF];
  __local float M4_[TD_PAIR][CH][TD_LDF], Mm_[TD_PAIR][CH][TD_LDF], tA_[TD_PAIR][CH][TD_LDF];
  __local float red_[TD_PAIR][3][TD_NW][CH], dglL_[TD_PAIR][KD], btL_[TD_PAIR][CH];
  const int sub = (int)get_local_id(0) / TD_WG; /* this half's chunk */
  const int lid = (int)get_local_id(0) % TD_WG, warp = lid >> 5, lane = lid & 31;
  /* this lane's accumulator rows g, g + 8 and columns 2 t, 2 t + 1 of each 8-column tile */
  const int g = tile_c_row(lane, 0), t = tile_c_col(lane, 0) >> 1, c0 = 16 * warp;
  const int hasK = c0 < KD, hasV = c0 < VD;
  const int cw = (int)get_group_id(0) * TD_PAIR + sub, h = (int)get_group_id(1);
  const int live = cw < nch, c = live ? cw : nch - 1; /* a dead half reads, never writes */
  const int2 ch = chunks[c];
  const int len = live ? ch.y : 0;
  __local ushort *pool = pool_[sub], (*DU)[TD_LDV] = DU_[sub];
  __local float (*Tm)[TD_LDF] = Tm_[sub], (*Pm)[TD_LDF] = Pm_[sub], (*M1)[TD_LDF] = M1_[sub];
  __local float (*M4)[TD_LDF] = M4_[sub], (*Mm)[TD_LDF] = Mm_[sub], (*tA)[TD_LDF] = tA_[sub];
  __local float (*red)[TD_NW][CH] = red_[sub], *dglL = dglL_[sub], *btL = btL_[sub];
  const ulong base = (ulong)c * (ulong)H + (ulong)h;
  const float ea = exp(A_log[ao + h]);
  TD_SCRATCH(TD_NW);
#if !TILE_HAS_LANE_SHUFFLE /* (the scratch of kda_tile_warp.cl) */
  KDA_LAYOUT_CHECK(sizeof pool_ + sizeof DU_ + sizeof Tm_ + sizeof Pm_ + sizeof M1_ + sizeof M4_ +
                       sizeof Mm_ + sizeof tA_ + sizeof red_ + sizeof dglL_ + sizeof btL_ +
                       sizeof scr_ ==
                   TD_PAIR * KDA_TILE_CHUNK_LOCAL_BYTES(KD, VD, TD_NS, 0));
#endif
  /* step 1's views of the pool */
  __local ushort *ring = pool + warp * TD_RING, *DO = pool + TD_NW * TD_RING, *VN = DO + CH * TD_LDV;
  /* step 2's */
  __local ushort *Qp = pool, *Kp = Qp + CH * TD_LDK, *Km = Kp + CH * TD_LDK;
  __local ushort *DW = Km + CH * TD_LDK, *DW2 = DW + CH * TD_LDK, *Vb = DW2 + CH * TD_LDK;

  /* ---- the ring's first slice; dO, dVnew, Vnew^T, Tm and P into local memory */
  for (int ks = 0; ks < TD_NS - 1; ks++)
    if (hasK) td_issue(ring, Ssave, dSsave, base * VD, c0, ks, lane);
  for (int e = lid; e < CH * VD / 4; e += TD_WG) {
    const int r = e / (VD / 4), j = 4 * (e % (VD / 4));
    const float4 o = r < len ? vload4(0, dout + doo + ((ulong)(ch.x + r) * (ulong)H + (ulong)h) * VD + j) : (float4)(0.0f);
    const float4 u = vload4(0, dUg + (base * CH + r) * VD + j);
    *(__local uint2 *)(DO + r * TD_LDV + j) = (uint2)(td_pack2(o.x, o.y), td_pack2(o.z, o.w));
    *(__local uint2 *)(&DU[r][j]) = (uint2)(td_pack2(u.x, u.y), td_pack2(u.z, u.w));
  }
  for (int e = lid; e < VD * 2; e += TD_WG) /* Vnew^T rows: two 16-byte pieces each */
    *(__local uint4 *)(VN + (e >> 1) * TD_LDN + 8 * (e & 1)) =
        ((__global const uint4 *)Vnsave)[((base * VD + (e >> 1)) * CH + 8 * (e & 1)) / 8];
  {
    __global const float *tp = (__global const float *)(blkg + base * KDA_BB_SIZE + KDA_BB_TM);
    const int i = lid >> 4, l = lid & 15;
    Tm[i][l] = tp[lid];
    Pm[i][l] = tp[CH * CH + lid];
  }

  /* ---- the forward's factors (element e of this lane: row TD_ROW(e), column c0 +
   * TD_COL(e)): the gate and its cumsum G, the norms, beta. q and k are read again after
   * step 1 (registers: two work-groups per SM). */
  float qn[8], kn[8], up[8], dn[8], vv[8], E0[4], EL[4], bt[2];
#define TD_LOAD_QK()                                                                        \
  TD_UNROLL                                                                                 \
  for (int e = 0; e < 8; e++) {                                                             \
    const int row = TD_ROW(e), ok = row < len && hasK;                                      \
    const ulong o = ((ulong)(ch.x + (ok ? row : 0)) * (ulong)H + (ulong)h) * KD + c0 + TD_COL(e); \
    qn[e] = ok ? LOAD(q, qo + o) : 0.0f;                                                    \
    kn[e] = ok ? LOAD(k, ko + o) : 0.0f;                                                    \
  }
  TD_LOAD_QK();
  TD_UNROLL
  for (int e = 0; e < 8; e++) {
    const int row = TD_ROW(e), col = c0 + TD_COL(e), ok = row < len && hasK;
    const ulong o = ((ulong)(ch.x + (ok ? row : 0)) * (ulong)H + (ulong)h) * KD + col;
    up[e] = ok ? kda_gate(LOAD(z, zo + o), ea, dtb[dto + (ulong)h * KD + col], lb, 0) : 0.0f;
  }
  for (int hf = 0; hf < 2; hf++) {
    const int row = g + 8 * hf;
    bt[hf] = row < len ? kda_sigmoid(LOAD(bl, bo + (ulong)(ch.x + row) * (ulong)H + (ulong)h)) : 0.0f;
    if (warp == 0 && t == 0) btL[row] = bt[hf];
  }
  {
    float sq[8], sk[8], pq[2], pk[2];
    for (int e = 0; e < 8; e++) sq[e] = qn[e] * qn[e], sk[e] = kn[e] * kn[e];
    td_rowsum(sq, pq, sw, lane);
    td_rowsum(sk, pk, sw, lane);
    TD_RED_PUT(0, pq);
    TD_RED_PUT(1, pk);
  }
  td_scan(up, 0, sw, lane); /* G (rows past len add 0: the last row holds G[len - 1]) */
  float G0[4];
  td_at_row(up, 0, G0, sw, lane);
  td_at_row(up, CH - 1, EL, sw, lane);
  for (int i = 0; i < 4; i++) E0[i] = exp(G0[i]), EL[i] = exp(EL[i] - G0[i]);
  TD_UNROLL
  for (int e = 0; e < 8; e++) up[e] -= G0[TD_CI(e)]; /* G - G0, in [-75, 0] */
  barrier(CLK_LOCAL_MEM_FENCE); /* DO, DU, VN, Tm, Pm, red */
  float nq[2], nk[2];
  for (int hf = 0; hf < 2; hf++) {
    nq[hf] = 1.0f / sqrt(td_red_get(red[0], g + 8 * hf) + L2_EPS);
    nk[hf] = 1.0f / sqrt(td_red_get(red[1], g + 8 * hf) + L2_EPS);
  }

  /* ---- step 1: the factor gradients, this warp's columns (no work-group barrier on PTX) */
  tile_c aQ[2], aW[2], aK[2], aA = tile_c_zero();
  for (int n = 0; n < 2; n++) aQ[n] = aW[n] = aK[n] = tile_c_zero();
  float agl = 0.0f; /* lane: column lane % 16, rows (lane / 16) * 8 .. + 7 of each slice */
#pragma unroll 1 /* (a ring: one slice in hand at a time) */
  for (int ks = 0; ks < VD / 16; ks++) {
    if (hasK) td_issue(ring, Ssave, dSsave, base * VD, c0, ks + TD_NS - 1, lane);
    TD_WAIT();
    TILE_WARP_SYNC();
    const tile_a ao = tile_load_a_bf16(DO + 16 * ks, TD_LDV, lane);
    if (hasK) {
      __local const ushort *sS = ring + (ks % TD_NS) * TD_STG, *sD = sS + 16 * TD_LDR;
      const tile_a au = tile_load_a_bf16(&DU[0][16 * ks], TD_LDV, lane);
      const tile_a av = tile_load_at_bf16(VN + 16 * ks * TD_LDN, TD_LDN, lane); /* Vnew[r][v] */
      tile_b b1;
      tile_b b0 = td_pair_b(sS, lane, &b1);
      tile_mma(&aQ[0], ao, b0), tile_mma(&aQ[1], ao, b1);
      tile_mma(&aW[0], au, b0), tile_mma(&aW[1], au, b1);
      b0 = td_pair_b(sD, lane, &b1);
      tile_mma(&aK[0], av, b0), tile_mma(&aK[1], av, b1);
      for (int i = 0; i < 8; i++) {
        const int o = (8 * (lane >> 4) + i) * TD_LDR + (lane & 15);
        agl += bf16_to_f32(sS[o]) * bf16_to_f32(sD[o]);
      }
    }
    if (warp < 2) /* dAqk columns 8 warp ..: B[k = v][n = c] = Vnew[c][v] */
      tile_mma(&aA, ao, tile_load_b_bf16(VN + 16 * ks * TD_LDN + 8 * warp, TD_LDN, lane));
    TILE_WARP_SYNC(); /* the stage is read before the next copy into it */
  }
#if TILE_HAS_LANE_SHUFFLE
  agl += tile_shfl_xor(agl, 16);
#else
  if (lane < 16) red[2][warp][lane] = agl; /* then lanes 16..31 add theirs */
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane >= 16) red[2][warp][lane & 15] += agl;
  barrier(CLK_LOCAL_MEM_FENCE);
  agl = red[2][warp][lane & 15];
#endif
  if (hasK && lane < 16) dglL[c0 + lane] = agl;
  if (warp < 2)
    for (int i = 0; i < TILE_C_NE; i++) {
      const int row = tile_c_row(lane, i), col = 8 * warp + tile_c_col(lane, i);
      tA[row][col] = col <= row ? scale * TILE_C_AT(aA, i) : 0.0f; /* d(Qp Km^T) */
    }
  barrier(CLK_LOCAL_MEM_FENCE); /* every warp is past its ring: the pool becomes step 2's */

  /* ---- step 2. The factors again: up = e^(G - G0) (<= 1), dn = e^(G0 - G) (<= e^75), the
   * normalised q and k, beta v. Past the first elementwise terms only up stays in
   * registers (dn = 1 / up; Qp, Kp, Km from local memory; q and k read a third time at the
   * end): two work-groups per SM need at most 128 registers. */
  TD_LOAD_QK();
  TD_UNROLL
  for (int e = 0; e < 8; e++) {
    const int row = TD_ROW(e), ok = row < len && hasV;
    up[e] = exp(up[e]);
    dn[e] = 1.0f / up[e];
    qn[e] *= nq[(e >> 1) & 1], kn[e] *= nk[(e >> 1) & 1];
    vv[e] = ok ? LOAD(v, vo + ((ulong)(ch.x + row) * (ulong)H + (ulong)h) * VD + c0 + TD_COL(e)) : 0.0f;
  }
  /* The bf16 factors of this warp's columns; dKb = Tm^T dW. */
  float gq[8], gk[8], gw[8];
  TD_UNROLL
  for (int e = 0; e < 8; e++) {
    const int n = e >> 2, i = e & 3;
    gq[e] = TILE_C_AT(aQ[n], i), gk[e] = TILE_C_AT(aK[n], i), gw[e] = -TILE_C_AT(aW[n], i);
  }
  if (hasK)
    TD_UNROLL
    for (int e = 0; e < 8; e++) {
      const int o = TD_ROW(e) * TD_LDK + c0 + TD_COL(e);
      Qp[o] = f32_to_bf16(qn[e] * up[e]);
      Kp[o] = f32_to_bf16(kn[e] * up[e]);
      Km[o] = f32_to_bf16(kn[e] * dn[e]);
      DW[o] = f32_to_bf16(gw[e]);
      DW2[o] = f32_to_bf16(gw[e] * E0[TD_CI(e)]); /* dW diag(e^G0), for dW Kb^T */
    }
  if (hasV)
    TD_UNROLL
    for (int e = 0; e < 8; e++) Vb[TD_ROW(e) * TD_LDV + c0 + TD_COL(e)] = f32_to_bf16(bt[(e >> 1) & 1] * vv[e]);
  TILE_WARP_SYNC();
  float x[8];
  {
    tile_c a[2];
    a[0] = a[1] = tile_c_zero();
    if (hasK) {
      const tile_a tt = tile_load_at_f32(&Tm[0][0], TD_LDF, lane);
      for (int n = 0; n < 2; n++) tile_mma(&a[n], tt, tile_load_b_bf16(DW + c0 + 8 * n, TD_LDK, lane));
    }
    for (int e = 0; e < 8; e++) x[e] = TILE_C_AT(a[e / TILE_C_NE], e % TILE_C_NE);
  }
  /* the elementwise terms of Qg = scale e^G qn, Kd = e^(GL - G) kn and W = Tm Kb */
  float dqn[8], dkn[8], dG[8], pb[2] = {0.0f, 0.0f}, kdg[8]; /* pb: rows g, g + 8 */
  TD_UNROLL
  for (int e = 0; e < 8; e++) {
    const int ci = TD_CI(e);
    const float b = bt[(e >> 1) & 1], kd = kn[e] * dn[e] * EL[ci], ekn = kn[e] * up[e] * E0[ci];
    dqn[e] = scale * up[e] * E0[ci] * gq[e];
    dG[e] = scale * qn[e] * up[e] * E0[ci] * gq[e] - kd * gk[e] + b * ekn * x[e];
    dkn[e] = dn[e] * EL[ci] * gk[e] + b * E0[ci] * up[e] * x[e];
    pb[(e >> 1) & 1] += x[e] * ekn;
    kdg[e] = kd * gk[e];
  }
  float dGL[4];
  td_colsum(kdg, dGL, sw, lane); /* dGL: the Kd terms and gl = e^GL */
  for (int ci = 0; ci < 4; ci++) {
    const int col = c0 + 8 * (ci >> 1) + 2 * t + (ci & 1);
    dGL[ci] += hasK ? dglL[col] * E0[ci] * EL[ci] : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE); /* Qp, Kp, Km, DW2, Vb of every warp */
  /* dTm = dW Kb^T + dU Vb^T into M1 (warps 0, 1: with Kb = diag(beta) Kp diag(e^G0), the
   * first term is (dW diag(e^G0)) Kp^T, then beta by column); dVb = Tm^T dU */
  if (warp < 2) {
    tile_c a1 = tile_c_zero(), a2 = tile_c_zero();
    for (int ks = 0; ks < KD / 16; ks++)
      tile_mma(&a1, tile_load_a_bf16(DW2 + 16 * ks, TD_LDK, lane), tile_load_bt_bf16(Kp + 8 * warp * TD_LDK + 16 * ks, TD_LDK, lane));
    for (int ks = 0; ks < VD / 16; ks++)
      tile_mma(&a2, tile_load_a_bf16(&DU[0][16 * ks], TD_LDV, lane), tile_load_bt_bf16(Vb + 8 * warp * TD_LDV + 16 * ks, TD_LDV, lane));
    for (int i = 0; i < TILE_C_NE; i++) {
      const int col = 8 * warp + tile_c_col(lane, i);
      M1[tile_c_row(lane, i)][col] = btL[col] * TILE_C_AT(a1, i) + TILE_C_AT(a2, i);
    }
  }
  if (hasV) {
    const tile_a tt = tile_load_at_f32(&Tm[0][0], TD_LDF, lane);
    TD_UNROLL
    for (int n = 0; n < 2; n++) {
      tile_c a = tile_c_zero();
      tile_mma(&a, tt, tile_load_b_bf16(&DU[0][c0 + 8 * n], TD_LDV, lane));
      TD_UNROLL
      for (int i = 0; i < TILE_C_NE; i++) {
        const int e = TILE_C_NE * n + i, row = TD_ROW(e);
        if (row < len) dv[dvo + ((ulong)(ch.x + row) * (ulong)H + (ulong)h) * VD + c0 + TD_COL(e)] = bt[(e >> 1) & 1] * TILE_C_AT(a, i);
        pb[(e >> 1) & 1] += TILE_C_AT(a, i) * vv[e]; /* dbeta gets dVb . v */
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* Tm = (I + Akk)^-1:  dAkk = -Tm^T dTm Tm^T (strict lower), in two 16 x 16 steps. */
  {
    const int i = lid >> 4, l = lid & 15;
    float y = 0.0f;
    for (int m = 0; m < CH; m++) y += M1[i][m] * Tm[l][m];
    M4[i][l] = y;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  {
    const int i = lid >> 4, l = lid & 15, lower = l < i;
    float dl = 0.0f;
    for (int m = 0; m < CH; m++) dl -= Tm[m][i] * M4[m][l];
    M1[i][l] = lower ? dl * Pm[i][l] : 0.0f; /* Akk = beta_r P: dbeta terms */
    Mm[i][l] = lower ? btL[i] * dl : 0.0f;     /* dP */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* P = Kp Km^T and Aqk / scale = Qp Km^T: dKp = dP Km, dQp = tA Km,
   * dKm = dP^T Kp + tA^T Qp, this warp's columns. Their dG terms Kp dKp + Qp dQp - Km dKm
   * sum to zero down each column (the anchor G0 cancels) and dg's reverse cumsum sums them:
   * they take the same bf16 Kp, Qp, Km the products use, so the cancellation holds to fp32
   * rounding, not bf16's. */
  if (hasK) {
    tile_c a[3][2];
    TD_UNROLL
    for (int n = 0; n < 2; n++) {
      a[0][n] = a[1][n] = a[2][n] = tile_c_zero();
      const tile_b bkm = tile_load_b_bf16(Km + c0 + 8 * n, TD_LDK, lane);
      tile_mma(&a[0][n], tile_load_a_f32(&Mm[0][0], TD_LDF, lane), bkm);
      tile_mma(&a[1][n], tile_load_a_f32(&tA[0][0], TD_LDF, lane), bkm);
      tile_mma(&a[2][n], tile_load_at_f32(&Mm[0][0], TD_LDF, lane), tile_load_b_bf16(Kp + c0 + 8 * n, TD_LDK, lane));
      tile_mma(&a[2][n], tile_load_at_f32(&tA[0][0], TD_LDF, lane), tile_load_b_bf16(Qp + c0 + 8 * n, TD_LDK, lane));
    }
    TD_UNROLL
    for (int e = 0; e < 8; e++) {
      const int n = e / TILE_C_NE, i = e % TILE_C_NE, o = TD_ROW(e) * TD_LDK + c0 + TD_COL(e);
      const float kp = bf16_to_f32(Kp[o]), qp = bf16_to_f32(Qp[o]), km = bf16_to_f32(Km[o]);
      const float xk = TILE_C_AT(a[0][n], i), xq = TILE_C_AT(a[1][n], i), xm = TILE_C_AT(a[2][n], i);
      dkn[e] += up[e] * xk + xm / up[e];
      dqn[e] += up[e] * xq;
      dG[e] += kp * xk + qp * xq - km * xm;
    }
  }

  /* ---- the cumulative gate (reverse cumsum, dGL on the last row), the gate, beta, the
   * L2 norms */
  TD_UNROLL
  for (int e = 0; e < 8; e++) {
    const int row = TD_ROW(e);
    dG[e] = row < len ? dG[e] + (row == len - 1 ? dGL[TD_CI(e)] : 0.0f) : 0.0f;
  }
  td_scan(dG, 1, sw, lane);
  {
    float p[2], pq[8], pk[8], px[8] = {pb[0], 0.0f, pb[1], 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    TD_LOAD_QK();
    TD_UNROLL
    for (int e = 0; e < 8; e++) {
      qn[e] *= nq[(e >> 1) & 1], kn[e] *= nk[(e >> 1) & 1];
      pq[e] = qn[e] * dqn[e], pk[e] = kn[e] * dkn[e];
    }
    td_rowsum(px, p, sw, lane);
    TD_RED_PUT(0, p);
    td_rowsum(pq, p, sw, lane);
    TD_RED_PUT(1, p);
    td_rowsum(pk, p, sw, lane);
    TD_RED_PUT(2, p);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float rq[2], rk[2];
  for (int hf = 0; hf < 2; hf++) {
    const int row = g + 8 * hf;
    rq[hf] = td_red_get(red[1], row);
    rk[hf] = td_red_get(red[2], row);
    if (warp == 0 && t == 0 && row < len) {
      float s = td_red_get(red[0], row);
      for (int l = 0; l < CH; l++) s += M1[row][l];
      dbeta[dbo + (ulong)(ch.x + row) * (ulong)H + (ulong)h] = s * bt[hf] * (1.0f - bt[hf]);
    }
  }
  float gd[8], ga[8];
  TD_UNROLL
  for (int e = 0; e < 8; e++) {
    const int row = TD_ROW(e), col = c0 + TD_COL(e), hf = (e >> 1) & 1;
    gd[e] = ga[e] = 0.0f;
    if (row < len && hasK) {
      const ulong o = ((ulong)(ch.x + row) * (ulong)H + (ulong)h) * KD + col;
      const float2 gg = kda_gate_grads(LOAD(z, zo + o), ea, dtb[dto + (ulong)h * KD + col], lb, 0);
      gd[e] = dG[e] * gg.x;
      ga[e] = dG[e] * gg.y;
      dz[dzo + o] = gd[e];
      dq[dqo + o] = nq[hf] * (dqn[e] - qn[e] * rq[hf]); /* d x = (d xn - xn (xn . d xn)) / |x| */
      dk[dko + o] = nk[hf] * (dkn[e] - kn[e] * rk[hf]);
    }
  }
  float sd[4], sa[4];
  td_colsum(gd, sd, sw, lane);
  td_colsum(ga, sa, sw, lane);
  if (hasK && g == 0 && live)
    for (int ci = 0; ci < 4; ci++) {
      const int col = c0 + 8 * (ci >> 1) + 2 * t + (ci & 1);
      pddt[base * KD + col] = sd[ci];
      pdA[base * KD + col] = sa[ci];
    }
}
