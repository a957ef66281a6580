/* Block Attention Residuals (MODEL.md section 5): before every sub-layer the input is a
 * softmax-weighted mix of the residual sources (the token embedding, each finished block's
 * sum of sub-layer outputs, the current block's partial sum), weighted per token:
 *   r_i = sqrt(mean_c b_i[c]^2 + eps),  l_i = sum_c w_c g_c b_i[c] / r_i,
 *   a = softmax_i(l),  h = sum_i a_i b_i
 * with a pseudo-query w [d] and a norm gain g [d] per sub-layer (w starts at zero: uniform
 * weights). The residual stream is fp32. */
#ifndef CLMOE_ATTN_RES_H
#define CLMOE_ATTN_RES_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sources [S, T, d] (S >= 1 sources stacked: a view of the model's block buffer),
 * w, gain [d]; h [T, d]; alpha [T, S] (saved for the backward; may be NULL). */
CLMOE_API clmoe_status clmoe_attn_res(clmoe_ctx *ctx, const clmoe_tensor *sources,
                                      const clmoe_tensor *w, const clmoe_tensor *gain, float eps,
                                      clmoe_tensor *h, clmoe_tensor *alpha);

/* Backward: dsources [S, T, d] is ADDED to (a source feeds many sub-layers); dw and dgain
 * [d] are overwritten. alpha is the forward's. */
CLMOE_API clmoe_status clmoe_attn_res_backward(clmoe_ctx *ctx, const clmoe_tensor *sources,
                                               const clmoe_tensor *w, const clmoe_tensor *gain,
                                               float eps, const clmoe_tensor *alpha,
                                               const clmoe_tensor *dh, clmoe_tensor *dsources,
                                               clmoe_tensor *dw, clmoe_tensor *dgain);

#ifdef __cplusplus
}
#endif
#endif
