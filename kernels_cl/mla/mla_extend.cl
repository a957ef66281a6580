/* mla_extend.cl: the attention of a chunked prefill ("extend") over the paged latent cache.
 * Built after mla.cl and mla_decode.cl (cache_t, CLOAD, CB, DC, DR, DL come from there).
 *
 * The chunk's new tokens are already in the cache. A query row is a (new token i, head h)
 * pair, row g = i H + h; in absorbed form its query is [q_c = W_uk[h]^T q_n; q_r] (DL wide,
 * pre-scaled by scale log2 e) and its keys and values are the cache rows [c_t; k_r,t] of its
 * sequence at positions t <= pos[i] (the cached prefix, then the chunk's tokens causally).
 * Every head reads the same cache rows, so the rows of several tokens and all their heads
 * share each key tile: a work-group of ER rows (ER / H consecutive tokens of one sequence)
 * loads each tile of EK cache rows once, through the block table, for all ER rows, instead of
 * one launch row per token as the decode kernel would take.
 *
 * mla_extend_attn: one work-group per tile of rows (tiles[k] = (first row, rows, last
 *   position + 1, cache sequence)); work-item (row r, lane) of EL = 256 / ER lanes holds the
 *   query numbers d = lane + EL k in registers and the output columns j = lane + EL k of
 *   sum_t p_t c_t. Per key tile:
 *   1. load EK cache rows (bf16 widened) into local memory;
 *   2. partial scores: each lane's share of q . key for every key of the tile;
 *   3. the lanes' partials summed in lane order (fixed: it depends on ER, which the host
 *      picks from DL only, never from the device), the causal mask as -inf;
 *   4. online softmax in base 2 (every lane of a row computes the same m, l) and the
 *      accumulator update.
 *   Output oc [M, H, DC] = acc / l, f32. Memory beyond the inputs: the tile table. */
#ifndef ER
#define ER 32 /* query rows per work-group */
#endif
#ifndef EK
#define EK 8 /* cache rows per key tile */
#endif
#define EL MLA_EXTEND_EL(ER)         /* lanes per query row */
#define NQD ((DL + EL - 1) / EL)     /* query numbers per lane */
#define NCD ((DC + EL - 1) / EL)     /* output columns per lane */
#if ER * EL != MLA_WG
#error "ER must divide the work-group"
#endif

/* qc [M, H, DC] f32 at qco; q_r of token i, head h at q[qo + i q_ts + h q_hs + d]; pos [M]
 * the cache position of new token i; table [nseq, maxb] the cache's block table. */
__kernel __attribute__((reqd_work_group_size(MLA_WG, 1, 1)))
void mla_extend_attn(__global const float *qc, ulong qco, __global const float *q, ulong qo, uint q_ts,
                     uint q_hs, __global const cache_t *cache, __global const int *table, int maxb,
                     __global const int *pos, __global const int4 *tiles, int H, float sl2,
                     __global float *oc)
{
  __local float Ks[EK][DL + 1], red[ER][EK][EL + 1], S[ER][EK + 1]; /* MLA_EXTEND_LOCAL_BYTES */
  const int lid = (int)get_local_id(0), r = lid / EL, lane = lid % EL;
  const int4 tl = tiles[get_group_id(0)];
  const int g = tl.x + min(r, tl.y - 1); /* padding rows repeat the last row (never stored) */
  const int kend = tl.z, n = tl.w, i = g / H, h = g % H, qpos = pos[i];
  float qr[NQD], acc[NCD], m = -INFINITY, l = 0.0f;
  for (int k = 0; k < NQD; k++) {
    const int d = lane + EL * k;
    float x = 0.0f;
    if (d < DC) x = qc[qco + (ulong)g * DC + d];
    else if (d < DL) x = q[qo + (ulong)i * q_ts + (ulong)h * q_hs + (d - DC)];
    qr[k] = sl2 * x;
  }
  for (int k = 0; k < NCD; k++) acc[k] = 0.0f;
  for (int kb = 0; kb < kend; kb += EK) {
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous tile's keys are no longer read */
    for (int e = lid; e < EK * DL; e += MLA_WG) {
      const int tt = e / DL, d = e % DL, p = kb + tt;
      float x = 0.0f;
      if (p < kend) x = CLOAD(cache, ((ulong)table[n * maxb + p / CB] * CB + (ulong)(p % CB)) * DL + d);
      Ks[tt][d] = x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int c = 0; c < EK; c++) {
      float s = 0.0f;
      for (int k = 0; k < NQD; k++) {
        const int d = lane + EL * k;
        if (d < DL) s += qr[k] * Ks[c][d];
      }
      red[r][c][lane] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int c = lane; c < EK; c += EL) {
      float s = 0.0f;
      for (int u = 0; u < EL; u++) s += red[r][c][u];
      S[r][c] = kb + c <= qpos ? s : -INFINITY; /* qpos < kend: no key past the tile end */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float p[EK], mx = m, ps = 0.0f;
    for (int c = 0; c < EK; c++) {
      p[c] = S[r][c];
      mx = fmax(mx, p[c]); /* finite: key 0 <= qpos is in the first tile */
    }
    const float corr = exp2(m - mx); /* 0 on the first tile */
    for (int c = 0; c < EK; c++) {
      p[c] = exp2(p[c] - mx);
      ps += p[c];
    }
    l = l * corr + ps;
    m = mx;
    for (int k = 0; k < NCD; k++) {
      const int j = lane + EL * k;
      if (j < DC) {
        float a = acc[k] * corr;
        for (int c = 0; c < EK; c++) a += p[c] * Ks[c][j];
        acc[k] = a;
      }
    }
  }
  if (r < tl.y) {
    const float inv = 1.0f / l;
    for (int k = 0; k < NCD; k++) {
      const int j = lane + EL * k;
      if (j < DC) oc[(ulong)g * DC + j] = acc[k] * inv;
    }
  }
}
