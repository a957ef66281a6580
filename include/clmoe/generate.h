/* Inference: a model from a clmoe-train checkpoint, a batch of sequences with their decoding
 * state, chunked prefill, one-token steps and sampling. For embedding clmoe in a server.
 *
 * The state of a sequence is constant-size for the KDA layers (per layer: the recurrent
 * state [H, D, D] and the short-convolution states [conv_width - 1, H D] of q, k and v) and
 * grows by (kv_rank + qk_rope_dim) numbers per token for each MLA layer (the latent cache:
 * 576 with the report's dims). Block AttnRes mixes over depth per token and needs no state.
 * MoE layers route with their balancing biases frozen (as loaded).
 *
 *   (CHECK: the caller's handling of a status other than CLMOE_OK, e.g. print
 *   clmoe_last_error() and stop)
 *   clmoe_model *m;  clmoe_gen_state *g;  float *logits = malloc(n * V * sizeof *logits);
 *   CHECK(clmoe_gen_load(ctx, "run/checkpoint.safetensors", &m, NULL));
 *   CHECK(clmoe_gen_state_create(m, n, NULL, &g));
 *   CHECK(clmoe_gen_prefill(g, prompts, lengths, logits, NULL));  (last-token logits)
 *   for (step...) {
 *     for (s...) CHECK(clmoe_gen_sample(&sp, logits + s * V, V, s, step, &next[s]));
 *     CHECK(clmoe_gen_step(g, next, logits));
 *   }
 *   clmoe_gen_state_destroy(g);  clmoe_model_destroy(m);
 *
 * The logits of prefill-then-step equal those of one clmoe_model_forward over the same tokens
 * to fp32 rounding (tests/unit/test_generate.c checks 1e-4 relative), whatever the chunking. */
#ifndef CLMOE_GENERATE_H
#define CLMOE_GENERATE_H

#include "kda_layer.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- loading ------------------------------------------------------------------------ */

/* Loads a checkpoint written by clmoe-train (or clmoe_params_save with a "config" metadata
 * entry): parses its config, creates the model and loads every parameter ("param/NAME")
 * and buffer ("buffer/NAME", the MoE biases); optimizer moments in the file are ignored.
 * The model is for inference: its gradients and moments are released (backward fails).
 * Errors name the file and the tensor: a missing, truncated or corrupt file
 * (CLMOE_ERR_IO / CLMOE_ERR_FORMAT), no "config" entry, a config that does not parse, a
 * tensor missing or of another shape or dtype (a checkpoint whose tensors belong to another
 * config), the metadata or a tensor read that fails its checksum, a checkpoint of format 2
 * without checksums (see include/clmoe/params.h). meta (may be NULL; zero-initialised; free
 * with clmoe_ckpt_meta_free) receives the metadata but the checksums ("config", "step",
 * "data", ...; no "clmoe_format": a checkpoint from before checksums, loaded unverified). */
CLMOE_API clmoe_status clmoe_gen_load(clmoe_ctx *ctx, const char *path, clmoe_model **model,
                                      clmoe_ckpt_meta *meta);
/* The same with the routed experts spread over the ranks of dist (expert parallelism): each
 * rank holds the experts `map` gives it (NULL: the even map; replicas allowed) and the rest
 * whole. Every rank must then make the same calls (prefill, step) with the same tokens, in
 * the same order: the MoE layers exchange rows between the ranks. The logits agree with one
 * process's within fp32 rounding; callers that sample should take one rank's tokens
 * (e.g. rank 0's, summed into zeros elsewhere) so that every rank feeds the same ones. */
struct clmoe_dist;
struct clmoe_expert_map;
CLMOE_API clmoe_status clmoe_gen_load_ep(clmoe_ctx *ctx, const char *path, struct clmoe_dist *dist,
                                         const struct clmoe_expert_map *map, clmoe_model **model,
                                         clmoe_ckpt_meta *meta);
/* clmoe_gen_load (dist NULL; map then unused) or clmoe_gen_load_ep with the matrices (those
 * clmoe_gen_set_weights names) stored as `weights`, CLMOE_F32 or CLMOE_BF16. With CLMOE_BF16
 * they are created as bf16 tensors and each is filled from the file's fp32 values through a
 * host buffer of that one tensor, rounded to nearest even: no fp32 buffer of them is ever
 * allocated on the device, and the model is the one clmoe_gen_load then
 * clmoe_gen_set_weights(CLMOE_BF16) gives, bit for bit, in about half the peak memory. */
CLMOE_API clmoe_status clmoe_gen_load_weights(clmoe_ctx *ctx, const char *path, struct clmoe_dist *dist,
                                              const struct clmoe_expert_map *map, clmoe_dtype weights,
                                              clmoe_model **model, clmoe_ckpt_meta *meta);

/* ---- weights ------------------------------------------------------------------------ */

/* Stores a loaded model's matrices (the weights of its products: the head, every layer's
 * w_* matrices, the router, the routed and shared experts; not the embedding table, gains,
 * biases, A_log, dt_bias or the short convolutions) as dtype. CLMOE_BF16 rounds each to
 * nearest even on the device and frees its fp32 tensor once the copy is made, so the
 * weights then take about half the bytes (clmoe_gen_memory_usage); CLMOE_F32 keeps them
 * (an error on a model already in bf16). Decode steps read bf16 matrices as such, summing in
 * fp32; prefill passes widen one layer's matrices at a time to fp32 for the pass. The logits
 * then move by bf16 rounding of the weights (about 1e-2 relative). The model's fp32
 * matrices are all held until then (and their buffers stay in the context's pool): a
 * model loaded with clmoe_gen_load_weights(CLMOE_BF16) never has them. Expert-parallel
 * models too (each rank's expert stacks). Call before clmoe_gen_state_create. */
CLMOE_API clmoe_status clmoe_gen_set_weights(clmoe_model *model, clmoe_dtype dtype);
/* An inference model of cfg with random weights (clmoe_model_init's values for seed), for
 * benchmarks without a checkpoint: with CLMOE_BF16 its matrices are created as bf16 tensors
 * and filled directly (no fp32 buffer of them is ever allocated). */
CLMOE_API clmoe_status clmoe_gen_random_model(clmoe_ctx *ctx, const clmoe_config *cfg, uint64_t seed,
                                              clmoe_dtype dtype, clmoe_model **model);
/* CLMOE_BF16 when the model's matrices are stored in bf16, else CLMOE_F32. */
CLMOE_API clmoe_dtype clmoe_gen_weights(const clmoe_model *model);

/* The few-token products of a decode step (lib/ops/ops_gemv.c), for checks and benchmarks:
 * y_i [T, n_i] = (accumulate ? y_i : 0) + in(x) W_i^T for n (1 to 6) matrices W_i [n_i, K]
 * that share x [T, K] (f32); the W_i all fp32 or all bf16, sums in fp32. in: x itself,
 * RMSNorm(x) times gain [K] (eps), glu(x, x2) (glu a clmoe_glu), x sigmoid(x2), or
 * sigmoid(x2) times the RMSNorm of each group of glu columns of x (eps) times gain [glu]
 * (glu a multiple of 8 dividing K, at most 64 groups: a KDA layer's gated output norm over
 * its heads). Each output's sum runs in a fixed order on every device. */
typedef enum clmoe_gen_gemv_input {
  CLMOE_GEN_GEMV_PLAIN = 0,
  CLMOE_GEN_GEMV_RMSNORM = 1,
  CLMOE_GEN_GEMV_GLU = 2,
  CLMOE_GEN_GEMV_GATE = 3,
  CLMOE_GEN_GEMV_GROUP_NORM_GATE = 4
} clmoe_gen_gemv_input;
CLMOE_API clmoe_status clmoe_gen_gemv(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *x2,
                                      const clmoe_tensor *gain, clmoe_gen_gemv_input in, int glu, float eps,
                                      int accumulate, int n, const clmoe_tensor *const *w,
                                      clmoe_tensor *const *y);
/* A decode step's Block AttnRes and the next sub-layer's RMSNorm in one launch, for checks:
 * h [T, d] = AttnRes of src [S <= 32, T, d] (f32, contiguous) with w and gain [d] (h equals
 * clmoe_attn_res's to the bit), hn [T, d] = h rstd norm, rstd = 1 / sqrt(mean(h^2) + eps).
 * h and hn start their buffers. */
CLMOE_API clmoe_status clmoe_gen_attn_res_norm(clmoe_ctx *ctx, const clmoe_tensor *src, const clmoe_tensor *w,
                                               const clmoe_tensor *gain, const clmoe_tensor *norm, float eps,
                                               clmoe_tensor *h, clmoe_tensor *hn);

/* A KDA layer's decode step as generation runs it (its GEMV launches and the one-launch
 * convolutions and recurrent update), for checks against clmoe_kda_layer_step: x, y [N, d]
 * f32, one token per sequence of state; the layer's matrices fp32. */
CLMOE_API clmoe_status clmoe_gen_kda_step(clmoe_ctx *ctx, const clmoe_kda_layer *layer, const clmoe_tensor *x,
                                          clmoe_kda_layer_state *state, clmoe_tensor *y);

/* ids [R] (i32) = the greedy token of each row of logits [R, V] (f32, whole tensors): the
 * largest logit, the lowest index on ties (clmoe_gen_sample's greedy rule), or -1 - i for a
 * row whose lowest-index NaN is logit i. One launch; what clmoe_gen_step_greedy reads back
 * instead of the logits (public for checks). */
CLMOE_API clmoe_status clmoe_gen_argmax(clmoe_ctx *ctx, const clmoe_tensor *logits, clmoe_tensor *ids);

/* ---- state -------------------------------------------------------------------------- */

/* How prefill passes over sequences that hold context attend to the MLA cache. */
typedef enum clmoe_gen_extend_form {
  CLMOE_GEN_EXTEND_AUTO = 0,     /* per pass, the form with fewer multiply-adds (default) */
  CLMOE_GEN_EXTEND_TRAINING = 1, /* clmoe_mla_extend_flash: decompressed K/V, flash forward */
  CLMOE_GEN_EXTEND_ABSORBED = 2  /* clmoe_mla_extend: absorbed form over the latent cache */
} clmoe_gen_extend_form;

typedef struct clmoe_gen_options {
  int64_t prefill_chunk;  /* tokens per sequence per prefill pass; 0: 2048 */
  clmoe_dtype cache_dtype; /* MLA latent cache storage: CLMOE_F32 (default, 0) or CLMOE_BF16 */
  int64_t reserve_tokens; /* MLA cache capacity to allocate up front (0: grow on demand) */
  clmoe_gen_extend_form extend_form; /* later prefill passes (docs/generate.md) */
} clmoe_gen_options;

typedef struct clmoe_gen_state clmoe_gen_state;

/* State for nseq sequences of `model` (which must outlive it), all empty. opts may be NULL. */
CLMOE_API clmoe_status clmoe_gen_state_create(clmoe_model *model, int64_t nseq,
                                              const clmoe_gen_options *opts,
                                              clmoe_gen_state **state);
CLMOE_API void clmoe_gen_state_destroy(clmoe_gen_state *state); /* NULL is fine */
CLMOE_API int64_t clmoe_gen_state_nseq(const clmoe_gen_state *state);
/* Tokens seen by sequence seq (prefill plus steps); -1 when seq is out of range. */
CLMOE_API int64_t clmoe_gen_length(const clmoe_gen_state *state, int64_t seq);
/* Empties sequence seq (zero KDA states, cache blocks returned), to start a new one in it. */
CLMOE_API clmoe_status clmoe_gen_reset(clmoe_gen_state *state, int64_t seq);

/* Device memory by kind, bytes. */
typedef struct clmoe_gen_memory {
  size_t weights;          /* parameters and buffers of the model */
  size_t kda_state;        /* recurrent and convolution states (constant in the context) */
  size_t mla_cache;        /* latent cache pools and tables as allocated (grows by doubling) */
  size_t mla_cache_used;   /* tokens cached x bytes per token x MLA layers */
  size_t mla_token_bytes;  /* bytes per token over all MLA layers */
  int64_t tokens;          /* tokens held over all sequences */
} clmoe_gen_memory;
CLMOE_API void clmoe_gen_memory_usage(const clmoe_gen_state *state, clmoe_gen_memory *mem);

/* ---- running ------------------------------------------------------------------------ */

/* Appends lengths[s] tokens (tokens[s], host, in [0, vocab)) to each sequence s (lengths may
 * be 0: that sequence is left as it is; tokens[s] may then be NULL), in passes of at most
 * prefill_chunk tokens per sequence that carry the KDA states and the MLA cache from pass to
 * pass. The first pass over empty sequences runs the tiled (training-form) MLA; later
 * passes attend to the cache in absorbed form. last_logits (host [nseq, vocab], may be
 * NULL) receives, for every sequence with lengths[s] > 0, the logits after its last new
 * token (other rows are left alone). all_logits (host [sum lengths, vocab], may be NULL)
 * receives every new token's logits, sequences in order (for tests and scoring).
 * On failure the state is undefined: reset the sequences. */
CLMOE_API clmoe_status clmoe_gen_prefill(clmoe_gen_state *state, const int32_t *const *tokens,
                                         const int64_t *lengths, float *last_logits,
                                         float *all_logits);

/* One token for every sequence (tokens host [nseq]; a finished sequence may be fed any
 * valid token and its output ignored): the recurrent KDA step, the absorbed MLA step over
 * the cache and the MoE layers; logits host [nseq, vocab] (may be NULL). */
CLMOE_API clmoe_status clmoe_gen_step(clmoe_gen_state *state, const int32_t *tokens, float *logits);

/* clmoe_gen_step whose next tokens are the greedy ones (clmoe_gen_sample's greedy rule:
 * the largest logit, the lowest index on ties), chosen on the device: next host [nseq]
 * gets them and only they come back, not the [nseq, vocab] logits (logits may be NULL;
 * given, they are read too). A NaN logit is CLMOE_ERR_INVALID_ARGUMENT naming it. */
CLMOE_API clmoe_status clmoe_gen_step_greedy(clmoe_gen_state *state, const int32_t *tokens, int32_t *next,
                                             float *logits);

/* n greedy decode steps for every sequence without the host in the loop: each step's
 * greedy tokens, chosen on the device, are the next step's input on the device, and their
 * copies to the host are enqueued without waiting; one wait at the end. tokens host [nseq]:
 * the first step's input; out host [n, nseq]: the tokens steps 1..n chose (out[k nseq + s]
 * is what step k + 1 chose for sequence s: the same as n calls of clmoe_gen_step_greedy,
 * each fed the last one's next). Every sequence advances n tokens; stop conditions are the
 * caller's (tokens past a stop are computed and ignored). A NaN logit is reported at the
 * end, naming the step and sequence. Not under expert parallelism (CLMOE_ERR_UNSUPPORTED). */
CLMOE_API clmoe_status clmoe_gen_decode_greedy(clmoe_gen_state *state, const int32_t *tokens, int64_t n,
                                               int32_t *out);

/* Timing of the passes so far (wall seconds on the host, each pass ending with a finish of
 * the queue), for reports. */
typedef struct clmoe_gen_stats {
  double prefill_seconds, step_seconds;
  int64_t prefill_tokens, step_tokens, prefill_passes, steps;
} clmoe_gen_stats;
CLMOE_API void clmoe_gen_stats_get(const clmoe_gen_state *state, clmoe_gen_stats *stats);

/* ---- sampling ----------------------------------------------------------------------- */

typedef struct clmoe_gen_sampling {
  int greedy;         /* 1: argmax (lowest index on ties); the rest is ignored */
  double temperature; /* > 0 (0 means greedy) */
  int64_t top_k;      /* keep the k most likely tokens (0: all) */
  double top_p;       /* then the smallest set whose probability reaches p (0 or 1: all) */
  uint64_t seed;
} clmoe_gen_sampling;

/* Draws a token from logits [vocab] (host). The candidates are the top_k best (the lowest
 * index first among equal logits), then their shortest best-first prefix whose probability
 * reaches top_p; token i of them has weight exp((logit_i - max) / temperature), computed
 * as an integer (kernels_cl/generate/gen_sample_math.cl: relative error about 1e-6,
 * weights under 2^-(62 - ceil(log2 vocab)) of the largest are 0). The draw comes from the
 * library's counter-based generator at (seed, seq << 32 | step) and walks the candidates
 * in index order. Every step is exact integer or fixed-order fp32 arithmetic, so a seed
 * gives the same token on every run and device for the same logits, and the device's draw
 * (clmoe_gen_sample_rows, clmoe_gen_decode) is the same token. A row of all -inf weighs
 * its tokens equally; +inf logits share the draw among themselves. Invalid settings
 * (temperature < 0, top_p outside [0, 1], top_k < 0, NaN logits) are
 * CLMOE_ERR_INVALID_ARGUMENT. */
CLMOE_API clmoe_status clmoe_gen_sample(const clmoe_gen_sampling *sampling, const float *logits,
                                        int64_t vocab, int64_t seq, int64_t step, int32_t *token);

/* ids [R] (i32) = clmoe_gen_sample's tokens for the rows of logits [R, V] (f32, whole
 * tensors) as sequences 0 .. R - 1 at `step`, drawn on the device in one launch (greedy
 * options: clmoe_gen_argmax); -1 - i for a row whose lowest-index NaN is logit i. A device
 * with under 6 KB of local memory is CLMOE_ERR_UNSUPPORTED. Public for checks. */
CLMOE_API clmoe_status clmoe_gen_sample_rows(clmoe_ctx *ctx, const clmoe_gen_sampling *sampling,
                                             const clmoe_tensor *logits, int64_t step, clmoe_tensor *ids);

/* clmoe_gen_step whose next tokens are drawn on the device: next host [nseq] gets, for each
 * sequence s, the token clmoe_gen_sample(sampling, that row's logits, vocab, s, draw_step)
 * gives (the same bits: docs/generate.md), and only they come back (logits may be NULL;
 * given, they are read too). Greedy options give clmoe_gen_step_greedy's tokens. A NaN
 * logit is CLMOE_ERR_INVALID_ARGUMENT naming it. */
CLMOE_API clmoe_status clmoe_gen_step_sample(clmoe_gen_state *state, const clmoe_gen_sampling *sampling,
                                             const int32_t *tokens, int64_t draw_step, int32_t *next,
                                             float *logits);

/* clmoe_gen_decode_greedy with any sampling options: n steps whose tokens are drawn on the
 * device and fed to the next step there, one wait at the end. Step k (0-based) draws
 * sequence s's token as clmoe_gen_sample(sampling, its logits, vocab, s, draw_step + k)
 * would: out[k nseq + s] is what n calls of clmoe_gen_step then clmoe_gen_sample, each fed
 * the last one's tokens, give. Greedy options: clmoe_gen_decode_greedy's tokens. A NaN
 * logit is reported at the end, naming the step and sequence. Not under expert parallelism
 * (CLMOE_ERR_UNSUPPORTED). */
CLMOE_API clmoe_status clmoe_gen_decode(clmoe_gen_state *state, const clmoe_gen_sampling *sampling,
                                        const int32_t *tokens, int64_t draw_step, int64_t n, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif
