/* CUnit suite: inference (include/clmoe/generate.h) on the tiny preset. A model is trained briefly on
 * a repeating byte cycle, saved as a checkpoint and loaded back through clmoe_gen_load
 * (gen_fixture.c); then:
 *  - the logits of chunked prefill and decode steps equal, at every position, those of one
 *    training-form forward (clmoe_model_forward) over the same tokens (1e-4 relative), for
 *    one prompt split unevenly into chunks, for a batch of prompts of different lengths,
 *    with each MLA extend form, after a sequence is reset and refilled while the others
 *    keep their context, and with a bf16 latent cache (1e-2); the same for the plain
 *    residual stack in test_generate_plain.c;
 *  - greedy decoding continues the trained cycle; a seed gives the same sampled tokens;
 *    greedy and sampled runs fed on the device draw what step-by-step decoding draws;
 *  - memory accounting; loading errors. (The sampler itself: test_sample.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen_fixture.h"

static clmoe_model *trained;   /* the loaded (inference) model */
static clmoe_model *slow;      /* the same with slowly decaying KDA states (gen_slow_down) */
static char ckpt[64], scratch[64];

/* Trains the tiny preset, saves it to ckpt and loads it back as the suite's model. */
static void test_train_and_load(void)
{
  clmoe_config cfg;
  int32_t tok[2] = {'0', '1'}, tgt[2] = {'1', '2'};
  TEST_OK(clmoe_config_preset("tiny", &cfg));
  snprintf(ckpt, sizeof ckpt, "/tmp/clmoe-gen-%ld.safetensors", (long)getpid());
  snprintf(scratch, sizeof scratch, "/tmp/clmoe-gen-%ld.bad", (long)getpid());
  gen_train_and_save(&cfg, ckpt);
  clmoe_ckpt_meta meta = {0};
  TEST_OK(clmoe_gen_load(test_ctx, ckpt, &trained, &meta));
  CU_ASSERT_PTR_NOT_NULL(clmoe_ckpt_meta_get(&meta, "config"));
  clmoe_ckpt_meta_free(&meta);
  CU_ASSERT_STRING_EQUAL(clmoe_model_config(trained)->name, ckpt);
  TEST_OK(clmoe_gen_load(test_ctx, ckpt, &slow, NULL));
  gen_slow_down(slow);
  /* inference only: a train forward is refused */
  CU_ASSERT_EQUAL(clmoe_model_forward(trained, 1, 2, tok, tgt, 1, NULL, NULL), CLMOE_ERR_INVALID_ARGUMENT);
}

static void test_single_uneven_chunks(void) { gen_eq_uneven_chunks(slow); }
static void test_batch_of_lengths(void) { gen_eq_batch_of_lengths(slow); }

/* The multi-pass cases with each MLA extend form forced: the training form (decompressed
 * K/V, flash forward with a query shift) and the absorbed one. */
static void test_extend_forms(void)
{
  enum { S = 3 };
  int32_t a[48], b[40], c[40];
  int32_t *one[1] = {a}, *full[S] = {a, b, c};
  gen_text(a, 48, 11), gen_text(b, 40, 22), gen_text(c, 40, 23);
  const int64_t len[1] = {37}, len3[1] = {3}, lens[S] = {5, 23, 17};
  const clmoe_gen_extend_form forms[2] = {CLMOE_GEN_EXTEND_TRAINING, CLMOE_GEN_EXTEND_ABSORBED};
  for (int f = 0; f < 2; f++) {
    gen_check_equivalence(slow, forms[f], 1, len, 6, 16, CLMOE_F32, 1e-4, one);   /* chunks 16 + 16 + 5 */
    gen_check_equivalence(slow, forms[f], 1, len3, 5, 1, CLMOE_F32, 1e-4, one);   /* one token per pass */
    gen_check_equivalence(slow, forms[f], S, lens, 4, 8, CLMOE_F32, 1e-4, full);  /* 1, 3 and 3 passes */
    gen_check_equivalence(slow, forms[f], S, lens, 3, 8, CLMOE_BF16, 1e-2, full); /* bf16 latent cache */
  }
}

/* Sequence 1 is reset and refilled while 0 keeps its context: a pass over a subset. */
static void test_reset_and_refill(void) { gen_eq_reset_and_refill(slow); }

/* Generates n tokens for each of nseq copies of a prompt. */
static clmoe_status generate(const clmoe_gen_sampling *sp, const int32_t *prompt, int64_t plen, int64_t nseq,
                             int64_t n, int32_t *out)
{
  const int64_t V = clmoe_model_config(trained)->vocab;
  clmoe_gen_state *g = NULL;
  clmoe_status st0 = clmoe_gen_state_create(trained, nseq, NULL, &g);
  if (st0 != CLMOE_OK) return st0;
  float *lg = malloc((size_t)(nseq * V) * sizeof *lg);
  const int32_t **pp = malloc((size_t)nseq * sizeof *pp);
  int64_t *lens = malloc((size_t)nseq * sizeof *lens);
  int32_t *next = malloc((size_t)nseq * sizeof *next);
  clmoe_status st = lg && pp && lens && next ? CLMOE_OK : CLMOE_ERR_OUT_OF_MEMORY;
  for (int64_t s = 0; st == CLMOE_OK && s < nseq; s++) pp[s] = prompt, lens[s] = plen;
  if (st == CLMOE_OK) st = clmoe_gen_prefill(g, pp, lens, lg, NULL);
  for (int64_t k = 0; st == CLMOE_OK && k < n; k++) {
    for (int64_t s = 0; st == CLMOE_OK && s < nseq; s++) st = clmoe_gen_sample(sp, lg + s * V, V, s, k, &next[s]);
    for (int64_t s = 0; s < nseq; s++) out[s * n + k] = next[s];
    if (st == CLMOE_OK && k + 1 < n) st = clmoe_gen_step(g, next, lg);
  }
  free(lg), free(pp), free(lens), free(next);
  clmoe_gen_state_destroy(g);
  return st;
}

static void test_greedy_continues_cycle(void)
{
  CU_ASSERT_PTR_NOT_NULL_FATAL(trained);
  enum { P = 13, N = 12 };
  int32_t prompt[P], out[N];
  for (int i = 0; i < P; i++) prompt[i] = gen_cyc(i + 3);
  clmoe_gen_sampling sp = {.greedy = 1};
  TEST_OK(generate(&sp, prompt, P, 1, N, out));
  int right = 0;
  for (int k = 0; k < N; k++) right += out[k] == gen_cyc(P + 3 + k);
  if (right != N) {
    fprintf(stderr, "\n  greedy continuation:");
    for (int k = 0; k < N; k++) fprintf(stderr, " %d", out[k]);
  }
  CU_ASSERT_EQUAL(right, N);
}

/* clmoe_gen_step_greedy: the ids chosen on the device are the host sampler's greedy picks
 * of the same step's logits (read back in the same call), for three sequences over several
 * steps; next is required. */
static void test_step_greedy_on_device(void)
{
  CU_ASSERT_PTR_NOT_NULL_FATAL(trained);
  enum { S = 3, P = 5, STEPS = 6 };
  const int64_t V = clmoe_model_config(trained)->vocab;
  const int32_t pa[P] = {'x', '7', 'q', '0', ' '}, pb[P] = {'1', '2', '3', '4', '5'}, pc[P] = {'9', '8', 'a', 'b', 'c'};
  const int32_t *pp[S] = {pa, pb, pc};
  const int64_t lens[S] = {P, 3, 4};
  clmoe_gen_state *g = NULL;
  TEST_OK(clmoe_gen_state_create(trained, S, NULL, &g));
  float *lg = malloc((size_t)(S * V) * sizeof *lg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(lg);
  int32_t next[S], picked[S];
  const clmoe_gen_sampling greedy = {.greedy = 1};
  TEST_OK(clmoe_gen_prefill(g, pp, lens, lg, NULL));
  for (int s = 0; s < S; s++) TEST_OK(clmoe_gen_sample(&greedy, lg + s * V, V, s, 0, &next[s]));
  int same = 0;
  for (int k = 1; k <= STEPS; k++) {
    TEST_OK(clmoe_gen_step_greedy(g, next, picked, lg));
    for (int s = 0; s < S; s++) {
      int32_t want = -1;
      TEST_OK(clmoe_gen_sample(&greedy, lg + s * V, V, s, k, &want));
      same += picked[s] == want;
      next[s] = picked[s];
    }
  }
  CU_ASSERT_EQUAL(same, S * STEPS);
  CU_ASSERT_EQUAL(clmoe_gen_step_greedy(g, next, NULL, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  free(lg);
  clmoe_gen_state_destroy(g);
}

/* clmoe_gen_decode_greedy (n steps fed on the device, read back unwaited) chooses what n
 * calls of clmoe_gen_step_greedy choose on a twin state, in runs of 1 and 5 steps; its
 * counters advance as the steps do. With a NaN in the head's row 7 every row's logit 7 is
 * NaN: an error naming it, after the steps fed the marked ids (row 0) without harm. */
static void test_decode_greedy_pipelined(void)
{
  CU_ASSERT_PTR_NOT_NULL_FATAL(trained);
  enum { S = 2, STEPS = 6 };
  const int32_t pa[4] = {'k', '3', 'z', '1'}, pb[2] = {'5', '6'};
  const int32_t *pp[S] = {pa, pb};
  const int64_t lens[S] = {4, 2};
  const int64_t V = clmoe_model_config(trained)->vocab;
  clmoe_gen_state *g = NULL, *twin = NULL;
  TEST_OK(clmoe_gen_state_create(trained, S, NULL, &g));
  TEST_OK(clmoe_gen_state_create(trained, S, NULL, &twin));
  float *lg = malloc((size_t)(S * V) * sizeof *lg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(lg);
  const clmoe_gen_sampling greedy = {.greedy = 1};
  int32_t first[S], next[S], piped[STEPS * S], stepped[STEPS * S];
  TEST_OK(clmoe_gen_prefill(g, pp, lens, lg, NULL));
  TEST_OK(clmoe_gen_prefill(twin, pp, lens, NULL, NULL));
  for (int s = 0; s < S; s++) TEST_OK(clmoe_gen_sample(&greedy, lg + s * V, V, s, 0, &first[s]));
  TEST_OK(clmoe_gen_decode_greedy(g, first, 1, piped));
  TEST_OK(clmoe_gen_decode_greedy(g, piped, STEPS - 1, piped + S));
  memcpy(next, first, sizeof next);
  for (int k = 0; k < STEPS; k++) {
    TEST_OK(clmoe_gen_step_greedy(twin, next, stepped + k * S, NULL));
    memcpy(next, stepped + k * S, sizeof next);
  }
  CU_ASSERT(memcmp(piped, stepped, sizeof piped) == 0);
  clmoe_gen_stats a, b;
  clmoe_gen_stats_get(g, &a);
  clmoe_gen_stats_get(twin, &b);
  CU_ASSERT_EQUAL(a.steps, STEPS);
  CU_ASSERT_EQUAL(a.step_tokens, b.step_tokens);
  CU_ASSERT_EQUAL(clmoe_gen_decode_greedy(g, first, 0, piped), CLMOE_ERR_INVALID_ARGUMENT);
  /* NaN logits: a poisoned head row, restored after */
  clmoe_param *head = clmoe_params_find(clmoe_model_params(trained), "head");
  CU_ASSERT_PTR_NOT_NULL_FATAL(head);
  CU_ASSERT_EQUAL_FATAL(head->value->dtype, CLMOE_F32);
  const int64_t n = clmoe_tensor_numel(head->value), d = head->value->shape[1];
  float *hw = malloc((size_t)n * sizeof *hw), *bad = malloc((size_t)n * sizeof *bad);
  CU_ASSERT_FATAL(hw && bad);
  TEST_OK(clmoe_tensor_read_f32(head->value, hw));
  memcpy(bad, hw, (size_t)n * sizeof *bad);
  bad[7 * d + 1] = NAN;
  TEST_OK(clmoe_tensor_write_f32(head->value, bad));
  CU_ASSERT_EQUAL(clmoe_gen_decode_greedy(g, first, 3, piped), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "logit 7 is NaN"));
  TEST_OK(clmoe_tensor_write_f32(head->value, hw));
  free(hw), free(bad), free(lg);
  clmoe_gen_state_destroy(g);
  clmoe_gen_state_destroy(twin);
}

static void test_seed_reproducible(void)
{
  CU_ASSERT_PTR_NOT_NULL_FATAL(trained);
  enum { P = 6, N = 10, S = 2 };
  int32_t prompt[P] = {'a', 'b', 'c', '1', '2', '3'}, x[S * N], y[S * N], z[S * N];
  /* The trained model is very sure of the cycle; a high temperature spreads the draws over
   * the 50 kept tokens so that another seed must give other tokens. */
  clmoe_gen_sampling sp = {.temperature = 100.0, .top_k = 50, .top_p = 0.95, .seed = 42};
  TEST_OK(generate(&sp, prompt, P, S, N, x));
  TEST_OK(generate(&sp, prompt, P, S, N, y));
  CU_ASSERT(memcmp(x, y, sizeof x) == 0);
  sp.seed = 43;
  TEST_OK(generate(&sp, prompt, P, S, N, z));
  CU_ASSERT(memcmp(x, z, sizeof x) != 0); /* 20 draws over ~50 tokens each: a match is ~impossible */
}

/* clmoe_gen_decode (sampled tokens drawn on the device and fed to the next step there)
 * draws what clmoe_gen_step then clmoe_gen_sample draw on a twin state, in runs of 1 and 4
 * steps, for three sequences, under top-k and top-p; clmoe_gen_step_sample draws the same
 * as the host sampler on the logits it reads back; greedy options give the greedy run. */
static void test_decode_sampled(void)
{
  CU_ASSERT_PTR_NOT_NULL_FATAL(trained);
  enum { S = 3, STEPS = 5 };
  const int32_t pa[4] = {'k', '3', 'z', '1'}, pb[2] = {'5', '6'}, pc[3] = {'0', '1', '2'};
  const int32_t *pp[S] = {pa, pb, pc};
  const int64_t lens[S] = {4, 2, 3};
  const int64_t V = clmoe_model_config(trained)->vocab;
  const clmoe_gen_sampling how[] = {{.temperature = 1.5, .seed = 3}, {.temperature = 2.0, .top_k = 40, .top_p = 0.9, .seed = 4},
                                    {.greedy = 1}};
  float *lg = malloc((size_t)(S * V) * sizeof *lg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(lg);
  for (size_t h = 0; h < sizeof how / sizeof how[0]; h++) {
    clmoe_gen_state *g = NULL, *twin = NULL;
    TEST_OK(clmoe_gen_state_create(trained, S, NULL, &g));
    TEST_OK(clmoe_gen_state_create(trained, S, NULL, &twin));
    int32_t first[S], next[S], piped[STEPS * S], stepped[STEPS * S], dev[S];
    TEST_OK(clmoe_gen_prefill(g, pp, lens, lg, NULL));
    TEST_OK(clmoe_gen_prefill(twin, pp, lens, NULL, NULL));
    for (int s = 0; s < S; s++) TEST_OK(clmoe_gen_sample(&how[h], lg + s * V, V, s, 0, &first[s]));
    TEST_OK(clmoe_gen_decode(g, &how[h], first, 1, 1, piped));
    TEST_OK(clmoe_gen_decode(g, &how[h], piped, 2, STEPS - 1, piped + S));
    memcpy(next, first, sizeof next);
    int distinct = 0;
    for (int k = 0; k < STEPS; k++) {
      TEST_OK(clmoe_gen_step_sample(twin, &how[h], next, k + 1, dev, lg));
      for (int s = 0; s < S; s++) {
        TEST_OK(clmoe_gen_sample(&how[h], lg + s * V, V, s, k + 1, &stepped[k * S + s]));
        CU_ASSERT_EQUAL(dev[s], stepped[k * S + s]);
        distinct += stepped[k * S + s] != stepped[s];
      }
      memcpy(next, stepped + k * S, sizeof next);
    }
    CU_ASSERT(memcmp(piped, stepped, sizeof piped) == 0);
    if (h == 0) CU_ASSERT(distinct > 0); /* (sampling at temperature 1.5 varies the tokens) */
    if (how[h].greedy) {
      int32_t greedy[STEPS * S];
      clmoe_gen_state_destroy(twin);
      TEST_OK(clmoe_gen_state_create(trained, S, NULL, &twin));
      TEST_OK(clmoe_gen_prefill(twin, pp, lens, NULL, NULL));
      TEST_OK(clmoe_gen_decode_greedy(twin, first, STEPS, greedy));
      CU_ASSERT(memcmp(piped, greedy, sizeof piped) == 0);
    }
    clmoe_gen_stats a;
    clmoe_gen_stats_get(g, &a);
    CU_ASSERT_EQUAL(a.steps, STEPS);
    const clmoe_gen_sampling bad = {.temperature = 1.0, .top_p = 2.0};
    CU_ASSERT_EQUAL(clmoe_gen_decode(g, &bad, first, 0, 1, piped), CLMOE_ERR_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(clmoe_gen_decode(g, NULL, first, 0, 1, piped), CLMOE_ERR_INVALID_ARGUMENT);
    clmoe_gen_state_destroy(g);
    clmoe_gen_state_destroy(twin);
  }
  free(lg);
}

static void test_memory_and_arguments(void)
{
  CU_ASSERT_PTR_NOT_NULL_FATAL(trained);
  const clmoe_config *c = clmoe_model_config(trained);
  clmoe_gen_state *g = NULL;
  TEST_OK(clmoe_gen_state_create(trained, 2, NULL, &g));
  clmoe_gen_memory m0, m1;
  clmoe_gen_memory_usage(g, &m0);
  int32_t t[100];
  gen_text(t, 100, 41);
  TEST_OK(clmoe_gen_prefill(g, (const int32_t *const[]){t, t}, (int64_t[]){100, 30}, NULL, NULL));
  clmoe_gen_memory_usage(g, &m1);
  /* KDA: H D D + 3 (conv_width - 1) H D floats per sequence and KDA layer */
  const int nkda = c->layers - clmoe_config_mla_count(c);
  const size_t per = (size_t)(c->kda_heads * c->kda_head_dim * c->kda_head_dim +
                              3 * (c->kda_conv_width - 1) * c->kda_heads * c->kda_head_dim) * 4;
  CU_ASSERT_EQUAL(m0.kda_state, per * 2 * (size_t)nkda);
  CU_ASSERT_EQUAL(m1.kda_state, m0.kda_state);
  CU_ASSERT_EQUAL(m1.tokens, 130);
  CU_ASSERT_EQUAL(m1.mla_token_bytes, (size_t)(c->mla_kv_rank + c->mla_qk_rope_dim) * 4 * clmoe_config_mla_count(c));
  CU_ASSERT_EQUAL(m1.mla_cache_used, 130 * m1.mla_token_bytes);
  CU_ASSERT(m1.mla_cache >= m1.mla_cache_used);
  CU_ASSERT(m1.weights > 0 && m1.weights == m0.weights);
  /* bad tokens and lengths */
  int32_t bad[2] = {'a', 256};
  CU_ASSERT_EQUAL(clmoe_gen_step(g, bad, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "vocabulary"));
  CU_ASSERT_EQUAL(clmoe_gen_prefill(g, (const int32_t *const[]){t, NULL}, (int64_t[]){1, 2}, NULL, NULL),
                  CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_gen_reset(g, 2), CLMOE_ERR_INVALID_ARGUMENT);
  clmoe_gen_state_destroy(g);
  clmoe_gen_options o = {.prefill_chunk = -1};
  CU_ASSERT_EQUAL(clmoe_gen_state_create(trained, 1, &o, &g), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(g);
  clmoe_gen_options of = {.extend_form = (clmoe_gen_extend_form)3};
  CU_ASSERT_EQUAL(clmoe_gen_state_create(trained, 1, &of, &g), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "extend_form"));
  CU_ASSERT_PTR_NULL(g);
}

/* Copies the first `bytes` bytes of ckpt to scratch. */
static int truncated_copy(long bytes)
{
  FILE *in = fopen(ckpt, "rb"), *out = fopen(scratch, "wb");
  int ok = in && out;
  for (long i = 0; ok && i < bytes; i++) {
    int ch = fgetc(in);
    if (ch == EOF) break;
    fputc(ch, out);
  }
  if (in) fclose(in);
  if (out) fclose(out);
  return ok;
}

#define ASSERT_LOAD_FAILS(path, want)                                                      \
  do {                                                                                     \
    clmoe_model *m_ = NULL;                                                                \
    clmoe_status st_ = clmoe_gen_load(test_ctx, path, &m_, NULL);                          \
    CU_ASSERT_NOT_EQUAL(st_, CLMOE_OK);                                                    \
    CU_ASSERT_PTR_NULL(m_);                                                                \
    if (!strstr(clmoe_last_error(), want))                                                 \
      fprintf(stderr, "\n  message '%s' lacks '%s'", clmoe_last_error(), want);            \
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), want));                              \
    clmoe_model_destroy(m_);                                                               \
  } while (0)

static void test_load_errors(void)
{
  CU_ASSERT_FATAL(ckpt[0] != 0);
  ASSERT_LOAD_FAILS("/nonexistent/x.safetensors", "/nonexistent/x.safetensors");
  CU_ASSERT_FATAL(truncated_copy(5000));
  ASSERT_LOAD_FAILS(scratch, scratch);
  /* A checkpoint of the tiny model that claims another config: the first tensor of
   * another shape is named. */
  clmoe_config tiny, other;
  clmoe_model *m = NULL;
  TEST_OK(clmoe_config_preset("tiny", &tiny));
  TEST_OK(clmoe_config_preset("demo", &other));
  TEST_OK(clmoe_model_create(test_ctx, &tiny, &m));
  TEST_OK(clmoe_model_init(m, 1));
  TEST_OK(gen_save_ckpt(clmoe_model_params(m), &other, scratch));
  ASSERT_LOAD_FAILS(scratch, "tensor 'param/embed'");
  /* No config entry. */
  TEST_OK(gen_save_ckpt(clmoe_model_params(m), NULL, scratch));
  ASSERT_LOAD_FAILS(scratch, "no \"config\" metadata");
  /* One layer fewer: the file's extra tensors belong to no parameter. */
  clmoe_config fewer = tiny;
  fewer.layers = 3;
  memset(fewer.is_mla, 0, sizeof fewer.is_mla); /* layers 0-2 as in tiny; layer 3 is left over */
  TEST_OK(gen_save_ckpt(clmoe_model_params(m), &fewer, scratch));
  ASSERT_LOAD_FAILS(scratch, "belongs to no parameter");
  clmoe_model_destroy(m);
  remove(scratch);
}

static void test_release(void)
{
  clmoe_model_destroy(trained);
  clmoe_model_destroy(slow);
  trained = slow = NULL;
  if (ckpt[0]) remove(ckpt);
}

static void add(CU_pSuite s)
{
  CU_add_test(s, "train a tiny model and load its checkpoint", test_train_and_load);
  CU_add_test(s, "one prompt in uneven chunks = training forward", test_single_uneven_chunks);
  CU_add_test(s, "a batch of prompt lengths = training forward", test_batch_of_lengths);
  CU_add_test(s, "each MLA extend form (training, absorbed) = training forward", test_extend_forms);
  CU_add_test(s, "reset and refill one sequence of a batch", test_reset_and_refill);
  CU_add_test(s, "greedy decoding continues the trained cycle", test_greedy_continues_cycle);
  CU_add_test(s, "greedy tokens chosen on the device = the sampler's", test_step_greedy_on_device);
  CU_add_test(s, "greedy steps fed on the device = step by step", test_decode_greedy_pipelined);
  CU_add_test(s, "the same seed samples the same tokens", test_seed_reproducible);
  CU_add_test(s, "sampled steps fed on the device = step by step with the host sampler", test_decode_sampled);
  CU_add_test(s, "memory by kind and argument errors", test_memory_and_arguments);
  CU_add_test(s, "checkpoint errors name the file and tensor", test_load_errors);
  CU_add_test(s, "release", test_release);
}

int main(void) { return test_main("generate", add); }
