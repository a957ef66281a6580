/* mla_tile_bwd_async.cl: the MLA attention backward on tiles with double-buffered,
 * asynchronous operand blocks, built as "tile+mla_layout+mla+mla_tile+mla_tile_bwd_async"
 * with -DMT_BWD=1 -DMT_BWA=1 -DMT_BQ=64 -DSTORE_BF16=1 and mla_tile.cl's other options.
 * Same results as mla_tile_bwd.cl (dq, dk_nope, the per-head k_rope part, dv) from bf16 q, k,
 * v whose offsets and strides are multiples of 8 elements (16-byte copies), Dn, Dr multiples
 * of 8 and Dv of 16 (the host checks; fp32 operands get packed bf16 copies first,
 * mla_tile_to_bf16).
 *
 * With P = exp2(sl2 q.k - lse log2 e), D_i = bf16(dO_i) . o_i, dS = P (dP - D), dP = dO V^T:
 *   dV_j = sum_i P_ij dO_i,  dK_j = scale sum_i dS_ij q_i,  dQ_i = scale sum_j dS_ij k_j.
 * mla_tile_bwd_prep: D [rows] and dO rounded to bf16 once, packed [rows = tokens x H, DV]
 *   (the operand both kernels stream, half the bytes of fp32 dO and no rounding per tile).
 * mla_tile_bwd_kv_async: one work-group of 4 warps per (64 keys, head), warp w owning keys
 *   16 w .. 16 w + 15, their K and V rows as A fragments in registers; query blocks of BA_BQ
 *   (32) rows of Q [BA_BQ x DQP] and dO [BA_BQ x DV] in two local stages, the next block's
 *   16-byte copies (cp.async on NVIDIA) in flight while this one is multiplied; B fragments
 *   by ldmatrix (Q, dO as Q^T, dO^T) and ldmatrix.trans (Q, dO as they are) from rows whose
 *   16-byte chunks are XOR-swizzled by the row (ba_swz). Per 16 queries: S^T = K Q^T,
 *   dP^T = V dO^T, P^T and dS^T in place, dV += P^T dO, dK += dS^T Q.
 * mla_tile_bwd_q_async: one work-group per (64 queries, head), warp w owning 16 queries, Q
 *   and dO as A fragments; key blocks of BA_BQ keys (k_nope of the head, then the shared
 *   k_rope, and V) in two stages: S = Q K^T, dP = dO V^T, dS, dQ += dS K.
 * Key and query blocks stop at the diagonal; a warp skips the 16-row steps its causal mask
 * empties (with lane shuffles and P in registers: no barrier inside the step). */
#if !defined(MT_BWD) || !defined(MT_BWA) || MT_BQ != 64 || !STORE_BF16
#error "build with -DMT_BWD=1 -DMT_BWA=1 -DMT_BQ=64 -DSTORE_BF16=1"
#endif
#if DN % 8 || DR % 8 || DV % 16
#error "mla_tile_bwd_async needs Dn and Dr multiples of 8 and Dv a multiple of 16"
#endif
#define BA_BQ MLA_TILE_BWA_BQ               /* rows per streamed block */
#define BA_QROW MLA_TILE_ASYNC_ROW(DQP)      /* a Q / K row in local memory */
#define BA_OROW MLA_TILE_ASYNC_ROW(DV)       /* a dO / V row */
#define BA_STAGE MLA_TILE_BWA_STAGE(DQK, DV) /* ushorts per stage: Q (K) block, then dO (V) */
#define BA_NS (BA_BQ / 8)                    /* 8-row tiles of a block */
#define NVS (DV / 16)                        /* k-steps over DV */
#define NKN (DQP / 8)                        /* 8-column tiles of dK, dQ */
#define OLD MLA_TILE_LD(DV)                  /* row stride of dO / V staged for A fragments */

/* Element (row r, column d) of a block whose rows are `width` wide: chunk d / 8 XOR-swizzled
 * by r within its group of 8 chunks (the 8 rows an ldmatrix reads hit 8 bank groups). */
inline int ba_swz(int row, int d, int width)
{
  const int c = d >> 3;
  return row * width + (((c & ~7) | ((c ^ row) & 7)) << 3) + (d & 7);
}

/* B fragments from a swizzled block: ba_frag_nt B[k][n] = blk[n0 + n][16 kstep + k] (the
 * rows as columns of B: Q^T, dO^T, K^T, V^T), two 8-column tiles n0 .., n0 + 8 ..;
 * ba_frag_t B[k][n] = blk[16 kk + k][n0 + n] (rows as rows), columns n0 .. n0 + 15. */
#if TILE_HAS_MATRIX_LOAD && TILE_HAS_PACKED_REGS
inline void ba_frag_nt(__local const ushort *blk, int width, int n0, int kstep, int lane, tile_b *b0, tile_b *b1)
{
  const int r = tile_ldsm_row(lane), lo = (tile_ldsm_mat(lane) & 1) << 3, hi = (tile_ldsm_mat(lane) >> 1) << 3;
  const uint4 x = tile_ldsm_x4(blk + ba_swz(n0 + r + hi, 16 * kstep + lo, width));
  TILE_B_REG(*b0, 0) = x.x, TILE_B_REG(*b0, 1) = x.y, TILE_B_REG(*b1, 0) = x.z, TILE_B_REG(*b1, 1) = x.w;
}
inline void ba_frag_t(__local const ushort *blk, int width, int kk, int n0, int lane, tile_b *b0, tile_b *b1)
{
  const int r = tile_ldsm_row(lane), lo = (tile_ldsm_mat(lane) & 1) << 3, hi = (tile_ldsm_mat(lane) >> 1) << 3;
  const uint4 x = tile_ldsm_x4_trans(blk + ba_swz(16 * kk + r + lo, n0 + hi, width));
  TILE_B_REG(*b0, 0) = x.x, TILE_B_REG(*b0, 1) = x.y, TILE_B_REG(*b1, 0) = x.z, TILE_B_REG(*b1, 1) = x.w;
}
#else
inline void ba_frag_nt(__local const ushort *blk, int width, int n0, int kstep, int lane, tile_b *b0, tile_b *b1)
{
  for (int i = 0; i < TILE_B_NE; i++) {
    const int k = 16 * kstep + tile_b_row(lane, i), n = n0 + tile_b_col(lane, i);
    TILE_B_AT(*b0, i) = bf16_to_f32(blk[ba_swz(n, k, width)]);
    TILE_B_AT(*b1, i) = bf16_to_f32(blk[ba_swz(n + 8, k, width)]);
  }
}
inline void ba_frag_t(__local const ushort *blk, int width, int kk, int n0, int lane, tile_b *b0, tile_b *b1)
{
  for (int i = 0; i < TILE_B_NE; i++) {
    const int k = 16 * kk + tile_b_row(lane, i), n = n0 + tile_b_col(lane, i);
    TILE_B_AT(*b0, i) = bf16_to_f32(blk[ba_swz(k, n, width)]);
    TILE_B_AT(*b1, i) = bf16_to_f32(blk[ba_swz(k, n + 8, width)]);
  }
}
#endif

/* Copies rows r0 .. r0 + n - 1 (n <= BA_BQ; the rest zero) of [a (wa columns) | b (wb
 * columns)] into the first block of a stage (rows BA_QROW wide) and of c (DV columns) into
 * the second (BA_OROW). a, b, c addressed as base + row * stride + column. */
inline void ba_issue(__local ushort *st, int r0, int n, __global const ushort *a, ulong ao, uint ats, int wa,
                     __global const ushort *b, ulong bo, uint bts, int wb, __global const ushort *c, ulong co,
                     uint cts, int lid)
{
  for (int e = lid; e < BA_BQ * (BA_QROW / 8); e += MT_WG) {
    const int r = e / (BA_QROW / 8), d = 8 * (e % (BA_QROW / 8));
    const ulong row = (ulong)(r0 + r);
    __global const ushort *src = a;
    int bytes = 0;
    if (r < n && d < wa) src = a + ao + row * ats + d, bytes = 16;
    else if (r < n && d < wa + wb) src = b + bo + row * bts + (d - wa), bytes = 16;
    tile_cp16(st + ba_swz(r, d, BA_QROW), src, bytes);
  }
  __local ushort *os = st + BA_BQ * BA_QROW;
  for (int e = lid; e < BA_BQ * (BA_OROW / 8); e += MT_WG) {
    const int r = e / (BA_OROW / 8), d = 8 * (e % (BA_OROW / 8));
    const int ok = r < n && d < DV;
    tile_cp16(os + ba_swz(r, d, BA_OROW), ok ? c + co + (ulong)(r0 + r) * cts + d : c, ok ? 16 : 0);
  }
}

/* dst[(m H + h) width + d] = bf16(src[so + m ts + h hs + d]) for m < M, h < H, d < width:
 * packed bf16 copies of fp32 operands (hs 0 and H 1 for the shared k_rope). */
__kernel void mla_tile_to_bf16(__global const float *src, ulong so, uint ts, uint hs, int width, int H, int M,
                               __global ushort *dst)
{
  const long i = (long)get_global_id(0);
  const long per = (long)width / 4, n = (long)M * H * per;
  if (i >= n) return;
  const long row = i / per, d = 4 * (i % per), m = row / H, h = row % H;
  const float4 f = vload4(0, src + so + (ulong)m * ts + (ulong)h * hs + (ulong)d);
  vstore4((ushort4)(f32_to_bf16(f.x), f32_to_bf16(f.y), f32_to_bf16(f.z), f32_to_bf16(f.w)), 0,
          dst + (ulong)row * width + (ulong)d);
}

/* D[i] = sum_j bf16(dO[i][j]) o[i][j] and dob[i][j] = bf16(dO[i][j]) over the rows (tokens x
 * heads) of [rows, DV]: dO rounded once, as both kernels read it. */
__kernel void mla_tile_bwd_prep(__global const out_t *o, ulong oo, __global const float *dout, ulong doo, int rows,
                                __global float *D, __global ushort *dob)
{
  const int i = (int)get_global_id(0);
  if (i >= rows) return;
  float s = 0.0f;
  for (int j = 0; j < DV; j++) {
    const ushort x = f32_to_bf16(dout[doo + (ulong)i * DV + j]);
    dob[(ulong)i * DV + j] = x;
    s += LOAD_OUT(o, oo + (ulong)i * DV + j) * bf16_to_f32(x);
  }
  D[i] = s;
}

#define MT_BWA_ARGS                                                                        \
  __global const ushort *q, ulong qo, uint q_ts, uint q_hs, __global const ushort *kn, ulong kno, \
      uint kn_ts, uint kn_hs, __global const ushort *kr, ulong kro, uint kr_ts,            \
      __global const ushort *v, ulong vo, uint v_ts, uint v_hs, __global const ushort *dob, \
      __global const float *lse, ulong lo, __global const float *Dd, __global const int4 *tiles, int ntiles, \
      int H, float sl2, float scale

__kernel __attribute__((reqd_work_group_size(MT_WG, 1, 1)))
void mla_tile_bwd_kv_async(MT_BWA_ARGS, __global float *dkn, ulong dkno, uint dkn_ts, uint dkn_hs, __global float *dv,
                           ulong dvo, uint dv_ts, uint dv_hs, __global float *dkr_part)
{
  __local uint4 sm4[MLA_TILE_U4(MLA_TILE_BWA_ELEMS(DQK, DV))];
  __local ushort *sm = (__local ushort *)sm4;
  __local float lq[2][BA_BQ], dd[2][BA_BQ];
#if !TILE_HAS_A_FROM_C /* P^T / dS^T through local memory */
  __local float scr[MT_NW * 256];
  __local float *pscr = scr + 256 * ((int)get_local_id(0) / 32);
#endif
  const int lid = (int)get_local_id(0), w = lid / 32, lane = lid % 32;
  const int4 tl = tiles[ntiles - 1 - (int)get_group_id(0)];
  const int h = (int)get_group_id(1);
  const int k0 = tl.y, krows = tl.z, send = tl.w, kw = k0 + 16 * w;
  const uint do_ts = (uint)(H * DV);
  const ulong qo_h = qo + (ulong)h * q_hs, doo_h = (ulong)h * DV;

  /* this warp's K and V rows as A fragments (in tile.cl's k order, as ldmatrix gives B) */
  mt_stage(sm, KLD, DQP, k0, krows, kn, kno + (ulong)h * kn_hs, kn_ts, DN, kr, kro, kr_ts, DR, lid);
  barrier(CLK_LOCAL_MEM_FENCE);
  tile_a kf[NKS], vf[NVS];
  MT_UNROLL
  for (int ks = 0; ks < NKS; ks++) kf[ks] = tile_load_a_bf16(sm + 16 * w * KLD + 16 * ks, KLD, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
  mt_stage(sm, OLD, DV, k0, krows, v, vo + (ulong)h * v_hs, v_ts, DV, v, 0, 0, 0, lid);
  barrier(CLK_LOCAL_MEM_FENCE);
  MT_UNROLL
  for (int ks = 0; ks < NVS; ks++) vf[ks] = tile_load_a_bf16(sm + 16 * w * OLD + 16 * ks, OLD, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
  tile_c dka[NKN], dva[NON];
  MT_UNROLL
  for (int j = 0; j < NKN; j++) dka[j] = tile_c_zero();
  MT_UNROLL
  for (int j = 0; j < NON; j++) dva[j] = tile_c_zero();

  const int nblocks = (send - k0 + BA_BQ - 1) / BA_BQ;
  for (int b = 0; b <= nblocks; b++) {
    if (b > 0) {
      TILE_CP_WAIT(0);
      barrier(CLK_LOCAL_MEM_FENCE); /* block b - 1 is in; everyone is done with block b - 2 */
    }
    if (b < nblocks) { /* issue block b */
      const int qb = k0 + b * BA_BQ, nq = min(BA_BQ, send - qb);
      ba_issue(sm + (b & 1) * BA_STAGE, qb, nq, q, qo_h, q_ts, DQK, q, 0, 0, 0, dob, doo_h, do_ts, lid);
      for (int i = lid; i < BA_BQ; i += MT_WG) {
        const ulong row = (ulong)(qb + i) * (ulong)H + (ulong)h;
        lq[b & 1][i] = i < nq ? lse[lo + row] * LOG2E : INFINITY; /* P = 0 for rows past the end */
        dd[b & 1][i] = i < nq ? Dd[row] : 0.0f;
      }
    }
    tile_cp_commit();
    if (b == 0) continue;
    const int cb = b - 1, qb = k0 + cb * BA_BQ;
    __local const ushort *qs = sm + (cb & 1) * BA_STAGE, *os = qs + BA_BQ * BA_QROW;
    __local const float *lqs = lq[cb & 1], *dds = dd[cb & 1];
    for (int sub = 0; sub < BA_BQ / 16; sub++) {
      const int q16 = qb + 16 * sub;
#if TILE_HAS_LANE_SHUFFLE && TILE_HAS_A_FROM_C /* (no barrier below with these) */
      if (q16 + 15 < kw) continue; /* every query precedes every key of this warp */
#endif
      tile_c st[2], dpt[2];
      st[0] = st[1] = dpt[0] = dpt[1] = tile_c_zero();
      MT_UNROLL
      for (int ks = 0; ks < NKS; ks++) {
        tile_b b0, b1;
        ba_frag_nt(qs, BA_QROW, 16 * sub, ks, lane, &b0, &b1);
        tile_mma(&st[0], kf[ks], b0);
        tile_mma(&st[1], kf[ks], b1);
      }
      MT_UNROLL
      for (int ks = 0; ks < NVS; ks++) {
        tile_b b0, b1;
        ba_frag_nt(os, BA_OROW, 16 * sub, ks, lane, &b0, &b1);
        tile_mma(&dpt[0], vf[ks], b0);
        tile_mma(&dpt[1], vf[ks], b1);
      }
      MT_UNROLL
      for (int n = 0; n < 2; n++) {
        MT_UNROLL
        for (int i = 0; i < TILE_C_NE; i++) {
          const int key = kw + tile_c_row(lane, i), ql = 16 * sub + 8 * n + tile_c_col(lane, i);
          const float p = key <= qb + ql ? exp2(TILE_C_AT(st[n], i) * sl2 - lqs[ql]) : 0.0f;
          TILE_C_AT(st[n], i) = p;
          TILE_C_AT(dpt[n], i) = p * (TILE_C_AT(dpt[n], i) - dds[ql]);
        }
      }
      const tile_a pa = MT_A_FROM_C(st[0], st[1], pscr, lane);
      MT_UNROLL
      for (int j = 0; j < NON; j += 2) {
        tile_b b0, b1;
        ba_frag_t(os, BA_OROW, sub, 8 * j, lane, &b0, &b1);
        tile_mma(&dva[j], pa, b0);
        tile_mma(&dva[j + 1], pa, b1);
      }
      const tile_a da = MT_A_FROM_C(dpt[0], dpt[1], pscr, lane);
      MT_UNROLL
      for (int j = 0; j < NKN; j += 2) {
        tile_b b0, b1;
        ba_frag_t(qs, BA_QROW, sub, 8 * j, lane, &b0, &b1);
        tile_mma(&dka[j], da, b0);
        tile_mma(&dka[j + 1], da, b1);
      }
    }
  }

  MT_UNROLL
  for (int i = 0; i < TILE_C_NE; i++) {
    const int r = 16 * w + tile_c_row(lane, i), key = k0 + r;
    if (r >= krows) continue;
    MT_UNROLL
    for (int j = 0; j < NON; j++) {
      const int col = 8 * j + tile_c_col(lane, i);
      if (col < DV) dv[dvo + (ulong)key * dv_ts + (ulong)h * dv_hs + col] = TILE_C_AT(dva[j], i);
    }
    MT_UNROLL
    for (int j = 0; j < NKN; j++) {
      const int col = 8 * j + tile_c_col(lane, i);
      const float x = TILE_C_AT(dka[j], i) * scale;
      if (col < DN) dkn[dkno + (ulong)key * dkn_ts + (ulong)h * dkn_hs + col] = x;
      else if (col < DQK) dkr_part[((ulong)key * (ulong)H + (ulong)h) * DR + (col - DN)] = x;
    }
  }
}

__kernel __attribute__((reqd_work_group_size(MT_WG, 1, 1)))
void mla_tile_bwd_q_async(MT_BWA_ARGS, __global float *dq, ulong dqo)
{
  __local uint4 sm4[MLA_TILE_U4(MLA_TILE_BWA_ELEMS(DQK, DV))];
  __local ushort *sm = (__local ushort *)sm4;
#if !TILE_HAS_A_FROM_C /* dS through local memory */
  __local float scr[MT_NW * 256];
  __local float *pscr = scr + 256 * ((int)get_local_id(0) / 32);
#endif
  const int lid = (int)get_local_id(0), w = lid / 32, lane = lid % 32, g = tile_c_row(lane, 0);
  const int4 tl = tiles[ntiles - 1 - (int)get_group_id(0)];
  const int h = (int)get_group_id(1);
  const int s0 = tl.x, t0 = tl.y, rows = tl.z, kend = t0 + rows;
  const int wq_last = t0 + 16 * w + 15;
  const ulong kno_h = kno + (ulong)h * kn_hs, vo_h = vo + (ulong)h * v_hs;

  /* this warp's Q and dO rows as A fragments; lse and D of its rows g and g + 8 */
  mt_stage(sm, KLD, DQP, t0, rows, q, qo + (ulong)h * q_hs, q_ts, DQK, q, 0, 0, 0, lid);
  barrier(CLK_LOCAL_MEM_FENCE);
  tile_a qf[NKS], of[NVS];
  MT_UNROLL
  for (int ks = 0; ks < NKS; ks++) qf[ks] = tile_load_a_bf16(sm + 16 * w * KLD + 16 * ks, KLD, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
  mt_stage(sm, OLD, DV, t0, rows, dob, (ulong)h * DV, (uint)(H * DV), DV, dob, 0, 0, 0, lid);
  barrier(CLK_LOCAL_MEM_FENCE);
  MT_UNROLL
  for (int ks = 0; ks < NVS; ks++) of[ks] = tile_load_a_bf16(sm + 16 * w * OLD + 16 * ks, OLD, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
  const int r0 = 16 * w + g, r1 = r0 + 8;
  const float lq0 = r0 < rows ? lse[lo + (ulong)(t0 + r0) * (ulong)H + (ulong)h] * LOG2E : INFINITY;
  const float lq1 = r1 < rows ? lse[lo + (ulong)(t0 + r1) * (ulong)H + (ulong)h] * LOG2E : INFINITY;
  const float d0 = r0 < rows ? Dd[(ulong)(t0 + r0) * (ulong)H + (ulong)h] : 0.0f;
  const float d1 = r1 < rows ? Dd[(ulong)(t0 + r1) * (ulong)H + (ulong)h] : 0.0f;
  tile_c dqa[NKN];
  MT_UNROLL
  for (int j = 0; j < NKN; j++) dqa[j] = tile_c_zero();

  const int nblocks = (kend - s0 + BA_BQ - 1) / BA_BQ;
  for (int b = 0; b <= nblocks; b++) {
    if (b > 0) {
      TILE_CP_WAIT(0);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (b < nblocks) {
      const int kb = s0 + b * BA_BQ;
      ba_issue(sm + (b & 1) * BA_STAGE, kb, min(BA_BQ, kend - kb), kn, kno_h, kn_ts, DN, kr, kro, kr_ts, DR, v, vo_h,
               v_ts, lid);
    }
    tile_cp_commit();
    if (b == 0) continue;
    const int kb = s0 + (b - 1) * BA_BQ;
    __local const ushort *ks_ = sm + ((b - 1) & 1) * BA_STAGE, *vs = ks_ + BA_BQ * BA_QROW;
    for (int sub = 0; sub < BA_BQ / 16; sub++) {
      const int k16 = kb + 16 * sub;
#if TILE_HAS_LANE_SHUFFLE && TILE_HAS_A_FROM_C /* (no barrier below with these) */
      if (k16 > wq_last) continue; /* every key follows every query of this warp */
#endif
      tile_c s[2], dp[2];
      s[0] = s[1] = dp[0] = dp[1] = tile_c_zero();
      MT_UNROLL
      for (int ks = 0; ks < NKS; ks++) {
        tile_b b0, b1;
        ba_frag_nt(ks_, BA_QROW, 16 * sub, ks, lane, &b0, &b1);
        tile_mma(&s[0], qf[ks], b0);
        tile_mma(&s[1], qf[ks], b1);
      }
      MT_UNROLL
      for (int ks = 0; ks < NVS; ks++) {
        tile_b b0, b1;
        ba_frag_nt(vs, BA_OROW, 16 * sub, ks, lane, &b0, &b1);
        tile_mma(&dp[0], of[ks], b0);
        tile_mma(&dp[1], of[ks], b1);
      }
      MT_UNROLL
      for (int n = 0; n < 2; n++) {
        MT_UNROLL
        for (int i = 0; i < TILE_C_NE; i++) {
          const int key = k16 + 8 * n + tile_c_col(lane, i), qp = t0 + (i < 2 ? r0 : r1);
          const float p = key <= qp ? exp2(TILE_C_AT(s[n], i) * sl2 - (i < 2 ? lq0 : lq1)) : 0.0f;
          TILE_C_AT(s[n], i) = p * (TILE_C_AT(dp[n], i) - (i < 2 ? d0 : d1));
        }
      }
      const tile_a da = MT_A_FROM_C(s[0], s[1], pscr, lane);
      MT_UNROLL
      for (int j = 0; j < NKN; j += 2) {
        tile_b b0, b1;
        ba_frag_t(ks_, BA_QROW, sub, 8 * j, lane, &b0, &b1);
        tile_mma(&dqa[j], da, b0);
        tile_mma(&dqa[j + 1], da, b1);
      }
    }
  }
  (void)wq_last;
  MT_UNROLL
  for (int i = 0; i < 4; i++) {
    const int r = i < 2 ? r0 : r1;
    if (r >= rows) continue;
    MT_UNROLL
    for (int j = 0; j < NKN; j++) {
      const int col = 8 * j + tile_c_col(lane, i);
      if (col < DQK) dq[dqo + ((ulong)(t0 + r) * (ulong)H + (ulong)h) * DQK + col] = TILE_C_AT(dqa[j], i) * scale;
    }
  }
}
