/* mla_tile.cl: MLA attention forward on the matrix-unit tile interface (tile.cl), built as
 * the family "tile+mla_layout+mla+mla_tile" with -DDN, -DDR, -DDV, -DSTORE_BF16, -DOUT_BF16
 * (mla.cl), -DMT_BQ (64 or 128 query rows per work-group) and -DMT_VEC (1: every offset,
 * stride and head size is a multiple of 4 elements, so operands are staged 4 at a time),
 * its local layouts sized by mla_layout.cl. MT_ and mt_ ("MLA tile") name what this file
 * shares with the other MLA tile kernels (mla_tile_async.cl, mla_tile_wgmma.cl,
 * mla_tile_bwd.cl).
 *
 * mla_tile_fwd: flash-attention-2 style causal forward. One work-group per (query tile of
 *   MT_BQ rows of one sequence, head); MT_BQ / 16 groups of 32 lanes ("warps"), warp w
 *   owning query rows 16 w .. 16 w + 15. The tile table is mla_fwd.cl's (int4: first key of
 *   the sequence, first query row, rows, key shift of the queries).
 *   - Q [16 x DQK] of each warp goes once through local memory into A fragments that stay
 *     in registers (DQK padded to a multiple of 16: 12 k-steps at qk 192).
 *   - Key blocks of MT_BK = 64 keys from the sequence's first key up to the tile's last
 *     query (blocks past the diagonal are never visited): K [64 x DQK] (k_nope of the head,
 *     then the shared k_rope) and V transposed, Vt [DV x 64] (see mt_vt_index), are staged
 *     in local memory as bf16 (fp32 inputs rounded to nearest even on the way).
 *   - S [16 x 64] = Q K^T per warp on tile_mma (8 accumulator tiles), scaled by
 *     scale log2(e) in fp32; the causal mask is a selection (-inf), applied only to blocks
 *     that reach past the warp's first query.
 *   - Online softmax in base 2 per row: the block's row max across the 4 lanes that hold a
 *     row (lane shuffles where the tiles have them, local memory otherwise), corr = exp2(m_old - m_new),
 *     P = exp2(S - m_new); each lane keeps a partial row sum of its own columns (reduced
 *     once at the end).
 *   - O [16 x DV] += P V on tile_mma, P (rounded to bf16) taken straight from the score
 *     accumulators (tile_a_from_c where the tiles have it; through local memory otherwise).
 *   o = O / l, lse = ln(2) (m + log2 l): the natural log-sum-exp of the scaled scores, the
 *   convention of mla_fwd.cl, which the backward (mla_bwd.cl) consumes.
 * Precision: products of bf16-rounded operands (q, k, v and P) summed in fp32; softmax
 * statistics in fp32. */
#ifndef DN
#error "DN, DR and DV must be defined"
#endif
#ifndef MT_BQ
#define MT_BQ 64
#endif
#ifndef MT_VEC
#define MT_VEC 0
#endif
/* The sizes of the local layouts come from mla_layout.cl (the host checks the same ones). */
#define MT_BK MLA_TILE_BK             /* keys per block */
#define MT_NW MLA_TILE_NW(MT_BQ)      /* warps per work-group */
#define MT_WG MLA_TILE_WG(MT_BQ)      /* work-items per work-group */
#define DQP MLA_TILE_DQP(DQK)         /* DQK padded to whole k-steps */
#define DVP MLA_TILE_DVP(DV)          /* DV padded to whole 8-column tiles */
#define KLD MLA_TILE_LD(DQP)          /* K's local row stride (bf16): see MLA_TILE_LD */
#define NKS (DQP / 16)                /* k-steps of S = Q K^T */
#define NSN (MT_BK / 8)               /* 8-key tiles of S */
#define NON (DVP / 8)                 /* 8-column tiles of O */
#if MT_BQ != 64 && MT_BQ != 128
#error "MT_BQ must be 64 or 128"
#endif
#if MT_VEC && (DN % 4 || DR % 4 || DV % 4)
#error "MT_VEC needs head sizes that are multiples of 4"
#endif

#define MT_UNROLL TILE_UNROLL
#if TILE_HAS_LANE_SHUFFLE
/* Max and sum over the 4 lanes (tile_c_lane(row, 0 .. 7)) that hold the same two rows. */
inline float2 mt_quad_max(float2 x, __local float2 *red, int lane)
{
  (void)red, (void)lane;
  x.x = fmax(x.x, tile_shfl_xor(x.x, 1)), x.y = fmax(x.y, tile_shfl_xor(x.y, 1));
  x.x = fmax(x.x, tile_shfl_xor(x.x, 2)), x.y = fmax(x.y, tile_shfl_xor(x.y, 2));
  return x;
}
inline float2 mt_quad_sum(float2 x, __local float2 *red, int lane)
{
  (void)red, (void)lane;
  x.x += tile_shfl_xor(x.x, 1), x.y += tile_shfl_xor(x.y, 1);
  x.x += tile_shfl_xor(x.x, 2), x.y += tile_shfl_xor(x.y, 2);
  return x;
}
#else
/* Through local memory (red: 32 float2 of this warp); holds two work-group barriers, so
 * every work-item calls it in uniform control flow. Sums in lane order 0..3. */
inline float2 mt_quad_max(float2 x, __local float2 *red, int lane)
{
  red[lane] = x;
  barrier(CLK_LOCAL_MEM_FENCE);
  const int b = tile_c_lane(tile_c_row(lane, 0), 0); /* (the row's lanes: b .. b + 3) */
  const float2 m = fmax(fmax(red[b], red[b + 1]), fmax(red[b + 2], red[b + 3]));
  barrier(CLK_LOCAL_MEM_FENCE);
  return m;
}
inline float2 mt_quad_sum(float2 x, __local float2 *red, int lane)
{
  red[lane] = x;
  barrier(CLK_LOCAL_MEM_FENCE);
  const int b = tile_c_lane(tile_c_row(lane, 0), 0); /* (the row's lanes: b .. b + 3) */
  const float2 s = ((red[b] + red[b + 1]) + red[b + 2]) + red[b + 3];
  barrier(CLK_LOCAL_MEM_FENCE);
  return s;
}
#endif
#if TILE_HAS_A_FROM_C
#define MT_A_FROM_C(c0, c1, scratch, lane) tile_a_from_c(c0, c1, lane)
#else
#define MT_A_FROM_C(c0, c1, scratch, lane) tile_a_from_c_local(c0, c1, scratch, lane)
#endif

/* Local buffers: K [MT_BK][KLD] (or Q while it is loaded, or under the portable tiles the
 * P scratch of every warp once the scores are done) and V transposed, Vt [DVP][MT_BK]. */
#define KS_ELEMS MLA_TILE_FWD_KS(DQK, MT_BQ)
#define VS_ELEMS MLA_TILE_FWD_VS(DV)

/* Vt's layout. P V needs B[key][dv] = V: a fragment holds, for dv column g, keys
 * (2t, 2t+1) and (2t+8, 2t+9) of a 16-key chunk. Each dv row of Vt stores a chunk's keys
 * in the order 0 1 8 9 | 2 3 10 11 | 4 5 12 13 | 6 7 14 15, so those four keys are one
 * 8-byte unit (unit 4 chunk + t), and units are XOR-swizzled by row, so that neither the
 * fragment loads (4 rows x 4 units per half-warp) nor the staging stores (4 rows x 8 keys
 * per warp) meet bank conflicts without padding. */
inline int mt_vt_index(int r, int c)
{
  const int c16 = c & 15, t = (c16 & 7) >> 1, j = (c16 & 1) | ((c16 >> 3) << 1);
  const int f = ((r & 3) ^ ((r >> 2) & 3)) << 2;
  return r * MT_BK + 4 * ((4 * (c >> 4) + t) ^ f) + j;
}

/* Four consecutive operand elements as four bf16 in a uint2 (element i at the low half). */
#if defined(STORE_BF16) && STORE_BF16
#define MT_LOAD1(p, i) ((p)[i])
#define MT_LOAD4(p, i) (*(__global const uint2 *)((p) + (i)))
#else
#define MT_LOAD1(p, i) f32_to_bf16((p)[i])
inline uint mt_pack(float lo, float hi) { return (uint)f32_to_bf16(lo) | ((uint)f32_to_bf16(hi) << 16); }
inline uint2 mt_load4_f32(__global const float *p)
{
  const float4 f = *(__global const float4 *)p;
  return (uint2)(mt_pack(f.x, f.y), mt_pack(f.z, f.w));
}
#define MT_LOAD4(p, i) mt_load4_f32((p) + (i))
#endif

/* dst[c][d] (row stride ld, c < MT_BK, d < width padded) = row (row0 + c) of the operand
 * [a (wa columns) | b (wb columns) | zeros], rows c >= nrows zero. a, b addressed as
 * base + row * ts + d. */
inline void mt_stage(__local ushort *dst, int ld, int width, int row0, int nrows,
                     __global const store_t *a, ulong ao, uint ats, int wa,
                     __global const store_t *b, ulong bo, uint bts, int wb, int lid)
{
#if MT_VEC
  const int w4 = width / 4;
  for (int e = lid; e < MT_BK * w4; e += MT_WG) {
    const int c = e / w4, d = 4 * (e % w4);
    const ulong row = (ulong)(row0 + c);
    uint2 x = (uint2)(0u, 0u);
    if (c < nrows) {
      if (d < wa) x = MT_LOAD4(a, ao + row * ats + d);
      else if (d < wa + wb) x = MT_LOAD4(b, bo + row * bts + (d - wa));
    }
    *(__local uint2 *)(dst + c * ld + d) = x;
  }
#else
  for (int e = lid; e < MT_BK * width; e += MT_WG) {
    const int c = e / width, d = e % width;
    const ulong row = (ulong)(row0 + c);
    ushort x = 0;
    if (c < nrows) {
      if (d < wa) x = MT_LOAD1(a, ao + row * ats + d);
      else if (d < wa + wb) x = MT_LOAD1(b, bo + row * bts + (d - wa));
    }
    dst[c * ld + d] = x;
  }
#endif
}

/* Q fragments of warp w (rows 16 w .. 16 w + 15 of the tile at t0) in tile.cl's own k order,
 * staged 64 rows at a time through sm (64 x KLD ushorts): the double-buffered and
 * warp-group forwards. Holds barriers: every work-item calls it. */
inline void mt_q_frags(tile_a *qf, __local ushort *sm, int t0, int rows, __global const store_t *q, ulong qo_h,
                       uint q_ts, int w, int lane, int lid)
{
  for (int c = 0; c < MT_BQ; c += 64) {
    mt_stage(sm, KLD, DQP, t0 + c, min(64, rows - c), q, qo_h, q_ts, DQK, q, 0, 0, 0, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (16 * w >= c && 16 * w < c + 64) {
      MT_UNROLL
      for (int ks = 0; ks < NKS; ks++) qf[ks] = tile_load_a_bf16(sm + (16 * w - c) * KLD + 16 * ks, KLD, lane);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

/* Vt[d][c] = v row (row0 + c), column d (zero for c >= nrows or d >= DV). With MT_VEC a
 * warp reads 8 keys x 16 columns (a whole 32-byte sector per key) when DVP allows. */
inline void mt_stage_vt(__local ushort *vt, int row0, int nrows, __global const store_t *a, ulong ao, uint ats,
                        int lid)
{
#if MT_VEC
  const int w4 = DVP / 4;
  for (int e = lid; e < MT_BK * w4; e += MT_WG) {
#if DVP % 16 == 0
    const int c = 8 * ((e >> 5) & 7) + (e & 7), d = 4 * (4 * (e >> 8) + ((e >> 3) & 3));
#else
    const int c = e % MT_BK, d = 4 * (e / MT_BK);
#endif
    uint2 x = (uint2)(0u, 0u);
    if (c < nrows && d < DV) x = MT_LOAD4(a, ao + (ulong)(row0 + c) * ats + d);
    vt[mt_vt_index(d, c)] = (ushort)x.x;
    vt[mt_vt_index(d + 1, c)] = (ushort)(x.x >> 16);
    vt[mt_vt_index(d + 2, c)] = (ushort)x.y;
    vt[mt_vt_index(d + 3, c)] = (ushort)(x.y >> 16);
  }
#else
  for (int e = lid; e < MT_BK * DVP; e += MT_WG) {
    const int c = e % MT_BK, d = e / MT_BK;
    vt[mt_vt_index(d, c)] = c < nrows && d < DV ? MT_LOAD1(a, ao + (ulong)(row0 + c) * ats + d) : (ushort)0;
  }
#endif
}

/* Fragment loads. With packed operands (TILE_HAS_PACKED_REGS, the m16n8k16 register order)
 * the k dimension of S = Q K^T is read in a different order than
 * tile.cl's (lane t takes columns 4t .. 4t+3 of a 16-column step as its k slots 2t, 2t+1,
 * 2t+8, 2t+9: one 8-byte load), the same order for Q and K, so the sum over k is the same;
 * these set the fragments' registers (TILE_A_REG, TILE_B_REG). Other tiles use tile.cl's
 * loads, and a V load that undoes Vt's layout. */
#if TILE_HAS_PACKED_REGS
/* A[r][k] = p[r ld + k] and B[k][n] = p[n ld + k] in that k order (ld a multiple of 4). */
inline tile_a mt_load_a_ld(__local const ushort *p, int ld, int lane)
{
  const int g = tile_a_row(lane, 0), t = tile_a_col(lane, 0) >> 1; /* rows g, g + 8 */
  const uint2 x0 = *(__local const uint2 *)(p + g * ld + 4 * t);
  const uint2 x1 = *(__local const uint2 *)(p + (g + 8) * ld + 4 * t);
  tile_a a;
  TILE_A_REG(a, 0) = x0.x, TILE_A_REG(a, 2) = x0.y, TILE_A_REG(a, 1) = x1.x, TILE_A_REG(a, 3) = x1.y;
  return a;
}
inline tile_b mt_load_bt_ld(__local const ushort *p, int ld, int lane)
{
  const uint2 x = *(__local const uint2 *)(p + tile_b_col(lane, 0) * ld + 2 * tile_b_row(lane, 0));
  tile_b b;
  TILE_B_REG(b, 0) = x.x, TILE_B_REG(b, 1) = x.y;
  return b;
}
/* B[k][n] = V[key 16 kk + k][dv n0 + n] from Vt. */
inline tile_b mt_load_v(__local const ushort *vt, int kk, int n0, int lane)
{
  const int r = n0 + tile_b_col(lane, 0), f = ((r & 3) ^ ((r >> 2) & 3)) << 2;
  const uint2 x = *(__local const uint2 *)(vt + r * MT_BK + 4 * ((4 * kk + (tile_b_row(lane, 0) >> 1)) ^ f));
  tile_b b;
  TILE_B_REG(b, 0) = x.x, TILE_B_REG(b, 1) = x.y;
  return b;
}
#else
inline tile_a mt_load_a_ld(__local const ushort *p, int ld, int lane) { return tile_load_a_bf16(p, ld, lane); }
inline tile_b mt_load_bt_ld(__local const ushort *p, int ld, int lane) { return tile_load_bt_bf16(p, ld, lane); }
inline tile_b mt_load_v(__local const ushort *vt, int kk, int n0, int lane)
{
  tile_b b;
  for (int i = 0; i < TILE_B_NE; i++)
    TILE_B_AT(b, i) = bf16_to_f32(vt[mt_vt_index(n0 + tile_b_col(lane, i), 16 * kk + tile_b_row(lane, i))]);
  return b;
}
#endif

#define mt_load_q(p, lane) mt_load_a_ld(p, KLD, lane)
#define mt_load_k(p, lane) mt_load_bt_ld(p, KLD, lane)

/* Online softmax over one key block for a warp's 16 query rows (the forward kernels):
 * s[0 .. nsn - 1] hold the raw scores of keys kb + 8 n + column, which are scaled (sl2 =
 * scale log2 e) and, when `masked`, set to -inf past each row's key position (qp0 for row
 * g, qp1 for g + 8); the running maxima (m0, m1) and this lane's partial sums (l0, l1) are
 * updated, s becomes P = exp2(s - m), and the factors that O must be rescaled by (rows g,
 * g + 8) are returned. The row maximum is finite from the first block on: every row sees
 * its sequence's first key there. */
inline float2 mt_softmax_p(tile_c *s, int nsn, int kb, int masked, float sl2, int qp0, int qp1, float *m0,
                           float *m1, float *l0, float *l1, __local float2 *wred, int lane)
{
  /* The maximum is taken over the unscaled scores (sl2 > 0) and the scale folded into the
   * exponent's argument, one fused multiply-add per score. */
  float2 mx = (float2)(-INFINITY, -INFINITY);
  MT_UNROLL
  for (int n = 0; n < nsn; n++) {
    if (masked) {
      MT_UNROLL
      for (int i = 0; i < TILE_C_NE; i++) {
        const int key = kb + 8 * n + tile_c_col(lane, i);
        TILE_C_AT(s[n], i) = key <= (i < 2 ? qp0 : qp1) ? TILE_C_AT(s[n], i) : -INFINITY;
      }
    }
    mx.x = fmax(mx.x, fmax(TILE_C_AT(s[n], 0), TILE_C_AT(s[n], 1)));
    mx.y = fmax(mx.y, fmax(TILE_C_AT(s[n], 2), TILE_C_AT(s[n], 3)));
  }
  mx = mt_quad_max(mx, wred, lane);
  const float mn0 = fmax(*m0, mx.x * sl2), mn1 = fmax(*m1, mx.y * sl2);
  const float c0 = exp2(*m0 - mn0), c1 = exp2(*m1 - mn1); /* 0 on the first block */
  *m0 = mn0, *m1 = mn1;
  float ps0 = 0.0f, ps1 = 0.0f;
  MT_UNROLL
  for (int n = 0; n < nsn; n++) {
    TILE_C_AT(s[n], 0) = exp2(fma(TILE_C_AT(s[n], 0), sl2, -mn0)), TILE_C_AT(s[n], 1) = exp2(fma(TILE_C_AT(s[n], 1), sl2, -mn0));
    TILE_C_AT(s[n], 2) = exp2(fma(TILE_C_AT(s[n], 2), sl2, -mn1)), TILE_C_AT(s[n], 3) = exp2(fma(TILE_C_AT(s[n], 3), sl2, -mn1));
    ps0 += TILE_C_AT(s[n], 0) + TILE_C_AT(s[n], 1);
    ps1 += TILE_C_AT(s[n], 2) + TILE_C_AT(s[n], 3);
  }
  *l0 = *l0 * c0 + ps0, *l1 = *l1 * c1 + ps1;
  return (float2)(c0, c1);
}
inline void mt_rescale(tile_c *acc, int nacc, float2 c)
{
  MT_UNROLL
  for (int j = 0; j < nacc; j++) {
    TILE_C_AT(acc[j], 0) *= c.x, TILE_C_AT(acc[j], 1) *= c.x;
    TILE_C_AT(acc[j], 2) *= c.y, TILE_C_AT(acc[j], 3) *= c.y;
  }
}
/* A forward work-group's head (dimension 0) and query tile (dimension 1, counted from the
 * end). Groups start roughly in the order of their linear index, heads fastest: every
 * head's longest tiles (the last of each sequence) go first and the shortest fill the end
 * (a longest-first schedule). The host launches at most 65535 tiles at a time (the grid
 * limit of dimension 1 on NVIDIA), passing the tiles not yet launched as ntiles. */
inline int4 mt_fwd_tile(__global const int4 *tiles, int ntiles, int *h)
{
  *h = (int)get_group_id(0);
  return tiles[ntiles - 1 - (int)get_group_id(1)];
}
/* Both: the softmax of a block and O's rescaling. */
inline void mt_softmax_block(tile_c *s, int nsn, tile_c *acc, int nacc, int kb, int masked, float sl2,
                             int qp0, int qp1, float *m0, float *m1, float *l0, float *l1,
                             __local float2 *wred, int lane)
{
  mt_rescale(acc, nacc, mt_softmax_p(s, nsn, kb, masked, sl2, qp0, qp1, m0, m1, l0, l1, wred, lane));
}

/* o = O / l and lse = ln 2 (m + log2 l) for a warp's rows r0 = 16 w + g and r0 + 8 of a
 * tile of `rows` starting at t0 (the lse the backward reads). */
inline void mt_store_rows(const tile_c *acc, float m0, float m1, float l0, float l1, int w, int lane, int t0,
                          int rows, int H, int h, __global out_t *o, ulong oo, __global float *lse, ulong lo,
                          int has_lse, __local float2 *wred)
{
  const float2 l = mt_quad_sum((float2)(l0, l1), wred, lane);
  const int r0 = 16 * w + tile_c_row(lane, 0), r1 = 16 * w + tile_c_row(lane, 2);
  const float inv0 = 1.0f / l.x, inv1 = 1.0f / l.y;
  MT_UNROLL
  for (int j = 0; j < NON; j++) {
    MT_UNROLL
    for (int i = 0; i < TILE_C_NE; i++) {
      const int col = 8 * j + tile_c_col(lane, i), r = i < 2 ? r0 : r1;
      if (col < DV && r < rows)
        STORE_OUT(o, oo + ((ulong)(t0 + r) * (ulong)H + (ulong)h) * DV + col, TILE_C_AT(acc[j], i) * (i < 2 ? inv0 : inv1));
    }
  }
  if (has_lse && tile_c_col(lane, 0) == 0) {
    if (r0 < rows) lse[lo + (ulong)(t0 + r0) * (ulong)H + (ulong)h] = (m0 + log2(l.x)) * LN2;
    if (r1 < rows) lse[lo + (ulong)(t0 + r1) * (ulong)H + (ulong)h] = (m1 + log2(l.y)) * LN2;
  }
}

/* The prologue of the double-buffered and the warp-group forwards (mla_tile_async.cl,
 * mla_tile_wgmma.cl): in a kernel with mla_tile_fwd's arguments, after its local buffer
 * `__local uint4 sm4[]`, declares sm (sm4 as ushorts), red and wred (the quad reductions;
 * unused with lane shuffles), pscr (this warp's P scratch, 16 x 16 fp32; NULL with TILE_HAS_A_FROM_C),
 * lid, w, lane and g, the head h and the tile tl (s0, t0, rows, shift, kend), the head's
 * offsets kno_h and vo_h, this warp's Q fragments qf (loaded: holds barriers, so every
 * work-item runs it) and the key positions qp0, qp1 of this lane's rows g and g + 8. */
#if TILE_HAS_A_FROM_C
#define MT_PSCR_DECL
#define MT_PSCR(w) NULL
#else
#define MT_PSCR_DECL __local float pscr_all[MT_NW * 256]; /* 16 x 16 fp32 per warp */
#define MT_PSCR(w) (pscr_all + 256 * (w))
#endif
#define MT_FWD_PROLOGUE                                                                          \
  __local ushort *sm = (__local ushort *)sm4;                                                    \
  __local float2 red[MT_WG]; /* quad reductions (unused with lane shuffles) */                     \
  MT_PSCR_DECL                                                                                   \
  const int lid = (int)get_local_id(0), w = lid / 32, lane = lid % 32;                           \
  const int g = tile_c_row(lane, 0); /* this lane's rows g, g + 8 */                             \
  __local float *pscr = MT_PSCR(w);                                                              \
  int h;                                                                                         \
  const int4 tl = mt_fwd_tile(tiles, ntiles, &h);                                                \
  const int s0 = tl.x, t0 = tl.y, rows = tl.z, shift = tl.w, kend = t0 + rows + shift;           \
  __local float2 *wred = red + 32 * w;                                                           \
  const ulong kno_h = kno + (ulong)h * kn_hs, vo_h = vo + (ulong)h * v_hs;                       \
                                                                                                 \
  tile_a qf[NKS];                                                                                \
  mt_q_frags(qf, sm, t0, rows, q, qo + (ulong)h * q_hs, q_ts, w, lane, lid);                     \
                                                                                                 \
  const int qp0 = t0 + 16 * w + g + shift, qp1 = qp0 + 8

#if !defined(MT_BWD) || !MT_BWD /* the backward program (mla_tile_bwd.cl) uses the helpers only */
__kernel __attribute__((reqd_work_group_size(MT_WG, 1, 1)))
void mla_tile_fwd(__global const store_t *q, ulong qo, uint q_ts, uint q_hs,
                __global const store_t *kn, ulong kno, uint kn_ts, uint kn_hs,
                __global const store_t *kr, ulong kro, uint kr_ts,
                __global const store_t *v, ulong vo, uint v_ts, uint v_hs,
                __global const int4 *tiles, int ntiles, int H, float sl2,
                __global out_t *o, ulong oo, __global float *lse, ulong lo, int has_lse)
{
  /* uint4 storage: 16-byte alignment for the 8-byte loads and stores */
  __local uint4 Ks4[MLA_TILE_U4(KS_ELEMS)], Vs4[MLA_TILE_U4(VS_ELEMS)];
  __local ushort *Ks = (__local ushort *)Ks4, *Vs = (__local ushort *)Vs4;
  __local float2 red[MT_WG]; /* unused with lane shuffles (the compiler drops it) */
  const int lid = (int)get_local_id(0), w = lid / 32, lane = lid % 32;
  const int g = tile_c_row(lane, 0); /* this lane's rows g, g + 8 */
  int h;
  const int4 tl = mt_fwd_tile(tiles, ntiles, &h);
  const int s0 = tl.x, t0 = tl.y, rows = tl.z, shift = tl.w, kend = t0 + rows + shift;
  __local float2 *wred = red + 32 * w;
  __local float *pscr = (__local float *)Ks + 256 * w; /* portable P scratch (16 x 16 fp32) */
  (void)pscr;

  /* Q fragments: rows of MT_BK at a time through Ks. */
  tile_a qf[NKS];
  for (int c = 0; c < MT_BQ / MT_BK; c++) {
    const int r0 = c * MT_BK;
    mt_stage(Ks, KLD, DQP, t0 + r0, min(MT_BK, rows - r0), q, qo + (ulong)h * q_hs, q_ts, DQK, q, 0, 0, 0, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (16 * w >= r0 && 16 * w < r0 + MT_BK) {
      MT_UNROLL
      for (int ks = 0; ks < NKS; ks++) qf[ks] = mt_load_q(Ks + (16 * w - r0) * KLD + 16 * ks, lane);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  /* key positions of this lane's rows g and g + 8; padding rows (>= rows) see every key
   * of the sequence, finite and never stored */
  const int qp0 = t0 + 16 * w + g + shift, qp1 = qp0 + 8;
  const int wq_first = t0 + 16 * w + shift, wq_last = wq_first + 15;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  tile_c acc[NON];
  MT_UNROLL
  for (int j = 0; j < NON; j++) acc[j] = tile_c_zero();

  for (int kb = s0; kb < kend; kb += MT_BK) {
    const int nk = min(MT_BK, kend - kb);
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous block's K, V and P are no longer read */
    mt_stage(Ks, KLD, DQP, kb, nk, kn, kno + (ulong)h * kn_hs, kn_ts, DN, kr, kro, kr_ts, DR, lid);
    mt_stage_vt(Vs, kb, nk, v, vo + (ulong)h * v_hs, v_ts, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
#if TILE_HAS_LANE_SHUFFLE && TILE_HAS_A_FROM_C
    /* a warp whose rows all precede the block skips it (no barrier below with these) */
    if (kb > wq_last) continue;
#endif
    tile_c s[NSN];
    MT_UNROLL
    for (int n = 0; n < NSN; n++) s[n] = tile_c_zero();
    MT_UNROLL
    for (int ks = 0; ks < NKS; ks++) {
      MT_UNROLL
      for (int n = 0; n < NSN; n++) tile_mma(&s[n], qf[ks], mt_load_k(Ks + 8 * n * KLD + 16 * ks, lane));
    }
    mt_softmax_block(s, NSN, acc, NON, kb, kb + MT_BK - 1 > wq_first, sl2, qp0, qp1, &m0, &m1, &l0, &l1, wred,
                     lane);
    MT_UNROLL
    for (int kk = 0; kk < MT_BK / 16; kk++) {
      const tile_a pa = MT_A_FROM_C(s[2 * kk], s[2 * kk + 1], pscr, lane);
      MT_UNROLL
      for (int j = 0; j < NON; j++) tile_mma(&acc[j], pa, mt_load_v(Vs, kk, 8 * j, lane));
    }
  }

  mt_store_rows(acc, m0, m1, l0, l1, w, lane, t0, rows, H, h, o, oo, lse, lo, has_lse, wred);
}
#endif
