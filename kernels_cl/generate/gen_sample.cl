/* gen_sample.cl: a sampled token per row of logits on the device, the same token as the host
 * sampler (clmoe_gen_sample) gives; the arithmetic is gen_sample_math.cl's, built after
 * random.cl. The host finds its candidates by sorting; here a work-group selects the key
 * threshold of the candidate set instead (candidates = keys >= K):
 *  - top-k: the largest K with count(keys >= K) >= k;
 *  - top-p: then the largest K with weight(keys >= K, within top-k) reaching p of the
 *    top-k set's weight;
 * each a radix select over the key: GEN_SAMPLE_BITS bits a pass, first over the logit's
 * ordered 32 bits o, then over j = 2^b - 1 - i (b = ceil(log2 V): the index among equal
 * logits, a lower index first). A pass histograms the digit of every key under the prefix
 * chosen so far into local memory (counts, or weights as two 32-bit words with the carry:
 * exact integer sums in any order); the largest digit whose bin brings the measure above
 * the prefix to enough is the next digit. At an index level the least index under the
 * prefix is kept too: when it alone is enough it is the answer. The kernel is one loop of
 * passes (a state machine that every work-item runs alike), as barriers in many places
 * make some compilers slow. */

#ifndef GEN_SAMPLE_WG
#define GEN_SAMPLE_WG 256 /* the largest work-group the host launches */
#endif
#ifndef GEN_SAMPLE_BITS
#define GEN_SAMPLE_BITS 11 /* digit bits: 2^BITS bins of two words in local memory */
#endif
#ifndef GEN_SAMPLE_UNROLL
#define GEN_SAMPLE_UNROLL 4 /* logits a work-item loads before it uses them */
#endif
#define SMP_BINS (1u << GEN_SAMPLE_BITS)
#define SMP_SHARES 64u /* the most bin sums a level's decision walks */

/* The stages, in order of use; the draw follows the loop. */
enum { ST_SCAN, ST_TOPK, ST_TOPP, ST_DONE };

/* Level lev's digit, over o's 32 bits for the first nO levels, then over j's b bits: its
 * width, and its shift in *sh (the bits above it are the prefix). */
inline uint smp_level(uint lev, uint nO, uint b, uint *sh)
{
  const uint D = GEN_SAMPLE_BITS, n = lev < nO ? 32 : b, done = D * (lev < nO ? lev : lev - nO);
  *sh = done + D < n ? n - done - D : 0;
  return n - done - *sh;
}

/* ids[r] = the token drawn from row r of logits [R, V] for sequence r at `step`, or -1 - i
 * for a row whose lowest-index NaN is logit i. topk: 0 or >= V for all; pq: 0 for no top-p,
 * else round(top_p 2^32); invT = 1 / T (a normal float); s = smp_scale(V). One work-group
 * of any size up to GEN_SAMPLE_WG per row. Grid: (local, R). */
__kernel void gen_sample(__global const float *logits, ulong V64, __global int *ids, ulong seed, ulong step,
                         float invT, ulong topk, ulong pq, int s)
{
  __local uint hlo[SMP_BINS], hhi[SMP_BINS]; /* a level's bins: low and high words */
  __local ulong part[GEN_SAMPLE_WG], bkey[GEN_SAMPLE_WG]; /* per work-item: bin sums, best key */
  __local uint nan_lo, min_i;
  const uint V = (uint)V64, lid = get_local_id(0), L = get_local_size(0);
  const ulong row = get_group_id(0);
  __global const float *x = logits + row * V64;
  const uint b = 62 - smp_scale(V64); /* ceil(log2 V): the index bits */
  const uint nO = (32 + GEN_SAMPLE_BITS - 1) / GEN_SAMPLE_BITS, nJ = (b + GEN_SAMPLE_BITS - 1) / GEN_SAMPLE_BITS;
  const uint S = min(L, SMP_SHARES), c = (SMP_BINS + S - 1) / S; /* shares of c bins */
  const int with_k = topk > 0 && topk < V64;
  for (uint d = lid; d < SMP_BINS; d += L) hlo[d] = 0, hhi[d] = 0;
  if (lid == 0) nan_lo = 0xffffffffu, min_i = 0xffffffffu;
  barrier(CLK_LOCAL_MEM_FENCE);
  /* the search: stage, level, prefix (po, pj) and the measure of the keys above it; the
   * answer of top-k (Kk, 0 with none) bounds top-p's keys; T: top-p's total weight */
  int stage = ST_SCAN, nan_row = 0;
  uint lev = 0, po = 0, pj = 0;
  ulong above = 0, Kk = 0, K = 0, T = 0;
  float lmax = 0.0f;
  while (stage != ST_DONE) {
    const int scan = stage == ST_SCAN, weighted = stage == ST_TOPP, hist = !scan || with_k, in_o = lev < nO;
    uint sh;
    const uint wd = smp_level(lev, nO, b, &sh), mask = (1u << wd) - 1u;
    ulong best = 0;
    /* the pass (the scan: the first NaN and best key; with top-k, its first level too) */
    for (uint i0 = lid; i0 < V; i0 += GEN_SAMPLE_UNROLL * L) {
      float v[GEN_SAMPLE_UNROLL]; /* loads in flight together */
      for (uint u = 0; u < GEN_SAMPLE_UNROLL; u++) v[u] = i0 + u * L < V ? x[i0 + u * L] : 0.0f;
      for (uint u = 0; u < GEN_SAMPLE_UNROLL; u++) {
        const uint i = i0 + u * L;
        const float l = v[u];
        if (i >= V) break;
        if (isnan(l)) {
          if (scan) atomic_min(&nan_lo, i);
          continue;
        }
        const float cl = smp_canon(l);
        const ulong key = smp_key(cl, i);
        if (scan) best = max(best, key);
        if (!hist) continue;
        /* under the prefix: its digit (the prefix shifts are < 64: defined for 32) */
        const uint o = (uint)(key >> 32), j = (1u << b) - 1u - i;
        if (in_o ? ((ulong)o >> (sh + wd)) != po : o != po || ((ulong)j >> (sh + wd)) != pj) continue;
        const uint dg = ((in_o ? o : j) >> sh) & mask;
        if (!weighted) {
          atomic_inc(&hlo[dg]);
        } else {
          const ulong w = key >= Kk ? smp_weight(cl, lmax, invT, s) : 0;
          if (!w) continue;
          const uint w0 = (uint)w, old = atomic_add(&hlo[dg], w0);
          if (old + w0 < old) atomic_inc(&hhi[dg]); /* the low word's carry */
          if (w >> 32) atomic_add(&hhi[dg], (uint)(w >> 32));
        }
        if (!in_o) atomic_min(&min_i, i);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* share t < S: the sum of bins [t c, t c + c); every work-item's best key */
    if (lid < S) {
      ulong sum = 0;
      for (uint d = lid * c; d < min(SMP_BINS, lid * c + c); d++) sum += (ulong)hhi[d] << 32 | hlo[d];
      part[lid] = sum;
    }
    bkey[lid] = best;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* every work-item decides alike from the shares */
    if (scan) {
      for (uint t = 0; t < L; t++) best = max(best, bkey[t]);
      lmax = smp_key_logit(best);
      if (nan_lo != 0xffffffffu) {
        if (lid == 0) ids[row] = -1 - (int)nan_lo;
        nan_row = 1, stage = ST_DONE;
      } else if (!with_k) {
        stage = pq ? ST_TOPP : ST_DONE;
      } else {
        stage = ST_TOPK;
      }
    }
    if (hist && !nan_row) {
      if (weighted && lev == 0)
        for (uint t = 0; t < S; t++) T += part[t]; /* the top-k set's weight */
      /* the measure of the least index under the prefix (at an index level all keys under
       * it are of one logit, so of one weight) */
      const ulong first = weighted && !in_o ? smp_weight(smp_key_logit((ulong)po << 32), lmax, invT, s) : 1;
      int found = 0; /* the answer's index known: i */
      uint i = 0;
      if (!in_o && (weighted ? smp_reaches(above + first, T, pq) : above + first >= topk)) {
        found = 1, i = min_i;
      } else {
        /* the largest digit dg with enough(above + bins >= dg): its share t, then its bin */
        ulong acc = above;
        uint t = S - 1;
        for (; t > 0; t--) {
          const ulong v = acc + part[t];
          if (weighted ? smp_reaches(v, T, pq) : v >= topk) break;
          acc = v;
        }
        uint dg = min(SMP_BINS, t * c + c) - 1;
        for (; dg > t * c; dg--) {
          const ulong v = acc + ((ulong)hhi[dg] << 32 | hlo[dg]);
          if (weighted ? smp_reaches(v, T, pq) : v >= topk) break;
          acc = v;
        }
        above = acc;
        if (in_o) po = po << wd | dg;
        else pj = pj << wd | dg;
        lev++;
        if (lev == nO + nJ) found = 1, i = (1u << b) - 1u - pj;
      }
      if (found) {
        K = (ulong)po << 32 | (0xffffffffu - i);
        if (stage == ST_TOPK && pq) {
          Kk = K, stage = ST_TOPP;
        } else {
          stage = ST_DONE;
        }
        lev = 0, po = 0, pj = 0, above = 0;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint d = lid; d < SMP_BINS; d += L) hlo[d] = 0, hhi[d] = 0;
    if (lid == 0) min_i = 0xffffffffu;
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  /* the draw: item j takes the indices [j n, (j + 1) n); the one whose running weight
   * passes U walks its range (a NaN row runs it too, writing nothing: the barrier is
   * reached by all) */
  const uint n = (V + L - 1) / L, i0 = min(V, lid * n), i1 = min(V, i0 + n);
  ulong mine = 0;
  for (uint i = i0; i < i1; i++) {
    const float l = smp_canon(x[i]);
    if (smp_key(l, i) >= K) mine += smp_weight(l, lmax, invT, s);
  }
  part[lid] = mine;
  barrier(CLK_LOCAL_MEM_FENCE);
  ulong acc = 0, Q = 0;
  for (uint j = 0; j < L; j++) {
    Q += part[j];
    if (j < lid) acc += part[j];
  }
  const ulong U = smp_point(seed, row, step, Q);
  if (!nan_row && acc <= U && U < acc + mine)
    for (uint i = i0; i < i1; i++) {
      const float l = smp_canon(x[i]);
      if (smp_key(l, i) >= K && (acc += smp_weight(l, lmax, invT, s)) > U) {
        ids[row] = (int)i;
        break;
      }
    }
}
