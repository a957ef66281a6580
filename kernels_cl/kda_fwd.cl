/* kda_fwd.cl: chunked KDA forward in two kernels (the FlashKDA split).
 *
 * kda_prep: one work-group per (chunk, head), all chunks at once. Gate, L2 norm of q and
 *   k, sigmoid of beta, the in-chunk cumulative gate G, then every tile product as a dense
 *   16 x K x 16 product of anchored factors: with G0 the chunk's first row,
 *     Qp = qn e^(G - G0),  Kp = kn e^(G - G0)  (<= 1),   Km = kn e^(G0 - G)  (<= e^75),
 *     Aqk = scale Qp Km^T (c <= r),   Akk = beta Kp Km^T (c < r)
 *   (the causal mask is applied by selection). Then Tm = (I + Akk)^-1 by forward
 *   substitution (column-parallel), W = Tm (beta e^G kn), U = Tm (beta v), and the factors
 *   the state pass needs: Qg = scale e^G qn, Kd = e^(G_last - G) kn, gl = e^G_last.
 * kda_state: one work-group per (sequence, head, 16 columns of V); walks the sequence's
 *   chunks in order with its slice of the state S [K, 16] in local memory:
 *     Vnew = U - W S,   O = Qg S + Aqk Vnew,   S = gl (.) S + Kd^T Vnew.
 * With `save` (the backward's recomputation) it also keeps the state entering each chunk
 * [chunks, H, K, V] and Vnew [chunks, H, 16, V].
 * These 16 x K x 16 products are too small for CLBlast's batched GEMM to pay (each would be
 * a separate global round trip and launch); they stay fused here. CLBlast serves the
 * projections around the op. */

__kernel __attribute__((reqd_work_group_size(KDA_WG, 1, 1)))
void kda_prep(__global const store_t *q, ulong qo, __global const store_t *k, ulong ko,
              __global const store_t *v, ulong vo, __global const store_t *z, ulong zo,
              __global const store_t *bl, ulong bo, __global const float *A_log, ulong ao,
              __global const float *dtb, ulong dto, __global const int2 *chunks, int H,
              float scale, float lb, int unbounded,
              __global float *Wg, __global float *Ug, __global float *Ag, __global float *Qgg,
              __global float *Kdg, __global float *glg)
{
  __local float Qp[CH][KD], Kp[CH][KD], Km[CH][KD], Vs[CH][VD];
  __local float G0[KD], E0[KD], EL[KD]; /* G of the first row, e^G0, e^(G_last - G0) */
  __local float red[CH][CH + 1];
  __local float nq[CH], nk[CH], bt[CH];
  __local float Akk[CH][CH + 1], Aqk[CH][CH + 1], Tm[CH][CH + 1];
  const int lid = (int)get_local_id(0), r = lid >> 4, lane = lid & 15;
  const int c = (int)get_group_id(0), h = (int)get_group_id(1);
  const int2 ch = chunks[c];
  const int len = ch.y, valid = r < len;
  const ulong tok = (ulong)(ch.x + r);
  const ulong rk = (tok * (ulong)H + (ulong)h) * KD, rv = (tok * (ulong)H + (ulong)h) * VD;
  const float ea = exp(A_log[ao + h]);

  /* 1. Load q, k, the gate g (into Km for now) and v; padded rows are zero. */
  float sq = 0.0f, sk = 0.0f;
  for (int d = lane; d < KD; d += 16) {
    float qv = valid ? LOAD(q, qo + rk + d) : 0.0f, kv = valid ? LOAD(k, ko + rk + d) : 0.0f;
    Qp[r][d] = qv;
    Kp[r][d] = kv;
    sq += qv * qv;
    sk += kv * kv;
    Km[r][d] = valid ? kda_gate(LOAD(z, zo + rk + d), ea, dtb[dto + (ulong)h * KD + d], lb, unbounded) : 0.0f;
  }
  for (int j = lane; j < VD; j += 16) Vs[r][j] = valid ? LOAD(v, vo + rv + j) : 0.0f;
  red[r][lane] = sq;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == 0) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += red[r][l];
    nq[r] = 1.0f / sqrt(s + L2_EPS);
    bt[r] = valid ? kda_sigmoid(LOAD(bl, bo + tok * (ulong)H + (ulong)h)) : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  red[r][lane] = sk;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == 0) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += red[r][l];
    nk[r] = 1.0f / sqrt(s + L2_EPS);
  }
  /* 2. In-chunk inclusive cumulative sum of g, one column per work-item. */
  for (int d = lid; d < KD; d += KDA_WG) {
    float run = 0.0f;
    for (int i = 0; i < CH; i++) {
      run += Km[i][d];
      Km[i][d] = run;
    }
    G0[d] = Km[0][d];
    E0[d] = exp(Km[0][d]);
    EL[d] = exp(Km[len - 1][d] - Km[0][d]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 3. Anchored factors (normalising q and k on the way). */
  for (int d = lane; d < KD; d += 16) {
    float e = Km[r][d] - G0[d]; /* G_r - G0 in [-75, 0] */
    float up = exp(e), down = exp(-e), kn = Kp[r][d] * nk[r];
    Qp[r][d] = Qp[r][d] * nq[r] * up;
    Kp[r][d] = kn * up;
    Km[r][d] = kn * down;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 4. The two tile products; (r, lane) is one entry of each. */
  {
    float a = 0.0f, b = 0.0f;
    for (int d = 0; d < KD; d++) {
      a += Kp[r][d] * Km[lane][d];
      b += Qp[r][d] * Km[lane][d];
    }
    Akk[r][lane] = lane < r ? bt[r] * a : 0.0f;
    Aqk[r][lane] = lane <= r ? scale * b : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 5. Tm = (I + Akk)^-1: column cc only needs earlier rows of column cc. */
  if (lid < CH) {
    const int cc = lid;
    for (int i = 0; i < CH; i++) {
      float t = i == cc ? 1.0f : 0.0f;
      if (i > cc) {
        float s = 0.0f;
        for (int m = cc; m < i; m++) s += Akk[i][m] * Tm[m][cc];
        t = -s;
      }
      Tm[i][cc] = t;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 6. W, U, Qg, Kd, Aqk, gl for the state pass. */
  const ulong base = (ulong)c * (ulong)H + (ulong)h;
  for (int d = lane; d < KD; d += 16) {
    float w = 0.0f;
    for (int m = 0; m < CH; m++) w += Tm[r][m] * bt[m] * Kp[m][d];
    const ulong e = (base * CH + r) * KD + d;
    Wg[e] = w * E0[d];
    Qgg[e] = scale * Qp[r][d] * E0[d];
    Kdg[e] = Km[r][d] * EL[d];
  }
  for (int j = lane; j < VD; j += 16) {
    float u = 0.0f;
    for (int m = 0; m < CH; m++) u += Tm[r][m] * bt[m] * Vs[m][j];
    Ug[(base * CH + r) * VD + j] = u;
  }
  Ag[base * CH * CH + r * CH + lane] = Aqk[r][lane];
  for (int d = lid; d < KD; d += KDA_WG) glg[base * KD + d] = E0[d] * EL[d];
}

__kernel __attribute__((reqd_work_group_size(KDA_WG, 1, 1)))
void kda_state(__global const float *Wg, __global const float *Ug, __global const float *Ag,
               __global const float *Qgg, __global const float *Kdg, __global const float *glg,
               __global const int2 *chunks, __global const int2 *seqs, int H,
               __global const float *h0, ulong h0o, int has_h0, __global out_t *o, ulong oo,
               int has_o, __global float *ht, ulong hto, int has_ht, __global float *saved,
               __global float *saved_vn, int save)
{
  __local float S[KD][VS];
  __local float Wl[CH][KD], Ql[CH][KD], Kl[CH][KD];
  __local float Ul[CH][VS + 1], Vn[CH][VS + 1], Al[CH][CH + 1], gll[KD];
  const int lid = (int)get_local_id(0), r = lid >> 4, jj = lid & 15;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int j0 = (int)get_group_id(0) * VS, j = j0 + jj, jv = j < VD;
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD;
  for (int e = lid; e < KD * VS; e += KDA_WG) {
    int d = e / VS, jc = e % VS;
    S[d][jc] = has_h0 && j0 + jc < VD ? h0[h0o + (sbase + d) * VD + j0 + jc] : 0.0f;
  }
  const int2 sq = seqs[n];
  for (int ci = 0; ci < sq.y; ci++) {
    const int c = sq.x + ci;
    const int2 ch = chunks[c];
    const ulong base = (ulong)c * (ulong)H + (ulong)h;
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk is done with the tiles */
    if (save)
      for (int e = lid; e < KD * VS; e += KDA_WG) {
        int d = e / VS, jc = e % VS;
        if (j0 + jc < VD) saved[(base * KD + d) * VD + j0 + jc] = S[d][jc];
      }
    for (int e = lid; e < CH * KD; e += KDA_WG) {
      const ulong g = base * CH * KD + e;
      Wl[e / KD][e % KD] = Wg[g];
      Ql[e / KD][e % KD] = Qgg[g];
      Kl[e / KD][e % KD] = Kdg[g];
    }
    Ul[r][jj] = jv ? Ug[(base * CH + r) * VD + j] : 0.0f;
    Al[r][jj] = Ag[base * CH * CH + r * CH + jj];
    for (int d = lid; d < KD; d += KDA_WG) gll[d] = glg[base * KD + d];
    barrier(CLK_LOCAL_MEM_FENCE);
    float acc = 0.0f;
    for (int d = 0; d < KD; d++) acc += Wl[r][d] * S[d][jj];
    Vn[r][jj] = Ul[r][jj] - acc;
    if (save && jv) saved_vn[(base * CH + r) * VD + j] = Vn[r][jj];
    barrier(CLK_LOCAL_MEM_FENCE);
    float out = 0.0f;
    for (int d = 0; d < KD; d++) out += Ql[r][d] * S[d][jj];
    for (int m = 0; m < CH; m++) out += Al[r][m] * Vn[m][jj];
    if (has_o && r < ch.y && jv) STORE_OUT(o, oo + ((ulong)(ch.x + r) * (ulong)H + (ulong)h) * VD + j, out);
    barrier(CLK_LOCAL_MEM_FENCE); /* every read of S is done */
    for (int e = lid; e < KD * VS; e += KDA_WG) {
      int d = e / VS, jc = e % VS;
      float s = gll[d] * S[d][jc];
      for (int m = 0; m < CH; m++) s += Kl[m][d] * Vn[m][jc];
      S[d][jc] = s;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (has_ht)
    for (int e = lid; e < KD * VS; e += KDA_WG) {
      int d = e / VS, jc = e % VS;
      if (j0 + jc < VD) ht[hto + (sbase + d) * VD + j0 + jc] = S[d][jc];
    }
}
