/* Declarations shared by the generation files (lib/generate/generate_*.c); not installed. */
#ifndef CLMOE_GENERATE_INTERNAL_H
#define CLMOE_GENERATE_INTERNAL_H

#include "model/model_internal.h"
#include "model/params_internal.h"
#include "kda/kda_internal.h" /* the KDA decode step after its projections */
#include "mla/mla_internal.h" /* the MLA decode step on the GEMV */
#include "moe/moe_internal.h" /* the MoE decode forward with its pre-norm */
#include "ops/ops_internal.h" /* the few-token GEMV */
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

/* Decode steps of at most this many sequences run their KDA layers through the GEMV launches
 * below (generate_kda.c); larger ones through clmoe_kda_layer_step (CLBlast). */
#define GEN_GEMV_TOKENS 16
/* Rows of logits up to which a bf16 head is read by the GEMV (16 rows a work-group from a
 * vocabulary of CLMOE_GEMV_WIDE_ROWS, 32,768: the head read once per 16 rows) instead of an fp32 copy of it for a
 * GEMM (1.5 GB at Kimi-Linear-48B's 163,840 x 2,304). On the tile path (clmoe__gen_tile)
 * rows past GEN_GEMV_TOKENS are a GEMM of the bf16 head on the tile GEMM instead. */
#define GEN_HEAD_GEMV_ROWS 64

/* ---- the fused KDA output gate and AttnRes (generate_fused.c); the products go through
 * lib/ops/ops_gemv.c ---- */
/* m = sigmoid(gs) RMSNorm_head(o) gain: o, gs, m [N, heads D] (whole tensors), gain [D]. */
clmoe_status clmoe__gen_kda_out_gate(clmoe_ctx *ctx, const clmoe_tensor *o, const clmoe_tensor *gs,
                                     const clmoe_tensor *gain, float eps, int64_t heads, clmoe_tensor *m);
/* Block AttnRes over src [S, T, d] (w, gain [d]) into h [T, d], then hn = RMSNorm(h) with
 * gain norm [d], in one launch; both eps (as the model's stack uses them). */
clmoe_status clmoe__gen_attn_res_norm(clmoe_ctx *ctx, const clmoe_tensor *src, const clmoe_tensor *w,
                                      const clmoe_tensor *gain, const clmoe_tensor *norm, float eps, clmoe_tensor *h,
                                      clmoe_tensor *hn);
/* A KDA layer's decode step (as clmoe_kda_layer_step) through the launches above
 * (generate_kda.c); x, y [N, d]; accumulate 1: y += the layer's output (a residual stream).
 * x_gain: NULL, or the products read RMSNorm(x) with this gain [d] (eps x_eps) instead of x
 * (the pre-norm inside the first launch). */
clmoe_status clmoe__gen_kda_step(clmoe_ctx *ctx, const clmoe_kda_layer *l, const clmoe_tensor *x,
                                 const clmoe_tensor *x_gain, float x_eps, clmoe_kda_layer_state *state,
                                 int accumulate, clmoe_tensor *y);
/* 1 when every matrix of l is f32 (the GEMV path takes the layer). */
int clmoe__gen_kda_gemv_ok(const clmoe_kda_layer *l);

/* ---- bf16 weights (generate_weights.c) ---- */
/* The weights' dtype for --weights auto: bf16 where the device has a matrix unit (the tile
 * interface is not the portable one), as a training run's precision auto; else fp32. */
clmoe_dtype clmoe__gen_auto_weights(clmoe_ctx *ctx);
/* fp32 temporaries of one layer's bf16 matrices for a call that takes fp32 weights. */
#define GEN_WIDEN_MAX 16
typedef struct gen_widened {
  clmoe_tensor t[GEN_WIDEN_MAX];
  int n;
} gen_widened;
/* *tmp = the layer with each bf16 matrix replaced by an fp32 copy held in w (fp32 ones as
 * they are); release w after the call. */
clmoe_status clmoe__gen_widen_kda(clmoe_ctx *ctx, const clmoe_kda_layer *l, clmoe_kda_layer *tmp, gen_widened *w);
clmoe_status clmoe__gen_widen_mla(clmoe_ctx *ctx, const clmoe_mla_weights *l, clmoe_mla_weights *tmp,
                                  gen_widened *w);
clmoe_status clmoe__gen_widen_ffn(clmoe_ctx *ctx, const clmoe_situ_ffn *f, clmoe_situ_ffn *tmp, gen_widened *w);
/* The MLA layer with only W_ukv widened (the tile path: the per-head absorbed products and a
 * cache's decompression take it in fp32; every other matrix goes through clmoe_linear). */
clmoe_status clmoe__gen_widen_mla_ukv(clmoe_ctx *ctx, const clmoe_mla_weights *l, clmoe_mla_weights *tmp,
                                      gen_widened *w);
/* 1 when m's passes past the GEMV (prefill, steps of more than GEN_GEMV_TOKENS sequences, the
 * head over more rows than that) run on the tile GEMM with the bf16 matrices as they are: the
 * weights are bf16 and clmoe__infer_tile (a matrix unit, or CLMOE_INFER_TILE=1); else those
 * passes widen (gen_widen_*), bit for bit as without the tile path. */
int clmoe__gen_tile(clmoe_ctx *ctx, const clmoe_model *m);
/* A MoE layer's router, W_down, W_up and shared experts; the routed expert stacks stay bf16
 * for clmoe_moe_forward_infer. */
clmoe_status clmoe__gen_widen_moe(clmoe_ctx *ctx, const clmoe_moe_layer *l, clmoe_moe_layer *tmp, gen_widened *w);
/* An expert-parallel layer's dense part (router, W_down, W_up, shared experts); its forward
 * widens the bf16 expert stacks itself, only the experts a pass reaches (lib/moe/moe_ep.c). */
clmoe_status clmoe__gen_widen_ep(clmoe_ctx *ctx, const clmoe_moe_ep_layer *l, clmoe_moe_ep_layer *tmp, gen_widened *w);
clmoe_status clmoe__gen_widen_head(clmoe_ctx *ctx, const clmoe_tensor *head, clmoe_tensor *tmp, gen_widened *w);
void clmoe__gen_widen_release(gen_widened *w);

/* One pass of the layer stack over the tokens of a pass (generate_run.c). */
typedef enum { GEN_PREFILL = 0, GEN_STEP = 1 } gen_kind;

/* ---- passes (generate_run.c; decode steps and runs: generate_decode.c) ---- */
/* What one pass runs on: ntok tokens packed by sequence, counts[s] of sequence s. */
typedef struct gen_pass {
  gen_kind kind;
  int64_t ntok;
  const int64_t *counts; /* [nseq] (prefill) */
  clmoe_tensor cu;       /* i32 [nseq + 1]: every sequence, empty ones included (KDA) */
  clmoe_tensor cu_act;   /* i32 [nact + 1]: the sequences with tokens (tiled MLA prefill) */
  int32_t *slots;        /* [nact] their cache sequences */
  int fresh;             /* every sequence with tokens has an empty cache */
} gen_pass;

/* What a pass reads and hands out besides its states. */
typedef struct gen_io {
  const int32_t *ids;          /* host [ntok] token ids, or NULL: */
  const clmoe_tensor *ids_dev; /* i32 [ntok] on the device (a step's picks) */
  const int32_t *rows;         /* host [nrows] the token rows whose logits are wanted (NULL: all) */
  int64_t nrows;
  float *logits;               /* host [nrows, vocab], or NULL */
  int32_t *greedy;             /* host [nrows] each row's pick: the greedy token
                                * (clmoe_gen_argmax), or with sampling its draw
                                * (clmoe_gen_sample_rows); -1 - i where logit i is NaN; or NULL */
  const clmoe_gen_sampling *sampling; /* NULL: greedy picks */
  int64_t draw_step;           /* the draws' step (clmoe_gen_sample's step; sequence = row) */
  clmoe_tensor *greedy_dev;    /* with greedy and no logits: the picks are made here (i32
                                * [nrows]) and read into greedy without waiting; the caller
                                * waits (in-order queue) before it reads greedy */
} gen_io;

/* Runs the layer stack over the pass's tokens and writes what io asks for. */
clmoe_status clmoe__gen_stack(clmoe_gen_state *g, const gen_pass *p, const gen_io *io);
/* CLMOE_ERR_INVALID_ARGUMENT naming op, seq and the token unless t[0..n) are in [0, vocab). */
clmoe_status clmoe__gen_check_tokens(const clmoe_gen_state *g, const char *op, int64_t seq, const int32_t *t, int64_t n);
/* Monotonic wall seconds. */
double clmoe__gen_now(void);

/* ---- sampling (generate_sample.c, kernels_cl/generate/gen_sample_math.cl) ---- */
/* Checked sampling options for a vocabulary of V, as the sampler's arithmetic takes them. */
typedef struct gen_sampling_plan {
  int greedy;     /* greedy, temperature 0 or top_k 1: the argmax */
  int64_t keep;   /* top-k's k, V for all */
  uint64_t pq;    /* round(top_p 2^32); 0: no top-p (top_p 0 or 1) */
  float inv_t;    /* 1 / temperature as a normal float */
  int scale;      /* weights are exp((l - lmax) / T) 2^scale (smp_scale) */
  uint64_t seed;
} gen_sampling_plan;
clmoe_status clmoe__gen_sampling_plan(const clmoe_gen_sampling *sp, int64_t V, const char *op, gen_sampling_plan *pl);
/* A logit's integer weight (smp_weight, for tests): exp((logit - lmax) inv_t) 2^scale. */
uint64_t clmoe__gen_sample_weight(float logit, float lmax, float inv_t, int scale);

#endif
