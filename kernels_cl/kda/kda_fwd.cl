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
 *   (The unbounded gate's prep is kda_fwd_pairwise.cl's kda_prep_pairwise: the same outputs
 *   without anchored factors, finite and exact for any gate values.)
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
  const ulong rv = (tok * (ulong)H + (ulong)h) * VD;
  const float ea = exp(A_log[ao + h]);

  /* Steps 1-5: the tiles (kda_common.cl); v is loaded here, before the first barrier. */
  for (int j = lane; j < VD; j += 16) Vs[r][j] = valid ? LOAD(v, vo + rv + j) : 0.0f;
  float qn[NM], kn[NM], up[NM], dn[NM];
  kda_tiles(q, qo, k, ko, z, zo, bl, bo, dtb, dto, ea, h, H, tok, len, scale, lb, unbounded, Qp, Kp,
            Km, G0, E0, EL, red, nq, nk, bt, 0, Akk, Aqk, Tm, qn, kn, up, dn);
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

/* Loads chunk cc's tiles (W, Qg, Kd, this work-item's U and Aqk entries, gl) into registers. */
#define KDA_PREFETCH(cc)                                                                    \
  do {                                                                                      \
    /* Indices are clamped into the buffers and the values selected afterwards: a compiler  \
     * that turns a guarded load into an unconditional one (PoCL's vectoriser does) must    \
     * not read past the last chunk. */                                                     \
    const ulong b_ = (ulong)(cc) * (ulong)H + (ulong)h;                                     \
    for (int p = 0; p < NPF; p++) {                                                         \
      const int e = lid + p * KDA_WG, ec = min(e, CH * KD - 1);                             \
      const ulong g = b_ * CH * KD + ec;                                                    \
      pw[p] = Wg[g];                                                                        \
      pq[p] = Qgg[g];                                                                       \
      pk[p] = Kdg[g];                                                                       \
    }                                                                                       \
    pu = Ug[(b_ * CH + r) * VD + min(j, VD - 1)];                                           \
    pu = jv ? pu : 0.0f;                                                                    \
    pa = Ag[b_ * CH * CH + r * CH + jj];                                                    \
    pg = glg[b_ * KD + min(lid, KD - 1)];                                                   \
    pg = lid < KD ? pg : 0.0f;                                                              \
  } while (0)

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
  kda_slice_load(S, h0, h0o, has_h0, sbase, j0, lid);
  /* The next chunk's tiles travel through registers: loaded from global memory while the
   * current chunk computes, stored to local memory at the top of the next iteration. */
  float pw[NPF], pq[NPF], pk[NPF], pu = 0.0f, pa = 0.0f, pg = 0.0f;
  const int2 sq = seqs[n];
  if (sq.y > 0) KDA_PREFETCH(sq.x);
  for (int ci = 0; ci < sq.y; ci++) {
    const int c = sq.x + ci;
    const int2 ch = chunks[c];
    const ulong base = (ulong)c * (ulong)H + (ulong)h;
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk is done with the tiles and with S */
    if (save) kda_slice_store(saved, 0, base * KD, S, j0, lid);
    kda_stage_tiles(Wl, Ql, Kl, Al, gll, pw, pq, pk, pa, pg, lid);
    Ul[r][jj] = pu;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ci + 1 < sq.y) KDA_PREFETCH(c + 1);
    /* W S and Qg S in one pass over S. */
    float accw = 0.0f, accq = 0.0f;
    for (int d = 0; d < KD; d++) {
      const float sv = S[d][jj];
      accw += Wl[r][d] * sv;
      accq += Ql[r][d] * sv;
    }
    Vn[r][jj] = Ul[r][jj] - accw;
    if (save && jv) saved_vn[(base * CH + r) * VD + j] = Vn[r][jj];
    barrier(CLK_LOCAL_MEM_FENCE); /* Vn complete; every read of S is done */
    float out = accq;
    for (int m = 0; m < CH; m++) out += Al[r][m] * Vn[m][jj];
    if (has_o && r < ch.y && jv) STORE_OUT(o, oo + ((ulong)(ch.x + r) * (ulong)H + (ulong)h) * VD + j, out);
    /* Each entry of S belongs to one work-item: update in place. */
    for (int e = lid; e < KD * VS; e += KDA_WG) {
      int d = e / VS, jc = e % VS;
      float sv = gll[d] * S[d][jc];
      for (int m = 0; m < CH; m++) sv += Kl[m][d] * Vn[m][jc];
      S[d][jc] = sv;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (has_ht) kda_slice_store(ht, hto, sbase, S, j0, lid);
}
