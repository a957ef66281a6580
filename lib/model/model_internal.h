/* Declarations shared by the model's files (model.c, model_stack.c, model_run.c) and
 * generation (lib/generate/), which runs the same layers; not installed. */
#ifndef CLMOE_MODEL_INTERNAL_H
#define CLMOE_MODEL_INTERNAL_H

#include "runtime/internal.h"
#include "clmoe/moe_ep.h"
#include "clmoe/kda_layer.h"
#include "clmoe/mla.h"
#include "clmoe/model.h"
#include "clmoe/model_config.h"
#include "clmoe/params.h"

enum { SUB_MIXER = 0, SUB_FFN = 1 };

typedef struct model_layer {
  int is_mla, is_dense;
  /* parameters (and gradient structs whose tensors are views of the registry's) */
  clmoe_kda_layer kda, kda_g;
  clmoe_mla_config mla_cfg;
  clmoe_mla_weights mla, mla_g;
  clmoe_situ_ffn ffn, ffn_g;
  clmoe_moe_layer moe;
  clmoe_moe_ep_layer ep;       /* the MoE layer on expert-parallel ranks (model->dist set) */
  clmoe_moe_grads moe_g;       /* (with ep: dense whole, experts the local ones) */
  clmoe_tensor ar_w[2], ar_g[2], norm[2]; /* AttnRes pseudo-query, its gain (none in a plain
                                             stack); pre-norm gain [d] */
  /* what a train forward keeps, per sub-layer */
  int slot[2], nsrc[2], has_snap[2];
  clmoe_tensor snap[2];  /* the current block's partial sum this sub-layer saw [N, d] */
  clmoe_tensor alpha[2]; /* [N, nsrc] */
  clmoe_tensor h[2];     /* AttnRes output [N, d] (plain: the running sum x it saw) */
  clmoe_tensor hn[2];    /* RMSNorm(h): the sub-layer's input [N, d] */
  clmoe_tensor rstd[2];  /* [N] */
  clmoe_kda_layer_cache kcache;
  clmoe_mla_saved msaved;
  clmoe_situ_saved fsaved;
  clmoe_moe_saved moesaved;
  clmoe_moe_ep_saved epsaved;
} model_layer;

struct clmoe_model {
  clmoe_ctx *ctx;
  clmoe_config cfg;
  clmoe_tensor embed;  /* [V, d] */
  clmoe_tensor head;   /* [V, d] ([out, in]) */
  clmoe_tensor far_w, far_g, fnorm; /* final AttnRes (none in a plain stack) and RMSNorm [d] */
  model_layer *layers;
  clmoe_params params;
  int nslots;
  /* the last forward */
  int64_t B, T, N;
  int trained;          /* activations of a train forward are held */
  int final_nsrc;
  clmoe_tensor ids, targets;           /* i32 [N] */
  clmoe_tensor stream;                 /* [nslots, N, d] */
  clmoe_tensor falpha, fh, fhn, frstd; /* final AttnRes and norm (plain: no falpha, fh; the
                                          norm's input is the stream) */
  clmoe_tensor logits, loss, lse;      /* [N, V], [N], [N] */
  int64_t scored;
  int inference_only;   /* gradients and moments released (clmoe_gen_load): no training */
  /* expert parallelism (clmoe_model_create_ep): the MoE layers are clmoe_moe_ep_layers */
  clmoe_dist *dist;                /* borrowed; NULL: one process, whole MoE layers */
  const clmoe_expert_map *map;     /* borrowed, or owned_map */
  clmoe_expert_map *owned_map;     /* the even map clmoe_gen_load_ep made (freed with the model) */
  int64_t loss_count;              /* > 0: the backward's loss is a mean over this many
                                      tokens (all ranks'), not over this rank's */
  int precision;                   /* clmoe_precision, resolved: FP32 or BF16 */
  /* The step record (model_run.c): what a training step leaves on the device for one read
   * at its end (clmoe_model_step_read) instead of a wait for each. */
  clmoe_tensor record;   /* i32 [REC_MOE + the MoE layers' E + 1 offsets each] */
  int32_t *rec_host;     /* its last read (rec_words), else NULL */
  int64_t rec_words;
  int rec_state;         /* REC_NONE, REC_QUEUED (on the device), REC_READ (in rec_host) */
  int norm_src;          /* the step's gradient norm: NORM_NONE (no clmoe_model_adamw yet),
                            NORM_RECORD (the record's), NORM_HOST (norm_host: no fp64) */
  double norm_host;
};

/* The step record's words: the loss sum (fp32 bits), the first bad token position, the
 * first bad target row of the forward and of the backward (-1: none), the gradient norm
 * (a double's bits, low word first), then each MoE layer's expert offsets [E + 1]. */
enum { REC_LOSS, REC_EMBED, REC_XENT_FWD, REC_XENT_BWD, REC_NORM, REC_MOE = REC_NORM + 2 };
enum { REC_NONE, REC_QUEUED, REC_READ };
enum { NORM_NONE, NORM_RECORD, NORM_HOST };

/* The step record (model_step.c). create: a record for a forward with targets, filled
 * with -1 (MoE offsets in a train forward of one process); word: a view of words
 * [w, w + n); forward: the loss sum sum1 and the MoE offsets copied in; read: one read,
 * then the bad-id and bad-target errors in the step's order (*loss, *norm set first, NAN:
 * none). */
void clmoe__model_record_release(clmoe_model *m);
clmoe_status clmoe__model_record_create(clmoe_model *m, int train);
clmoe_status clmoe__model_record_word(clmoe_model *m, int64_t w, int64_t n, clmoe_tensor *v);
clmoe_status clmoe__model_record_forward(clmoe_model *m, const clmoe_tensor *sum1, int train);
clmoe_status clmoe__model_record_read(clmoe_model *m, double *loss, double *norm);

/* The training precision (model_precision.c). auto resolved for ctx's device. */
clmoe_precision clmoe__model_resolve_precision(clmoe_ctx *ctx, clmoe_precision p);
/* clmoe_model_set_precision; copy 0 (at creation, before any value is written): the bf16
 * copies are made but not filled, clmoe_model_init or a checkpoint load fills them. */
clmoe_status clmoe__model_set_precision(clmoe_model *m, clmoe_precision precision, int copy);
/* The tensor the products of a step multiply with for weight w: its parameter's bf16 copy in
 * a bf16 model, else w itself. */
const clmoe_tensor *clmoe__model_weight(const clmoe_model *m, const clmoe_tensor *w);
/* A layer's weights as the step uses them: the layer itself in fp32; in bf16 *tmp, a copy of
 * it with each weight that has a bf16 copy replaced by that copy. */
const clmoe_kda_layer *clmoe__model_kda(const clmoe_model *m, const clmoe_kda_layer *l, clmoe_kda_layer *tmp);
const clmoe_mla_weights *clmoe__model_mla(const clmoe_model *m, const clmoe_mla_weights *w, clmoe_mla_weights *tmp);
const clmoe_situ_ffn *clmoe__model_ffn(const clmoe_model *m, const clmoe_situ_ffn *f, clmoe_situ_ffn *tmp);
const clmoe_moe_layer *clmoe__model_moe(const clmoe_model *m, const clmoe_moe_layer *l, clmoe_moe_layer *tmp);
/* The expert-parallel layer: its dense part and its local experts swapped the same way. */
const clmoe_moe_ep_layer *clmoe__model_moe_ep(const clmoe_model *m, const clmoe_moe_ep_layer *ep,
                                              clmoe_moe_ep_layer *tmp);

void clmoe__model_release_activations(clmoe_model *m);
/* An inference model (no gradients or moments): one process's (dist NULL; map unused) or this
 * rank's part of an expert-parallel one (replicas in the map are allowed here), with every
 * weight matrix (clmoe__param_is_weight_matrix's) made as `matrices`, CLMOE_F32 or
 * CLMOE_BF16, from the start (clmoe_gen_load_weights, clmoe_gen_random_model, lib/hf). */
clmoe_status clmoe__model_create_inference(clmoe_ctx *ctx, const clmoe_config *cfg, clmoe_dist *dist,
                                           const clmoe_expert_map *map, clmoe_dtype matrices,
                                           clmoe_model **model);

/* One step of the stack's schedule (model_stack.c): a sub-layer, each in order, then the
 * final mix before the head. With Block AttnRes the stream [nslots, N, d] holds the
 * embedding in slot 0 and block b's sum in slot b. With the plain residual (plain set) it
 * is one slot [1, N, d], the running sum x: every step reads slot 0 (no mix: the input is
 * RMSNorm(x)), and every sub-layer adds its output to it (slot 0, nsrc 1, empty 0). */
typedef struct model_stack {
  int layers, block;  /* the config's layers and attn_res_block */
  int plain;          /* [model] residual = plain: x += f(RMSNorm(x)) */
  int layer, sub;     /* the sub-layer (SUB_MIXER, SUB_FFN) of this step */
  int final;          /* the final AttnRes and norm (layer == layers): no output slot */
  int nsrc;           /* the step's AttnRes mixes slots 0 .. nsrc - 1 */
  int slot;           /* the slot (its block's) the sub-layer's output goes to */
  int empty;          /* the slot holds nothing yet: the output is copied, not added */
} model_stack;
/* Slots of the residual stream: the embedding and one per block (Block AttnRes), or the one
 * running sum (plain). */
int clmoe__model_stack_slots(const clmoe_config *cfg);
/* The first step: layer 0's mixer (or the final mix of a model without layers). */
void clmoe__model_stack_begin(model_stack *it, const clmoe_config *cfg);
/* The step after it (call it once the output went into it->slot); after the last sub-layer,
 * the final mix. */
void clmoe__model_stack_next(model_stack *it);
/* Views of a stream [nslots, N, d]: slot `slot` as [N, d]; the first nsrc slots as the
 * AttnRes sources [nsrc, N, d]. */
clmoe_status clmoe__model_stream_slot(const clmoe_tensor *stream, int slot, clmoe_tensor *v);
clmoe_status clmoe__model_stream_sources(const clmoe_tensor *stream, int nsrc, clmoe_tensor *v);

/* ---- the config file's keys (model_config.c), read by the parser there and written by
 * model_config_write.c from the same table ------------------------------------------------ */
typedef enum {
  CFG_I64, CFG_INT, CFG_F64, CFG_U64, /* numbers in [lo, hi] (any for CFG_U64) */
  CFG_EVERY,                          /* mla_every: read only, folded into is_mla */
  CFG_LAYERS,                         /* mla_layers: 1-based numbers and ranges a-b */
  CFG_BALANCE, CFG_GATE,              /* names: balancing; bounded | unbounded */
  CFG_PRECISION,                      /* auto | fp32 | bf16 (an int clmoe_precision) */
  CFG_CHOICE,                         /* one of the names in choices: its index, an int */
  CFG_CURRICULUM                      /* length@step, ... */
} config_kind;

typedef struct config_key {
  const char *section, *key;
  config_kind kind;
  size_t offset; /* of the field in clmoe_config (numbers, CFG_BALANCE, CFG_GATE) */
  double lo, hi; /* accepted range of numbers */
  const char *const *choices; /* CFG_CHOICE: the names, NULL-terminated */
} config_key;

/* A section; an optional one (the sizes of a kind of layer) is written only when one of its
 * keys differs from its default. */
typedef struct config_section {
  const char *name;
  int optional;
} config_section;

/* The sections in file order, then every key in file order (each section's keys together);
 * both end with a NULL name. */
extern const config_section clmoe__model_config_sections[];
extern const config_key clmoe__model_config_keys[];
/* The balancing names, NULL-terminated. */
extern const char *const clmoe__model_config_balancing[];
/* The longest line the parser reads. */
#define CONFIG_LINE_MAX 1023

#endif
