/* Shared by the KDA tile-path checks (check_kda_tile.c) and their CUnit suite
 * (tests/unit/test_kda_tile.c): one case of clmoe_kda_forward_tile against the double reference
 * and, optionally, against the portable chunked path. */
#ifndef CLMOE_CHECK_KDA_TILE_H
#define CLMOE_CHECK_KDA_TILE_H

#include "conformance.h"

/* bf16 operands, fp32 accumulators: max |got - ref| / max |ref| of o and of the final
 * state stays below this. */
#define TOL_KDA_TILE 1e-2

typedef enum kda_tile_gate_mode {
  KDA_TILE_Z_UNIFORM = 0, /* gate logits uniform in [-4, 4] */
  KDA_TILE_Z_EXTREME,     /* +-1e4 at random */
  KDA_TILE_Z_SATURATE,    /* +1e4 everywhere: g = lb on every channel */
  KDA_TILE_Z_KIMI,        /* Kimi Linear's unbounded gate, per-token decays -1e-4 .. -50
                             (kda_inputs.h's kimi 1) */
  KDA_TILE_Z_KIMI_MIX,    /* the unbounded gate, decays -1e-4 .. -4 and every fourth 16-token
                             run -4 .. -50: chunks within and beyond e^-75 (kimi 2) */
  KDA_TILE_Z_KIMI_EXTREME /* the unbounded gate on logits of +-1e4: decays of 0 and of about
                             -1e4 per token */
} kda_tile_gate_mode;

typedef struct kda_tile_case {
  int64_t B, T, H, K, V;
  const int32_t *lens; /* packed sequence lengths (then B = 1 and T = their sum), or NULL */
  int nlens;
  int h0;              /* random initial state */
  clmoe_dtype dtype;   /* storage of q, k, v, g, beta */
  clmoe_dtype out;     /* storage of o */
  kda_tile_gate_mode z;
  float lb;            /* lower bound; 0: -5 */
  int vs_portable;     /* also compare with the portable chunked forward (same tolerance); 2:
                          and with the device's token loop (clmoe_kda_recurrent) */
  int warps;           /* state work-group warps (0: default) */
  int lookahead;       /* state pass look-ahead in chunks (0: default) */
} kda_tile_case;

clmoe_status ck_kda_tile_case(clmoe_ctx *ctx, uint64_t seed, const kda_tile_case *kc,
                            clmoe_check_result *res);

/* The backward on tiles (clmoe_kda_backward_tile): max |got - ref| / max |ref| of each
 * gradient (dq, dk, dv, dg, dbeta, ddt_bias, dinitial_state) against the double reference's
 * analytic backward stays below this; for dA_log (per head one sum of B T K cancelling terms
 * of dg) the scale is the largest sum of those terms' magnitudes. bf16 operands in the state
 * gradient's chain and the factor gradients: about 3 roundings of 2^-9 deep. */
#define TOL_KDA_TILE_BWD 3e-2 /* measured on PoCL: <= 1.8e-2 over 40 seeds of small shapes */

/* Whether a case's gate is the unbounded one (the Z_KIMI modes). */
#define KDA_TILE_UNBOUNDED(kc)                                                              \
  ((kc)->z == KDA_TILE_Z_KIMI || (kc)->z == KDA_TILE_Z_KIMI_MIX || (kc)->z == KDA_TILE_Z_KIMI_EXTREME)

/* One backward case: kc's inputs, dO uniform in [-1, 1]; with kc->h0 also dfinal_state
 * (uniform) and dinitial_state; kc->out, kc->lookahead unused; kc->vs_portable also compares
 * with the portable clmoe_kda_backward (same tolerance). */
clmoe_status ck_kda_tile_bwd_case(clmoe_ctx *ctx, uint64_t seed, const kda_tile_case *kc,
                                clmoe_check_result *res);
/* The same after clmoe_kda_forward_tile kept the factors (clmoe_kda_tile_saved) for it: fails
 * when the forward kept none. */
clmoe_status ck_kda_tile_bwd_kept_case(clmoe_ctx *ctx, uint64_t seed, const kda_tile_case *kc,
                                     clmoe_check_result *res);
/* The same when the forward, asked to keep them, must keep nothing (a CLMOE_KDA_KEEP_MAX_MB
 * below its need): fails when it kept some; the backward recomputes them. */
clmoe_status ck_kda_tile_bwd_unkept_case(clmoe_ctx *ctx, uint64_t seed, const kda_tile_case *kc,
                                       clmoe_check_result *res);

#endif
