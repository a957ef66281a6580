/* kda_step.cl: a KDA layer's decode step for N sequences of one token each, after its input
 * projections, in one launch: the three causal short convolutions with SiLU (q, k, v; their
 * states shifted by the token), the decay gate, the l2 norms of q and k, and the recurrent
 * update of the definition (KERNELS.md)
 *   S = diag(e^g) S;  u = v - S^T kn;  S += beta kn u^T;  o = scale S^T qn.
 * One work-group per (head, sequence) holds the head's whole K x V state in registers: lane
 * l owns column j = l % VD over the rows d = r, r + KS_RG, ... (r = l / VD), so a column's
 * sums are KS_RG partials added in order (the same on every device). The convolutions sum
 * as clmoe_short_conv_step's (kernels_cl/kda/kda_conv.cl) do.
 * Built after kda_common.cl (its KDA_STEP_WG) with -DKD, -DVD (at most KDA_MAX_K and
 * KDA_MAX_V, 128: the host checks) and -DKS_CONV_W. */

#define KS_RG (KDA_STEP_WG / VD)            /* lanes a column: row groups */
#define KS_ROWS ((KD + KS_RG - 1) / KS_RG) /* state rows a lane holds */
#ifndef KS_CONV_W
#define KS_CONV_W 4
#endif
#define KS_CW1 (KS_CONV_W - 1)

/* Channel c of a convolution over C channels for sequence n: y = SiLU(sum_j w[c, j] xw[j])
 * over the window xw = (state [n, 0 .. W - 2, c], x[n, c]); the state shifted by one. */
inline float ks_conv(__global const float *x, __global const float *w, ulong wo, __global float *st, ulong so, int C,
                     int n, int c)
{
  float xw[KS_CONV_W];
  const ulong col = so + (ulong)n * KS_CW1 * (ulong)C + (ulong)c;
  for (int m = 0; m < KS_CW1; m++) xw[m] = st[col + (ulong)m * (ulong)C];
  xw[KS_CW1] = x[(ulong)n * (ulong)C + (ulong)c];
  float p = 0.0f;
  for (int j = 0; j < KS_CONV_W; j++) p += w[wo + (ulong)c * KS_CONV_W + j] * xw[j];
  for (int m = 0; m < KS_CW1; m++) st[col + (ulong)m * (ulong)C] = xw[m + 1];
  return p * (1.0f / (1.0f + exp(-p)));
}

/* xq, xk [N, H KD], xv [N, H VD]: the projections before the convolutions; cq, ck, cv [C, W]
 * the taps at cqo, cko, cvo; sq, sk, sv [N, W - 1, C] the convolution states at sqo, sko,
 * svo; z [N, H KD] the gate logits; bl [N, H] beta's logits; S [N, H, KD, VD] at so, read and
 * written in place; o [N, H VD]. Grid: (KDA_STEP_WG H, N), work-groups (KDA_STEP_WG, 1). */
__kernel __attribute__((reqd_work_group_size(KDA_STEP_WG, 1, 1)))
void kda_step(__global const float *xq, __global const float *xk, __global const float *xv,
              __global const float *cq, ulong cqo, __global const float *ck, ulong cko,
              __global const float *cv, ulong cvo, __global float *sq, ulong sqo, __global float *sk, ulong sko,
              __global float *sv, ulong svo, __global const float *z, __global const float *bl,
              __global const float *A_log, ulong ao, __global const float *dtb, ulong dto, int H, float scale,
              float lb, int unbounded, __global float *S, ulong so, __global float *o)
{
  __local float qn[KD], kn[KD], a[KD], vv[VD];
  __local float pu[KS_RG][VD], po[KS_RG][VD];
  __local float sums[32];
  const int lid = (int)get_local_id(0), h = (int)get_group_id(0), n = (int)get_group_id(1);
  const int j = lid % VD, r = lid / VD, own = r < KS_RG;
  const ulong sb = so + ((ulong)n * (ulong)H + (ulong)h) * (ulong)(KD * VD);
  float st[KS_ROWS];
  for (int i = 0; i < KS_ROWS; i++) { /* issued first: the loads overlap the work below */
    const int d = r + i * KS_RG;
    st[i] = own && d < KD ? S[sb + (ulong)d * VD + (ulong)j] : 0.0f;
  }
  const int CK = H * KD, CV = H * VD;
  for (int c = lid; c < 2 * KD + VD; c += KDA_STEP_WG) {
    if (c < KD) qn[c] = ks_conv(xq, cq, cqo, sq, sqo, CK, n, h * KD + c);
    else if (c < 2 * KD) kn[c - KD] = ks_conv(xk, ck, cko, sk, sko, CK, n, h * KD + c - KD);
    else vv[c - 2 * KD] = ks_conv(xv, cv, cvo, sv, svo, CV, n, h * VD + c - 2 * KD);
  }
  const float ea = exp(A_log[ao + (ulong)h]);
  for (int d = lid; d < KD; d += KDA_STEP_WG)
    a[d] = exp(kda_gate(z[(ulong)n * (ulong)CK + (ulong)(h * KD + d)], ea, dtb[dto + (ulong)(h * KD + d)], lb,
                        unbounded));
  barrier(CLK_LOCAL_MEM_FENCE);
  /* squared norms: 16 strided partials each (q by lanes 0-15, k by 16-31), added in order */
  if (lid < 32) {
    __local const float *vec = lid < 16 ? qn : kn;
    float s = 0.0f;
    for (int d = lid % 16; d < KD; d += 16) s += vec[d] * vec[d];
    sums[lid] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float qq = 0.0f, kk = 0.0f;
  for (int i = 0; i < 16; i++) qq += sums[i], kk += sums[16 + i];
  const float rq = 1.0f / sqrt(qq + L2_EPS), rk = 1.0f / sqrt(kk + L2_EPS);
  const float beta = kda_sigmoid(bl[(ulong)n * (ulong)H + (ulong)h]);
  /* decay, then this lane's part of (S^T kn)[j] */
  float p = 0.0f;
  for (int i = 0; i < KS_ROWS; i++) {
    const int d = r + i * KS_RG;
    if (d < KD) {
      st[i] *= a[d];
      p += (kn[d] * rk) * st[i];
    }
  }
  if (own) pu[r][j] = p;
  barrier(CLK_LOCAL_MEM_FENCE);
  float u = 0.0f;
  if (own) {
    float s = 0.0f;
    for (int g = 0; g < KS_RG; g++) s += pu[g][j];
    u = vv[j] - s;
  }
  /* S += beta kn u^T, then this lane's part of (S^T qn)[j]; the state back */
  p = 0.0f;
  for (int i = 0; i < KS_ROWS; i++) {
    const int d = r + i * KS_RG;
    if (own && d < KD) {
      st[i] += beta * (kn[d] * rk) * u;
      p += (qn[d] * rq) * st[i];
      S[sb + (ulong)d * VD + (ulong)j] = st[i];
    }
  }
  if (own) po[r][j] = p;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (own && r == 0) {
    float s = 0.0f;
    for (int g = 0; g < KS_RG; g++) s += po[g][j];
    o[(ulong)n * (ulong)CV + (ulong)(h * VD + j)] = scale * s;
  }
}
