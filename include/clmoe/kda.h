/* KDA (Kimi Delta Attention): the gated delta rule with a per-channel, lower-bounded decay.
 * Math: shared/spec/MODEL.md section 2 and shared/spec/KERNELS.md.
 *
 * Per sequence and head, with state S [K, V] (fp32) and, for each token,
 *   qn, kn = q, k / sqrt(|.|^2 + 1e-6);  beta = sigmoid(beta logit);
 *     (the L2 norm of transformers' Kimi Linear and flash-linear-attention: x / sqrt(sum x^2
 *     + 1e-6), the same form and epsilon)
 *   g = lb sigmoid(exp(A_log[h]) (z + dt_bias[h]))   (per channel, in [lb, 0], lb in [-5, 0))
 *   S = diag(exp(g)) S;  u = v - S^T kn;  S += beta kn u^T;  o = scale S^T qn.
 * The gate, the L2 norm and the sigmoid are inside the op: callers pass raw logits (the
 * same function as flash-linear-attention's chunk_kda with use_gate_in_kernel and
 * use_qk_l2norm_in_kernel).
 *
 * Layouts (row-major): q, k, g (the gate logits z): [B, T, H, K]; v: [B, T, H, V];
 * beta: [B, T, H]; A_log: [H]; dt_bias: [H, K]; states: [N, H, K, V] fp32 with N = B, or
 * with cu_seqlens (int32 [N + 1], offsets into T, B = 1) N packed sequences of any
 * lengths, each with its own state. q, k, v, g, beta may be fp32 or bf16 storage; o may be
 * fp32 or bf16; everything is computed in fp32. K <= 128 and V <= 256. */
#ifndef CLMOE_KDA_H
#define CLMOE_KDA_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum clmoe_kda_gate {
  CLMOE_KDA_GATE_BOUNDED = 0,  /* lb sigmoid(.): every chunk factor stays within e^+-80 */
  CLMOE_KDA_GATE_UNBOUNDED = 1 /* -exp(A_log) softplus(.): Kimi Linear's form (transformers'
                                  KimiLinearForgetGate). The chunked forward forms its chunk
                                  factors pairwise for it (kda_fwd_pairwise.cl: finite and
                                  exact for any gate values; the tile path leaves it to that
                                  portable pass); the backward still anchors them: finite
                                  while no chunk's decay passes about e^-80 */
} clmoe_kda_gate;

typedef struct clmoe_kda_options {
  float scale;       /* multiplies o; 0 means 1 / sqrt(K) */
  float lower_bound; /* lb, in [-5, 0); 0 means -5 */
  clmoe_kda_gate gate;
} clmoe_kda_options;

typedef struct clmoe_kda_inputs {
  const clmoe_tensor *q, *k;          /* [B, T, H, K] */
  const clmoe_tensor *v;              /* [B, T, H, V] */
  const clmoe_tensor *g;              /* gate logits z [B, T, H, K] */
  const clmoe_tensor *beta;           /* logits [B, T, H] */
  const clmoe_tensor *A_log;          /* [H] f32 */
  const clmoe_tensor *dt_bias;        /* [H, K] f32 */
  const clmoe_tensor *initial_state;  /* [N, H, K, V] f32, or NULL for zeros */
  const clmoe_tensor *cu_seqlens;     /* i32 [N + 1], or NULL */
} clmoe_kda_inputs;

/* Chunked forward (16-token tiles): o [B, T, H, V]; final_state [N, H, K, V] may be NULL. */
CLMOE_API clmoe_status clmoe_kda_forward(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                         const clmoe_kda_inputs *in, clmoe_tensor *o,
                                         clmoe_tensor *final_state);

/* The same result by the token loop (reference and comparison path). */
CLMOE_API clmoe_status clmoe_kda_recurrent(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                           const clmoe_kda_inputs *in, clmoe_tensor *o,
                                           clmoe_tensor *final_state);

/* Decoding: one new token for each of N sequences. q, k, g: [N, H, K]; v: [N, H, V];
 * beta: [N, H]; state [N, H, K, V] f32 is read and updated in place; o: [N, H, V]. */
CLMOE_API clmoe_status clmoe_kda_decode_step(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                             const clmoe_tensor *q, const clmoe_tensor *k,
                                             const clmoe_tensor *v, const clmoe_tensor *g,
                                             const clmoe_tensor *beta, const clmoe_tensor *A_log,
                                             const clmoe_tensor *dt_bias, clmoe_tensor *state,
                                             clmoe_tensor *o);

/* Gradients (f32, overwritten). dq, dk, dg: [B, T, H, K]; dv: [B, T, H, V];
 * dbeta: [B, T, H]; dA_log: [H]; ddt_bias: [H, K]; dinitial_state: [N, H, K, V] or NULL. */
typedef struct clmoe_kda_grads {
  clmoe_tensor *dq, *dk, *dv, *dg, *dbeta;
  clmoe_tensor *dA_log, *ddt_bias;
  clmoe_tensor *dinitial_state;
} clmoe_kda_grads;

/* Backward of clmoe_kda_forward given dO [B, T, H, V] and optionally dfinal_state
 * [N, H, K, V] (NULL: zero). Recomputes what the forward did not keep. */
CLMOE_API clmoe_status clmoe_kda_backward(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                          const clmoe_kda_inputs *in, const clmoe_tensor *dout,
                                          const clmoe_tensor *dfinal_state,
                                          const clmoe_kda_grads *grads);

/* FLOPs of the chunked forward per the Kimi Linear report: B H (6 T D^2 + 3 T C D + T C^2)
 * with D = K (= V), C = 16. */
CLMOE_API double clmoe_kda_forward_flops(int64_t B, int64_t T, int64_t H, int64_t D);

#ifdef __cplusplus
}
#endif
#endif
