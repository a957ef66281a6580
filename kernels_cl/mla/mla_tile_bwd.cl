/* mla_tile_bwd.cl: MLA attention backward on the tile interface, built as the family
 * "tile+mla_layout+mla+mla_tile+mla_tile_bwd" with -DMT_BWD=1 -DMT_BQ=64 (4 warps) and
 * mla_tile.cl's other options; mla_tile.cl supplies the staging, the fragment loads and
 * MT_A_FROM_C.
 *
 * With P = exp2(scale log2(e) q.k - lse log2(e)) recomputed from the forward's lse, D_i =
 * dO_i . o_i (mla_tile_bwd_dot) and dS = P (dP - D), dP = dO V^T:
 *   dV_j = sum_i P_ij dO_i,  dK_j = scale sum_i dS_ij q_i,  dQ_i = scale sum_j dS_ij k_j.
 * Products on tile_mma with bf16 operands (q, k, v, dO, P, dS), fp32 accumulators.
 *
 * mla_tile_bwd_kv: one work-group per (64 keys of one sequence, head), warp w owning keys
 *   16 w .. 16 w + 15, their K [16 x DQK] and V [16 x DV] as A fragments in registers. The
 *   loop runs over query blocks of 64 from the keys' block to the sequence's end (Q and dO
 *   staged in local memory, bf16), 16 queries at a time per warp: S^T = K Q^T and
 *   dP^T = V dO^T (8 x 2 accumulator tiles), P^T and dS^T in place, then dV += P^T dO and
 *   dK += dS^T Q with P^T, dS^T as A operands straight from the accumulators. Each key's
 *   gradient belongs to one warp (no atomics); the shared k_rope part of dK goes per head
 *   to [tokens, H, DR] for mla_krope_reduce (mla_bwd.cl).
 * mla_tile_bwd_q: one work-group per (64 queries, head), warp w owning 16 queries, Q and dO
 *   as A fragments in registers; key blocks of 64 from the sequence's start to the
 *   diagonal (K and V staged row-major), 16 keys at a time: S = Q K^T, dP = dO V^T, dS,
 *   dQ += dS K. */
#if !defined(MT_BWD) || MT_BQ != 64
#error "build with -DMT_BWD=1 -DMT_BQ=64"
#endif
#define DVK MLA_TILE_DVK(DV)               /* DV padded to whole k-steps (V, dO as A) */
#define NVS (DVK / 16)
#define OLD MLA_TILE_LD(DVK)               /* local row stride of V / dO (as KLD) */
#define NKN (DQP / 8)                      /* 8-column tiles of dK, dQ */

/* dst[c][d] = bf16(a[(row0 + c) ts + d]) for c < nrows, d < wa; zero elsewhere (d < width). */
inline void mt_stage_f32(__local ushort *dst, int ld, int width, int row0, int nrows, __global const float *a,
                         ulong ao, uint ats, int wa, int lid)
{
#if MT_VEC
  const int w4 = width / 4;
  for (int e = lid; e < MT_BK * w4; e += MT_WG) {
    const int c = e / w4, d = 4 * (e % w4);
    uint2 x = (uint2)(0u, 0u);
    if (c < nrows && d < wa) {
      const float4 f = *(__global const float4 *)(a + ao + (ulong)(row0 + c) * ats + d);
      x = (uint2)((uint)f32_to_bf16(f.x) | ((uint)f32_to_bf16(f.y) << 16),
                  (uint)f32_to_bf16(f.z) | ((uint)f32_to_bf16(f.w) << 16));
    }
    *(__local uint2 *)(dst + c * ld + d) = x;
  }
#else
  for (int e = lid; e < MT_BK * width; e += MT_WG) {
    const int c = e / width, d = e % width;
    dst[c * ld + d] = c < nrows && d < wa ? f32_to_bf16(a[ao + (ulong)(row0 + c) * ats + d]) : (ushort)0;
  }
#endif
}

/* D[i] = sum_j bf16(dO[i][j]) o[i][j] over the tokens x heads rows ([rows, DV]): dO rounded
 * as the kernels below see it, so dP - D does not cancel to dO's rounding error. */
__kernel void mla_tile_bwd_dot(__global const out_t *o, ulong oo, __global const float *dout, ulong doo, int rows,
                             __global float *D)
{
  const int i = (int)get_global_id(0);
  if (i >= rows) return;
  float s = 0.0f;
  for (int j = 0; j < DV; j++)
    s += LOAD_OUT(o, oo + (ulong)i * DV + j) * bf16_to_f32(f32_to_bf16(dout[doo + (ulong)i * DV + j]));
  D[i] = s;
}

#define MT_BWD_ARGS                                                                        \
  __global const store_t *q, ulong qo, uint q_ts, uint q_hs, __global const store_t *kn, ulong kno, \
      uint kn_ts, uint kn_hs, __global const store_t *kr, ulong kro, uint kr_ts,           \
      __global const store_t *v, ulong vo, uint v_ts, uint v_hs, __global const float *dout, ulong doo, \
      __global const float *lse, ulong lo, __global const float *Dd, __global const int4 *tiles, int ntiles, \
      int H, float sl2, float scale

__kernel __attribute__((reqd_work_group_size(MT_WG, 1, 1)))
void mla_tile_bwd_kv(MT_BWD_ARGS, __global float *dkn, ulong dkno, uint dkn_ts, uint dkn_hs, __global float *dv,
                   ulong dvo, uint dv_ts, uint dv_hs, __global float *dkr_part)
{
  __local uint4 Qs4[MLA_TILE_U4(MT_BK * KLD)], Ds4[MLA_TILE_U4(MT_BK * OLD)];
  __local ushort *Qs = (__local ushort *)Qs4, *Ds = (__local ushort *)Ds4;
  __local float lq[MT_BK], dd[MT_BK];
#if !TILE_HAS_A_FROM_C /* P^T / dS^T through local memory */
  __local float scr[MT_NW * 256];
  __local float *pscr = scr + 256 * ((int)get_local_id(0) / 32);
#endif
  const int lid = (int)get_local_id(0), w = lid / 32, lane = lid % 32;
  const int4 tl = tiles[ntiles - 1 - (int)get_group_id(0)];
  const int h = (int)get_group_id(1);
  const int k0 = tl.y, krows = tl.z, send = tl.w, kw = k0 + 16 * w;

  /* this warp's K and V rows as A fragments (staged through Qs and Ds) */
  mt_stage(Qs, KLD, DQP, k0, krows, kn, kno + (ulong)h * kn_hs, kn_ts, DN, kr, kro, kr_ts, DR, lid);
  mt_stage(Ds, OLD, DVK, k0, krows, v, vo + (ulong)h * v_hs, v_ts, DV, v, 0, 0, 0, lid);
  barrier(CLK_LOCAL_MEM_FENCE);
  tile_a kf[NKS], vf[NVS];
  MT_UNROLL
  for (int ks = 0; ks < NKS; ks++) kf[ks] = mt_load_a_ld(Qs + 16 * w * KLD + 16 * ks, KLD, lane);
  MT_UNROLL
  for (int ks = 0; ks < NVS; ks++) vf[ks] = mt_load_a_ld(Ds + 16 * w * OLD + 16 * ks, OLD, lane);
  tile_c dka[NKN], dva[NON];
  MT_UNROLL
  for (int j = 0; j < NKN; j++) dka[j] = tile_c_zero();
  MT_UNROLL
  for (int j = 0; j < NON; j++) dva[j] = tile_c_zero();

  for (int qb = k0; qb < send; qb += MT_BK) {
    const int nq = min(MT_BK, send - qb);
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous block (or the K, V staging) is read */
    mt_stage(Qs, KLD, DQP, qb, nq, q, qo + (ulong)h * q_hs, q_ts, DQK, q, 0, 0, 0, lid);
    mt_stage_f32(Ds, OLD, DVK, qb, nq, dout, doo + (ulong)h * DV, (uint)(H * DV), DV, lid);
    for (int i = lid; i < MT_BK; i += MT_WG) {
      const ulong row = (ulong)(qb + i) * (ulong)H + (ulong)h;
      lq[i] = i < nq ? lse[lo + row] * LOG2E : INFINITY; /* P = 0 for rows past the end */
      dd[i] = i < nq ? Dd[row] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int sub = 0; sub < MT_BK / 16; sub++) {
      const int qs = qb + 16 * sub;
#if TILE_HAS_LANE_SHUFFLE && TILE_HAS_A_FROM_C /* (no barrier below with these) */
      if (qs + 15 < kw) continue; /* every query precedes every key of this warp */
#endif
      tile_c st[2], dpt[2];
      st[0] = st[1] = dpt[0] = dpt[1] = tile_c_zero();
      MT_UNROLL
      for (int ks = 0; ks < NKS; ks++) {
        tile_mma(&st[0], kf[ks], mt_load_bt_ld(Qs + (16 * sub) * KLD + 16 * ks, KLD, lane));
        tile_mma(&st[1], kf[ks], mt_load_bt_ld(Qs + (16 * sub + 8) * KLD + 16 * ks, KLD, lane));
      }
      MT_UNROLL
      for (int ks = 0; ks < NVS; ks++) {
        tile_mma(&dpt[0], vf[ks], mt_load_bt_ld(Ds + (16 * sub) * OLD + 16 * ks, OLD, lane));
        tile_mma(&dpt[1], vf[ks], mt_load_bt_ld(Ds + (16 * sub + 8) * OLD + 16 * ks, OLD, lane));
      }
      MT_UNROLL
      for (int n = 0; n < 2; n++) {
        MT_UNROLL
        for (int i = 0; i < TILE_C_NE; i++) {
          const int key = kw + tile_c_row(lane, i), ql = 16 * sub + 8 * n + tile_c_col(lane, i);
          const float p = key <= qb + ql ? exp2(TILE_C_AT(st[n], i) * sl2 - lq[ql]) : 0.0f;
          TILE_C_AT(st[n], i) = p;
          TILE_C_AT(dpt[n], i) = p * (TILE_C_AT(dpt[n], i) - dd[ql]);
        }
      }
      const tile_a pa = MT_A_FROM_C(st[0], st[1], pscr, lane);
      MT_UNROLL
      for (int j = 0; j < NON; j++) tile_mma(&dva[j], pa, tile_load_b_bf16(Ds + 16 * sub * OLD + 8 * j, OLD, lane));
      const tile_a da = MT_A_FROM_C(dpt[0], dpt[1], pscr, lane);
      MT_UNROLL
      for (int j = 0; j < NKN; j++) tile_mma(&dka[j], da, tile_load_b_bf16(Qs + 16 * sub * KLD + 8 * j, KLD, lane));
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
void mla_tile_bwd_q(MT_BWD_ARGS, __global float *dq, ulong dqo)
{
  __local uint4 Ks4[MLA_TILE_U4(MT_BK * KLD)], Vs4[MLA_TILE_U4(MT_BK * OLD)];
  __local ushort *Ks = (__local ushort *)Ks4, *Vs = (__local ushort *)Vs4;
#if !TILE_HAS_A_FROM_C /* P^T / dS^T through local memory */
  __local float scr[MT_NW * 256];
  __local float *pscr = scr + 256 * ((int)get_local_id(0) / 32);
#endif
  const int lid = (int)get_local_id(0), w = lid / 32, lane = lid % 32, g = tile_c_row(lane, 0);
  const int4 tl = tiles[ntiles - 1 - (int)get_group_id(0)];
  const int h = (int)get_group_id(1);
  const int s0 = tl.x, t0 = tl.y, rows = tl.z, kend = t0 + rows;
  const int wq_last = t0 + 16 * w + 15;

  /* this warp's Q and dO rows as A fragments; lse and D of its rows g and g + 8 */
  mt_stage(Ks, KLD, DQP, t0, rows, q, qo + (ulong)h * q_hs, q_ts, DQK, q, 0, 0, 0, lid);
  mt_stage_f32(Vs, OLD, DVK, t0, rows, dout, doo + (ulong)h * DV, (uint)(H * DV), DV, lid);
  barrier(CLK_LOCAL_MEM_FENCE);
  tile_a qf[NKS], of[NVS];
  MT_UNROLL
  for (int ks = 0; ks < NKS; ks++) qf[ks] = mt_load_a_ld(Ks + 16 * w * KLD + 16 * ks, KLD, lane);
  MT_UNROLL
  for (int ks = 0; ks < NVS; ks++) of[ks] = mt_load_a_ld(Vs + 16 * w * OLD + 16 * ks, OLD, lane);
  const int r0 = 16 * w + g, r1 = r0 + 8;
  const float lq0 = r0 < rows ? lse[lo + (ulong)(t0 + r0) * (ulong)H + (ulong)h] * LOG2E : INFINITY;
  const float lq1 = r1 < rows ? lse[lo + (ulong)(t0 + r1) * (ulong)H + (ulong)h] * LOG2E : INFINITY;
  const float d0 = r0 < rows ? Dd[(ulong)(t0 + r0) * (ulong)H + (ulong)h] : 0.0f;
  const float d1 = r1 < rows ? Dd[(ulong)(t0 + r1) * (ulong)H + (ulong)h] : 0.0f;
  tile_c dqa[NKN];
  MT_UNROLL
  for (int j = 0; j < NKN; j++) dqa[j] = tile_c_zero();

  for (int kb = s0; kb < kend; kb += MT_BK) {
    const int nk = min(MT_BK, kend - kb);
    barrier(CLK_LOCAL_MEM_FENCE);
    mt_stage(Ks, KLD, DQP, kb, nk, kn, kno + (ulong)h * kn_hs, kn_ts, DN, kr, kro, kr_ts, DR, lid);
    mt_stage(Vs, OLD, DVK, kb, nk, v, vo + (ulong)h * v_hs, v_ts, DV, v, 0, 0, 0, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int sub = 0; sub < MT_BK / 16; sub++) {
      const int ks0 = kb + 16 * sub;
#if TILE_HAS_LANE_SHUFFLE && TILE_HAS_A_FROM_C /* (no barrier below with these) */
      if (ks0 > wq_last) continue; /* every key follows every query of this warp */
#endif
      tile_c s[2], dp[2];
      s[0] = s[1] = dp[0] = dp[1] = tile_c_zero();
      MT_UNROLL
      for (int ks = 0; ks < NKS; ks++) {
        tile_mma(&s[0], qf[ks], mt_load_bt_ld(Ks + (16 * sub) * KLD + 16 * ks, KLD, lane));
        tile_mma(&s[1], qf[ks], mt_load_bt_ld(Ks + (16 * sub + 8) * KLD + 16 * ks, KLD, lane));
      }
      MT_UNROLL
      for (int ks = 0; ks < NVS; ks++) {
        tile_mma(&dp[0], of[ks], mt_load_bt_ld(Vs + (16 * sub) * OLD + 16 * ks, OLD, lane));
        tile_mma(&dp[1], of[ks], mt_load_bt_ld(Vs + (16 * sub + 8) * OLD + 16 * ks, OLD, lane));
      }
      MT_UNROLL
      for (int n = 0; n < 2; n++) {
        MT_UNROLL
        for (int i = 0; i < TILE_C_NE; i++) {
          const int key = ks0 + 8 * n + tile_c_col(lane, i), qp = t0 + (i < 2 ? r0 : r1);
          const float p = key <= qp ? exp2(TILE_C_AT(s[n], i) * sl2 - (i < 2 ? lq0 : lq1)) : 0.0f;
          TILE_C_AT(s[n], i) = p * (TILE_C_AT(dp[n], i) - (i < 2 ? d0 : d1));
        }
      }
      const tile_a da = MT_A_FROM_C(s[0], s[1], pscr, lane);
      MT_UNROLL
      for (int j = 0; j < NKN; j++) tile_mma(&dqa[j], da, tile_load_b_bf16(Ks + 16 * sub * KLD + 8 * j, KLD, lane));
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
