/* Hugging Face checkpoints of the Kimi Linear family (model_type "kimi_linear", as
 * transformers' KimiLinearForCausalLM defines it), for inference.
 *
 * A checkpoint directory holds config.json, the weights (model.safetensors, or
 * model.safetensors.index.json and the shards it names; F32, BF16 or F16) and usually a
 * tokenizer (tiktoken.model with tokenizer_config.json, or tokenizer.json: see tokenizer.h).
 *
 * config.json comes in the two forms in use, read into one clmoe_config:
 *   - the hub's: linear_attn_config {kda_layers, full_attn_layers (1-based), num_heads,
 *     head_dim, short_conv_kernel_size}, first_k_dense_replace, num_experts, ...;
 *   - transformers 5's: layer_types ("linear_attention" | "full_attention"),
 *     mlp_layer_types ("dense" | "sparse"), linear_num_heads, linear_head_dim,
 *     linear_conv_kernel_dim; n_routed_experts / num_local_experts and the other aliases.
 * The model it describes is clmoe's model with the Kimi Linear forms ([model] residual =
 * plain, [kda] gate = unbounded with a low-rank output gate, [mla] without output gate and
 * with q_rank 0 when q_lora_rank is null, [ffn] activation = swiglu, [moe] latent 0 with
 * grouped selection). Keys that change the math in a way the model cannot follow (RoPE on
 * MLA, another router activation or hidden_act, key-value head groups) are refused with an
 * error naming the file and the key; keys that do not affect the forward (token ids,
 * max_position_embeddings, dtype, ...) are ignored.
 *
 * Weights keep the hub's tensor names (model.layers.N.self_attn.q_proj.weight,
 * ...block_sparse_moe.experts.E.w1.weight, ...). Every tensor the model needs must be
 * there with its shape, and every tensor of the files must be used: a missing shard, a
 * shape that does not match the config or an unknown name is an error naming the file and
 * the tensor. Tensors are read one at a time and converted on the way to the device, so
 * host memory holds at most one tensor. */
#ifndef CLMOE_HF_H
#define CLMOE_HF_H

#include "dist.h"
#include "expert_map.h"
#include "model.h"
#include "model_config.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* config.json (a file, or a directory holding one) -> cfg (validated; cfg->name is the
 * file's path, truncated to fit). */
CLMOE_API clmoe_status clmoe_hf_config_read(const char *path, clmoe_config *cfg);

/* An inference model from checkpoint directory `dir` (its config.json and weights). */
CLMOE_API clmoe_status clmoe_hf_load(clmoe_ctx *ctx, const char *dir, clmoe_model **model);

/* clmoe_hf_load with the matrices stored as `weights` says (CLMOE_F32 or CLMOE_BF16): with
 * CLMOE_BF16 the head and every weight matrix are created as bf16 tensors (no fp32 buffer of
 * them is ever allocated), and
 * each checkpoint tensor goes through a host buffer of one tensor into them (bf16 checkpoint
 * tensors unchanged), so no fp32 copy of the model is held on the host or the device; the
 * same model as clmoe_hf_load then clmoe_gen_set_weights (include/clmoe/generate.h). */
CLMOE_API clmoe_status clmoe_hf_load_weights(clmoe_ctx *ctx, const char *dir, clmoe_dtype weights,
                                             clmoe_model **model);

/* Expert parallelism: this rank's part of the model over the ranks of dist, the routed
 * experts placed as map says (NULL: spread evenly); each rank reads only its experts' data
 * (every expert's tensor is still checked to be there). */
CLMOE_API clmoe_status clmoe_hf_load_ep(clmoe_ctx *ctx, const char *dir, clmoe_dist *dist,
                                        const clmoe_expert_map *map, clmoe_model **model);
/* clmoe_hf_load_ep with the matrices stored as `weights` says (as clmoe_hf_load_weights;
 * each rank's expert stacks bf16 with CLMOE_BF16). */
CLMOE_API clmoe_status clmoe_hf_load_ep_weights(clmoe_ctx *ctx, const char *dir, clmoe_dist *dist,
                                                const clmoe_expert_map *map, clmoe_dtype weights,
                                                clmoe_model **model);

/* 1 when `path` is a directory holding a config.json (a Hugging Face checkpoint). */
CLMOE_API int clmoe_hf_is_checkpoint(const char *path);

#ifdef __cplusplus
}
#endif
#endif
