/* gemm_common.cl: what the three tile GEMM kernels share (gemm_tile.cl, gemm_async.cl,
 * gemm_wgmma.cl), built ahead of each ("tile+gemm_common+gemm_async", ...): the order in
 * which work-groups take blocks of C, the copy loops of the pipelined kernels, and the
 * epilogue that stores C. */
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

/* The copy loops of the pipelined kernels (gemm_async.cl, gemm_wgmma.cl), which stage slices
 * of A and B in local memory as 16-byte asynchronous copies (tile_cp16). A kernel defines its
 * pair after its block constants with
 *   GEMM_COPY_LOOPS(KC_FN, MN_FN, THREADS, CPR, CHUNKS, UNROLL, KC, MN)
 * where THREADS work-items copy a slice of R rows (or columns) together, each issuing
 * CHUNKS(R) / THREADS copies (tid: its index), and
 *   KC_FN(s, R, x, base, ld, r0, rows, k0, K, tid) copies a k-contiguous slice, R rows of CPR
 *     chunks of 8 k: chunk c of row r (x's row r0 + r of `rows`, k0 + 8c of K) to
 *     s + KC(r, 8c);
 *   MN_FN(...) a slice whose rows of M or N are contiguous: k rows of R elements, chunk c of
 *     k row kk (x's row k0 + kk of K, columns r0 + 8c of `rows`) to s + MN(R, kk, 8c).
 * A chunk across an edge copies its valid part and zero-fills the rest; UNROLL is the
 * kernel's loop pragma. */
#define GEMM_COPY_LOOPS(KC_FN, MN_FN, THREADS, CPR, CHUNKS, UNROLL, KC, MN)                       \
  inline void KC_FN(__local ushort *s, int R, __global const ushort *x, ulong base, int ld,       \
                    int r0, int rows, int k0, int K, int tid)                                     \
  {                                                                                               \
    UNROLL                                                                                        \
    for (int j = 0; j < CHUNKS(R) / THREADS; j++) {                                               \
      int q = tid + j * THREADS, r = q / CPR, c = q % CPR, k = k0 + c * 8;                        \
      int valid = r0 + r < rows ? clamp(K - k, 0, 8) : 0;                                         \
      __global const ushort *src = valid ? x + base + (ulong)(r0 + r) * (ulong)ld + (ulong)k : x; \
      tile_cp16(s + KC(r, c * 8), src, 2 * valid);                                                \
    }                                                                                             \
  }                                                                                               \
  inline void MN_FN(__local ushort *s, int R, __global const ushort *x, ulong base, int ld,       \
                    int r0, int rows, int k0, int K, int tid)                                     \
  {                                                                                               \
    UNROLL                                                                                        \
    for (int j = 0; j < CHUNKS(R) / THREADS; j++) {                                               \
      int q = tid + j * THREADS, kk = q / (R / 8), c = q % (R / 8), r = r0 + c * 8;               \
      int valid = k0 + kk < K ? clamp(rows - r, 0, 8) : 0;                                        \
      __global const ushort *src = valid ? x + base + (ulong)(k0 + kk) * (ulong)ld + (ulong)r : x; \
      tile_cp16(s + MN(R, kk, c * 8), src, 2 * valid);                                            \
    }                                                                                             \
  }

#ifdef CLMOE_TILE_CL /* the epilogue takes the tile interface's accumulators */
#define GEMM_UNROLL TILE_UNROLL

/* The epilogue: stores one accumulator tile, the 16 x 8 block of C at rows r0.., columns
 * c0.. (C's batch at cbase, row stride ldc), through gemm_store; elements past M x N are
 * skipped. */
inline void gemm_store_tile(__global float *C, ulong cbase, int ldc, int M, int N, int r0, int c0,
                            tile_c acc, float alpha, float beta, int c_bf16, int lane)
{
GEMM_UNROLL
  for (int e = 0; e < TILE_C_NE; e++) {
    int r = r0 + tile_c_row(lane, e), c = c0 + tile_c_col(lane, e);
    if (r < M && c < N)
      gemm_store(C, cbase + (ulong)r * (ulong)ldc + (ulong)c, TILE_C_AT(acc, e), alpha, beta, c_bf16);
  }
}
#endif

#endif
