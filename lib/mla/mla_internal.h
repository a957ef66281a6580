/* Internal to the MLA host code (lib/mla/): strided operands, the sequence plan with its
 * tile tables, the attention entry points the layer uses with column slices of its
 * projections, and the paged cache shared by decode and extend. Each function is declared
 * under the file that defines it.
 *
 * Files and who calls whom (an arrow: calls functions defined in); no cycle:
 *
 *   mla_extend_flash -> mla_extend, mla_attn, mla_tile, mla_layer, mla_cache, mla
 *   mla_extend       -> mla_absorbed, mla_layer, mla_cache, mla
 *   mla_decode       -> mla_absorbed, mla_layer, mla_attn_plan, mla_cache, mla
 *   mla_absorbed     -> mla_layer, mla_cache, mla
 *   mla_cache        -> mla
 *   mla_layer        -> mla_attn, mla_attn_plan, mla
 *   mla_attn         -> mla_tile, mla_attn_plan
 *   mla_tile         -> mla_attn_plan
 *   mla_attn_plan, mla (config and weights): the bottom
 */
#ifndef CLMOE_MLA_INTERNAL_H
#define CLMOE_MLA_INTERNAL_H

#include "runtime/internal.h"
#include "clmoe/mla.h"
#include "kernels_cl/mla/mla_layout.cl" /* MLA_WG, MLA_BB and the kernels' local memory */

#define MLA_MAX_DQK 256
#define MLA_MAX_DV 256

/* An operand addressed as buf[off + token * ts + head * hs + d] (hs unused for k_rope). */
typedef struct mla_operand {
  cl_mem buf;
  cl_ulong off;
  cl_uint ts, hs;
} mla_operand;

/* Sequences of a [B, T] batch (or cu_seqlens) and their tile tables. */
typedef struct mla_plan {
  int64_t B, T, M, N;   /* M = B T tokens, N sequences */
  cl_int *bounds;       /* host [N + 1] token offsets */
  int64_t max_len;
  cl_mem fwd_tiles;     /* int4 tables (see mla.cl), built on demand */
  cl_mem bwd_tiles;     /* 16-row tiles: query tiles of dQ and key tiles of dK/dV */
  size_t fwd_bytes, bwd_bytes;
  int nfwd, nbwd, fq;   /* tile counts; FQ rows of the forward's query tiles */
} mla_plan;

/* Everything the attention kernels need, validated. */
typedef struct mla_attn_desc {
  int64_t M, H, Dn, Dr, Dv;
  int in_bf16;
  float scale;
  mla_operand q, kn, kr, v;
} mla_attn_desc;

/* ---- mla.c: configuration and weights ---------------------------------------------------- */

float clmoe__mla_scale(const clmoe_mla_config *cfg);
float clmoe__mla_eps(const clmoe_mla_config *cfg);
clmoe_status clmoe__mla_check_weights(const char *op, const clmoe_mla_config *cfg,
                                      const clmoe_mla_weights *w);
/* The same for the layer's forward and backward, whose matrices may also be bf16 (a bf16
 * training step's copies, multiplied through clmoe_linear). */
clmoe_status clmoe__mla_check_layer_weights(const char *op, const clmoe_mla_config *cfg,
                                            const clmoe_mla_weights *w);
/* The same for the passes over a cache (clmoe_mla_decode_step past the GEMV path,
 * clmoe_mla_extend, clmoe_mla_extend_flash): bf16 matrices but for w_ukv, which the per-head
 * batched products and the context's decompression read in fp32. */
clmoe_status clmoe__mla_check_absorbed_weights(const char *op, const clmoe_mla_config *cfg,
                                               const clmoe_mla_weights *w);

/* clmoe_mla_weights_create_form with the weight matrices (every "w_*") created as
 * `matrices` (CLMOE_F32 or CLMOE_BF16, for an inference model, lib/model/model.c); the two
 * norm gains stay fp32. */
clmoe_status clmoe__mla_weights_create_dtype(clmoe_ctx *ctx, const clmoe_mla_config *cfg, int output_gate,
                                            clmoe_dtype matrices, clmoe_mla_weights *w);

/* ---- mla_attn_plan.c: the plan and its tile tables --------------------------------------- */

clmoe_status clmoe__mla_plan_make(clmoe_ctx *ctx, const char *op, int64_t B, int64_t T,
                                  const clmoe_tensor *cu, mla_plan *p);
void clmoe__mla_plan_release(clmoe_ctx *ctx, mla_plan *p);
/* A device table (*count int4 tiles, *bytes from the scratch pool) of `rows`-row tiles over
 * every sequence of p (see kernels_cl/mla/mla.cl); fwd: w = 0, else w = the sequence's end. */
clmoe_status clmoe__mla_build_tiles(clmoe_ctx *ctx, const mla_plan *p, int rows, int fwd,
                                    cl_mem *mem, size_t *bytes, int *count);
/* Makes p->fwd_tiles the forward's table of tiles of `rows` query rows (p->fq = rows). */
clmoe_status clmoe__mla_plan_fwd_tiles(clmoe_ctx *ctx, mla_plan *p, int rows);

/* ---- mla_tile.c: attention on the tile interface ----------------------------------------- */

/* The forward on the tile interface (kernels_cl/mla/mla_tile.cl) with query tiles of bq
 * rows (64 or 128; 0: chosen from the plan). Returns CLMOE_ERR_UNSUPPORTED, having launched
 * nothing, when the tile kernel does not cover the shape on this device. */
clmoe_status clmoe__mla_tile_fwd_run(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p, int bq,
                                     clmoe_tensor *o, clmoe_tensor *lse);
/* Checks that the tile kernel covers the call and builds it; *bq 0: chosen from the longest
 * sequence (128 rows from 1024 tokens, else 64), then set. UNSUPPORTED when not covered. */
clmoe_status clmoe__mla_tile_fwd_prepare(clmoe_ctx *ctx, const mla_attn_desc *a, int64_t max_len,
                                         int *bq);
/* The tile forward over an explicit tile table (as clmoe__mla_attn_fwd_launch, tiles of at
 * most bq rows, the queries' key shift in w): chunked prefill attending to a cached prefix. */
clmoe_status clmoe__mla_tile_fwd_launch(clmoe_ctx *ctx, const mla_attn_desc *a, int bq,
                                        cl_mem tiles, int ntiles, clmoe_tensor *o,
                                        clmoe_tensor *lse);
/* The backward on the tile interface (kernels_cl/mla/mla_tile_bwd.cl), arguments as
 * clmoe__mla_attn_bwd_run's; CLMOE_ERR_UNSUPPORTED (nothing launched) when not covered. */
clmoe_status clmoe__mla_tile_bwd_run(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p,
                                     const clmoe_tensor *o, const clmoe_tensor *lse,
                                     const clmoe_tensor *dout, clmoe_tensor *dq, mla_operand dkn,
                                     mla_operand dv, clmoe_tensor *dkr);

/* ---- mla_tile_bwa.c: the double-buffered backward, bf16 operand copies ------------------- */

/* Packed bf16 copies of q [M, H, Dn + Dr], k_nope [M, H, Dn], k_rope [M, Dr], v [M, H, Dv]
 * (scratch memory) for fp32 operands. */
typedef struct mla_bf16_copies {
  cl_mem mem[4];
  size_t bytes[4];
} mla_bf16_copies;

/* 1 when the fp32 operands of a are worth bf16 copies here (a matrix unit runs the tile
 * products; Dn, Dr multiples of 8, Dv of 16; CLMOE_MLA_TC_ASYNC on). */
int clmoe__mla_tile_bf16_wanted(clmoe_ctx *ctx, const mla_attn_desc *a);
/* Launches the copies of a's fp32 operands; *ab is a over them (in_bf16 1). Release with
 * clmoe__mla_tile_bf16_release after the kernels that read them are enqueued. */
clmoe_status clmoe__mla_tile_bf16_copies(clmoe_ctx *ctx, const mla_attn_desc *a, mla_attn_desc *ab,
                                         mla_bf16_copies *c);
void clmoe__mla_tile_bf16_release(clmoe_ctx *ctx, mla_bf16_copies *c);
/* 1 when kernels_cl/mla/mla_tile_bwd_async.cl takes the backward of a: bf16 operands with
 * offsets and strides multiples of 8 (or fp32 ones clmoe__mla_tile_bf16_wanted copies), Dn,
 * Dr multiples of 8, Dv of 16, its local memory on the device, CLMOE_MLA_TC_ASYNC on. */
int clmoe__mla_tile_bwa_covers(clmoe_ctx *ctx, const mla_attn_desc *a);
/* That backward, arguments as clmoe__mla_tile_bwd_run's. */
clmoe_status clmoe__mla_tile_bwa_run(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p,
                                     const clmoe_tensor *o, const clmoe_tensor *lse,
                                     const clmoe_tensor *dout, clmoe_tensor *dq, mla_operand dkn,
                                     mla_operand dv, clmoe_tensor *dkr);

/* ---- mla_attn.c: the portable kernels and the dispatch ----------------------------------- */

/* Forward over a plan: o [M, H, Dv] (f32 or bf16, contiguous), lse [M, H] f32 or NULL. */
clmoe_status clmoe__mla_attn_fwd_run(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p,
                                     clmoe_tensor *o, clmoe_tensor *lse);
/* Backward: dq [M, H, Dqk] contiguous f32; dk_nope and dv as strided operands (f32);
 * dkr [M, Dr] contiguous f32. */
clmoe_status clmoe__mla_attn_bwd_run(clmoe_ctx *ctx, const mla_attn_desc *a, mla_plan *p,
                                     const clmoe_tensor *o, const clmoe_tensor *lse,
                                     const clmoe_tensor *dout, clmoe_tensor *dq, mla_operand dkn,
                                     mla_operand dv, clmoe_tensor *dkr);
/* The portable forward's query rows per tile (FQ) on this device, after checking its limits. */
clmoe_status clmoe__mla_attn_fwd_shape(clmoe_ctx *ctx, const char *op, const mla_attn_desc *a,
                                       int *fq);
/* The portable forward over an explicit device tile table of ntiles int4 tiles of at most fq
 * rows (kernels_cl/mla/mla_fwd.cl: x first key of the sequence, y first query row, z rows,
 * w the queries' key shift): o [rows, H, Dv] contiguous, lse [rows, H] f32 or NULL. */
clmoe_status clmoe__mla_attn_fwd_launch(clmoe_ctx *ctx, const mla_attn_desc *a, int fq,
                                        cl_mem tiles, int ntiles, clmoe_tensor *o,
                                        clmoe_tensor *lse);

/* ---- mla_layer.c: the layer internals shared with prefill, decode and extend ------------- */

/* The layer forward over a plan into y, filling s (every tensor created here). */
clmoe_status clmoe__mla_layer_forward(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                      const clmoe_mla_weights *w, const clmoe_tensor *x2,
                                      mla_plan *p, clmoe_tensor *y2, clmoe_mla_saved *s);
/* The query, latent and gate projections of M tokens x2 [M, d] (no attention): q [M, H Dqk],
 * c [M, dc], kr [M, Dr], gate [M, H Dv] (sigmoid applied), created here. */
clmoe_status clmoe__mla_project(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                const clmoe_mla_weights *w, const clmoe_tensor *x2,
                                clmoe_mla_saved *s, int keep_raw);
/* y [M, d] = W_o (gate * o); u [M, H Dv] receives gate * o. */
clmoe_status clmoe__mla_output(clmoe_ctx *ctx, const clmoe_mla_weights *w, const clmoe_tensor *gate,
                               const clmoe_tensor *o2, clmoe_tensor *u, clmoe_tensor *y2);

/* ---- mla_cache.c: the paged latent cache ------------------------------------------------- */

#define CBLK CLMOE_MLA_CACHE_BLOCK

struct clmoe_mla_cache {
  clmoe_ctx *ctx;
  int64_t nseq, dc, dr, row; /* row = dc + dr numbers per token */
  clmoe_dtype dtype;
  clmoe_tensor store;        /* [cap_blocks, CBLK, row] */
  int64_t cap_blocks;
  int32_t *free_blocks;      /* stack of unused physical blocks [cap_blocks] */
  int64_t nfree;
  int64_t *len;              /* [nseq] tokens per sequence */
  int32_t *table;            /* [nseq, maxb] physical block of each logical block */
  int64_t maxb;
  clmoe_tensor d_table;      /* i32 [nseq, maxb] */
  clmoe_tensor d_len;        /* i32 [nseq], kept equal to len (decode steps advance both) */
  int table_dirty, len_dirty;
};

clmoe_status clmoe__mla_check_cache(const char *op, const clmoe_mla_config *cfg,
                                    const clmoe_mla_cache *c);
/* Makes room for `tokens` tokens in sequence s (blocks from the pool, table widened). */
clmoe_status clmoe__mla_cache_reserve(clmoe_mla_cache *c, int64_t s, int64_t tokens);
/* Uploads the block table and the lengths if the host changed them. */
clmoe_status clmoe__mla_cache_sync(clmoe_mla_cache *c);
/* Writes c [M, dc] and kr [M, Dr] of M tokens at map[i] = (sequence, position), or with map
 * NULL (a decode step, M = nseq) at the end of every sequence (device lengths advance). */
clmoe_status clmoe__mla_cache_write(clmoe_ctx *ctx, clmoe_mla_cache *c, const clmoe_tensor *lat,
                                    const clmoe_tensor *kr, const cl_int *map, int64_t M);
/* A decode step's append (M = nseq, one row per sequence): RMSNorm(lat) with gain and eps, and
 * kr, at the end of every sequence (device lengths advance). lat [M, dc], kr [M, Dr]. */
clmoe_status clmoe__mla_cache_append_norm(clmoe_ctx *ctx, clmoe_mla_cache *c, const clmoe_tensor *lat,
                                          const clmoe_tensor *gain, float eps, const clmoe_tensor *kr);
/* Reads the rows at map[i] = (sequence, position), i < keys, into contiguous f32 lat
 * [keys, dc] and kr [keys, Dr] (both starting their buffers); bf16 rows as stored. */
clmoe_status clmoe__mla_cache_gather(clmoe_ctx *ctx, clmoe_mla_cache *c, const cl_int *map,
                                     int64_t keys, clmoe_tensor *lat, clmoe_tensor *kr);
/* The decode program (kernels_cl/mla/mla_decode.cl, which holds the cache kernels too):
 * heads per work-group (*hg) and rows per tile (*bt) of the decode kernel that fit the
 * device's local memory, and its build options for them. */
clmoe_status clmoe__mla_decode_shape(clmoe_ctx *ctx, const clmoe_mla_cache *c, int *hg, int *bt);
void clmoe__mla_decode_options(const clmoe_mla_cache *c, int hg, int bt, char *buf, size_t len);

/* ---- mla_absorbed.c: attention of absorbed queries over the cache ------------------------ */

/* New tokens of an extend, already in the cache, packed by sequence: counts[n] tokens of
 * sequence n (nseq entries), token i at cache position pos[i] (sees positions <= pos[i]). */
typedef struct mla_extend_rows {
  const int64_t *counts;
  const cl_int *pos;
  int64_t M;
} mla_extend_rows;

/* The absorbed attention and output of N new tokens whose c and k_r are already cached and
 * whose projections are in s: y [N, d]. rows NULL: a decode step (one row per sequence). */
clmoe_status clmoe__mla_absorbed(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                 const clmoe_mla_weights *w, clmoe_mla_cache *c, clmoe_mla_saved *s,
                                 int64_t N, const mla_extend_rows *rows, clmoe_tensor *y);
/* oc [N, H, dc] = the absorbed attention of qc [N, H, dc] and q_r (in q [N, H, Dqk]) of one
 * row per cache sequence over its whole cache (the split kernel and its merge). */
clmoe_status clmoe__mla_decode_attend(clmoe_ctx *ctx, const clmoe_mla_config *cfg, clmoe_mla_cache *c,
                                      const clmoe_tensor *qc, const clmoe_tensor *q, clmoe_tensor *oc);

/* ---- mla_decode.c: the decode step on the GEMV (lib/generate calls it) ------------------- */

/* 1 when a step of nseq rows with weights w takes the GEMV path (matrices f32 or bf16); the
 * step adds the layer's output into y (accumulate 1) or writes it (0). x_gain: NULL, or the
 * products read RMSNorm(x) with this gain [d] (eps x_eps) instead of x (a pre-norm done
 * inside the first launch). */
int clmoe__mla_decode_gemv_ok(const clmoe_mla_weights *w, int64_t nseq);
clmoe_status clmoe__mla_decode_step_into(clmoe_ctx *ctx, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                                         clmoe_mla_cache *c, const clmoe_tensor *x, const clmoe_tensor *x_gain,
                                         float x_eps, int accumulate, clmoe_tensor *y);

/* ---- mla_extend.c: chunked prefill ------------------------------------------------------- */

/* The first half of either extend form: checks the arguments, projects x [M, d] into s
 * (q, c, kr, gate), appends the new tokens' c and k_r to the cache and fills pos [M] (each
 * token's cache position). *M receives the token count (0: nothing to do, s untouched). */
clmoe_status clmoe__mla_extend_append(clmoe_ctx *ctx, const char *op, const clmoe_mla_config *cfg,
                                      const clmoe_mla_weights *w, clmoe_mla_cache *c,
                                      const clmoe_tensor *x, const int64_t *counts,
                                      const clmoe_tensor *y, clmoe_mla_saved *s, cl_int **pos,
                                      int64_t *M);

#endif
