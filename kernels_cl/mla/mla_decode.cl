/* mla_decode.cl: the paged latent cache and absorbed decoding.
 *
 * Cache: [blocks, CB, DC + DR] (fp32 or bf16 storage, -DCACHE_BF16), one row per token:
 * the normed latent c, then the shared key k_r. A sequence's token p lives in block
 * table[seq][p / CB], row p % CB.
 *
 * mla_cache_write: writes the rows of a batch of tokens (map[i] = (sequence, position));
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
 *   o_h = W_uv[h] o_c, for the few rows of a step (lib/mla/mla_decode.c). */
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

/* qc [N, H, DC]: qc[n][h][j] = sum_i q[n][h][i] W[h DKV + i][j] for i < DN in order, q [N, H DQK]
 * at qo (token stride H DQK, head stride DQK), W = W_ukv at wo. One work-item per (j, h, n). */
__kernel void mla_dec_absorb_q(__global const float *q, ulong qo, int dqk, int dn, int dkv,
                               __global const wgt_t *w, ulong wo, __global float *qc)
{
  const int j = (int)get_global_id(0), h = (int)get_global_id(1), n = (int)get_global_id(2);
  const int H = (int)get_global_size(1);
  if (j >= DC) return;
  __global const float *qh = q + qo + ((ulong)n * (ulong)H + (ulong)h) * (ulong)dqk;
  const ulong w0 = wo + (ulong)h * (ulong)dkv * DC + (ulong)j;
  float a = 0.0f;
#pragma unroll 8
  for (int i = 0; i < dn; i++) a += qh[i] * WLOAD(w, w0 + (ulong)i * DC); /* (unrolled: loads in flight) */
  qc[((ulong)n * (ulong)H + (ulong)h) * DC + j] = a;
}

#define AO_LANES 64
#define AO_ROWS 4
/* o [N, H DV] (token stride H dv): o[n][h dv + v] = sum_j oc[n][h][j] W[h DKV + DN + v][j];
 * a work-group of AO_LANES takes AO_ROWS rows v of one (head, token): lane-strided partial
 * sums over j added in lane order. Groups: (1, rows / AO_ROWS, N H). */
__kernel __attribute__((reqd_work_group_size(AO_LANES, 1, 1)))
void mla_dec_absorb_o(__global const float *oc, int H, int dn, int dv, int dkv, __global const wgt_t *w,
                      ulong wo, __global float *o)
{
  __local float part[AO_ROWS][AO_LANES];
  const int lane = (int)get_local_id(0), v0 = (int)get_group_id(1) * AO_ROWS, nh = (int)get_group_id(2);
  const int h = nh % H;
  __global const float *x = oc + (ulong)nh * DC;
  float acc[AO_ROWS];
  for (int r = 0; r < AO_ROWS; r++) acc[r] = 0.0f;
  for (int j = lane; j < DC; j += AO_LANES) {
    const float xv = x[j];
    for (int r = 0; r < AO_ROWS; r++)
      if (v0 + r < dv) acc[r] += xv * WLOAD(w, wo + ((ulong)h * (ulong)dkv + (ulong)(dn + v0 + r)) * DC + (ulong)j);
  }
  for (int r = 0; r < AO_ROWS; r++) part[r][lane] = acc[r];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane < AO_ROWS && v0 + lane < dv) {
    float a = 0.0f;
    for (int i = 0; i < AO_LANES; i++) a += part[lane][i];
    o[(ulong)nh * (ulong)dv + (ulong)(v0 + lane)] = a;
  }
}
