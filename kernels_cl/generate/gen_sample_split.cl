/* gen_sample_split.cl: the device sampler with G work-groups per row (a large vocabulary on a
 * device of many compute units); the same search (gen_sample_select.cl) and the same token as
 * gen_sample.cl. Group g of a row owns the logits [g n, g n + n), n = ceil(V / G). A draw is
 * launches h = 0 .. P of gen_sample_split (0: the scan; 1 .. P - 1: the levels, P fixed by
 * the options and V: the most levels the searches can take; P: the candidates' weight per
 * group), then gen_sample_draw, in one in-order queue with no host wait.
 *
 * Each group keeps its copy of the row's search state, in two sets of states (launch h reads
 * set (h + 1) % 2, written by launch h - 1, and writes set h % 2). Launch h first advances
 * it past launch h - 1's pass (every group of the row decides alike): past the scan from the
 * groups' own scan results in the states, past a level from the row's histogram. Then it runs
 * its pass over its logits into local bins and adds the non-zero bins to the row's histogram
 * with 32-bit global atomics (two words with the carry: exact, any order). Histograms rotate
 * over three slots: launch h adds into slot h % 3 (cleared by launch h - 1), reads slot
 * (h - 1) % 3 and clears slot (h + 1) % 3 (read by launch h - 1, finished before h began);
 * launch 0 (the scan) adds nothing. A slot: the bins' low words [BINS], high words [BINS],
 * then ~ the least index under the prefix (atomic_max: 0 is none). */

#define SMP_SLOT (2u * SMP_BINS + 1u) /* words of a slot */

/* One launch (see above). hist [3][R][SMP_SLOT] words; state [2][R][G]; sums [R][G]: with
 * `last`, each group's candidates' weight. Grid: (local, R G). */
__kernel void gen_sample_split(__global const float *logits, ulong V64, __global uint *hist,
                               __global smp_state *state, __global ulong *sums, uint G, uint h, int last,
                               float invT, ulong topk, ulong pq, int s)
{
  __local uint hlo[SMP_BINS], hhi[SMP_BINS];
  __local ulong part[GEN_SAMPLE_WG];
  __local uint nan_lo, min_i, omax;
  const uint V = (uint)V64, lid = get_local_id(0), L = get_local_size(0), g = get_group_id(0) % G;
  const ulong row = get_group_id(0) / G, R = get_num_groups(0) / G;
  __global const float *x = logits + row * V64;
  const uint n = (V + G - 1) / G, c0 = min(V, g * n), c1 = min(V, c0 + n);
  __global uint *prev = hist + ((h + 2) % 3 * R + row) * SMP_SLOT, *cur = hist + (h % 3 * R + row) * SMP_SLOT,
                *next = hist + ((h + 1) % 3 * R + row) * SMP_SLOT;
  __global const smp_state *in = state + ((h + 1) % 2 * R + row) * G; /* the row's groups' */
  uint b, nO, nJ;
  smp_shape(V64, &b, &nO, &nJ);
  const int with_k = topk > 0 && topk < V64;
  smp_state st = h ? in[g] : smp_start();
  /* past launch h - 1's pass: the scan, or a level */
  const int scanned = h && st.stage == ST_SCAN, level = h && st.stage != ST_SCAN && st.stage != ST_DONE;
  if (scanned) {
    uint o = 0, i = SMP_NONE;
    for (uint q = 0; q < G; q++) o = max(o, in[q].g_omax), i = min(i, in[q].g_nan);
    smp_scanned(&st, o, i, with_k, pq);
  }
  for (uint d = lid; d < SMP_BINS; d += L) hlo[d] = level ? prev[d] : 0, hhi[d] = level ? prev[SMP_BINS + d] : 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  smp_shares(lid, L, hlo, hhi, part);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (level) smp_decide(&st, ~prev[2 * SMP_BINS], hlo, hhi, part, L, topk, pq, invT, s, b, nO, nJ);
  /* this group's part of the slot to clear */
  const uint m = (SMP_SLOT + G - 1) / G;
  for (uint w = g * m + lid; w < min(SMP_SLOT, g * m + m); w += L) next[w] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint d = lid; d < SMP_BINS; d += L) hlo[d] = 0, hhi[d] = 0;
  if (lid == 0) nan_lo = SMP_NONE, min_i = SMP_NONE, omax = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (last) {
    /* the candidates' weight of this group's logits */
    const uint k = (c1 - c0 + L - 1) / L, i0 = min(c1, c0 + lid * k), i1 = min(c1, i0 + k);
    part[lid] = smp_range_weight(x, i0, i1, &st, invT, s);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
      ulong w = 0;
      for (uint j = 0; j < L; j++) w += part[j];
      sums[row * G + g] = w;
    }
  } else {
    const int pass = st.stage != ST_DONE, scan = st.stage == ST_SCAN;
    if (pass) { /* (the scan histograms nothing here: with top-k its first level follows) */
      const uint best = smp_pass(x, c0, c1, lid, L, &st, 0, invT, s, b, nO, hlo, hhi, &nan_lo, &min_i);
      if (scan) atomic_max(&omax, best);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (pass && !scan) {
      for (uint d = lid; d < SMP_BINS; d += L) {
        const uint lo = hlo[d], hi = hhi[d];
        if (lo) {
          const uint old = atomic_add(&cur[d], lo);
          if (old + lo < old) atomic_inc(&cur[SMP_BINS + d]); /* the low word's carry */
        }
        if (hi) atomic_add(&cur[SMP_BINS + d], hi);
      }
      if (lid == 0 && min_i != SMP_NONE) atomic_max(&cur[2 * SMP_BINS], ~min_i);
    }
    if (scan) st.g_omax = omax, st.g_nan = nan_lo;
  }
  if (lid == 0) state[(h % 2 * R + row) * G + g] = st;
}

/* ids[r] = the token drawn from row r for sequence r at `step` (or -1 - the lowest NaN
 * index), from the states (set P % 2 of [2][R][G]) and group weights of the last
 * gen_sample_split launch, P: the total
 * Q, the point U, the group whose logits hold it, then that group's logits split over the
 * work-items as gen_sample's draw splits a row. Grid: (local, R). */
__kernel void gen_sample_draw(__global const float *logits, ulong V64, __global int *ids,
                              __global const smp_state *state, __global const ulong *sums, uint G, uint P,
                              ulong seed, ulong step, float invT, int s)
{
  __local ulong part[GEN_SAMPLE_WG];
  const uint V = (uint)V64, lid = get_local_id(0), L = get_local_size(0);
  const ulong row = get_group_id(0);
  __global const float *x = logits + row * V64;
  const smp_state st = state[(P % 2 * get_num_groups(0) + row) * G];
  ulong Q = 0;
  for (uint g = 0; g < G; g++) Q += sums[row * G + g];
  const ulong U = smp_point(seed, row, step, Q);
  ulong base = 0;
  uint g = 0;
  for (; g + 1 < G && base + sums[row * G + g] <= U; g++) base += sums[row * G + g];
  const uint n = (V + G - 1) / G, c0 = min(V, g * n), c1 = min(V, c0 + n);
  const uint k = (c1 - c0 + L - 1) / L, i0 = min(c1, c0 + lid * k), i1 = min(c1, i0 + k);
  const ulong mine = smp_range_weight(x, i0, i1, &st, invT, s);
  part[lid] = mine;
  barrier(CLK_LOCAL_MEM_FENCE);
  ulong acc = base;
  for (uint j = 0; j < lid; j++) acc += part[j];
  if (st.nan_i != SMP_NONE) {
    if (lid == 0) ids[row] = -1 - (int)st.nan_i;
  } else if (acc <= U && U < acc + mine) {
    const int t = smp_range_pick(x, i0, i1, &st, invT, s, acc, U);
    if (t >= 0) ids[row] = t;
  }
}
