/* The KDA token mixer of the model (MODEL.md section 2): projections, short convolutions,
 * the low-rank decay gate, KDA, a per-head RMSNorm and the sigmoid output gate:
 *   q, k, v = SiLU(ShortConv(x W_q)), SiLU(ShortConv(x W_k)), SiLU(ShortConv(x W_v))
 *   z = (x W_a_down) W_a_up;  beta = x W_beta
 *   o = KDA(q, k, v, z, beta; A_log, dt_bias)          (L2 norms, sigmoid, gate inside)
 *   y = (sigmoid(x W_g) * RMSNorm_head(o; gain)) W_o
 *   (out_gate_rank r > 0, Kimi Linear's form: the gate's logits are (x W_g_down) W_g_up, with
 *   W_g_down [r, d] and W_g_up [H D, r] in place of W_g. Kimi Linear's o_norm is the same
 *   function: gain [D] shared by the heads, times RMSNorm over each head's D, times
 *   sigmoid(gate), with the model's rms_norm_eps.)
 * Weights are f32 in PyTorch's Linear layout [out, in] (W_q is [H D, d]): a projection is
 * one GEMM x W^T of the [tokens, d] activations. The backward ADDS to the gradients and to dx, so a
 * model can zero them once per step and accumulate. */
#ifndef CLMOE_KDA_LAYER_H
#define CLMOE_KDA_LAYER_H

#include "kda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clmoe_kda_layer {
  int64_t d, H, D, rank, conv_width;
  float norm_eps;
  clmoe_kda_options opts;
  clmoe_tensor w_q, w_k, w_v;          /* [H D, d] */
  clmoe_tensor w_beta;                 /* [H, d] */
  clmoe_tensor w_a_down;               /* [rank, d] */
  clmoe_tensor w_a_up;                 /* [H D, rank] */
  clmoe_tensor dt_bias;                /* [H, D] */
  clmoe_tensor A_log;                  /* [H] */
  clmoe_tensor conv_q, conv_k, conv_v; /* [H D, conv_width] */
  clmoe_tensor o_gain;                 /* [D], shared by the heads */
  clmoe_tensor w_g;                    /* [H D, d] (absent with out_gate_rank > 0) */
  clmoe_tensor w_o;                    /* [d, H D] */
  int64_t out_gate_rank;               /* r: 0 full-rank w_g, else the low-rank pair below */
  clmoe_tensor w_g_down;               /* [r, d] (absent with r = 0) */
  clmoe_tensor w_g_up;                 /* [H D, r] (absent with r = 0) */
} clmoe_kda_layer;

/* The most tensors a layer has in any form (clmoe_kda_layer_params' array size). */
#define CLMOE_KDA_LAYER_PARAMS 16

/* Allocates the parameters (contents undefined); destroy releases them. */
CLMOE_API clmoe_status clmoe_kda_layer_create(clmoe_ctx *ctx, clmoe_kda_layer *l, int64_t d,
                                              int64_t H, int64_t D, int64_t rank,
                                              int64_t conv_width, float norm_eps,
                                              const clmoe_kda_options *opts);
/* The same with out_gate_rank r >= 0: r > 0 makes w_g_down [r, d] and w_g_up [H D, r]
 * instead of w_g (Kimi Linear's g_a_proj, g_b_proj: r = D there). */
CLMOE_API clmoe_status clmoe_kda_layer_create_form(clmoe_ctx *ctx, clmoe_kda_layer *l, int64_t d,
                                                   int64_t H, int64_t D, int64_t rank,
                                                   int64_t conv_width, float norm_eps,
                                                   const clmoe_kda_options *opts,
                                                   int64_t out_gate_rank);
CLMOE_API void clmoe_kda_layer_destroy(clmoe_kda_layer *l);
/* The parameter tensors of the layer's form in a fixed order with their names and whether
 * weight decay applies (not to gains, biases, A_log); returns their number n (14 full rank, 15 low
 * rank). Entries n .. CLMOE_KDA_LAYER_PARAMS - 1 are the tensors absent in the form (empty
 * structs, names NULL): the arrays must hold CLMOE_KDA_LAYER_PARAMS entries. Order: w_q,
 * w_k, w_v, w_beta, w_a_down, w_a_up, dt_bias, A_log, conv_q, conv_k, conv_v, o_gain, then
 * w_g, w_o (full rank) or w_g_down, w_g_up, w_o (low rank). */
CLMOE_API int clmoe_kda_layer_params(clmoe_kda_layer *l, clmoe_tensor **tensors, const char **names,
                                     int *decay);
/* Initialisation (documented, seeded, the same on every device): matrices N(0, 0.02),
 * convolution taps N(0, 0.02) plus 1 on the newest tap (starts near the identity),
 * A_log 0, dt_bias such that the initial per-token decay rates -g are log-uniform in
 * [1e-3, 0.5] over the channels (memories of ~2 to ~1000 tokens), the norm gain 1. */
CLMOE_API clmoe_status clmoe_kda_layer_init(clmoe_kda_layer *l, uint64_t seed);

/* What KDA's tile forward keeps for its backward (an opaque holder, owned by the library:
 * made by clmoe_kda_layer_forward, released by clmoe_kda_layer_cache_destroy). */
struct clmoe_kda_kept;

/* Activations the forward keeps for the backward ([tokens, .] f32). */
typedef struct clmoe_kda_layer_cache {
  clmoe_tensor xq, xk, xv;   /* pre-convolution projections [N, H D] */
  clmoe_tensor q, k, v;      /* after convolution and SiLU [N, H D] */
  clmoe_tensor za;           /* x W_a_down [N, rank] */
  clmoe_tensor z;            /* gate logits [N, H D] */
  clmoe_tensor beta;         /* beta logits [N, H] */
  clmoe_tensor o;            /* KDA output [N, H D] */
  clmoe_tensor rstd;         /* per-head norm [N H] */
  clmoe_tensor on;           /* RMSNorm_head(o) [N, H D] */
  clmoe_tensor gs;           /* sigmoid(x W_g) [N, H D] */
  clmoe_tensor gd;           /* x W_g_down [N, r] (low-rank output gate only) */
  struct clmoe_kda_kept *kda_kept; /* (library-owned) what KDA's tile forward keeps for its
                                      backward; NULL: nothing */
} clmoe_kda_layer_cache;
CLMOE_API void clmoe_kda_layer_cache_destroy(clmoe_kda_layer_cache *c);

/* Recurrent state for inference: KDA [Nseq, H, D, D] and the three conv states
 * [Nseq, conv_width - 1, H D]. */
typedef struct clmoe_kda_layer_state {
  clmoe_tensor kda, conv_q, conv_k, conv_v;
} clmoe_kda_layer_state;
CLMOE_API clmoe_status clmoe_kda_layer_state_create(clmoe_ctx *ctx, const clmoe_kda_layer *l,
                                                    int64_t nseq, clmoe_kda_layer_state *s);
CLMOE_API void clmoe_kda_layer_state_destroy(clmoe_kda_layer_state *s);

/* x [B, T, d] -> y [B, T, d] (overwritten). cu_seqlens as in KDA (B = 1) or NULL. cache may
 * be NULL (no backward follows). state may be NULL (training: zero states); when given, its
 * states are read as the sequences' starting states and replaced by their final ones
 * (prefill, chunked prefill). */
CLMOE_API clmoe_status clmoe_kda_layer_forward(clmoe_ctx *ctx, const clmoe_kda_layer *l,
                                               const clmoe_tensor *x,
                                               const clmoe_tensor *cu_seqlens, clmoe_tensor *y,
                                               clmoe_kda_layer_cache *cache,
                                               clmoe_kda_layer_state *state);

/* dy [B, T, d]: adds the parameter gradients to grads (a clmoe_kda_layer of the same sizes)
 * and dx [B, T, d] += the input gradient. */
CLMOE_API clmoe_status clmoe_kda_layer_backward(clmoe_ctx *ctx, const clmoe_kda_layer *l,
                                                const clmoe_tensor *x,
                                                const clmoe_tensor *cu_seqlens,
                                                const clmoe_kda_layer_cache *cache,
                                                const clmoe_tensor *dy, clmoe_kda_layer *grads,
                                                clmoe_tensor *dx);

/* Decoding: x [Nseq, d], one token per sequence; state updated in place; y [Nseq, d]. */
CLMOE_API clmoe_status clmoe_kda_layer_step(clmoe_ctx *ctx, const clmoe_kda_layer *l,
                                            const clmoe_tensor *x, clmoe_kda_layer_state *state,
                                            clmoe_tensor *y);

#ifdef __cplusplus
}
#endif
#endif
