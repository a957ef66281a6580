/* MLA attention on the matrix-unit tile interface (issue 9; kernels_cl/mla/mla_tc.cl, the
 * forward, and mla_tc_bwd.cl, the backward).
 *
 * clmoe_mla_attention and clmoe_mla_attention_backward (and so the layer) pick their
 * kernels by themselves: the tile kernels when the context's fast path is on
 * (clmoe_ctx_fastpath, see fastpath.h) and they cover the call, the portable tiled kernels
 * (kernels_cl/mla/mla_fwd.cl, mla_bwd.cl, fp32 arithmetic: the reference) otherwise. The
 * entries below name the kernels instead, for tests and benchmarks.
 *
 * The tile forward: flash-attention-2 style, 64 or 128 query rows per work-group (16 per
 * group of 32 lanes), key blocks of 64, products on the tile interface with bf16 operands
 * (fp32 inputs are rounded to bf16 on load; P is rounded to bf16 before P V) and fp32
 * accumulation; softmax statistics in fp32. Same outputs as clmoe_mla_attention (o, and lse
 * in the convention the backward consumes), to bf16 accuracy: about 1e-2 relative.
 * Covers Dn + Dr <= 256 and Dv <= 128 (the report's 128 + 64 and 128 included), packed
 * sequences, f32 or bf16 storage, within the device's local memory (about 44 KB forward,
 * 46 KB backward at the report's sizes; with 48 KB, as on NVIDIA, Dn + Dr up to 208 at
 * Dv 128) and work-group size (128 or 256 work-items); other calls get the portable
 * kernels (clmoe_mla_attention) or CLMOE_ERR_UNSUPPORTED (the entries below). */
#ifndef CLMOE_MLA_TC_H
#define CLMOE_MLA_TC_H

#include "mla.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum clmoe_mla_attn_path {
  CLMOE_MLA_ATTN_AUTO = 0,     /* as clmoe_mla_attention */
  CLMOE_MLA_ATTN_PORTABLE = 1, /* kernels_cl/mla/mla_fwd.cl, fp32 */
  CLMOE_MLA_ATTN_TILE = 2,     /* kernels_cl/mla/mla_tc.cl, query tile size chosen here */
  CLMOE_MLA_ATTN_TILE64 = 3,   /* the tile kernel with 64-row query tiles (4 warps) */
  CLMOE_MLA_ATTN_TILE128 = 4   /* ... with 128-row query tiles (8 warps) */
} clmoe_mla_attn_path;

/* clmoe_mla_attention through the named kernel. A tile path that does not cover the call
 * returns CLMOE_ERR_UNSUPPORTED (message: why). */
clmoe_status clmoe_mla_attention_path(clmoe_ctx *ctx, clmoe_mla_attn_path path, float scale,
                                      const clmoe_mla_attn_inputs *in, clmoe_tensor *o, clmoe_tensor *lse);

/* clmoe_mla_attention_backward through the named kernels: the portable ones (mla_bwd.cl) or
 * the tile ones (mla_tc_bwd.cl: 64-key and 64-query work-groups, bf16 operands q, k, v,
 * dO, P and dS, fp32 accumulation; TILE64 and TILE128 mean TILE here). o and lse may come
 * from either forward. */
clmoe_status clmoe_mla_attention_backward_path(clmoe_ctx *ctx, clmoe_mla_attn_path path, float scale,
                                               const clmoe_mla_attn_inputs *in, const clmoe_tensor *o,
                                               const clmoe_tensor *lse, const clmoe_tensor *dout,
                                               const clmoe_mla_attn_grads *grads);

/* Short name of a path ("auto", "portable", "tile", "tile64", "tile128"). */
const char *clmoe_mla_attn_path_name(clmoe_mla_attn_path path);

#ifdef __cplusplus
}
#endif
#endif
