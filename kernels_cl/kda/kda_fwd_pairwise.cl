/* kda_fwd_pairwise.cl: the chunked forward's per-chunk pass for the unbounded gate (Kimi
 * Linear's -exp(A_log) softplus(z + dt_bias)), kda_prep_pairwise: the outputs of
 * kda_fwd.cl's kda_prep (W, U, Aqk, Qg, Kd, gl for the same kda_state pass) for any gate
 * values, finite and exact.
 *
 * Why another pass: kda_prep anchors every factor at the chunk's first row, e^(G - G0) <= 1
 * and e^(G0 - G) <= e^75 with the bounded gate's steps of at most 5. A token's unbounded
 * decay reaches -50 and beyond (then G0 - G passes fp32's e^88 within two tokens), and an
 * anchored product of a late key with a query after it becomes 0 * inf. Here nothing is
 * anchored: every factor is a product of the per-token decays a = e^g in (0, 1] over the
 * tokens it spans, so none overflows, and one that underflows is below 1e-38 where the exact
 * value is too. Per chunk (rows r, c, channel d, 16 x 16 work-items = entries (r, c)):
 *   P[r][c] = a_(c+1) .. a_r (c <= r),  E_r = a_0 .. a_r,  L_r = a_(r+1) .. a_last
 *   Akk = beta_r sum_d kn_r kn_c P (c < r),   Aqk = scale sum_d qn_r kn_c P (c <= r)
 *   Tm = (I + Akk)^-1,  W = Tm (beta E kn),  U = Tm (beta v)
 *   Qg = scale E qn,  Kd = L kn,  gl = a_0 .. a_last
 * A product of at most 16 roundings is within 16 ulp of its value at any magnitude, where
 * the exponential of a difference of cumulative gates in the hundreds would lose digits.
 * A chunk whose whole decay stays above 1e-30 on every channel (decided by the work-group
 * from local memory, no host round trip) forms the pairs as kda_prep does, from factors
 * anchored at its start (K multiply-adds per entry); the others take every pair's product
 * (K (r - c) multiplies more per entry). On PoCL (2 shared cores, T 2048, H 2, K = V = 64)
 * the chunked forward took 66 ms with per-token decays of at most about 0.5, 270 ms with
 * decays up to about 100 (the bounded gate's 45 ms; the token loop 210-260 ms). */

__kernel __attribute__((reqd_work_group_size(KDA_WG, 1, 1)))
void kda_prep_pairwise(__global const store_t *q, ulong qo, __global const store_t *k, ulong ko,
                       __global const store_t *v, ulong vo, __global const store_t *z, ulong zo,
                       __global const store_t *bl, ulong bo, __global const float *A_log, ulong ao,
                       __global const float *dtb, ulong dto, __global const int2 *chunks, int H,
                       float scale, float lb, int unbounded,
                       __global float *Wg, __global float *Ug, __global float *Ag, __global float *Qgg,
                       __global float *Kdg, __global float *glg)
{
  __local float Qn[CH][KD], Kn[CH][KD], Ad[CH][KD], Vs[CH][VD]; /* qn, kn (then beta E kn), a = e^g */
  __local float red[CH][CH + 1];
  __local float nq[CH], nk[CH], bt[CH];
  __local float Akk[CH][CH + 1], Aqk[CH][CH + 1], Tm[CH][CH + 1];
  const int lid = (int)get_local_id(0), r = lid >> 4, lane = lid & 15;
  const int c = (int)get_group_id(0), h = (int)get_group_id(1);
  const int2 ch = chunks[c];
  const int len = ch.y, valid = r < len;
  const ulong tok = (ulong)(ch.x + r);
  const ulong rv = (tok * (ulong)H + (ulong)h) * VD;
  const float ea = exp(A_log[ao + h]);

  /* 1. q, k, v and the decays of the chunk's rows (q, k, v zero and a one past len); the
   * norms (kda_common.cl). */
  for (int j = lane; j < VD; j += 16) Vs[r][j] = valid ? LOAD(v, vo + rv + j) : 0.0f;
  kda_rows_load(q, qo, k, ko, z, zo, bl, bo, dtb, dto, ea, h, H, tok, len, lb, unbounded, 1, Qn, Kn, Ad,
                red, nq, nk, bt);
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 2. The L2 norms; row r's factors E_r (Qg, W) and L_r (Kd) in registers, and whether
   * the chunk's whole decay a_0 .. a_last stays above 1e-30 on every channel. */
  const ulong base = (ulong)c * (ulong)H + (ulong)h;
  float qn[(KD + 15) / 16], kn[(KD + 15) / 16], er[(KD + 15) / 16], lr[(KD + 15) / 16];
  for (int d = lane, m = 0; d < KD; d += 16, m++) {
    qn[m] = Qn[r][d] * nq[r];
    kn[m] = Kn[r][d] * nk[r];
    float e0 = 1.0f, e1 = 1.0f;
    for (int i = 0; i <= r; i++) e0 *= Ad[i][d];
    for (int i = r + 1; i < len; i++) e1 *= Ad[i][d];
    er[m] = e0, lr[m] = e1;
    const ulong e = (base * CH + r) * KD + d;
    Qgg[e] = scale * qn[m] * e0;
    Kdg[e] = kn[m] * e1;
  }
  if (lid < KD) {
    float gl = 1.0f;
    for (int i = 0; i < len; i++) gl *= Ad[i][lid];
    glg[base * KD + lid] = gl;
    red[lid / 16][lid % 16] = gl >= 1e-30f ? 1.0f : 0.0f; /* (KD <= 128: 8 rows of red) */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* A safe chunk (the common case) takes kda_prep's route, anchored at the chunk's start:
   * Qn = qn E, Kn = kn E (<= 1) and Ad = kn / E (<= 1e30), every product E_r / E_c of a
   * causal pair <= 1 and none of the others past 1e30. Otherwise the decays stay in Ad and
   * every pair's product is taken below. The choice is the work-group's, from local memory:
   * no host round trip, the same barriers either way. */
  int safe = 1;
  for (int i = 0; i < KD; i++) safe = safe && red[i / 16][i % 16] != 0.0f;
  for (int d = lane, m = 0; d < KD; d += 16, m++) {
    Qn[r][d] = safe ? qn[m] * er[m] : qn[m];
    Kn[r][d] = safe ? kn[m] * er[m] : kn[m];
  }
  barrier(CLK_LOCAL_MEM_FENCE); /* every read of Ad above is done */
  if (safe)
    for (int d = lane, m = 0; d < KD; d += 16, m++) Ad[r][d] = kn[m] / er[m];
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 3. Entry (r, lane) of Akk and Aqk: the decay from token lane to token r per channel. */
  {
    const int cc = lane;
    float a = 0.0f, b = 0.0f;
    if (safe) {
      for (int d = 0; d < KD; d++) {
        a += Kn[r][d] * Ad[cc][d];
        b += Qn[r][d] * Ad[cc][d];
      }
    } else if (cc <= r) {
      for (int d = 0; d < KD; d++) {
        float f = Kn[cc][d];
        for (int i = cc + 1; i <= r; i++) f *= Ad[i][d];
        a += Kn[r][d] * f;
        b += Qn[r][d] * f;
      }
    }
    Akk[r][cc] = cc < r ? bt[r] * a : 0.0f;
    Aqk[r][cc] = cc <= r ? scale * b : 0.0f;
  }
  /* Kn becomes beta E kn for W once every work-item has read it. */
  float kb[(KD + 15) / 16];
  for (int d = lane, m = 0; d < KD; d += 16, m++) kb[m] = bt[r] * kn[m] * er[m];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int d = lane, m = 0; d < KD; d += 16, m++) Kn[r][d] = kb[m];
  kda_unit_lower_inverse(Akk, Tm, lid);
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 4. W = Tm (beta E kn), U = Tm (beta v), Aqk. */
  for (int d = lane; d < KD; d += 16) {
    float w = 0.0f;
    for (int m = 0; m < CH; m++) w += Tm[r][m] * Kn[m][d];
    Wg[(base * CH + r) * KD + d] = w;
  }
  for (int j = lane; j < VD; j += 16) {
    float u = 0.0f;
    for (int m = 0; m < CH; m++) u += Tm[r][m] * bt[m] * Vs[m][j];
    Ug[(base * CH + r) * VD + j] = u;
  }
  Ag[base * CH * CH + r * CH + lane] = Aqk[r][lane];
}
