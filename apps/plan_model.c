/* clmoe-plan's arithmetic (see plan_model.h and docs/distributed.md). */
#include "plan_model.h"

#include "clmoe/paths.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Activation values saved for backward per token, summed over the layers: a coarse model
 * that counts the tensors clmoe keeps (no recomputation). Per layer 12 d for the residual
 * sources, the two Block AttnRes mixes and the two RMSNorm outputs (4 d in the plain
 * residual stack: each sub-layer's input and its norm); the mixer's
 * projections; the FFN's inputs and SiTU-GLU pre-activations. The fp32 logits (vocab a
 * token) are added by the caller. */
static double activation_values(const clmoe_config *c)
{
  const double d = (double)c->d_model;
  double sum = 0.0;
  for (int l = 0; l < c->layers; l++) {
    sum += (c->residual == CLMOE_RESIDUAL_PLAIN ? 4.0 : 12.0) * d;
    if (c->is_mla[l]) /* c_q, c_kv + k_r, per head q, k (nope + rope), v, o, and the gate */
      sum += (double)c->mla_q_rank + (double)c->mla_kv_rank + (double)c->mla_qk_rope_dim +
             (double)c->mla_heads * (2.0 * (double)(c->mla_qk_nope_dim + c->mla_qk_rope_dim) +
                                     2.0 * (double)c->mla_v_dim) + (c->mla_output_gate ? d : 0.0);
    else /* q, k, v before and after the short convolution, the gate, o; decay logits */
      sum += 8.0 * (double)(c->kda_heads * c->kda_head_dim) + 2.0 * (double)c->kda_gate_rank;
    if (l < c->dense_layers) {
      sum += 3.0 * (double)c->dense_ff;
    } else { /* router scores; per routed slot input, gate/up/product; shared experts */
      const double width = c->latent > 0 ? (double)c->latent : d;
      sum += (double)c->experts + (c->latent > 0 ? 2.0 * width : 0.0) +
             (double)c->top_k * (width + 3.0 * (double)c->expert_ff) +
             3.0 * (double)(c->shared_experts * c->shared_ff);
    }
  }
  return sum;
}

int plan_compute(const plan_input *in, plan_result *r, char *err, size_t err_len)
{
  const clmoe_config *c = &in->cfg;
  memset(r, 0, sizeof *r);
  if (in->gpus < 1) return snprintf(err, err_len, "--gpus: want at least 1"), -1;
  if (in->nodes < 1 || in->gpus % in->nodes)
    return snprintf(err, err_len, "--nodes %lld does not divide --gpus %lld", in->nodes, in->gpus), -1;
  if (in->ep < 1 || in->gpus % in->ep)
    return snprintf(err, err_len, "--ep %lld does not divide --gpus %lld", in->ep, in->gpus), -1;
  if (in->gpu_mem <= 0) return snprintf(err, err_len, "--gpu-mem: want a positive size"), -1;
  if (in->batch_tokens < 1) return snprintf(err, err_len, "--batch-tokens: want at least 1"), -1;
  if (in->zero != 0 && in->zero != 1 && in->zero != 3)
    return snprintf(err, err_len, "--zero %d: want 0, 1 or 3", in->zero), -1;

  clmoe_config_count_params(c, &r->count);
  const double b = in->bytes, N = (double)in->gpus, E = (double)c->experts;
  r->moe_layers = c->layers - c->dense_layers;
  r->slots = (c->experts + in->ep - 1) / in->ep;
  r->expert_replicas = in->gpus / in->ep;
  r->dense_params = r->count.total - r->count.moe_experts;
  r->expert_params_gpu = r->count.moe_experts / E * (double)r->slots;
  const double dense_held = in->zero == 3 ? r->dense_params / N : r->dense_params;
  const double dense_state = in->zero >= 1 ? r->dense_params / N : r->dense_params;
  r->params_gpu = dense_held + r->expert_params_gpu;
  r->weights_fp32 = 4.0 * r->params_gpu;
  r->weights_bf16 = 2.0 * r->params_gpu;
  r->weights = b * r->params_gpu;
  /* gradients: as the weights (dense sharded from zero 3: reduce-scatter from zero 1 keeps
   * only the shard after the step, but the full buffer exists during backward) */
  r->grads = b * r->params_gpu;
  /* AdamW: two fp32 moments; with bf16 weights an fp32 master copy as well */
  const double state_params = dense_state + r->expert_params_gpu;
  r->moments = 8.0 * state_params;
  r->master = in->bytes == 2 ? 4.0 * state_params : 0.0;
  r->act_values_token = activation_values(c);
  /* the logits are fp32 whatever the dtype (the loss needs them) */
  r->activations = (r->act_values_token * b + 4.0 * (double)c->vocab) * (double)in->batch_tokens;
  if (in->kda_tiles) { /* what the tile KDA keeps per 16-token chunk and head */
    int kda_layers = 0;
    for (int l = 0; l < c->layers; l++) kda_layers += !c->is_mla[l];
    r->kda_kept = (double)kda_layers * (double)c->kda_heads *
                  (double)clmoe_kda_tile_kept_bytes(c->kda_head_dim, c->kda_head_dim) / 16.0 * (double)in->batch_tokens;
  }
  r->total = r->weights + r->master + r->grads + r->moments + r->activations + r->kda_kept;
  r->usable = in->gpu_mem * (1.0 - in->reserve);
  r->fits = r->total <= r->usable;

  /* all-to-all: each token's top_k routed copies at the expert input width go out
   * (dispatch) and come back (combine); backward sends the gradients the same two ways */
  const double width = c->latent > 0 ? (double)c->latent : (double)c->d_model;
  const double ep = (double)in->ep, gpn = N / (double)in->nodes;
  r->a2a_bytes = (double)in->batch_tokens * (double)c->top_k * width * b * 2.0 *
                 (double)r->moe_layers * 2.0;
  r->a2a_off_rank = r->a2a_bytes * (ep - 1.0) / ep;
  /* an expert-parallel group of ep consecutive ranks spans ceil(ep / gpn) nodes */
  const double same_node = ep < gpn ? ep : gpn;
  r->a2a_off_node = r->a2a_bytes * (ep - same_node) / ep;
  /* ring all-reduce sends 2 (n - 1) / n of the buffer; zero 3 gathers the weights once
   * more in backward: 3 (n - 1) / n */
  r->allreduce_dense = (in->zero == 3 ? 3.0 : 2.0) * (N - 1.0) / N * r->dense_params * b;
  const double R = (double)r->expert_replicas;
  r->allreduce_expert = 2.0 * (R - 1.0) / R * r->expert_params_gpu * b;
  return 0;
}
