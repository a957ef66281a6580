/* kda_rec.cl: KDA as the token loop of the definition (KERNELS.md), one work-group per
 * (sequence, head, 16 columns of V) with its slice of the state in local memory. It is the
 * reference the chunked kernels are checked against on the device, the comparison point of
 * clmoe-bench kda, and (with one token per sequence) the decode step:
 *   S = diag(e^g) S;  u = v - S^T kn;  S += beta kn u^T;  o = scale S^T qn.
 * Sums run in a fixed order (16 strided partials, then in order), independent of the
 * device's work-group size. */

__kernel __attribute__((reqd_work_group_size(KDA_WG, 1, 1)))
void kda_recurrent(__global const store_t *q, ulong qo, __global const store_t *k, ulong ko,
                   __global const store_t *v, ulong vo, __global const store_t *z, ulong zo,
                   __global const store_t *bl, ulong bo, __global const float *A_log, ulong ao,
                   __global const float *dtb, ulong dto, __global const int2 *seqs, int H,
                   float scale, float lb, int unbounded, __global const float *h0, ulong h0o,
                   int has_h0, __global out_t *o, ulong oo, __global float *ht, ulong hto,
                   int has_ht)
{
  __local float S[KD][VS];
  __local float qn[KD], kn[KD], a[KD];
  __local float part[16][VS + 1];
  __local float red[KDA_WG];
  __local float u[VS], bt[1], norms[2];
  const int lid = (int)get_local_id(0), rl = lid >> 4, jj = lid & 15;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int j0 = (int)get_group_id(0) * VS, j = j0 + jj, jv = j < VD;
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD;
  const float ea = exp(A_log[ao + h]);
  for (int e = lid; e < KD * VS; e += KDA_WG) {
    int d = e / VS, jc = e % VS;
    S[d][jc] = has_h0 && j0 + jc < VD ? h0[h0o + (sbase + d) * VD + j0 + jc] : 0.0f;
  }
  const int2 sq = seqs[n];
  for (int t = sq.x; t < sq.x + sq.y; t++) {
    const ulong rk = ((ulong)t * (ulong)H + (ulong)h) * KD, rv = ((ulong)t * (ulong)H + (ulong)h) * VD;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* Load the token; the two squared norms by halving over fixed lanes. */
    float qq = 0.0f, kk = 0.0f;
    for (int d = lid; d < KD; d += KDA_WG) {
      float qv = LOAD(q, qo + rk + d), kv = LOAD(k, ko + rk + d);
      qn[d] = qv;
      kn[d] = kv;
      qq += qv * qv;
      kk += kv * kv;
      a[d] = exp(kda_gate(LOAD(z, zo + rk + d), ea, dtb[dto + (ulong)h * KD + d], lb, unbounded));
    }
    for (int pass = 0; pass < 2; pass++) {
      red[lid] = pass ? kk : qq;
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int w = KDA_WG / 2; w > 0; w >>= 1) {
        if (lid < w) red[lid] += red[lid + w];
        barrier(CLK_LOCAL_MEM_FENCE);
      }
      if (lid == 0) norms[pass] = 1.0f / sqrt(red[0] + L2_EPS);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) bt[0] = kda_sigmoid(LOAD(bl, bo + (ulong)t * (ulong)H + (ulong)h));
    for (int d = lid; d < KD; d += KDA_WG) {
      qn[d] *= norms[0];
      kn[d] *= norms[1];
    }
    /* Decay first. */
    for (int e = lid; e < KD * VS; e += KDA_WG) S[e / VS][e % VS] *= a[e / VS];
    barrier(CLK_LOCAL_MEM_FENCE);
    /* u = v - S^T kn */
    float p = 0.0f;
    for (int d = rl; d < KD; d += 16) p += kn[d] * S[d][jj];
    part[rl][jj] = p;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (rl == 0) {
      float s = 0.0f;
      for (int l = 0; l < 16; l++) s += part[l][jj];
      u[jj] = (jv ? LOAD(v, vo + rv + j) : 0.0f) - s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < KD * VS; e += KDA_WG) S[e / VS][e % VS] += bt[0] * kn[e / VS] * u[e % VS];
    barrier(CLK_LOCAL_MEM_FENCE);
    /* o = scale S^T qn */
    p = 0.0f;
    for (int d = rl; d < KD; d += 16) p += qn[d] * S[d][jj];
    part[rl][jj] = p;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (rl == 0 && jv) {
      float s = 0.0f;
      for (int l = 0; l < 16; l++) s += part[l][jj];
      STORE_OUT(o, oo + rv + j, scale * s);
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (has_ht)
    for (int e = lid; e < KD * VS; e += KDA_WG) {
      int d = e / VS, jc = e % VS;
      if (j0 + jc < VD) ht[hto + (sbase + d) * VD + j0 + jc] = S[d][jc];
    }
}
