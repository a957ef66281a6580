/* kda_tc_bwd_ring.cl: the two head-parallel passes of the KDA backward on tiles fed by a
 * ring of asynchronous copies (issue 9), appended to kda_tc_bwd.cl in the program
 * ("tile+kda_common+kda_tc_bwd+kda_tc_bwd_ring"; lib/kda_tc_bwd.c takes them with
 * CLMOE_KDA_TCB_RING=1). Same products, same roundings as kda_tcb_fwd_save and
 * kda_tcb_state_bwd; what changes is how each chunk's factors reach local memory. There
 * they travel global -> registers -> bf16 local stores at the top of every chunk, which the
 * forward's analogue showed to be about half of such a pass (docs/benchmarks-kda-ring.md).
 * Here:
 *   kda_tcb_pack (token-parallel, one work-group per (chunk, head)) converts kda_prep's fp32
 *     W, Kd, gl, Qg, Aqk once into a bf16 block laid out as the passes' local tiles;
 *   the passes copy each block into a ring of TB_NS local stages TB_NS - 1 chunks ahead
 *   (cp.async on PTX, by one extra producer warp with TB_PROD; plain copies elsewhere), one
 *   work-group barrier per chunk; the exchanges of a warp's own S^T / Vnew^T scratch need
 *   only a warp barrier on PTX.
 * Built with -DTB_NS (2..4) and -DTB_PROD (0/1, PTX tiles only). The chunks' products are
 * kda_tc_bwd.cl's tcb_save_chunk and tcb_bwd_chunk, shared with the register-staged passes;
 * the next chunk's work-group barrier orders each warp's scratch writes before its reads. */
#ifndef TB_NS
#define TB_NS 3
#endif
#if !defined(TB_PROD) || !(defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX)
#undef TB_PROD
#define TB_PROD 0
#endif
#define TB_NWG (TB_NT + 32 * TB_PROD) /* work-group size of the ring passes */

/* A block (ushorts): W, Kd [16][TB_LDK] bf16, gl [KD] fp32, then Qg [16][TB_LDK] and Aqk
 * [16][TB_LDA] bf16 (the save pass copies the part before Qg). Padding is never read. */
#define TB_OK (CH * TB_LDK)
#define TB_OG (2 * CH * TB_LDK)
#define TB_OQ (TB_OG + 2 * KD)
#define TB_OA (TB_OQ + CH * TB_LDK)
#define TB_BLK (TB_OA + CH * TB_LDA)
#define TB_FWD4 (TB_OQ / 8) /* uint4 of a save-pass stage */
#define TB_BLK4 (TB_BLK / 8) /* uint4 of a reverse-pass stage */

#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
#if TB_NS == 2
#define TB_CP_WAIT() TILE_CP_WAIT(0)
#elif TB_NS == 3
#define TB_CP_WAIT() TILE_CP_WAIT(1)
#else
#define TB_CP_WAIT() TILE_CP_WAIT(2)
#endif
#else
#define TB_CP_WAIT() ((void)0)
#endif

__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void kda_tcb_pack(__global const float *Wg, __global const float *Kdg, __global const float *glg,
                  __global const float *Qgg, __global const float *Ag, int H, __global ushort *blkg)
{
  const int lid = (int)get_local_id(0);
  const ulong b = (ulong)get_group_id(0) * (ulong)H + (ulong)get_group_id(1);
  __global ushort *o = blkg + b * TB_BLK;
  for (int e = lid; e < CH * KD; e += 128) {
    const int at = (e / KD) * TB_LDK + e % KD;
    const ulong src = b * (CH * KD) + (ulong)e;
    o[at] = f32_to_bf16(Wg[src]);
    o[TB_OK + at] = f32_to_bf16(Kdg[src]);
    o[TB_OQ + at] = f32_to_bf16(Qgg[src]);
  }
  for (int d = lid; d < KD; d += 128) ((__global float *)(o + TB_OG))[d] = glg[b * KD + (ulong)d];
  for (int e = lid; e < CH * CH; e += 128) o[TB_OA + (e / CH) * TB_LDA + e % CH] = f32_to_bf16(Ag[b * (CH * CH) + (ulong)e]);
}

/* Copies n4 uint4 of block cc (when valid) into stage st, copier i of n; commits a group
 * either way (so the waits count the same everywhere). */
inline void tb_issue(__local uint4 *st, __global const uint4 *blkg, ulong cc, int H, int h, int valid,
                     int n4, int i, int n)
{
  if (valid) {
    __global const uint4 *src = blkg + ((ulong)cc * (ulong)H + (ulong)h) * TB_BLK4;
    for (int e = i; e < n4; e += n) tile_cp16(st + e, src + e, 16);
  }
  tile_cp_commit();
}

/* ---- kda_tcb_fwd_save_ring: kda_tcb_fwd_save's forward again, factors from the ring ---- */

__kernel __attribute__((reqd_work_group_size(TB_NWG, 1, 1)))
void kda_tcb_fwd_save_ring(__global const uint4 *blkg, __global const float *Ug, __global const int2 *seqs,
                           int H, __global const float *h0, ulong h0o, int has_h0,
                           __global ushort *Ssave, __global ushort *Vnsave)
{
  /* (lib/kda_tc_bwd.c counts these bytes) */
  __local uint4 ring[TB_NS][TB_FWD4];
  __local ushort St[TB_NW][8][TB_LDK] TB_AL; /* bf16 S^T of each computing warp's 8 columns */
  __local ushort Vt[TB_NW][8][TB_LDA] TB_AL; /* bf16 Vnew^T */
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int computes = TB_PROD ? warp < TB_NW : 1, cw = computes ? warp : 0;
  const int j0 = ((int)get_group_id(0) * TB_NW + cw) * 8; /* this warp's V columns */
  const int g = lane >> 2, t2 = (lane & 3) << 1;
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD;
  __local ushort *st = &St[cw][0][0], *vt = &Vt[cw][0][0];
  const int copier = TB_PROD ? !computes : 1, ci0 = TB_PROD ? lane : lid, cn = TB_PROD ? 32 : TB_NT;

  tile_c S[TB_NMT]; /* S [K, 8]: rows 16 m .. 16 m + 15 */
  TB_UNROLL
  for (int m = 0; m < TB_NMT; m++)
    for (int i = 0; i < 4; i++) {
      const int row = 16 * m + tile_c_row(lane, i), col = tile_c_col(lane, i);
      S[m].v[i] = (has_h0 & computes) ? h0[h0o + (sbase + row) * VD + j0 + col] : 0.0f;
      if (computes) st[col * TB_LDK + row] = f32_to_bf16(S[m].v[i]);
    }
  const int2 sq = seqs[n];
  if (copier)
    for (int p = 0; p < TB_NS - 1; p++)
      tb_issue(ring[p], blkg, (ulong)(sq.x + p), H, h, p < sq.y, TB_FWD4, ci0, cn);
  float2 pu0 = (float2)(0.0f), pu1 = (float2)(0.0f); /* U at (g, 2t..), (g + 8, 2t..) */
  if ((sq.y > 0) & computes) {
    pu0 = vload2(0, Ug + ((ulong)sq.x * (ulong)H * CH + (ulong)h * CH + g) * VD + j0 + t2);
    pu1 = vload2(0, Ug + ((ulong)sq.x * (ulong)H * CH + (ulong)h * CH + g + 8) * VD + j0 + t2);
  }
  for (int ci = 0, s = 0; ci < sq.y; ci++) {
    const ulong base = (ulong)(sq.x + ci) * (ulong)H + (ulong)h;
    if (copier) TB_CP_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE); /* chunk ci in stage s; every warp done with chunk ci - 1 */
    if (copier)
      tb_issue(ring[s == 0 ? TB_NS - 1 : s - 1], blkg, (ulong)(sq.x + ci + TB_NS - 1), H, h,
               ci + TB_NS - 1 < sq.y, TB_FWD4, ci0, cn);
    if (computes) {
      __local const ushort *Wl = (__local const ushort *)ring[s], *Kl = Wl + TB_OK;
      __local const float *gl = (__local const float *)(Wl + TB_OG);
      const float2 u0 = pu0, u1 = pu1;
      if (ci + 1 < sq.y) {
        const ulong nb = (base + (ulong)H) * CH;
        pu0 = vload2(0, Ug + (nb + g) * VD + j0 + t2);
        pu1 = vload2(0, Ug + (nb + g + 8) * VD + j0 + t2);
      }
      TB_UNROLL
      for (int m = 0; m < TB_NMT; m++) tb_store_c_bf16(S[m], Ssave + (base * KD + 16 * m) * VD + j0, VD, lane);
      tcb_save_chunk(S, u0, u1, Wl, Kl, gl, st, vt, Vnsave + base * CH * VD + j0, lane, 1);
    }
    s = s == TB_NS - 1 ? 0 : s + 1;
  }
}

/* ---- kda_tcb_state_bwd_ring: kda_tcb_state_bwd, factors from the ring ---------------------- */

__kernel __attribute__((reqd_work_group_size(TB_NWG, 1, 1)))
void kda_tcb_state_bwd_ring(__global const uint4 *blkg, __global const int2 *chunks, __global const int2 *seqs,
                            int H, __global const float *dout, ulong doo, __global const float *dht,
                            ulong dhto, int has_dht, __global float *dUg, __global ushort *dSsave,
                            __global float *dh0, ulong dh0o, int has_dh0)
{
  /* (lib/kda_tc_bwd.c counts these bytes) */
  __local uint4 ring[TB_NS][TB_BLK4];
  __local ushort dSt[TB_NW][8][TB_LDK] TB_AL; /* bf16 dS^T of each computing warp's 8 columns */
  __local ushort dOt[TB_NW][8][TB_LDA] TB_AL; /* bf16 dO^T */
  __local ushort dVt[TB_NW][8][TB_LDA] TB_AL; /* bf16 -dVnew^T */
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int computes = TB_PROD ? warp < TB_NW : 1, cw = computes ? warp : 0;
  const int j0 = ((int)get_group_id(0) * TB_NW + cw) * 8;
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD;
  __local ushort *dst = &dSt[cw][0][0], *dot = &dOt[cw][0][0], *dvt = &dVt[cw][0][0];
  const int copier = TB_PROD ? !computes : 1, ci0 = TB_PROD ? lane : lid, cn = TB_PROD ? 32 : TB_NT;

  tile_c dS[TB_NMT]; /* dS [K, 8], fp32 */
  TB_UNROLL
  for (int m = 0; m < TB_NMT; m++)
    for (int i = 0; i < 4; i++) {
      const int row = 16 * m + tile_c_row(lane, i), col = tile_c_col(lane, i);
      dS[m].v[i] = (has_dht & computes) ? dht[dhto + (sbase + row) * VD + j0 + col] : 0.0f;
      if (computes) dst[col * TB_LDK + row] = f32_to_bf16(dS[m].v[i]);
    }
  const int2 sq = seqs[n];
  const int last = sq.x + sq.y - 1; /* chunks in reverse: the p-th is last - p */
  if (copier)
    for (int p = 0; p < TB_NS - 1; p++)
      tb_issue(ring[p], blkg, (ulong)(last - p), H, h, p < sq.y, TB_BLK4, ci0, cn);
  float pd[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* dO at rows lane / 8 + 4 i, column lane % 8 */
#define TB_FETCH_DO(cc)                                                                     \
  do {                                                                                      \
    const int2 ch_ = chunks[cc];                                                            \
    for (int i_ = 0; i_ < 4; i_++) {                                                        \
      const int row_ = (lane >> 3) + 4 * i_;                                                \
      pd[i_] = row_ < ch_.y ? dout[doo + ((ulong)(ch_.x + row_) * (ulong)H + (ulong)h) * VD + j0 + (lane & 7)] \
                            : 0.0f;                                                         \
    }                                                                                       \
  } while (0)
  if ((sq.y > 0) & computes) TB_FETCH_DO(last);
  for (int p = 0, s = 0; p < sq.y; p++) {
    const int c = last - p;
    const ulong base = (ulong)c * (ulong)H + (ulong)h;
    if (copier) TB_CP_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE); /* chunk c in stage s; every warp done with the previous */
    if (copier)
      tb_issue(ring[s == 0 ? TB_NS - 1 : s - 1], blkg, (ulong)(last - p - TB_NS + 1), H, h,
               p + TB_NS - 1 < sq.y, TB_BLK4, ci0, cn);
    if (computes) {
      __local const ushort *Wl = (__local const ushort *)ring[s], *Kl = Wl + TB_OK;
      __local const ushort *Ql = Wl + TB_OQ, *Al = Wl + TB_OA;
      __local const float *gl = (__local const float *)(Wl + TB_OG);
      for (int i = 0; i < 4; i++) dot[(lane & 7) * TB_LDA + (lane >> 3) + 4 * i] = f32_to_bf16(pd[i]);
      if (p + 1 < sq.y) TB_FETCH_DO(c - 1);
      TB_UNROLL
      for (int m = 0; m < TB_NMT; m++) /* dS after this chunk, for kda_tcb_inter */
        tb_store_c_bf16(dS[m], dSsave + (base * KD + 16 * m) * VD + j0, VD, lane);
      TILE_WARP_SYNC(); /* dO^T complete */
      tcb_bwd_chunk(dS, Wl, Ql, Kl, Al, gl, dst, dot, dvt, dUg + base * CH * VD + j0, lane, 1);
    }
    s = s == TB_NS - 1 ? 0 : s + 1;
  }
#undef TB_FETCH_DO
  if (has_dh0 & computes) {
    TB_UNROLL
    for (int m = 0; m < TB_NMT; m++)
      for (int i = 0; i < 4; i++)
        dh0[dh0o + (sbase + 16 * m + tile_c_row(lane, i)) * VD + j0 + tile_c_col(lane, i)] = dS[m].v[i];
  }
}
