/* mla_layout.cl: the local-memory layouts of the MLA kernels, as macros of their build
 * options, in the C that OpenCL C shares with the host. The kernels size their __local
 * arrays with these macros, and the host includes this file (through lib/mla/mla_internal.h)
 * to check the same sizes against the device before it builds a program, so the two cannot
 * drift apart. It comes first in every MLA family ("mla_layout+mla+...").
 *
 * Sizes in elements of the array's type unless the name ends in _BYTES. dqk = Dn + Dr and
 * dv = Dv are the head sizes, dl = dc + Dr a cache row. */
#ifndef CLMOE_MLA_LAYOUT_CL
#define CLMOE_MLA_LAYOUT_CL

#define MLA_WG 256 /* work-items of the portable attention, decode and extend kernels */
#define MLA_BK 16  /* key rows per tile: fixes the order of every sum over keys */
#define MLA_BB 16  /* query rows per tile of the portable backward kernels */
#define MLA_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- mla_fwd.cl and mla_bwd.cl: the portable attention ---------------------------------- */

/* Local row strides in float4s: q and keys (k_nope then k_rope), values; one float4 of
 * padding each. */
#define MLA_QROW(dqk) (((dqk) + 3) / 4 + 1)
#define MLA_VROW(dv) (((dv) + 3) / 4 + 1)
/* mla_attn_fwd with fq query rows per tile: float4s of q [fq][QROW], of the key or value
 * tile [BK][max(QROW, VROW)] and of P^T [BK][fq / 4 + 1]; then the floats of the scores
 * [fq][BK + 1] and the row statistics m, l, corr [fq]. */
#define MLA_FWD_PROW(fq) ((fq) / 4 + 1)
#define MLA_FWD_Q4(dqk, fq) ((fq) * MLA_QROW(dqk))
#define MLA_FWD_KV4(dqk, dv) (MLA_BK * MLA_MAX(MLA_QROW(dqk), MLA_VROW(dv)))
#define MLA_FWD_PT4(fq) (MLA_BK * MLA_FWD_PROW(fq))
#define MLA_FWD_LOCAL_BYTES(dqk, dv, fq)                                                       \
  (16 * (MLA_FWD_Q4(dqk, fq) + MLA_FWD_KV4(dqk, dv) + MLA_FWD_PT4(fq)) +                      \
   4 * ((fq) * (MLA_BK + 1) + 3 * (fq)))
/* mla_attn_bwd_kv and mla_attn_bwd_q: float4s of K, Q [BB][QROW] and V, dO [BB][VROW];
 * floats of P, dS [BB][BB + 1] and the rows' lse and D [BB]. */
#define MLA_BWD_LOCAL_BYTES(dqk, dv)                                                           \
  (16 * 2 * MLA_BB * (MLA_QROW(dqk) + MLA_VROW(dv)) + 4 * (2 * MLA_BB * (MLA_BB + 1) + 2 * MLA_BB))

/* ---- mla_decode.cl and mla_extend.cl: attention over the cache ------------------------------ */

/* Cache tokens per work-group of mla_decode_attn for a sequence of len tokens: 8 up to 256
 * tokens (short contexts spread over many work-groups: a decode step's attention is then
 * latency-bound), else 32, doubled while that makes more than 64 splits, up to 256. From
 * the length alone, so a sequence's sums do not depend on the device or on the other
 * sequences of the batch. MLA_DECODE_SPLITS(maxlen) bounds the splits of any len <= maxlen
 * (the partials' size). */
#define MLA_DECODE_SPLIT(len)                                                                  \
  ((len) <= 256 ? 8 : (len) <= 64 * 32 ? 32 : (len) <= 64 * 64 ? 64 : (len) <= 64 * 128 ? 128 : 256)
#define MLA_DECODE_SPLITS(maxlen)                                                              \
  ((maxlen) <= 256          ? ((maxlen) + 7) / 8                                             \
   : (maxlen) <= 64 * 32    ? MLA_MAX(32, ((maxlen) + 31) / 32)                              \
                            : MLA_MAX(64, ((maxlen) + 255) / 256))

#define MLA_APPEND_WG 64 /* work-items of mla_cache_append_norm (one sequence each) */

/* mla_decode_attn with hg heads per work-group and bt cache rows per tile: the floats of
 * the queries [hg][dl + 1], the cache tile [bt][dl + 1] and the partial scores
 * [hg][bt][NSUB + 1], NSUB lanes per (head, row). */
#define MLA_DECODE_NSUB(hg, bt) (MLA_WG / (hg) / (bt))
#define MLA_DECODE_LOCAL_BYTES(dl, hg, bt)                                                     \
  (4 * (((hg) + (bt)) * ((dl) + 1) + (hg) * (bt) * (MLA_DECODE_NSUB(hg, bt) + 1)))
/* mla_extend_attn with er query rows per work-group and ek cache rows per tile: the floats
 * of the cache tile [ek][dl + 1], the lanes' partial scores [er][ek][EL + 1] (EL lanes per
 * row) and the scores [er][ek + 1]. */
#define MLA_EXTEND_EL(er) (MLA_WG / (er))
#define MLA_EXTEND_LOCAL_BYTES(dl, er, ek)                                                     \
  (4 * ((ek) * ((dl) + 1) + (er) * (ek) * (MLA_EXTEND_EL(er) + 1) + (er) * ((ek) + 1)))

/* ---- mla_tile*.cl: the attention on the tile interface -------------------------------------- */

/* bq query rows per work-group (64 or 128): bq / 16 warps of 32 lanes. Operands are staged
 * as bf16 (ushort) in uint4 arrays (16-byte alignment). */
#define MLA_TILE_BK 64                                /* keys per block */
#define MLA_TILE_NW(bq) ((bq) / 16)                   /* warps per work-group */
#define MLA_TILE_WG(bq) (32 * MLA_TILE_NW(bq))        /* work-items per work-group */
#define MLA_TILE_DQP(dqk) (((dqk) + 15) / 16 * 16)    /* dqk padded to whole k-steps */
#define MLA_TILE_DVP(dv) (((dv) + 7) / 8 * 8)         /* dv padded to whole 8-column tiles */
#define MLA_TILE_DVK(dv) (((dv) + 15) / 16 * 16)      /* dv padded to whole k-steps */
/* The local row stride (bf16) of rows of n numbers: 16 mod 64, so the 4 rows that a
 * half-warp's 8-byte fragment loads touch start 8 banks apart (no bank conflicts). */
#define MLA_TILE_LD(n) (((n) + 47) / 64 * 64 + 16)
#define MLA_TILE_U4(ushorts) (((ushorts) + 7) / 8)    /* uint4s holding that many ushorts */
/* The quad reductions' float2 [WG] and the portable tiles' P scratch (16 x 16 fp32 per warp). */
#define MLA_TILE_RED_BYTES(bq) (8 * MLA_TILE_WG(bq))
#define MLA_TILE_PSCR_BYTES(bq) (4 * 256 * MLA_TILE_NW(bq))

/* mla_tile_fwd: K [BK][LD(DQP)] (or Q while it is loaded, or under the portable tiles the
 * P scratch of every warp, 512 ushorts each, once the scores are done), V transposed
 * [DVP][BK], and the quad reductions. */
#define MLA_TILE_FWD_KS(dqk, bq)                                                               \
  MLA_MAX(MLA_TILE_BK * MLA_TILE_LD(MLA_TILE_DQP(dqk)), MLA_TILE_NW(bq) * 512)
#define MLA_TILE_FWD_VS(dv) (MLA_TILE_DVP(dv) * MLA_TILE_BK)
#define MLA_TILE_FWD_LOCAL_BYTES(dqk, dv, bq)                                                  \
  (16 * (MLA_TILE_U4(MLA_TILE_FWD_KS(dqk, bq)) + MLA_TILE_U4(MLA_TILE_FWD_VS(dv))) +         \
   MLA_TILE_RED_BYTES(bq))

/* mla_tile_fwd_async: stages of bk keys (K rows then V rows, each padded to whole groups of
 * 64 numbers), the default pipeline 2 stages of 32 keys; Q is staged 64 rows at a time
 * through the same memory. Then the quad reductions and, without TILE_HAS_A_FROM_C (regs 0), the P scratch. */
#define MLA_TILE_ASYNC_BK 32
#define MLA_TILE_ASYNC_STAGES 2
#define MLA_TILE_ASYNC_ROW(n) (((n) + 63) / 64 * 64)
#define MLA_TILE_ASYNC_STAGE(dqk, dv, bk)                                                      \
  ((bk) * (MLA_TILE_ASYNC_ROW(MLA_TILE_DQP(dqk)) + MLA_TILE_ASYNC_ROW(dv)))
#define MLA_TILE_ASYNC_ELEMS(dqk, dv, bk, stages)                                              \
  MLA_MAX(64 * MLA_TILE_LD(MLA_TILE_DQP(dqk)), (stages) * MLA_TILE_ASYNC_STAGE(dqk, dv, bk))
#define MLA_TILE_ASYNC_LOCAL_BYTES(dqk, dv, bq, regs)                                          \
  (16 * MLA_TILE_U4(MLA_TILE_ASYNC_ELEMS(dqk, dv, MLA_TILE_ASYNC_BK, MLA_TILE_ASYNC_STAGES)) + \
   MLA_TILE_RED_BYTES(bq) + ((regs) ? 0 : MLA_TILE_PSCR_BYTES(bq)))

/* mla_tile_fwd_wgmma with blocks of bk keys (32 or 64) copied `ahead` blocks ahead (1 to
 * 3), pp 1 when the two warp groups take turns: rings of ahead + 1 K buffers (rows of
 * whole 64-column blocks) and ahead + 2 + pp V buffers (128 columns); Q is staged 64 rows at
 * a time through the same memory. Then, without TILE_HAS_A_FROM_C (regs 0) only (the quad
 * reductions are unused with lane shuffles and the compiler drops them), the quad
 * reductions and the P scratch. */
#define MLA_TILE_WGMMA_KST(ahead) ((ahead) + 1)
#define MLA_TILE_WGMMA_VST(ahead, pp) ((ahead) + 2 + (pp))
#define MLA_TILE_WGMMA_KBLK(dqk, bk) ((MLA_TILE_DQP(dqk) + 63) / 64 * (bk) * 64)
#define MLA_TILE_WGMMA_VBLK(bk) (2 * (bk) * 64)
#define MLA_TILE_WGMMA_BUFS(dqk, bk, ahead, pp)                                                \
  (MLA_TILE_WGMMA_KST(ahead) * MLA_TILE_WGMMA_KBLK(dqk, bk) +                                  \
   MLA_TILE_WGMMA_VST(ahead, pp) * MLA_TILE_WGMMA_VBLK(bk))
#define MLA_TILE_WGMMA_ELEMS(dqk, bk, ahead, pp)                                               \
  MLA_MAX(64 * MLA_TILE_LD(MLA_TILE_DQP(dqk)), MLA_TILE_WGMMA_BUFS(dqk, bk, ahead, pp))
#define MLA_TILE_WGMMA_LOCAL_BYTES(dqk, bk, ahead, pp, bq, regs)                               \
  (16 * MLA_TILE_U4(MLA_TILE_WGMMA_ELEMS(dqk, bk, ahead, pp)) +                                \
   ((regs) ? 0 : MLA_TILE_RED_BYTES(bq) + MLA_TILE_PSCR_BYTES(bq)))

/* mla_tile_bwd_kv (the larger of the two backward kernels, 64 rows): Q (or K) [BK][LD(DQP)]
 * and dO (or V) [BK][LD(DVK)] as bf16, the rows' lse and D [BK] in fp32, and without
 * TILE_HAS_A_FROM_C (regs 0) the P^T / dS^T scratch. */
#define MLA_TILE_BWD_LOCAL_BYTES(dqk, dv, regs)                                                \
  (16 * (MLA_TILE_U4(MLA_TILE_BK * MLA_TILE_LD(MLA_TILE_DQP(dqk))) +                           \
         MLA_TILE_U4(MLA_TILE_BK * MLA_TILE_LD(MLA_TILE_DVK(dv)))) +                           \
   4 * 2 * MLA_TILE_BK + ((regs) ? 0 : MLA_TILE_PSCR_BYTES(64)))

/* mla_tile_bwd_kv_async / _q_async: two stages of BWA_BQ rows, each a Q (or K) block of
 * rows ASYNC_ROW(DQP) wide then a dO (or V) block of rows ASYNC_ROW(dv) wide, sharing their
 * memory with the 64-row staging of the A fragments (Q or K [64][LD(DQP)], dO or V
 * [64][LD(dv)]); the two stages' lse and D [BWA_BQ] in fp32, and without TILE_HAS_A_FROM_C
 * (regs 0) the P^T / dS^T scratch. */
#define MLA_TILE_BWA_BQ 32
#define MLA_TILE_BWA_STAGE(dqk, dv)                                                            \
  (MLA_TILE_BWA_BQ * (MLA_TILE_ASYNC_ROW(MLA_TILE_DQP(dqk)) + MLA_TILE_ASYNC_ROW(dv)))
#define MLA_TILE_BWA_ELEMS(dqk, dv)                                                            \
  MLA_MAX(MLA_MAX(64 * MLA_TILE_LD(MLA_TILE_DQP(dqk)), 64 * MLA_TILE_LD(dv)),                  \
          2 * MLA_TILE_BWA_STAGE(dqk, dv))
#define MLA_TILE_BWA_LOCAL_BYTES(dqk, dv, regs)                                                \
  (16 * MLA_TILE_U4(MLA_TILE_BWA_ELEMS(dqk, dv)) + 4 * 4 * MLA_TILE_BWA_BQ +                  \
   ((regs) ? 0 : MLA_TILE_PSCR_BYTES(64)))

#endif
