/* gen_sample_math.cl: the arithmetic of sampling a token, the same bits on the host
 * (lib/generate/generate_sample.c includes this file) and on every device (gen_sample.cl).
 *
 * A row of logits l [V] with temperature T, top-k and top-p becomes:
 *  - keys: each logit's order as a 64-bit integer, (ordered bits of l) << 32 | (~i), so
 *    that a larger key is a larger logit, a lower index on ties (a total order); denormal
 *    logits count as 0 (devices may flush them) and -0 as +0;
 *  - weights: w_i = exp((l_i - lmax) / T) as an unsigned integer q_i = w_i 2^s, with
 *    s = 62 - ceil(log2 V) so that a row's sum never passes 2^63. The exponential is
 *    2^y, y = (l_i - lmax) (1/T) log2(e), split into 2^floor(y) times a degree-9
 *    polynomial of the fraction, from +, -, * and floor only (IEEE fp32 rounds those the
 *    same way everywhere; contraction into fused multiply-adds is off); weights under
 *    2^-s of the largest are 0. Sums of weights are integer sums: exact in any order, so
 *    a work-group reduces them in whatever order its size gives.
 *  - top-p compares integers: a prefix of weight a reaches p of a total t when
 *    a 2^32 >= pq t, pq = round(p 2^32) (128-bit products from two 64-bit halves);
 *  - the draw: r, the high 32 bits of the library's counter-based generator
 *    (kernels_cl/runtime/random.cl) at (seed, seq << 32 | step), gives U = floor(r Q / 2^32)
 *    in [0, Q) for the candidates' total weight Q; the token is the first candidate in
 *    index order whose running weight passes U. */
#ifdef __OPENCL_VERSION__
#pragma OPENCL FP_CONTRACT OFF
#define SMP_MULHI(a, b) mul_hi((rng_u64)(a), (rng_u64)(b))
#define SMP_FLOOR(x) floor(x)
#else
/* (a b) >> 64 from 32-bit halves */
static inline rng_u64 smp_mulhi(rng_u64 a, rng_u64 b)
{
  const rng_u64 a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
  const rng_u64 m = a1 * b0 + ((a0 * b0) >> 32), n = a0 * b1 + (m & 0xffffffffu);
  return a1 * b1 + (m >> 32) + (n >> 32);
}
#define SMP_MULHI(a, b) smp_mulhi((a), (b))
#define SMP_FLOOR(x) floorf(x)
#endif

/* A logit as the sampler sees it: denormals and -0 are +0. */
RNG_FN float smp_canon(float l)
{
  return (RNG_AS_UINT(l) & 0x7f800000u) == 0u ? 0.0f : l;
}

/* The ordered key of a canonical, non-NaN logit l at index i (see above). */
RNG_FN rng_u64 smp_key(float l, rng_u32 i)
{
  const rng_u32 b = RNG_AS_UINT(l);
  const rng_u32 o = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ((rng_u64)o << 32) | (rng_u64)(0xffffffffu - i);
}

/* The canonical logit of a key. */
RNG_FN float smp_key_logit(rng_u64 key)
{
  const rng_u32 o = (rng_u32)(key >> 32);
  return RNG_AS_FLOAT((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

/* s for a vocabulary of V: 62 - ceil(log2 V). */
RNG_FN int smp_scale(rng_u64 V)
{
  int c = 0;
  while (((rng_u64)1 << c) < V) c++;
  return 62 - c;
}

/* q = exp((l - lmax) invT) 2^s as an integer (l, lmax canonical, l <= lmax, invT a
 * normal float > 0). */
RNG_FN rng_u64 smp_weight(float l, float lmax, float invT, int s)
{
  float y = 0.0f;
  if (l != lmax) {
    const float d = l - lmax; /* <= 0; -inf for -inf logits and overflows */
    if (d < -0x1p-100f) y = d * invT * 1.44269504f;
    if (!(y >= (float)(-s - 2))) return 0; /* below 2^-s-2: nothing (and -inf) */
    if (y > -0x1p-24f) y = 0.0f;           /* (a denormal product flushes or not) */
  }
  const float n = SMP_FLOOR(y), f = y - n; /* f in [0, 1), exact */
  /* 2^f = sum_k (f ln 2)^k / k!, k <= 9: relative error under 1e-8 before rounding */
  float p = 1.01780860e-07f;
  p = p * f + 1.32154867e-06f;
  p = p * f + 1.52527338e-05f;
  p = p * f + 1.54035304e-04f;
  p = p * f + 1.33335581e-03f;
  p = p * f + 9.61812911e-03f;
  p = p * f + 5.55041087e-02f;
  p = p * f + 2.40226507e-01f;
  p = p * f + 6.93147181e-01f;
  p = p * f + 1.0f;
  if (p >= 2.0f) p = 1.99999988f; /* (f near 1 rounding up) */
  const int e = (int)n + s;
  if (e < 0) return 0;
  const rng_u64 m = (rng_u64)(p * 8388608.0f); /* p 2^23: an integer in [2^23, 2^24) */
  return e >= 23 ? m << (e - 23) : m >> (23 - e);
}

/* 1 when weight a reaches pq / 2^32 of total t (a, t < 2^63, pq <= 2^32). */
RNG_FN int smp_reaches(rng_u64 a, rng_u64 t, rng_u64 pq)
{
  const rng_u64 ahi = a >> 32, alo = a << 32;
  const rng_u64 bhi = SMP_MULHI(pq, t), blo = pq * t;
  return ahi > bhi || (ahi == bhi && alo >= blo);
}

/* The draw's point in [0, Q) for sequence seq at step. */
RNG_FN rng_u64 smp_point(rng_u64 seed, rng_u64 seq, rng_u64 step, rng_u64 Q)
{
  const rng_u64 r = rng_bits(seed, (seq << 32) | (step & 0xffffffffu)) >> 32;
  return SMP_MULHI(Q, r << 32);
}
