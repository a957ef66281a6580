/* Causal depthwise short convolution over time with SiLU: KDA's ShortConv4 on q, k, v.
 * For a sequence and a channel c, with W taps (4 in the model):
 *   y[t, c] = silu(sum_{j < W} w[c, j] x[t - W + 1 + j, c]),
 * where inputs before the sequence's first token come from its conv state
 * [N, W - 1, C] (the W - 1 inputs that preceded it; zeros when no state is given).
 * Layouts: x, y [B, T, C] (channels last); w [C, W] f32; sequences as in KDA: B rows of T
 * tokens, or with cu_seqlens (int32 [N + 1], B = 1) N packed sequences. */
#ifndef CLMOE_CONV_H
#define CLMOE_CONV_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* state_in may be NULL (zeros); state_out [N, W - 1, C] (may be NULL) receives each
 * sequence's last W - 1 inputs: the state decoding continues from. x may be fp32 or bf16;
 * y fp32 or bf16. */
CLMOE_API clmoe_status clmoe_short_conv(clmoe_ctx *ctx, const clmoe_tensor *x,
                                        const clmoe_tensor *w, const clmoe_tensor *cu_seqlens,
                                        const clmoe_tensor *state_in, clmoe_tensor *y,
                                        clmoe_tensor *state_out);

/* Gradients of the above given dy: dx [B, T, C], dw [C, W] (overwritten), dstate_in
 * [N, W - 1, C] (may be NULL). fp32. */
CLMOE_API clmoe_status clmoe_short_conv_backward(clmoe_ctx *ctx, const clmoe_tensor *x,
                                                 const clmoe_tensor *w,
                                                 const clmoe_tensor *cu_seqlens,
                                                 const clmoe_tensor *state_in,
                                                 const clmoe_tensor *dy, clmoe_tensor *dx,
                                                 clmoe_tensor *dw, clmoe_tensor *dstate_in);

/* Decoding: one new input per sequence, x [N, C]; state [N, W - 1, C] is read and shifted
 * in place; y [N, C]. */
CLMOE_API clmoe_status clmoe_short_conv_step(clmoe_ctx *ctx, const clmoe_tensor *x,
                                             const clmoe_tensor *w, clmoe_tensor *state,
                                             clmoe_tensor *y);

#ifdef __cplusplus
}
#endif
#endif
