/* gen_sample_select.cl: the pieces of the device sampler's search that one work-group per row
 * (gen_sample.cl) and several work-groups per row (gen_sample_split.cl) share, built after
 * random.cl and gen_sample_math.cl. None holds a barrier: the kernels place those.
 *
 * The host finds its candidates by sorting; the device selects the key threshold K of the
 * candidate set instead (candidates = keys >= K):
 *  - top-k: the largest K with count(keys >= K) >= k;
 *  - top-p: then the largest K with weight(keys >= K, within top-k) reaching p of the
 *    top-k set's weight;
 * each a radix select over the key: GEN_SAMPLE_BITS bits a level, first over the logit's
 * ordered 32 bits o, then over j = 2^b - 1 - i (b = ceil(log2 V): the index among equal
 * logits, a lower index first). A level's pass histograms the digit of every key under the
 * prefix chosen so far (counts, or weights as two 32-bit words with the carry: exact integer
 * sums in any order); the largest digit whose bin brings the measure above the prefix to
 * enough is the next digit. At an index level the least index under the prefix is kept too:
 * when it alone is enough it is the answer. A search is a state (smp_state) that a pass and
 * a decision advance; every work-item holds it and decides alike. */

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
#define SMP_SHARES 64u        /* the most bin sums a level's decision walks */
#define SMP_NONE 0xffffffffu  /* no index (a NaN's, the least under the prefix) */

/* The stages, in order of use; the draw follows ST_DONE. */
enum { ST_SCAN, ST_TOPK, ST_TOPP, ST_DONE };

/* A row's search: the stage, its level and prefix (po over o, pj over j), the measure of the
 * keys above the prefix; Kk: top-k's answer (0 with none), bounding top-p's keys; T: top-p's
 * total weight; K: the threshold found; lmax: the row's largest logit (after the scan);
 * nan_i: the lowest NaN's index, or SMP_NONE; g_omax, g_nan: the scan's results over one
 * work-group's logits (gen_sample_split.cl). 64 bytes. */
typedef struct smp_state {
  ulong above, Kk, K, T;
  uint stage, lev, po, pj;
  float lmax;
  uint nan_i, g_omax, g_nan;
} smp_state;

/* The search's start. */
inline smp_state smp_start(void)
{
  smp_state st = {0, 0, 0, 0, ST_SCAN, 0, 0, 0, 0.0f, SMP_NONE, 0, SMP_NONE};
  return st;
}

/* The row's shape: b = ceil(log2 V) index bits, levels nO over o and nJ over j. */
inline void smp_shape(ulong V64, uint *b, uint *nO, uint *nJ)
{
  *b = 62 - smp_scale(V64);
  *nO = (32 + GEN_SAMPLE_BITS - 1) / GEN_SAMPLE_BITS;
  *nJ = (*b + GEN_SAMPLE_BITS - 1) / GEN_SAMPLE_BITS;
}

/* Level lev's digit, over o's 32 bits for the first nO levels, then over j's b bits: its
 * width, and its shift in *sh (the bits above it are the prefix). */
inline uint smp_level(uint lev, uint nO, uint b, uint *sh)
{
  const uint D = GEN_SAMPLE_BITS, n = lev < nO ? 32 : b, done = D * (lev < nO ? lev : lev - nO);
  *sh = done + D < n ? n - done - D : 0;
  return n - done - *sh;
}

/* One work-item's part of the pass of state st over x[i, i1) for i = lo + lid + m L: in the
 * scan, the lowest NaN index (atomic_min on *nan_lo); where the pass histograms (not the scan,
 * unless with top-k), each key under the prefix into its digit's bin of hlo/hhi and, at an
 * index level, the least index under it into *min_i. Returns the largest ordered logit o
 * seen in the scan (0 otherwise). */
inline uint smp_pass(__global const float *x, uint lo, uint i1, uint lid, uint L, const smp_state *st, int with_k,
                     float invT, int s, uint b, uint nO, __local uint *hlo, __local uint *hhi,
                     __local uint *nan_lo, __local uint *min_i)
{
  const int scan = st->stage == ST_SCAN, weighted = st->stage == ST_TOPP, hist = !scan || with_k,
            in_o = st->lev < nO;
  uint sh;
  const uint wd = smp_level(st->lev, nO, b, &sh), mask = (1u << wd) - 1u, po = st->po, pj = st->pj;
  uint best = 0;
  for (uint i0 = lo + lid; i0 < i1; i0 += GEN_SAMPLE_UNROLL * L) {
    float v[GEN_SAMPLE_UNROLL]; /* loads in flight together */
    for (uint u = 0; u < GEN_SAMPLE_UNROLL; u++) v[u] = i0 + u * L < i1 ? x[i0 + u * L] : 0.0f;
    for (uint u = 0; u < GEN_SAMPLE_UNROLL; u++) {
      const uint i = i0 + u * L;
      const float l = v[u];
      if (i >= i1) break;
      if (isnan(l)) {
        if (scan) atomic_min(nan_lo, i);
        continue;
      }
      const float cl = smp_canon(l);
      const ulong key = smp_key(cl, i);
      const uint o = (uint)(key >> 32), j = (1u << b) - 1u - i;
      if (scan) best = max(best, o);
      if (!hist) continue;
      /* under the prefix: its digit (the prefix shifts are < 64: defined for 32) */
      if (in_o ? ((ulong)o >> (sh + wd)) != po : o != po || ((ulong)j >> (sh + wd)) != pj) continue;
      const uint dg = ((in_o ? o : j) >> sh) & mask;
      if (!weighted) {
        atomic_inc(&hlo[dg]);
      } else {
        const ulong w = key >= st->Kk ? smp_weight(cl, st->lmax, invT, s) : 0;
        if (!w) continue;
        const uint w0 = (uint)w, old = atomic_add(&hlo[dg], w0);
        if (old + w0 < old) atomic_inc(&hhi[dg]); /* the low word's carry */
        if (w >> 32) atomic_add(&hhi[dg], (uint)(w >> 32));
      }
      if (!in_o) atomic_min(min_i, i);
    }
  }
  return best;
}

/* Shares of the bins for a decision: S = min(L, SMP_SHARES) sums of c bins each; work-item
 * lid < S writes part[lid] = the sum of bins [lid c, lid c + c). */
inline void smp_shares(uint lid, uint L, __local const uint *hlo, __local const uint *hhi, __local ulong *part)
{
  const uint S = min(L, SMP_SHARES), c = (SMP_BINS + S - 1) / S;
  if (lid >= S) return;
  ulong sum = 0;
  for (uint d = lid * c; d < min(SMP_BINS, lid * c + c); d++) sum += (ulong)hhi[d] << 32 | hlo[d];
  part[lid] = sum;
}

/* Advances st past the scan, from the row's largest ordered logit o (omax) and lowest NaN
 * index (nan_lo). */
inline void smp_scanned(smp_state *st, uint omax, uint nan_lo, int with_k, ulong pq)
{
  st->lmax = smp_key_logit((ulong)omax << 32);
  st->nan_i = nan_lo;
  st->stage = nan_lo != SMP_NONE ? ST_DONE : with_k ? ST_TOPK : pq ? ST_TOPP : ST_DONE;
}

/* Advances st past the level whose pass it describes, from that pass's bins, their shares
 * (smp_shares) and the least index under the prefix (min_i); nothing when st is done. Every
 * work-item calls it alike. */
inline void smp_decide(smp_state *st, uint min_i, __local const uint *hlo, __local const uint *hhi,
                       __local const ulong *part, uint L, ulong topk, ulong pq, float invT, int s, uint b, uint nO,
                       uint nJ)
{
  if (st->stage == ST_DONE) return;
  const int weighted = st->stage == ST_TOPP, in_o = st->lev < nO;
  const uint S = min(L, SMP_SHARES), c = (SMP_BINS + S - 1) / S;
  if (weighted && st->lev == 0)
    for (uint t = 0; t < S; t++) st->T += part[t]; /* the top-k set's weight */
  /* the measure of the least index under the prefix (at an index level all keys under it are
   * of one logit, so of one weight) */
  const ulong first = weighted && !in_o ? smp_weight(smp_key_logit((ulong)st->po << 32), st->lmax, invT, s) : 1;
  int found = 0; /* the answer's index known: i */
  uint i = 0;
  if (!in_o && (weighted ? smp_reaches(st->above + first, st->T, pq) : st->above + first >= topk)) {
    found = 1, i = min_i;
  } else {
    /* the largest digit dg with enough(above + bins >= dg): its share t, then its bin */
    ulong acc = st->above;
    uint t = S - 1;
    for (; t > 0; t--) {
      const ulong v = acc + part[t];
      if (weighted ? smp_reaches(v, st->T, pq) : v >= topk) break;
      acc = v;
    }
    uint dg = min(SMP_BINS, t * c + c) - 1;
    for (; dg > t * c; dg--) {
      const ulong v = acc + ((ulong)hhi[dg] << 32 | hlo[dg]);
      if (weighted ? smp_reaches(v, st->T, pq) : v >= topk) break;
      acc = v;
    }
    uint sh;
    const uint wd = smp_level(st->lev, nO, b, &sh);
    st->above = acc;
    if (in_o) st->po = st->po << wd | dg;
    else st->pj = st->pj << wd | dg;
    st->lev++;
    if (st->lev == nO + nJ) found = 1, i = (1u << b) - 1u - st->pj;
  }
  if (found) {
    st->K = (ulong)st->po << 32 | (0xffffffffu - i);
    if (st->stage == ST_TOPK && pq) st->Kk = st->K, st->stage = ST_TOPP;
    else st->stage = ST_DONE;
    st->lev = 0, st->po = 0, st->pj = 0, st->above = 0;
  }
}

/* The weight of the candidates (keys >= K) among x[i0, i1). */
inline ulong smp_range_weight(__global const float *x, uint i0, uint i1, const smp_state *st, float invT, int s)
{
  ulong w = 0;
  for (uint i = i0; i < i1; i++) {
    const float l = smp_canon(x[i]);
    if (smp_key(l, i) >= st->K) w += smp_weight(l, st->lmax, invT, s);
  }
  return w;
}

/* The first candidate of x[i0, i1) whose running weight, from acc, passes U; -1 if none. */
inline int smp_range_pick(__global const float *x, uint i0, uint i1, const smp_state *st, float invT, int s,
                          ulong acc, ulong U)
{
  for (uint i = i0; i < i1; i++) {
    const float l = smp_canon(x[i]);
    if (smp_key(l, i) >= st->K && (acc += smp_weight(l, st->lmax, invT, s)) > U) return (int)i;
  }
  return -1;
}
