/* clmoe-generate: text from a clmoe-train checkpoint or a Hugging Face Kimi Linear
 * checkpoint directory (include/clmoe/hf.h). Prompts (bytes for the byte-level
 * models clmoe-train makes, token ids, or text through a tokenizer: generate_tokens.c) are
 * prefilled together in chunks, then decoded together one token per sequence per step with
 * sampling, streamed as produced; a summary of speed and memory goes to stderr.
 * --prefill-bench measures long synthetic prompts instead (generate_report.c). The options
 * and --help: generate_options.c. */
#include <stdlib.h>
#include <string.h>

#include "generate_app.h"

/* 1 when dir holds a tokenizer.json or a tiktoken.model. */
static int gen_dir_has_tokenizer(const char *dir)
{
  static const char *const names[] = {"tokenizer.json", "tiktoken.model"};
  char path[4200];
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE *f = fopen(path, "rb");
    if (f) {
      fclose(f);
      return 1;
    }
  }
  return 0;
}

/* The weights' storage as --weights asks, auto resolved for the device. */
static int want_bf16(const gen_opts *o, clmoe_ctx *ctx)
{
  if (o->weights != GEN_WEIGHTS_AUTO) return o->weights == GEN_WEIGHTS_BF16;
  return clmoe_ctx_tile_impl(ctx) != CLMOE_TILE_PORTABLE;
}

/* --random-weights: the preset's or config file's model, its matrices made in the storage
 * asked for. */
static clmoe_status random_model(const gen_opts *o, clmoe_ctx *ctx, clmoe_model **model)
{
  clmoe_config cfg;
  const clmoe_status st = gen_random_config(o->random_preset, &cfg);
  if (st != CLMOE_OK) return st;
  return clmoe_gen_random_model(ctx, &cfg, o->sampling.seed, want_bf16(o, ctx) ? CLMOE_BF16 : CLMOE_F32, model);
}

/* How the weights' storage was chosen (the model was made in it), for the banner. */
static void weights_why(gen_opts *o, clmoe_ctx *ctx)
{
  o->weights_why = o->weights != GEN_WEIGHTS_AUTO ? " (--weights)"
                   : want_bf16(o, ctx)            ? " (auto: the device has a matrix unit)"
                                                  : " (auto: no matrix unit)";
}

static int ends_with(const char *text, int64_t len, const char *stop)
{
  const int64_t n = (int64_t)strlen(stop);
  return len >= n && !memcmp(text + len - n, stop, (size_t)n);
}

/* Under --ep every rank feeds rank 0's tokens (the ranks' logits may differ in the last
 * bits, and a sampled token must not): a sum of rank 0's values and zeros. */
static void share_tokens(int32_t *next, int64_t n)
{
  int64_t *v = malloc((size_t)n * sizeof *v);
  if (!v) app_die(CLMOE_ERR_OUT_OF_MEMORY, "tokens");
  const int root = clmoe_dist_rank(app_dist) == 0;
  for (int64_t s = 0; s < n; s++) v[s] = root ? next[s] : 0;
  APP_CHECK(clmoe_dist_allreduce_sum_i64(app_dist, v, (size_t)n));
  for (int64_t s = 0; s < n; s++) next[s] = (int32_t)v[s];
  free(v);
}

static void generate(const gen_opts *o, clmoe_model *model, clmoe_ctx *ctx, clmoe_tokenizer *tk, double load_s)
{
  const int64_t n = o->nprompts, V = clmoe_model_config(model)->vocab;
  int64_t *lens = calloc((size_t)n, sizeof *lens);
  if (!lens) app_die(CLMOE_ERR_OUT_OF_MEMORY, "prompts");
  int32_t **tok = gen_prompt_tokens(o, tk, V, lens);
  gen_result r = {.nseq = n, .load_s = load_s, .prompt = tok, .prompt_len = lens};
  r.text = calloc((size_t)n, sizeof *r.text);
  r.text_len = calloc((size_t)n, sizeof *r.text_len);
  r.text_cap = calloc((size_t)n, sizeof *r.text_cap);
  r.ids = calloc((size_t)n, sizeof *r.ids);
  r.nids = calloc((size_t)n, sizeof *r.nids);
  r.why = calloc((size_t)n, sizeof *r.why);
  float *logits = malloc((size_t)(n * V) * sizeof *logits);
  int32_t *next = calloc((size_t)n, sizeof *next), *picked = calloc((size_t)n, sizeof *picked);
  if (!r.text || !r.text_len || !r.text_cap || !r.ids || !r.nids || !r.why || !logits || !next || !picked)
    app_die(CLMOE_ERR_OUT_OF_MEMORY, "generation buffers");
  for (int64_t s = 0; s < n; s++) {
    r.text_cap[s] = o->max_new + 1;
    if (!(r.text[s] = malloc((size_t)r.text_cap[s])) || !(r.ids[s] = malloc((size_t)o->max_new * sizeof **r.ids)))
      app_die(CLMOE_ERR_OUT_OF_MEMORY, "texts");
    r.prompt_tokens += lens[s];
  }
  clmoe_gen_state *g;
  APP_CHECK(clmoe_gen_state_create(model, n, &o->gen, &g));
  const double t0 = app_now();
  APP_CHECK(clmoe_gen_prefill(g, (const int32_t *const *)tok, lens, logits, NULL));
  r.prefill_s = app_now() - t0;
  if (o->logits && (!app_dist || clmoe_dist_rank(app_dist) == 0)) gen_write_logits(o->logits, logits, n, V);
  int64_t active = n;
  const char *piece;
  size_t plen;
  /* Tokens are picked on the device (greedy, or the host sampler's draw): a step reads
   * back n ids, not n x V logits (the prefill's go through the host sampler). In one
   * process, unprofiled, runs of GEN_RUN steps feed each other there, one wait per run
   * (clmoe_gen_decode; a stop inside a run wastes the rest). --host-sample: step by step. */
  const int greedy = o->sampling.greedy || o->sampling.temperature == 0.0 || o->sampling.top_k == 1;
  const int on_device = greedy || !o->host_sample;
  const int piped = on_device && !app_dist && !o->profile;
  int32_t *run = piped ? malloc((size_t)(GEN_RUN * n) * sizeof *run) : NULL;
  if (piped && !run) app_die(CLMOE_ERR_OUT_OF_MEMORY, "generation buffers");
  int64_t have = 0, used = 0; /* steps in run, and taken from it */
  for (int64_t k = 0; active > 0; k++) {
    for (int64_t s = 0; s < n; s++) /* finished sequences: fed their last token again */
      if (!r.why[s]) {
        if (on_device && k > 0) next[s] = picked[s];
        else APP_CHECK(clmoe_gen_sample(&o->sampling, logits + s * V, V, s, k, &next[s]));
      }
    if (app_dist) share_tokens(next, n);
    for (int64_t s = 0; s < n; s++) {
      if (r.why[s]) continue; /* finished: output ignored */
      r.ids[s][r.nids[s]++] = next[s];
      gen_append(&r, s, next[s], tk, &piece, &plen);
      r.new_tokens++;
      if (n == 1) {
        fwrite(piece, 1, plen, stdout);
        fflush(stdout);
      }
      if (o->stop && ends_with(r.text[s], r.text_len[s], o->stop)) r.why[s] = "stop";
      else if (k + 1 == o->max_new) r.why[s] = "length";
      if (r.why[s]) {
        active--;
        if (n > 1) {
          printf("--- [%lld] %s\n", (long long)s + 1, o->prompt_from[s]);
          fwrite(r.text[s], 1, (size_t)r.text_len[s], stdout);
          printf("\n");
          fflush(stdout);
        }
      }
    }
    if (k == 0) r.first_token_s = app_now() - t0;
    if (active == 0) break;
    if (piped) {
      if (used == have) { /* positions k + 1 .. k + have; max_new - 1 is the last one */
        have = o->max_new - 1 - k < GEN_RUN ? o->max_new - 1 - k : GEN_RUN, used = 0;
        APP_CHECK(clmoe_gen_decode(g, &o->sampling, next, k + 1, have, run));
        r.steps += have;
      }
      memcpy(picked, run + used++ * n, (size_t)n * sizeof *picked);
      continue;
    }
    /* --profile in one process draws on the device, its kernels counted; --ep on the host */
    const clmoe_gen_sampling *draw = on_device && !greedy && !app_dist ? &o->sampling : NULL;
    if (o->profile && r.steps >= GEN_PROFILE_WARMUP)
      gen_profiled_step(ctx, g, next, logits, greedy, draw, k + 1, picked, &r.prof);
    else APP_CHECK(greedy ? clmoe_gen_step_greedy(g, next, picked, NULL)
                          : draw ? clmoe_gen_step_sample(g, draw, next, k + 1, picked, NULL)
                                 : clmoe_gen_step(g, next, logits));
    if (on_device && !greedy && !draw) /* (--ep: drawn from the logits read back) */
      for (int64_t s = 0; s < n; s++)
        if (!r.why[s]) APP_CHECK(clmoe_gen_sample(&o->sampling, logits + s * V, V, s, k + 1, &picked[s]));
    r.steps++;
  }
  if (n == 1) printf("\n");
  fflush(stdout); /* the text before the summary on stderr */
  clmoe_gen_stats st;
  clmoe_gen_stats_get(g, &st);
  r.decode_s = st.step_seconds;
  clmoe_gen_memory_usage(g, &r.mem);
  if (o->profile) gen_profile_families(ctx, &r.prof);
  gen_report(o, model, ctx, &r);
  clmoe_gen_state_destroy(g);
  for (int64_t s = 0; s < n; s++) free(tok[s]), free(r.text[s]), free(r.ids[s]);
  free(tok), free(lens), free(r.text), free(r.text_len), free(r.text_cap), free(r.ids), free(r.nids), free(r.why), free(logits),
      free(next), free(picked), free(run);
}

int main(int argc, char **argv)
{
  app_name = "clmoe-generate";
  gen_opts o = {0};
  gen_parse_args(argc, argv, &o);
  /* (under --ep, MPI may edit argc/argv; gen_parse_args has copied what it needs) */
  clmoe_ctx *ctx;
  clmoe_launch launch; /* several ranks without --ep: the experts spread over all of them */
  clmoe_launch_detect(&launch);
  if (clmoe_launch_check(&launch) != CLMOE_OK) app_fail(APP_EXIT_USAGE, "%s", clmoe_last_error());
  const int all_ranks = !o.ep && launch.mpi && launch.ranks != 1;
  if (o.ep > 0 || all_ranks) {
    ctx = app_dist_start(o.device, o.profile, o.quiet ? NULL : stderr, &argc, &argv); /* stdout: the text */
    if (all_ranks) o.ep = clmoe_dist_size(app_dist);
    if (clmoe_dist_size(app_dist) != o.ep)
      app_fail(2, "--ep %d: the job has %d rank%s (start it as mpirun -np %d clmoe-generate --ep %d ...)", o.ep,
               clmoe_dist_size(app_dist), clmoe_dist_size(app_dist) == 1 ? "" : "s", o.ep, o.ep);
    if (clmoe_dist_rank(app_dist) != 0) { /* rank 0 prints; the others only report errors */
      if (!freopen("/dev/null", "w", stdout)) app_fail(1, "cannot redirect the output of rank %d", clmoe_dist_rank(app_dist));
      o.quiet = 1, o.json = NULL;
    }
  } else {
    clmoe_ctx_options copts = {.device = o.device, .profiling = o.profile};
    APP_CHECK(clmoe_ctx_create(&ctx, &copts));
  }
  clmoe_model *model;
  clmoe_ckpt_meta meta = {0};
  const double t0 = app_now();
  const clmoe_dtype wdt = want_bf16(&o, ctx) ? CLMOE_BF16 : CLMOE_F32; /* made so: never fp32 first */
  clmoe_status st = o.random_preset         ? random_model(&o, ctx, &model)
                     : o.model_dir && app_dist ? clmoe_hf_load_ep_weights(ctx, o.model_dir, app_dist, NULL, wdt, &model)
                     : o.model_dir          ? clmoe_hf_load_weights(ctx, o.model_dir, wdt, &model)
                                            : clmoe_gen_load_weights(ctx, o.ckpt, app_dist, NULL, wdt, &model, &meta);
  if (st != CLMOE_OK) {
    if (app_dist && clmoe_dist_size(app_dist) > 1)
      app_fail(1, "cannot load the checkpoint: %s: %s", clmoe_strerror(st), clmoe_last_error());
    fprintf(stderr, "%s: cannot load the checkpoint: %s\n  %s\n", app_name, clmoe_strerror(st), clmoe_last_error());
    clmoe_ctx_destroy(ctx);
    if (app_dist) app_dist_end();
    return 1;
  }
  weights_why(&o, ctx);
  const double load_s = app_now() - t0;
  if (!o.model_dir && !o.random_preset && !clmoe_ckpt_meta_get(&meta, "clmoe_format") && (!app_dist || clmoe_dist_rank(app_dist) == 0))
    fprintf(stderr, "%s: warning: %s was written before checkpoints carried checksums: loaded unverified\n",
            app_name, o.ckpt);
  clmoe_ckpt_meta_free(&meta);
  int rc = 0;
  clmoe_tokenizer *tk = NULL;
  if (o.tokenizer && clmoe_tokenizer_open(o.tokenizer, NULL, &tk) != CLMOE_OK)
    app_fail(APP_EXIT_FAILED, "--tokenizer %s: %s", o.tokenizer, clmoe_last_error());
  if (!o.tokenizer && o.model_dir && gen_dir_has_tokenizer(o.model_dir) &&
      clmoe_tokenizer_open(o.model_dir, NULL, &tk) != CLMOE_OK)
    app_fail(APP_EXIT_FAILED, "--model %s: its tokenizer: %s", o.model_dir, clmoe_last_error());
  if (tk && clmoe_tokenizer_vocab(tk) > clmoe_model_config(model)->vocab)
    fprintf(stderr, "%s: warning: the tokenizer has %lld ids, the model's vocabulary %lld: larger ids are refused\n",
            app_name, (long long)clmoe_tokenizer_vocab(tk), (long long)clmoe_model_config(model)->vocab);
  if (o.nbench) rc = gen_prefill_bench(&o, model, ctx);
  else generate(&o, model, ctx, tk, load_s);
  clmoe_tokenizer_free(tk);
  clmoe_model_destroy(model);
  clmoe_ctx_destroy(ctx);
  if (app_dist) app_dist_end();
  for (int p = 0; p < o.nprompts; p++) free(o.prompt[p]), free(o.prompt_from[p]), free(o.prompt_ids[p]);
  return rc;
}
