/* gen_sample.cl: a sampled token per row of logits on the device, the same token as the host
 * sampler (clmoe_gen_sample) gives; the arithmetic is gen_sample_math.cl's, built after
 * random.cl. The host finds its candidates by sorting; here a work-group searches for the
 * key threshold of the candidate set instead (candidates = keys >= K):
 *  - top-k: the largest K with count(keys >= K) >= k;
 *  - top-p: then the largest K with weight(keys >= K) reaching p of the top-k set's weight;
 * each a binary search over the high 32 bits of K (the logit's order), then over the low
 * 32 (the index among equal logits) between the smallest and largest key of that logit.
 * Every probe is one pass over the row; counts and weights are integer sums. The kernel
 * is one loop of passes with one reduction (a state machine that every work-item runs
 * alike), as barriers in many places make some compilers slow. */

#ifndef GEN_SAMPLE_WG
#define GEN_SAMPLE_WG 256 /* the largest work-group the host launches */
#endif

/* The pass of a probe: what each work-item adds up over its indices i = lid, lid + L, ... */
enum { SMP_SCAN = 0, SMP_MEASURE = 1, SMP_RANGE = 2 };
/* The states of the search, in order of use. */
enum { ST_SCAN, ST_L1, ST_RANGE, ST_L2, ST_QK, ST_Q };

/* ids[r] = the token drawn from row r of logits [R, V] for sequence r at `step`, or -1 - i
 * for a row whose lowest-index NaN is logit i. topk: 0 or >= V for all; pq: 0 for no top-p,
 * else round(top_p 2^32); invT = 1 / T (a normal float); s = smp_scale(V). One work-group
 * of any size up to GEN_SAMPLE_WG per row. Grid: (local, R). */
__kernel void gen_sample(__global const float *logits, ulong V64, __global int *ids, ulong seed, ulong step,
                         float invT, ulong topk, ulong pq, int s)
{
  __local ulong b0[GEN_SAMPLE_WG], b1[GEN_SAMPLE_WG];
  const uint V = (uint)V64, lid = get_local_id(0), L = get_local_size(0);
  const ulong row = get_group_id(0);
  __global const float *x = logits + row * V64;
  /* the search: the largest key in [lo, hi] whose measure (count, weighted 0, against
   * target; or weight reaching pq of target) is enough; first over the high 32 bits
   * (vlo, vhi), then over the keys of that logit (a, z) */
  int stage = ST_SCAN, weighted = 0;
  ulong best = 0, K = 0, target = 0, lo = 0, probe = 0, a = 0, z = 0, Q = 0;
  uint vlo = 0, vhi = 0;
  float lmax = 0.0f;
  int go = 1, nan_row = 0;
  while (go) {
    /* moves that need no pass, then this pass's probe */
    if (stage == ST_L1 && vlo == vhi) {
      const ulong base = (ulong)vlo << 32;
      a = vlo == (uint)(lo >> 32) ? lo : base, z = base | 0xffffffffu;
      stage = ST_RANGE;
    }
    if (stage == ST_L2 && a >= z) {
      K = a; /* the search's answer */
      stage = !weighted && pq ? ST_QK : ST_Q;
    }
    if (stage == ST_QK || stage == ST_Q) weighted = 1;
    const int mode = stage == ST_SCAN ? SMP_SCAN : stage == ST_RANGE ? SMP_RANGE : SMP_MEASURE;
    probe = stage == ST_L1 ? (((ulong)vlo + vhi + 1) / 2) << 32 : stage == ST_L2 ? a + (z - a + 1) / 2 : K;
    ulong p0 = 0, p1 = 0; /* SCAN: ~(lowest NaN index), best key; MEASURE: count or weight;
                           * RANGE: the largest key in [a, z] and ~(the least) */
    for (uint i = lid; i < V; i += L) {
      const float l = x[i];
      if (mode == SMP_SCAN) {
        if (isnan(l)) p0 = max(p0, (ulong)(~i));
        else p1 = max(p1, smp_key(smp_canon(l), i));
        continue;
      }
      const float c = smp_canon(l);
      const ulong k = smp_key(c, i);
      if (mode == SMP_MEASURE && k >= probe) p0 += weighted ? smp_weight(c, lmax, invT, s) : 1;
      if (mode == SMP_RANGE && k >= a && k <= z) p0 = max(p0, k), p1 = max(p1, ~k);
    }
    /* the one reduction: sums for a measure, maxima otherwise; any work-group size */
    b0[lid] = p0, b1[lid] = p1;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint w = L; w > 1;) {
      const uint h = (w + 1) / 2;
      if (lid + h < w) {
        b0[lid] = mode == SMP_MEASURE ? b0[lid] + b0[lid + h] : max(b0[lid], b0[lid + h]);
        b1[lid] = max(b1[lid], b1[lid + h]);
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      w = h;
    }
    p0 = b0[0], p1 = b1[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int enough = weighted ? smp_reaches(p0, target, pq) : p0 >= target;
    if (stage == ST_SCAN) {
      best = p1, lmax = smp_key_logit(best);
      if (p0) { /* a NaN */
        if (lid == 0) ids[row] = -1 - (int)(~(uint)p0);
        nan_row = 1, go = 0;
      } else if (topk > 0 && topk < V64) {
        stage = ST_L1, weighted = 0, target = topk, lo = 0, vlo = 0, vhi = (uint)(best >> 32);
      } else {
        stage = pq ? ST_QK : ST_Q;
      }
    } else if (stage == ST_QK) {
      stage = ST_L1, target = p0, lo = K, vlo = (uint)(K >> 32), vhi = (uint)(best >> 32);
    } else if (stage == ST_L1) {
      if (enough) vlo = (uint)(probe >> 32);
      else vhi = (uint)(probe >> 32) - 1;
    } else if (stage == ST_RANGE) {
      z = p0, a = ~p1, stage = ST_L2;
    } else if (stage == ST_L2) {
      if (enough) a = probe;
      else z = probe - 1;
    } else { /* ST_Q */
      Q = p0, go = 0;
    }
  }
  const ulong U = smp_point(seed, row, step, Q);
  /* the draw: item j takes the indices [j c, (j + 1) c); the one whose running weight
   * passes U walks its range (a NaN row runs it too, writing nothing: the barrier is
   * reached by all) */
  const uint c = (V + L - 1) / L, i0 = min(V, lid * c), i1 = min(V, i0 + c);
  ulong mine = 0;
  for (uint i = i0; i < i1; i++) {
    const float l = smp_canon(x[i]);
    if (smp_key(l, i) >= K) mine += smp_weight(l, lmax, invT, s);
  }
  b0[lid] = mine;
  barrier(CLK_LOCAL_MEM_FENCE);
  ulong acc = 0;
  for (uint j = 0; j < lid; j++) acc += b0[j];
  if (!nan_row && acc <= U && U < acc + mine)
    for (uint i = i0; i < i1; i++) {
      const float l = smp_canon(x[i]);
      if (smp_key(l, i) >= K && (acc += smp_weight(l, lmax, invT, s)) > U) {
        ids[row] = (int)i;
        break;
      }
    }
}
