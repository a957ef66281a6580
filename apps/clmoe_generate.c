/* clmoe-generate: text from a clmoe-train checkpoint or a Hugging Face Kimi Linear
 * checkpoint directory (include/clmoe/hf.h). Prompts (bytes for the byte-level
 * models clmoe-train makes, token ids, or text through a tokenizer: generate_tokens.c) are
 * prefilled together in chunks, then decoded together one token per sequence per step with
 * sampling, streamed as produced; a summary of speed and memory goes to stderr.
 * --prefill-bench measures long synthetic prompts instead (generate_report.c). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "generate_app.h"

static void usage(void)
{
  printf("Usage: clmoe-generate (--ckpt FILE | --model DIR | --random-weights PRESET)\n"
         "                      [--prompt TEXT | --prompt-file FILE | --prompt-ids LIST]... [options]\n"
         "       clmoe-generate (--ckpt FILE | --model DIR | --random-weights PRESET)\n"
         "                      --prefill-bench T[,T...] [options]\n"
         "\n"
         "Generates text from a checkpoint written by clmoe-train (its config is inside it) or\n"
         "from a Hugging Face Kimi Linear checkpoint directory. Several prompts are decoded\n"
         "together as a batch of sequences of different lengths.\n"
         "\n"
         "Input:\n"
         "  --ckpt FILE         the checkpoint (e.g. clmoe-run/checkpoint.safetensors)\n"
         "  --model DIR         a Hugging Face checkpoint directory (config.json, model.safetensors\n"
         "                      or model.safetensors.index.json and its shards; Kimi Linear models):\n"
         "                      its tokenizer (tiktoken.model or tokenizer.json) is used when\n"
         "                      present and --tokenizer is not given\n"
         "  --random-weights PRESET  a model of a preset (clmoe-train --preset) with random\n"
         "                      weights made on the device, no checkpoint: for speed and memory\n"
         "                      measurements (with bf16 weights no fp32 copy of the matrices\n"
         "                      is made); --seed picks the weights\n"
         "  --prompt TEXT       a prompt (repeat for a batch); bytes are tokens\n"
         "  --prompt-file FILE  a prompt read from a file (repeatable; - is stdin)\n"
         "  --prompt-ids LIST   a prompt as token ids, e.g. 5,17,300 (repeatable)\n"
         "  --tokenizer PATH    a tokenizer.json, tiktoken.model or a folder holding one: text\n"
         "                      prompts are encoded (special tokens written in them included)\n"
         "                      and the output decoded through it (default: bytes are tokens)\n"
         "  --no-add-special    text prompts without the special tokens the tokenizer.json's\n"
         "                      post-processor puts around a text (a BOS; default: with them, as\n"
         "                      transformers' tokenizer(text); Kimi's tiktoken adds none)\n"
         "Generation:\n"
         "  -n N                new tokens per prompt (default 128)\n"
         "  --greedy            always the most likely token (same as --temperature 0)\n"
         "  --temperature T     sampling temperature (default 0.8)\n"
         "  --top-k K           sample among the K most likely tokens (default 0: all)\n"
         "  --top-p P           then among the fewest whose probability reaches P (default 0.95)\n"
         "  --seed S            sampling seed (default 1): the same seed gives the same text\n"
         "  --stop STR          a sequence ends after it produces STR (printed)\n"
         "  --host-sample       draw tokens on the host from each step's logits (default: on\n"
         "                      the device, in runs of 16 steps; the same tokens)\n"
         "Run:\n"
         "  --device SPEC       OpenCL device: P:D, gpu, cpu, an implementation (pocl, intel,\n"
         "                      nvidia, ...) or part of a name, as for clmoe-info; under mpirun a\n"
         "                      comma-separated list, one entry per local rank (default:\n"
         "                      CLMOE_DEVICE, else the GPUs in order, else the CPU)\n"
         "  --prefill-chunk C   prompt tokens per sequence per prefill pass (default 2048)\n"
         "  --cache-bf16        keep the MLA latent cache in bf16 (half the memory; default f32)\n"
         "  --weights W         the weight matrices' storage: bf16 (half the memory and bytes\n"
         "                      read per step; logits move by about 1e-2 relative), fp32, or\n"
         "                      auto (default: bf16 on a device with a matrix unit, else fp32)\n"
         "  --extend-form F     how prefill passes after the first attend to the cached prefix:\n"
         "                      auto (default: the one with fewer multiply-adds), training\n"
         "                      (decompressed K/V, flash kernel) or absorbed (latent cache)\n"
         "  --prefill-bench T   instead of generating: prefill a synthetic prompt of T tokens (a\n"
         "                      comma-separated list runs several lengths) in chunks and report\n"
         "                      time, tokens/s, the constant KDA state and the growing MLA cache\n"
         "  --bench-steps N     decode steps timed after each benchmark prefill (default 4)\n"
         "  --json FILE         the summary, prompts, texts and generated ids as JSON (- for\n"
         "                      stdout)\n"
         "  --logits FILE       write the logits at each prompt's last position as a safetensors\n"
         "                      file: \"logits\" [prompts, vocab] fp32\n"
         "  --ep N              expert parallelism over N MPI ranks (mpirun -np N clmoe-generate\n"
         "                      --ep N ...): the routed experts spread evenly over the ranks,\n"
         "                      every rank runs the same prompts, rank 0 samples and prints;\n"
         "                      several MPI ranks without --ep: as --ep over all of them\n"
         "  --profile           after 2 warm-up decode steps, count per step the kernels\n"
         "                      launched and the host waits (blocking reads, writes and\n"
         "                      finishes), and time the step on the wall clock and on the device\n"
         "                      by kernel family (summary and --json)\n"
         "  --quiet             no summary on stderr\n"
         "  --help, --version\n"
         "\n"
         "With one prompt the text is streamed as it is produced; with several, each text is\n"
         "printed when its sequence ends, after a line \"--- [i] SOURCE\". The summary on\n"
         "stderr gives prefill and decode tokens/s, the time to the first token and device\n"
         "memory by kind (weights, KDA states, MLA cache).\n");
}

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

static double parse_real(const char *flag, const char *v, double min, double max)
{
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= min && x <= max))
    app_usage_error("%s: '%s' is not a number in [%g, %g]", flag, v, min, max);
  return x;
}

/* Reads a whole file ("-": stdin) into a malloc'ed buffer. */
static char *read_all(const char *path, int64_t *len)
{
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) {
    fprintf(stderr, "%s: --prompt-file %s: cannot open: %s\n", app_name, path, strerror(errno));
    exit(1);
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      char *bigger = realloc(buf, cap *= 2);
      if (!bigger) free(buf);
      buf = bigger;
    }
  }
  if (!buf) app_die(CLMOE_ERR_OUT_OF_MEMORY, "reading a prompt file");
  if (ferror(f)) {
    fprintf(stderr, "%s: --prompt-file %s: read error: %s\n", app_name, path, strerror(errno));
    exit(1);
  }
  if (f != stdin) fclose(f);
  *len = (int64_t)n;
  return buf;
}

static void add_prompt(gen_opts *o, char *bytes, int64_t len, const char *file)
{
  if (o->nprompts == GEN_MAX_PROMPTS) app_usage_error("at most %d prompts", GEN_MAX_PROMPTS);
  char label[32], *from;
  snprintf(label, sizeof label, "%s #%d", bytes ? "--prompt" : "--prompt-ids", o->nprompts + 1);
  if (!(from = strdup(file ? file : label))) app_die(CLMOE_ERR_OUT_OF_MEMORY, "strdup");
  o->prompt[o->nprompts] = bytes;
  o->prompt_len[o->nprompts] = len;
  o->prompt_from[o->nprompts++] = from;
}

static void parse_args(int argc, char **argv, gen_opts *o)
{
  app_flags flags = {.take = APP_FLAGS_ALL, .usage = usage};
  o->max_new = 128;
  o->bench_steps = 4;
  o->sampling = (clmoe_gen_sampling){.temperature = 0.8, .top_p = 0.95, .seed = 1};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--ckpt", &v)) o->ckpt = v;
    else if (app_option(argc, argv, &i, "--model", &v)) o->model_dir = v;
    else if (app_option(argc, argv, &i, "--random-weights", &v)) o->random_preset = v;
    else if (app_option(argc, argv, &i, "--prompt", &v)) {
      char *copy = strdup(v);
      if (!copy) app_die(CLMOE_ERR_OUT_OF_MEMORY, "strdup");
      add_prompt(o, copy, (int64_t)strlen(v), NULL);
    } else if (app_option(argc, argv, &i, "--prompt-ids", &v)) {
      int64_t n;
      int32_t *ids = gen_parse_ids("--prompt-ids", v, &n);
      add_prompt(o, NULL, n, NULL);
      o->prompt_ids[o->nprompts - 1] = ids;
    } else if (app_option(argc, argv, &i, "--tokenizer", &v)) o->tokenizer = v;
    else if (!strcmp(argv[i], "--no-add-special")) o->no_add_special = 1;
    else if (app_option(argc, argv, &i, "--logits", &v)) o->logits = v;
    else if (app_option(argc, argv, &i, "--prompt-file", &v)) {
      int64_t len;
      char *bytes = read_all(v, &len);
      add_prompt(o, bytes, len, v);
    } else if (app_option(argc, argv, &i, "-n", &v)) o->max_new = app_parse_int("-n", v, 1, 1LL << 30);
    else if (!strcmp(argv[i], "--greedy")) o->sampling.greedy = 1;
    else if (!strcmp(argv[i], "--host-sample")) o->host_sample = 1;
    else if (app_option(argc, argv, &i, "--temperature", &v)) o->sampling.temperature = parse_real("--temperature", v, 0, 1e6);
    else if (app_option(argc, argv, &i, "--top-k", &v)) o->sampling.top_k = app_parse_int("--top-k", v, 0, 1LL << 31);
    else if (app_option(argc, argv, &i, "--top-p", &v)) o->sampling.top_p = parse_real("--top-p", v, 0, 1);
    else if (app_option(argc, argv, &i, "--seed", &v)) o->sampling.seed = (uint64_t)app_parse_int("--seed", v, 0, LLONG_MAX);
    else if (app_option(argc, argv, &i, "--stop", &v)) {
      if (!*v) app_usage_error("--stop: the stop string is empty");
      o->stop = v;
    } else if (app_option(argc, argv, &i, "--prefill-chunk", &v)) o->gen.prefill_chunk = app_parse_int("--prefill-chunk", v, 1, 1LL << 24);
    else if (!strcmp(argv[i], "--cache-bf16")) o->gen.cache_dtype = CLMOE_BF16;
    else if (app_option(argc, argv, &i, "--weights", &v)) {
      if (!strcmp(v, "auto")) o->weights = GEN_WEIGHTS_AUTO;
      else if (!strcmp(v, "fp32")) o->weights = GEN_WEIGHTS_FP32;
      else if (!strcmp(v, "bf16")) o->weights = GEN_WEIGHTS_BF16;
      else app_usage_error("--weights: '%s' is not auto, bf16 or fp32", v);
    }
    else if (app_option(argc, argv, &i, "--extend-form", &v)) {
      if (!strcmp(v, "auto")) o->gen.extend_form = CLMOE_GEN_EXTEND_AUTO;
      else if (!strcmp(v, "training")) o->gen.extend_form = CLMOE_GEN_EXTEND_TRAINING;
      else if (!strcmp(v, "absorbed")) o->gen.extend_form = CLMOE_GEN_EXTEND_ABSORBED;
      else app_usage_error("--extend-form: '%s' is not auto, training or absorbed", v);
    }
    else if (app_option(argc, argv, &i, "--prefill-bench", &v)) {
      char *list = strdup(v), *save = NULL;
      if (!list) app_die(CLMOE_ERR_OUT_OF_MEMORY, "strdup");
      for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->nbench == GEN_MAX_BENCH) app_usage_error("--prefill-bench: at most %d lengths", GEN_MAX_BENCH);
        o->bench[o->nbench++] = app_parse_int("--prefill-bench", t, 1, 1LL << 30);
      }
      free(list);
      if (!o->nbench) app_usage_error("--prefill-bench: no length given");
    } else if (app_option(argc, argv, &i, "--bench-steps", &v)) o->bench_steps = app_parse_int("--bench-steps", v, 0, 100000);
    else if (!strcmp(argv[i], "--quiet")) o->quiet = 1;
    else if (!strcmp(argv[i], "--profile")) o->profile = 1;
    else if (app_option(argc, argv, &i, "--ep", &v)) o->ep = (int)app_parse_int("--ep", v, 1, 1 << 20);
    else app_usage_error("unknown argument '%s'", argv[i]);
  }
  o->device = flags.device, o->json = flags.json;
  if (!!o->ckpt + !!o->model_dir + !!o->random_preset > 1)
    app_usage_error("--ckpt, --model and --random-weights: give one of them");
  if (!o->ckpt && !o->model_dir && !o->random_preset)
    app_usage_error("--ckpt FILE, --model DIR or --random-weights PRESET is required");
  if (o->random_preset) {
    clmoe_config cfg;
    if (clmoe_config_preset(o->random_preset, &cfg) != CLMOE_OK)
      app_usage_error("--random-weights: %s", clmoe_last_error());
    if (o->ep) app_usage_error("--random-weights: not with --ep");
    snprintf(o->random_name, sizeof o->random_name, "random weights (%s)", o->random_preset);
    o->ckpt = o->random_name;
  }
  if (o->model_dir && !clmoe_hf_is_checkpoint(o->model_dir))
    app_usage_error("--model %s: not a directory holding a config.json (a Hugging Face checkpoint)", o->model_dir);
  if (o->model_dir) o->ckpt = o->model_dir;
  if (!o->nbench && !o->nprompts) app_usage_error("give at least one --prompt or --prompt-file (or --prefill-bench)");
  if (o->nbench && o->nprompts) app_usage_error("--prefill-bench makes its own prompts: leave out --prompt");
  if (o->profile && o->nbench) app_usage_error("--profile profiles the decode steps of a generation: leave out --prefill-bench");
  for (int p = 0; p < o->nprompts; p++)
    if (o->prompt_len[p] == 0) app_usage_error("prompt %d (%s) is empty: a prompt needs at least one byte", p + 1,
                                               o->prompt_from[p]);
}

/* The weights' storage as --weights asks, auto resolved for the device. */
static int want_bf16(const gen_opts *o, clmoe_ctx *ctx)
{
  if (o->weights != GEN_WEIGHTS_AUTO) return o->weights == GEN_WEIGHTS_BF16;
  return clmoe_ctx_tile_impl(ctx) != CLMOE_TILE_PORTABLE;
}

/* --random-weights: the preset's model, its matrices made in the storage asked for. */
static clmoe_status random_model(const gen_opts *o, clmoe_ctx *ctx, clmoe_model **model)
{
  clmoe_config cfg;
  const clmoe_status st = clmoe_config_preset(o->random_preset, &cfg);
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
    if (o->profile && r.steps >= GEN_PROFILE_WARMUP)
      gen_profiled_step(ctx, g, next, logits, greedy ? picked : NULL, &r.prof);
    else APP_CHECK(greedy ? clmoe_gen_step_greedy(g, next, picked, NULL) : clmoe_gen_step(g, next, logits));
    if (on_device && !greedy) /* (--profile, --ep: drawn from the logits read back) */
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
  parse_args(argc, argv, &o);
  /* (under --ep, MPI may edit argc/argv; parse_args has copied what it needs) */
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
