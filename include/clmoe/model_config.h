/* Model and training configuration: one documented text format, strict parsing, presets,
 * and parameter counting.
 *
 * Format: `key = value` lines grouped by `[section]` headers; `#` starts a comment; lists
 * are comma-separated. Sections and keys (all sizes are counts of numbers):
 *   [model]    vocab, d_model, layers, mla_every (every N-th layer, 1-based, is MLA),
 *              mla_layers (explicit 1-based list of layers and ranges a-b, "4, 8-11",
 *              added to mla_every), dense_layers (the first n layers have a dense FFN, the
 *              rest MoE), norm_eps, residual (attn_res: Block Attention Residuals, the K3
 *              stack | plain: x += sublayer(RMSNorm(x)), the Kimi Linear stack)
 *   [kda]      heads, head_dim (K = V), gate_rank, conv_width, lower_bound (in [-5, 0)),
 *              gate (bounded | unbounded), out_gate_rank (0: the output gate sigmoid(W_g x)
 *              is full rank; r: W_g = W_g_up [H D, r] W_g_down [r, d])
 *   [mla]      heads, q_rank (0: q = W_q x directly, no query latent or its norm), kv_rank,
 *              qk_nope_dim, qk_rope_dim, v_dim, output_gate (true: y = W_o [sigmoid(W_g x) *
 *              o] | false: y = W_o o), norm_eps (of the query and key-value latent norms; 0:
 *              [model] norm_eps)
 *   [ffn]      dense_ff (intermediate width of the dense FFN), activation (the GLU of every
 *              FFN, dense, shared and routed: situ | swiglu, SiLU(u) * w)
 *   [moe]      experts, top_k, shared_experts, shared_ff, latent (0: no latent projection),
 *              expert_ff, routed_scale, balancing (quantile | quantile-hist | sign | none),
 *              quantile_bins, sign_rate, groups and topk_groups (grouped selection: the
 *              experts form `groups` equal groups, a group's score is the sum of its two best
 *              biased scores, and the top_k come from the best topk_groups groups),
 *              renormalize (true: p_i = s_i / sum of the chosen s | false: p_i = s_i; either
 *              way times routed_scale)
 *   [attn_res] block (layers per Block AttnRes block)
 *   [train]    lr, min_lr, warmup_steps, steps, batch, seq_len, curriculum ("len@step, ..."),
 *              weight_decay, beta1, beta2, adam_eps, clip, seed, eval_every, eval_batches,
 *              log_every, checkpoint_every (0: only at the end), keep_checkpoints (0: all),
 *              precision (bf16 | fp32 | auto: see clmoe_precision)
 * An unknown section or key, a malformed value, a value out of range or sizes that do not
 * fit together are errors naming the file, the line and the key. */
#ifndef CLMOE_MODEL_CONFIG_H
#define CLMOE_MODEL_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CLMOE_MAX_LAYERS 256
#define CLMOE_MAX_CURRICULUM 16

/* The precision of a training step's matrix products ([train] precision). fp32: every product
 * in fp32. bf16: fp32 master weights, AdamW moments, gradients and checkpoints; bf16 copies of
 * the weights that feed matrix products (refreshed by every optimizer step), and those
 * products on the tile GEMM with bf16 operands and fp32 accumulation. auto: bf16 where the
 * device's tile implementation is a matrix unit (include/clmoe/tile.h), fp32 elsewhere. */
typedef enum clmoe_precision {
  CLMOE_PRECISION_AUTO = 0,
  CLMOE_PRECISION_FP32 = 1,
  CLMOE_PRECISION_BF16 = 2
} clmoe_precision;
/* "auto", "fp32", "bf16" (NULL for a value outside the enum). */
CLMOE_API const char *clmoe_precision_name(clmoe_precision precision);

/* [model] residual: how the sub-layers' outputs are combined. */
typedef enum clmoe_residual {
  CLMOE_RESIDUAL_ATTN_RES = 0, /* Block Attention Residuals (the K3 stack) */
  CLMOE_RESIDUAL_PLAIN = 1     /* pre-norm residual x += f(RMSNorm(x)), final RMSNorm */
} clmoe_residual;

/* [ffn] activation: the gated unit of every FFN, h = W_dn [a(u) * b(w)], u = W_gate x,
 * w = W_up x. */
typedef enum clmoe_activation {
  CLMOE_ACTIVATION_SITU = 0,  /* SiTU-GLU: (4 tanh(u/4) sigmoid(u)) * (25 tanh(w/25)) */
  CLMOE_ACTIVATION_SWIGLU = 1 /* SwiGLU: SiLU(u) * w */
} clmoe_activation;

typedef struct clmoe_train_config {
  double lr, min_lr;          /* peak and final learning rate of the cosine schedule */
  int64_t warmup_steps, steps;
  int64_t batch, seq_len;     /* sequences per step and their length (before the curriculum) */
  int ncurriculum;            /* context curriculum: seq_len[i] from step start[i] on */
  int64_t curriculum_len[CLMOE_MAX_CURRICULUM], curriculum_step[CLMOE_MAX_CURRICULUM];
  double weight_decay, beta1, beta2, adam_eps, clip;
  uint64_t seed;
  int64_t eval_every, eval_batches, log_every, checkpoint_every;
  int64_t keep_checkpoints; /* the newest this many step-numbered checkpoints are kept */
  int precision;              /* clmoe_precision (default CLMOE_PRECISION_AUTO) */
} clmoe_train_config;

typedef struct clmoe_config {
  char name[64]; /* the preset's or the file's name */
  /* [model] */
  int64_t vocab, d_model;
  int layers;
  unsigned char is_mla[CLMOE_MAX_LAYERS]; /* by 0-based layer index */
  int dense_layers;
  double norm_eps;
  int residual; /* clmoe_residual */
  /* [kda] */
  int64_t kda_heads, kda_head_dim, kda_gate_rank;
  int kda_conv_width, kda_unbounded_gate;
  double kda_lower_bound;
  int64_t kda_out_gate_rank; /* 0: full rank */
  /* [mla] */
  int64_t mla_heads, mla_q_rank, mla_kv_rank, mla_qk_nope_dim, mla_qk_rope_dim, mla_v_dim;
  int mla_output_gate; /* 1 (default): gated output */
  double mla_norm_eps;  /* 0: norm_eps */
  /* [ffn] */
  int64_t dense_ff;
  int activation; /* clmoe_activation */
  /* [moe] */
  int64_t experts, top_k, shared_experts, shared_ff, latent, expert_ff;
  double routed_scale, sign_rate;
  char balancing[16];
  int quantile_bins;
  int64_t groups, topk_groups; /* 1, 1: plain top-k */
  int renormalize;             /* 1 (default) */
  /* [attn_res] */
  int attn_res_block;
  clmoe_train_config train;
} clmoe_config;

/* Defaults for everything (a config must still set the model sizes). */
CLMOE_API void clmoe_config_defaults(clmoe_config *cfg);
/* Parses a file / a string (`name` is used in messages) over the defaults, then validates. */
CLMOE_API clmoe_status clmoe_config_load(const char *path, clmoe_config *cfg);
CLMOE_API clmoe_status clmoe_config_parse(const char *text, const char *name, clmoe_config *cfg);
/* A shipped preset by name (tiny, demo, gpu, k3, kimi-linear-48b). */
CLMOE_API clmoe_status clmoe_config_preset(const char *preset, clmoe_config *cfg);
/* The preset names, NULL-terminated. */
CLMOE_API const char *const *clmoe_config_preset_names(void);
/* Checks that the sizes fit together (run by the loaders). */
CLMOE_API clmoe_status clmoe_config_validate(const clmoe_config *cfg, const char *name);
/* Writes the config in the format above, the name as a comment on the first line: it
 * parses back to the same config. Keys the parser would refuse at their defaults (sizes
 * of 0) are left out when unset, and so are the sections of kinds of layer that are left
 * at their defaults. 0, or -1 when writing failed. */
CLMOE_API int clmoe_config_write(const clmoe_config *cfg, FILE *f);
/* Number of MLA layers. */
CLMOE_API int clmoe_config_mla_count(const clmoe_config *cfg);

/* Parameter counts by component; active = used per token (routed experts count top_k of
 * them; the embedding table is not counted as active, the output head is). */
typedef struct clmoe_param_count {
  double embedding, head, kda, mla, dense_ffn, moe_experts, moe_shared, moe_router,
      moe_latent, norms, attn_res;
  double total;
  double active_moe_experts, active;
} clmoe_param_count;
CLMOE_API void clmoe_config_count_params(const clmoe_config *cfg, clmoe_param_count *count);

#ifdef __cplusplus
}
#endif
#endif
