/* Shared pieces of the MoE conformance checks (check/check_moe.c: dispatch, balancing and the
 * table; check/check_moe_layer.c: the layer and dense FFN against the double reference;
 * check_moe_decode.c, check_moe_infer.c: the inference forwards). Not installed. */
#ifndef CLMOE_CHECK_MOE_H
#define CLMOE_CHECK_MOE_H

#include "conformance.h"
#include "ref/ref_moe.h"

#define CK_MOE_TOL_FWD 1e-5
#define CK_MOE_TOL_GRAD 2e-5
#define CK_MOE_TOL_CHOICE 1e-5
#define CK_MOE_TOL_BF16 1e-2      /* bf16 expert weights and operands, fp32 accumulation */
#define CK_MOE_TOL_BF16_GRAD 5e-2 /* their gradients (see check_moe_layer.c) */
#define CK_MOE_NPARAM 10

/* One layer under test: sizes (l 0: no latent projection), the GEMM path, balancing and the
 * Kimi Linear options (0 in each: the K3 form). */
typedef struct moe_case {
  int64_t m, d, l, E, k, f, n_shared, shared_ff;
  clmoe_moe_gemm gemm;
  clmoe_moe_balance balance;
  clmoe_glu glu;
  int64_t groups, topk_groups;
  int no_renorm;
  float scale;
  int bf16; /* 1: the routed experts' weights as bf16 copies (a bf16 training step's tile GEMMs) */
} moe_case;

/* The options of a K3 case (the positional initialisers' tail), fp32 experts. */
#define CK_MOE_K3 CLMOE_GLU_SITU, 0, 0, 0, 0.0f, 0

/* A layer with random parameters and bias, x, and their host copies. */
typedef struct moe_data {
  clmoe_moe_layer L;
  clmoe_tensor x;
  double *hx, *hbias, *hp[CK_MOE_NPARAM];
  ref_moe_shape s;
  ref_moe_params P;
} moe_data;

clmoe_status ck_moe_setup(clmoe_ctx *ctx, uint64_t seed, const moe_case *mc, moe_data *D);
void ck_moe_data_free(moe_data *D);
/* The case at the checks' sizes (clmoe_check_small: at most 32 experts, 16 at top-8 or
 * fewer, 112 tokens, the few-expert case on 3 experts, ...). */
moe_case ck_moe_sized(const moe_case *c);
/* *Lb = *L with bf16 copies of the routed experts' weights in b[3] (rounded to nearest even;
 * give them back with clmoe_tensor_destroy). */
clmoe_status ck_moe_bf16_experts(clmoe_ctx *ctx, const clmoe_moe_layer *L, clmoe_tensor b[3], clmoe_moe_layer *Lb);
clmoe_status ck_moe_read_i32(const clmoe_tensor *t, int32_t **out);
/* The device's choice topk [m, k1] must be a top-k1 of s + bias (within the kept groups)
 * in the double scores, within CK_MOE_TOL_CHOICE; else res->max_err = inf. */
void ck_moe_check_choice(const ref_moe_shape *s, const double *s_all, const double *bias,
                         const int32_t *topk, int64_t k1, clmoe_check_result *res);

/* The layer checks of check_moe_layer.c, listed in check_moe.c's table. */
#define CK_MOE_LAYER_FNS(X)                                                                      \
  X(fwd_top8) X(fwd_top16) X(fwd_few) X(fwd_pad) X(bwd_top8) X(bwd_top16) X(bwd_few) X(bwd_pad) \
  X(bwd_few_pad) X(fwd_swiglu) X(bwd_swiglu) X(bwd_swiglu_pad) X(fwd_grouped) X(bwd_grouped)    \
  X(fwd_plain_p) X(bwd_plain_p) X(fwd_nolatent) X(bwd_nolatent) X(bwd_nolatent_pad) X(fwd_kimi) \
  X(bwd_kimi) X(bf16_fwd_top8) X(bf16_bwd_top8) X(bf16_fwd_few) X(bf16_bwd_few) X(bf16_bwd_swiglu) \
  X(ffn_situ_fwd) X(ffn_situ_bwd) X(ffn_swiglu_fwd) X(ffn_swiglu_bwd)
#define CK_MOE_DECLARE(name) clmoe_status ck_moe_##name(clmoe_ctx *c, uint64_t s, clmoe_check_result *r);
CK_MOE_LAYER_FNS(CK_MOE_DECLARE)
#undef CK_MOE_DECLARE

#endif
