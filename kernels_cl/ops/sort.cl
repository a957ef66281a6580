/* sort.cl: in-place ascending bitonic sort of n ulong keys (keys[off .. off + n)).
 *
 * The network is the "flip" form of bitonic sort over P = next power of two >= n: stage k
 * (k = 2, 4, .., P) first compares i with its mirror i ^ (k - 1) inside each block of k,
 * then runs half-cleaners i <-> i + j for j = k/4 .. 1. Every compare-exchange puts the
 * smaller key at the lower position, so the P - n positions past the end can be treated
 * as holding ULONG_MAX without storing them: a pair whose upper element is past the end
 * never changes, and nothing is ever written there. No padded copy is needed.
 *
 * Launch plan (lib/ops/sort.c): sort_local sorts blocks of B keys in local memory (stages
 * 2 .. B); then for each stage k > B the levels with stride >= B run as global passes,
 * two levels per pass (sort_global4, four keys per work-item) or one (sort_global2), and
 * sort_local finishes the strides < B of the stage in local memory. */

#define KEY_PAST_END ((ulong)0xffffffffffffffffUL)

inline ulong key_at(__global const ulong *keys, ulong off, ulong n, ulong i)
{
  return i < n ? keys[off + i] : KEY_PAST_END;
}

/* Compare-exchange in registers: *a gets the smaller key. */
inline void cmpx(ulong *a, ulong *b)
{
  ulong x = *a, y = *b;
  *a = min(x, y);
  *b = max(x, y);
}

/* Local compare-exchange of positions lo < hi of the tile. */
inline void cmpx_local(__local ulong *t, uint lo, uint hi)
{
  ulong x = t[lo], y = t[hi];
  if (x > y) {
    t[lo] = y;
    t[hi] = x;
  }
}

/* One block of `block` keys per work-group (block a power of two, tile = block keys of
 * local memory). full = 1: run stages 2 .. block (the first pass). full = 0: the end of a
 * stage larger than the block, the half-cleaners with strides block/2 .. 1. */
__kernel void sort_local(__global ulong *keys, ulong off, ulong n, uint block, int full,
                         __local ulong *tile)
{
  const uint lid = (uint)get_local_id(0), lsize = (uint)get_local_size(0);
  const ulong base = (ulong)get_group_id(0) * block;
  if (base >= n) return; /* the whole group leaves together: no barrier is skipped */
  for (uint e = lid; e < block; e += lsize) tile[e] = key_at(keys, off, n, base + e);
  barrier(CLK_LOCAL_MEM_FENCE);
  const uint npairs = block / 2;
  for (uint k = full ? 2 : block * 2; k <= (full ? block : block * 2); k <<= 1) {
    uint j = k / 2;
    if (k <= block) { /* flip: the mirror inside each block of k */
      for (uint p = lid; p < npairs; p += lsize) {
        uint i = 2 * p - (p & (j - 1));
        cmpx_local(tile, i, i ^ (k - 1));
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      j = k / 4;
    } else {
      j = npairs;
    }
    for (; j > 0; j >>= 1) {
      for (uint p = lid; p < npairs; p += lsize) {
        uint i = 2 * p - (p & (j - 1));
        cmpx_local(tile, i, i + j);
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
  for (uint e = lid; e < block; e += lsize)
    if (base + e < n) keys[off + base + e] = tile[e];
}

/* One level with stride j of stage k (flip = 1: the stage's mirror level, j = k/2). One
 * work-item per pair: P/2 work-items. */
__kernel void sort_global2(__global ulong *keys, ulong off, ulong n, ulong k, ulong j, int flip)
{
  const ulong p = get_global_id(0);
  const ulong lo = 2 * p - (p & (j - 1));
  const ulong hi = flip ? lo ^ (k - 1) : lo + j;
  if (hi >= n) return; /* the upper key is past the end: the pair never changes */
  ulong a = keys[off + lo], b = keys[off + hi];
  if (a > b) {
    keys[off + lo] = b;
    keys[off + hi] = a;
  }
}

/* Two levels, strides j and j/2, of stage k in one pass: each work-item holds the four
 * keys the two levels mix (P/4 work-items). flip = 1 when the first level is the stage's
 * mirror (j = k/2): the quad is then x, x + h, 3h - 1 - x, 4h - 1 - x inside the block
 * of k = 4h; otherwise x, x + h, x + 2h, x + 3h with h = j/2. */
__kernel void sort_global4(__global ulong *keys, ulong off, ulong n, ulong k, ulong j, int flip)
{
  const ulong q = get_global_id(0), h = j / 2;
  ulong i0 = ((q & ~(h - 1)) << 2) | (q & (h - 1)); /* two zero bits inserted at h and j */
  ulong i[4];
  if (flip) {
    ulong blk = i0 & ~(k - 1), x = i0 & (k - 1);
    i[0] = i0, i[1] = i0 + h, i[2] = blk + 3 * h - 1 - x, i[3] = blk + k - 1 - x;
  } else {
    i[0] = i0, i[1] = i0 + h, i[2] = i0 + j, i[3] = i0 + j + h;
  }
  if (i[0] >= n) return; /* all four past the end */
  ulong a[4];
  for (int e = 0; e < 4; e++) a[e] = key_at(keys, off, n, i[e]);
  /* First level: (0, 2), (1, 3) as laid out above; the mirror pairs (0, 3), (1, 2). */
  if (flip) {
    cmpx(&a[0], &a[3]);
    cmpx(&a[1], &a[2]);
  } else {
    cmpx(&a[0], &a[2]);
    cmpx(&a[1], &a[3]);
  }
  /* Second level, stride h: (0, 1), (2, 3) in both layouts. */
  cmpx(&a[0], &a[1]);
  cmpx(&a[2], &a[3]);
  for (int e = 0; e < 4; e++)
    if (i[e] < n) keys[off + i[e]] = a[e];
}
