/* moe_route.cl: the MoE router (sigmoid, top-k of s + b, combine weights), its gradient,
 * and the balancing rules: Quantile Balancing by exact selection or by a histogram of
 * margins, and DeepSeek-V3's sign rule. Built after moe_common.cl.
 *
 * Top-k: one work-group per token. Every candidate (expert e, biased score v) is the 64-bit
 * key moe_ord(v) << 32 | ~e: unique per expert, larger for a larger score or, on a tie, a
 * lower index. Round r takes the largest key below round r - 1's by a max-reduction over
 * the lanes, so the choice and its order depend only on the scores, not on the work-group
 * size. (One work-item per token walking the E scores was latency-bound on a GPU: 38% of
 * the H200's forward time at 2048 tokens, E 896, top-16.) With at most MOE_RANK_E experts a
 * key's slot is instead the count of larger keys, in one pass over them in local memory: the
 * same choice in the same order, without k rounds of barriers.
 *
 * Grouped selection (G > 1 groups of E / G consecutive experts): each lane scores whole groups
 * (the sum of a group's two largest s + b), lane 0 keeps the TG best (a strictly larger score
 * replaces, so ties keep the lower group index), and the top-k rounds skip the experts of the
 * other groups. */

#ifndef MOE_MAX_K1
#define MOE_MAX_K1 65 /* CLMOE_MOE_MAX_TOP_K + 1 */
#endif

#ifndef MOE_MAX_GROUPS
#define MOE_MAX_GROUPS 256 /* CLMOE_MOE_MAX_GROUPS */
#endif

#ifndef MOE_RANK_E
#define MOE_RANK_E 256 /* at most this many experts: top-k by ranks (one pass), not by rounds */
#endif

#ifndef MOE_ROUTE_WG
#define MOE_ROUTE_WG 64 /* lanes per token: a power of two */
#endif

/* keep[g] = 1 for the tg groups of row + bias with the largest scores (the sum of a group's
 * two largest values), G groups of gs experts; every lane calls it. */
inline void moe_keep_groups(__global const float *row, __global const float *bias, int G, int gs, int tg,
                            __local float *gscore, __local uchar *keep)
{
  const int lid = (int)get_local_id(0);
  for (int g = lid; g < G; g += MOE_ROUTE_WG) {
    float b1 = -INFINITY, b2 = -INFINITY;
    for (int i = g * gs; i < (g + 1) * gs; i++) {
      const float v = row[i] + bias[i];
      if (v > b1) b2 = b1, b1 = v;
      else if (v > b2) b2 = v;
    }
    gscore[g] = b1 + b2;
    keep[g] = 0;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0)
    for (int r = 0; r < tg; r++) {
      int bg = -1;
      for (int g = 0; g < G; g++)
        if (!keep[g] && (bg < 0 || gscore[g] > gscore[bg])) bg = g;
      keep[bg] = 1;
    }
  barrier(CLK_LOCAL_MEM_FENCE);
}

/* Expert e's key (0, below every key, for an expert of a group not kept). */
inline ulong moe_route_key(__global const float *row, __global const float *bias, int e, int G, int gs,
                           __local const uchar *keep)
{
  if (G > 1 && !keep[e / gs]) return 0;
  return ((ulong)moe_ord(row[e] + bias[e]) << 32) | (ulong)(~(uint)e);
}

/* s [m, E] holds the router logits and is overwritten with s = sigmoid(logits). Writes
 * topk, scores (the chosen s) and probs [m, k] in slot order, and, when k1 = k + 1,
 * cutoff[t] = the (k+1)-th largest s + b. probs = scale s / sum (renorm) or scale s. G > 1:
 * only the experts of the tg best of G groups compete (gs = E / G each). Launch: m
 * work-groups of MOE_ROUTE_WG. */
__kernel __attribute__((reqd_work_group_size(MOE_ROUTE_WG, 1, 1)))
void moe_route(__global float *s, __global const float *bias, int m, int E, int k, int k1,
               __global int *topk, __global float *scores, __global float *probs,
               __global float *cutoff, int G, int tg, int renorm, float scale)
{
  __local ulong best[MOE_ROUTE_WG];
  __local ulong chosen[MOE_MAX_K1];
  __local ulong keys[MOE_RANK_E];
  __local float sc[MOE_MAX_K1];
  __local float gscore[MOE_MAX_GROUPS];
  __local uchar keep[MOE_MAX_GROUPS];
  const int t = (int)get_group_id(0), lid = (int)get_local_id(0);
  if (t >= m) return; /* whole work-group */
  __global float *row = s + (ulong)t * (ulong)E;
  for (int e = lid; e < E; e += MOE_ROUTE_WG) row[e] = moe_sigmoid(row[e]);
  barrier(CLK_GLOBAL_MEM_FENCE); /* lane 0 reads every lane's s below */
  const int gs = G > 1 ? E / G : E;
  if (G > 1) moe_keep_groups(row, bias, G, gs, tg, gscore, keep);
  /* few experts: every key's slot is the count of larger keys (barriers outside the branches:
   * PoCL's work-group functions mishandle them inside) */
  const int by_rank = E <= MOE_RANK_E;
  if (by_rank) {
    for (int e = lid; e < E; e += MOE_ROUTE_WG) keys[e] = moe_route_key(row, bias, e, G, gs, keep);
    if (lid < k1) chosen[lid] = 0;
    if (lid + MOE_ROUTE_WG < k1) chosen[lid + MOE_ROUTE_WG] = 0;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (by_rank) {
    ulong mine[MOE_RANK_E / MOE_ROUTE_WG];
    int above[MOE_RANK_E / MOE_ROUTE_WG];
    for (int i = 0; i < MOE_RANK_E / MOE_ROUTE_WG; i++) {
      const int e = lid + i * MOE_ROUTE_WG;
      mine[i] = e < E ? keys[e] : 0;
      above[i] = 0;
    }
    for (int j = 0; j < E; j++) {
      const ulong kj = keys[j];
      for (int i = 0; i < MOE_RANK_E / MOE_ROUTE_WG; i++) above[i] += kj > mine[i];
    }
    for (int i = 0; i < MOE_RANK_E / MOE_ROUTE_WG; i++)
      if (mine[i] != 0 && above[i] < k1) chosen[above[i]] = mine[i];
  }
  ulong prev = ~(ulong)0; /* otherwise round r takes the largest key below prev */
  for (int r = 0; r < (by_rank ? 0 : k1); r++) {
    ulong mx = 0; /* below every key: moe_ord(v) >= moe_ord(-inf) > 0 */
    for (int e = lid; e < E; e += MOE_ROUTE_WG) {
      const ulong key = moe_route_key(row, bias, e, G, gs, keep);
      if (key < prev && key > mx) mx = key;
    }
    best[lid] = mx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = MOE_ROUTE_WG / 2; h > 0; h >>= 1) {
      if (lid < h && best[lid + h] > best[lid]) best[lid] = best[lid + h];
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    prev = best[0];
    if (lid == 0) chosen[r] = prev;
    barrier(CLK_LOCAL_MEM_FENCE); /* best[0] is rewritten by the next round */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* slot r's expert, score and weight by lane r (one round trip, not k in a row: k <=
   * MOE_MAX_K1 - 1 = MOE_ROUTE_WG); every lane adds the k scores in slot order, so the sum has
   * one value */
  if (lid < k) {
    const int e = (int)(~(uint)chosen[lid]);
    sc[lid] = row[e];
    topk[(ulong)t * k + lid] = e;
    scores[(ulong)t * k + lid] = sc[lid];
  }
  if (k1 > k && lid == k % MOE_ROUTE_WG) {
    const int e = (int)(~(uint)chosen[k]);
    cutoff[t] = row[e] + bias[e];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float sum = 0.0f;
  for (int r = 0; r < k; r++) sum += sc[r];
  if (lid < k) probs[(ulong)t * k + lid] = (renorm ? sc[lid] / sum : sc[lid]) * scale;
}

/* Router backward for one token per work-item: p_s = c s_s / S with S = sum of the chosen s,
 * so ds_s = (c dp_s - sum_j p_j dp_j) / S (renorm; else p_s = c s_s and ds_s = c dp_s), and
 * dlogit = ds s (1 - s) at the chosen experts of dlogit [m, E] (zero elsewhere, filled by the
 * host). */
__kernel void moe_router_bwd(__global const int *topk, __global const float *scores,
                             __global const float *probs, __global const float *dp, int m, int k,
                             int E, __global float *dlogit, int renorm, float scale)
{
  const int t = (int)get_global_id(0);
  if (t >= m) return;
  const ulong b = (ulong)t * k;
  float S = 0.0f, pdp = 0.0f;
  for (int j = 0; j < k; j++) {
    S += scores[b + j];
    pdp += probs[b + j] * dp[b + j];
  }
  for (int j = 0; j < k; j++) {
    const float sj = scores[b + j], ds = renorm ? (scale * dp[b + j] - pdp) / S : scale * dp[b + j];
    dlogit[(ulong)t * E + topk[b + j]] = ds * sj * (1.0f - sj);
  }
}

/* ---- Quantile Balancing ------------------------------------------------------------------ */

/* mt [E, m] = s [m, E] - cutoff[i], transposed through 16 x 16 tiles of local memory so that
 * both the reads and the writes are contiguous (the QB kernels then read an expert's margins
 * as one row). Launch: (E, m) rounded up to 16 x 16 work-groups. */
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void moe_margins_t(__global const float *s, __global const float *cutoff, int m, int E,
                   __global float *mt)
{
  __local float tile[16][17];
  const int lx = (int)get_local_id(0), ly = (int)get_local_id(1);
  const int e0 = (int)get_group_id(0) * 16, i0 = (int)get_group_id(1) * 16;
  if (e0 + lx < E && i0 + ly < m)
    tile[ly][lx] = s[(ulong)(i0 + ly) * (ulong)E + (ulong)(e0 + lx)] - cutoff[i0 + ly];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (i0 + lx < m && e0 + ly < E) mt[(ulong)(e0 + ly) * (ulong)m + (ulong)(i0 + lx)] = tile[lx][ly];
}

/* thr[j] = the r-th largest of expert j's m margins mt[j, :], one work-group per expert: a
 * radix selection over the four bytes of moe_ord(margin), most significant first, counting
 * with integer atomics in local memory (the result is an exact order statistic). */
__kernel void moe_qb_select(__global const float *mt, int m, int r, __global float *thr)
{
  __local uint hist[256];
  __local uint pick[2];
  const int j = (int)get_group_id(0), lid = (int)get_local_id(0), L = (int)get_local_size(0);
  __global const float *row = mt + (ulong)j * (ulong)m;
  uint prefix = 0, mask = 0, rank = (uint)r;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = lid; b < 256; b += L) hist[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < m; i += L) {
      const uint key = moe_ord(row[i]);
      if ((key & mask) == prefix) atomic_inc(&hist[(key >> shift) & 255u]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
      uint above = 0;
      int b = 255;
      for (; b > 0 && above + hist[b] < rank; b--) above += hist[b];
      pick[0] = (uint)b;
      pick[1] = rank - above;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    prefix |= pick[0] << shift;
    rank = pick[1];
    mask |= 255u << shift;
    barrier(CLK_LOCAL_MEM_FENCE); /* pick and hist are rewritten by the next pass */
  }
  if (lid == 0) thr[j] = moe_unord(prefix);
}

/* range = {lo, hi, scale}: lo = -1 - max(bias), hi = 1 - min(bias), scale = bins / (hi - lo).
 * One work-item (E is small); s in [0, 1] makes every margin fall in [lo, hi]. */
__kernel void moe_qb_range(__global const float *bias, int E, int bins, __global float *range)
{
  if (get_global_id(0) != 0) return;
  float mx = bias[0], mn = bias[0];
  for (int e = 1; e < E; e++) {
    mx = fmax(mx, bias[e]);
    mn = fmin(mn, bias[e]);
  }
  const float lo = -1.0f - mx, hi = 1.0f - mn;
  range[0] = lo;
  range[1] = hi;
  range[2] = (float)bins / (hi - lo);
}

/* counts[j, b]: margins of expert j (the row mt[j, :]) in bin b = floor((margin - lo) scale),
 * clamped to [0, bins - 1]; one work-group per expert, local counts of `bins` uint. */
__kernel void moe_qb_hist(__global const float *mt, int m, __global const float *range, int bins,
                          __global int *counts, __local uint *cnt)
{
  const int j = (int)get_group_id(0), lid = (int)get_local_id(0), L = (int)get_local_size(0);
  const float lo = range[0], scale = range[2], top = (float)(bins - 1);
  __global const float *row = mt + (ulong)j * (ulong)m;
  for (int b = lid; b < bins; b += L) cnt[b] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = lid; i < m; i += L) {
    const float x = (row[i] - lo) * scale;
    const int b = isnan(x) ? 0 : (int)clamp(floor(x), 0.0f, top);
    atomic_inc(&cnt[b]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int b = lid; b < bins; b += L) counts[(ulong)j * bins + b] = (int)cnt[b];
}

/* thr[j] from counts: scanning from the top bin, the bin where the running count reaches r;
 * the (r - above)-th of its c margins is taken at lo + (b + 1 - (r - above - 0.5) / c) w. */
__kernel void moe_qb_from_hist(__global const int *counts, int E, int bins,
                               __global const float *range, int r, __global float *thr)
{
  const int j = (int)get_global_id(0);
  if (j >= E) return;
  const float lo = range[0], w = (range[1] - range[0]) / (float)bins;
  __global const int *c = counts + (ulong)j * bins;
  int above = 0;
  float t = lo;
  for (int b = bins - 1; b >= 0; b--) {
    if (above + c[b] >= r) {
      t = lo + ((float)(b + 1) - ((float)(r - above) - 0.5f) / (float)c[b]) * w;
      break;
    }
    above += c[b];
  }
  thr[j] = t;
}

/* bias = c - mean(c), c = -thr; one work-item sums in index order (deterministic). */
__kernel void moe_bias_from_thr(__global const float *thr, int E, __global float *bias)
{
  if (get_global_id(0) != 0) return;
  /* sum(thr) negated, not a sum of -thr[e]: Intel's CPU compiler (2026.2) miscompiles a
   * subtracting loop in a one-work-item branch (docs/conformance.md). */
  float sum = 0.0f;
  for (int e = 0; e < E; e++) sum += thr[e];
  const float mean = -sum / (float)E;
  for (int e = 0; e < E; e++) bias[e] = -thr[e] - mean;
}

/* DeepSeek-V3's rule: bias[e] += gamma sign(m k / E - load[e]), load from the dispatch offsets. */
__kernel void moe_sign_update(__global const int *offsets, int E, int mk, float gamma,
                              __global float *bias)
{
  const int e = (int)get_global_id(0);
  if (e >= E) return;
  const float diff = (float)mk / (float)E - (float)(offsets[e + 1] - offsets[e]);
  bias[e] += gamma * (float)((diff > 0.0f) - (diff < 0.0f));
}
