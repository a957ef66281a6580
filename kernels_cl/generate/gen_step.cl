/* gen_step.cl: the small per-token kernels of a generation pass (lib/generate/generate_run.c). */

/* out [N, d] row t = table [V, d] row ids[t]. Ids from the host were checked before they
 * were uploaded (clmoe_gen_prefill, clmoe_gen_step); ids that a greedy step chose on the
 * device (gen_argmax) are -1 - i for a row of logits with a NaN, which the host reports when
 * it reads them: such an id reads row 0 here instead of outside the table. Grid: (d, N). */
__kernel void gen_gather_rows(__global const float *table, ulong toff, ulong V, ulong d, __global const int *ids,
                              ulong N, __global float *out, ulong ooff)
{
  const ulong c = get_global_id(0), t = get_global_id(1);
  if (c >= d || t >= N) return;
  const int id = ids[t];
  const ulong row = id >= 0 && (ulong)id < V ? (ulong)id : 0;
  out[ooff + t * d + c] = table[toff + row * d + c];
}

/* The KDA layer's output gate before W_o, for a decode step (clmoe_kda_layer_step's RMSNorm
 * over each head's D channels with the shared gain, the sigmoid of the gate and their
 * product, in one launch):
 *   m[t, h D + i] = sigmoid(gs[t, h D + i]) o[t, h, i] rstd(t, h) gain[i]
 *   rstd = rsqrt(mean_i o[t, h, i]^2 + eps)
 * o, gs, m: [N, H D]; gain [D]. One work-group of GEN_LANES (64) per (token, head); the sum
 * of squares is 64 strided partials added in lane order. Grid: (64, N H). */
#define GEN_LANES 64
__kernel __attribute__((reqd_work_group_size(GEN_LANES, 1, 1)))
void gen_kda_out_gate(__global const float *o, __global const float *gs, __global const float *gain, int D,
                      float eps, __global float *m)
{
  __local float part[GEN_LANES];
  __local float rstd;
  const int lane = get_local_id(0);
  const ulong base = (ulong)get_group_id(1) * (ulong)D;
  float a = 0.0f;
  for (int i = lane; i < D; i += GEN_LANES) a += o[base + i] * o[base + i];
  part[lane] = a;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == 0) {
    float s = 0.0f;
    for (int i = 0; i < GEN_LANES; i++) s += part[i];
    rstd = rsqrt(s / (float)D + eps);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = lane; i < D; i += GEN_LANES)
    m[base + i] = 1.0f / (1.0f + exp(-gs[base + i])) * (o[base + i] * rstd * gain[i]);
}

/* The greedy token of each row of logits [R, V]: the largest logit, the lowest index on
 * ties (as clmoe_gen_sample's greedy rule); a row holding a NaN gives -1 - (the lowest index
 * of a NaN) instead. Keeping the better of two (value, index) pairs and the lower NaN index
 * gives the same answer in any grouping, so a row may be split in G parts of P logits:
 * gen_argmax_part reduces each part to a pair, gen_argmax the G pairs of a row (with G = 0
 * it reads the logits themselves). */

/* The better of (v, vi) and (w, wi) into (v, vi); the lower of the NaN indices. */
#define AM_KEEP(v, vi, w, wi) \
  if ((w) > (v) || ((w) == (v) && (wi) < (vi))) (v) = (w), (vi) = (wi)

/* Lane 0 ends with the work-group's pair and NaN index (every lane calls it). */
inline void am_reduce(__local float *bv, __local uint *bi, __local uint *bn, uint lane, float v, uint vi, uint ni)
{
  bv[lane] = v, bi[lane] = vi, bn[lane] = ni;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint h = GEN_LANES / 2; h > 0; h /= 2) {
    if (lane < h) {
      float a = bv[lane];
      uint ai = bi[lane];
      AM_KEEP(a, ai, bv[lane + h], bi[lane + h]);
      bv[lane] = a, bi[lane] = ai;
      bn[lane] = min(bn[lane], bn[lane + h]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

/* Part g (logits g P .. g P + P - 1) of row r: pv, pi, pn [R, G] = the part's best value, its
 * index (UINT_MAX: none) and its first NaN index (UINT_MAX: none). Lane j scans j, j + 64,
 * ... of the part. Grid: (64, R G). */
__kernel __attribute__((reqd_work_group_size(GEN_LANES, 1, 1)))
void gen_argmax_part(__global const float *logits, ulong V, ulong P, uint G, __global float *pv, __global uint *pi,
                     __global uint *pn)
{
  __local float bv[GEN_LANES];
  __local uint bi[GEN_LANES], bn[GEN_LANES];
  const uint lane = get_local_id(0), g = get_group_id(1) % G;
  const ulong row = get_group_id(1) / G, lo = (ulong)g * P, hi = min(V, lo + P);
  __global const float *x = logits + row * V;
  float v = -INFINITY;
  uint vi = UINT_MAX, ni = UINT_MAX;
  for (ulong i = lo + lane; i < hi; i += GEN_LANES) {
    const float a = x[i];
    if (isnan(a)) ni = min(ni, (uint)i);
    else AM_KEEP(v, vi, a, (uint)i);
  }
  am_reduce(bv, bi, bn, lane, v, vi, ni);
  if (lane == 0) pv[row * G + g] = bv[0], pi[row * G + g] = bi[0], pn[row * G + g] = bn[0];
}

/* out[r]: the token of row r, from the logits [R, V] themselves when G is 0, else from the
 * parts' pairs [R, G] of gen_argmax_part. One work-group of GEN_LANES per row. Grid: (64, R). */
__kernel __attribute__((reqd_work_group_size(GEN_LANES, 1, 1)))
void gen_argmax(__global const float *logits, ulong V, uint G, __global const float *pv, __global const uint *pi,
                __global const uint *pn, __global int *out)
{
  __local float bv[GEN_LANES];
  __local uint bi[GEN_LANES], bn[GEN_LANES];
  const uint lane = get_local_id(0);
  const ulong row = get_group_id(1);
  float v = -INFINITY;
  uint vi = UINT_MAX, ni = UINT_MAX; /* best index, first NaN index (UINT_MAX: none yet) */
  if (G == 0) {
    __global const float *x = logits + row * V;
    for (ulong i = lane; i < V; i += GEN_LANES) {
      const float a = x[i];
      if (isnan(a)) ni = min(ni, (uint)i);
      else AM_KEEP(v, vi, a, (uint)i);
    }
  } else {
    for (uint g = lane; g < G; g += GEN_LANES) {
      AM_KEEP(v, vi, pv[row * G + g], pi[row * G + g]);
      ni = min(ni, pn[row * G + g]);
    }
  }
  am_reduce(bv, bi, bn, lane, v, vi, ni);
  if (lane == 0) out[row] = bn[0] != UINT_MAX ? -1 - (int)bn[0] : (int)bi[0];
}
