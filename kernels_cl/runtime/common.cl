/* common.cl: prepended to every kernel family. Tunables arrive from the host as -D
 * constants chosen from the device's capability record; the defaults below apply when a
 * file is built by hand. */
#ifndef CLMOE_WG
#define CLMOE_WG 64 /* default 1-D work-group size */
#endif

/* bf16 is stored as ushort: the upper half of an IEEE fp32. Conversion to fp32 is exact;
 * conversion from fp32 rounds to nearest even and keeps NaN a NaN. */
inline float bf16_to_f32(ushort h) { return as_float(((uint)h) << 16); }

inline ushort f32_to_bf16(float f)
{
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}

/* Eight bf16 values widened (exact), and a running sum of eight products in element order
 * (the same additions as a scalar loop over the eight). */
inline float8 bf16x8_to_f32(ushort8 h) { return as_float8(convert_uint8(h) << 16); }

/* Eight weights from one 16-byte load: p + i must be 16-byte aligned (the host checks the
 * offsets; buffers start aligned). Without that, vload8 reads element by element. */
inline float8 bf16x8_load_a16(__global const ushort *p, ulong i)
{
  return bf16x8_to_f32(as_ushort8(*(__global const uint4 *)(p + i)));
}

inline float8 f32x8_load_a16(__global const float *p, ulong i)
{
  __global const float4 *q = (__global const float4 *)(p + i);
  return (float8)(q[0], q[1]);
}

inline float dot8_acc(float a, float8 w, float8 x)
{
  a += w.s0 * x.s0;
  a += w.s1 * x.s1;
  a += w.s2 * x.s2;
  a += w.s3 * x.s3;
  a += w.s4 * x.s4;
  a += w.s5 * x.s5;
  a += w.s6 * x.s6;
  a += w.s7 * x.s7;
  return a;
}

/* a plus the eight products in element order, each multiply-add fused: fma leaves the
 * compiler no choice of rounding, so every form of a launch (and every device) adds the same
 * values (a contracted or split a += w x would depend on the code around it). */
inline float fma8_acc(float a, float8 w, float8 x)
{
  a = fma(w.s0, x.s0, a);
  a = fma(w.s1, x.s1, a);
  a = fma(w.s2, x.s2, a);
  a = fma(w.s3, x.s3, a);
  a = fma(w.s4, x.s4, a);
  a = fma(w.s5, x.s5, a);
  a = fma(w.s6, x.s6, a);
  return fma(w.s7, x.s7, a);
}

/* Storage-type helpers for kernels compiled for fp32 or bf16 storage (-DSTORE_BF16=1). */
#if defined(STORE_BF16) && STORE_BF16
typedef ushort store_t;
#define LOAD(p, i) bf16_to_f32((p)[i])
#define STORE(p, i, v) ((p)[i] = f32_to_bf16(v))
#else
typedef float store_t;
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#endif
