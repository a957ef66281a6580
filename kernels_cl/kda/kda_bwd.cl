/* kda_bwd.cl: chunked KDA backward. After the forward is recomputed with its per-chunk
 * states S_c (kda_prep + kda_state with save), three kernels run:
 *
 * kda_state_bwd (sequential over chunks, reversed; per sequence, head, 16 columns of V):
 *   with dS the gradient of the state after chunk c,
 *     dVnew = Aqk^T dO + Kd dS,   dS <- Qg^T dO + gl (.) dS - W^T dVnew,
 *   keeping dS [K, 16] in local memory; stores dVnew and every chunk's dS.
 * kda_bwd_inter (per chunk and head): the gradients of the per-chunk factors, whose sums
 *   run over all of V:  dQg = dO S_c^T,  dW = -dVnew S_c^T,  dKd = Vnew dS^T,
 *   dgl = rowsum(S_c (.) dS),  dAqk = dO Vnew^T (c <= r).
 * kda_bwd_chunk (per chunk and head): recomputes the chunk's tiles as kda_prep does and
 *   carries those gradients back through W = Tm (beta e^G kn), U = Tm (beta v),
 *   Tm = (I + Akk)^-1, the anchored products Akk = beta Kp Km^T and Aqk = scale Qp Km^T,
 *   the cumulative gate, the gate itself, the sigmoid of beta and the L2 norms, writing
 *   dq, dk, dv, dg (= dz), dbeta and per-chunk partial sums for dA_log and ddt_bias.
 * kda_param_reduce: those partials summed over chunks in a fixed order.
 * The anchor row G0 cancels in every product Qp Km^T and Kp Km^T, so its gradient terms
 * sum to zero exactly and are left out.
 *
 * -DKDA_UNB=1 (the unbounded gate, Kimi Linear's -exp(A_log) softplus(z + dt_bias)): a
 * token's decay reaches -50 and beyond, and the anchored e^(G0 - G) overflows within a chunk.
 * kda_bwd_chunk then anchors nothing: every decay factor, e^G, e^(G_last - G) and each pair's
 * e^(G_r - G_c) (c <= r), is a product of the per-token decays a = e^g in (0, 1] over the
 * tokens it spans, as kda_fwd_pairwise.cl's forward forms them, so none overflows; the
 * gradient of the cumulative gate G_r collects +F for the pairs (r, c) and -F for (i, r). */
#ifndef KDA_UNB
#define KDA_UNB 0
#endif

/* Loads chunk cc's tiles (W, Qg, Kd, this work-item's Aqk and dO entries, gl) into registers. */
#define KDA_PREFETCH_BWD(cc)                                                                \
  do {                                                                                      \
    const ulong b_ = (ulong)(cc) * (ulong)H + (ulong)h;                                     \
    const int2 ch_ = chunks[cc];                                                            \
    for (int p = 0; p < NPF; p++) {                                                         \
      const int e = lid + p * KDA_WG;                                                       \
      if (e < CH * KD) {                                                                    \
        const ulong g = b_ * CH * KD + e;                                                   \
        pw[p] = Wg[g];                                                                      \
        pq[p] = Qgg[g];                                                                     \
        pk[p] = Kdg[g];                                                                     \
      }                                                                                     \
    }                                                                                       \
    pa = Ag[b_ * CH * CH + r * CH + jj];                                                    \
    pd = r < ch_.y && jv ? dout[doo + ((ulong)(ch_.x + r) * (ulong)H + (ulong)h) * VD + j] : 0.0f; \
    pg = lid < KD ? glg[b_ * KD + lid] : 0.0f;                                              \
  } while (0)

__kernel __attribute__((reqd_work_group_size(KDA_WG, 1, 1)))
void kda_state_bwd(__global const float *Wg, __global const float *Ag, __global const float *Qgg,
                   __global const float *Kdg, __global const float *glg,
                   __global const int2 *chunks, __global const int2 *seqs, int H,
                   __global const float *dout, ulong doo, __global const float *dht, ulong dhto,
                   int has_dht, __global float *dUg, __global float *dSsave, __global float *dh0,
                   ulong dh0o, int has_dh0)
{
  __local float dS[KD][VS];
  __local float Wl[CH][KD], Ql[CH][KD], Kl[CH][KD];
  __local float dOl[CH][VS + 1], dV[CH][VS + 1], Al[CH][CH + 1], gll[KD];
  const int lid = (int)get_local_id(0), r = lid >> 4, jj = lid & 15;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int j0 = (int)get_group_id(0) * VS, j = j0 + jj, jv = j < VD;
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD;
  kda_slice_load(dS, dht, dhto, has_dht, sbase, j0, lid);
  /* The previous chunk's tiles travel through registers (see kda_state). */
  float pw[NPF], pq[NPF], pk[NPF], pa = 0.0f, pd = 0.0f, pg = 0.0f;
  const int2 sq = seqs[n];
  if (sq.y > 0) KDA_PREFETCH_BWD(sq.x + sq.y - 1);
  for (int ci = sq.y - 1; ci >= 0; ci--) {
    const int c = sq.x + ci;
    const ulong base = (ulong)c * (ulong)H + (ulong)h;
    barrier(CLK_LOCAL_MEM_FENCE);
    kda_slice_store(dSsave, 0, base * KD, dS, j0, lid);
    kda_stage_tiles(Wl, Ql, Kl, Al, gll, pw, pq, pk, pa, pg, lid);
    dOl[r][jj] = pd;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ci > 0) KDA_PREFETCH_BWD(c - 1);
    float acc = 0.0f;
    for (int m = 0; m < CH; m++) acc += Al[m][r] * dOl[m][jj];
    for (int d = 0; d < KD; d++) acc += Kl[r][d] * dS[d][jj];
    dV[r][jj] = acc;
    if (jv) dUg[(base * CH + r) * VD + j] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < KD * VS; e += KDA_WG) {
      int d = e / VS, jc = e % VS;
      float sv = gll[d] * dS[d][jc];
      for (int m = 0; m < CH; m++) sv += Ql[m][d] * dOl[m][jc] - Wl[m][d] * dV[m][jc];
      dS[d][jc] = sv;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (has_dh0) kda_slice_store(dh0, dh0o, sbase, dS, j0, lid);
}

__kernel __attribute__((reqd_work_group_size(KDA_WG, 1, 1)))
void kda_bwd_inter(__global const float *Ssave, __global const float *dSsave,
                   __global const float *Vng, __global const float *dUg, __global const float *dout,
                   ulong doo, __global const int2 *chunks, int H, __global float *dQgg,
                   __global float *dWg, __global float *dKdg, __global float *dglg,
                   __global float *dAg)
{
  __local float Sc[KD][VS + 1], dSc[KD][VS + 1];
  __local float dOt[CH][VS + 1], dVt[CH][VS + 1], Vt[CH][VS + 1];
  const int lid = (int)get_local_id(0), r = lid >> 4, lane = lid & 15;
  const int c = (int)get_group_id(0), h = (int)get_group_id(1);
  const int2 ch = chunks[c];
  const ulong base = (ulong)c * (ulong)H + (ulong)h;
  float aQ[NM], aW[NM], aK[NM], aA = 0.0f, agl = 0.0f;
  for (int m = 0; m < NM; m++) aQ[m] = aW[m] = aK[m] = 0.0f;
  for (int jt = 0; jt < VD; jt += VS) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < KD * VS; e += KDA_WG) {
      int d = e / VS, jc = e % VS, jg = jt + jc;
      Sc[d][jc] = jg < VD ? Ssave[(base * KD + d) * VD + jg] : 0.0f;
      dSc[d][jc] = jg < VD ? dSsave[(base * KD + d) * VD + jg] : 0.0f;
    }
    const int jg = jt + lane;
    dOt[r][lane] = jg < VD && r < ch.y ? dout[doo + ((ulong)(ch.x + r) * (ulong)H + (ulong)h) * VD + jg] : 0.0f;
    dVt[r][lane] = jg < VD ? dUg[(base * CH + r) * VD + jg] : 0.0f;
    Vt[r][lane] = jg < VD ? Vng[(base * CH + r) * VD + jg] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int m = 0; m < NM; m++) {
      const int d = lane + 16 * m;
      if (d >= KD) break;
      float sQ = 0.0f, sW = 0.0f, sK = 0.0f;
      for (int jc = 0; jc < VS; jc++) {
        sQ += dOt[r][jc] * Sc[d][jc];
        sW += dVt[r][jc] * Sc[d][jc];
        sK += Vt[r][jc] * dSc[d][jc];
      }
      aQ[m] += sQ;
      aW[m] -= sW;
      aK[m] += sK;
    }
    for (int jc = 0; jc < VS; jc++) aA += dOt[r][jc] * Vt[lane][jc];
    if (lid < KD)
      for (int jc = 0; jc < VS; jc++) agl += Sc[lid][jc] * dSc[lid][jc];
  }
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d >= KD) break;
    const ulong e = (base * CH + r) * KD + d;
    dQgg[e] = aQ[m];
    dWg[e] = aW[m];
    dKdg[e] = aK[m];
  }
  dAg[base * CH * CH + r * CH + lane] = lane <= r ? aA : 0.0f;
  if (lid < KD) dglg[base * KD + lid] = agl;
}

__kernel __attribute__((reqd_work_group_size(KDA_WG, 1, 1)))
void kda_bwd_chunk(__global const store_t *q, ulong qo, __global const store_t *k, ulong ko,
                   __global const store_t *v, ulong vo, __global const store_t *z, ulong zo,
                   __global const store_t *bl, ulong bo, __global const float *A_log, ulong ao,
                   __global const float *dtb, ulong dto, __global const int2 *chunks, int H,
                   float scale, float lb, int unbounded,
                   __global const float *dQgg, __global const float *dWg, __global const float *dKdg,
                   __global const float *dglg, __global const float *dAg, __global const float *dUg,
                   __global float *dq, ulong dqo, __global float *dk, ulong dko,
                   __global float *dv, ulong dvo, __global float *dz, ulong dzo,
                   __global float *dbeta, ulong dbo, __global float *pddt, __global float *pdA)
{
  __local float Qp[CH][KD], Kp[CH][KD], Km[CH][KD], T16[CH][KD];
  __local float G0[KD], E0[KD], EL[KD], dGL[KD];
  __local float red[CH][CH + 1], Pm[CH][CH + 1], Akk[CH][CH + 1], Tm[CH][CH + 1];
  __local float dTm[CH][CH + 1], Y[CH][CH + 1], Mm[CH][CH + 1], tA[CH][CH + 1], tB[CH][CH + 1];
  __local float nq[CH], nk[CH], bt[CH];
  const int lid = (int)get_local_id(0), r = lid >> 4, lane = lid & 15;
  const int c = (int)get_group_id(0), h = (int)get_group_id(1);
  const int2 ch = chunks[c];
  const int len = ch.y, valid = r < len;
  const ulong tok = (ulong)(ch.x + r);
  const ulong rk = (tok * (ulong)H + (ulong)h) * KD, rv = (tok * (ulong)H + (ulong)h) * VD;
  const ulong base = (ulong)c * (ulong)H + (ulong)h;
  const float ea = exp(A_log[ao + h]);

  /* ---- A: the forward's tiles again (kda_common.cl), keeping this work-item's entries of
   * qn, kn, e^(G - G0) and e^(G0 - G) in registers. */
  float qn[NM], kn[NM], up[NM], dn[NM];
#if KDA_UNB
  /* (the unbounded gate: Qp, Kp hold qn, kn, Km the decays a (1 past len), up and dn
   * e^G_r and e^(G_last - G_r), E0 gl = e^G_last; P and Akk from each pair's products) */
  kda_rows_load(q, qo, k, ko, z, zo, bl, bo, dtb, dto, ea, h, H, tok, len, lb, unbounded, 1, Qp, Kp, Km,
                red, nq, nk, bt);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d >= KD) break;
    float e0 = 1.0f, e1 = 1.0f;
    for (int i = 0; i <= r; i++) e0 *= Km[i][d];
    for (int i = r + 1; i < CH; i++) e1 *= Km[i][d];
    up[m] = e0, dn[m] = e1;
    qn[m] = Qp[r][d] * nq[r];
    kn[m] = Kp[r][d] * nk[r];
  }
  for (int d = lid; d < KD; d += KDA_WG) {
    float gl = 1.0f;
    for (int i = 0; i < CH; i++) gl *= Km[i][d];
    E0[d] = gl;
  }
  barrier(CLK_LOCAL_MEM_FENCE); /* every read of the raw q, k is done */
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d >= KD) break;
    Qp[r][d] = qn[m];
    Kp[r][d] = kn[m];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  {
    float a = 0.0f;
    if (lane < r)
      for (int d = 0; d < KD; d++) {
        float f = Kp[lane][d]; /* kn_c a_(c+1) .. a_r */
        for (int i = lane + 1; i <= r; i++) f *= Km[i][d];
        a += Kp[r][d] * f;
      }
    Pm[r][lane] = a;
    Akk[r][lane] = lane < r ? bt[r] * a : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  kda_unit_lower_inverse(Akk, Tm, lid);
  barrier(CLK_LOCAL_MEM_FENCE);
#else
  kda_tiles(q, qo, k, ko, z, zo, bl, bo, dtb, dto, ea, h, H, tok, len, scale, lb, unbounded, Qp, Kp,
            Km, G0, E0, EL, red, nq, nk, bt, Pm, Akk, 0, Tm, qn, kn, up, dn);
#endif
  /* ---- B: back through the factors. */
  for (int e = lid; e < CH * KD; e += KDA_WG) T16[e / KD][e % KD] = dWg[base * CH * KD + e];
  barrier(CLK_LOCAL_MEM_FENCE);
  float dqn[NM], dkn[NM], dG[NM], kdgk[NM];
  float pb = 0.0f; /* this work-item's share of d(beta_r) */
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d >= KD) break;
    const ulong e = (base * CH + r) * KD + d;
#if KDA_UNB /* (the same with e^G = up, e^(G_last - G) = dn) */
    const float gq = dQgg[e], qg = scale * qn[m] * up[m];
    dqn[m] = scale * up[m] * gq;
    dG[m] = qg * gq;
    const float gk = dKdg[e], kd = kn[m] * dn[m];
    dkn[m] = dn[m] * gk;
    dG[m] -= kd * gk;
    kdgk[m] = kd * gk;
    float s = 0.0f;
    for (int i = 0; i < CH; i++) s += Tm[i][r] * T16[i][d];
    const float ekn = kn[m] * up[m];
    pb += s * ekn;
    dkn[m] += bt[r] * up[m] * s;
    dG[m] += bt[r] * ekn * s;
#else
    /* Qg = scale e^G qn */
    const float gq = dQgg[e], qg = scale * qn[m] * up[m] * E0[d];
    dqn[m] = scale * up[m] * E0[d] * gq;
    dG[m] = qg * gq;
    /* Kd = e^(GL - G) kn */
    const float gk = dKdg[e], kd = kn[m] * dn[m] * EL[d];
    dkn[m] = dn[m] * EL[d] * gk;
    dG[m] -= kd * gk;
    kdgk[m] = kd * gk;
    /* W = Tm Kb with Kb = beta e^G kn:  dKb = Tm^T dW */
    float s = 0.0f;
    for (int i = 0; i < CH; i++) s += Tm[i][r] * T16[i][d];
    const float ekn = Kp[r][d] * E0[d]; /* e^G kn */
    pb += s * ekn;
    dkn[m] += bt[r] * E0[d] * up[m] * s;
    dG[m] += bt[r] * ekn * s;
#endif
  }
  /* dTm = dW Kb^T (+ dU Vb^T below), entry (r, lane). */
  float dtm = 0.0f;
#if KDA_UNB
  for (int d = 0; d < KD; d++) {
    float f = Kp[lane][d]; /* e^G kn of row lane: kn a_0 .. a_lane */
    for (int i = 0; i <= lane; i++) f *= Km[i][d];
    dtm += T16[r][d] * f;
  }
#else
  for (int d = 0; d < KD; d++) dtm += T16[r][d] * Kp[lane][d] * E0[d];
#endif
  dtm *= bt[lane];
  barrier(CLK_LOCAL_MEM_FENCE); /* done with dW */
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d < KD) T16[r][d] = kdgk[m];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int d = lid; d < KD; d += KDA_WG) {
    float s = 0.0f;
    for (int i = 0; i < CH; i++) s += T16[i][d];
#if KDA_UNB
    dGL[d] = s + dglg[base * KD + d] * E0[d]; /* (E0: gl) */
#else
    dGL[d] = s + dglg[base * KD + d] * E0[d] * EL[d]; /* Kd terms + gl = e^GL */
#endif
  }
  /* U = Tm Vb with Vb = beta v, over V in tiles of 16 columns. */
  for (int jt = 0; jt < VD; jt += VS) {
    barrier(CLK_LOCAL_MEM_FENCE);
    const int jg = jt + lane;
    tA[r][lane] = jg < VD ? dUg[(base * CH + r) * VD + jg] : 0.0f;
    tB[r][lane] = jg < VD && valid ? LOAD(v, vo + rv + jg) : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int jc = 0; jc < VS; jc++) dtm += bt[lane] * tA[r][jc] * tB[lane][jc];
    float s = 0.0f; /* dVb[r][jg] = (Tm^T dU)[r][jg] */
    for (int i = 0; i < CH; i++) s += Tm[i][r] * tA[i][lane];
    if (valid && jg < VD) dv[dvo + rv + jg] = bt[r] * s;
    pb += s * tB[r][lane];
  }
  dTm[r][lane] = dtm;
  barrier(CLK_LOCAL_MEM_FENCE);
  /* Tm = (I + Akk)^-1:  dAkk = -Tm^T dTm Tm^T on the strict lower triangle. */
  {
    float y = 0.0f;
    for (int m = 0; m < CH; m++) y += dTm[r][m] * Tm[lane][m];
    Y[r][lane] = y;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  {
    float dl = 0.0f;
    for (int m = 0; m < CH; m++) dl -= Tm[m][r] * Y[m][lane];
    const int lower = lane < r;
    pb += lower ? dl * Pm[r][lane] : 0.0f;         /* Akk = beta_r P */
    Mm[r][lane] = lower ? bt[r] * dl : 0.0f;        /* dP = beta_r dAkk */
    tA[r][lane] = lane <= r ? scale * dAg[base * CH * CH + r * CH + lane] : 0.0f; /* d(Qp Km^T) */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* P = Kp Km^T and Aqk / scale = Qp Km^T. */
#if KDA_UNB
  /* (pairs (r, i), i <= r, with F = a_(i+1) .. a_r; pairs (i, r), i >= r, with a_(r+1) .. a_i) */
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d >= KD) break;
    float dKp = 0.0f, dQp = 0.0f, dKm = 0.0f, f = 1.0f;
    for (int i = r; i >= 0; i--) {
      if (i < r) f *= Km[i + 1][d];
      dKp += Mm[r][i] * Kp[i][d] * f;
      dQp += tA[r][i] * Kp[i][d] * f;
    }
    f = 1.0f;
    for (int i = r; i < CH; i++) {
      if (i > r) f *= Km[i][d];
      dKm += (Mm[i][r] * Kp[i][d] + tA[i][r] * Qp[i][d]) * f;
    }
    dqn[m] += dQp;
    dkn[m] += dKp + dKm;
    /* (qn, kn read back from Qp, Kp: with the private copies, Intel's CPU compiler (2026.2)
     * returned a wrong dk for K = 32, PoCL and Oclgrind not) */
    dG[m] += Qp[r][d] * dQp + Kp[r][d] * dKp - Kp[r][d] * dKm;
  }
#else
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d >= KD) break;
    float dKp = 0.0f, dQp = 0.0f, dKm = 0.0f;
    for (int i = 0; i < CH; i++) {
      dKp += Mm[r][i] * Km[i][d];
      dQp += tA[r][i] * Km[i][d];
      dKm += Mm[i][r] * Kp[i][d] + tA[i][r] * Qp[i][d];
    }
    dqn[m] += up[m] * dQp;
    dkn[m] += up[m] * dKp + dn[m] * dKm;
    dG[m] += Qp[r][d] * dQp + Kp[r][d] * dKp - Km[r][d] * dKm;
  }
#endif
  /* ---- C: the cumulative gate, the gate, beta, the L2 norms. */
  red[r][lane] = pb;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d < KD) T16[r][d] = dG[m] + (r == len - 1 ? dGL[d] : 0.0f);
  }
  if (lane == 0 && valid) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += red[r][l];
    dbeta[dbo + tok * (ulong)H + (ulong)h] = s * bt[r] * (1.0f - bt[r]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int d = lid; d < KD; d += KDA_WG) { /* dg = reverse cumulative sum of dG */
    float run = 0.0f;
    for (int i = CH - 1; i >= 0; i--) {
      run += i < len ? T16[i][d] : 0.0f;
      T16[i][d] = run;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float dotq = 0.0f, dotk = 0.0f;
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d >= KD) break;
    float gd = 0.0f, ga = 0.0f;
    if (valid) {
      float2 gg = kda_gate_grads(LOAD(z, zo + rk + d), ea, dtb[dto + (ulong)h * KD + d], lb, unbounded);
      gd = T16[r][d] * gg.x;
      ga = T16[r][d] * gg.y;
      dz[dzo + rk + d] = gd;
    }
    Qp[r][d] = gd; /* the tiles are free now: per-row shares of the parameter gradients */
    Kp[r][d] = ga;
    dotq += qn[m] * dqn[m];
    dotk += kn[m] * dkn[m];
  }
  red[r][lane] = dotq;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int d = lid; d < KD; d += KDA_WG) {
    float sd = 0.0f, sa = 0.0f;
    for (int i = 0; i < CH; i++) sd += Qp[i][d], sa += Kp[i][d];
    pddt[base * KD + d] = sd;
    pdA[base * KD + d] = sa;
  }
  if (lane == 0) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += red[r][l];
    Pm[r][0] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  red[r][lane] = dotk;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == 0) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += red[r][l];
    Pm[r][1] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (valid)
    for (int m = 0; m < NM; m++) { /* d x = (d xn - xn (xn . d xn)) / |x| */
      const int d = lane + 16 * m;
      if (d >= KD) break;
      dq[dqo + rk + d] = nq[r] * (dqn[m] - qn[m] * Pm[r][0]);
      dk[dko + rk + d] = nk[r] * (dkn[m] - kn[m] * Pm[r][1]);
    }
}

/* ddt_bias[h, d] = sum over chunks of pddt[c, h, d]; tmp[h, d] likewise for pdA. */
__kernel void kda_param_reduce(__global const float *pddt, __global const float *pdA, int nchunks,
                               int H, __global float *ddt, ulong ddto, __global float *tmp)
{
  const int e = (int)get_global_id(0);
  if (e >= H * KD) return;
  float sd = 0.0f, sa = 0.0f;
  for (int c = 0; c < nchunks; c++) {
    sd += pddt[(ulong)c * (ulong)(H * KD) + e];
    sa += pdA[(ulong)c * (ulong)(H * KD) + e];
  }
  ddt[ddto + e] = sd;
  tmp[e] = sa;
}

/* dA_log[h] = sum over d of tmp[h, d]. */
__kernel void kda_alog_reduce(__global const float *tmp, int H, __global float *dA, ulong dAo)
{
  const int h = (int)get_global_id(0);
  if (h >= H) return;
  float s = 0.0f;
  for (int d = 0; d < KD; d++) s += tmp[h * KD + d];
  dA[dAo + h] = s;
}
