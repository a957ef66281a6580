/* embedding.cl: embedding lookup and its deterministic backward.
 *
 * Forward and the backward's column passes use 2-D launches, dimension 0 over the d
 * columns (adjacent work-items read adjacent floats) and dimension 1 over rows.
 *
 * Backward: the tokens are grouped by id with the device sort of keys id << 32 | position
 * (lib/ops/sort.c), so each vocabulary row v owns the segment seg[v] .. seg[v+1] of sorted
 * positions, in token order. Row v's gradient is that segment's dout rows summed in order.
 * A segment can be very long (byte-level text: a few ids repeated a million times), so
 * its full EMB_CHUNK-aligned chunks are summed first by a pass of their own and the row
 * then adds head, chunk sums and tail in order: a fixed order that depends only on the
 * positions, never on the work-group size. No atomics on floats anywhere. */

#define EMB_CHUNK 512 /* must match lib/ops/ops_embedding.c */

/* out[t, c] = table[ids[t], c]; an id outside [0, V) gives a zero row and its position
 * goes to *bad (the smallest such position survives), which the host reads back. */
__kernel void embedding_forward(__global const float *table, ulong toff, ulong V, ulong d,
                                __global const int *ids, ulong ioff, ulong N,
                                __global float *out, ulong ooff, __global uint *bad)
{
  const ulong c = get_global_id(0), t = get_global_id(1);
  if (t >= N) return;
  const int id = ids[ioff + t];
  const int ok = id >= 0 && (ulong)id < V;
  if (!ok && c == 0) atomic_min(bad, (uint)t);
  if (c >= d) return;
  out[ooff + t * d + c] = ok ? table[toff + (ulong)id * d + c] : 0.0f;
}

/* keys[t] = id << 32 | t: sorting them groups equal ids in token order. A negative id
 * becomes a large unsigned one, sorted past every valid row and never used. */
__kernel void embedding_keys(__global const int *ids, ulong ioff, ulong N, __global ulong *keys)
{
  const ulong t = get_global_id(0);
  if (t >= N) return;
  keys[t] = ((ulong)(uint)ids[ioff + t] << 32) | t;
}

/* seg[v] = the first sorted position whose id is >= v, for v = 0 .. V (binary search). */
__kernel void embedding_segments(__global const ulong *keys, ulong N, ulong V, __global uint *seg)
{
  const ulong v = get_global_id(0);
  if (v > V) return;
  const ulong target = v << 32;
  ulong lo = 0, hi = N;
  while (lo < hi) {
    ulong mid = lo + (hi - lo) / 2;
    if (keys[mid] < target) lo = mid + 1;
    else hi = mid;
  }
  seg[v] = (uint)lo;
}

/* s + dout[pos(t0), c] + .. + dout[pos(t1 - 1), c], added left to right. */
inline float row_sum(float s, __global const ulong *keys, ulong t0, ulong t1,
                     __global const float *dout, ulong doff, ulong d, ulong c)
{
  for (ulong t = t0; t < t1; t++) s += dout[doff + (keys[t] & 0xffffffffUL) * d + c];
  return s;
}

/* part[q, c] = sum in order of chunk q's dout rows (sorted positions q*EMB_CHUNK ..
 * +EMB_CHUNK), for the chunks that lie inside one valid row's segment; others are skipped
 * and never read. */
__kernel void embedding_chunks(__global const ulong *keys, ulong nchunks,
                               __global const float *dout, ulong doff, ulong d, ulong V,
                               __global float *part)
{
  const ulong c = get_global_id(0), q = get_global_id(1);
  if (c >= d || q >= nchunks) return;
  const ulong t0 = q * EMB_CHUNK, t1 = t0 + EMB_CHUNK;
  const ulong first = keys[t0] >> 32, last = keys[t1 - 1] >> 32;
  if (first != last || first >= V) return;
  part[q * d + c] = row_sum(0.0f, keys, t0, t1, dout, doff, d, c);
}

/* dtable[v, c] += sum of dout[pos, c] over row v's segment: the head up to the first
 * chunk boundary, then whole chunks from part, then the tail. Empty rows are untouched. */
__kernel void embedding_accumulate(__global const ulong *keys, __global const uint *seg,
                                   __global const float *dout, ulong doff, ulong d, ulong V,
                                   __global const float *part, __global float *dtable,
                                   ulong dtoff)
{
  const ulong c = get_global_id(0), v = get_global_id(1);
  if (c >= d || v >= V) return;
  const ulong lo = seg[v], hi = seg[v + 1];
  if (lo == hi) return;
  const ulong q0 = (lo + EMB_CHUNK - 1) / EMB_CHUNK, q1 = hi / EMB_CHUNK; /* whole chunks */
  float s;
  if (q0 < q1) {
    s = row_sum(0.0f, keys, lo, q0 * EMB_CHUNK, dout, doff, d, c);
    for (ulong q = q0; q < q1; q++) s += part[q * d + c];
    s = row_sum(s, keys, q1 * EMB_CHUNK, hi, dout, doff, d, c);
  } else {
    s = row_sum(0.0f, keys, lo, hi, dout, doff, d, c);
  }
  dtable[dtoff + v * d + c] += s;
}
