/* What a config means beyond its text: the defaults every config starts from, the
 * precision names, the rules a complete config obeys (clmoe_config_validate, which the
 * parser applies to everything it reads: model_config.c) and the parameter counts it
 * implies (include/clmoe/model_config.h). */
#include "model_internal.h"

#include <stdio.h>
#include <string.h>
#include "clmoe/model_config.h"

void clmoe_config_defaults(clmoe_config *c)
{
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "(defaults)");
  c->dense_layers = 1;
  c->norm_eps = 1e-5;
  c->kda_conv_width = 4;
  c->kda_lower_bound = -5.0;
  c->routed_scale = 1.0;
  c->sign_rate = 1e-3;
  snprintf(c->balancing, sizeof c->balancing, "quantile");
  c->quantile_bins = 1000;
  c->attn_res_block = 1;
  c->mla_output_gate = 1;
  c->groups = 1;
  c->topk_groups = 1;
  c->renormalize = 1;
  clmoe_train_config *t = &c->train;
  t->lr = 3e-4; /* MODEL.md: 3e-3 collapsed the tiny model's routing, 3e-4 stayed healthy */
  t->min_lr = 3e-5;
  t->warmup_steps = -1; /* -1: 1% of the steps */
  t->steps = 1000;
  t->batch = 8;
  t->seq_len = 256;
  t->weight_decay = 0.1;
  t->beta1 = 0.9;
  t->beta2 = 0.95;
  t->adam_eps = 1e-8;
  t->clip = 1.0;
  t->seed = 1;
  t->eval_every = 100;
  t->eval_batches = 4;
  t->log_every = 10;
  t->checkpoint_every = 100; /* a killed node loses at most this many steps */
  t->keep_checkpoints = 3;
}

const char *clmoe_precision_name(clmoe_precision precision)
{
  switch (precision) {
  case CLMOE_PRECISION_AUTO: return "auto";
  case CLMOE_PRECISION_FP32: return "fp32";
  case CLMOE_PRECISION_BF16: return "bf16";
  }
  return NULL;
}

int clmoe_config_mla_count(const clmoe_config *c)
{
  int n = 0;
  for (int i = 0; i < c->layers; i++) n += c->is_mla[i] != 0;
  return n;
}

clmoe_status clmoe_config_validate(const clmoe_config *c, const char *name)
{
#define NEED(cond, ...)                                                                    \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      char why_[256];                                                                      \
      snprintf(why_, sizeof why_, __VA_ARGS__);                                            \
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s", name, why_);                          \
    }                                                                                      \
  } while (0)
  NEED(c->vocab >= 2 && c->d_model >= 1 && c->layers >= 1,
       "[model] vocab, d_model and layers are required");
  NEED(c->dense_layers <= c->layers, "[model] dense_layers = %d exceeds layers = %d", c->dense_layers, c->layers);
  int nmla = clmoe_config_mla_count(c);
  if (nmla < c->layers)
    NEED(c->kda_heads >= 1 && c->kda_head_dim >= 1 && c->kda_gate_rank >= 1,
         "[kda] heads, head_dim and gate_rank are required (the model has KDA layers)");
  if (nmla > 0)
    NEED(c->mla_heads >= 1 && c->mla_kv_rank >= 1 && c->mla_qk_nope_dim >= 1 && c->mla_v_dim >= 1,
         "[mla] heads, kv_rank, qk_nope_dim and v_dim are required (the model has MLA layers)");
  if (c->dense_layers > 0) NEED(c->dense_ff >= 1, "[ffn] dense_ff is required (dense_layers = %d)", c->dense_layers);
  if (c->dense_layers < c->layers) {
    NEED(c->experts >= 1 && c->top_k >= 1 && c->expert_ff >= 1,
         "[moe] experts, top_k and expert_ff are required (the model has MoE layers)");
    NEED(c->top_k <= c->experts, "[moe] top_k = %lld exceeds experts = %lld", (long long)c->top_k,
         (long long)c->experts);
    NEED(c->shared_experts == 0 || c->shared_ff >= 1, "[moe] shared_ff is required with shared_experts");
    NEED(c->experts % c->groups == 0, "[moe] groups = %lld does not divide experts = %lld", (long long)c->groups,
         (long long)c->experts);
    NEED(c->topk_groups <= c->groups, "[moe] topk_groups = %lld exceeds groups = %lld",
         (long long)c->topk_groups, (long long)c->groups);
    NEED(c->top_k <= c->topk_groups * (c->experts / c->groups),
         "[moe] top_k = %lld exceeds the %lld experts of topk_groups = %lld groups", (long long)c->top_k,
         (long long)(c->topk_groups * (c->experts / c->groups)), (long long)c->topk_groups);
    NEED(c->groups == 1 || c->experts / c->groups >= 2,
         "[moe] groups = %lld leaves fewer than 2 experts per group (a group scores its best two)",
         (long long)c->groups);
  }
  NEED(c->kda_lower_bound >= -5.0 && c->kda_lower_bound < 0.0, "[kda] lower_bound %g is outside [-5, 0)",
       c->kda_lower_bound);
  const clmoe_train_config *t = &c->train;
  NEED(t->min_lr <= t->lr, "[train] min_lr %g exceeds lr %g", t->min_lr, t->lr);
  NEED(t->warmup_steps <= t->steps, "[train] warmup_steps %lld exceeds steps %lld", (long long)t->warmup_steps,
       (long long)t->steps);
  NEED(clmoe_precision_name((clmoe_precision)t->precision) != NULL,
       "[train] precision %d is not one of bf16, fp32, auto", t->precision);
  return CLMOE_OK;
#undef NEED
}

/* ---- parameter counting ------------------------------------------------------------------ */
void clmoe_config_count_params(const clmoe_config *c, clmoe_param_count *n)
{
  memset(n, 0, sizeof *n);
  const double d = (double)c->d_model, V = (double)c->vocab;
  n->embedding = V * d;
  n->head = d * V;
  /* KDA: q, k, v and W_o at full rank; the output gate full rank or low rank (out_gate_rank);
   * beta; the low-rank decay gate; dt_bias, A_log; the three short convolutions; one RMSNorm
   * gain of D shared by heads. */
  const double H = (double)c->kda_heads, D = (double)c->kda_head_dim, r = (double)c->kda_gate_rank;
  const double og = (double)c->kda_out_gate_rank;
  const double out_gate = og > 0 ? og * (d + H * D) : d * H * D;
  const double kda_layer = 4.0 * d * H * D + out_gate + d * H + d * r + r * H * D + H * D + H +
                           (double)c->kda_conv_width * 3.0 * H * D + D;
  /* MLA: W_dq, q norm, W_uq (q_rank 0: W_q from x); W_dkv (latent + shared key), latent norm,
   * W_ukv (nope keys and values); W_g (when gated) and W_o. */
  const double Hm = (double)c->mla_heads, qk = (double)(c->mla_qk_nope_dim + c->mla_qk_rope_dim);
  const double qr = (double)c->mla_q_rank, kr = (double)c->mla_kv_rank, vd = (double)c->mla_v_dim;
  const double q_part = qr > 0 ? d * qr + qr + qr * Hm * qk : d * Hm * qk;
  const double mla_layer = q_part + d * (kr + (double)c->mla_qk_rope_dim) + kr +
                           kr * Hm * ((double)c->mla_qk_nope_dim + vd) + (c->mla_output_gate ? 2.0 : 1.0) * d * Hm * vd;
  /* MoE: the router; the latent down/up projections and norm; experts of SiTU-GLU (gate, up,
   * down) at the latent width (or full width without a latent); the shared experts as one
   * SiTU-GLU FFN of width shared_experts x shared_ff. */
  const double E = (double)c->experts, width = c->latent > 0 ? (double)c->latent : d;
  const double expert = 3.0 * width * (double)c->expert_ff;
  const double latent = c->latent > 0 ? 2.0 * d * (double)c->latent + (double)c->latent : 0.0;
  const double shared = 3.0 * d * (double)(c->shared_experts * c->shared_ff);
  for (int i = 0; i < c->layers; i++) {
    if (c->is_mla[i]) n->mla += mla_layer;
    else n->kda += kda_layer;
    if (i < c->dense_layers) {
      n->dense_ffn += 3.0 * d * (double)c->dense_ff;
    } else {
      n->moe_router += d * E;
      n->moe_latent += latent;
      n->moe_experts += E * expert;
      n->moe_shared += shared;
      n->active_moe_experts += (double)c->top_k * expert;
    }
    n->norms += 2.0 * d; /* the pre-norms of the mixer and the FFN */
    if (c->residual == CLMOE_RESIDUAL_ATTN_RES)
      n->attn_res += 4.0 * d; /* a pseudo-query and a norm gain before each of the two sub-layers */
  }
  n->norms += d; /* final norm */
  if (c->residual == CLMOE_RESIDUAL_ATTN_RES) n->attn_res += 2.0 * d; /* the final AttnRes */
  n->total = n->embedding + n->head + n->kda + n->mla + n->dense_ffn + n->moe_experts + n->moe_shared +
             n->moe_router + n->moe_latent + n->norms + n->attn_res;
  n->active = n->total - n->embedding - n->moe_experts + n->active_moe_experts;
}
