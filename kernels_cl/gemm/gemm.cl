/* gemm.cl: our own GEMM kernels, C = alpha op(A) op(B) + beta C, row-major, batched over
 * the third grid dimension. Storage types of A, B and C are chosen at build time
 * (-DA_BF16=1 etc.); arithmetic is fp32.
 *   gemm_naive  one work-item per element of C: the reference the others are checked
 *               against on the device, and the baseline of clmoe-bench gemm.
 *   gemm_tiled  the portable fast path: 64x64 tiles of C per work-group of 16x16, each
 *               work-item accumulating a 4x4 block, K in steps of 16 through local memory.
 * CLBlast is the default for fp32; these run where it is absent or slower (bf16 inputs). */

#if defined(A_BF16) && A_BF16
typedef ushort a_t;
#define LOAD_A(i) bf16_to_f32(A[i])
#else
typedef float a_t;
#define LOAD_A(i) (A[i])
#endif
#if defined(B_BF16) && B_BF16
typedef ushort b_t;
#define LOAD_B(i) bf16_to_f32(B[i])
#else
typedef float b_t;
#define LOAD_B(i) (B[i])
#endif
#if defined(C_BF16) && C_BF16
typedef ushort c_t;
#define LOAD_C(i) bf16_to_f32(C[i])
#define STORE_C(i, v) (C[i] = f32_to_bf16(v))
#else
typedef float c_t;
#define LOAD_C(i) (C[i])
#define STORE_C(i, v) (C[i] = (v))
#endif

/* Element (i, p) of op(A) and (p, j) of op(B). */
#define A_AT(i, p) (ta ? LOAD_A((ulong)(p) * lda + (i)) : LOAD_A((ulong)(i) * lda + (p)))
#define B_AT(p, j) (tb ? LOAD_B((ulong)(j) * ldb + (p)) : LOAD_B((ulong)(p) * ldb + (j)))

#define GEMM_ARGS                                                                          \
  int m, int n, int k, float alpha, float beta,                                            \
  __global const a_t *A, ulong aoff, int lda, ulong astride, int ta,                       \
  __global const b_t *B, ulong boff, int ldb, ulong bstride, int tb,                       \
  __global c_t *C, ulong coff, int ldc, ulong cstride

__kernel void gemm_naive(GEMM_ARGS)
{
  int j = (int)get_global_id(0), i = (int)get_global_id(1);
  ulong batch = get_global_id(2);
  if (i >= m || j >= n) return;
  A += aoff + batch * astride;
  B += boff + batch * bstride;
  C += coff + batch * cstride;
  float acc = 0.0f;
  for (int p = 0; p < k; p++) acc += A_AT(i, p) * B_AT(p, j);
  ulong c = (ulong)i * ldc + j;
  /* beta == 0 must not read C: it may hold NaN garbage. */
  STORE_C(c, beta != 0.0f ? alpha * acc + beta * LOAD_C(c) : alpha * acc);
}

#define TS 64          /* tile of C per work-group: TS x TS */
#define TK 16          /* K step */
#define WPT 4          /* each work-item: WPT x WPT elements of C */
#define RTS (TS / WPT) /* work-group: RTS x RTS */

__kernel __attribute__((reqd_work_group_size(RTS, RTS, 1))) void gemm_tiled(GEMM_ARGS)
{
  __local float As[TK][TS + 1]; /* As[p][i] = op(A)(row0 + i, k0 + p) */
  __local float Bs[TK][TS + 1]; /* Bs[p][j] = op(B)(k0 + p, col0 + j) */
  const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
  const int lid = ty * RTS + tx;
  const int col0 = (int)get_group_id(0) * TS, row0 = (int)get_group_id(1) * TS;
  const ulong batch = get_global_id(2);
  A += aoff + batch * astride;
  B += boff + batch * bstride;
  C += coff + batch * cstride;

  float acc[WPT][WPT];
  for (int wi = 0; wi < WPT; wi++)
    for (int wj = 0; wj < WPT; wj++) acc[wi][wj] = 0.0f;

  for (int k0 = 0; k0 < k; k0 += TK) {
    for (int l = 0; l < (TS * TK) / (RTS * RTS); l++) {
      int e = lid + l * RTS * RTS;
      /* Walk memory in its contiguous direction so that loads coalesce. */
      int ai = ta ? e % TS : e / TK, ap = ta ? e / TS : e % TK;
      int gi = row0 + ai, gp = k0 + ap;
      As[ap][ai] = gi < m && gp < k ? A_AT(gi, gp) : 0.0f;
      int bj = tb ? e / TK : e % TS, bp = tb ? e % TK : e / TS;
      int gj = col0 + bj, gq = k0 + bp;
      Bs[bp][bj] = gj < n && gq < k ? B_AT(gq, gj) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int p = 0; p < TK; p++) {
      float a[WPT], b[WPT];
      for (int w = 0; w < WPT; w++) {
        a[w] = As[p][ty + w * RTS];
        b[w] = Bs[p][tx + w * RTS];
      }
      for (int wi = 0; wi < WPT; wi++)
        for (int wj = 0; wj < WPT; wj++) acc[wi][wj] += a[wi] * b[wj];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int wi = 0; wi < WPT; wi++) {
    int i = row0 + ty + wi * RTS;
    if (i >= m) continue;
    for (int wj = 0; wj < WPT; wj++) {
      int j = col0 + tx + wj * RTS;
      if (j >= n) continue;
      ulong c = (ulong)i * ldc + j;
      STORE_C(c, beta != 0.0f ? alpha * acc[wi][wj] + beta * LOAD_C(c) : alpha * acc[wi][wj]);
    }
  }
}
