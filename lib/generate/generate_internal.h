/* Declarations shared by the generation files (lib/generate/generate_*.c); not installed. */
#ifndef CLMOE_GENERATE_INTERNAL_H
#define CLMOE_GENERATE_INTERNAL_H

#include "model/model_internal.h"
#include "model/params_internal.h"
#include "clmoe/generate.h"
#include "clmoe/kda_layer.h"
#include "clmoe/mla.h"

struct clmoe_gen_state {
  clmoe_model *model;
  clmoe_ctx *ctx;
  int64_t nseq;
  clmoe_gen_options opts;
  clmoe_kda_layer_state *kda; /* [layers]; created for the KDA layers only */
  clmoe_mla_cache **mla;      /* [layers]; created for the MLA layers only */
  int64_t *len;               /* [nseq] tokens seen */
  clmoe_gen_stats stats;
};

/* MoE layers of a pass with at most this many (token, chosen expert) pairs run the
 * few-token forward (clmoe_moe_decode_forward: no sort or dispatch; every pair reads its
 * expert's weights): a decode step of up to 16 sequences at top-16. */
#define GEN_MOE_DECODE_PAIRS 256

/* One pass of the layer stack over the tokens of a pass (generate_run.c). */
typedef enum { GEN_PREFILL = 0, GEN_STEP = 1 } gen_kind;

#endif
