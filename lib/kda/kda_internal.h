/* Internal to lib/kda/: the functions and types shared between the KDA host files, one
 * section per file that defines them. The files call each other only downwards, never in a
 * cycle; which file calls functions defined in which (a scan of the calls):
 *
 *   kda_layer -------> kda_forward, kda_backward, kda_tile_kept, kda_conv (its public API)
 *   kda_forward -----> kda_tile_fwd, kda_chunk, kda_plan
 *   kda_backward ----> kda_tile_bwd, kda_chunk, kda_plan
 *   kda_tile_fwd ----> kda_tile_common, kda_tile_kept, kda_plan
 *   kda_tile_bwd ----> kda_tile_common, kda_tile_kept, kda_chunk, kda_plan
 *   kda_chunk -------> kda_plan
 *   kda_tile_common, kda_tile_kept, kda_plan, kda_conv: none (the plan's type only)
 *   kda_layer_params: none (the layer's tensors, created and initialised)
 *   kda_step --------> kda_plan (the generation path's one-launch decode step, lib/generate/)
 *
 * Names: clmoe__kda_<name> for what another file calls, static otherwise. */
#ifndef CLMOE_KDA_INTERNAL_H
#define CLMOE_KDA_INTERNAL_H

#include "clmoe/kda_layer.h"
#include "clmoe/paths.h"
#include "runtime/internal.h"

/* The kernels' layouts (its first section; the rest is the device's): KDA_CHUNK, KDA_VS,
 * KDA_WG, the tile kernels' work-groups, blocks and local memory (KDA_TILE_*). */
#include "kernels_cl/kda/kda_common.cl"

#define KDA_MAX_K 128
#define KDA_MAX_V 128

/* ---- kda_layer_params.c: the layer's tensors ---- */

/* clmoe_kda_layer_create_form with the weight matrices (every 2-D "w_*": the projections,
 * the gates' low-rank pairs, W_o) created as `matrices` (CLMOE_F32 or CLMOE_BF16, for an
 * inference model, lib/model/model.c); dt_bias, A_log, the convolutions' taps and the gain
 * stay fp32. */
clmoe_status clmoe__kda_layer_create_dtype(clmoe_ctx *ctx, clmoe_kda_layer *l, int64_t d, int64_t H, int64_t D,
                                          int64_t rank, int64_t conv_width, float norm_eps,
                                          const clmoe_kda_options *opts, int64_t out_gate_rank,
                                          clmoe_dtype matrices);

/* ---- kda_step.c: the decode step after the input projections, one launch ---- */

/* o [N, H V] of one token per sequence from x = (q, k, v) [N, H K|V] before their short
 * convolutions, the gate logits z [N, H K] and beta's logits [N, H], all fp32 at the start of
 * their buffers; state's convolutions and recurrent state advance by the token. */
clmoe_status clmoe__kda_conv_step(clmoe_ctx *ctx, const clmoe_kda_layer *l, const clmoe_tensor *const x[3],
                                  const clmoe_tensor *z, const clmoe_tensor *beta, clmoe_kda_layer_state *state,
                                  clmoe_tensor *o);

/* ---- kda_plan.c: the plan, build options, gradient checks, the backward's scratch ---- */

typedef struct kda_plan {
  int64_t B, T, H, K, V, N; /* N sequences (B, or cu_seqlens' count) */
  int in_bf16;              /* q, k, v, g, beta stored as bf16 */
  float scale, lb;
  int unbounded;
  int nchunks;              /* 16-token chunks over all sequences */
  int nvs;                  /* V slices of the state pass */
  cl_mem chunks;            /* int2 [nchunks]: (first token, rows) */
  size_t chunks_bytes;
  cl_mem seq_chunks;        /* int2 [N]: (first chunk, chunks) */
  cl_mem seq_tokens;        /* int2 [N]: (first token, tokens) */
  size_t seq_bytes;
} kda_plan;

/* Validates inputs and options (naming the op in messages) and builds the tables on the
 * device. Release with clmoe__kda_plan_release. */
clmoe_status clmoe__kda_plan_make(clmoe_ctx *ctx, const char *op, const clmoe_kda_options *opts,
                                  const clmoe_kda_inputs *in, kda_plan *p);
void clmoe__kda_plan_release(clmoe_ctx *ctx, kda_plan *p);

/* The options' values with their defaults (scale 1 / sqrt(K), lower bound -5), checked
 * (naming op in messages). */
clmoe_status clmoe__kda_resolve_options(const char *op, const clmoe_kda_options *opts, int64_t K, float *scale,
                                        float *lb, int *unbounded);

/* Build options for the KDA programs. */
void clmoe__kda_options(const kda_plan *p, int out_bf16, char *buf, size_t len);

/* The backward's argument checks (dout, dfinal_state and every gradient's shape) and its
 * result for zero tokens (zero gradients, dfinal_state passed to dinitial_state), shared by
 * the portable and the tile backward. */
clmoe_status clmoe__kda_check_grads(const char *op, const kda_plan *p, const clmoe_tensor *dout,
                                    const clmoe_tensor *dht, const clmoe_kda_grads *g);
clmoe_status clmoe__kda_backward_empty(const clmoe_tensor *dht, const clmoe_kda_grads *g);

/* Scratch of a KDA backward (the portable one in kda_backward.c, the tile one in
 * kda_tile_bwd.c, each with its own sizes and storage types): entering states, Vnew, their
 * gradients, the factor gradients and the per-chunk parameter partials, allocated and
 * released together. */
enum { KB_SAVE, KB_VN, KB_DSAVE, KB_DU, KB_DQG, KB_DW, KB_DKD, KB_DGL, KB_DA, KB_PDDT, KB_PDA, KB_TMP, KB_COUNT };

typedef struct kda_bwd_buffers {
  cl_mem m[KB_COUNT];
  size_t bytes[KB_COUNT];
} kda_bwd_buffers;

clmoe_status clmoe__kda_bwd_buffers_alloc(clmoe_ctx *ctx, kda_bwd_buffers *b, const size_t *sizes);
void clmoe__kda_bwd_buffers_release(clmoe_ctx *ctx, kda_bwd_buffers *b);

/* ---- kda_chunk.c: the portable chunk passes (kernels_cl/kda/kda_fwd.cl) ---- */

/* Per-chunk intermediates of kda_prep (scratch from the pool), f32:
 * W, Qg, Kd [nchunks, H, 16, K]; U [nchunks, H, 16, V]; Aqk [nchunks, H, 16, 16]; gl [nchunks, H, K]. */
typedef struct kda_chunk_buffers {
  cl_mem W, U, Aqk, Qg, Kd, gl;
  size_t bytes[6];
} kda_chunk_buffers;

clmoe_status clmoe__kda_run_prep(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                 kda_chunk_buffers *cb);
/* The state pass: o (may be NULL to skip the output), ht (may be NULL), and when saved is
 * not NULL the state entering each chunk [nchunks, H, K, V] and Vnew [nchunks, H, 16, V]
 * into saved_vn. */
clmoe_status clmoe__kda_run_state(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                  const kda_chunk_buffers *cb, clmoe_tensor *o, clmoe_tensor *ht,
                                  cl_mem saved, cl_mem saved_vn);
void clmoe__kda_chunk_buffers_release(clmoe_ctx *ctx, kda_chunk_buffers *cb);
/* The last step of both backwards: the per-chunk partials b->m[KB_PDDT], b->m[KB_PDA] summed
 * in chunk order into g->ddt_bias and g->dA_log (kda_param_reduce, kda_alog_reduce of
 * kernels_cl/kda/kda_bwd.cl). */
clmoe_status clmoe__kda_param_reduce(clmoe_ctx *ctx, const kda_plan *p, const kda_bwd_buffers *b,
                                     const clmoe_kda_grads *g);

/* ---- kda_tile_common.c: what the tile forward and backward share ---- */

/* The tile prep (kda_tile_prep, kernel kp of a kda_tile.cl build) into blk and U, laid out as
 * that build says (the forward's, or the backward's with -DTC_BWD=1), with -DTC_SAVE=1 the
 * backward's block into bb too (else NULL). */
clmoe_status clmoe__kda_tile_prep_launch(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                         cl_kernel kp, cl_mem blk, cl_mem U, cl_mem bb);
/* 1 when the state passes store the saved rows through stmatrix (-DTC_STSM=1: PTX tiles on
 * sm_90 or newer; CLMOE_KDA_TC_STSM=0, read at every call, turns it off). */
int clmoe__kda_tile_stsm(clmoe_ctx *ctx);
/* The fewest warps (a power of 2 up to `most`) of 16 columns of V per work-group that leave
 * no more work-groups than compute units: how the state passes spread over the device. */
int clmoe__kda_tile_spread_warps(clmoe_ctx *ctx, const kda_plan *p, int most);

/* ---- kda_tile_kept.c: the factors a tile forward keeps for the tile backward ---- */

/* The byte sizes of what a tile forward keeps (clmoe_kda_tile_saved) for nch (chunk, head)
 * pairs: blocks, U^T, states, Vnew. */
void clmoe__kda_tile_kept_sizes(size_t nch, int64_t K, int64_t V, size_t sizes[4]);
/* 1 when saved holds what a forward of the plan's shapes kept (else the backward recomputes). */
int clmoe__kda_tile_kept_matches(const clmoe_kda_tile_saved *saved, const kda_plan *p);
/* Whether a tile forward of the plan keeps the factors into s (*save 1: s's buffers sized
 * for it); within CLMOE_KDA_KEEP_MAX_MB, and never a failure when they cannot be had. */
clmoe_status clmoe__kda_tile_keep_or_not(clmoe_ctx *ctx, const kda_plan *p, clmoe_kda_tile_saved *s,
                                         int *save);
/* The KDA layer's holder of kept factors: clmoe__kda_kept_new remembers its context (NULL
 * when memory runs out; also NULL when CLMOE_KDA_KEEP=0 asks for none); clmoe__kda_kept_saved
 * its factors (NULL for NULL); clmoe__kda_kept_free releases it (NULL: nothing). */
struct clmoe_kda_kept; /* include/clmoe/kda_layer.h's opaque holder */
struct clmoe_kda_kept *clmoe__kda_kept_new(clmoe_ctx *ctx);
clmoe_kda_tile_saved *clmoe__kda_kept_saved(struct clmoe_kda_kept *kept);
void clmoe__kda_kept_free(struct clmoe_kda_kept *kept);

/* ---- kda_tile_fwd.c: the forward on the tile interface ---- */

/* covers: 1 when the tile forward supports the plan on ctx's device (bounded gate, K and V
 * multiples of 16 up to 128, the kernels' work-group and local-memory sizes). run: the
 * forward into o and ht (may be NULL); warps per state work-group and chunks of look-ahead,
 * 0: default; saved (may be NULL): also keep the backward's factors there (paths.h). */
int clmoe__kda_tile_fwd_covers(clmoe_ctx *ctx, const kda_plan *p);
clmoe_status clmoe__kda_tile_fwd_run(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                     clmoe_tensor *o, clmoe_tensor *ht, int warps, int lookahead,
                                     clmoe_kda_tile_saved *saved);

/* ---- kda_tile_bwd.c: the backward on the tile interface ---- */

/* covers: 1 when the tile backward supports the plan on ctx's device; run: the backward for
 * a plan with chunks, the arguments already checked (warps, lookahead 0: defaults). */
int clmoe__kda_tile_bwd_covers(clmoe_ctx *ctx, const kda_plan *p);
clmoe_status clmoe__kda_tile_bwd_run(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                     const clmoe_tensor *dout, const clmoe_tensor *dfinal_state,
                                     const clmoe_kda_grads *grads, int warps, int lookahead,
                                     const clmoe_kda_tile_saved *saved);

/* ---- kda_forward.c, kda_backward.c: the dispatchers ---- */

/* clmoe_kda_forward / clmoe_kda_backward with the factors the tile forward keeps for the
 * tile backward (paths.h's clmoe_kda_tile_saved; NULL: none), for the KDA layer's training
 * path. */
clmoe_status clmoe__kda_forward_kept(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                     const clmoe_kda_inputs *in, clmoe_tensor *o,
                                     clmoe_tensor *final_state, clmoe_kda_tile_saved *saved);
clmoe_status clmoe__kda_backward_kept(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                      const clmoe_kda_inputs *in, const clmoe_tensor *dout,
                                      const clmoe_tensor *dfinal_state, const clmoe_kda_grads *grads,
                                      const clmoe_kda_tile_saved *saved);

#endif
