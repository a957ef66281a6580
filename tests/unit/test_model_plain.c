/* CUnit suite: the plain residual stack ([model] residual = plain, Kimi Linear's) of the tiny
 * preset against a double-precision host reference of the whole stack, built from the
 * layer references of check/ref (the KDA mixer, gated MLA, the SiTU-GLU FFN, the MoE layer):
 *   x = embed(ids); per layer x += mixer(RMSNorm_1(x)), x += ffn(RMSNorm_2(x));
 *   logits = head RMSNorm_f(x)
 * on random norm gains and matrices (every sub-layer moves x as much as the embedding does);
 * the registry of that form (the norms' names, no AttnRes tensors); a checkpoint of it saves
 * and loads, its config saying residual = plain. The gradients and training of the form are
 * in test_model.c, prefill and decoding in test_generate.c. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_common.h"
#include "check/ref/reference.h"
#include "check/ref/ref_kda.h"
#include "check/ref/ref_layers.h"
#include "check/ref/ref_mla.h"
#include "check/ref/ref_moe.h"

enum { B = 2, T = 11, MAX_HOST = 512 };

/* The tiny preset with the plain residual; every token routed to all of its 8 experts
 * (top_k = experts), so that the reference's choice of experts cannot differ from the
 * device's by a rounding-level tie. */
static clmoe_status plain_config(clmoe_config *cfg)
{
  clmoe_status st = clmoe_config_preset("tiny", cfg);
  if (st != CLMOE_OK) return st;
  cfg->residual = CLMOE_RESIDUAL_PLAIN;
  cfg->experts = 8, cfg->top_k = 8;
  snprintf(cfg->balancing, sizeof cfg->balancing, "none");
  return CLMOE_OK;
}

/* Host copies of the model's parameters, by registry name. */
typedef struct host_params {
  clmoe_params *ps;
  int n;
  double *p[MAX_HOST];
  int bad; /* a name the registry lacks, or a failed read */
} host_params;

static double *hp(host_params *h, const char *fmt, ...)
{
  char name[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  const clmoe_param *p = clmoe_params_find(h->ps, name);
  const int64_t n = p ? clmoe_tensor_numel(p->value) : 0;
  float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
  double *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
  if (!p || !f || !d || h->n == MAX_HOST || clmoe_tensor_read(p->value, f, (size_t)n * sizeof *f) != CLMOE_OK) {
    fprintf(stderr, "\n  parameter '%s': %s\n", name, p ? "not read" : "not in the registry");
    h->bad = 1;
    free(f), free(d);
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) d[i] = f[i];
  free(f);
  h->p[h->n++] = d;
  return d;
}

/* y [N, d] = the KDA mixer of layer l on x [N, d] (B sequences of T tokens). */
static void ref_kda_mixer(host_params *h, const clmoe_config *c, int l, const double *x, double *y)
{
  ref_kda_layer L = {0};
  L.d = c->d_model, L.H = c->kda_heads, L.D = c->kda_head_dim, L.rank = c->kda_gate_rank;
  L.W = c->kda_conv_width, L.eps = c->norm_eps;
  const double **w[] = {&L.w_q, &L.w_k, &L.w_v, &L.w_beta, &L.w_a_down, &L.w_a_up, &L.dt_bias, &L.A_log,
                        &L.conv_q, &L.conv_k, &L.conv_v, &L.o_gain, &L.w_g, &L.w_o};
  static const char *const names[] = {"w_q", "w_k", "w_v", "w_beta", "w_a_down", "w_a_up", "dt_bias", "A_log",
                                      "conv_q", "conv_k", "conv_v", "o_gain", "w_g", "w_o"};
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) *w[i] = hp(h, "layer%d/mixer/%s", l, names[i]);
  if (!h->bad) ref_kda_layer_forward(&L, B, T, NULL, B, x, y);
}

/* y [N, d] = the gated MLA mixer of layer l on x [N, d]. */
static void ref_mla_mixer(host_params *h, const clmoe_config *c, int l, const double *x, double *y)
{
  const int64_t Dn = c->mla_qk_nope_dim, Dr = c->mla_qk_rope_dim;
  ref_mla_layer L = {{B, T, c->mla_heads, Dn, Dr, c->mla_v_dim, NULL, 0, 1.0 / sqrt((double)(Dn + Dr)), 0},
                     c->d_model, c->mla_q_rank, c->mla_kv_rank, c->mla_norm_eps > 0.0 ? c->mla_norm_eps : c->norm_eps, 0,
                     !c->mla_output_gate};
  const double *w[REF_MLA_NWEIGHTS];
  for (int i = 0; i < REF_MLA_NWEIGHTS; i++) w[i] = hp(h, "layer%d/mixer/%s", l, clmoe_mla_weight_name(i));
  if (!h->bad) ref_mla_forward(&L, w, x, y);
}

/* y [N, d] = the feed-forward of layer l (the dense SiTU-GLU FFN or the MoE) on x [N, d]. */
static void ref_ffn(host_params *h, const clmoe_config *c, int l, const double *x, double *y)
{
  const int64_t N = B * T, d = c->d_model;
  memset(y, 0, (size_t)(N * d) * sizeof *y);
  if (l < c->dense_layers) {
    const double *g = hp(h, "layer%d/ffn/w_gate", l), *u = hp(h, "layer%d/ffn/w_upp", l);
    const double *dn = hp(h, "layer%d/ffn/w_dn", l);
    if (!h->bad) ref_situ_ffn_forward(N, d, c->dense_ff, x, g, u, dn, y);
    return;
  }
  const int64_t S = c->shared_experts * c->shared_ff;
  ref_moe_shape s = {N, d, c->latent, c->experts, c->top_k, c->expert_ff, S, c->norm_eps, c->activation, c->groups, c->topk_groups, !c->renormalize, c->routed_scale};
  ref_moe_params P = {hp(h, "layer%d/ffn/w_router", l), hp(h, "layer%d/ffn/w_down", l),
                      hp(h, "layer%d/ffn/w_gate", l),   hp(h, "layer%d/ffn/w_upp", l),
                      hp(h, "layer%d/ffn/w_dn", l),     hp(h, "layer%d/ffn/norm_gain", l),
                      hp(h, "layer%d/ffn/w_up", l),     NULL, NULL, NULL};
  if (S > 0) {
    P.sh_gate = hp(h, "layer%d/ffn/shared/w_gate", l), P.sh_upp = hp(h, "layer%d/ffn/shared/w_upp", l);
    P.sh_dn = hp(h, "layer%d/ffn/shared/w_dn", l);
  }
  int32_t *topk = malloc((size_t)(N * s.k) * sizeof *topk);
  if (!topk) h->bad = 1;
  if (!h->bad) {
    ref_moe_route(&s, P.w_router, NULL, x, s.k, topk, NULL); /* the bias buffer is zero */
    ref_moe_forward(&s, &P, x, topk, y, NULL);
  }
  free(topk);
}

/* The reference logits [N, V] of the stack; the sub-layer `skip` (2 l + 0 mixer, + 1 FFN;
 * -1: none) left out, to show what one sub-layer is worth against the tolerance. */
static int ref_stack(host_params *h, const clmoe_config *c, const int32_t *ids, int skip, double *logits)
{
  const int64_t N = B * T, d = c->d_model;
  double *x = malloc((size_t)(N * d) * sizeof *x), *hn = malloc((size_t)(N * d) * sizeof *hn);
  double *y = malloc((size_t)(N * d) * sizeof *y);
  const double *embed = hp(h, "embed");
  if (!x || !hn || !y) h->bad = 1;
  if (!h->bad) ref_embedding(embed, ids, N, d, x);
  for (int l = 0; !h->bad && l < c->layers; l++)
    for (int s = 0; !h->bad && s < 2; s++) {
      const double *gain = hp(h, "layer%d/%s/norm", l, s == 0 ? "mixer" : "ffn");
      if (h->bad) break;
      ref_rmsnorm(x, gain, N, d, c->norm_eps, hn);
      if (s == 1) ref_ffn(h, c, l, hn, y);
      else if (c->is_mla[l]) ref_mla_mixer(h, c, l, hn, y);
      else ref_kda_mixer(h, c, l, hn, y);
      for (int64_t i = 0; !h->bad && 2 * l + s != skip && i < N * d; i++) x[i] += y[i];
    }
  const double *gf = hp(h, "final/norm"), *head = hp(h, "head");
  if (!h->bad) {
    ref_rmsnorm(x, gf, N, d, c->norm_eps, hn);
    ref_linear(hn, head, NULL, N, d, c->vocab, logits);
  }
  free(x), free(hn), free(y);
  return !h->bad;
}

/* Largest |a - b| / (|b| + rms(b)) (the checks' measure); NaN is infinite. */
static double rel_err(const float *a, const double *b, int64_t n)
{
  double ss = 0.0, worst = 0.0;
  for (int64_t i = 0; i < n; i++) ss += b[i] * b[i];
  const double rms = sqrt(ss / (double)n);
  for (int64_t i = 0; i < n; i++) {
    const double e = fabs((double)a[i] - b[i]) / (fabs(b[i]) + rms);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}

/* Random values where the default initialisation would leave the sub-layers small next to
 * the embedding, or the gains all 1: RMSNorm gains (every "norm" and "*_gain" of the stack
 * and the layers) in [0.5, 1.5], the embedding N(0, 1), every w_* matrix and the head
 * N(0, 0.1) (a d = 64 product of about 0.8 of its input's size). */
static clmoe_status randomize(clmoe_model *m, uint64_t seed)
{
  clmoe_params *ps = clmoe_model_params(m);
  for (int i = 0; i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    const char *base = strrchr(p->name, '/') ? strrchr(p->name, '/') + 1 : p->name;
    const uint64_t s = seed + 7919u * (uint64_t)i;
    if (!p->trainable) continue;
    clmoe_status st = CLMOE_OK;
    if (strstr(base, "norm") || strstr(base, "gain")) st = clmoe_tensor_fill_uniform(p->value, s, 0.5f, 1.5f);
    else if (!strcmp(base, "embed")) st = clmoe_tensor_fill_normal(p->value, s, 0.0f, 1.0f);
    else if (!strcmp(base, "head") || (!strncmp(base, "w_", 2) && p->value->ndim >= 2))
      st = clmoe_tensor_fill_normal(p->value, s, 0.0f, 0.1f);
    if (st != CLMOE_OK) return st;
  }
  return clmoe_params_refresh_bf16(ps);
}

/* The fp32 stack accumulates the rounding of 8 sub-layers and the head: 1.5e-6 to 2.5e-6
 * measured on PoCL and Intel's CPU runtime. */
#define STACK_TOL 2e-5

static void test_stack_reference(void)
{
  clmoe_config cfg;
  clmoe_model *m = NULL;
  TEST_OK(plain_config(&cfg));
  TEST_OK(clmoe_model_create(test_ctx, &cfg, &m));
  TEST_OK(clmoe_model_set_precision(m, CLMOE_PRECISION_FP32));
  TEST_OK(clmoe_model_init(m, test_seed));
  TEST_OK(randomize(m, test_seed + 1));
  const int64_t N = B * T, V = cfg.vocab;
  int32_t ids[B * T];
  for (int64_t i = 0; i < N; i++) ids[i] = (int32_t)(clmoe_random_uniform(test_seed + 2, (uint64_t)i, 0.0f, 1.0f) * 255.0f);
  float *got = malloc((size_t)(N * V) * sizeof *got);
  double *ref = malloc((size_t)(N * V) * sizeof *ref);
  CU_ASSERT_PTR_NOT_NULL_FATAL(got && ref ? got : NULL);
  TEST_OK(clmoe_model_forward(m, B, T, ids, NULL, 0, NULL, NULL));
  TEST_OK(clmoe_tensor_read(clmoe_model_logits(m), got, (size_t)(N * V) * sizeof *got));
  host_params h = {clmoe_model_params(m), 0, {0}, 0};
  CU_ASSERT_FATAL(ref_stack(&h, &cfg, ids, -1, ref));
  const double err = rel_err(got, ref, N * V);
  /* What the comparison resolves: the stack without layer 0's mixer, or without the last
   * FFN, must miss by far more than the tolerance. */
  double miss[2];
  const int skip[2] = {0, 2 * cfg.layers - 1};
  for (int k = 0; k < 2; k++) {
    CU_ASSERT_FATAL(ref_stack(&h, &cfg, ids, skip[k], ref));
    miss[k] = rel_err(got, ref, N * V);
  }
  if (!(err <= STACK_TOL && miss[0] > 100 * STACK_TOL && miss[1] > 100 * STACK_TOL) || getenv("CLMOE_TEST_VERBOSE"))
    fprintf(stderr, "\n  plain stack logits vs double reference: %.3g (tolerance %.0e, seed %llu); without layer 0's "
            "mixer %.3g, without the last FFN %.3g\n", err, STACK_TOL, (unsigned long long)test_seed, miss[0], miss[1]);
  CU_ASSERT(err <= STACK_TOL);
  CU_ASSERT(miss[0] > 100 * STACK_TOL && miss[1] > 100 * STACK_TOL);
  for (int i = 0; i < h.n; i++) free(h.p[i]);
  free(got), free(ref);
  clmoe_model_destroy(m);
}

/* The registry of the plain form: per layer "layerL/mixer/norm" and "layerL/ffn/norm" [d],
 * "final/norm" [d], and no AttnRes tensor; the attn_res form of the same config has exactly
 * the AttnRes parameters more (a pseudo-query and a gain [d] before each sub-layer and
 * before the head). */
static void test_registry(void)
{
  clmoe_config cfg;
  clmoe_model *m = NULL, *ar = NULL;
  TEST_OK(plain_config(&cfg));
  TEST_OK(clmoe_model_create_inference(test_ctx, &cfg, &m));
  clmoe_params *ps = clmoe_model_params(m);
  int attn = 0;
  for (int i = 0; i < ps->n; i++) attn += strstr(ps->p[i].name, "attn_res") != NULL;
  CU_ASSERT_EQUAL(attn, 0);
  char name[64];
  for (int l = 0; l < cfg.layers; l++)
    for (int s = 0; s < 2; s++) {
      snprintf(name, sizeof name, "layer%d/%s/norm", l, s ? "ffn" : "mixer");
      const clmoe_param *p = clmoe_params_find(ps, name);
      CU_ASSERT_FATAL(p && p->trainable && p->value->ndim == 1 && p->value->shape[0] == cfg.d_model);
    }
  const clmoe_param *fn = clmoe_params_find(ps, "final/norm");
  CU_ASSERT_FATAL(fn && fn->value->ndim == 1 && fn->value->shape[0] == cfg.d_model);
  clmoe_config arc = cfg;
  arc.residual = CLMOE_RESIDUAL_ATTN_RES;
  TEST_OK(clmoe_model_create_inference(test_ctx, &arc, &ar));
  CU_ASSERT_EQUAL(clmoe_params_count(clmoe_model_params(ar)) - clmoe_params_count(ps),
                  (4 * cfg.layers + 2) * cfg.d_model);
  clmoe_model_destroy(ar);
  clmoe_model_destroy(m);
}

/* A checkpoint of a plain model: its config is written with residual = plain, and it loads
 * back (through clmoe_params_load and clmoe_gen_load) with the same logits, bit for bit. */
static void test_checkpoint(void)
{
  clmoe_config cfg;
  clmoe_model *m = NULL, *back = NULL, *gen = NULL;
  TEST_OK(plain_config(&cfg));
  TEST_OK(clmoe_model_create(test_ctx, &cfg, &m));
  TEST_OK(clmoe_model_init(m, test_seed + 5));
  TEST_OK(randomize(m, test_seed + 6));
  char *text = NULL, path[96];
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  clmoe_config_write(&cfg, f);
  fclose(f);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "residual = plain"));
  clmoe_ckpt_meta meta = {0};
  TEST_OK(clmoe_ckpt_meta_set(&meta, "config", text));
  snprintf(path, sizeof path, "%s/plain.safetensors", test_tmpdir("plain"));
  TEST_OK(clmoe_params_save(clmoe_model_params(m), path, &meta));
  clmoe_ckpt_meta_free(&meta);
  free(text);
  TEST_OK(clmoe_model_create(test_ctx, &cfg, &back));
  TEST_OK(clmoe_params_load(clmoe_model_params(back), path, NULL));
  TEST_OK(clmoe_gen_load(test_ctx, path, &gen, NULL));
  CU_ASSERT_EQUAL(clmoe_model_config(gen)->residual, CLMOE_RESIDUAL_PLAIN);
  const int64_t n = B * T * cfg.vocab;
  int32_t ids[B * T];
  for (int i = 0; i < B * T; i++) ids[i] = (int32_t)((i * 37 + 5) % cfg.vocab);
  float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b), *c = malloc((size_t)n * sizeof *c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a && b && c ? a : NULL);
  clmoe_model *ms[3] = {m, back, gen};
  float *out[3] = {a, b, c};
  for (int k = 0; k < 3; k++) {
    TEST_OK(clmoe_model_forward(ms[k], B, T, ids, NULL, 0, NULL, NULL));
    TEST_OK(clmoe_tensor_read(clmoe_model_logits(ms[k]), out[k], (size_t)n * sizeof *a));
  }
  CU_ASSERT(memcmp(a, b, (size_t)n * sizeof *a) == 0);
  CU_ASSERT(memcmp(a, c, (size_t)n * sizeof *a) == 0);
  free(a), free(b), free(c);
  clmoe_model_destroy(gen);
  clmoe_model_destroy(back);
  clmoe_model_destroy(m);
  remove(path);
}

static void add(CU_pSuite s)
{
  CU_add_test(s, "plain stack logits = double-precision reference of the stack", test_stack_reference);
  CU_add_test(s, "registry: the norms' names, no AttnRes tensors", test_registry);
  CU_add_test(s, "checkpoint: residual = plain written, saved and loaded", test_checkpoint);
}

int main(void) { return test_main("model_plain", add); }
