/* moe_gemm_tile.cl: the grouped expert GEMMs of a bf16 training step on the tile interface
 * (kernels_cl/tile/tile.cl), built as "tile+moe_common+moe_gemm_tile": the same products,
 * grouping and epilogues as moe_gemm.cl's fp32 kernels, with the expert weights as bf16
 * copies ([E, ...] ushort), the activations fp32 rounded to bf16 (nearest even) where they
 * are staged in local memory, and fp32 accumulation in tile_mma.
 *
 * Row kernels (gate/up with the gated unit fused, down, the down product's backward with the
 * unit's gradient fused, the input gradient): one work-group of MT_THREADS per (column tile of
 * MT_BN, row tiles of the dispatch's table), each row tile MT_BM rows of one expert (MT_BM is
 * the table's tile height, 16 or 32). Weight gradients: one work-group per (MT_BN columns,
 * MT_BM rows of the [E, n1, n2] result, experts), walking the expert's rows MT_BK at a time.
 *
 * Warps: MT_BM / 16 along the rows, the rest along the columns; a warp holds 16 rows x MT_WTN
 * columns as MT_NT accumulator tiles. Both operands sit in local memory k-contiguous, rows of
 * MT_LDK bf16 (32 k + 8 of padding: the fragment loads of 8 rows hit 8 different 4-bank
 * groups), so that every fragment is read with tile_load_a_bf16 / tile_load_bt_bf16; an operand
 * whose global rows run along M or N is transposed on its way in. Loads past an edge (rows
 * of the next expert, columns past n, k past K) write 0; outputs past an edge are skipped.
 * Every sum over k runs in one order fixed by the shapes: the same device gives the same
 * bits on every run. */
#ifdef CLMOE_TILE_CL /* only as "tile+moe_common+moe_gemm_tile" */

#ifndef MT_BM
#define MT_BM 32
#endif
#ifndef MT_BN
#define MT_BN 64
#endif
#define MT_BK 32
#define MT_WARPS 4
#define MT_THREADS (MT_WARPS * 32)
#define MT_WARPS_M (MT_BM / 16)
#define MT_WARPS_N (MT_WARPS / MT_WARPS_M)
#define MT_WTN (MT_BN / MT_WARPS_N) /* columns per warp */
#define MT_NT (MT_WTN / 8)          /* accumulator tiles per warp */
#define MT_LDK (MT_BK + 8)
#if MT_BM % 16 || MT_WARPS % MT_WARPS_M || MT_WTN % 8 || MT_NT < 1
#error "moe_gemm_tile: unsupported block shape"
#endif

/* A local slice of R rows of MT_LDK bf16, 16-byte aligned. */
#define MT_LOCAL(name, R)                                                                    \
  __local uint4 name##_v[(R) * MT_LDK / 8];                                                  \
  __local ushort *name = (__local ushort *)name##_v

/* s[r * MT_LDK + p] = x[base + (r0 + r) ld + k0 + p] for the R x MT_BK slice; 0 where
 * r0 + r >= rows or k0 + p >= K. fp32 sources are rounded to bf16. Where K allows (fp32: a
 * multiple of 4, bf16: of 8; then a chunk lies wholly inside or outside K) every work-item
 * moves 4 or 8 k at a time. */
inline void mt_stage_kc_f32(__local ushort *s, int R, __global const float *x, ulong base, int ld,
                            int r0, int rows, int k0, int K, int tid)
{
  if ((K & 3) == 0) {
    for (int e = tid; e < R * (MT_BK / 4); e += MT_THREADS) {
      const int r = e / (MT_BK / 4), p = (e % (MT_BK / 4)) * 4;
      float4 v = (float4)(0.0f);
      if (r0 + r < rows && k0 + p < K) v = vload4(0, x + base + (ulong)(r0 + r) * (ulong)ld + (ulong)(k0 + p));
      *(__local uint2 *)(s + r * MT_LDK + p) =
          (uint2)((uint)f32_to_bf16(v.x) | ((uint)f32_to_bf16(v.y) << 16),
                  (uint)f32_to_bf16(v.z) | ((uint)f32_to_bf16(v.w) << 16));
    }
    return;
  }
  for (int e = tid; e < R * MT_BK; e += MT_THREADS) {
    const int r = e / MT_BK, p = e % MT_BK;
    const float v = r0 + r < rows && k0 + p < K ? x[base + (ulong)(r0 + r) * (ulong)ld + (ulong)(k0 + p)] : 0.0f;
    s[r * MT_LDK + p] = f32_to_bf16(v);
  }
}
/* (bf16: base and ld even where K is a multiple of 8, as the weights' [E, n, K] are) */
inline void mt_stage_kc_bf16(__local ushort *s, int R, __global const ushort *x, ulong base, int ld,
                             int r0, int rows, int k0, int K, int tid)
{
  if ((K & 7) == 0 && (ld & 7) == 0 && (base & 7) == 0) {
    for (int e = tid; e < R * (MT_BK / 8); e += MT_THREADS) {
      const int r = e / (MT_BK / 8), p = (e % (MT_BK / 8)) * 8;
      uint4 v = (uint4)(0u);
      if (r0 + r < rows && k0 + p < K)
        v = vload4(0, (__global const uint *)(x + base + (ulong)(r0 + r) * (ulong)ld + (ulong)(k0 + p)));
      *(__local uint4 *)(s + r * MT_LDK + p) = v;
    }
    return;
  }
  for (int e = tid; e < R * MT_BK; e += MT_THREADS) {
    const int r = e / MT_BK, p = e % MT_BK;
    s[r * MT_LDK + p] =
        r0 + r < rows && k0 + p < K ? x[base + (ulong)(r0 + r) * (ulong)ld + (ulong)(k0 + p)] : (ushort)0;
  }
}

/* Transposing: s[c * MT_LDK + p] = x[base + (k0 + p) ld + c0 + c] for the R x MT_BK slice
 * (R columns of a k-major source; consecutive work-items read consecutive columns); 0 where
 * c0 + c >= cols or k0 + p >= K. Where cols and ld allow (fp32: multiples of 4, bf16: of 8,
 * base too) 4 or 8 columns at a time. */
inline void mt_stage_tr_f32(__local ushort *s, int R, __global const float *x, ulong base, int ld,
                            int c0, int cols, int k0, int K, int tid)
{
  if ((cols & 3) == 0 && (ld & 3) == 0) {
    for (int e = tid; e < R * MT_BK / 4; e += MT_THREADS) {
      const int p = e / (R / 4), c = (e % (R / 4)) * 4;
      float4 v = (float4)(0.0f);
      if (c0 + c < cols && k0 + p < K) v = vload4(0, x + base + (ulong)(k0 + p) * (ulong)ld + (ulong)(c0 + c));
      s[c * MT_LDK + p] = f32_to_bf16(v.x);
      s[(c + 1) * MT_LDK + p] = f32_to_bf16(v.y);
      s[(c + 2) * MT_LDK + p] = f32_to_bf16(v.z);
      s[(c + 3) * MT_LDK + p] = f32_to_bf16(v.w);
    }
    return;
  }
  for (int e = tid; e < R * MT_BK; e += MT_THREADS) {
    const int p = e / R, c = e % R;
    const float v = c0 + c < cols && k0 + p < K ? x[base + (ulong)(k0 + p) * (ulong)ld + (ulong)(c0 + c)] : 0.0f;
    s[c * MT_LDK + p] = f32_to_bf16(v);
  }
}
inline void mt_stage_tr_bf16(__local ushort *s, int R, __global const ushort *x, ulong base, int ld,
                             int c0, int cols, int k0, int K, int tid)
{
  if ((cols & 7) == 0 && (ld & 7) == 0 && (base & 7) == 0) {
    for (int e = tid; e < R * MT_BK / 8; e += MT_THREADS) {
      const int p = e / (R / 8), c = (e % (R / 8)) * 8;
      uint4 v = (uint4)(0u);
      if (c0 + c < cols && k0 + p < K)
        v = vload4(0, (__global const uint *)(x + base + (ulong)(k0 + p) * (ulong)ld + (ulong)(c0 + c)));
      const uint w[4] = {v.x, v.y, v.z, v.w};
      for (int i = 0; i < 4; i++) {
        s[(c + 2 * i) * MT_LDK + p] = (ushort)(w[i] & 0xffffu);
        s[(c + 2 * i + 1) * MT_LDK + p] = (ushort)(w[i] >> 16);
      }
    }
    return;
  }
  for (int e = tid; e < R * MT_BK; e += MT_THREADS) {
    const int p = e / R, c = e % R;
    s[c * MT_LDK + p] =
        c0 + c < cols && k0 + p < K ? x[base + (ulong)(k0 + p) * (ulong)ld + (ulong)(c0 + c)] : (ushort)0;
  }
}

inline void mt_zero(tile_c *acc)
{
  for (int j = 0; j < MT_NT; j++) acc[j] = tile_c_zero();
}

/* acc[j] += A B over the staged MT_BK: A rows wm .. wm + 15 of sa, B columns wn + 8 j .. of
 * sb (both k-contiguous). */
inline void mt_mac(tile_c *acc, __local const ushort *sa, __local const ushort *sb, int wm, int wn, int lane)
{
  TILE_UNROLL
  for (int kk = 0; kk < MT_BK; kk += 16) {
    const tile_a a = tile_load_a_bf16(sa + wm * MT_LDK + kk, MT_LDK, lane);
    TILE_UNROLL
    for (int j = 0; j < MT_NT; j++) {
      const tile_b b = tile_load_bt_bf16(sb + (wn + j * 8) * MT_LDK + kk, MT_LDK, lane);
      tile_mma(&acc[j], a, b);
    }
  }
}

/* A work-group's place and its warp's part of the block. */
#define MT_IDS                                                                               \
  const int tid = (int)get_local_id(0), lane = tid & 31, warp = tid >> 5;                    \
  const int wm = (warp / MT_WARPS_N) * 16, wn = (warp % MT_WARPS_N) * MT_WTN;                 \
  const int col0 = (int)get_group_id(0) * MT_BN

#define MT_FOR_TILES for (int tile = (int)get_group_id(1); tile < ntiles; tile += (int)get_num_groups(1))

/* Inside MT_FOR_TILES: the tile's expert (leaving at the end of the table), its rows [row0,
 * rend) and the expert's weights' offset; the whole work-group takes the same branch. */
#define MT_TILE_SETUP                                                                        \
  const int e = tiles[2 * tile];                                                             \
  if (e < 0) break;                                                                          \
  const int row0 = tiles[2 * tile + 1], rend = min(row0 + MT_BM, offsets[e + 1]);            \
  const ulong boff = (ulong)e * (ulong)n * (ulong)K

/* For each output (r, c) of this warp inside the tile: BODY with acc value v, index o. */
#define MT_FOR_OUTPUTS(acc, BODY)                                                            \
  for (int j = 0; j < MT_NT; j++)                                                            \
    for (int q = 0; q < TILE_C_NE; q++) {                                                    \
      const int r = row0 + wm + tile_c_row(lane, q), c = col0 + wn + j * 8 + tile_c_col(lane, q); \
      if (r >= rend || c >= n) continue;                                                     \
      const ulong o = (ulong)r * (ulong)n + (ulong)c;                                        \
      const float v = TILE_C_AT(acc[j], q);                                                  \
      BODY;                                                                                  \
    }

/* Gate and up with the gated unit fused: X [R, K] fp32, Wg and Wu [E, n, K] bf16:
 * act = glu(X Wg[e]^T, X Wu[e]^T) [R, n]; with save, also U and W (the two products). */
__kernel __attribute__((reqd_work_group_size(MT_THREADS, 1, 1)))
void moe_tile_gu(__global const int *tiles, int ntiles, __global const int *offsets,
                 __global const float *X, int K, __global const ushort *Wg,
                 __global const ushort *Wu, int n, __global float *act, __global float *U,
                 __global float *W, int save, int glu)
{
  MT_LOCAL(sa, MT_BM);
  MT_LOCAL(sg, MT_BN);
  MT_LOCAL(su, MT_BN);
  MT_IDS;
  MT_FOR_TILES {
    MT_TILE_SETUP;
    tile_c ag[MT_NT], au[MT_NT];
    mt_zero(ag);
    mt_zero(au);
    for (int k0 = 0; k0 < K; k0 += MT_BK) {
      mt_stage_kc_f32(sa, MT_BM, X, 0, K, row0, rend, k0, K, tid);
      mt_stage_kc_bf16(sg, MT_BN, Wg, boff, K, col0, n, k0, K, tid);
      mt_stage_kc_bf16(su, MT_BN, Wu, boff, K, col0, n, k0, K, tid);
      barrier(CLK_LOCAL_MEM_FENCE);
      mt_mac(ag, sa, sg, wm, wn, lane);
      mt_mac(au, sa, su, wm, wn, lane);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    MT_FOR_OUTPUTS(ag, {
      const float w = TILE_C_AT(au[j], q);
      act[o] = glu_act(glu, v, w);
      if (save) {
        U[o] = v;
        W[o] = w;
      }
    });
  }
}

/* C [R, n] = A [R, K] B[e]^T with B [E, n, K] bf16 (the down product: act W_dn[e]^T). */
__kernel __attribute__((reqd_work_group_size(MT_THREADS, 1, 1)))
void moe_tile_nt(__global const int *tiles, int ntiles, __global const int *offsets,
                 __global const float *A, int K, __global const ushort *B, int n, __global float *C)
{
  MT_LOCAL(sa, MT_BM);
  MT_LOCAL(sb, MT_BN);
  MT_IDS;
  MT_FOR_TILES {
    MT_TILE_SETUP;
    tile_c acc[MT_NT];
    mt_zero(acc);
    for (int k0 = 0; k0 < K; k0 += MT_BK) {
      mt_stage_kc_f32(sa, MT_BM, A, 0, K, row0, rend, k0, K, tid);
      mt_stage_kc_bf16(sb, MT_BN, B, boff, K, col0, n, k0, K, tid);
      barrier(CLK_LOCAL_MEM_FENCE);
      mt_mac(acc, sa, sb, wm, wn, lane);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    MT_FOR_OUTPUTS(acc, C[o] = v);
  }
}

/* The down product's backward with the gated unit's gradient fused: dact = dY [R, K] B[e]
 * with B = W_dn [E, K, n] bf16; (dU, dW) = glu'(U, W) dact, [R, n] each. */
__kernel __attribute__((reqd_work_group_size(MT_THREADS, 1, 1)))
void moe_tile_dact(__global const int *tiles, int ntiles, __global const int *offsets,
                   __global const float *dY, int K, __global const ushort *B, int n,
                   __global const float *U, __global const float *W, __global float *dU,
                   __global float *dW, int glu)
{
  MT_LOCAL(sa, MT_BM);
  MT_LOCAL(sb, MT_BN);
  MT_IDS;
  MT_FOR_TILES {
    MT_TILE_SETUP;
    tile_c acc[MT_NT];
    mt_zero(acc);
    for (int k0 = 0; k0 < K; k0 += MT_BK) {
      mt_stage_kc_f32(sa, MT_BM, dY, 0, K, row0, rend, k0, K, tid);
      mt_stage_tr_bf16(sb, MT_BN, B, boff, n, col0, n, k0, K, tid);
      barrier(CLK_LOCAL_MEM_FENCE);
      mt_mac(acc, sa, sb, wm, wn, lane);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    MT_FOR_OUTPUTS(acc, {
      const float2 g = glu_grad(glu, U[o], W[o], v);
      dU[o] = g.x;
      dW[o] = g.y;
    });
  }
}

/* The input gradient of the gate and up products: dX [R, n] = dU [R, K] Wg[e] + dW Wu[e]
 * with Wg, Wu [E, K, n] bf16 (one accumulator: both products' terms in one sum). */
__kernel __attribute__((reqd_work_group_size(MT_THREADS, 1, 1)))
void moe_tile_dx(__global const int *tiles, int ntiles, __global const int *offsets,
                 __global const float *dU, __global const float *dW, int K,
                 __global const ushort *Wg, __global const ushort *Wu, int n, __global float *dX)
{
  MT_LOCAL(sa, MT_BM);
  MT_LOCAL(sa2, MT_BM);
  MT_LOCAL(sg, MT_BN);
  MT_LOCAL(su, MT_BN);
  MT_IDS;
  MT_FOR_TILES {
    MT_TILE_SETUP;
    tile_c acc[MT_NT];
    mt_zero(acc);
    for (int k0 = 0; k0 < K; k0 += MT_BK) {
      mt_stage_kc_f32(sa, MT_BM, dU, 0, K, row0, rend, k0, K, tid);
      mt_stage_kc_f32(sa2, MT_BM, dW, 0, K, row0, rend, k0, K, tid);
      mt_stage_tr_bf16(sg, MT_BN, Wg, boff, n, col0, n, k0, K, tid);
      mt_stage_tr_bf16(su, MT_BN, Wu, boff, n, col0, n, k0, K, tid);
      barrier(CLK_LOCAL_MEM_FENCE);
      mt_mac(acc, sa, sg, wm, wn, lane);
      mt_mac(acc, sa2, su, wm, wn, lane);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    MT_FOR_OUTPUTS(acc, dX[o] = v);
  }
}

/* Weight gradients: C[e] [n1, n2] = A_e^T B_e, the sum over expert e's rows of A [R, n1] and
 * B [R, n2] (fp32, rounded to bf16 on staging); 0 for an expert without rows. Grid: (n2
 * tiles, n1 tiles, groups over experts: e = get_group_id(2), + get_num_groups(2), ... < E). */
__kernel __attribute__((reqd_work_group_size(MT_THREADS, 1, 1)))
void moe_tile_wgrad(__global const int *offsets, int E, __global const float *A, int n1,
                    __global const float *B, int n2, __global float *C)
{
  MT_LOCAL(sa, MT_BM);
  MT_LOCAL(sb, MT_BN);
  const int tid = (int)get_local_id(0), lane = tid & 31, warp = tid >> 5;
  const int wm = (warp / MT_WARPS_N) * 16, wn = (warp % MT_WARPS_N) * MT_WTN;
  const int col0 = (int)get_group_id(0) * MT_BN, row0 = (int)get_group_id(1) * MT_BM;
  for (int e = (int)get_group_id(2); e < E; e += (int)get_num_groups(2)) {
    const int r0 = offsets[e], r1 = offsets[e + 1];
    tile_c acc[MT_NT];
    mt_zero(acc);
    for (int p0 = r0; p0 < r1; p0 += MT_BK) {
      mt_stage_tr_f32(sa, MT_BM, A, 0, n1, row0, n1, p0, r1, tid);
      mt_stage_tr_f32(sb, MT_BN, B, 0, n2, col0, n2, p0, r1, tid);
      barrier(CLK_LOCAL_MEM_FENCE);
      mt_mac(acc, sa, sb, wm, wn, lane);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    __global float *Ce = C + (ulong)e * (ulong)n1 * (ulong)n2;
    for (int j = 0; j < MT_NT; j++)
      for (int q = 0; q < TILE_C_NE; q++) {
        const int i = row0 + wm + tile_c_row(lane, q), c = col0 + wn + j * 8 + tile_c_col(lane, q);
        if (i < n1 && c < n2) Ce[(ulong)i * (ulong)n2 + (ulong)c] = TILE_C_AT(acc[j], q);
      }
  }
}

#endif /* CLMOE_TILE_CL */
