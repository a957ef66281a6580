/* CUnit suite: Stable LatentMoE. The conformance checks ("moe": layer forward/backward
 * against the double reference, dispatch, QB, the dense FFN), the reference's backward
 * against finite differences, Quantile Balancing on the report's toy case and on a skewed
 * router with 896 experts, deterministic tie-breaking, bit-for-bit repeatability, load
 * statistics and argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/ref/ref_moe.h"
#include "test_common.h"

static double urand(uint64_t *s)
{
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0;
}

/* ---- the reference's backward against central differences ------------------------------- */

enum { FD_X = 10, FD_N = 11 }; /* parameters 0..9 (ref_moe_params order), then x */

static double **fd_slot(ref_moe_params *p, int i)
{
  double **a[10] = {&p->w_router, &p->w_down, &p->w_gate, &p->w_upp, &p->w_dn,
                    &p->gain,     &p->w_up,   &p->sh_gate, &p->sh_upp, &p->sh_dn};
  return a[i];
}

static double fd_loss(const ref_moe_shape *s, const ref_moe_params *P, const double *x,
                      const int32_t *topk, const double *dy)
{
  double *y = malloc((size_t)(s->m * s->d) * sizeof *y), L = 0.0;
  ref_moe_forward(s, P, x, topk, y, NULL);
  for (int64_t i = 0; i < s->m * s->d; i++) L += y[i] * dy[i];
  free(y);
  return L;
}

/* Every parameter and x of the shape s; a latent width of 0 has no w_down, gain or w_up. */
static void ref_fd(const ref_moe_shape *sp)
{
  const ref_moe_shape s = *sp;
  const int64_t lw = s.l > 0 ? s.l : s.d; /* the experts' width */
  const int64_t n[FD_N] = {s.E * s.d, s.l * s.d, s.E * s.f * lw, s.E * s.f * lw, s.E * lw * s.f,
                           s.l,       s.d * s.l, s.S * s.d,      s.S * s.d,      s.d * s.S,
                           s.m * s.d};
  const char *names[FD_N] = {"w_router", "w_down", "w_gate", "w_upp", "w_dn", "gain",
                             "w_up", "sh_gate", "sh_upp", "sh_dn", "x"};
  ref_moe_params P, G;
  double *val[FD_N], *grad[FD_N], *dy = malloc((size_t)(s.m * s.d) * sizeof *dy);
  uint64_t seed = test_seed;
  for (int i = 0; i < FD_N; i++) {
    val[i] = malloc((size_t)(n[i] + 1) * sizeof(double));
    grad[i] = malloc((size_t)(n[i] + 1) * sizeof(double));
    for (int64_t j = 0; j < n[i]; j++) val[i][j] = (i == 5 ? 1.0 + 0.5 * urand(&seed) : urand(&seed));
    if (i < 10) *fd_slot(&P, i) = val[i], *fd_slot(&G, i) = grad[i];
  }
  for (int64_t j = 0; j < s.m * s.d; j++) dy[j] = urand(&seed);
  int32_t topk[5 * 4];
  ref_moe_route(&s, P.w_router, NULL, val[FD_X], s.k, topk, NULL);
  ref_moe_backward(&s, &P, val[FD_X], topk, dy, &G, grad[FD_X]);
  for (int i = 0; i < FD_N; i++) {
    double worst = 0.0;
    for (int64_t j = 0; j < n[i]; j++) {
      const double v = val[i][j], h = 1e-5;
      val[i][j] = v + h;
      const double lp = fd_loss(&s, &P, val[FD_X], topk, dy);
      val[i][j] = v - h;
      const double lm = fd_loss(&s, &P, val[FD_X], topk, dy);
      val[i][j] = v;
      const double fd = (lp - lm) / (2.0 * h), err = fabs(fd - grad[i][j]) / (fabs(fd) + 1e-3);
      if (!(err <= worst)) worst = err;
    }
    if (!(worst < 1e-6)) fprintf(stderr, "\n  d%s differs from finite differences by %.3g\n", names[i], worst);
    CU_ASSERT(worst < 1e-6);
  }
  for (int i = 0; i < FD_N; i++) free(val[i]), free(grad[i]);
  free(dy);
}

static void test_ref_fd(void)
{
  const ref_moe_shape k3 = {5, 6, 4, 7, 3, 5, 6, 1e-5, 0, 0, 0, 0, 0.0};
  ref_fd(&k3);
}

/* SwiGLU experts, plain weights p = 2.5 s, and no latent projection; then renormalised with
 * a scale at a latent width, grouped selection (the fixed choice is what backward sees). */
static void test_ref_fd_kimi(void)
{
  const ref_moe_shape plain = {5, 6, 0, 8, 3, 5, 6, 1e-5, 1, 2, 1, 1, 2.5};
  const ref_moe_shape renorm = {5, 6, 4, 8, 4, 5, 0, 1e-5, 1, 4, 2, 0, 1.7};
  ref_fd(&plain);
  ref_fd(&renorm);
}


/* ---- layers on the device ------------------------------------------------------------------ */

static void make_layer(clmoe_moe_layer *L, int64_t d, int64_t E, int64_t k, clmoe_moe_balance b)
{
  clmoe_moe_config cfg = {.d = d, .latent = 4, .n_experts = E, .top_k = k, .expert_ff = 4,
                          .n_shared = 1, .shared_ff = 4, .balance = b};
  TEST_OK(clmoe_moe_layer_create(test_ctx, L, &cfg));
  TEST_OK(clmoe_moe_layer_init(L, 7, 0.1f));
}

/* One train-mode forward: the load per expert (counts [E]) and, with update, the balancing
 * update after it. Returns max / mean. */
static double step(clmoe_moe_layer *L, const clmoe_tensor *x, int update, int64_t *counts)
{
  clmoe_tensor y = {0};
  clmoe_moe_saved sv;
  clmoe_moe_load st;
  TEST_OK(clmoe_tensor_create(test_ctx, &y, CLMOE_F32, 2, x->shape));
  TEST_OK(clmoe_moe_forward(test_ctx, L, x, &y, &sv));
  TEST_OK(clmoe_moe_load_stats(test_ctx, &sv.disp, &st, counts));
  if (update) TEST_OK(clmoe_moe_balance_update(test_ctx, L, &sv));
  clmoe_moe_saved_destroy(&sv);
  clmoe_tensor_destroy(&y);
  return st.max_over_mean;
}

/* The report's toy case: 8 tokens, 4 experts, k = 1, loads (4, 3, 1, 0) become (2, 2, 2, 2)
 * after one update. x holds the router logits directly (W_r = I). */
static void toy_case(clmoe_moe_balance b)
{
  static const double s[8][4] = {{0.06, 0.23, 0.31, 0.06}, {0.23, 0.73, 0.68, 0.58},
                                 {0.59, 0.80, 0.53, 0.11}, {0.92, 0.58, 0.55, 0.40},
                                 {0.59, 0.47, 0.40, 0.32}, {0.80, 0.92, 0.32, 0.64},
                                 {0.75, 0.18, 0.41, 0.65}, {0.77, 0.25, 0.66, 0.76}};
  float logit[32], eye[16] = {0};
  for (int i = 0; i < 32; i++) logit[i] = (float)log(s[i / 4][i % 4] / (1.0 - s[i / 4][i % 4]));
  for (int i = 0; i < 4; i++) eye[i * 5] = 1.0f;
  clmoe_moe_layer L;
  clmoe_tensor x = {0};
  int64_t counts[4];
  make_layer(&L, 4, 4, 1, b);
  TEST_OK(clmoe_tensor_write_f32(&L.w_router, eye));
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 2, (int64_t[]){8, 4}));
  TEST_OK(clmoe_tensor_write_f32(&x, logit));
  step(&L, &x, 1, counts);
  CU_ASSERT(counts[0] == 4 && counts[1] == 3 && counts[2] == 1 && counts[3] == 0);
  step(&L, &x, 0, counts);
  if (!(counts[0] == 2 && counts[1] == 2 && counts[2] == 2 && counts[3] == 2))
    fprintf(stderr, "\n  %s: loads %lld %lld %lld %lld after one update\n", clmoe_moe_balance_name(b),
            (long long)counts[0], (long long)counts[1], (long long)counts[2], (long long)counts[3]);
  CU_ASSERT(counts[0] == 2 && counts[1] == 2 && counts[2] == 2 && counts[3] == 2);
  clmoe_tensor_destroy(&x);
  clmoe_moe_layer_destroy(&L);
}

static void test_qb_toy(void) { toy_case(CLMOE_MOE_BALANCE_QB); }
static void test_qb_hist_toy(void) { toy_case(CLMOE_MOE_BALANCE_QB_HIST); }

/* A skewed synthetic router, 896 experts, top-16, 4096 tokens (the same batch every step):
 * every 8th expert gets +1 on its logit through a constant input feature, against router
 * weights N(0, 0.5 / sqrt(64)) - the favoured 112 take nearly every slot. */
static void skewed_router(clmoe_moe_layer *L, clmoe_tensor *x, clmoe_moe_balance b)
{
  const int64_t m = 4096, d = 64, E = 896;
  clmoe_moe_config cfg = {.d = d, .latent = 8, .n_experts = E, .top_k = 16, .expert_ff = 4, .balance = b};
  TEST_OK(clmoe_moe_layer_create(test_ctx, L, &cfg));
  TEST_OK(clmoe_moe_layer_init(L, 11, 0.1f));
  float *w = malloc((size_t)(E * d) * sizeof *w), *xx = malloc((size_t)(m * d) * sizeof *xx);
  for (int64_t e = 0; e < E; e++)
    for (int64_t c = 0; c < d; c++)
      w[e * d + c] = c == 0 ? (e % 8 == 0 ? 1.0f : 0.0f) : clmoe_random_normal(12, (uint64_t)(e * d + c), 0.0f, 0.0625f);
  for (int64_t t = 0; t < m; t++)
    for (int64_t c = 0; c < d; c++) xx[t * d + c] = c == 0 ? 1.0f : clmoe_random_normal(13, (uint64_t)(t * d + c), 0.0f, 1.0f);
  TEST_OK(clmoe_tensor_write_f32(&L->w_router, w));
  TEST_OK(clmoe_tensor_create(test_ctx, x, CLMOE_F32, 2, (int64_t[]){m, d}));
  TEST_OK(clmoe_tensor_write_f32(x, xx));
  free(w), free(xx);
}

static void skew_case(clmoe_moe_balance b)
{
  clmoe_moe_layer L;
  clmoe_tensor x = {0};
  skewed_router(&L, &x, b);
  double r[6];
  for (int s = 0; s < 6; s++) r[s] = step(&L, &x, s < 5, NULL);
  printf("\n    %s max/mean by step: %.3f %.3f %.3f %.3f %.3f %.3f ", clmoe_moe_balance_name(b), r[0], r[1],
         r[2], r[3], r[4], r[5]);
  CU_ASSERT(r[0] > 5.0); /* the router is skewed */
  if (b == CLMOE_MOE_BALANCE_NONE) {
    CU_ASSERT(r[5] > 5.0);
  } else {
    CU_ASSERT(r[5] <= 1.10); /* after 5 updates */
  }
  clmoe_tensor_destroy(&x);
  clmoe_moe_layer_destroy(&L);
}

static void test_qb_skewed(void) { skew_case(CLMOE_MOE_BALANCE_QB); }
static void test_qb_hist_skewed(void) { skew_case(CLMOE_MOE_BALANCE_QB_HIST); }
static void test_none_skewed(void) { skew_case(CLMOE_MOE_BALANCE_NONE); }

/* Equal scores: the lower expert index wins, slots in index order, the cut-off is the next. */
static void test_ties(void)
{
  clmoe_moe_layer L;
  const int64_t m = 3, E = 40, k = 5;
  clmoe_tensor x = {0}, s_all = {0}, topk = {0}, sc = {0}, p = {0}, cut = {0};
  make_layer(&L, 8, E, k, CLMOE_MOE_BALANCE_QB);
  TEST_OK(clmoe_tensor_fill(&L.w_router, 0.0)); /* every s = 0.5 */
  float bias[40] = {0};
  bias[7] = bias[30] = bias[12] = 0.25f; /* three raised, equal: 7, 12, 30 first */
  TEST_OK(clmoe_tensor_write_f32(&L.bias, bias));
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 2, (int64_t[]){m, 8}));
  TEST_OK(clmoe_tensor_fill_uniform(&x, 3, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_create(test_ctx, &s_all, CLMOE_F32, 2, (int64_t[]){m, E}));
  TEST_OK(clmoe_tensor_create(test_ctx, &topk, CLMOE_I32, 2, (int64_t[]){m, k}));
  TEST_OK(clmoe_tensor_create(test_ctx, &sc, CLMOE_F32, 2, (int64_t[]){m, k}));
  TEST_OK(clmoe_tensor_create(test_ctx, &p, CLMOE_F32, 2, (int64_t[]){m, k}));
  TEST_OK(clmoe_tensor_create(test_ctx, &cut, CLMOE_F32, 1, &m));
  TEST_OK(clmoe_moe_route(test_ctx, &L, &x, &s_all, &topk, &sc, &p, &cut));
  int32_t got[15];
  float hc[3], hp[15];
  TEST_OK(clmoe_tensor_read(&topk, got, sizeof got));
  TEST_OK(clmoe_tensor_read_f32(&cut, hc));
  TEST_OK(clmoe_tensor_read_f32(&p, hp));
  static const int32_t want[5] = {7, 12, 30, 0, 1};
  for (int t = 0; t < 3; t++) {
    for (int j = 0; j < 5; j++) CU_ASSERT_EQUAL(got[t * 5 + j], want[j]);
    CU_ASSERT_EQUAL(hc[t], 0.5f); /* expert 2's s + b */
    for (int j = 0; j < 5; j++) CU_ASSERT(fabsf(hp[t * 5 + j] - 0.2f) < 1e-7f);
  }
  clmoe_tensor *all[] = {&x, &s_all, &topk, &sc, &p, &cut};
  for (int i = 0; i < 6; i++) clmoe_tensor_destroy(all[i]);
  clmoe_moe_layer_destroy(&L);
}

static void expect_error(clmoe_status st, clmoe_status want, const char *needle);

/* Grouped selection, 8 experts in 2 groups of 4, the best group kept, top-2; the router is 0
 * (every s = 0.5) and the bias makes the scores s + b, all exact in binary:
 *   A: group 0 = 0.875 0.5 0.5 0.5, group 1 = 0.75 0.6875 0.5 0.5. Group scores (two best):
 *      1.375 and 1.4375, so group 1 is kept and the top-2 are 4, 5, although expert 0 has the
 *      best single score (ungrouped the top-2 would be 0, 4).
 *   B: group 0 = 0.75 0.625 0.5 0.5, group 1 = 0.6875 0.6875 0.5 0.5: both score 1.375, the
 *      tie keeps the lower group, and the top-2 are 0, 1.
 * Weights: renormalize off, routed scale 2.5: p = 2.5 s = 1.25 for each (from the unbiased s). */
static void test_grouped_hand(void)
{
  static const float bias[2][8] = {{0.375f, 0, 0, 0, 0.25f, 0.1875f, 0, 0},
                                   {0.25f, 0.125f, 0, 0, 0.1875f, 0.1875f, 0, 0}};
  static const int32_t want[2][2] = {{4, 5}, {0, 1}};
  const int64_t m = 2, E = 8, k = 2;
  const clmoe_moe_config cfg = {.d = 8, .latent = 0, .n_experts = E, .top_k = k, .expert_ff = 4,
                                .balance = CLMOE_MOE_BALANCE_NONE, .groups = 2, .topk_groups = 1,
                                .no_renormalize = 1, .routed_scale = 2.5f};
  clmoe_moe_layer L;
  clmoe_tensor x = {0}, s_all = {0}, topk = {0}, sc = {0}, p = {0};
  TEST_OK(clmoe_moe_layer_create(test_ctx, &L, &cfg));
  TEST_OK(clmoe_moe_layer_init(&L, 5, 0.1f));
  TEST_OK(clmoe_tensor_fill(&L.w_router, 0.0));
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 2, (int64_t[]){m, 8}));
  TEST_OK(clmoe_tensor_fill_uniform(&x, 3, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_create(test_ctx, &s_all, CLMOE_F32, 2, (int64_t[]){m, E}));
  TEST_OK(clmoe_tensor_create(test_ctx, &topk, CLMOE_I32, 2, (int64_t[]){m, k}));
  TEST_OK(clmoe_tensor_create(test_ctx, &sc, CLMOE_F32, 2, (int64_t[]){m, k}));
  TEST_OK(clmoe_tensor_create(test_ctx, &p, CLMOE_F32, 2, (int64_t[]){m, k}));
  for (int c = 0; c < 2; c++) {
    TEST_OK(clmoe_tensor_write_f32(&L.bias, bias[c]));
    TEST_OK(clmoe_moe_route(test_ctx, &L, &x, &s_all, &topk, &sc, &p, NULL));
    int32_t got[4];
    float hp[4];
    TEST_OK(clmoe_tensor_read(&topk, got, sizeof got));
    TEST_OK(clmoe_tensor_read_f32(&p, hp));
    for (int t = 0; t < 2; t++)
      for (int j = 0; j < 2; j++) {
        CU_ASSERT_EQUAL(got[t * 2 + j], want[c][j]);
        CU_ASSERT(hp[t * 2 + j] == 1.25f);
      }
  }
  /* Quantile Balancing has no cut-off with groups: refused in training, inference runs */
  clmoe_moe_layer Q;
  clmoe_moe_config qc = cfg;
  clmoe_moe_saved sv;
  clmoe_tensor y = {0};
  qc.balance = CLMOE_MOE_BALANCE_QB;
  TEST_OK(clmoe_moe_layer_create(test_ctx, &Q, &qc));
  TEST_OK(clmoe_moe_layer_init(&Q, 5, 0.1f));
  TEST_OK(clmoe_tensor_create(test_ctx, &y, CLMOE_F32, 2, (int64_t[]){m, 8}));
  TEST_OK(clmoe_moe_forward(test_ctx, &Q, &x, &y, NULL));
  expect_error(clmoe_moe_forward(test_ctx, &Q, &x, &y, &sv), CLMOE_ERR_UNSUPPORTED, "Quantile Balancing");
  clmoe_tensor *all[] = {&x, &s_all, &topk, &sc, &p, &y};
  for (int i = 0; i < 6; i++) clmoe_tensor_destroy(all[i]);
  clmoe_moe_layer_destroy(&L);
  clmoe_moe_layer_destroy(&Q);
}

/* Forward + backward twice: the same bits (no atomics on floats, fixed sum orders). */
static void test_repeatable(void)
{
  clmoe_moe_config cfg = {.d = 64, .latent = 32, .n_experts = 896, .top_k = 8, .expert_ff = 16,
                          .n_shared = 1, .shared_ff = 16};
  const int64_t m = 96, sx[2] = {m, 64};
  clmoe_moe_layer L;
  clmoe_moe_grads g;
  clmoe_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
  float *out[2][3];
  TEST_OK(clmoe_moe_layer_create(test_ctx, &L, &cfg));
  TEST_OK(clmoe_moe_layer_init(&L, 5, 0.2f));
  TEST_OK(clmoe_moe_grads_create(test_ctx, &L, &g));
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 2, sx));
  TEST_OK(clmoe_tensor_create(test_ctx, &y, CLMOE_F32, 2, sx));
  TEST_OK(clmoe_tensor_create(test_ctx, &dy, CLMOE_F32, 2, sx));
  TEST_OK(clmoe_tensor_create(test_ctx, &dx, CLMOE_F32, 2, sx));
  TEST_OK(clmoe_tensor_fill_normal(&x, 1, 0.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_normal(&dy, 2, 0.0f, 1.0f));
  const clmoe_tensor *t[3] = {&y, &dx, &g.w_gate};
  for (int r = 0; r < 2; r++) {
    clmoe_moe_saved sv;
    TEST_OK(clmoe_moe_forward(test_ctx, &L, &x, &y, &sv));
    TEST_OK(clmoe_moe_backward(test_ctx, &L, &x, &sv, &dy, &g, &dx));
    clmoe_moe_saved_destroy(&sv);
    for (int i = 0; i < 3; i++) {
      out[r][i] = malloc(clmoe_tensor_bytes(t[i]));
      TEST_OK(clmoe_tensor_read_f32(t[i], out[r][i]));
    }
  }
  for (int i = 0; i < 3; i++) {
    CU_ASSERT(memcmp(out[0][i], out[1][i], clmoe_tensor_bytes(t[i])) == 0);
    free(out[0][i]), free(out[1][i]);
  }
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&dy), clmoe_tensor_destroy(&dx);
  clmoe_moe_grads_destroy(&g);
  clmoe_moe_layer_destroy(&L);
}

/* Known choices: 10 tokens, k = 2, 5 experts with loads 8, 6, 4, 2, 0. */
static void test_load_stats(void)
{
  int32_t topk[20];
  const int32_t load[5] = {8, 6, 4, 2, 0};
  int n = 0;
  for (int e = 0; e < 5; e++) /* fill slot 0 of every token, then slot 1: no token repeats */
    for (int c = 0; c < load[e]; c++, n++) topk[(n % 10) * 2 + n / 10] = e;
  clmoe_tensor t = {0};
  clmoe_moe_dispatch d;
  clmoe_moe_load st;
  int64_t counts[5];
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_I32, 2, (int64_t[]){10, 2}));
  TEST_OK(clmoe_tensor_write(&t, topk, sizeof topk));
  TEST_OK(clmoe_moe_dispatch_create(test_ctx, &t, 5, 0, &d));
  TEST_OK(clmoe_moe_load_stats(test_ctx, &d, &st, counts));
  for (int e = 0; e < 5; e++) CU_ASSERT_EQUAL(counts[e], load[e]);
  CU_ASSERT_EQUAL(st.max, 8);
  CU_ASSERT_EQUAL(st.min, 0);
  CU_ASSERT_EQUAL(st.empty, 1);
  CU_ASSERT(fabs(st.mean - 4.0) < 1e-12 && fabs(st.max_over_mean - 2.0) < 1e-12);
  /* sorted 0 2 4 6 8: q10 at 0.4 -> 0.8, q50 at 2 -> 4, q90 at 3.6 -> 7.2 */
  CU_ASSERT(fabs(st.q10 - 0.8) < 1e-12 && fabs(st.q50 - 4.0) < 1e-12 && fabs(st.q90 - 7.2) < 1e-12);
  clmoe_moe_dispatch_destroy(&d);
  clmoe_tensor_destroy(&t);
}

static void expect_error(clmoe_status st, clmoe_status want, const char *needle)
{
  CU_ASSERT_EQUAL(st, want);
  if (st != CLMOE_OK && !strstr(clmoe_last_error(), needle)) {
    fprintf(stderr, "\n  message '%s' lacks '%s'\n", clmoe_last_error(), needle);
    CU_FAIL("message");
  }
}

static void test_errors(void)
{
  clmoe_moe_layer L;
  const clmoe_moe_config good = {.d = 8, .latent = 4, .n_experts = 6, .top_k = 2, .expert_ff = 4};
  clmoe_moe_config c = good;
  c.top_k = 7;
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "top_k");
  c = good, c.top_k = 6;
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "top-(k+1)");
  c = good, c.balance = CLMOE_MOE_BALANCE_QB_HIST, c.hist_bins = 1;
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "hist_bins");
  c = good, c.latent = -1; /* 0 is valid: no latent projection */
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "latent");
  c = good, c.groups = 4; /* 6 experts */
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "groups = 4");
  c = good, c.groups = 6; /* one expert a group: no two best */
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "fewer than 2");
  c = good, c.groups = 3, c.topk_groups = 4;
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "topk_groups");
  c = good, c.groups = 3, c.topk_groups = 1, c.top_k = 3; /* 2 experts in 1 group */
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "exceeds the 2 experts");
  c = good, c.glu = (clmoe_glu)7;
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "glu");
  c = good, c.routed_scale = -2.0f;
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "routed_scale");
  c = good, c.norm_eps = -1.0f;
  expect_error(clmoe_moe_layer_create(test_ctx, &L, &c), CLMOE_ERR_INVALID_ARGUMENT, "norm_eps");
  TEST_OK(clmoe_moe_layer_create(test_ctx, &L, &good));
  TEST_OK(clmoe_moe_layer_init(&L, 1, 0.1f));
  clmoe_tensor x = {0}, y = {0}, bad = {0}, dx = {0};
  clmoe_moe_saved sv;
  clmoe_moe_grads g;
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 2, (int64_t[]){5, 8}));
  TEST_OK(clmoe_tensor_create(test_ctx, &y, CLMOE_F32, 2, (int64_t[]){5, 8}));
  TEST_OK(clmoe_tensor_create(test_ctx, &dx, CLMOE_F32, 2, (int64_t[]){5, 8}));
  TEST_OK(clmoe_tensor_create(test_ctx, &bad, CLMOE_F32, 2, (int64_t[]){5, 7}));
  TEST_OK(clmoe_tensor_fill(&x, 0.5));
  expect_error(clmoe_moe_forward(test_ctx, &L, &bad, &y, NULL), CLMOE_ERR_SHAPE, "x");
  expect_error(clmoe_moe_forward(test_ctx, &L, &x, &bad, NULL), CLMOE_ERR_SHAPE, "y");
  TEST_OK(clmoe_moe_grads_create(test_ctx, &L, &g));
  TEST_OK(clmoe_moe_forward(test_ctx, &L, &x, &y, NULL));
  memset(&sv, 0, sizeof sv);
  sv.tokens = 5; /* not from a train-mode forward */
  expect_error(clmoe_moe_backward(test_ctx, &L, &x, &sv, &y, &g, &dx), CLMOE_ERR_INVALID_ARGUMENT, "train-mode");
  TEST_OK(clmoe_moe_forward(test_ctx, &L, &x, &y, &sv));
  expect_error(clmoe_moe_backward(test_ctx, &L, &x, &sv, &y, &g, &y), CLMOE_ERR_INVALID_ARGUMENT, "dx");
  TEST_OK(clmoe_moe_backward(test_ctx, &L, &x, &sv, &y, &g, &dx));
  clmoe_moe_saved_destroy(&sv);
  /* zero tokens: nothing to do, not an error */
  clmoe_tensor x0 = {0}, y0 = {0};
  TEST_OK(clmoe_tensor_create(test_ctx, &x0, CLMOE_F32, 2, (int64_t[]){0, 8}));
  TEST_OK(clmoe_tensor_create(test_ctx, &y0, CLMOE_F32, 2, (int64_t[]){0, 8}));
  TEST_OK(clmoe_moe_forward(test_ctx, &L, &x0, &y0, NULL));
  clmoe_tensor *all[] = {&x, &y, &bad, &dx, &x0, &y0};
  for (int i = 0; i < 6; i++) clmoe_tensor_destroy(all[i]);
  clmoe_moe_grads_destroy(&g);
  clmoe_moe_layer_destroy(&L);
}

static void add_more_tests(CU_pSuite suite)
{
  CU_add_test(suite, "forward and backward repeat bit for bit", test_repeatable);
  CU_add_test(suite, "load statistics", test_load_stats);
  CU_add_test(suite, "argument errors", test_errors);
}

static void add_tests(CU_pSuite suite)
{
  test_add_checks(suite, "moe");
  CU_add_test(suite, "reference backward vs finite differences", test_ref_fd);
  CU_add_test(suite, "reference backward vs finite differences, Kimi Linear options", test_ref_fd_kimi);
  CU_add_test(suite, "grouped selection on hand-made scores", test_grouped_hand);
  CU_add_test(suite, "QB toy case: loads 4,3,1,0 -> 2,2,2,2", test_qb_toy);
  CU_add_test(suite, "QB histogram toy case", test_qb_hist_toy);
  CU_add_test(suite, "QB on a skewed router: max/mean <= 1.10 in 5 steps", test_qb_skewed);
  CU_add_test(suite, "QB histogram on a skewed router", test_qb_hist_skewed);
  CU_add_test(suite, "no balancing stays skewed", test_none_skewed);
  CU_add_test(suite, "top-k ties go to the lower index", test_ties);
  add_more_tests(suite);
}

int main(void) { return test_main("moe", add_tests); }
