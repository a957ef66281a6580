/* gen_sample.cl: a sampled token per row of logits on the device, the same token as the host
 * sampler (clmoe_gen_sample) gives, with one work-group per row; built after random.cl,
 * gen_sample_math.cl (the arithmetic) and gen_sample_select.cl (the search). The group runs
 * the search's passes over its row with the bins in local memory, then draws. The kernel is
 * one loop of passes (a state machine that every work-item runs alike), as barriers in many
 * places make some compilers slow. gen_sample_split.cl spreads a row over several groups. */

/* ids[r] = the token drawn from row r of logits [R, V] for sequence r at `step`, or -1 - i
 * for a row whose lowest-index NaN is logit i. topk: 0 or >= V for all; pq: 0 for no top-p,
 * else round(top_p 2^32); invT = 1 / T (a normal float); s = smp_scale(V). One work-group
 * of any size up to GEN_SAMPLE_WG per row. Grid: (local, R). */
__kernel void gen_sample(__global const float *logits, ulong V64, __global int *ids, ulong seed, ulong step,
                         float invT, ulong topk, ulong pq, int s)
{
  __local uint hlo[SMP_BINS], hhi[SMP_BINS]; /* a level's bins: low and high words */
  __local ulong part[GEN_SAMPLE_WG];         /* bin shares; then the work-items' weights */
  __local uint nan_lo, min_i, omax;
  const uint V = (uint)V64, lid = get_local_id(0), L = get_local_size(0);
  const ulong row = get_group_id(0);
  __global const float *x = logits + row * V64;
  uint b, nO, nJ;
  smp_shape(V64, &b, &nO, &nJ);
  const int with_k = topk > 0 && topk < V64;
  for (uint d = lid; d < SMP_BINS; d += L) hlo[d] = 0, hhi[d] = 0;
  if (lid == 0) nan_lo = SMP_NONE, min_i = SMP_NONE, omax = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  smp_state st = smp_start();
  while (st.stage != ST_DONE) {
    const uint best = smp_pass(x, 0, V, lid, L, &st, with_k, invT, s, b, nO, hlo, hhi, &nan_lo, &min_i);
    if (st.stage == ST_SCAN) atomic_max(&omax, best);
    barrier(CLK_LOCAL_MEM_FENCE);
    smp_shares(lid, L, hlo, hhi, part);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int scanned = st.stage == ST_SCAN; /* (with top-k, the scan's pass holds its first level) */
    if (scanned) smp_scanned(&st, omax, nan_lo, with_k, pq);
    if (!scanned || with_k) smp_decide(&st, min_i, hlo, hhi, part, L, topk, pq, invT, s, b, nO, nJ);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint d = lid; d < SMP_BINS; d += L) hlo[d] = 0, hhi[d] = 0;
    if (lid == 0) min_i = SMP_NONE;
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  /* the draw: item j takes the indices [j n, (j + 1) n); the one whose running weight
   * passes U walks its range (a NaN row runs it too, writing nothing but its code: the
   * barrier is reached by all) */
  const uint n = (V + L - 1) / L, i0 = min(V, lid * n), i1 = min(V, i0 + n);
  const ulong mine = smp_range_weight(x, i0, i1, &st, invT, s);
  part[lid] = mine;
  barrier(CLK_LOCAL_MEM_FENCE);
  ulong acc = 0, Q = 0;
  for (uint j = 0; j < L; j++) {
    Q += part[j];
    if (j < lid) acc += part[j];
  }
  const ulong U = smp_point(seed, row, step, Q);
  if (st.nan_i != SMP_NONE) {
    if (lid == 0) ids[row] = -1 - (int)st.nan_i;
  } else if (acc <= U && U < acc + mine) {
    const int t = smp_range_pick(x, i0, i1, &st, invT, s, acc, U);
    if (t >= 0) ids[row] = t;
  }
}
