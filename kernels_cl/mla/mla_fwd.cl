/* mla_fwd.cl: MLA attention forward.
 *
 * mla_attn_fwd: one work-group per (query tile of FQ rows, head), 256 work-items. A tile
 *   (int4: first key of the sequence, first query row, rows, shift) attends to keys
 *   [x, y + z + w): query row i sits at key position i + w. The training form has the
 *   queries and keys of the same tokens (w = 0); a chunked prefill (mla_extend_flash.c)
 *   has only the new tokens' queries against the whole context's keys (w = prefix + key
 *   start - query start), with the key tiles anchored at the sequence's first key. The query
 *   tile stays in local memory, pre-scaled by scale * log2(e); key tiles of BK = 16 rows
 *   (k_nope of the head, then the shared k_rope) and then value tiles pass through one
 *   local buffer. Rows are zero-padded to whole float4s so the products run on float4
 *   loads (a GPU's local memory issues one load per 4 numbers).
 *   Per key tile:
 *   1. scores: work-item (row r, lane) computes S[r][c] for keys c = lane + FL i over d
 *      in order; the causal mask is a selection (-inf), never a multiplication;
 *   2. row statistics, one work-item per row: running max m, rescale factor
 *      corr = exp2(m_old - m), P = exp2(S - m) (stored transposed), l = l corr + sum P;
 *   3. P V: work-item (row group, column group) owns a 4-row x 4-column block of the output
 *      (and more column blocks when Dv > 4 x 256 / (FQ / 4)): per key one float4 of P and
 *      one float4 of V for 16 multiply-adds.
 *   Online softmax in base 2; o = acc / l; lse = ln(2) (m + log2 l), the natural
 *   log-sum-exp of the scaled scores. Every sum (over d, over keys in 16-key tiles from the
 *   sequence's start) has a fixed order that depends on neither FQ nor the work-group
 *   shape. Memory beyond the inputs: O(1) per work-group, nothing T x T.
 *
 * mla_naive_*: the materialised reference (scores [tokens, H, Lmax] in global memory,
 *   row softmax, P V), one work-item per element: simple, O(T^2) memory, the baseline. */
#ifndef DN
#error "DN, DR and DV must be defined"
#endif
#ifndef FQ
#define FQ 32
#endif
#define FL (MLA_WG / FQ)            /* score phase: lanes per row */
#if FL > BK || BK % FL != 0 || FQ * FL != MLA_WG || FQ % 4 != 0
#error "FQ must be 16 or 32"
#endif
#define DQ4 ((DQK + 3) / 4)         /* float4s per q or key row (zero-padded) */
#define DV4 ((DV + 3) / 4)
#define QROW MLA_QROW(DQK)          /* row strides in float4s (one float4 of padding) */
#define VROW MLA_VROW(DV)
#define RG (FQ / 4)                 /* P V phase: row groups of 4 rows ... */
#define CGN (MLA_WG / RG)           /* ... times column groups of 4 columns */
#define NC4 ((DV4 + CGN - 1) / CGN) /* column groups per work-item */
#define PROW MLA_FWD_PROW(FQ)       /* P^T row stride in float4s */

__kernel __attribute__((reqd_work_group_size(MLA_WG, 1, 1)))
void mla_attn_fwd(__global const store_t *q, ulong qo, uint q_ts, uint q_hs,
                  __global const store_t *kn, ulong kno, uint kn_ts, uint kn_hs,
                  __global const store_t *kr, ulong kro, uint kr_ts,
                  __global const store_t *v, ulong vo, uint v_ts, uint v_hs,
                  __global const int4 *tiles, int H, float sl2,
                  __global out_t *o, ulong oo, __global float *lse, ulong lo, int has_lse)
{
  /* sizes: MLA_FWD_LOCAL_BYTES in mla_layout.cl */
  __local float4 Q4[MLA_FWD_Q4(DQK, FQ)], KV[MLA_FWD_KV4(DQK, DV)], PT4[MLA_FWD_PT4(FQ)];
  __local float Ss[FQ][BK + 1], mrow[FQ], lrow[FQ], crow[FQ];
  __local float *Qf = (__local float *)Q4, *KVf = (__local float *)KV, *PT = (__local float *)PT4;
  const int lid = (int)get_local_id(0);
  const int4 tl = tiles[get_group_id(0)];
  const int h = (int)get_group_id(1);
  /* keys [s0, kend); query row t0 + rr is key t0 + rr + shift (0 in the training form) */
  const int s0 = tl.x, t0 = tl.y, rows = tl.z, shift = tl.w, kend = t0 + rows + shift;
  for (int e = lid; e < FQ * 4 * DQ4; e += MLA_WG) {
    const int rr = e / (4 * DQ4), d = e % (4 * DQ4);
    Qf[rr * 4 * QROW + d] =
        rr < rows && d < DQK ? sl2 * LOAD(q, qo + (ulong)(t0 + rr) * q_ts + (ulong)h * q_hs + d) : 0.0f;
  }
  if (lid < FQ) mrow[lid] = -INFINITY, lrow[lid] = 0.0f;
  /* score phase: (r, lane); P V phase: rows 4 rg .. 4 rg + 3, column groups cg + CGN k */
  const int r = lid / FL, lane = lid % FL, rg = lid / CGN, cg = lid % CGN;
  const int qi = t0 + min(r, rows - 1) + shift; /* as a key; padding rows repeat the last row */
  float4 acc[4][NC4];
  for (int k = 0; k < NC4; k++) acc[0][k] = acc[1][k] = acc[2][k] = acc[3][k] = (float4)(0.0f);
  for (int kb = s0; kb < kend; kb += BK) {
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous tile's V and P are no longer read */
    for (int e = lid; e < BK * 4 * DQ4; e += MLA_WG) {
      const int c = e / (4 * DQ4), d = e % (4 * DQ4), key = kb + c;
      float x = 0.0f;
      if (key < kend && d < DQK)
        x = d < DN ? LOAD(kn, kno + (ulong)key * kn_ts + (ulong)h * kn_hs + d)
                   : LOAD(kr, kro + (ulong)key * kr_ts + (d - DN));
      KVf[c * 4 * QROW + d] = x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < BK / FL; i++) {
      const int c = lane + FL * i;
      float s = 0.0f;
      for (int d4 = 0; d4 < DQ4; d4++) {
        const float4 a = Q4[r * QROW + d4], b = KV[c * QROW + d4];
        s += a.x * b.x;
        s += a.y * b.y;
        s += a.z * b.z;
        s += a.w * b.w;
      }
      Ss[r][c] = kb + c <= qi ? s : -INFINITY;
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* scores done: K may be overwritten by V */
    for (int e = lid; e < BK * 4 * DV4; e += MLA_WG) {
      const int c = e / (4 * DV4), j = e % (4 * DV4), key = kb + c;
      KVf[c * 4 * VROW + j] = key < kend && j < DV ? LOAD(v, vo + (ulong)key * v_ts + (ulong)h * v_hs + j) : 0.0f;
    }
    if (lid < FQ) {
      const float m = mrow[lid];
      float mx = m, ps = 0.0f;
      for (int c = 0; c < BK; c++) mx = fmax(mx, Ss[lid][c]); /* finite: key s0 <= qi is in the first tile */
      for (int c = 0; c < BK; c++) {
        const float p = exp2(Ss[lid][c] - mx);
        PT[c * 4 * PROW + lid] = p;
        ps += p;
      }
      const float corr = exp2(m - mx); /* 0 on the first tile */
      crow[lid] = corr;
      lrow[lid] = lrow[lid] * corr + ps;
      mrow[lid] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float4 corr = (float4)(crow[4 * rg], crow[4 * rg + 1], crow[4 * rg + 2], crow[4 * rg + 3]);
    for (int k = 0; k < NC4; k++) {
      const int j4 = cg + CGN * k;
      if (j4 < DV4) {
        float4 a0 = acc[0][k] * corr.x, a1 = acc[1][k] * corr.y, a2 = acc[2][k] * corr.z, a3 = acc[3][k] * corr.w;
        for (int c = 0; c < BK; c++) {
          const float4 p = PT4[c * PROW + rg], b = KV[c * VROW + j4];
          a0 += p.x * b;
          a1 += p.y * b;
          a2 += p.z * b;
          a3 += p.w * b;
        }
        acc[0][k] = a0, acc[1][k] = a1, acc[2][k] = a2, acc[3][k] = a3;
      }
    }
  }
  for (int i = 0; i < 4; i++) {
    const int rr = 4 * rg + i;
    if (rr >= rows) break;
    const float inv = 1.0f / lrow[rr];
    const ulong ob = oo + ((ulong)(t0 + rr) * (ulong)H + (ulong)h) * DV;
    for (int k = 0; k < NC4; k++) {
      const int j4 = cg + CGN * k;
      if (j4 >= DV4) continue;
      const float4 a = acc[i][k] * inv;
      const float av[4] = {a.x, a.y, a.z, a.w};
      for (int u = 0; u < 4 && 4 * j4 + u < DV; u++) STORE_OUT(o, ob + 4 * j4 + u, av[u]);
    }
  }
  if (has_lse && lid < rows && lid < FQ)
    lse[lo + (ulong)(t0 + lid) * (ulong)H + (ulong)h] = (mrow[lid] + log2(lrow[lid])) * LN2;
}

/* Scores S[i][h][j] = scale q_i . key_(start(i) + j), -inf where masked; one work-item per
 * (j, h, i). start[i]: first token of token i's sequence. */
__kernel void mla_naive_scores(__global const store_t *q, ulong qo, uint q_ts, uint q_hs,
                               __global const store_t *kn, ulong kno, uint kn_ts, uint kn_hs,
                               __global const store_t *kr, ulong kro, uint kr_ts,
                               __global const int *start, int H, int L, float scale, __global float *S)
{
  const int j = (int)get_global_id(0), h = (int)get_global_id(1), i = (int)get_global_id(2);
  const int key = start[i] + j;
  float s = -INFINITY;
  if (key <= i) {
    float a = 0.0f;
    const ulong qb = qo + (ulong)i * q_ts + (ulong)h * q_hs;
    for (int d = 0; d < DN; d++) a += LOAD(q, qb + d) * LOAD(kn, kno + (ulong)key * kn_ts + (ulong)h * kn_hs + d);
    for (int d = 0; d < DR; d++) a += LOAD(q, qb + DN + d) * LOAD(kr, kro + (ulong)key * kr_ts + d);
    s = scale * a;
  }
  S[((ulong)i * (ulong)H + (ulong)h) * (ulong)L + j] = s;
}

/* Row softmax of the scores in place (one work-item per (h, i)) and the log-sum-exp. */
__kernel void mla_naive_softmax(__global const int *start, int H, int L, __global float *S,
                                __global float *lse, ulong lo, int has_lse)
{
  const int h = (int)get_global_id(0), i = (int)get_global_id(1);
  const int n = i - start[i] + 1;
  __global float *row = S + ((ulong)i * (ulong)H + (ulong)h) * (ulong)L;
  float m = -INFINITY, sum = 0.0f;
  for (int j = 0; j < n; j++) m = fmax(m, row[j]);
  for (int j = 0; j < n; j++) sum += exp(row[j] - m);
  for (int j = 0; j < n; j++) row[j] = exp(row[j] - m) / sum;
  if (has_lse) lse[lo + (ulong)i * (ulong)H + (ulong)h] = m + log(sum);
}

/* o[i][h][jv] = sum_j P[i][h][j] v[start(i) + j][h][jv]; one work-item per (jv, h, i). */
__kernel void mla_naive_pv(__global const store_t *v, ulong vo, uint v_ts, uint v_hs,
                           __global const int *start, int H, int L, __global const float *S,
                           __global out_t *o, ulong oo)
{
  const int jv = (int)get_global_id(0), h = (int)get_global_id(1), i = (int)get_global_id(2);
  const int s = start[i], n = i - s + 1;
  __global const float *row = S + ((ulong)i * (ulong)H + (ulong)h) * (ulong)L;
  float a = 0.0f;
  for (int j = 0; j < n; j++) a += row[j] * LOAD(v, vo + (ulong)(s + j) * v_ts + (ulong)h * v_hs + jv);
  STORE_OUT(o, oo + ((ulong)i * (ulong)H + (ulong)h) * DV + jv, a);
}
