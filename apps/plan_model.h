/* clmoe-plan's arithmetic: memory per GPU and bytes moved per step for a model on a
 * cluster, from the config alone (no device). The formulas are in docs/distributed.md and
 * `clmoe-plan --help`; everything is per GPU and per optimizer step. */
#ifndef CLMOE_PLAN_MODEL_H
#define CLMOE_PLAN_MODEL_H

#include <stddef.h>

#include "clmoe/clmoe.h"

typedef struct plan_input {
  clmoe_config cfg;
  long long gpus;         /* ranks, one GPU each */
  long long nodes;        /* hosts; gpus must be a multiple */
  long long ep;           /* expert-parallel group size; divides gpus */
  long long batch_tokens; /* tokens each GPU processes per step */
  double gpu_mem;         /* bytes of memory per GPU */
  int bytes;              /* 4 (fp32) or 2 (bf16): weights, gradients, activations, messages */
  int zero;               /* 0: dense state replicated; 1: dense optimizer state (moments and
                             fp32 master) sharded over the GPUs; 3: all dense state sharded */
  double reserve;         /* fraction of gpu_mem kept free (workspace, fragmentation) */
  int kda_tiles;          /* 1: the KDA layers train on tiles and keep their factors and
                             states between forward and backward (CLMOE_FASTPATH=1) */
} plan_input;

typedef struct plan_result {
  clmoe_param_count count;
  int moe_layers;
  long long slots;              /* experts of each MoE layer held by one GPU: ceil(E / ep) */
  long long expert_replicas;    /* copies of each expert shard: gpus / ep (data parallel) */
  double dense_params;          /* everything but the routed experts (data parallel) */
  double expert_params_gpu;     /* routed-expert parameters held by one GPU */
  double params_gpu;            /* parameters one GPU holds (dense share + its experts) */
  double weights_fp32, weights_bf16; /* params_gpu at 4 and 2 bytes (dense sharded at zero 3) */
  double weights, master, grads, moments; /* bytes per GPU at the chosen precision */
  double act_values_token;      /* activation values saved for backward, per token */
  double activations;           /* bytes per GPU: (act_values_token x bytes + 4 vocab) x
                                   batch_tokens (the logits stay fp32) */
  double kda_kept;              /* bytes per GPU the tile KDA keeps (kda_tiles; else 0): KDA
                                   layers x heads x clmoe_kda_tile_kept_bytes / 16 x tokens */
  double total, usable;         /* bytes needed and bytes available (gpu_mem x (1 - reserve)) */
  double a2a_bytes;             /* dispatch + combine sent per GPU per step, fwd + bwd */
  double a2a_off_rank;          /* of which to other GPUs (uniform routing) */
  double a2a_off_node;          /* of which to other nodes */
  double allreduce_dense;       /* dense gradient all-reduce bytes sent per GPU */
  double allreduce_expert;      /* expert gradient all-reduce among the expert's replicas */
  int fits;
} plan_result;

/* Checks the input (message naming the flag into err) and computes the plan. Returns 0 on
 * success, -1 on a bad input. */
int plan_compute(const plan_input *in, plan_result *out, char *err, size_t err_len);

#endif
