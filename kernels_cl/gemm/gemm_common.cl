/* gemm_common.cl: what the three tile GEMM kernels share (gemm_tile.cl, gemm_async.cl,
 * gemm_wgmma.cl), built ahead of each ("tile+gemm_common+gemm_async", ...): the order in
 * which work-groups take blocks of C, and the store of one element of C. */
#ifndef CLMOE_GEMM_COMMON_CL
#define CLMOE_GEMM_COMMON_CL

/* This work-group's block of C, (batch, m0, n0), for bm x bn blocks of an M x N product:
 * bands of `band` block rows swept column by column, so that neighbouring work-groups
 * share slices of A and B in the L2 cache. */
inline int3 gemm_block(int M, int N, int bm, int bn, int band)
{
  const int nbm = (M + bm - 1) / bm, nbn = (N + bn - 1) / bn;
  int pid = (int)get_group_id(0);
  const int batch = pid / (nbm * nbn);
  pid -= batch * nbm * nbn;
  const int b = pid / (band * nbn), first = b * band, height = min(nbm - first, band);
  const int in_band = pid - b * band * nbn;
  return (int3)(batch, (first + in_band % height) * bm, (in_band / height) * bn);
}

/* C[idx] = alpha acc + beta C[idx] (C not read when beta == 0); C fp32, or bf16 (ushort)
 * behind the same pointer when c_bf16. */
inline void gemm_store(__global float *C, ulong idx, float acc, float alpha, float beta, int c_bf16)
{
  float v = alpha * acc;
  if (beta != 0.0f) v += beta * (c_bf16 ? bf16_to_f32(((__global const ushort *)C)[idx]) : C[idx]);
  if (c_bf16) ((__global ushort *)C)[idx] = f32_to_bf16(v);
  else C[idx] = v;
}

#endif
