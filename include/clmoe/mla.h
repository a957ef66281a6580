/* Gated MLA (multi-head latent attention) with NoPE: the exact-retrieval layers of the
 * hybrid (one in four). Math: shared/spec/MODEL.md section 3.
 *
 * Per token x [d], with H heads, qk = Dn ("nope") + Dr (shared) dims and v = Dv dims:
 *   c_q = RMSNorm(W_dq x) (gain q_norm);   q = W_uq c_q          -> per head [q_n (Dn); q_r (Dr)]
 *     (q_rank 0, Kimi Linear's form: q = W_q x, no query latent and no q_norm)
 *   [c_kv; k_r] = W_dkv x;  c = RMSNorm(c_kv) (gain kv_norm);  W_ukv c -> per head [k_n (Dn); v (Dv)]
 *   key_h = [k_n,h; k_r] (k_r shared by all heads, never rotated: NoPE)
 *   o_h = softmax_causal(q_h . key_h * scale) V_h,  scale = 1/sqrt(Dn + Dr)
 *   y = W_o [ sigmoid(W_g x) * concat_h o_h ]    (without w_g, Kimi Linear's form: y = W_o concat_h o_h)
 * Weights are [out, in] row-major (PyTorch's Linear layout); no biases.
 *
 * Three levels of API:
 * 1. The bare attention op (clmoe_mla_attention*): tiled flash attention with an online
 *    softmax; never materialises a T x T matrix (scratch is O(T)); saves the log-sum-exp
 *    per row; packed variable-length sequences through cu_seqlens. The backward recomputes
 *    the probabilities from the log-sum-exp (flash-attention-2 style, no atomics).
 * 2. The whole layer (clmoe_mla_forward / clmoe_mla_backward): x [B, T, d] -> y, with the
 *    weights in clmoe_mla_weights (create/destroy here, or a struct the caller fills).
 * 3. Decoding in absorbed form (clmoe_mla_cache, clmoe_mla_prefill, clmoe_mla_decode_step):
 *    the cache holds only c (kv_rank) and k_r (Dr) per token, in blocks of 64 tokens with a
 *    block table per sequence; W_uk is folded into the query and W_uv into the output. */
#ifndef CLMOE_MLA_H
#define CLMOE_MLA_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- 1. the attention op ------------------------------------------------------------- */

/* Layouts (row-major): q [B, T, H, Dn + Dr], k_nope [B, T, H, Dn], k_rope [B, T, Dr] (one
 * vector per token, shared by all heads), v [B, T, H, Dv]; with cu_seqlens (i32 [N + 1]
 * offsets into T, B = 1) N packed sequences, else B sequences of T tokens. Attention is
 * causal inside each sequence. q, k_nope, k_rope, v: all f32 or all bf16 storage; o
 * [B, T, H, Dv] f32 or bf16; lse [B, T, H] f32 (natural log of sum_j exp(scale q.k_j)).
 * Arithmetic is fp32. Supported: 1 <= Dn, Dr, Dv and Dn + Dr <= 256, Dv <= 256, within the
 * device's local memory (Dn + Dr = 192, Dv = 128 needs about 44 KB). */
typedef struct clmoe_mla_attn_inputs {
  const clmoe_tensor *q;          /* [B, T, H, Dn + Dr] */
  const clmoe_tensor *k_nope;     /* [B, T, H, Dn] */
  const clmoe_tensor *k_rope;     /* [B, T, Dr] */
  const clmoe_tensor *v;          /* [B, T, H, Dv] */
  const clmoe_tensor *cu_seqlens; /* i32 [N + 1], or NULL */
} clmoe_mla_attn_inputs;

/* Tiled forward. scale 0 means 1/sqrt(Dn + Dr). lse may be NULL. */
CLMOE_API clmoe_status clmoe_mla_attention(clmoe_ctx *ctx, float scale,
                                           const clmoe_mla_attn_inputs *in, clmoe_tensor *o,
                                           clmoe_tensor *lse);

/* The same result through a materialised score matrix [B*T, H, Lmax] (Lmax the longest
 * sequence): the on-device reference and the benchmark's baseline. Memory O(T^2). */
CLMOE_API clmoe_status clmoe_mla_attention_naive(clmoe_ctx *ctx, float scale,
                                                 const clmoe_mla_attn_inputs *in, clmoe_tensor *o,
                                                 clmoe_tensor *lse);

/* Gradients (f32, overwritten) of the forward given its o and lse and dO [B, T, H, Dv] f32:
 * dq [B, T, H, Dn + Dr], dk_nope [B, T, H, Dn], dk_rope [B, T, Dr] (summed over heads in a
 * fixed order), dv [B, T, H, Dv]. Scratch: [B*T, H] + [B*T, H, Dr] floats. */
typedef struct clmoe_mla_attn_grads {
  clmoe_tensor *dq, *dk_nope, *dk_rope, *dv;
} clmoe_mla_attn_grads;
CLMOE_API clmoe_status clmoe_mla_attention_backward(clmoe_ctx *ctx, float scale,
                                                    const clmoe_mla_attn_inputs *in,
                                                    const clmoe_tensor *o, const clmoe_tensor *lse,
                                                    const clmoe_tensor *dout,
                                                    const clmoe_mla_attn_grads *grads);

/* Forward FLOPs of causal attention over sequences of the given lengths (2 per multiply-add,
 * counting only the unmasked pairs): 2 H (Dqk + Dv) sum_n L_n (L_n + 1) / 2. */
CLMOE_API double clmoe_mla_attention_flops(const int64_t *lengths, int64_t nseq, int64_t H,
                                           int64_t Dqk, int64_t Dv);

/* ---- 2. the layer ---------------------------------------------------------------------- */

typedef struct clmoe_mla_config {
  int64_t d_model;  /* d */
  int64_t n_heads;  /* H */
  int64_t q_rank;   /* rq (report 1536); 0: q = W_q x directly (no w_dq, no q_norm) */
  int64_t kv_rank;  /* dc (report 512) */
  int64_t qk_nope;  /* Dn (report 128) */
  int64_t qk_rope;  /* Dr (report 64), shared by all heads */
  int64_t v_dim;    /* Dv (report 128) */
  float norm_eps;   /* RMSNorm epsilon; 0 means 1e-5 */
  float scale;      /* softmax scale; 0 means 1/sqrt(Dn + Dr) */
} clmoe_mla_config;

/* Checks the sizes (every one >= 1; the attention limits above). */
CLMOE_API clmoe_status clmoe_mla_config_check(const clmoe_mla_config *cfg);

/* The layer's parameters, f32, contiguous, [out, in]. Either clmoe_mla_weights_create
 * (then clmoe_mla_weights_destroy) or tensors the caller owns with these shapes. A form
 * leaves some absent (zeroed structs: never created, read or written): w_dq and q_norm
 * with q_rank 0, where w_uq holds W_q [H (Dn + Dr), d]; w_g in the ungated form, which the
 * layer reads from the weights: without w_g, y = W_o o (gradients then lack w_g too). */
typedef struct clmoe_mla_weights {
  clmoe_tensor w_dq;    /* [rq, d] */
  clmoe_tensor q_norm;  /* [rq] RMSNorm gain of c_q */
  clmoe_tensor w_uq;    /* [H (Dn + Dr), rq]: per head rows [q_n; q_r] */
  clmoe_tensor w_dkv;   /* [dc + Dr, d]: rows [c_kv; k_r] */
  clmoe_tensor kv_norm; /* [dc] RMSNorm gain of c_kv (not of k_r) */
  clmoe_tensor w_ukv;   /* [H (Dn + Dv), dc]: per head rows [k_n; v] */
  clmoe_tensor w_g;     /* [H Dv, d] output gate */
  clmoe_tensor w_o;     /* [d, H Dv] */
} clmoe_mla_weights;
#define CLMOE_MLA_NWEIGHTS 8

/* Names ("w_dq", ...) and shapes of the 8 tensors in struct order (i in [0, 8)); the shape
 * in cfg's form: ndim 0 for w_dq and q_norm with q_rank 0 (w_g's shape is that of the gated
 * form). */
CLMOE_API const char *clmoe_mla_weight_name(int i);
CLMOE_API void clmoe_mla_weight_shape(const clmoe_mla_config *cfg, int i, int *ndim,
                                      int64_t shape[2]);
/* The name of tensor i of w (a parameter registry's): NULL when w lacks it (absent in its
 * form), "w_q" for w_uq with q_rank 0, else clmoe_mla_weight_name(i). */
CLMOE_API const char *clmoe_mla_weight_name_in(const clmoe_mla_config *cfg,
                                               const clmoe_mla_weights *w, int i);
/* Pointer to the i-th tensor of a weights (or grads) struct. */
CLMOE_API clmoe_tensor *clmoe_mla_weight_at(clmoe_mla_weights *w, int i);

/* Creates every tensor of cfg's form with the output gate (contents undefined); destroy
 * releases them (safe on a zeroed struct). */
CLMOE_API clmoe_status clmoe_mla_weights_create(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                                clmoe_mla_weights *w);
/* The same with output_gate 0 or 1: 0 leaves w_g absent (Kimi Linear's y = W_o o). */
CLMOE_API clmoe_status clmoe_mla_weights_create_form(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                                     int output_gate, clmoe_mla_weights *w);
CLMOE_API void clmoe_mla_weights_destroy(clmoe_mla_weights *w);
/* Suggested initialisation (MODEL.md section 7): matrices N(0, stddev), gains 1. Tensor i
 * uses seed + i. */
CLMOE_API clmoe_status clmoe_mla_weights_init(clmoe_mla_weights *w, uint64_t seed, float stddev);

/* What the forward keeps for the backward (M = B T tokens), f32. Release with
 * clmoe_mla_saved_release (safe on a zeroed struct). About 2 rq + 2 dc + Dr + 2 +
 * H (Dn + Dr + Dn + 3 Dv + 1) floats per token. */
typedef struct clmoe_mla_saved {
  int64_t B, T;
  clmoe_tensor cq_raw, cq, rstd_q; /* [M, rq], [M, rq], [M] (not made with q_rank 0) */
  clmoe_tensor q;                  /* [M, H, Dn + Dr] */
  clmoe_tensor ckv_raw, c, rstd_kv;/* [M, dc], [M, dc], [M] */
  clmoe_tensor kr;                 /* [M, Dr] */
  clmoe_tensor kv;                 /* [M, H, Dn + Dv] */
  clmoe_tensor o, lse;             /* [M, H, Dv], [M, H] */
  clmoe_tensor gate, u;            /* sigmoid(W_g x) and gate * o: [M, H Dv] (not made without w_g) */
} clmoe_mla_saved;
CLMOE_API void clmoe_mla_saved_release(clmoe_mla_saved *s);

/* y [B, T, d] = MLA(x [B, T, d]) (f32); cu_seqlens as for the attention op. saved may be
 * NULL (inference); otherwise it is filled (release it after the backward). */
CLMOE_API clmoe_status clmoe_mla_forward(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                         const clmoe_mla_weights *w, const clmoe_tensor *x,
                                         const clmoe_tensor *cu_seqlens, clmoe_tensor *y,
                                         clmoe_mla_saved *saved);

/* Backward from dy [B, T, d]: dx [B, T, d] (may be NULL) and the weight gradients in a
 * clmoe_mla_weights struct of the same shapes (every tensor overwritten). x, cu_seqlens and
 * saved must be those of the forward. */
CLMOE_API clmoe_status clmoe_mla_backward(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                          const clmoe_mla_weights *w, const clmoe_tensor *x,
                                          const clmoe_tensor *cu_seqlens,
                                          const clmoe_mla_saved *saved, const clmoe_tensor *dy,
                                          clmoe_tensor *dx, clmoe_mla_weights *grads);

/* ---- 3. decoding ------------------------------------------------------------------------ */

/* A paged cache of one MLA layer for nseq sequences: per token the normed latent c (dc)
 * and the shared key k_r (Dr), stored f32 or bf16, in blocks of CLMOE_MLA_CACHE_BLOCK
 * tokens. Blocks come from a pool that doubles when full (amortised: never a copy per
 * token); each sequence has its own block table and length. */
#define CLMOE_MLA_CACHE_BLOCK 64
typedef struct clmoe_mla_cache clmoe_mla_cache;

/* reserve_tokens: pool capacity to start with (0: one block per sequence). */
CLMOE_API clmoe_status clmoe_mla_cache_create(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                              int64_t nseq, clmoe_dtype storage,
                                              int64_t reserve_tokens, clmoe_mla_cache **cache);
CLMOE_API void clmoe_mla_cache_destroy(clmoe_mla_cache *cache);
CLMOE_API int64_t clmoe_mla_cache_nseq(const clmoe_mla_cache *cache);
/* Tokens cached for sequence seq (-1 when seq is out of range). */
CLMOE_API int64_t clmoe_mla_cache_length(const clmoe_mla_cache *cache, int64_t seq);
/* Empties sequence seq, returning its blocks to the pool. */
CLMOE_API clmoe_status clmoe_mla_cache_reset(clmoe_mla_cache *cache, int64_t seq);
/* Bytes per cached token: (dc + Dr) x element size (576 x 2 for the report's model in bf16). */
CLMOE_API size_t clmoe_mla_cache_token_bytes(const clmoe_mla_cache *cache);
/* Device bytes the cache holds (pool, tables). */
CLMOE_API size_t clmoe_mla_cache_device_bytes(const clmoe_mla_cache *cache);

/* Runs the training-form forward over a batch of prompts (x [B, T, d], or B = 1 packed with
 * cu_seqlens) into y, and writes every token's c and k_r to the cache in the same pass.
 * Prompt n goes to cache sequence slots[n] (slots NULL: n), which must be empty. */
CLMOE_API clmoe_status clmoe_mla_prefill(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                         const clmoe_mla_weights *w, clmoe_mla_cache *cache,
                                         const clmoe_tensor *x, const clmoe_tensor *cu_seqlens,
                                         const int32_t *slots, clmoe_tensor *y);

/* One new token for each of the cache's N sequences (lengths may differ): x [N, d] -> y
 * [N, d]. Appends the token's c and k_r, then attends over the whole cache of its sequence
 * in absorbed form (q_c = W_uk^T q_n per head; o = W_uv (sum_t p_t c_t)). */
CLMOE_API clmoe_status clmoe_mla_decode_step(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                             const clmoe_mla_weights *w, clmoe_mla_cache *cache,
                                             const clmoe_tensor *x, clmoe_tensor *y);

/* Appends new tokens to sequences that may already hold context (chunked prefill): x
 * [M, d] holds counts[n] tokens of cache sequence n for n = 0 .. nseq - 1 in that order
 * (sum M; counts may be 0). Every new token's c and k_r are cached, then each attends
 * causally to its sequence's earlier tokens and itself in absorbed form: a tiled kernel
 * (kernels_cl/mla/mla_extend.cl) whose work-groups share each cache tile among several tokens
 * and all heads; O(M x context) work, O(M) extra memory; y [M, d]. */
CLMOE_API clmoe_status clmoe_mla_extend(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                        const clmoe_mla_weights *w, clmoe_mla_cache *cache,
                                        const clmoe_tensor *x, const int64_t *counts,
                                        clmoe_tensor *y);

/* The same pass in the training form (lib/mla/mla_extend_flash.c): appends the new tokens'
 * c and k_r, then decompresses the whole context of every extended sequence from the cache
 * (per head [k_n; v] = W_ukv c, one GEMM; k_r and bf16 rows as stored) and runs the tiled
 * flash forward of clmoe_mla_attention with the new queries shifted to their positions
 * (key tiles anchored at each sequence's first token, so sums run in the one-pass order).
 * Work O(M x context) at (Dn + Dr + Dv) multiply-adds per (query, key, head), against
 * (2 dc + Dr) in absorbed form, plus O(context) for the decompression; extra memory
 * (dc + Dr + H (Dn + Dv)) floats per context token of the extended sequences, for the pass. */
CLMOE_API clmoe_status clmoe_mla_extend_flash(clmoe_ctx *ctx, const clmoe_mla_config *cfg,
                                              const clmoe_mla_weights *w, clmoe_mla_cache *cache,
                                              const clmoe_tensor *x, const int64_t *counts,
                                              clmoe_tensor *y);
/* 1 when the training form needs no more multiply-adds than the absorbed form for a pass of
 * counts[n] new tokens over the cache's current lengths (a FLOP count, the same on every
 * device): true from about dc (Dn + Dv) / (2 dc - Dn - Dv) new tokens per sequence (170 at
 * the report's dims, 1-token passes stay absorbed). */
CLMOE_API int clmoe_mla_extend_flash_cheaper(const clmoe_mla_config *cfg,
                                             const clmoe_mla_cache *cache, const int64_t *counts);

#ifdef __cplusplus
}
#endif
#endif
