/* mla_decode.cl: the paged latent cache and absorbed decoding.
 *
 * Cache: [blocks, CB, DC + DR] (fp32 or bf16 storage, -DCACHE_BF16), one row per token:
 * the normed latent c, then the shared key k_r. A sequence's token p lives in block
 * table[seq][p / CB], row p % CB.
 *
 * mla_cache_write: writes the rows of a batch of tokens (map[i] = (sequence, position));
 *   mla_cache_append_norm: a decode step's rows, the latent's RMSNorm applied on the way;
 *   mla_cache_gather reads them back into contiguous f32 (chunked prefill, training form).
 * mla_decode_attn: one work-group per (split of MLA_DECODE_SPLIT(len) tokens, group of HG heads,
 *   sequence). In absorbed form every head attends to the same cache rows with the query
 *   [q_c = W_uk^T q_n; q_r] (DC + DR wide, pre-scaled by scale log2 e): the rows are loaded
 *   once per tile of BT tokens for all HG heads. Work-item (head hh, lane): scores by
 *   NSUB partial sums per token (fixed order), the online softmax (every lane of a head
 *   computes the same m, l), and columns lane + LH k of sum_t p_t c_t in registers.
 *   Writes the split's unnormalised partials (m, l, o).
 * mla_decode_combine: merges the splits of each (sequence, head) in split order. The split
 *   length is a host constant, so the bits do not depend on the device.
 * mla_dec_absorb_q, mla_dec_absorb_o: the decode step's per-head products with W_ukv
 *   [H (DN + DV), DC] (fp32, or bf16 with -DW_BF16=1; fp32 sums): q_c = W_uk[h]^T q_n and
 *   o_h = W_uv[h] o_c, for the few rows of a step (lib/mla/mla_decode.c), eight adjacent
 *   columns of W a work-item (one 16-byte load with -DWVEC=1). */
#ifndef DC
#error "DC and DR must be defined"
#endif
#define DL (DC + DR)
#define CB 64 /* tokens per cache block (CLMOE_MLA_CACHE_BLOCK) */
#if defined(CACHE_BF16) && CACHE_BF16
typedef ushort cache_t;
#define CLOAD(p, i) bf16_to_f32((p)[i])
#define CSTORE(p, i, x) ((p)[i] = f32_to_bf16(x))
#else
typedef float cache_t;
#define CLOAD(p, i) ((p)[i])
#define CSTORE(p, i, x) ((p)[i] = (x))
#endif
#if defined(W_BF16) && W_BF16
typedef ushort wgt_t;
#define WLOAD(p, i) bf16_to_f32((p)[i])
#else
typedef float wgt_t;
#define WLOAD(p, i) ((p)[i])
#endif
#ifndef HG
#define HG 8 /* heads per work-group */
#endif
#ifndef BT
#define BT 8 /* cache rows per tile */
#endif
#define LH (MLA_WG / HG)
#define NSUB MLA_DECODE_NSUB(HG, BT)
#define NJD ((DC + LH - 1) / LH)
#if LH % BT != 0 || HG * LH != MLA_WG
#error "HG and BT must divide the work-group"
#endif

/* One work-item per (element e of a row, token i). c [tokens, DC] and kr [tokens, DR] with
 * token strides c_ts, kr_ts. Token i goes to map[i] = (sequence, position), or with
 * `append` (a decode step: token i of sequence i) to the end of sequence i, lens[i]. */
__kernel void mla_cache_write(__global const float *c, ulong co, uint c_ts, __global const float *kr,
                              ulong kro, uint kr_ts, __global const int2 *map, int tokens,
                              __global const int *table, int maxb, __global cache_t *cache,
                              __global const int *lens, int append)
{
  const int e = (int)get_global_id(0), i = (int)get_global_id(1);
  if (e >= DL || i >= tokens) return;
  const int2 sp = append ? (int2)(i, lens[i]) : map[i];
  const int blk = table[sp.x * maxb + sp.y / CB];
  const float x = e < DC ? c[co + (ulong)i * c_ts + e] : kr[kro + (ulong)i * kr_ts + (e - DC)];
  CSTORE(cache, ((ulong)blk * CB + (ulong)(sp.y % CB)) * DL + e, x);
}

/* The inverse for a chunked prefill in the training form: cache rows to contiguous f32 c
 * [keys, DC] and kr [keys, DR], key i from map[i] = (sequence, position); bf16 rows come
 * out as stored. One work-item per (element, key), in one dimension (a million keys would
 * exceed some drivers' limits on the second). */
__kernel void mla_cache_gather(__global const cache_t *cache, __global const int *table, int maxb,
                               __global const int2 *map, int keys, __global float *c, __global float *kr)
{
  const ulong gid = get_global_id(0);
  const int e = (int)(gid % DL), i = (int)(gid / DL);
  if (i >= keys) return;
  const int2 sp = map[i];
  const int blk = table[sp.x * maxb + sp.y / CB];
  const float x = CLOAD(cache, ((ulong)blk * CB + (ulong)(sp.y % CB)) * DL + e);
  if (e < DC)
    c[(ulong)i * DC + e] = x;
  else
    kr[(ulong)i * DR + (e - DC)] = x;
}

/* A decode step's append with the latent's RMSNorm: row n of the raw latent c [N, DC] (at
 * co, token stride c_ts) times rstd times the gain g (at go), and k_r [N, DR] (at kro, token
 * stride kr_ts), written to the end of sequence n (position lens[n]), whose length then
 * advances by one. One work-group per sequence; rstd = 1 / sqrt(mean(c^2) + eps) with the
 * squares summed lane-strided and the lanes' partials added in lane order. */
__kernel __attribute__((reqd_work_group_size(MLA_APPEND_WG, 1, 1)))
void mla_cache_append_norm(__global const float *c, ulong co, uint c_ts, __global const float *g, ulong go,
                           float eps, __global const float *kr, ulong kro, uint kr_ts, __global const int *table,
                           int maxb, __global cache_t *cache, __global int *lens)
{
  __local float part[MLA_APPEND_WG];
  __local float rs;
  const int lid = (int)get_local_id(0), n = (int)get_group_id(0);
  __global const float *row = c + co + (ulong)n * c_ts;
  float a = 0.0f;
  for (int e = lid; e < DC; e += MLA_APPEND_WG) a = fma(row[e], row[e], a);
  part[lid] = a;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    float s = 0.0f;
    for (int i = 0; i < MLA_APPEND_WG; i++) s += part[i];
    rs = rsqrt(s / (float)DC + eps);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int pos = lens[n];
  const ulong base = ((ulong)table[n * maxb + pos / CB] * CB + (ulong)(pos % CB)) * DL;
  for (int e = lid; e < DL; e += MLA_APPEND_WG) {
    const float x = e < DC ? row[e] * rs * g[go + (ulong)e] : kr[kro + (ulong)n * kr_ts + (ulong)(e - DC)];
    CSTORE(cache, base + (ulong)e, x);
  }
  barrier(CLK_GLOBAL_MEM_FENCE); /* every lane has read lens[n] */
  if (lid == 0) lens[n] = pos + 1;
}

/* lens[n] += 1 after a decode step's rows are written. */
__kernel void mla_lens_inc(__global int *lens, int n)
{
  const int i = (int)get_global_id(0);
  if (i < n) lens[i] += 1;
}

/* qc [N, H, DC] f32; q_r of token n, head h at q[qo + n q_ts + h q_hs + d] (qo points at
 * the rope part). Partials: pm, pl [N, H, nsplit], po [N, H, nsplit, DC]. */
__kernel __attribute__((reqd_work_group_size(MLA_WG, 1, 1)))
void mla_decode_attn(__global const float *qc, ulong qco, __global const float *q, ulong qo, uint q_ts,
                     uint q_hs, __global const cache_t *cache, __global const int *table, int maxb,
                     __global const int *lens, int H, int nsplit, float sl2,
                     __global float *pm, __global float *pl, __global float *po)
{
  __local float Qs[HG][DL + 1], Cs[BT][DL + 1], red[HG][BT][NSUB + 1]; /* MLA_DECODE_LOCAL_BYTES */
  const int lid = (int)get_local_id(0), hh = lid / LH, lane = lid % LH;
  const int sp = (int)get_group_id(0), g = (int)get_group_id(1), n = (int)get_group_id(2);
  const int len = lens[n], split = MLA_DECODE_SPLIT(len), tb0 = sp * split;
  if (tb0 >= len) return; /* the whole work-group: this split is past the sequence's end */
  const int te = min(len, tb0 + split);
  for (int e = lid; e < HG * DL; e += MLA_WG) {
    const int k = e / DL, d = e % DL, h = g * HG + k;
    float x = 0.0f;
    if (h < H)
      x = d < DC ? qc[qco + ((ulong)n * (ulong)H + (ulong)h) * DC + d]
                 : q[qo + (ulong)n * q_ts + (ulong)h * q_hs + (d - DC)];
    Qs[k][d] = sl2 * x;
  }
  const int t = lane / NSUB, sub = lane % NSUB;
  float m = -INFINITY, l = 0.0f, acc[NJD];
  for (int k = 0; k < NJD; k++) acc[k] = 0.0f;
  for (int tb = tb0; tb < te; tb += BT) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < BT * DL; e += MLA_WG) {
      const int tt = e / DL, d = e % DL, pos = tb + tt;
      float x = 0.0f;
      if (pos < te) x = CLOAD(cache, ((ulong)table[n * maxb + pos / CB] * CB + (ulong)(pos % CB)) * DL + d);
      Cs[tt][d] = x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float part = 0.0f;
    for (int d = sub; d < DL; d += NSUB) part += Qs[hh][d] * Cs[t][d];
    red[hh][t][sub] = part;
    barrier(CLK_LOCAL_MEM_FENCE);
    float p[BT], mx = m, ps = 0.0f;
    for (int tt = 0; tt < BT; tt++) {
      float s = 0.0f;
      for (int u = 0; u < NSUB; u++) s += red[hh][tt][u];
      p[tt] = tb + tt < te ? s : -INFINITY;
      mx = fmax(mx, p[tt]);
    }
    const float corr = exp2(m - mx);
    for (int tt = 0; tt < BT; tt++) {
      p[tt] = exp2(p[tt] - mx);
      ps += p[tt];
    }
    l = l * corr + ps;
    m = mx;
    for (int k = 0; k < NJD; k++) {
      const int j = lane + LH * k;
      if (j < DC) {
        float a = acc[k] * corr;
        for (int tt = 0; tt < BT; tt++) a += p[tt] * Cs[tt][j];
        acc[k] = a;
      }
    }
  }
  const int h = g * HG + hh;
  if (h < H) {
    const ulong base = ((ulong)n * (ulong)H + (ulong)h) * (ulong)nsplit + (ulong)sp;
    for (int k = 0; k < NJD; k++) {
      const int j = lane + LH * k;
      if (j < DC) po[base * DC + j] = acc[k];
    }
    if (lane == 0) {
      pm[base] = m;
      pl[base] = l;
    }
  }
}

/* oc[n][h][j] = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s over the splits of sequence n,
 * in order; one work-item per (j, h, n). */
__kernel void mla_decode_combine(__global const float *pm, __global const float *pl,
                                 __global const float *po, __global const int *lens, int H, int nsplit,
                                 __global float *oc)
{
  const int j = (int)get_global_id(0), h = (int)get_global_id(1), n = (int)get_global_id(2);
  if (j >= DC) return;
  const int split = MLA_DECODE_SPLIT(lens[n]), ns = (lens[n] + split - 1) / split;
  const ulong base = ((ulong)n * (ulong)H + (ulong)h) * (ulong)nsplit;
  float M = -INFINITY;
  for (int s = 0; s < ns; s++) M = fmax(M, pm[base + s]);
  float L = 0.0f, O = 0.0f;
  for (int s = 0; s < ns; s++) {
    const float w = exp2(pm[base + s] - M);
    L += pl[base + s] * w;
    O += po[(base + s) * DC + j] * w;
  }
  oc[((ulong)n * (ulong)H + (ulong)h) * DC + j] = O / L;
}

/* x[j .. j + 7], those at DC or beyond 0. */
inline float8 mla_x8(__global const float *x, int j)
{
  float v[8];
  for (int e = 0; e < 8; e++) v[e] = j + e < DC ? x[j + e] : 0.0f;
  return vload8(0, v);
}

/* Eight weights of W_ukv from w[i]: columns j .. j + 7 of a row, those at DC or beyond 0.
 * With -DWVEC=1 (DC a multiple of 8 and W's offset 16-byte aligned, as the host checks) one
 * 16-byte load, else element by element; the values are the same. */
inline float8 mla_w8(__global const wgt_t *w, ulong i, int j)
{
#if defined(WVEC) && WVEC && defined(W_BF16) && W_BF16
  return bf16x8_load_a16(w, i);
#elif defined(WVEC) && WVEC
  return f32x8_load_a16(w, i);
#else
  float v[8];
  for (int e = 0; e < 8; e++) v[e] = j + e < DC ? WLOAD(w, i + (ulong)e) : 0.0f;
  return vload8(0, v);
#endif
}

#define AQ_CH 16    /* chunks of eight columns per work-group of mla_dec_absorb_q */
#define AQ_PARTS 16 /* ... times parts of the sum over i */
/* qc [N, H, DC]: qc[n][h][j] = sum_i q[n][h][i] W[h DKV + i][j] over i < DN, q [N, H DQK] at
 * qo (token stride H DQK, head stride DQK), W = W_ukv at wo. A work-group of AQ_CH x
 * AQ_PARTS work-items takes 8 AQ_CH columns of one (head, token): work-item (chunk, part p)
 * sums i = p, p + AQ_PARTS, ... in order for its eight columns (8 independent sums, a
 * 16-byte weight load each i), then the AQ_PARTS partials of a column are added in part
 * order. Groups: (DC / (8 AQ_CH) rounded up, H, N). */
__kernel __attribute__((reqd_work_group_size(AQ_CH * AQ_PARTS, 1, 1)))
void mla_dec_absorb_q(__global const float *q, ulong qo, int dqk, int dn, int dkv,
                      __global const wgt_t *w, ulong wo, __global float *qc)
{
  __local float part[AQ_PARTS][8 * AQ_CH + 1];
  const int lid = (int)get_local_id(0), ch = lid % AQ_CH, p = lid / AQ_CH;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2), H = (int)get_num_groups(1);
  const int jb = (int)get_group_id(0) * 8 * AQ_CH, j = jb + 8 * ch;
  __global const float *qh = q + qo + ((ulong)n * (ulong)H + (ulong)h) * (ulong)dqk;
  const ulong w0 = wo + (ulong)h * (ulong)dkv * DC + (ulong)j;
  float8 a = (float8)(0.0f);
  if (j < DC)
    for (int i = p; i < dn; i += AQ_PARTS) a = fma((float8)(qh[i]), mla_w8(w, w0 + (ulong)i * DC, j), a);
  float v[8];
  vstore8(a, 0, v);
  for (int e = 0; e < 8; e++) part[p][8 * ch + e] = v[e];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < 8 * AQ_CH && jb + lid < DC) {
    float s = 0.0f;
    for (int i = 0; i < AQ_PARTS; i++) s += part[i][lid];
    qc[((ulong)n * (ulong)H + (ulong)h) * DC + (ulong)(jb + lid)] = s;
  }
}

#define AO_ROWS 8  /* rows per work-group of mla_dec_absorb_o */
#define AO_LANES 8 /* ... times lanes per row */
/* o [N, H DV] (token stride H dv): o[n][h dv + v] = sum_j oc[n][h][j] W[h DKV + DN + v][j].
 * A work-group of AO_ROWS x AO_LANES takes AO_ROWS rows v of one (head, token); lane l of a
 * row sums the columns 8 l .. 8 l + 7, 8 l + 64 .., ... (a 16-byte weight load each) in
 * order, and the AO_LANES partials are added in lane order. Groups: (1, rows / AO_ROWS
 * rounded up, N H). */
__kernel __attribute__((reqd_work_group_size(AO_ROWS * AO_LANES, 1, 1)))
void mla_dec_absorb_o(__global const float *oc, int H, int dn, int dv, int dkv, __global const wgt_t *w,
                      ulong wo, __global float *o)
{
  __local float part[AO_ROWS][AO_LANES + 1];
  const int lid = (int)get_local_id(0), r = lid / AO_LANES, l = lid % AO_LANES;
  const int v = (int)get_group_id(1) * AO_ROWS + r, nh = (int)get_group_id(2), h = nh % H;
  __global const float *x = oc + (ulong)nh * DC;
  const ulong w0 = wo + ((ulong)h * (ulong)dkv + (ulong)(dn + v)) * DC;
  float a = 0.0f;
  if (v < dv)
    for (int j = 8 * l; j < DC; j += 8 * AO_LANES) {
      const float8 wv = mla_w8(w, w0 + (ulong)j, j), xv = j + 8 <= DC ? vload8(0, x + j) : mla_x8(x, j);
      a = fma8_acc(a, wv, xv);
    }
  part[r][l] = a;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l == 0 && v < dv) {
    float s = 0.0f;
    for (int i = 0; i < AO_LANES; i++) s += part[r][i];
    o[(ulong)nh * (ulong)dv + (ulong)v] = s;
  }
}
