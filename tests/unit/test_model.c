/* CUnit suite: the whole model on the tiny preset: the loss at initialisation, the
 * gradient of every parameter group against finite differences of the loss along random
 * directions, training steps lowering the loss, checkpoints restoring the same losses, the
 * training precision (bf16 weight copies and their products). The gradients and training
 * also with the plain residual ([model] residual = plain); test_model_plain.c compares that
 * stack with a double-precision reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"

enum { B = 2, T = 24 };
static int32_t tokens[B * T], targets[B * T];

static void batch(uint64_t seed)
{
  /* A learnable pattern: each sequence repeats a short random motif. */
  for (int b = 0; b < B; b++)
    for (int t = 0; t <= T; t++) {
      int v = (int)(clmoe_random_uniform(seed, (uint64_t)(b * 7 + t % 7), 0.0f, 1.0f) * 255.0f);
      if (t < T) tokens[b * T + t] = v;
      if (t > 0) targets[b * T + t - 1] = v;
    }
}

/* The tiny preset with the residual form `residual` (clmoe_residual); smooth = 1 routes
 * every token to all of 8 experts (top_k = experts), so the loss has no top-k discontinuity
 * for finite differences to trip over. */
static clmoe_model *tiny_form(uint64_t seed, int smooth, int residual)
{
  clmoe_config cfg;
  clmoe_model *m = NULL;
  if (clmoe_config_preset("tiny", &cfg) != CLMOE_OK) return NULL;
  cfg.residual = residual;
  if (smooth) {
    cfg.experts = 8, cfg.top_k = 8;
    snprintf(cfg.balancing, sizeof cfg.balancing, "none"); /* QB needs top_k < experts */
  }
  if (clmoe_model_create(test_ctx, &cfg, &m) != CLMOE_OK) {
    fprintf(stderr, "\n  %s\n", clmoe_last_error());
    return NULL;
  }
  if (clmoe_model_init(m, seed) != CLMOE_OK) {
    clmoe_model_destroy(m);
    return NULL;
  }
  return m;
}

static clmoe_model *tiny(uint64_t seed, int smooth) { return tiny_form(seed, smooth, CLMOE_RESIDUAL_ATTN_RES); }

static void test_init_loss(void)
{
  clmoe_model *m = tiny(1, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  batch(3);
  double loss = 0.0;
  int64_t scored = 0;
  TEST_OK(clmoe_model_forward(m, B, T, tokens, targets, 0, &loss, &scored));
  CU_ASSERT_EQUAL(scored, B * T);
  CU_ASSERT(fabs(loss - log(256.0)) < 0.05); /* small initial logits: nearly uniform */
  clmoe_model_destroy(m);
}

/* Loss at theta + h v where v is a fixed random direction over the chosen parameters. */
static double loss_along(clmoe_model *m, const char *prefix, double h, uint64_t dir_seed)
{
  clmoe_params *ps = clmoe_model_params(m);
  for (int i = 0; i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!p->trainable || strncmp(p->name, prefix, strlen(prefix))) continue;
    clmoe_tensor v;
    if (clmoe_tensor_create(test_ctx, &v, CLMOE_F32, p->value->ndim, p->value->shape) != CLMOE_OK) return NAN;
    clmoe_tensor_fill_normal(&v, dir_seed + (uint64_t)i, 0.0f, 1.0f);
    clmoe_axpy(test_ctx, (float)h, &v, p->value);
    clmoe_tensor_destroy(&v);
  }
  double loss = NAN;
  int64_t scored;
  if (clmoe_model_forward(m, B, T, tokens, targets, 0, &loss, &scored) != CLMOE_OK) return NAN;
  return loss;
}

/* g . v for the same direction. */
static double grad_dot(clmoe_model *m, const char *prefix, uint64_t dir_seed)
{
  clmoe_params *ps = clmoe_model_params(m);
  double dot = 0.0;
  for (int i = 0; i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!p->trainable || strncmp(p->name, prefix, strlen(prefix))) continue;
    size_t n = (size_t)clmoe_tensor_numel(p->value);
    float *g = malloc(n * sizeof *g);
    clmoe_tensor_read(&p->grad, g, n * sizeof *g);
    for (size_t e = 0; e < n; e++) dot += (double)g[e] * clmoe_random_normal(dir_seed + (uint64_t)i, e, 0.0f, 1.0f);
    free(g);
  }
  return dot;
}

static void check_gradients(int residual)
{
  clmoe_model *m = tiny_form(2, 1, residual);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  batch(4);
  double loss;
  int64_t scored;
  TEST_OK(clmoe_params_zero_grad(clmoe_model_params(m)));
  TEST_OK(clmoe_model_forward(m, B, T, tokens, targets, 1, &loss, &scored));
  TEST_OK(clmoe_model_backward(m));
  /* Parameter groups, checked one by one so that a failure names the group. */
  static const char *const groups[] = {"embed", "head", "final/", "layer0/mixer/", "layer0/ffn/",
                                       "layer1/mixer/", "layer1/ffn/", "layer3/mixer/", "layer3/ffn/", ""};
  for (size_t gidx = 0; gidx < sizeof groups / sizeof groups[0]; gidx++) {
    const uint64_t dir = 777 + 31 * gidx;
    const double gd = grad_dot(m, groups[gidx], dir);
    /* A step that changes the loss by about 5e-4: large enough to rise above fp32 rounding,
     * small enough for the KDA layers' curvature. */
    double h = 2.5e-4 / (fabs(gd) + 1e-12);
    h = h < 2e-5 ? 2e-5 : h > 1e-3 ? 1e-3 : h;
    double lp = loss_along(m, groups[gidx], h, dir);
    double lm = loss_along(m, groups[gidx], -2.0 * h, dir);
    loss_along(m, groups[gidx], h, dir); /* back to theta */
    double fd = (lp - lm) / (2.0 * h);
    double err = fabs(fd - gd) / (fabs(gd) + 1e-4);
    /* 1% plus what fp32 rounding of the loss (about 2e-6) does to a difference of 2 h g.v. */
    const double tol = 1e-2 + 2e-6 / (2.0 * h * fabs(gd));
    if (!(err < tol) || getenv("CLMOE_TEST_VERBOSE"))
      fprintf(stderr, "\n  %s group '%s': finite difference %.6g, gradient %.6g (rel err %.3g, tolerance %.3g)\n",
              residual == CLMOE_RESIDUAL_PLAIN ? "plain" : "attn_res", groups[gidx], fd, gd, err, tol);
    CU_ASSERT(err < tol);
  }
  clmoe_model_destroy(m);
}

static void test_gradients(void) { check_gradients(CLMOE_RESIDUAL_ATTN_RES); }
static void test_gradients_plain(void) { check_gradients(CLMOE_RESIDUAL_PLAIN); }

static void check_training(int residual)
{
  clmoe_model *m = tiny_form(5, 0, residual);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  clmoe_params *ps = clmoe_model_params(m);
  batch(6);
  clmoe_adamw hp = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f};
  double first = 0.0, loss = 0.0;
  int64_t scored;
  for (int step = 0; step < 30; step++) {
    TEST_OK(clmoe_params_zero_grad(ps));
    TEST_OK(clmoe_model_forward(m, B, T, tokens, targets, 1, &loss, &scored));
    TEST_OK(clmoe_model_balance_update(m));
    TEST_OK(clmoe_model_backward(m));
    TEST_OK(clmoe_params_adamw(ps, &hp, 1.0, NULL));
    if (step == 0) first = loss;
  }
  if (!(loss < 0.8 * first) || getenv("CLMOE_TEST_VERBOSE"))
    fprintf(stderr, "\n  residual %d: loss %.4f -> %.4f\n", residual, first, loss);
  CU_ASSERT(loss < 0.8 * first);
  clmoe_model_destroy(m);
}

static void test_training_lowers_loss(void) { check_training(CLMOE_RESIDUAL_ATTN_RES); }
static void test_training_plain(void) { check_training(CLMOE_RESIDUAL_PLAIN); }

/* The step without waits (clmoe_model_adamw + clmoe_model_step_read) against the waiting
 * one (a forward reading its loss, clmoe_params_adamw reading the norm) from the same
 * start: the same losses, gradient norms and MoE loads bit for bit over steps that clip
 * (clip 0.5), the same parameters after them, and one blocking read, no blocking write and
 * no finish per step. Then a step whose gradient holds a NaN: the error names the norm,
 * the parameters and the step count stay as they were. */
static void test_step_without_waits(void)
{
  clmoe_model *a = tiny(9, 0), *b = tiny(9, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  clmoe_params *pa = clmoe_model_params(a), *pb = clmoe_model_params(b);
  const clmoe_adamw hp = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  const int nmoe = clmoe_model_moe_layers(a);
  CU_ASSERT_FATAL(nmoe > 0);
  /* without fp64 the clip's norm is read on the host: one more read */
  const int64_t reads = clmoe_ctx_caps(test_ctx)->has_fp64 ? 1 : 2;
  int clipped = 0;
  for (int step = 0; step < 4; step++) {
    batch(20 + (uint64_t)step);
    double la, lb, na, nb;
    int64_t scored;
    clmoe_moe_load ma, mb;
    TEST_OK(clmoe_params_zero_grad(pa));
    TEST_OK(clmoe_model_forward(a, B, T, tokens, targets, 1, &la, &scored));
    TEST_OK(clmoe_model_moe_load(a, nmoe - 1, &ma));
    TEST_OK(clmoe_model_balance_update(a));
    TEST_OK(clmoe_model_backward(a));
    TEST_OK(clmoe_params_adamw(pa, &hp, 0.5, &na));
    clmoe_ctx_counters c0, c1;
    TEST_OK(clmoe_params_zero_grad(pb));
    clmoe_ctx_counters_get(test_ctx, &c0);
    TEST_OK(clmoe_model_forward(b, B, T, tokens, targets, 1, NULL, &scored));
    TEST_OK(clmoe_model_balance_update(b));
    TEST_OK(clmoe_model_backward(b));
    TEST_OK(clmoe_model_adamw(b, &hp, 0.5));
    TEST_OK(clmoe_model_step_read(b, &lb, &nb));
    TEST_OK(clmoe_model_moe_load(b, nmoe - 1, &mb));
    clmoe_ctx_counters_get(test_ctx, &c1);
    clipped += na > 0.5;
    if (la != lb || fabs(na - nb) > 1.6e-15 * fabs(nb) || ma.max != mb.max || ma.min != mb.min || ma.empty != mb.empty ||
        c1.blocking_reads - c0.blocking_reads != reads || c1.blocking_writes != c0.blocking_writes ||
        c1.finishes != c0.finishes)
      fprintf(stderr, "\n  step %d: loss %.9g / %.9g, norm %.17g / %.17g, moe max %lld / %lld; waits: %lld reads, "
              "%lld writes, %lld finishes\n", step, la, lb, na, nb, (long long)ma.max, (long long)mb.max,
              (long long)(c1.blocking_reads - c0.blocking_reads), (long long)(c1.blocking_writes - c0.blocking_writes),
              (long long)(c1.finishes - c0.finishes));
    /* The device adds the same sums in the host's order in double, but an implementation
     * may round that double arithmetic's last bit otherwise (Intel's CPU runtime: 1 ulp of
     * the norm, the same losses and parameters): a few ulps are allowed. */
    CU_ASSERT(la == lb && fabs(na - nb) <= 1.6e-15 * fabs(nb) && isfinite(la) && isfinite(na));
    CU_ASSERT(ma.max == mb.max && ma.min == mb.min && ma.empty == mb.empty);
    CU_ASSERT(c1.blocking_reads - c0.blocking_reads == reads);
    CU_ASSERT(c1.blocking_writes == c0.blocking_writes && c1.finishes == c0.finishes);
  }
  CU_ASSERT(clipped > 0); /* the clip's scale was < 1 on some step */
  CU_ASSERT_EQUAL(pa->step, pb->step);
  for (int i = 0; i < pa->n; i++) { /* the same parameters, bit for bit */
    const size_t bytes = clmoe_tensor_bytes(pa->p[i].value);
    char *x = malloc(bytes + 1), *y = malloc(bytes + 1);
    CU_ASSERT_FATAL(x && y);
    TEST_OK(clmoe_tensor_read(pa->p[i].value, x, bytes));
    TEST_OK(clmoe_tensor_read(pb->p[i].value, y, bytes));
    if (memcmp(x, y, bytes)) fprintf(stderr, "\n  parameter %s differs\n", pa->p[i].name);
    CU_ASSERT(memcmp(x, y, bytes) == 0);
    free(x), free(y);
  }
  /* a NaN in one gradient: the step is not taken */
  clmoe_param *p0 = &pb->p[0];
  const size_t bytes = clmoe_tensor_bytes(p0->value);
  char *before = malloc(bytes + 1), *after = malloc(bytes + 1);
  CU_ASSERT_FATAL(before && after);
  TEST_OK(clmoe_tensor_read(p0->value, before, bytes));
  const int64_t taken = pb->step;
  double loss, norm;
  int64_t scored;
  TEST_OK(clmoe_params_zero_grad(pb));
  TEST_OK(clmoe_model_forward(b, B, T, tokens, targets, 1, NULL, &scored));
  TEST_OK(clmoe_model_backward(b));
  TEST_OK(clmoe_tensor_fill(&pb->p[pb->n - 1].grad, NAN));
  const clmoe_status sa = clmoe_model_adamw(b, &hp, 0.5); /* fails here without fp64 */
  CU_ASSERT_EQUAL(sa == CLMOE_OK ? clmoe_model_step_read(b, &loss, &norm) : sa, CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT(strstr(clmoe_last_error(), "gradient norm is") != NULL);
  if (sa == CLMOE_OK) CU_ASSERT(isnan(norm) && isfinite(loss));
  CU_ASSERT_EQUAL(pb->step, taken);
  if (sa == CLMOE_OK) { /* read again: the same error, the count taken back once */
    CU_ASSERT_EQUAL(clmoe_model_step_read(b, &loss, &norm), CLMOE_ERR_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(pb->step, taken);
  }
  TEST_OK(clmoe_tensor_read(p0->value, after, bytes));
  CU_ASSERT(memcmp(before, after, bytes) == 0);
  free(before), free(after);
  clmoe_model_destroy(a);
  clmoe_model_destroy(b);
}

/* Information flows forward in time only, within a sequence: changing token s changes the
 * logits at every t >= s (through KDA states and MLA attention) and no logit before s nor in
 * the other sequence (bit for bit). For the tiny stack, an all-KDA and an all-MLA stack. */
static void check_flow(int mla, const char *what)
{
  clmoe_config cfg;
  TEST_OK(clmoe_config_preset("tiny", &cfg));
  if (mla >= 0)
    for (int i = 0; i < cfg.layers; i++) cfg.is_mla[i] = (unsigned char)mla;
  clmoe_model *m = NULL;
  TEST_OK(clmoe_model_create(test_ctx, &cfg, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  TEST_OK(clmoe_model_init(m, 11));
  batch(12);
  const int64_t V = cfg.vocab, n = B * T * V, s = 9;
  float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a && b ? a : NULL);
  TEST_OK(clmoe_model_forward(m, B, T, tokens, NULL, 0, NULL, NULL));
  TEST_OK(clmoe_tensor_read(clmoe_model_logits(m), a, (size_t)n * sizeof *a));
  tokens[s] = (tokens[s] + 128) % 256; /* sequence 0, position s */
  TEST_OK(clmoe_model_forward(m, B, T, tokens, NULL, 0, NULL, NULL));
  TEST_OK(clmoe_tensor_read(clmoe_model_logits(m), b, (size_t)n * sizeof *b));
  int past_same = 1, other_same = 1, future_moved = 1;
  double weakest = INFINITY;
  for (int64_t t = 0; t < T; t++) {
    double diff = 0.0, mag = 0.0;
    for (int64_t v = 0; v < V; v++) {
      const int64_t i = t * V + v, j = (T + t) * V + v;
      if (t < s && memcmp(&a[i], &b[i], sizeof a[i])) past_same = 0;
      if (memcmp(&a[j], &b[j], sizeof a[j])) other_same = 0;
      diff += fabs((double)a[i] - b[i]), mag += fabs((double)a[i]);
    }
    if (t > s) { /* later positions see s only through the mixers */
      weakest = fmin(weakest, diff / mag);
      if (!(diff / mag > 1e-5)) future_moved = 0;
    }
  }
  if (!past_same || !other_same || !future_moved)
    fprintf(stderr, "\n    %s: past unchanged %d, other sequence unchanged %d, later positions moved %d "
            "(weakest relative change %.3g)\n", what, past_same, other_same, future_moved, weakest);
  CU_ASSERT(past_same);
  CU_ASSERT(other_same);
  CU_ASSERT(future_moved);
  free(a), free(b);
  clmoe_model_destroy(m);
}


/* Reads a parameter's value and its bf16 copy; 1 when every copy element is the value
 * rounded to nearest even, bit for bit. */
static int copy_is_rounded(const clmoe_param *p)
{
  const int64_t n = clmoe_tensor_numel(p->value);
  float *v = malloc((size_t)n * sizeof *v), *c = malloc((size_t)n * sizeof *c);
  int same = v && c && clmoe_tensor_read(p->value, v, (size_t)n * sizeof *v) == CLMOE_OK &&
             clmoe_tensor_read_f32(&p->bf16, c) == CLMOE_OK;
  for (int64_t i = 0; same && i < n; i++)
    if (clmoe_f32_from_bf16(clmoe_bf16_from_f32(v[i])) != c[i] || c[i] != c[i]) same = 0;
  free(v), free(c);
  return same;
}

/* The training precision: auto follows the tile probe; bf16 gives exactly the 2-D w_*
 * matrices, the routed experts' stacks [E, ...] and the head a copy (the value rounded),
 * which AdamW keeps rounded; the logits move by bf16 rounding and no more; back to fp32 the
 * copies go. */
static void test_precision(void)
{
  clmoe_model *m = tiny(21, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  const clmoe_precision want_auto =
      clmoe_ctx_tile_impl(test_ctx) == CLMOE_TILE_PORTABLE ? CLMOE_PRECISION_FP32 : CLMOE_PRECISION_BF16;
  CU_ASSERT_EQUAL(clmoe_model_precision(m), want_auto);
  clmoe_params *ps = clmoe_model_params(m);
  batch(22);
  const int64_t n = B * T * clmoe_model_config(m)->vocab;
  float *f32 = malloc((size_t)n * sizeof *f32), *h = malloc((size_t)n * sizeof *h);
  CU_ASSERT_PTR_NOT_NULL_FATAL(f32 && h ? f32 : NULL);
  TEST_OK(clmoe_model_set_precision(m, CLMOE_PRECISION_FP32));
  TEST_OK(clmoe_model_forward(m, B, T, tokens, NULL, 0, NULL, NULL));
  TEST_OK(clmoe_tensor_read(clmoe_model_logits(m), f32, (size_t)n * sizeof *f32));

  TEST_OK(clmoe_model_set_precision(m, CLMOE_PRECISION_BF16));
  CU_ASSERT_EQUAL(clmoe_model_precision(m), CLMOE_PRECISION_BF16);
  int copies = 0, wrong = 0;
  for (int i = 0; i < ps->n; i++) {
    const clmoe_param *p = &ps->p[i];
    const char *base = strrchr(p->name, '/') ? strrchr(p->name, '/') + 1 : p->name;
    const int expert = p->value->ndim == 3 && strstr(p->name, "/ffn/") &&
                       (!strcmp(base, "w_gate") || !strcmp(base, "w_upp") || !strcmp(base, "w_dn"));
    const int want =
        p->trainable && (expert || (p->value->ndim == 2 && (!strncmp(base, "w_", 2) || !strcmp(p->name, "head"))));
    if (want != (p->bf16.buf != NULL)) {
      fprintf(stderr, "\n    %s: bf16 copy %s\n", p->name, want ? "missing" : "not expected");
      wrong++;
    }
    if (p->bf16.buf) copies++;
  }
  CU_ASSERT_EQUAL(wrong, 0);
  CU_ASSERT(copies > 10);
  clmoe_param *head = clmoe_params_find(ps, "head");
  CU_ASSERT_PTR_NOT_NULL_FATAL(head);
  CU_ASSERT(copy_is_rounded(head));
  CU_ASSERT_PTR_NULL(clmoe_params_find(ps, "embed")->bf16.buf);

  TEST_OK(clmoe_model_forward(m, B, T, tokens, NULL, 0, NULL, NULL));
  TEST_OK(clmoe_tensor_read(clmoe_model_logits(m), h, (size_t)n * sizeof *h));
  double diff = 0.0, mag = 0.0;
  for (int64_t i = 0; i < n; i++) diff += fabs((double)h[i] - f32[i]), mag += fabs((double)f32[i]);
  /* bf16 operands: about 2^-9 relative per product, a few of them in a row */
  if (!(diff / mag > 0.0 && diff / mag < 2e-2)) fprintf(stderr, "\n    bf16 logits differ by %.3g (relative)\n", diff / mag);
  CU_ASSERT(diff / mag > 0.0 && diff / mag < 2e-2);

  /* one training step: the copies follow the updated weights */
  clmoe_adamw hp = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  double loss;
  int64_t scored;
  TEST_OK(clmoe_params_zero_grad(ps));
  TEST_OK(clmoe_model_forward(m, B, T, tokens, targets, 1, &loss, &scored));
  TEST_OK(clmoe_model_backward(m));
  TEST_OK(clmoe_params_adamw(ps, &hp, 1.0, NULL));
  CU_ASSERT(isfinite(loss));
  int rounded = 1;
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i].bf16.buf && !copy_is_rounded(&ps->p[i])) rounded = 0;
  CU_ASSERT(rounded);

  /* back to fp32: no copies */
  TEST_OK(clmoe_model_set_precision(m, CLMOE_PRECISION_FP32));
  for (int i = 0; i < ps->n; i++) CU_ASSERT_PTR_NULL(ps->p[i].bf16.buf);
  CU_ASSERT_EQUAL(clmoe_model_set_precision(m, (clmoe_precision)7), CLMOE_ERR_INVALID_ARGUMENT);
  free(f32), free(h);
  clmoe_model_destroy(m);
}

static void test_flow(void)
{
  check_flow(-1, "tiny");
  check_flow(0, "all KDA");
  check_flow(1, "all MLA");
}

/* A model created for inference holds no gradients or moments (about a quarter of the
 * device memory), computes the same logits, and refuses every training call. */
static void test_inference_model(void)
{
  clmoe_config cfg;
  TEST_OK(clmoe_config_preset("tiny", &cfg));
  clmoe_pool_stats s0, s1, s2;
  clmoe_ctx_pool_stats(test_ctx, &s0);
  clmoe_model *tm = NULL, *im = NULL;
  TEST_OK(clmoe_model_create(test_ctx, &cfg, &tm));
  clmoe_ctx_pool_stats(test_ctx, &s1);
  TEST_OK(clmoe_model_create_inference(test_ctx, &cfg, &im));
  clmoe_ctx_pool_stats(test_ctx, &s2);
  CU_ASSERT_PTR_NOT_NULL_FATAL(tm && im ? im : NULL);
  const double train_bytes = (double)(s1.in_use_bytes - s0.in_use_bytes),
               infer_bytes = (double)(s2.in_use_bytes - s1.in_use_bytes);
  CU_ASSERT(infer_bytes < 0.3 * train_bytes);
  TEST_OK(clmoe_model_init(tm, 4));
  TEST_OK(clmoe_model_init(im, 4));
  batch(5);
  const int64_t n = B * T * cfg.vocab;
  float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a && b ? a : NULL);
  TEST_OK(clmoe_model_forward(tm, B, T, tokens, NULL, 0, NULL, NULL));
  TEST_OK(clmoe_tensor_read(clmoe_model_logits(tm), a, (size_t)n * sizeof *a));
  TEST_OK(clmoe_model_forward(im, B, T, tokens, NULL, 0, NULL, NULL));
  TEST_OK(clmoe_tensor_read(clmoe_model_logits(im), b, (size_t)n * sizeof *b));
  CU_ASSERT(memcmp(a, b, (size_t)n * sizeof *a) == 0);
  clmoe_params *ps = clmoe_model_params(im);
  clmoe_adamw hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
  CU_ASSERT_EQUAL(clmoe_model_forward(im, B, T, tokens, targets, 1, NULL, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_params_zero_grad(ps), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_params_adamw(ps, &hp, 1.0, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_params_save(ps, "/tmp/clmoe-never-written.safetensors", NULL), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "inference"));
  free(a), free(b);
  clmoe_model_destroy(tm);
  clmoe_model_destroy(im);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "a model created for inference: a quarter of the memory, same logits, no training", test_inference_model);
  CU_add_test(suite, "causal: a token moves later logits only, in its own sequence", test_flow);
  CU_add_test(suite, "loss at initialisation is ln(vocab)", test_init_loss);
  CU_add_test(suite, "gradients = finite differences, by parameter group", test_gradients);
  CU_add_test(suite, "training steps lower the loss", test_training_lowers_loss);
  CU_add_test(suite, "a step without waits: the waiting step's losses, norms, loads and parameters, one read",
              test_step_without_waits);
  CU_add_test(suite, "plain residual: gradients = finite differences, by parameter group", test_gradients_plain);
  CU_add_test(suite, "plain residual: training steps lower the loss", test_training_plain);
  CU_add_test(suite, "precision: bf16 copies of the w_* matrices and the head, rounded, kept by AdamW", test_precision);
}

int main(void) { return test_main("model", add_tests); }
