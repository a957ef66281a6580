/* What the generation suites share: a model trained on the byte cycle, and the checks of
 * prefill and decoding against the training-form forward (gen_fixture.h). */
#include "gen_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t gen_cyc(int64_t i) { return '0' + (int32_t)(i % GEN_CYCLE); }

clmoe_status gen_save_ckpt(clmoe_params *ps, const clmoe_config *cfg, const char *path)
{
  clmoe_ckpt_meta meta = {0};
  char *text = NULL;
  size_t len = 0;
  clmoe_status st = CLMOE_OK;
  if (cfg) {
    FILE *f = open_memstream(&text, &len);
    if (!f) return CLMOE_ERR_OUT_OF_MEMORY;
    clmoe_config_write(cfg, f);
    fclose(f);
    st = clmoe_ckpt_meta_set(&meta, "config", text);
  }
  if (st == CLMOE_OK) st = clmoe_ckpt_meta_set(&meta, "step", "0");
  if (st == CLMOE_OK) st = clmoe_params_save(ps, path, &meta);
  clmoe_ckpt_meta_free(&meta);
  free(text);
  return st;
}

void gen_train_and_save(const clmoe_config *cfg, const char *path)
{
  enum { B = 4, T = 32, STEPS = 40 };
  clmoe_model *m = NULL;
  TEST_OK(clmoe_model_create(test_ctx, cfg, &m));
  TEST_OK(clmoe_model_init(m, test_seed));
  clmoe_params *ps = clmoe_model_params(m);
  clmoe_adamw hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f};
  int32_t tok[B * T], tgt[B * T];
  double loss = 0.0, first = 0.0;
  int64_t scored;
  for (int step = 0; step < STEPS; step++) {
    for (int b = 0; b < B; b++) {
      const int64_t phase = (int64_t)(clmoe_random_uniform(test_seed + 1, (uint64_t)(step * B + b), 0.0f, 1.0f) * 97);
      for (int t = 0; t < T; t++) tok[b * T + t] = gen_cyc(phase + t), tgt[b * T + t] = gen_cyc(phase + t + 1);
    }
    TEST_OK(clmoe_params_zero_grad(ps));
    TEST_OK(clmoe_model_forward(m, B, T, tok, tgt, 1, &loss, &scored));
    TEST_OK(clmoe_model_balance_update(m));
    TEST_OK(clmoe_model_backward(m));
    TEST_OK(clmoe_params_adamw(ps, &hp, 1.0, NULL));
    if (step == 0) first = loss;
  }
  if (getenv("CLMOE_TEST_VERBOSE")) fprintf(stderr, "\n  cycle loss %.4f -> %.4f\n", first, loss);
  CU_ASSERT(loss < 0.25 * first);
  TEST_OK(gen_save_ckpt(ps, cfg, path));
  clmoe_model_destroy(m);
}

void gen_slow_down(clmoe_model *m)
{
  clmoe_params *sp = clmoe_model_params(m);
  for (int i = 0; i < sp->n; i++)
    if (strstr(sp->p[i].name, "/mixer/dt_bias")) TEST_OK(clmoe_tensor_fill(sp->p[i].value, -6.0));
}

float *gen_forward_logits(clmoe_model *model, const int32_t *tokens, int64_t T)
{
  const int64_t V = clmoe_model_config(model)->vocab;
  float *out = malloc((size_t)(T * V) * sizeof *out);
  if (!out) return NULL;
  if (clmoe_model_forward(model, 1, T, tokens, NULL, 0, NULL, NULL) != CLMOE_OK ||
      clmoe_tensor_read(clmoe_model_logits(model), out, (size_t)(T * V) * sizeof *out) != CLMOE_OK) {
    fprintf(stderr, "\n  reference forward: %s\n", clmoe_last_error());
    free(out);
    return NULL;
  }
  return out;
}

void gen_text(int32_t *t, int64_t n, uint64_t seed)
{
  for (int64_t i = 0; i < n; i++) {
    const float u = clmoe_random_uniform(seed, (uint64_t)i, 0.0f, 1.0f);
    t[i] = u < 0.2f ? (int32_t)(u * 5.0f * 255.0f) : gen_cyc(i + (int64_t)seed);
  }
}

void gen_check_equivalence(clmoe_model *model, clmoe_gen_extend_form form, int64_t nseq, const int64_t *lens,
                           int64_t steps, int64_t chunk, clmoe_dtype cache, double tol, int32_t *const *full)
{
  CU_ASSERT_PTR_NOT_NULL_FATAL(model);
  const int64_t V = clmoe_model_config(model)->vocab;
  clmoe_gen_options o = {.prefill_chunk = chunk, .cache_dtype = cache, .extend_form = form};
  clmoe_gen_state *g = NULL;
  TEST_OK(clmoe_gen_state_create(model, nseq, &o, &g));
  int64_t total = 0, maxl = 0;
  for (int64_t s = 0; s < nseq; s++) total += lens[s], maxl = lens[s] > maxl ? lens[s] : maxl;
  float *all = malloc((size_t)(total * V) * sizeof *all), *last = malloc((size_t)(nseq * V) * sizeof *last);
  float *step = malloc((size_t)(steps * nseq * V) * sizeof *step);
  int32_t *next = malloc((size_t)nseq * sizeof *next);
  CU_ASSERT_FATAL(all && last && step && next);
  TEST_OK(clmoe_gen_prefill(g, (const int32_t *const *)full, lens, last, all));
  for (int64_t k = 0; k < steps; k++) {
    for (int64_t s = 0; s < nseq; s++) next[s] = full[s][lens[s] + k];
    TEST_OK(clmoe_gen_step(g, next, step + k * nseq * V));
  }
  for (int64_t s = 0, off = 0; s < nseq; off += lens[s], s++) {
    CU_ASSERT_EQUAL(clmoe_gen_length(g, s), lens[s] + steps);
    float *ref = gen_forward_logits(model, full[s], lens[s] + steps);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    const double e_pre = test_rel_err(all + off * V, ref, lens[s] * V);
    const double e_last = test_rel_err(last + s * V, ref + (lens[s] - 1) * V, V);
    double e_step = 0.0;
    for (int64_t k = 0; k < steps; k++) {
      const double e = test_rel_err(step + (k * nseq + s) * V, ref + (lens[s] + k) * V, V);
      e_step = e > e_step ? e : e_step;
    }
    if (!(e_pre <= tol && e_last <= tol && e_step <= tol) || getenv("CLMOE_TEST_VERBOSE"))
      fprintf(stderr, "\n  seq %lld (prompt %lld, chunk %lld, %lld steps, extend form %d): prefill %.3g, last "
              "%.3g, steps %.3g (tol %.0e)", (long long)s, (long long)lens[s], (long long)chunk, (long long)steps,
              (int)form, e_pre, e_last, e_step, tol);
    CU_ASSERT(e_pre <= tol && e_last <= tol && e_step <= tol);
    free(ref);
  }
  free(all), free(last), free(step), free(next);
  clmoe_gen_state_destroy(g);
}

void gen_eq_uneven_chunks(clmoe_model *model)
{
  const clmoe_gen_extend_form a = CLMOE_GEN_EXTEND_AUTO;
  int32_t t[48];
  int32_t *full[1] = {t};
  gen_text(t, 48, 11);
  const int64_t len[1] = {37};
  gen_check_equivalence(model, a, 1, len, 6, 16, CLMOE_F32, 1e-4, full); /* chunks 16 + 16 + 5 */
  gen_check_equivalence(model, a, 1, len, 2, 64, CLMOE_F32, 1e-4, full); /* one tiled pass */
  const int64_t len3[1] = {3};
  gen_check_equivalence(model, a, 1, len3, 5, 1, CLMOE_F32, 1e-4, full); /* one token per pass */
}

void gen_eq_batch_of_lengths(clmoe_model *model)
{
  enum { S = 3 };
  const clmoe_gen_extend_form a = CLMOE_GEN_EXTEND_AUTO;
  int32_t x[40], y[40], z[40];
  int32_t *full[S] = {x, y, z};
  gen_text(x, 40, 21), gen_text(y, 40, 22), gen_text(z, 40, 23);
  const int64_t lens[S] = {5, 23, 17};
  gen_check_equivalence(model, a, S, lens, 4, 8, CLMOE_F32, 1e-4, full);   /* 1, 3 and 3 passes */
  gen_check_equivalence(model, a, S, lens, 3, 100, CLMOE_F32, 1e-4, full); /* one pass */
  gen_check_equivalence(model, a, S, lens, 3, 8, CLMOE_BF16, 1e-2, full);  /* bf16 latent cache */
}

/* Sequence 1 is reset and refilled while 0 keeps its context: a pass over a subset. */
void gen_eq_reset_and_refill(clmoe_model *model)
{
  CU_ASSERT_PTR_NOT_NULL_FATAL(model);
  const int64_t V = clmoe_model_config(model)->vocab;
  int32_t a[30], b[30];
  gen_text(a, 30, 31), gen_text(b, 30, 32);
  clmoe_gen_options o = {.prefill_chunk = 4};
  clmoe_gen_state *g = NULL;
  TEST_OK(clmoe_gen_state_create(model, 2, &o, &g));
  float *lg = malloc((size_t)(2 * V) * sizeof *lg), *ref;
  CU_ASSERT_PTR_NOT_NULL_FATAL(lg);
  const int32_t *p1[2] = {a, a};
  int64_t l1[2] = {9, 7};
  TEST_OK(clmoe_gen_prefill(g, p1, l1, lg, NULL));
  TEST_OK(clmoe_gen_step(g, (int32_t[]){a[9], a[7]}, lg));
  TEST_OK(clmoe_gen_reset(g, 1));
  CU_ASSERT_EQUAL(clmoe_gen_length(g, 1), 0);
  const int32_t *p2[2] = {NULL, b};
  int64_t l2[2] = {0, 6};
  TEST_OK(clmoe_gen_prefill(g, p2, l2, lg, NULL));
  ref = gen_forward_logits(model, b, 6);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
  CU_ASSERT(test_rel_err(lg + V, ref + 5 * V, V) <= 1e-4);
  free(ref);
  /* sequence 0 now has a[0..10) and continues with a[10]; sequence 1 with b[6] */
  TEST_OK(clmoe_gen_prefill(g, (const int32_t *const[]){a + 10, b + 6}, (int64_t[]){3, 2}, lg, NULL));
  TEST_OK(clmoe_gen_step(g, (int32_t[]){a[13], b[8]}, lg));
  ref = gen_forward_logits(model, a, 14);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
  const double e0 = test_rel_err(lg, ref + 13 * V, V);
  free(ref);
  ref = gen_forward_logits(model, b, 9);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
  const double e1 = test_rel_err(lg + V, ref + 8 * V, V);
  free(ref);
  if (!(e0 <= 1e-4 && e1 <= 1e-4)) fprintf(stderr, "\n  after reset: %.3g %.3g", e0, e1);
  CU_ASSERT(e0 <= 1e-4 && e1 <= 1e-4);
  free(lg);
  clmoe_gen_state_destroy(g);
}
