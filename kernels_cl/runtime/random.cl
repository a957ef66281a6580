/* random.cl: counter-based random numbers that are the same bits on every device.
 *
 * Element i of a fill with seed s depends only on (s, i): splitmix64's finaliser applied
 * to s and to a Weyl sequence in i. Uniforms take 24 random bits, which fp32 holds
 * exactly. Normals use Box-Muller with a logarithm, cosine and square root written here
 * from +, -, * and bit operations only, with contraction into fused multiply-adds off:
 * IEEE fp32 rounds those operations the same way everywhere, so the results are the same
 * bits on any device and on the host. The library's host code includes this file
 * (lib/runtime/random.c) so that both sides run the same text. */
#ifdef __OPENCL_VERSION__
#pragma OPENCL FP_CONTRACT OFF
typedef ulong rng_u64;
typedef uint rng_u32;
#define RNG_AS_FLOAT(u) as_float(u)
#define RNG_AS_UINT(f) as_uint(f)
#define RNG_FN inline
#else
typedef uint64_t rng_u64;
typedef uint32_t rng_u32;
static inline float rng_as_float(rng_u32 u) { float f; memcpy(&f, &u, 4); return f; }
static inline rng_u32 rng_as_uint(float f) { rng_u32 u; memcpy(&u, &f, 4); return u; }
#define RNG_AS_FLOAT(u) rng_as_float(u)
#define RNG_AS_UINT(f) rng_as_uint(f)
#define RNG_FN static inline
#endif

RNG_FN rng_u64 rng_mix64(rng_u64 z)
{
  z = (z ^ (z >> 30)) * (rng_u64)0xBF58476D1CE4E5B9UL;
  z = (z ^ (z >> 27)) * (rng_u64)0x94D049BB133111EBUL;
  return z ^ (z >> 31);
}

RNG_FN rng_u64 rng_bits(rng_u64 seed, rng_u64 index)
{
  return rng_mix64(rng_mix64(seed) + (index + 1) * (rng_u64)0x9E3779B97F4A7C15UL);
}

/* 24 bits -> (0, 1], exact. */
RNG_FN float rng_unit_open0(rng_u64 bits) { return (float)((rng_u32)(bits >> 40) + 1u) * 0x1p-24f; }
/* 24 other bits -> [0, 1), exact. */
RNG_FN float rng_unit_open1(rng_u64 bits) { return (float)((rng_u32)(bits >> 16) & 0xffffffu) * 0x1p-24f; }

/* Natural logarithm of x in (0, 1]: x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
 * ln(1 + f) = f P(f) with a degree-9 fit (relative error 7e-9 before rounding). */
RNG_FN float rng_log(float x)
{
  rng_u32 bits = RNG_AS_UINT(x);
  int e = (int)(bits >> 23) - 127;
  float m = RNG_AS_FLOAT((bits & 0x7fffffu) | 0x3f800000u);
  if (m > 1.41421356f) {
    m = m * 0.5f;
    e = e + 1;
  }
  float f = m - 1.0f;
  float p = -7.638592273e-02f;
  p = p * f + 1.291417032e-01f;
  p = p * f - 1.324084252e-01f;
  p = p * f + 1.418007910e-01f;
  p = p * f - 1.660912633e-01f;
  p = p * f + 2.000207156e-01f;
  p = p * f - 2.500158548e-01f;
  p = p * f + 3.333332539e-01f;
  p = p * f - 4.999998808e-01f;
  p = p * f + 1.0f;
  return (float)e * 0.693147181f + f * p;
}

/* cos(2 pi t) for t in [0, 1): fold onto [0, 1/4], then a Taylor series in x^2. */
RNG_FN float rng_cos2pi(float t)
{
  float sign = 1.0f;
  if (t > 0.5f) t = 1.0f - t;
  if (t > 0.25f) {
    t = 0.5f - t;
    sign = -1.0f;
  }
  float x = t * 6.28318531f;
  float z = x * x;
  float c = 4.77947733e-14f;         /* 1/16! */
  c = c * z - 1.14707456e-11f;       /* 1/14! */
  c = c * z + 2.08767570e-09f;       /* 1/12! */
  c = c * z - 2.75573192e-07f;       /* 1/10! */
  c = c * z + 2.48015873e-05f;       /* 1/8! */
  c = c * z - 1.38888889e-03f;       /* 1/6! */
  c = c * z + 4.16666667e-02f;       /* 1/4! */
  c = c * z - 0.5f;
  c = c * z + 1.0f;
  return sign * c;
}

/* sqrt(y), y >= 0: the classic bit-level reciprocal square root guess and four Newton
 * steps (each doubles the correct digits), then y * (1/sqrt y). */
RNG_FN float rng_sqrt(float y)
{
  if (y <= 0.0f) return 0.0f;
  float r = RNG_AS_FLOAT(0x5f3759dfu - (RNG_AS_UINT(y) >> 1));
  for (int i = 0; i < 4; i++) r = r * (1.5f - 0.5f * y * r * r);
  return y * r;
}

RNG_FN float rng_uniform(rng_u64 seed, rng_u64 index, float lo, float hi)
{
  return lo + (hi - lo) * rng_unit_open0(rng_bits(seed, index));
}

RNG_FN float rng_normal(rng_u64 seed, rng_u64 index, float mean, float stddev)
{
  rng_u64 bits = rng_bits(seed, index);
  float radius = rng_sqrt(-2.0f * rng_log(rng_unit_open0(bits)));
  return mean + stddev * (radius * rng_cos2pi(rng_unit_open1(bits)));
}

#ifdef __OPENCL_VERSION__
/* out[off + i] = uniform(lo = a, hi = b) or normal(mean = a, std = b) of element first + i
 * of the stream (first > 0: a piece of a larger tensor, e.g. one rank's experts). */
__kernel void random_fill(__global store_t *out, ulong off, ulong n, ulong seed, int normal,
                          float a, float b, ulong first)
{
  ulong i = get_global_id(0);
  if (i >= n) return;
  float v = normal ? rng_normal(seed, first + i, a, b) : rng_uniform(seed, first + i, a, b);
  STORE(out, off + i, v);
}
#endif
