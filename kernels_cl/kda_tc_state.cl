/* kda_tc_state.cl: the 64-token state pass of the KDA forward on tiles (TC_STEP 64),
 * appended to kda_tc.cl in the program ("tile+kda_common+kda_tc+kda_tc_state"), whose prep
 * writes the blocks it reads (fragment order, -W, U^T: TC_IW in kda_tc.cl).
 *
 * kda_tc_state, head-parallel (work-group: TC_NW warps of one (sequence, head), each warp
 * owning 16 columns of V, no data shared between the warps). The state is kept transposed,
 * S^T [16 V columns x KD], as KD / 8 fp32 accumulator tiles per lane, so that every product
 * takes S^T or Vnew^T as its A operand straight from accumulators (two tiles packed to bf16
 * pairs: tile_a_from_c's trick, no memory) and the chunk's factors as B operands loaded
 * from global memory in fragment order (one uint2 per lane per fragment, cached in L1 and
 * shared there by the warps of a work-group). Per 16-token chunk, with its anchored
 * factors from the prep (the same products as TC_STEP 16, so the same numerics):
 *   Vnew^T = U^T + S^T (-W)^T                     (KD / 16 k-steps, 2 token tiles, 2 chains)
 *   O^T    = S^T Qg^T + Vnew^T Aqk^T              (causal and scaled in Aqk)
 *   S^T    = S^T Diag(gl) + Vnew^T Kd             (KD / 8 column tiles)
 * The chunks go in 64-token steps (four chunks unrolled per step) with the next chunk's
 * factors prefetched into L1 and the fourth next into L2: no barrier, no local memory under
 * PTX, the serial path per chunk being the W S chain, one bf16 packing of Vnew and one
 * product deep S update. The portable tiles cannot exchange fragments between lanes without
 * memory: there S^T and Vnew^T go through a per-warp local scratch (2 barriers a chunk). */
#if TC_STEP == 64

#define TC_NKS (KD / 16) /* k-steps over the key dimension */
#define TC_NKT (KD / 8)  /* 8-column tiles of S^T */
#define TC_FRAG 128      /* ushorts of one B fragment */
#define TC_NT (32 * TC_NW)
#define TC_LDS (KD + 4)  /* fp32 row of the portable S^T scratch */
#ifndef TC_PF
#define TC_PF 1          /* chunks ahead of the L1 prefetch (1 or 2) */
#endif
#define TC_PF2 4         /* chunks ahead of the L2 prefetch */

#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
#define TC_UNROLL _Pragma("unroll")
/* The B fragment at f (TC_FRAG ushorts, 8-byte aligned): this lane's uint2. */
inline tile_b tc_frag(__global const ushort *f, int lane)
{
  const uint2 u = ((__global const uint2 *)f)[lane];
  tile_b b;
  b.r[0] = u.x;
  b.r[1] = u.y;
  return b;
}
/* Two fp32 as a bf16 pair (lo in the low half), nearest even, one instruction. */
inline uint tc_cvt2(float lo, float hi)
{
  uint r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/* [c0 | c1] as an A operand (tile_a_from_c with packed conversions). */
inline tile_a tc_a_pair(tile_c c0, tile_c c1)
{
  tile_a a;
  a.r[0] = tc_cvt2(c0.v[0], c0.v[1]);
  a.r[1] = tc_cvt2(c0.v[2], c0.v[3]);
  a.r[2] = tc_cvt2(c1.v[0], c1.v[1]);
  a.r[3] = tc_cvt2(c1.v[2], c1.v[3]);
  return a;
}
/* The lines of [p, p + bytes) into L1 (l1) or L2, lanes 0..n - 1 of `n` taking every n-th
 * line: a hint, no registers, no fault. */
inline void tc_prefetch(__global const void *p, int bytes, int l1, int i, int n)
{
  const ulong a = (ulong)p;
  for (int off = i * 128; off < bytes; off += n * 128) {
    if (l1) asm volatile("prefetch.global.L1 [%0];" ::"l"(a + (ulong)off));
    else asm volatile("prefetch.global.L2 [%0];" ::"l"(a + (ulong)off));
  }
}
#define TC_A_S(ks) tc_a_pair(S[2 * (ks)], S[2 * (ks) + 1])
#else
/* Portable: rolled loops (PoCL compiles the unrolled portable tiles slowly). */
#define TC_UNROLL _Pragma("unroll 1")
inline tile_b tc_frag(__global const ushort *f, int lane)
{
  const int n = (lane & 3) << 1;
  tile_b b;
  TC_UNROLL
  for (int k = 0; k < 16; k++) {
    b.c[0][k] = bf16_to_f32(f[TC_FO(k, n)]);
    b.c[1][k] = bf16_to_f32(f[TC_FO(k, n + 1)]);
  }
  return b;
}
#define TC_A_S(ks) tile_load_a_f32(sS + 16 * (ks), TC_LDS, lane)
#endif

/* One 16-token chunk ch of this warp's 16 V columns j0..: S^T in S [TC_NKT] (fp32), the
 * chunk's block at blk, its U^T rows of these columns at ut ([16 columns][16 rows] fp32).
 * sS [16][TC_LDS], sV [16][16]: the warp's scratch (portable tiles only). Every work-item
 * calls it (portable: it holds barriers). */
__attribute__((always_inline)) inline void
tc_chunk64(tile_c *S, __global const ushort *blk, __global const float *ut, int2 ch, int h,
           int H, int j0, int lane, __global out_t *o, ulong oo, __local float *sS,
           __local float *sV)
{
  const int g = lane >> 2, t2 = (lane & 3) << 1;
  /* Partial sums [chain][Vnew^T token tiles 0, 1, O^T token tiles 0, 1]: two chains over
   * the k-steps for latency, the first starting from U^T. */
  tile_c acc[2][4];
  for (int j = 0; j < 4; j++) {
    acc[0][j] = tile_c_zero();
    acc[1][j] = tile_c_zero();
  }
  for (int nt = 0; nt < 2; nt++) {
    const float2 a = vload2(0, ut + g * CH + 8 * nt + t2), b = vload2(0, ut + (g + 8) * CH + 8 * nt + t2);
    acc[0][nt].v[0] = a.x, acc[0][nt].v[1] = a.y, acc[0][nt].v[2] = b.x, acc[0][nt].v[3] = b.y;
  }
#if !(defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX)
  for (int nt = 0; nt < TC_NKT; nt++) tile_store_c_local(S[nt], sS + 8 * nt, TC_LDS, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
  /* Vnew^T = U^T + S^T (-W)^T and S^T Qg^T: A = S^T [16 x 16] of k-step ks. */
  TC_UNROLL
  for (int ks = 0; ks < TC_NKS; ks++) {
    const tile_a a = TC_A_S(ks);
    TC_UNROLL
    for (int j = 0; j < 4; j++) /* fragment (token tile j % 2, ks) of -W^T, then of Qg^T */
      tile_mma(&acc[ks & 1][j], a, tc_frag(blk + (j >> 1) * 16 * KD + ((j & 1) * TC_NKS + ks) * TC_FRAG, lane));
  }
  tile_c vn[2], oc[2];
  for (int nt = 0; nt < 2; nt++)
    for (int i = 0; i < 4; i++) {
      vn[nt].v[i] = acc[0][nt].v[i] + acc[1][nt].v[i];
      oc[nt].v[i] = acc[0][2 + nt].v[i] + acc[1][2 + nt].v[i];
    }
#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
  const tile_a av = tc_a_pair(vn[0], vn[1]); /* Vnew^T [16 columns x 16 tokens] */
#else
  tile_store_c_local(vn[0], sV, CH, lane);
  tile_store_c_local(vn[1], sV + 8, CH, lane);
  barrier(CLK_LOCAL_MEM_FENCE);
  const tile_a av = tile_load_a_f32(sV, CH, lane);
#endif
  /* S^T = S^T Diag(gl) + Vnew^T Kd (first: the next chunk waits on it) */
  __global const float *gl = (__global const float *)(blk + 48 * KD + 256);
  TC_UNROLL
  for (int nt = 0; nt < TC_NKT; nt++) {
    const float2 d = vload2(0, gl + 8 * nt + t2);
    S[nt].v[0] *= d.x;
    S[nt].v[1] *= d.y;
    S[nt].v[2] *= d.x;
    S[nt].v[3] *= d.y;
    tile_mma(&S[nt], av, tc_frag(blk + 32 * KD + nt * TC_FRAG, lane));
  }
  /* O^T += Vnew^T Aqk^T; o [tokens, H, VD] at (token 8 nt + col, column j0 + row). */
  for (int nt = 0; nt < 2; nt++) {
    tile_mma(&oc[nt], av, tc_frag(blk + 48 * KD + nt * TC_FRAG, lane));
    for (int i = 0; i < 4; i++) {
      const int tok = 8 * nt + tile_c_col(lane, i);
      if (tok < ch.y)
        STORE_OUT(o, oo + ((ulong)(ch.x + tok) * (ulong)H + (ulong)h) * VD + j0 + tile_c_row(lane, i), oc[nt].v[i]);
    }
  }
}

/* Chunk cc (absolute index) of the sequence: its block and this warp's U^T rows. */
#define TC_BLKP(cc) (blkg + ((ulong)(cc) * (ulong)H + (ulong)h) * TC_BLK)
#define TC_UTP(cc) (Ug + ((ulong)(cc) * (ulong)H + (ulong)h) * (CH * VD) + (ulong)j0 * CH)
#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
/* Hints for chunk cc (< end): the block split over the work-group, U^T by its warp. */
#define TC_HINT(cc, end, l1)                                                                \
  do {                                                                                      \
    if ((cc) < (end)) {                                                                     \
      tc_prefetch(TC_BLKP(cc), TC_BLK * 2, l1, lid, TC_NT);                                 \
      tc_prefetch(TC_UTP(cc), 16 * CH * 4, l1, lane, 32);                                   \
    }                                                                                       \
  } while (0)
#else
#define TC_HINT(cc, end, l1) ((void)0)
#endif
#define TC_STEP_CHUNK(cc)                                                                   \
  do {                                                                                      \
    TC_HINT((cc) + TC_PF, end, 1);                                                          \
    TC_HINT((cc) + TC_PF2, end, 0);                                                         \
    tc_chunk64(S, TC_BLKP(cc), TC_UTP(cc), chunks[cc], h, H, j0, lane, o, oo, sS, sV);      \
  } while (0)

/* Grid (VD / 16 / TC_NW work-groups, H, sequences); the same arguments as TC_STEP 16's. */
__kernel __attribute__((reqd_work_group_size(TC_NT, 1, 1)))
void kda_tc_state(__global const ushort *blkg, __global const float *Ug,
                  __global const int2 *chunks, __global const int2 *seqs, int H,
                  __global const float *h0, ulong h0o, int has_h0, __global out_t *o, ulong oo,
                  __global float *ht, ulong hto, int has_ht)
{
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int h = (int)get_group_id(1), n = (int)get_group_id(2);
  const int j0 = ((int)get_group_id(0) * TC_NW + warp) * 16; /* this warp's V columns */
  const ulong sbase = ((ulong)n * (ulong)H + (ulong)h) * KD;
#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
  __local float *sS = NULL, *sV = NULL; /* unused */
#else
  /* (byte count also in lib/kda_tc.c) */
  __local float scr[TC_NW][16 * TC_LDS + 16 * CH];
  __local float *sS = scr[warp], *sV = scr[warp] + 16 * TC_LDS;
#endif
  /* S^T [16 x KD]: tile nt holds S^T[row][8 nt + col] = S[8 nt + col][j0 + row]. */
  tile_c S[TC_NKT];
  TC_UNROLL
  for (int nt = 0; nt < TC_NKT; nt++)
    for (int i = 0; i < 4; i++)
      S[nt].v[i] = has_h0 ? h0[h0o + (sbase + 8 * nt + tile_c_col(lane, i)) * VD + j0 + tile_c_row(lane, i)] : 0.0f;
  const int2 sq = seqs[n];
  const int end = sq.x + sq.y;
  int c = sq.x;
  TC_HINT(c, end, 1);
  for (int p = 1; p < TC_PF2; p++) TC_HINT(c + p, end, 0);
#if defined(CLMOE_TILE_PTX) && CLMOE_TILE_PTX
  for (; c + 4 <= end; c += 4) { /* 64-token steps */
    TC_UNROLL
    for (int s = 0; s < 4; s++) TC_STEP_CHUNK(c + s);
  }
#endif
  for (; c < end; c++) TC_STEP_CHUNK(c); /* the last 1-3 chunks (portable: all; one copy
                                             of the chunk's code builds faster on PoCL) */
  if (has_ht) {
    TC_UNROLL
    for (int nt = 0; nt < TC_NKT; nt++)
      for (int i = 0; i < 4; i++)
        ht[hto + (sbase + 8 * nt + tile_c_col(lane, i)) * VD + j0 + tile_c_row(lane, i)] = S[nt].v[i];
  }
}

#endif /* TC_STEP == 64 */
