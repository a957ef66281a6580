/* The hybrid model (MODEL.md sections 1 and 5): embedding, layers of a token mixer (KDA, or
 * gated MLA on the configured layers) and a feed-forward (a dense SiTU-GLU FFN on the first
 * dense_layers, a Stable LatentMoE elsewhere), each sub-layer fed by Block Attention
 * Residuals and a pre-norm RMSNorm; the final AttnRes, RMSNorm and an untied output head;
 * cross-entropy. Forward and backward of all of it, the parameters in one registry
 * (include/clmoe/params.h) with names like "layer3/mixer/w_q", checkpoints through that registry.
 *
 * The residual stream keeps fp32 block sums: slot 0 the token embedding, slot b the sum of
 * the sub-layer outputs of block b (attn_res.block layers each); a sub-layer's input is the
 * AttnRes mix of the finished blocks and the current partial sum (left out while empty).
 *
 * [model] residual = plain (Kimi Linear's stack) replaces Block AttnRes by the pre-norm
 * residual: x = embed(ids); per layer x += mixer(RMSNorm(x)), x += ffn(RMSNorm(x));
 * logits = head RMSNorm(x). The stream is one fp32 [N, d] sum; there are no AttnRes
 * parameters, and the RMSNorm gains keep their names: "layerL/mixer/norm" (the mixer's input
 * norm), "layerL/ffn/norm" (the FFN's) and "final/norm" (before the head). */
#ifndef CLMOE_MODEL_H
#define CLMOE_MODEL_H

#include "model_config.h"
#include "moe.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clmoe_model clmoe_model;

/* Creates every tensor of a config (contents undefined until init or a checkpoint load). */
CLMOE_API clmoe_status clmoe_model_create(clmoe_ctx *ctx, const clmoe_config *cfg,
                                          clmoe_model **model);
/* The same without gradients and AdamW moments (a quarter of the memory): forward only,
 * training calls and clmoe_params_save fail with an error saying so. */
CLMOE_API clmoe_status clmoe_model_create_inference(clmoe_ctx *ctx, const clmoe_config *cfg,
                                                    clmoe_model **model);
/* Expert parallelism: the MoE layers' routed experts spread over the ranks of dist
 * as the map says (every expert on exactly one rank for training; the map is borrowed and
 * must outlive the model), everything else whole on every rank. Forward, backward and the
 * balance update are then collective: every rank calls them for its own share of the batch,
 * in the same order. The registry holds this rank's experts as rows of the whole [E, ...]
 * tensors: clmoe_params_save_dist / load_dist write and read the single-rank file, and
 * clmoe_model_init gives the same values as on one rank. "quantile" balancing runs as
 * quantile-hist (histograms summed over the ranks); "sign" is refused. */
struct clmoe_dist;
struct clmoe_expert_map;
CLMOE_API clmoe_status clmoe_model_create_ep(clmoe_ctx *ctx, const clmoe_config *cfg,
                                             struct clmoe_dist *dist,
                                             const struct clmoe_expert_map *map,
                                             clmoe_model **model);
/* The backward's loss becomes the mean over `count` tokens (the scored tokens of every
 * rank's share of the batch) instead of this rank's: summed over the ranks, the gradients
 * are those of the whole batch's mean loss. 0: this rank's scored tokens (the default). */
CLMOE_API void clmoe_model_set_loss_count(clmoe_model *model, int64_t count);
CLMOE_API void clmoe_model_destroy(clmoe_model *model);
/* Documented, seeded initialisation (the same model on any device for the same seed):
 * matrices N(0, 0.02) from the counter-based generator, one stream per tensor; RMSNorm gains
 * 1; AttnRes pseudo-queries 0 (uniform mixing at the start) and gains 1 (with Block AttnRes);
 * KDA A_log 0, dt_bias for initial memories of ~2 to ~1000 tokens (kda_layer.h),
 * convolutions near the identity; MoE biases 0. */
CLMOE_API clmoe_status clmoe_model_init(clmoe_model *model, uint64_t seed);

/* The precision of the training step (clmoe_precision, include/clmoe/model_config.h): a model
 * starts with its config's [train] precision; auto is resolved on the model's device. bf16
 * gives the parameters that feed matrix products (the layers' w_* matrices and the head;
 * not the embedding, convolutions, gains or the stacked expert weights) a bf16 copy,
 * refreshed by every clmoe_params_adamw and checkpoint load, and the forward and backward
 * multiply with those copies on the tile GEMM. Checkpoints stay fp32. A model made for
 * inference stays fp32. */
CLMOE_API clmoe_status clmoe_model_set_precision(clmoe_model *model, clmoe_precision precision);
/* The precision in use: CLMOE_PRECISION_FP32 or CLMOE_PRECISION_BF16 (never auto). */
CLMOE_API clmoe_precision clmoe_model_precision(const clmoe_model *model);

CLMOE_API clmoe_params *clmoe_model_params(clmoe_model *model);
CLMOE_API const clmoe_config *clmoe_model_config(const clmoe_model *model);

/* Forward over B sequences of T tokens (host arrays [B, T]). With targets (-1: not
 * scored) *loss receives the mean cross-entropy over the scored tokens and *scored their
 * number. train = 1 keeps what the backward needs (and MoE layers record balancing
 * statistics); train = 0 is inference (MoE biases frozen). loss NULL with targets: the
 * loss, the device's checks of the ids and targets, and the MoE layers' expert counts stay
 * on the device for clmoe_model_step_read (no wait for the device here). */
CLMOE_API clmoe_status clmoe_model_forward(clmoe_model *model, int64_t B, int64_t T,
                                           const int32_t *tokens, const int32_t *targets, int train,
                                           double *loss, int64_t *scored);
/* Logits of the last forward [B T, vocab] (valid until the next forward). */
CLMOE_API const clmoe_tensor *clmoe_model_logits(const clmoe_model *model);
/* Backward of the last train forward into the registry's gradients, then releases the kept
 * activations. Zero the gradients first (clmoe_params_zero_grad) and run one backward per
 * optimizer step: some layers add to their gradients, others overwrite them. */
CLMOE_API clmoe_status clmoe_model_backward(clmoe_model *model);
/* MoE balancing (QB, sign rule, none - per the config) from the last train forward. */
CLMOE_API clmoe_status clmoe_model_balance_update(clmoe_model *model);
/* A training step without waits for the device (one process): after the train forward (loss
 * NULL), the balance update and the backward, clmoe_model_adamw takes the AdamW step of
 * clmoe_params_adamw with the gradient-norm clip computed and applied on the device (where
 * the device has no fp64 it reads the norm as clmoe_params_adamw does); then
 * clmoe_model_step_read reads what the step left on the device in one transfer: the mean
 * loss, the gradient norm before clipping (NULL: not wanted) and the MoE layers' counts
 * (clmoe_model_moe_load then reads nothing), and returns the step's errors: a token id or
 * target outside the vocabulary (as clmoe_embedding and clmoe_cross_entropy name them), a
 * gradient norm that is not finite (the step was not taken; the parameters are unchanged). */
CLMOE_API clmoe_status clmoe_model_adamw(clmoe_model *model, const clmoe_adamw *hp, double clip);
CLMOE_API clmoe_status clmoe_model_step_read(clmoe_model *model, double *loss, double *norm);

/* MoE load statistics of the last forward, one entry per MoE layer (model order). */
CLMOE_API int clmoe_model_moe_layers(const clmoe_model *model);
CLMOE_API clmoe_status clmoe_model_moe_load(clmoe_model *model, int index, clmoe_moe_load *load);
/* The same, with the tokens routed to each expert (counts [experts], may be NULL); for an
 * expert-parallel model summed over the ranks (collective). */
CLMOE_API clmoe_status clmoe_model_moe_load_counts(clmoe_model *model, int index,
                                                   clmoe_moe_load *load, int64_t *counts);

#ifdef __cplusplus
}
#endif
#endif
