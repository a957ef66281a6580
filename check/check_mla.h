/* Shared by the MLA conformance checks (check_mla.c: attention, layer, decode;
 * check_mla_extend.c: chunked prefill). */
#ifndef CLMOE_CHECK_MLA_H
#define CLMOE_CHECK_MLA_H

#include "conformance.h"
#include "ref/ref_mla.h"

#define TOL_F32 1e-4
#define TOL_BF16 1e-2

typedef struct layer_case {
  int64_t d, H, rq, dc, Dn, Dr, Dv; /* rq 0: q = W_q x (Kimi Linear's form) */
  int64_t B, T;           /* without lens */
  const int32_t *lens;    /* packed sequences, or for decoding the prompt lengths */
  int nlens;
  int steps;              /* decoding: tokens generated per sequence after the prompts */
  clmoe_dtype cache;      /* decoding: cache storage */
  int ungated;            /* 1: no output gate (Kimi Linear's form) */
} layer_case;

typedef struct layer_data {
  clmoe_mla_config cfg;
  ref_mla_layer rl;
  clmoe_mla_weights w;
  double *hw[REF_MLA_NWEIGHTS];
} layer_data;

void ck_mla_layer_free(layer_data *L);
/* Random weights of a scale that keeps every activation near 1. */
/* The case at the checks' sizes: at the smallest (clmoe_check_small, the simulators) a model
 * width d of 32. d is only the projections' inner or outer width (CLBlast's products: over
 * half of a layer check's simulated time); the attention's shapes, the heads and the cache
 * rows stay as the case gives them. */
layer_case ck_mla_sized(layer_case lc);
clmoe_status ck_mla_layer_setup(clmoe_ctx *ctx, uint64_t seed, const layer_case *lc, layer_data *L);
/* Packed lengths -> cu_seqlens (host and device); *T their sum. */
clmoe_status ck_mla_make_cu(clmoe_ctx *ctx, const int32_t *lens, int n, int32_t **cu, clmoe_tensor *t, int64_t *T);

/* The chunked-prefill checks (check_mla_extend.c), listed in clmoe_checks_mla. */
clmoe_status check_mla_extend_f32(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
clmoe_status check_mla_extend_bf16(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
clmoe_status check_mla_extend_long(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
clmoe_status check_mla_extend_wide(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
clmoe_status check_mla_extend_wide_bf16(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
clmoe_status check_mla_extend_flash_f32(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
clmoe_status check_mla_extend_flash_bf16(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
clmoe_status check_mla_extend_flash_long(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
clmoe_status check_mla_extend_flash_wide(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
clmoe_status check_mla_extend_kimi(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
clmoe_status check_mla_extend_flash_kimi(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);

#endif
