/* mla_bwd.cl: MLA attention backward, flash-attention-2 style: nothing T x T, no atomics.
 *
 * With P = exp(scale S - lse) recomputed from the saved log-sum-exp and D_i = dO_i . O_i:
 *   dV_j = sum_i P_ij dO_i,  dS_ij = P_ij (dO_i . v_j - D_i),
 *   dK_j = scale sum_i dS_ij q_i,  dQ_i = scale sum_j dS_ij k_j.
 * mla_bwd_dot:  D [tokens, H] first (one work-item per row).
 * mla_attn_bwd_kv: one work-group per (key tile of 16 rows, head), 16 x 16 work-items;
 *   the tile's K and V stay in local memory, the loop runs over the query tiles after it
 *   (to the sequence's end), work-item (c, lane) computes the tile entry (key c, query
 *   lane) and then accumulates the float4 column groups lane + 16 m of dK_c and dV_c in
 *   registers: each key's gradient is owned by one work-item (no atomics), summed in query
 *   order. Rows are zero-padded float4s in local memory (one load per 4 numbers). The
 *   shared k_rope part of dK is written per head to a [tokens, H, Dr] buffer and
 *   mla_krope_reduce sums it over heads in order 0..H-1.
 * mla_attn_bwd_q: one work-group per (query tile of 16 rows, head), the loop over the key
 *   tiles from the sequence's start to the diagonal, dQ in registers.
 * Both backward kernels use 16-row tiles starting at the sequence's first token (the
 * forward's key tiles), so the masks and the summation orders are fixed. */
#ifndef DN
#error "DN, DR and DV must be defined"
#endif
#define DQ4 ((DQK + 3) / 4)     /* float4s per q or key row (zero-padded) */
#define DV4 ((DV + 3) / 4)
#define QROW MLA_QROW(DQK)      /* local row strides in float4s */
#define VROW MLA_VROW(DV)
#define NK4 ((DQ4 + BL - 1) / BL) /* float4 column groups per lane: d4 = lane + BL m */
#define NV4 ((DV4 + BL - 1) / BL)

/* D[i] = sum_j dO[i][j] O[i][j] for the tokens x heads rows of o and dout ([rows, DV]). */
__kernel void mla_bwd_dot(__global const out_t *o, ulong oo, __global const float *dout, ulong doo,
                          int rows, __global float *D)
{
  const int i = (int)get_global_id(0);
  if (i >= rows) return;
  float s = 0.0f;
  for (int j = 0; j < DV; j++) s += LOAD_OUT(o, oo + (ulong)i * DV + j) * dout[doo + (ulong)i * DV + j];
  D[i] = s;
}

/* Loads rows [t0, t0 + n) of one head into X (float view of [BB][QROW] float4s: q, or keys
 * = k_nope + the shared k_rope) or Y ([BB][VROW]: v strided, or dO [tokens, H, DV] f32);
 * zero past n and in the padding columns. */
#define LOAD_QK(X, key, t0, n)                                                             \
  for (int e = lid; e < BB * 4 * DQ4; e += MLA_WG) {                                       \
    const int rr = e / (4 * DQ4), d = e % (4 * DQ4), tok = (t0) + rr;                      \
    float x = 0.0f;                                                                        \
    if (rr < (n) && d < DQK) {                                                             \
      if (!(key)) x = LOAD(q, qo + (ulong)tok * q_ts + (ulong)h * q_hs + d);                \
      else x = d < DN ? LOAD(kn, kno + (ulong)tok * kn_ts + (ulong)h * kn_hs + d)          \
                      : LOAD(kr, kro + (ulong)tok * kr_ts + (d - DN));                     \
    }                                                                                      \
    X[rr * 4 * QROW + d] = x;                                                              \
  }
#define LOAD_V(Y, t0, n)                                                                   \
  for (int e = lid; e < BB * 4 * DV4; e += MLA_WG) {                                       \
    const int rr = e / (4 * DV4), j = e % (4 * DV4);                                       \
    Y[rr * 4 * VROW + j] = rr < (n) && j < DV ? LOAD(v, vo + (ulong)((t0) + rr) * v_ts + (ulong)h * v_hs + j) : 0.0f; \
  }
#define LOAD_DO(Y, t0, n)                                                                  \
  for (int e = lid; e < BB * 4 * DV4; e += MLA_WG) {                                       \
    const int rr = e / (4 * DV4), j = e % (4 * DV4);                                       \
    Y[rr * 4 * VROW + j] = rr < (n) && j < DV ? dout[doo + ((ulong)((t0) + rr) * (ulong)H + (ulong)h) * DV + j] : 0.0f; \
  }
/* log2-domain lse and D of rows [t0, t0 + n) */
#define LOAD_ROWSTATS(t0, n)                                                               \
  if (lid < BB) {                                                                          \
    const ulong ri = (ulong)((t0) + lid) * (ulong)H + (ulong)h;                            \
    L2[lid] = lid < (n) ? lse[lo + ri] * LOG2E : 0.0f;                                      \
    Dl[lid] = lid < (n) ? D[ri] : 0.0f;                                                    \
  }
/* a . b over n float4s, components in order */
#define DOT4(acc, a, b, n)                                                                 \
  for (int d4 = 0; d4 < (n); d4++) {                                                       \
    const float4 x_ = (a)[d4], y_ = (b)[d4];                                               \
    acc += x_.x * y_.x;                                                                    \
    acc += x_.y * y_.y;                                                                    \
    acc += x_.z * y_.z;                                                                    \
    acc += x_.w * y_.w;                                                                    \
  }

#define ATTN_BWD_ARGS                                                                      \
  __global const store_t *q, ulong qo, uint q_ts, uint q_hs, __global const store_t *kn,   \
      ulong kno, uint kn_ts, uint kn_hs, __global const store_t *kr, ulong kro, uint kr_ts, \
      __global const store_t *v, ulong vo, uint v_ts, uint v_hs, __global const float *dout, \
      ulong doo, __global const float *lse, ulong lo, __global const float *D,             \
      __global const int4 *tiles, int H, float sl2, float scale

/* sizes: MLA_BWD_LOCAL_BYTES in mla_layout.cl */
#define BWD_LOCALS                                                                         \
  __local float4 Ks[BB * QROW], Vs[BB * VROW], Qs[BB * QROW], dOs[BB * VROW];              \
  __local float Ps[BB][BB + 1], dSs[BB][BB + 1], L2[BB], Dl[BB];                           \
  __local float *Kf = (__local float *)Ks, *Vf = (__local float *)Vs;                      \
  __local float *Qf = (__local float *)Qs, *dOf = (__local float *)dOs

__kernel __attribute__((reqd_work_group_size(MLA_WG, 1, 1)))
void mla_attn_bwd_kv(ATTN_BWD_ARGS, __global float *dkn, ulong dkno, uint dkn_ts, uint dkn_hs,
                     __global float *dv, ulong dvo, uint dv_ts, uint dv_hs, __global float *dkr_part)
{
  BWD_LOCALS;
  const int lid = (int)get_local_id(0), c = lid / BL, lane = lid % BL;
  const int4 tl = tiles[get_group_id(0)];
  const int h = (int)get_group_id(1);
  const int c0 = tl.y, rows = tl.z, end = tl.w, key = c0 + c;
  LOAD_QK(Kf, 1, c0, rows)
  LOAD_V(Vf, c0, rows)
  float4 dk[NK4], dvv[NV4];
  for (int m = 0; m < NK4; m++) dk[m] = (float4)(0.0f);
  for (int m = 0; m < NV4; m++) dvv[m] = (float4)(0.0f);
  for (int qb = c0; qb < end; qb += BB) {
    const int n = min(BB, end - qb);
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous query tile is no longer read */
    LOAD_QK(Qf, 0, qb, n)
    LOAD_DO(dOf, qb, n)
    LOAD_ROWSTATS(qb, n)
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f, dp = 0.0f;
    DOT4(s, Ks + c * QROW, Qs + lane * QROW, DQ4)
    DOT4(dp, Vs + c * VROW, dOs + lane * VROW, DV4)
    const int qt = qb + lane, ok = c < rows && lane < n && qt >= key;
    const float p = ok ? exp2(s * sl2 - L2[lane]) : 0.0f;
    Ps[c][lane] = p;
    dSs[c][lane] = p * (dp - Dl[lane]);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int m = 0; m < NK4; m++) {
      const int d4 = lane + BL * m;
      if (d4 < DQ4) {
        float4 a = dk[m];
        for (int r = 0; r < BB; r++) a += dSs[c][r] * Qs[r * QROW + d4];
        dk[m] = a;
      }
    }
    for (int m = 0; m < NV4; m++) {
      const int j4 = lane + BL * m;
      if (j4 < DV4) {
        float4 a = dvv[m];
        for (int r = 0; r < BB; r++) a += Ps[c][r] * dOs[r * VROW + j4];
        dvv[m] = a;
      }
    }
  }
  if (c < rows) {
    for (int m = 0; m < NK4; m++) {
      const float4 a = scale * dk[m];
      const float av[4] = {a.x, a.y, a.z, a.w};
      for (int u = 0; u < 4; u++) {
        const int d = 4 * (lane + BL * m) + u;
        if (d < DN) dkn[dkno + (ulong)key * dkn_ts + (ulong)h * dkn_hs + d] = av[u];
        else if (d < DQK) dkr_part[((ulong)key * (ulong)H + (ulong)h) * DR + (d - DN)] = av[u];
      }
    }
    for (int m = 0; m < NV4; m++) {
      const float av[4] = {dvv[m].x, dvv[m].y, dvv[m].z, dvv[m].w};
      for (int u = 0; u < 4; u++) {
        const int j = 4 * (lane + BL * m) + u;
        if (j < DV) dv[dvo + (ulong)key * dv_ts + (ulong)h * dv_hs + j] = av[u];
      }
    }
  }
}

__kernel __attribute__((reqd_work_group_size(MLA_WG, 1, 1)))
void mla_attn_bwd_q(ATTN_BWD_ARGS, __global float *dq, ulong dqo)
{
  BWD_LOCALS;
  const int lid = (int)get_local_id(0), r = lid / BL, lane = lid % BL;
  const int4 tl = tiles[get_group_id(0)];
  const int h = (int)get_group_id(1);
  const int s0 = tl.x, t0 = tl.y, rows = tl.z, kend = t0 + rows, qt = t0 + r;
  LOAD_QK(Qf, 0, t0, rows)
  LOAD_DO(dOf, t0, rows)
  LOAD_ROWSTATS(t0, rows)
  float4 dqa[NK4];
  for (int m = 0; m < NK4; m++) dqa[m] = (float4)(0.0f);
  for (int kb = s0; kb < kend; kb += BB) {
    const int n = min(BB, kend - kb);
    barrier(CLK_LOCAL_MEM_FENCE);
    LOAD_QK(Kf, 1, kb, n)
    LOAD_V(Vf, kb, n)
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f, dp = 0.0f;
    DOT4(s, Qs + r * QROW, Ks + lane * QROW, DQ4)
    DOT4(dp, dOs + r * VROW, Vs + lane * VROW, DV4)
    const int ok = r < rows && lane < n && kb + lane <= qt;
    const float p = ok ? exp2(s * sl2 - L2[r]) : 0.0f;
    dSs[r][lane] = p * (dp - Dl[r]);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int m = 0; m < NK4; m++) {
      const int d4 = lane + BL * m;
      if (d4 < DQ4) {
        float4 a = dqa[m];
        for (int c = 0; c < BB; c++) a += dSs[r][c] * Ks[c * QROW + d4];
        dqa[m] = a;
      }
    }
  }
  if (r < rows)
    for (int m = 0; m < NK4; m++) {
      const float4 a = scale * dqa[m];
      const float av[4] = {a.x, a.y, a.z, a.w};
      for (int u = 0; u < 4; u++) {
        const int d = 4 * (lane + BL * m) + u;
        if (d < DQK) dq[dqo + ((ulong)qt * (ulong)H + (ulong)h) * DQK + d] = av[u];
      }
    }
}

/* dk_rope[i][d] = sum over heads (in order) of the per-head parts; one work-item per (i, d). */
__kernel void mla_krope_reduce(__global const float *part, int H, int tokens, __global float *dkr,
                               ulong dkro, uint dkr_ts)
{
  const int gid = (int)get_global_id(0), i = gid / DR, d = gid % DR;
  if (i >= tokens) return;
  float s = 0.0f;
  for (int h = 0; h < H; h++) s += part[((ulong)i * (ulong)H + (ulong)h) * DR + d];
  dkr[dkro + (ulong)i * dkr_ts + d] = s;
}
