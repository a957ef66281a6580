/* The KDA forward on the matrix-unit tile interface (issue 9; kernels_cl/kda/kda_tc.cl): the
 * FlashKDA split into a token-parallel kernel (gate, L2 norms, the 16 x 16 tiles, their
 * inverse, the WY factors) and a head-parallel one (the chunk-to-chunk state recurrence
 * with S in fp32 accumulators, the output). Every matrix product is a bf16 tile product
 * with fp32 accumulation, so results carry bf16 operand rounding: about 1e-2 relative to
 * the output's scale, against 1e-4 for the portable fp32 path.
 *
 * clmoe_kda_forward takes this path by itself when the fast path is on (fastpath.h) and the
 * call is covered: bounded gate, K and V multiples of 16 up to 128 (any B, T, packed
 * sequences, initial/final state, fp32 or bf16 storage). This internal header (not
 * installed) gives tests and benchmarks the tile path explicitly. */
#ifndef CLMOE_KDA_TC_H
#define CLMOE_KDA_TC_H

#include "clmoe/kda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The factors a tile forward keeps for the tile backward of the same inputs (training):
 * the backward's per-chunk blocks (bf16 W, Kd, Qg, Aqk in its passes' fragment orders, gl,
 * Tm, P) and U^T, written by the forward's prep beside its own block, and the states
 * entering every chunk with Vnew, written by its state pass, so that the backward skips
 * its prep and its forward-again pass. About 67.5 KB per (16-token chunk, head) at K = V =
 * 128 (23.5 KB blocks, 8 KB U^T, 32 KB states, 4 KB Vnew): 1.1 GB at H 16, T 16384. Start
 * zeroed; the forward sizes and fills it (its 64-token state pass only: the default; it
 * keeps nothing, and does not fail, where CLMOE_KDA_KEEP_MAX_MB (MiB) is below the call's
 * need or the buffers cannot be had), the backward reads it when its plan matches (chunks,
 * H, K, V) and recomputes otherwise. The buffers come from the context's pool: give them
 * back with clmoe_kda_tc_saved_release. */
typedef struct clmoe_kda_tc_saved {
  cl_mem blocks, ut;        /* [chunks, H, block] bf16, U^T [chunks, H, V, 16] fp32 */
  cl_mem states, vnew;      /* S_c^T [chunks, H, V, K], Vnew^T [chunks, H, V, 16], bf16 */
  size_t blocks_bytes, ut_bytes, states_bytes, vnew_bytes;
  int64_t nchunks, H, K, V; /* of the forward that filled it (nchunks 0: nothing kept) */
} clmoe_kda_tc_saved;
void clmoe_kda_tc_saved_release(clmoe_ctx *ctx, clmoe_kda_tc_saved *s);
/* Bytes a clmoe_kda_tc_saved holds per (16-token chunk, head) at key and value sizes K, V
 * (69120 at K = V = 128); 0 where the tile path does not cover them. For memory plans. */
size_t clmoe_kda_tc_kept_bytes(int64_t K, int64_t V);

typedef struct clmoe_kda_tc_config {
  int warps;     /* warps of a state work-group: the default pass, 16 columns of V each (1, 2,
                    4 or 8); the 16-token pass (CLMOE_KDA_TC_STEP=16), 8 columns each (1, 2
                    or 4); V must be a multiple of their columns; 0: the default (2) */
  int lookahead; /* chunks the state pass copies ahead: 1, 2 or 3 (16-token pass: 1 or 2);
                    0: the default (2) */
  clmoe_kda_tc_saved *saved; /* forward: keep the backward's factors here; backward: read
                                them (if they match) instead of its prep; NULL: neither */
} clmoe_kda_tc_config;

/* The forward of clmoe_kda_forward on the tile kernels; CLMOE_ERR_UNSUPPORTED (no fallback)
 * when the call is not covered. cfg may be NULL. */
clmoe_status clmoe_kda_forward_tc(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                  const clmoe_kda_inputs *in, clmoe_tensor *o,
                                  clmoe_tensor *final_state, const clmoe_kda_tc_config *cfg);

/* The backward of clmoe_kda_backward on the tile kernels (kernels_cl/kda/kda_tc.cl's prep built
 * for the backward: the per-chunk factors again; kda_tc_bwd.cl: the state recurrence again,
 * the reverse state-gradient pass, the per-chunk factor gradients; kda_tc_bwdc.cl: back
 * through the 16 x 16 factors, the gate, beta and the norms). Same coverage as the forward
 * (bounded gate, K, V multiples of 16 up to 128; any B, T, packed sequences, initial state
 * and dfinal_state); CLMOE_ERR_UNSUPPORTED (no fallback) otherwise. cfg may be NULL (its
 * warps: computing warps of the two state passes, 16 columns of V each, 1, 2 or 4, default
 * the most that leave no compute unit idle; lookahead: chunks their copy ring runs ahead,
 * 1..3, default 2). clmoe_kda_backward
 * takes this path by itself when the fast path is on for the call. Results carry bf16
 * operand rounding (about 1e-2 relative to each gradient's largest magnitude). */
clmoe_status clmoe_kda_backward_tc(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                   const clmoe_kda_inputs *in, const clmoe_tensor *dout,
                                   const clmoe_tensor *dfinal_state, const clmoe_kda_grads *grads,
                                   const clmoe_kda_tc_config *cfg);

/* Library-internal (lib/kda/kda_backward.c): the plan of kda_internal.h. covers: 1 when the tile
 * backward supports it on ctx's device; run: the backward for a plan with chunks, the
 * arguments already checked (warps, lookahead 0: defaults). */
struct kda_plan;
int kda_tc_bwd_covers(clmoe_ctx *ctx, const struct kda_plan *p);
clmoe_status kda_tc_bwd_run(clmoe_ctx *ctx, const struct kda_plan *p, const clmoe_kda_inputs *in,
                            const clmoe_tensor *dout, const clmoe_tensor *dfinal_state,
                            const clmoe_kda_grads *grads, int warps, int lookahead,
                            const clmoe_kda_tc_saved *saved);

#ifdef __cplusplus
}
#endif
#endif
