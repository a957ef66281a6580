/* tensor.cl: dtype conversions between fp32 and bf16 storage. */

__kernel void convert_f32_to_bf16(__global const float *src, ulong soff, __global ushort *dst,
                                  ulong doff, ulong n)
{
  ulong i = get_global_id(0);
  if (i < n) dst[doff + i] = f32_to_bf16(src[soff + i]);
}

__kernel void convert_bf16_to_f32(__global const ushort *src, ulong soff, __global float *dst,
                                  ulong doff, ulong n)
{
  ulong i = get_global_id(0);
  if (i < n) dst[doff + i] = bf16_to_f32(src[soff + i]);
}
