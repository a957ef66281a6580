/* moe_gemm.cl: grouped GEMMs over experts with different row counts. Built after
 * moe_common.cl.
 *
 * The expert buffers hold the rows of expert e at rows offsets[e] .. offsets[e+1] (any count,
 * 0 included). The row-wise kernels run one work-group per (column tile, row tile): the row
 * tiles come from a table of (expert, first row) pairs built on the device (moe_tiles), so
 * no count is read back by the host; table entries past the end hold expert -1 and their
 * work-groups leave at once. The weight-gradient kernel runs one work-group per (column
 * tile, row tile, expert) of the [E, n1, n2] result and walks the expert's rows.
 *
 * Tiles: MG_TM x MG_TN of the output per work-group of (MG_TN/MG_WN) x (MG_TM/MG_WM)
 * work-items, each accumulating MG_WM x MG_WN outputs; the inner dimension goes through
 * local memory MG_TK at a time. Every output is one work-item's sum in a fixed order.
 *
 * The forward's expert weights (Wg, Wu of moe_gemm_gu, B of moe_gemm_nt) are fp32, or bf16
 * with -DMG_WBF16=1 (an inference model's stacks): widened exactly as they are staged, so
 * the sums are those of fp32 weights of the same values, to the bit. */

#ifndef MG_TM
#define MG_TM 32
#endif
#ifndef MG_TN
#define MG_TN 64
#endif
#ifndef MG_TK
#define MG_TK 16
#endif
#ifndef MG_WM
#define MG_WM 4
#endif
#ifndef MG_WN
#define MG_WN 4
#endif
#ifndef MG_WBF16
#define MG_WBF16 0
#endif
#if MG_WBF16
typedef ushort mg_w_t;
#define MG_W(p, i) bf16_to_f32((p)[i])
#else
typedef float mg_w_t;
#define MG_W(p, i) ((p)[i])
#endif
#define MG_LX (MG_TN / MG_WN)
#define MG_LY (MG_TM / MG_WM)
#define MG_NT (MG_LX * MG_LY)
#define MG_AS (MG_TK * (MG_TM + 1)) /* As[p * (MG_TM + 1) + i] */
#define MG_BS (MG_TK * (MG_TN + 1)) /* Bs[p * (MG_TN + 1) + j] */

/* As <- A(row0 + i, k0 + p) of a row-major A with K columns, rows i < nrows. */
inline void mg_load_rows(__local float *As, __global const float *A, int K, int row0, int nrows,
                         int k0, int lid)
{
  for (int e = lid; e < MG_TM * MG_TK; e += MG_NT) {
    const int i = e / MG_TK, p = e % MG_TK;
    As[p * (MG_TM + 1) + i] =
        i < nrows && k0 + p < K ? A[(ulong)(row0 + i) * (ulong)K + (ulong)(k0 + p)] : 0.0f;
  }
}

/* Bs <- B(col0 + j, k0 + p) of B [n, K] row-major (expert weights): the product with B^T. */
inline void mg_load_bt(__local float *Bs, __global const mg_w_t *B, int K, int n, int col0, int k0,
                       int lid)
{
  for (int e = lid; e < MG_TN * MG_TK; e += MG_NT) {
    const int j = e / MG_TK, p = e % MG_TK;
    Bs[p * (MG_TN + 1) + j] =
        col0 + j < n && k0 + p < K ? MG_W(B, (ulong)(col0 + j) * (ulong)K + (ulong)(k0 + p)) : 0.0f;
  }
}

/* Bs <- B(k0 + p, col0 + j) of B [K, n] row-major: the product with B. */
inline void mg_load_bn(__local float *Bs, __global const float *B, int K, int n, int col0, int k0,
                       int lid)
{
  for (int e = lid; e < MG_TN * MG_TK; e += MG_NT) {
    const int p = e / MG_TN, j = e % MG_TN;
    Bs[p * (MG_TN + 1) + j] =
        col0 + j < n && k0 + p < K ? B[(ulong)(k0 + p) * (ulong)n + (ulong)(col0 + j)] : 0.0f;
  }
}

inline void mg_zero(float acc[MG_WM][MG_WN])
{
  for (int a = 0; a < MG_WM; a++)
    for (int b = 0; b < MG_WN; b++) acc[a][b] = 0.0f;
}

/* acc[a][b] += sum_{p < np} As[p][ty + a LY] Bs[p][tx + b LX] for the first wm rows a and wn
 * columns b (rows past an expert's last and columns past the matrix's are skipped: experts
 * often have fewer rows than a tile, and narrow matrices fewer columns). */
inline void mg_mac(float acc[MG_WM][MG_WN], __local const float *As, __local const float *Bs,
                   int tx, int ty, int wm, int wn, int np)
{
  for (int p = 0; p < np; p++) {
    float av[MG_WM], bv[MG_WN];
    for (int a = 0; a < MG_WM; a++) av[a] = As[p * (MG_TM + 1) + ty + a * MG_LY];
    for (int b = 0; b < MG_WN; b++) bv[b] = Bs[p * (MG_TN + 1) + tx + b * MG_LX];
    /* fixed bounds with the counts as conditions: the accumulators stay in registers */
    for (int a = 0; a < MG_WM; a++)
      if (a < wm)
        for (int b = 0; b < MG_WN; b++)
          if (b < wn) acc[a][b] += av[a] * bv[b];
  }
}

/* How many of a work-item's rows (ty + a LY) are below nrows, or of its columns (tx + b LX)
 * below ncols. */
inline int mg_rows(int nrows, int ty) { return nrows > ty ? (nrows - ty + MG_LY - 1) / MG_LY : 0; }
inline int mg_cols(int ncols, int tx) { return ncols > tx ? (ncols - tx + MG_LX - 1) / MG_LX : 0; }

/* A work-group's place: its column tile, and its row tiles from the table: entries
 * get_group_id(1), + get_num_groups(1), ... up to the first marked -1. The host launches no
 * more groups than the device keeps busy, so small experts do not each pay for a group. */
#define MG_TILE_IDS                                                                        \
  const int tx = (int)get_local_id(0), ty = (int)get_local_id(1), lid = ty * MG_LX + tx;  \
  const int col0 = (int)get_group_id(0) * MG_TN, wn = mg_cols(n - col0, tx)

#define MG_FOR_TILES for (int tile = (int)get_group_id(1); tile < ntiles; tile += (int)get_num_groups(1))

/* Inside MG_FOR_TILES: the tile's expert (leaving at the end of the table), its rows and
 * this work-item's row count; the whole group takes the same branch. */
#define MG_TILE_SETUP                                                                      \
  const int e = tiles[2 * tile];                                                           \
  if (e < 0) break;                                                                        \
  const int row0 = tiles[2 * tile + 1], nrows = min(MG_TM, offsets[e + 1] - row0);        \
  const int wm = mg_rows(nrows, ty);                                                       \
  const ulong boff = (ulong)e * (ulong)n * (ulong)K

/* For each output (r, j) of this work-item that exists: BODY with value acc[a][b]. */
#define MG_FOR_OUTPUTS(BODY)                                                               \
  for (int a = 0; a < MG_WM; a++) {                                                        \
    const int i = ty + a * MG_LY;                                                          \
    if (i >= nrows) continue;                                                              \
    for (int b = 0; b < MG_WN; b++) {                                                      \
      const int j = col0 + tx + b * MG_LX;                                                 \
      if (j >= n) continue;                                                                \
      const ulong o = (ulong)(row0 + i) * (ulong)n + (ulong)j;                            \
      BODY;                                                                                \
    }                                                                                      \
  }

/* Gate and up products with the gated unit fused: for X [R, K], Wg and Wu [E, n, K]:
 * act = glu(X Wg[e]^T, X Wu[e]^T) [R, n]; with save, also U and W (the two products). */
__kernel __attribute__((reqd_work_group_size(MG_LX, MG_LY, 1)))
void moe_gemm_gu(__global const int *tiles, int ntiles, __global const int *offsets, __global const float *X,
                 int K, __global const mg_w_t *Wg, __global const mg_w_t *Wu, int n,
                 __global float *act, __global float *U, __global float *W, int save, int glu)
{
  __local float As[MG_AS], Bg[MG_BS], Bu[MG_BS];
  MG_TILE_IDS;
  MG_FOR_TILES {
    MG_TILE_SETUP;
    float acc[MG_WM][MG_WN], acc2[MG_WM][MG_WN];
    mg_zero(acc);
    mg_zero(acc2);
    for (int k0 = 0; k0 < K; k0 += MG_TK) {
      mg_load_rows(As, X, K, row0, nrows, k0, lid);
      mg_load_bt(Bg, Wg + boff, K, n, col0, k0, lid);
      mg_load_bt(Bu, Wu + boff, K, n, col0, k0, lid);
      barrier(CLK_LOCAL_MEM_FENCE);
      mg_mac(acc, As, Bg, tx, ty, wm, wn, min(MG_TK, K - k0));
      mg_mac(acc2, As, Bu, tx, ty, wm, wn, min(MG_TK, K - k0));
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    MG_FOR_OUTPUTS({
      act[o] = glu_act(glu, acc[a][b], acc2[a][b]);
      if (save) {
        U[o] = acc[a][b];
        W[o] = acc2[a][b];
      }
    });
  }
}

/* C [R, n] = A [R, K] B[e]^T with B [E, n, K] (the down product: act W_dn[e]^T). */
__kernel __attribute__((reqd_work_group_size(MG_LX, MG_LY, 1)))
void moe_gemm_nt(__global const int *tiles, int ntiles, __global const int *offsets, __global const float *A,
                 int K, __global const mg_w_t *B, int n, __global float *C)
{
  __local float As[MG_AS], Bs[MG_BS];
  MG_TILE_IDS;
  MG_FOR_TILES {
    MG_TILE_SETUP;
    float acc[MG_WM][MG_WN];
    mg_zero(acc);
    for (int k0 = 0; k0 < K; k0 += MG_TK) {
      mg_load_rows(As, A, K, row0, nrows, k0, lid);
      mg_load_bt(Bs, B + boff, K, n, col0, k0, lid);
      barrier(CLK_LOCAL_MEM_FENCE);
      mg_mac(acc, As, Bs, tx, ty, wm, wn, min(MG_TK, K - k0));
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    MG_FOR_OUTPUTS(C[o] = acc[a][b]);
  }
}

/* The down product's backward with the gated unit's gradient fused: dact = dY [R, K] B[e]
 * with B = W_dn [E, K, n]; (dU, dW) = glu'(U, W) dact, [R, n] each. */
__kernel __attribute__((reqd_work_group_size(MG_LX, MG_LY, 1)))
void moe_gemm_dact(__global const int *tiles, int ntiles, __global const int *offsets,
                   __global const float *dY, int K, __global const float *B, int n,
                   __global const float *U, __global const float *W, __global float *dU,
                   __global float *dW, int glu)
{
  __local float As[MG_AS], Bs[MG_BS];
  MG_TILE_IDS;
  MG_FOR_TILES {
    MG_TILE_SETUP;
    float acc[MG_WM][MG_WN];
    mg_zero(acc);
    for (int k0 = 0; k0 < K; k0 += MG_TK) {
      mg_load_rows(As, dY, K, row0, nrows, k0, lid);
      mg_load_bn(Bs, B + boff, K, n, col0, k0, lid);
      barrier(CLK_LOCAL_MEM_FENCE);
      mg_mac(acc, As, Bs, tx, ty, wm, wn, min(MG_TK, K - k0));
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    MG_FOR_OUTPUTS({
      const float2 g = glu_grad(glu, U[o], W[o], acc[a][b]);
      dU[o] = g.x;
      dW[o] = g.y;
    });
  }
}

/* The input gradient of the gate and up products: dX [R, n] = dU [R, K] Wg[e] + dW Wu[e]
 * with Wg, Wu [E, K, n]. */
__kernel __attribute__((reqd_work_group_size(MG_LX, MG_LY, 1)))
void moe_gemm_dx(__global const int *tiles, int ntiles, __global const int *offsets, __global const float *dU,
                 __global const float *dW, int K, __global const float *Wg,
                 __global const float *Wu, int n, __global float *dX)
{
  __local float As[MG_AS], As2[MG_AS], Bg[MG_BS], Bu[MG_BS];
  MG_TILE_IDS;
  MG_FOR_TILES {
    MG_TILE_SETUP;
    float acc[MG_WM][MG_WN];
    mg_zero(acc);
    for (int k0 = 0; k0 < K; k0 += MG_TK) {
      mg_load_rows(As, dU, K, row0, nrows, k0, lid);
      mg_load_rows(As2, dW, K, row0, nrows, k0, lid);
      mg_load_bn(Bg, Wg + boff, K, n, col0, k0, lid);
      mg_load_bn(Bu, Wu + boff, K, n, col0, k0, lid);
      barrier(CLK_LOCAL_MEM_FENCE);
      mg_mac(acc, As, Bg, tx, ty, wm, wn, min(MG_TK, K - k0));
      mg_mac(acc, As2, Bu, tx, ty, wm, wn, min(MG_TK, K - k0));
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    MG_FOR_OUTPUTS(dX[o] = acc[a][b]);
  }
}

/* Weight gradients: C[e] [n1, n2] = A_e^T B_e, the sum over expert e's rows of A [R, n1] and
 * B [R, n2]; 0 for an expert without rows. Grid: (n2 tiles, n1 tiles, groups over experts:
 * e = get_group_id(2), + get_num_groups(2), ... < E). */
__kernel __attribute__((reqd_work_group_size(MG_LX, MG_LY, 1)))
void moe_gemm_wgrad(__global const int *offsets, int E, __global const float *A, int n1,
                    __global const float *B, int n2, __global float *C)
{
  __local float As[MG_AS], Bs[MG_BS];
  const int tx = (int)get_local_id(0), ty = (int)get_local_id(1), lid = ty * MG_LX + tx;
  const int col0 = (int)get_group_id(0) * MG_TN, row0 = (int)get_group_id(1) * MG_TM;
  const int wm = mg_rows(n1 - row0, ty), wn = mg_cols(n2 - col0, tx);
  for (int e = (int)get_group_id(2); e < E; e += (int)get_num_groups(2)) {
    const int r0 = offsets[e], r1 = offsets[e + 1];
    float acc[MG_WM][MG_WN];
    mg_zero(acc);
    for (int p0 = r0; p0 < r1; p0 += MG_TK) {
      for (int q = lid; q < MG_TM * MG_TK; q += MG_NT) {
        const int i = q % MG_TM, p = q / MG_TM;
        As[p * (MG_TM + 1) + i] =
            row0 + i < n1 && p0 + p < r1 ? A[(ulong)(p0 + p) * (ulong)n1 + (ulong)(row0 + i)] : 0.0f;
      }
      for (int q = lid; q < MG_TN * MG_TK; q += MG_NT) {
        const int j = q % MG_TN, p = q / MG_TN;
        Bs[p * (MG_TN + 1) + j] =
            col0 + j < n2 && p0 + p < r1 ? B[(ulong)(p0 + p) * (ulong)n2 + (ulong)(col0 + j)] : 0.0f;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      mg_mac(acc, As, Bs, tx, ty, wm, wn, min(MG_TK, r1 - p0));
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    __global float *Ce = C + (ulong)e * (ulong)n1 * (ulong)n2;
    for (int a = 0; a < MG_WM; a++) {
      const int i = row0 + ty + a * MG_LY;
      if (i >= n1) continue;
      for (int b = 0; b < MG_WN; b++) {
        const int j = col0 + tx + b * MG_LX;
        if (j < n2) Ce[(ulong)i * (ulong)n2 + (ulong)j] = acc[a][b];
      }
    }
  }
}
