/* Unstable: the explicit kernel paths, for benchmarks, conformance checks and tests.
 *
 * The ops of clmoe.h pick their kernels by themselves: the tile kernels where the context's
 * fast path is on and they cover the call (tile.h), the portable kernels otherwise. The
 * entries here name the path instead, or reach a piece of the library that the checks
 * test on its own. They are installed so that clmoe-bench and clmoe-xcheck link the shared
 * library like any other program, but they may change between minor versions; programs
 * that want a stable interface use clmoe.h, which does not include this header. */
#ifndef CLMOE_PATHS_H
#define CLMOE_PATHS_H

#include <stddef.h>

#include "kda.h"
#include "mla.h"
#include "tile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- KDA on the tile interface (kernels_cl/kda/kda_tile*.cl) -------------------------------
 * The FlashKDA split into a token-parallel kernel (gate, L2 norms, the 16 x 16 tiles, their
 * inverse, the WY factors) and a head-parallel one (the chunk-to-chunk state recurrence
 * with S in fp32 accumulators, the output); every matrix product is a bf16 tile product
 * with fp32 accumulation, so results carry bf16 operand rounding: about 1e-2 relative to
 * the output's scale, against 1e-4 for the portable fp32 path. clmoe_kda_forward and
 * clmoe_kda_backward take this path by themselves when the fast path is on and the call is
 * covered: bounded gate, K and V multiples of 16 up to 128 (any B, T, packed sequences,
 * initial/final state, fp32 or bf16 storage). */

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
 * back with clmoe_kda_tile_saved_release. */
typedef struct clmoe_kda_tile_saved {
  cl_mem blocks, ut;        /* [chunks, H, block] bf16, U^T [chunks, H, V, 16] fp32 */
  cl_mem states, vnew;      /* S_c^T [chunks, H, V, K], Vnew^T [chunks, H, V, 16], bf16 */
  size_t blocks_bytes, ut_bytes, states_bytes, vnew_bytes;
  int64_t nchunks, H, K, V; /* of the forward that filled it (nchunks 0: nothing kept) */
} clmoe_kda_tile_saved;
CLMOE_API void clmoe_kda_tile_saved_release(clmoe_ctx *ctx, clmoe_kda_tile_saved *s);
/* Bytes a clmoe_kda_tile_saved holds per (16-token chunk, head) at key and value sizes K, V
 * (69120 at K = V = 128); 0 where the tile path does not cover them. For memory plans. */
CLMOE_API size_t clmoe_kda_tile_kept_bytes(int64_t K, int64_t V);

typedef struct clmoe_kda_tile_config {
  int warps;     /* warps of a state work-group: the default pass, 16 columns of V each (1, 2,
                    4 or 8); the 16-token pass (CLMOE_KDA_TC_STEP=16), 8 columns each (1, 2
                    or 4); V must be a multiple of their columns; 0: the default (2) */
  int lookahead; /* chunks the state pass copies ahead: 1, 2 or 3 (16-token pass: 1 or 2);
                    0: the default (2) */
  clmoe_kda_tile_saved *saved; /* forward: keep the backward's factors here; backward: read
                                  them (if they match) instead of its prep; NULL: neither */
} clmoe_kda_tile_config;

/* The forward of clmoe_kda_forward on the tile kernels; CLMOE_ERR_UNSUPPORTED (no fallback)
 * when the call is not covered. cfg may be NULL. */
CLMOE_API clmoe_status clmoe_kda_forward_tile(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                              const clmoe_kda_inputs *in, clmoe_tensor *o,
                                              clmoe_tensor *final_state,
                                              const clmoe_kda_tile_config *cfg);

/* The backward of clmoe_kda_backward on the tile kernels (kernels_cl/kda/kda_tile.cl's prep
 * built for the backward: the per-chunk factors again; kda_tile_bwd.cl: the state recurrence
 * again, the reverse state-gradient pass, the per-chunk factor gradients;
 * kda_tile_bwd_chunk.cl: back through the 16 x 16 factors, the gate, beta and the norms).
 * Same coverage as the forward
 * (bounded gate, K, V multiples of 16 up to 128; any B, T, packed sequences, initial state
 * and dfinal_state); CLMOE_ERR_UNSUPPORTED (no fallback) otherwise. cfg may be NULL (its
 * warps: computing warps of the two state passes, 16 columns of V each, 1, 2 or 4, default
 * the most that leave no compute unit idle; lookahead: chunks their copy ring runs ahead,
 * 1..3, default 2). clmoe_kda_backward
 * takes this path by itself when the fast path is on for the call. Results carry bf16
 * operand rounding (about 1e-2 relative to each gradient's largest magnitude). */
CLMOE_API clmoe_status clmoe_kda_backward_tile(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                               const clmoe_kda_inputs *in,
                                               const clmoe_tensor *dout,
                                               const clmoe_tensor *dfinal_state,
                                               const clmoe_kda_grads *grads,
                                               const clmoe_kda_tile_config *cfg);

/* ---- MLA attention on the tile interface (kernels_cl/mla/mla_tile*.cl) ---------------------
 * Flash-attention-2 style: 64 or 128 query rows per work-group (16 per group of 32 lanes),
 * key blocks of 64, products on the tile interface with bf16 operands (fp32 inputs are
 * rounded to bf16 on load; P is rounded to bf16 before P V) and fp32 accumulation; softmax
 * statistics in fp32. Same outputs as clmoe_mla_attention (o, and lse in the convention the
 * backward consumes), to bf16 accuracy: about 1e-2 relative. Covers Dn + Dr <= 256 and
 * Dv <= 128 (the report's 128 + 64 and 128 included), packed sequences, f32 or bf16
 * storage, within the device's local memory (about 44 KB forward, 46 KB backward at the
 * report's sizes; with 48 KB, as on NVIDIA, Dn + Dr up to 208 at Dv 128) and work-group
 * size (128 or 256 work-items). */

typedef enum clmoe_mla_attn_path {
  CLMOE_MLA_ATTN_AUTO = 0,     /* as clmoe_mla_attention */
  CLMOE_MLA_ATTN_PORTABLE = 1, /* kernels_cl/mla/mla_fwd.cl, fp32 */
  CLMOE_MLA_ATTN_TILE = 2,     /* kernels_cl/mla/mla_tile.cl, query tile size chosen here */
  CLMOE_MLA_ATTN_TILE64 = 3,   /* the tile kernel with 64-row query tiles (4 warps) */
  CLMOE_MLA_ATTN_TILE128 = 4   /* ... with 128-row query tiles (8 warps) */
} clmoe_mla_attn_path;

/* clmoe_mla_attention through the named kernel. A tile path that does not cover the call
 * returns CLMOE_ERR_UNSUPPORTED (message: why). */
CLMOE_API clmoe_status clmoe_mla_attention_path(clmoe_ctx *ctx, clmoe_mla_attn_path path,
                                                float scale, const clmoe_mla_attn_inputs *in,
                                                clmoe_tensor *o, clmoe_tensor *lse);

/* clmoe_mla_attention_backward through the named kernels: the portable ones (mla_bwd.cl) or
 * the tile ones (mla_tile_bwd.cl: 64-key and 64-query work-groups, bf16 operands q, k, v,
 * dO, P and dS, fp32 accumulation; TILE64 and TILE128 mean TILE here). o and lse may come
 * from either forward. */
CLMOE_API clmoe_status clmoe_mla_attention_backward_path(
    clmoe_ctx *ctx, clmoe_mla_attn_path path, float scale, const clmoe_mla_attn_inputs *in,
    const clmoe_tensor *o, const clmoe_tensor *lse, const clmoe_tensor *dout,
    const clmoe_mla_attn_grads *grads);

/* Short name of a path ("auto", "portable", "tile", "tile64", "tile128"). */
CLMOE_API const char *clmoe_mla_attn_path_name(clmoe_mla_attn_path path);

/* ---- knobs: the environment variables as settings of a context ---------------------------
 * Every CLMOE_ environment variable the library reads is a knob of one table (name, kind,
 * default, accepted values, doc, scope: "user" ones are documented in README, "tuning" and
 * "testing" ones by clmoe-info --knobs). A context reads them all once, when it is created
 * (a bad value fails clmoe_ctx_create with a message naming the variable and what it
 * accepts); clmoe_ctx_set_knob overrides one on one context, for tests and benchmarks that
 * compare kernel paths without touching the process's environment. */

typedef enum clmoe_knob_source {
  CLMOE_KNOB_DEFAULT = 0, /* neither set in the environment nor overridden */
  CLMOE_KNOB_ENV = 1,     /* from the environment, read when the context was created */
  CLMOE_KNOB_SET = 2      /* set by clmoe_ctx_set_knob */
} clmoe_knob_source;

typedef struct clmoe_knob_info {
  const char *name;     /* the environment variable: "CLMOE_FASTPATH" */
  const char *kind;     /* "bool", "int", "int list", "number", "string" or "enum" */
  const char *def;      /* the default's spelling; NULL: unset (doc says what applies) */
  const char *accepts;  /* the accepted values: an enum's spellings ("auto|0|1"), else words */
  const char *doc;      /* one line */
  const char *scope;    /* "user", "tuning" or "testing" */
  int process;          /* 1: read before any context exists (the device choice, MPI):
                         * set only in the environment */
} clmoe_knob_info;

/* The number of knobs, and knob `index` (0 .. count - 1) of the table. */
CLMOE_API int clmoe_knob_count(void);
CLMOE_API clmoe_status clmoe_knob_describe(int index, clmoe_knob_info *info);
/* Whether value is accepted for knob `name` (CLMOE_ERR_INVALID_ARGUMENT with the reason). */
CLMOE_API clmoe_status clmoe_knob_check(const char *name, const char *value);
/* Sets knob `name` to `value` on ctx, validated like the environment's ("": the default
 * whatever the environment says; NULL: back to the environment's value at creation). Kernel choices read it at their next call; knobs read
 * before any context exists are refused. */
CLMOE_API clmoe_status clmoe_ctx_set_knob(clmoe_ctx *ctx, const char *name, const char *value);
/* Knob `name`'s value on ctx as spelled (into buf, len bytes; "" where unset without a
 * default spelling) and where it came from (source may be NULL). */
CLMOE_API clmoe_status clmoe_ctx_knob(const clmoe_ctx *ctx, const char *name, char *buf,
                                      size_t len, clmoe_knob_source *source);

/* The device sampler's work-groups per row (clmoe_gen_sample_rows) for [rows, vocab] logits
 * on ctx, in *groups: CLMOE_SAMPLE_GROUPS where set, else two per compute unit over the rows
 * while each work-item keeps 8 logits or more; 1: one work-group per row (gen_sample.cl),
 * more: each row split over that many (gen_sample_split.cl). */
CLMOE_API clmoe_status clmoe_gen_sample_groups(clmoe_ctx *ctx, int64_t rows, int64_t vocab, int64_t *groups);

/* ---- pieces checked on their own ----------------------------------------------------------- */

/* Sorts keys[offset, offset + n) of a device buffer of 64-bit unsigned keys (cl_ulong) in
 * place, ascending; the keys outside that range are left alone. Deterministic: a bitonic
 * network, whose result depends only on the keys. Packing (key << 32 | position) gives a
 * stable sort of 32-bit keys with their positions, which is how the embedding backward
 * and the MoE dispatch group tokens. */
CLMOE_API clmoe_status clmoe_sort_u64(clmoe_ctx *ctx, cl_mem keys, size_t offset, size_t n);

/* The tile interface's self-test on ctx's tile implementation (kernel probe_tile_test of
 * kernels_cl/runtime/probe.cl): two groups of 32 lanes, each takes a [16, 16] A (a, 2 x 256
 * floats), [16, 8] Bs (b and b2, 2 x 128 each), rounds them to bf16 and writes 7 products
 * of 16 x 8 (out, 2 x 7 x 128 floats), one per load variant: A B, A^T B^T as loaded
 * transposed, A B from fp32, the same transposed, A B2 with B2 loaded transposed, and
 * [C0 | C4] B2 with the accumulators of the first and fifth products turned into an A
 * operand through local memory and directly. All four tensors are f32. */
CLMOE_API clmoe_status clmoe_tile_selftest(clmoe_ctx *ctx, const clmoe_tensor *a,
                                           const clmoe_tensor *b, const clmoe_tensor *b2,
                                           clmoe_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
