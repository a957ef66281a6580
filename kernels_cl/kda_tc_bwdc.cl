/* kda_tc_bwdc.cl: the per-chunk part of the KDA backward on the tile interface (issue 9),
 * the tile counterpart of kda_bwd.cl's kda_bwd_chunk. Built as "tile+kda_common+kda_tc_bwdc"
 * with kda_common's -DKD -DVD (multiples of 16, <= 128) and the tile options; bounded gate.
 *
 * kda_tcb_chunk, token-parallel (8 warps per (chunk, head); work-item (r, s) = row lid / 16,
 * columns s + 16 j): recomputes the chunk's factors as the forward's prep does (gate, norms,
 * sigmoid of beta, cumulative gate G, anchored Qp, Kp, Km with G0 the first row, Akk, Tm =
 * (I + Akk)^-1), then takes the factor gradients of kda_tcb_state_bwd / kda_tcb_inter
 * (dQg, dW, dKd [16, K], dgl [K], dAqk [16, 16], dU [16, V], fp32) back through
 *   W = Tm Kb (Kb = beta e^G kn),  U = Tm Vb (Vb = beta v),  Tm = (I + Akk)^-1,
 *   Akk = beta Kp Km^T (c < r),  Aqk = scale Qp Km^T (c <= r),
 * the cumulative gate, the gate, beta and the L2 norms: dq, dk, dv, dg, dbeta, and per-chunk
 * partials of ddt_bias and dA_log [chunks, H, K] (summed by kda_bwd.cl's reductions).
 * On tiles: Kp Km^T, Tm^T dW, Tm^T dU, dW Kb^T + dU Vb^T, Mm Km, tA Km, Mm^T Kp + tA^T Qp
 * (Mm = dP, tA = d(Qp Km^T)); fp32: the 16 x 16 inverse and its gradient, elementwise work. */
#if KD % 16 || VD % 16
#error "kda_tc_bwdc needs KD and VD multiples of 16"
#endif

#define TD_WG 256                 /* 8 warps: 16 rows x TD_SL work-items */
#define TD_SL 16                  /* work-items per row */
#define TD_LDK (KD + 8)           /* padded bf16 rows of K-wide local tiles */
#define TD_LDV (VD + 8)
#define TD_MKV (KD > VD ? KD : VD)
#define TD_LDF (TD_MKV + 4)       /* fp32 scratch rows */
#define TD_NJ (KD / TD_SL)        /* key columns per work-item: d = s + TD_SL j */
#define TD_NJV (VD / TD_SL)
#define TD_AL __attribute__((aligned(16)))
#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
#define TD_UNROLL _Pragma("unroll") /* the per-work-item arrays stay in registers */
#else
#define TD_UNROLL _Pragma("unroll 1") /* unrolled portable tiles build slowly on PoCL */
#endif

/* The [16, ncols] product into the fp32 scratch F (ld TD_LDF), one 16 x 8 tile per (warp,
 * nt): ACC is the tile_mma calls into acc, written in terms of nt (warp-uniform loop). */
#define TD_TILES(ncols, ACC)                                                                \
  for (int nt = warp; nt < (ncols) / 8; nt += TD_WG / 32) {                                 \
    tile_c acc = tile_c_zero();                                                             \
    ACC;                                                                                    \
    tile_store_c_local(acc, &F[0][8 * nt], TD_LDF, lane);                                   \
  }

__kernel __attribute__((reqd_work_group_size(TD_WG, 1, 1)))
void kda_tcb_chunk(__global const store_t *q, ulong qo, __global const store_t *k, ulong ko,
                   __global const store_t *v, ulong vo, __global const store_t *z, ulong zo,
                   __global const store_t *bl, ulong bo, __global const float *A_log, ulong ao,
                   __global const float *dtb, ulong dto, __global const int2 *chunks, int H,
                   float scale, float lb,
                   __global const float *dQgg, __global const float *dWg, __global const float *dKdg,
                   __global const float *dglg, __global const float *dAg, __global const float *dUg,
                   __global float *dq, ulong dqo, __global float *dk, ulong dko,
                   __global float *dv, ulong dvo, __global float *dz, ulong dzo,
                   __global float *dbeta, ulong dbo, __global float *pddt, __global float *pdA)
{
  /* (lib/kda_tc_bwd.c counts these bytes) */
  __local float F[CH][TD_LDF];                 /* the gate and its cumsum, then product scratch */
  __local ushort Qp[CH][TD_LDK] TD_AL, Kp[CH][TD_LDK] TD_AL, Km[CH][TD_LDK] TD_AL;
  __local ushort DW[CH][TD_LDK] TD_AL;         /* dW, then dW (.) e^G0 */
  __local ushort Vb[CH][TD_LDV] TD_AL, DU[CH][TD_LDV] TD_AL; /* beta v, dU */
  __local float M1[CH][CH + 1], Tm[CH][CH + 1], Pm[CH][CH + 1], M4[CH][CH + 1];
  __local float Mm[CH][CH + 1], tA[CH][CH + 1];
  __local float E0[KD], EL[KD], dGL[KD], red[CH][TD_SL], nq[CH], nk[CH], bt[CH], rs[2][CH];
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int r = lid / TD_SL, s = lid % TD_SL;
  const int c = (int)get_group_id(0), h = (int)get_group_id(1);
  const int2 ch = chunks[c];
  const int len = ch.y, valid = r < len;
  const ulong tok = (ulong)(ch.x + r), rk = (tok * (ulong)H + (ulong)h) * KD, rv = (tok * (ulong)H + (ulong)h) * VD;
  const ulong base = (ulong)c * (ulong)H + (ulong)h;
  const float ea = exp(A_log[ao + h]);

  /* ---- A: the forward's factors again (kda_tc_prep's steps). */
  float qn[TD_NJ], kn[TD_NJ], up[TD_NJ], dn[TD_NJ], vv[TD_NJV], sq = 0.0f, sk = 0.0f;
  TD_UNROLL
  for (int j = 0; j < TD_NJV; j++) vv[j] = valid ? LOAD(v, vo + rv + s + TD_SL * j) : 0.0f;
  TD_UNROLL
  for (int j = 0; j < TD_NJ; j++) {
    const int d = s + TD_SL * j;
    qn[j] = valid ? LOAD(q, qo + rk + d) : 0.0f;
    kn[j] = valid ? LOAD(k, ko + rk + d) : 0.0f;
    sq += qn[j] * qn[j];
    sk += kn[j] * kn[j];
    F[r][d] = valid ? kda_gate(LOAD(z, zo + rk + d), ea, dtb[dto + (ulong)h * KD + d], lb, 0) : 0.0f;
  }
  red[r][s] = sq;
  if (s == 0) bt[r] = valid ? kda_sigmoid(LOAD(bl, bo + tok * (ulong)H + (ulong)h)) : 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (s == 0) {
    float t = 0.0f;
    for (int l = 0; l < TD_SL; l++) t += red[r][l];
    nq[r] = 1.0f / sqrt(t + L2_EPS);
  }
  for (int d = lid; d < KD; d += TD_WG) { /* inclusive cumsum down each column */
    float run = 0.0f;
    for (int i = 0; i < CH; i++) {
      run += F[i][d];
      F[i][d] = run;
    }
    E0[d] = exp(F[0][d]);
    EL[d] = exp(run - F[0][d]); /* rows past len add 0: run = G[len - 1] */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  red[r][s] = sk;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (s == 0) {
    float t = 0.0f;
    for (int l = 0; l < TD_SL; l++) t += red[r][l];
    nk[r] = 1.0f / sqrt(t + L2_EPS);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  TD_UNROLL
  for (int j = 0; j < TD_NJ; j++) {
    const int d = s + TD_SL * j;
    const float e = F[r][d] - F[0][d]; /* in [-75, 0] */
    up[j] = exp(e);
    dn[j] = exp(-e);
    qn[j] *= nq[r];
    kn[j] *= nk[r];
    Qp[r][d] = f32_to_bf16(qn[j] * up[j]);
    Kp[r][d] = f32_to_bf16(kn[j] * up[j]);
    Km[r][d] = f32_to_bf16(kn[j] * dn[j]);
    DW[r][d] = f32_to_bf16(dWg[(base * CH + r) * KD + d]);
  }
  TD_UNROLL
  for (int j = 0; j < TD_NJV; j++) {
    const int jv = s + TD_SL * j;
    Vb[r][jv] = f32_to_bf16(bt[r] * vv[j]);
    DU[r][jv] = f32_to_bf16(dUg[(base * CH + r) * VD + jv]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* P = Kp Km^T (warps 0, 1: columns 8 warp ..), Akk = beta P (c < r); Tm = (I + Akk)^-1 */
  if (warp < 2) {
    tile_c acc = tile_c_zero();
    for (int ks = 0; ks < KD / 16; ks++)
      tile_mma(&acc, tile_load_a_bf16(&Kp[0][16 * ks], TD_LDK, lane),
               tile_load_bt_bf16(&Km[8 * warp][16 * ks], TD_LDK, lane));
    for (int i = 0; i < 4; i++) {
      const int row = tile_c_row(lane, i), col = 8 * warp + tile_c_col(lane, i);
      Pm[row][col] = col < row ? acc.v[i] : 0.0f;
      M1[row][col] = col < row ? bt[row] * acc.v[i] : 0.0f;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  kda_unit_lower_inverse(M1, Tm, lid);
  barrier(CLK_LOCAL_MEM_FENCE);

  /* ---- B: back through the factors. dKb = Tm^T dW into F, then the elementwise terms of
   * Qg = scale e^G qn, Kd = e^(GL - G) kn and W = Tm Kb (Kb = beta e^G kn). */
  float dqn[TD_NJ], dkn[TD_NJ], dG[TD_NJ], pb = 0.0f; /* pb: this work-item's share of dbeta_r */
  TD_TILES(KD, tile_mma(&acc, tile_load_at_f32(&Tm[0][0], CH + 1, lane), tile_load_b_bf16(&DW[0][8 * nt], TD_LDK, lane)))
  barrier(CLK_LOCAL_MEM_FENCE);
  TD_UNROLL
  for (int j = 0; j < TD_NJ; j++) {
    const int d = s + TD_SL * j;
    const ulong e = (base * CH + r) * KD + d;
    const float gq = dQgg[e], gk = dKdg[e], kd = kn[j] * dn[j] * EL[d], x = F[r][d];
    const float ekn = kn[j] * up[j] * E0[d];
    dqn[j] = scale * up[j] * E0[d] * gq;
    dG[j] = scale * qn[j] * up[j] * E0[d] * gq - kd * gk + bt[r] * ekn * x;
    dkn[j] = dn[j] * EL[d] * gk + bt[r] * E0[d] * up[j] * x;
    pb += x * ekn;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  TD_UNROLL
  for (int j = 0; j < TD_NJ; j++) {
    const int d = s + TD_SL * j;
    F[r][d] = kn[j] * dn[j] * EL[d] * dKdg[(base * CH + r) * KD + d]; /* Kd (.) dKd */
    DW[r][d] = f32_to_bf16(dWg[(base * CH + r) * KD + d] * E0[d]); /* for dW Kb^T below */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int d = lid; d < KD; d += TD_WG) { /* dGL: the Kd terms and gl = e^GL */
    float t = 0.0f;
    for (int i = 0; i < CH; i++) t += F[i][d];
    dGL[d] = t + dglg[base * KD + d] * E0[d] * EL[d];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* dTm = dW Kb^T + dU Vb^T into M1 (warps 0, 1; with Kb = diag(beta) Kp diag(e^G0), the
   * first term is (dW diag(e^G0)) Kp^T, then beta by column); dVb = Tm^T dU into F */
  if (warp < 2) {
    tile_c a1 = tile_c_zero(), a2 = tile_c_zero();
    for (int ks = 0; ks < KD / 16; ks++)
      tile_mma(&a1, tile_load_a_bf16(&DW[0][16 * ks], TD_LDK, lane),
               tile_load_bt_bf16(&Kp[8 * warp][16 * ks], TD_LDK, lane));
    for (int ks = 0; ks < VD / 16; ks++)
      tile_mma(&a2, tile_load_a_bf16(&DU[0][16 * ks], TD_LDV, lane),
               tile_load_bt_bf16(&Vb[8 * warp][16 * ks], TD_LDV, lane));
    for (int i = 0; i < 4; i++) {
      const int col = 8 * warp + tile_c_col(lane, i);
      M1[tile_c_row(lane, i)][col] = bt[col] * a1.v[i] + a2.v[i];
    }
  }
  TD_TILES(VD, tile_mma(&acc, tile_load_at_f32(&Tm[0][0], CH + 1, lane), tile_load_b_bf16(&DU[0][8 * nt], TD_LDV, lane)))
  barrier(CLK_LOCAL_MEM_FENCE);
  TD_UNROLL
  for (int j = 0; j < TD_NJV; j++) { /* dv = beta dVb; dbeta gets dVb . v */
    const int jv = s + TD_SL * j;
    const float x = F[r][jv];
    if (valid) dv[dvo + rv + jv] = bt[r] * x;
    pb += x * vv[j];
  }
  /* Tm = (I + Akk)^-1:  dAkk = -Tm^T dTm Tm^T (strict lower), in two 16 x 16 steps. */
  for (int e = lid; e < CH * CH; e += TD_WG) {
    const int i = e >> 4, l = e & 15;
    float y = 0.0f;
    for (int m = 0; m < CH; m++) y += M1[i][m] * Tm[l][m];
    M4[i][l] = y;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int e = lid; e < CH * CH; e += TD_WG) {
    const int i = e >> 4, l = e & 15, lower = l < i;
    float dl = 0.0f;
    for (int m = 0; m < CH; m++) dl -= Tm[m][i] * M4[m][l];
    M1[i][l] = lower ? dl * Pm[i][l] : 0.0f;   /* Akk = beta_r P: dbeta terms */
    Mm[i][l] = lower ? bt[i] * dl : 0.0f;       /* dP */
    tA[i][l] = l <= i ? scale * dAg[base * CH * CH + i * CH + l] : 0.0f; /* d(Qp Km^T) */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* P = Kp Km^T and Aqk / scale = Qp Km^T: dKp = dP Km, dQp = tA Km, dKm = dP^T Kp + tA^T Qp.
   * Their dG terms Kp dKp + Qp dQp - Km dKm sum to zero down each column (the anchor G0
   * cancels), and dg's reverse cumsum sums them: they take the same bf16 Kp, Qp, Km the
   * products use, so that the cancellation holds to fp32 rounding, not bf16's. */
  TD_TILES(KD, tile_mma(&acc, tile_load_a_f32(&Mm[0][0], CH + 1, lane), tile_load_b_bf16(&Km[0][8 * nt], TD_LDK, lane)))
  barrier(CLK_LOCAL_MEM_FENCE);
  TD_UNROLL
  for (int j = 0; j < TD_NJ; j++) {
    const float x = F[r][s + TD_SL * j];
    dkn[j] += up[j] * x;
    dG[j] += bf16_to_f32(Kp[r][s + TD_SL * j]) * x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  TD_TILES(KD, tile_mma(&acc, tile_load_a_f32(&tA[0][0], CH + 1, lane), tile_load_b_bf16(&Km[0][8 * nt], TD_LDK, lane)))
  barrier(CLK_LOCAL_MEM_FENCE);
  TD_UNROLL
  for (int j = 0; j < TD_NJ; j++) {
    const float x = F[r][s + TD_SL * j];
    dqn[j] += up[j] * x;
    dG[j] += bf16_to_f32(Qp[r][s + TD_SL * j]) * x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  TD_TILES(KD, tile_mma(&acc, tile_load_at_f32(&Mm[0][0], CH + 1, lane), tile_load_b_bf16(&Kp[0][8 * nt], TD_LDK, lane));
                   tile_mma(&acc, tile_load_at_f32(&tA[0][0], CH + 1, lane), tile_load_b_bf16(&Qp[0][8 * nt], TD_LDK, lane)))
  barrier(CLK_LOCAL_MEM_FENCE);
  TD_UNROLL
  for (int j = 0; j < TD_NJ; j++) {
    const float x = F[r][s + TD_SL * j];
    dkn[j] += dn[j] * x;
    dG[j] -= bf16_to_f32(Km[r][s + TD_SL * j]) * x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  /* ---- C: the cumulative gate (reverse cumsum, dGL on the last row), the gate, beta, the
   * L2 norms. */
  TD_UNROLL
  for (int j = 0; j < TD_NJ; j++) F[r][s + TD_SL * j] = dG[j] + (r == len - 1 ? dGL[s + TD_SL * j] : 0.0f);
  red[r][s] = pb;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int d = lid; d < KD; d += TD_WG) {
    float run = 0.0f;
    for (int i = CH - 1; i >= 0; i--) {
      run += i < len ? F[i][d] : 0.0f;
      F[i][d] = run;
    }
  }
  if (s == 0 && valid) {
    float t = 0.0f;
    for (int l = 0; l < TD_SL; l++) t += red[r][l];
    for (int l = 0; l < CH; l++) t += M1[r][l];
    dbeta[dbo + tok * (ulong)H + (ulong)h] = t * bt[r] * (1.0f - bt[r]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float dotq = 0.0f, dotk = 0.0f;
  TD_UNROLL
  for (int j = 0; j < TD_NJ; j++) {
    const int d = s + TD_SL * j;
    float gd = 0.0f, ga = 0.0f;
    if (valid) {
      const float2 gg = kda_gate_grads(LOAD(z, zo + rk + d), ea, dtb[dto + (ulong)h * KD + d], lb, 0);
      gd = F[r][d] * gg.x;
      ga = F[r][d] * gg.y;
      dz[dzo + rk + d] = gd;
    }
    F[r][d] = gd; /* own entry: no barrier needed */
    dG[j] = ga;
    dotq += qn[j] * dqn[j];
    dotk += kn[j] * dkn[j];
  }
  red[r][s] = dotq;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int d = lid; d < KD; d += TD_WG) {
    float t = 0.0f;
    for (int i = 0; i < CH; i++) t += F[i][d];
    pddt[base * KD + d] = t;
  }
  if (s == 0) {
    float t = 0.0f;
    for (int l = 0; l < TD_SL; l++) t += red[r][l];
    rs[0][r] = t;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  TD_UNROLL
  for (int j = 0; j < TD_NJ; j++) F[r][s + TD_SL * j] = dG[j];
  red[r][s] = dotk;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int d = lid; d < KD; d += TD_WG) {
    float t = 0.0f;
    for (int i = 0; i < CH; i++) t += F[i][d];
    pdA[base * KD + d] = t;
  }
  if (s == 0) {
    float t = 0.0f;
    for (int l = 0; l < TD_SL; l++) t += red[r][l];
    rs[1][r] = t;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (valid)
    TD_UNROLL
    for (int j = 0; j < TD_NJ; j++) { /* d x = (d xn - xn (xn . d xn)) / |x| */
      const int d = s + TD_SL * j;
      dq[dqo + rk + d] = nq[r] * (dqn[j] - qn[j] * rs[0][r]);
      dk[dko + rk + d] = nk[r] * (dkn[j] - kn[j] * rs[1][r]);
    }
}
