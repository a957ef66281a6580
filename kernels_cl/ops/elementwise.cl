/* elementwise.cl: pointwise operators on fp32 arrays (a product's bf16 output: ew_mul_bf16). Each array comes with an element
 * offset into its buffer; n is the element count.
 *
 * The op codes below are the only definition of them: the library's host code includes
 * this file (lib/ops/ops_elementwise.c) for them, so both sides use the same numbers; the
 * kernels are compiled on the device only. */
#ifndef CLMOE_ELEMENTWISE_CL
#define CLMOE_ELEMENTWISE_CL

/* ew_binary's op */
#define EW_ADD 0         /* out = a + alpha b */
#define EW_MUL 1         /* out = a b */
#define EW_SILU_BWD 2    /* a = x, b = dy:  out = dy (s + x s (1 - s)) */
#define EW_SIGMOID_BWD 3 /* a = y, b = dy:  out = dy y (1 - y) */

/* ew_unary's op */
#define EW_SCALE 0   /* out = alpha x */
#define EW_SILU 1    /* out = x sigmoid(x) */
#define EW_SIGMOID 2 /* out = 1 / (1 + exp(-x)) */

#ifdef __OPENCL_VERSION__
inline float sigmoidf(float x) { return 1.0f / (1.0f + exp(-x)); }

__kernel void ew_binary(int op, float alpha, __global const float *a, ulong aoff,
                        __global const float *b, ulong boff, __global float *out, ulong ooff,
                        ulong n)
{
  ulong i = get_global_id(0);
  if (i >= n) return;
  float x = a[aoff + i], y = b[boff + i], r;
  switch (op) {
  case EW_ADD: r = x + alpha * y; break;
  case EW_MUL: r = x * y; break;
  case EW_SILU_BWD: {
    float s = sigmoidf(x);
    r = y * (s + x * s * (1.0f - s));
    break;
  }
  case EW_SIGMOID_BWD: r = y * x * (1.0f - x); break;
  default: r = NAN; break; /* no such op: the host passes only the codes above */
  }
  out[ooff + i] = r;
}

/* out = a b stored in bf16 (rounded to nearest even): the fp32 product of ew_binary's EW_MUL
 * rounded once, for a product that feeds only bf16 matrix products. */
__kernel void ew_mul_bf16(__global const float *a, ulong aoff, __global const float *b, ulong boff,
                          __global ushort *out, ulong ooff, ulong n)
{
  ulong i = get_global_id(0);
  if (i < n) out[ooff + i] = f32_to_bf16(a[aoff + i] * b[boff + i]);
}

__kernel void ew_unary(int op, float alpha, __global const float *x, ulong xoff,
                       __global float *out, ulong ooff, ulong n)
{
  ulong i = get_global_id(0);
  if (i >= n) return;
  float v = x[xoff + i], r;
  switch (op) {
  case EW_SCALE: r = alpha * v; break;
  case EW_SILU: r = v * sigmoidf(v); break;
  case EW_SIGMOID: r = sigmoidf(v); break;
  default: r = NAN; break; /* no such op: the host passes only the codes above */
  }
  out[ooff + i] = r;
}

/* out[i] += bias[i % n] for i < total: a bias of n added to every row of out [total / n, n]
 * (the linear layer's). */
__kernel void ew_add_rows(__global float *out, ulong ooff, __global const float *bias, ulong boff,
                          ulong n, ulong total)
{
  ulong i = get_global_id(0);
  if (i >= total) return;
  out[ooff + i] += bias[boff + i % n];
}
#endif /* __OPENCL_VERSION__ */

#endif /* CLMOE_ELEMENTWISE_CL */
