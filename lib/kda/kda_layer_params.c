/* The KDA layer's parameters (include/clmoe/kda_layer.h): their list in the documented order,
 * creation (fp32, or bf16 weight matrices for an inference model) and initialisation. */
#include "runtime/internal.h"
#include "kda_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clmoe/kda_layer.h"

#define NPARAM CLMOE_KDA_LAYER_PARAMS

/* The tensors of the layer's form first (in the documented order), then the absent ones. */
int clmoe_kda_layer_params(clmoe_kda_layer *l, clmoe_tensor **t, const char **names, int *decay)
{
  clmoe_tensor *full[NPARAM] = {&l->w_q, &l->w_k, &l->w_v, &l->w_beta, &l->w_a_down, &l->w_a_up,
                                &l->dt_bias, &l->A_log, &l->conv_q, &l->conv_k, &l->conv_v,
                                &l->o_gain, &l->w_g, &l->w_o, &l->w_g_down, &l->w_g_up};
  clmoe_tensor *low[NPARAM] = {&l->w_q, &l->w_k, &l->w_v, &l->w_beta, &l->w_a_down, &l->w_a_up,
                               &l->dt_bias, &l->A_log, &l->conv_q, &l->conv_k, &l->conv_v,
                               &l->o_gain, &l->w_g_down, &l->w_g_up, &l->w_o, &l->w_g};
  static const char *const nfull[NPARAM] = {"w_q", "w_k", "w_v", "w_beta", "w_a_down", "w_a_up", "dt_bias",
                                            "A_log", "conv_q", "conv_k", "conv_v", "o_gain", "w_g", "w_o",
                                            NULL, NULL};
  static const char *const nlow[NPARAM] = {"w_q", "w_k", "w_v", "w_beta", "w_a_down", "w_a_up", "dt_bias",
                                           "A_log", "conv_q", "conv_k", "conv_v", "o_gain", "w_g_down",
                                           "w_g_up", "w_o", NULL};
  static const int dec[NPARAM] = {1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0};
  const int lr = l->out_gate_rank > 0, n = lr ? 15 : 14;
  for (int i = 0; i < NPARAM; i++) {
    if (t) t[i] = lr ? low[i] : full[i];
    if (names) names[i] = lr ? nlow[i] : nfull[i];
    if (decay) decay[i] = i < n ? dec[i] : 0;
  }
  return n;
}

void clmoe_kda_layer_destroy(clmoe_kda_layer *l)
{
  clmoe_tensor *t[NPARAM];
  clmoe_kda_layer_params(l, t, NULL, NULL);
  for (int i = 0; i < NPARAM; i++) clmoe_tensor_destroy(t[i]);
}

clmoe_status clmoe_kda_layer_create(clmoe_ctx *ctx, clmoe_kda_layer *l, int64_t d, int64_t H,
                                    int64_t D, int64_t rank, int64_t conv_width, float norm_eps,
                                    const clmoe_kda_options *opts)
{
  return clmoe_kda_layer_create_form(ctx, l, d, H, D, rank, conv_width, norm_eps, opts, 0);
}

clmoe_status clmoe_kda_layer_create_form(clmoe_ctx *ctx, clmoe_kda_layer *l, int64_t d, int64_t H,
                                         int64_t D, int64_t rank, int64_t conv_width, float norm_eps,
                                         const clmoe_kda_options *opts, int64_t out_gate_rank)
{
  return clmoe__kda_layer_create_dtype(ctx, l, d, H, D, rank, conv_width, norm_eps, opts, out_gate_rank, CLMOE_F32);
}

clmoe_status clmoe__kda_layer_create_dtype(clmoe_ctx *ctx, clmoe_kda_layer *l, int64_t d, int64_t H, int64_t D,
                                          int64_t rank, int64_t conv_width, float norm_eps,
                                          const clmoe_kda_options *opts, int64_t out_gate_rank,
                                          clmoe_dtype matrices)
{
  memset(l, 0, sizeof *l);
  if (matrices != CLMOE_F32 && matrices != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_kda_layer_create: matrices must be fp32 or bf16");
  if (d < 1 || H < 1 || D < 1 || rank < 1 || conv_width < 1)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_kda_layer_create: sizes must be positive");
  if (out_gate_rank < 0 || out_gate_rank > (1 << 20))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_kda_layer_create_form: out_gate_rank = %lld is outside "
                        "[0, 2^20]", (long long)out_gate_rank);
  l->d = d, l->H = H, l->D = D, l->rank = rank, l->conv_width = conv_width, l->norm_eps = norm_eps;
  l->out_gate_rank = out_gate_rank;
  if (opts) l->opts = *opts;
  const int64_t HD = H * D, r = out_gate_rank;
  /* mat: a weight matrix (the "w_*"), stored as `matrices`; the rest stays fp32 */
  struct { clmoe_tensor *t; int64_t s0, s1; int mat; } list[] = {
      {&l->w_q, HD, d, 1}, {&l->w_k, HD, d, 1}, {&l->w_v, HD, d, 1}, {&l->w_beta, H, d, 1},
      {&l->w_a_down, rank, d, 1}, {&l->w_a_up, HD, rank, 1}, {&l->dt_bias, H, D, 0}, {&l->A_log, H, 0, 0},
      {&l->conv_q, HD, conv_width, 0}, {&l->conv_k, HD, conv_width, 0}, {&l->conv_v, HD, conv_width, 0},
      {&l->o_gain, D, 0, 0}, {r ? &l->w_g_down : &l->w_g, r ? r : HD, d, 1}, {r ? &l->w_g_up : NULL, HD, r, 1},
      {&l->w_o, d, HD, 1}};
  for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
    if (!list[i].t) continue;
    const int64_t shape[2] = {list[i].s0, list[i].s1};
    clmoe_status st = clmoe_tensor_create(ctx, list[i].t, list[i].mat ? matrices : CLMOE_F32, list[i].s1 ? 2 : 1,
                                          shape);
    if (st != CLMOE_OK) {
      clmoe_kda_layer_destroy(l);
      return st;
    }
  }
  return CLMOE_OK;
}

/* dt_bias sets each channel's decay rate at initialisation (z = 0, A_log = 0): rates
 * -g log-uniform in [1e-3, 0.5] per token, memories from about 2 to 1000 tokens, as
 * Mamba initialises its time steps. With dt_bias = 0 every channel would start at
 * g = lb / 2 (alpha = e^-2.5 for lb = -5): nothing survives a few tokens and recall has to
 * be learnt against that. Drawn on the host from the counter-based generator, so every
 * device gets the same bits. */
static clmoe_status init_dt_bias(clmoe_kda_layer *l, uint64_t seed)
{
  const int64_t n = l->H * l->D;
  const double lb = l->opts.lower_bound != 0.0f ? fabs((double)l->opts.lower_bound) : 5.0;
  float *h = malloc((size_t)n * sizeof *h);
  if (!h) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_kda_layer_init: out of host memory");
  for (int64_t i = 0; i < n; i++) {
    const double u = clmoe_random_uniform(seed, (uint64_t)i, 0.0f, 1.0f);
    const double rate = exp(log(1e-3) + u * (log(0.5) - log(1e-3)));
    if (l->opts.gate == CLMOE_KDA_GATE_UNBOUNDED) {
      h[i] = (float)log(expm1(rate)); /* softplus(dt_bias) = rate */
    } else {
      const double p = rate / lb; /* sigmoid(dt_bias) = rate / |lb| */
      h[i] = (float)log(p / (1.0 - p));
    }
  }
  clmoe_status st = clmoe_tensor_write(&l->dt_bias, h, (size_t)n * sizeof *h);
  free(h);
  return st;
}

clmoe_status clmoe_kda_layer_init(clmoe_kda_layer *l, uint64_t seed)
{
  clmoe_tensor *t[NPARAM];
  const char *names[NPARAM];
  const int n = clmoe_kda_layer_params(l, t, names, NULL);
  for (int i = 0; i < n; i++) {
    if (t[i] == &l->A_log) CLMOE_TRY(clmoe_tensor_fill(t[i], 0.0));
    else if (t[i] == &l->dt_bias) CLMOE_TRY(init_dt_bias(l, seed * 64 + (uint64_t)i));
    else if (t[i] == &l->o_gain) CLMOE_TRY(clmoe_tensor_fill(t[i], 1.0));
    else CLMOE_TRY(clmoe_tensor_fill_normal(t[i], seed * 64 + (uint64_t)i, 0.0f, 0.02f));
  }
  /* Convolutions start near the identity: 1 on the newest tap. A [C, W] row-major tensor's
   * newest tap of channel c is element c W + W - 1. */
  clmoe_tensor *conv[3] = {&l->conv_q, &l->conv_k, &l->conv_v};
  const int64_t C = l->H * l->D, W = l->conv_width;
  for (int j = 0; j < 3; j++) {
    float *h = malloc((size_t)(C * W) * sizeof *h);
    if (!h) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_kda_layer_init: out of host memory");
    clmoe_status st = clmoe_tensor_read(conv[j], h, (size_t)(C * W) * sizeof *h);
    for (int64_t c = 0; st == CLMOE_OK && c < C; c++) h[c * W + W - 1] += 1.0f;
    if (st == CLMOE_OK) st = clmoe_tensor_write(conv[j], h, (size_t)(C * W) * sizeof *h);
    free(h);
    CLMOE_TRY(st);
  }
  return CLMOE_OK;
}
