/* clmoe-generate's command line: the usage text and the options, checked as a whole
 * (generate_app.h). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generate_app.h"

static void usage(void)
{
  printf("Usage: clmoe-generate (--ckpt FILE | --model DIR | --random-weights PRESET|FILE)\n"
         "                      [--prompt TEXT | --prompt-file FILE | --prompt-ids LIST]... [options]\n"
         "       clmoe-generate (--ckpt FILE | --model DIR | --random-weights PRESET|FILE)\n"
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
         "  --random-weights PRESET|FILE  a model of a preset (clmoe-train --preset) or of a\n"
         "                      config file (clmoe-train --config) with random weights made on\n"
         "                      the device, no checkpoint: for speed and memory measurements\n"
         "                      (with bf16 weights no fp32 copy of the matrices is made);\n"
         "                      --seed picks the weights\n"
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
         "                      by kernel family (summary and --json); with --prefill-bench, each\n"
         "                      prefill (in --json a \"profile\" of one step per length)\n"
         "  --quiet             no summary on stderr\n"
         "  --help, --version\n"
         "\n"
         "With one prompt the text is streamed as it is produced; with several, each text is\n"
         "printed when its sequence ends, after a line \"--- [i] SOURCE\". The summary on\n"
         "stderr gives prefill and decode tokens/s, the time to the first token and device\n"
         "memory by kind (weights, KDA states, MLA cache).\n");
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

clmoe_status gen_random_config(const char *arg, clmoe_config *cfg)
{
  for (const char *const *name = clmoe_config_preset_names(); *name; name++)
    if (!strcmp(*name, arg)) return clmoe_config_preset(arg, cfg);
  if (access(arg, F_OK) == 0) return clmoe_config_load(arg, cfg);
  return clmoe_config_preset(arg, cfg); /* the unknown-preset error, naming the presets */
}

void gen_parse_args(int argc, char **argv, gen_opts *o)
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
    app_usage_error("--ckpt FILE, --model DIR or --random-weights PRESET|FILE is required");
  if (o->random_preset) {
    clmoe_config cfg;
    if (gen_random_config(o->random_preset, &cfg) != CLMOE_OK)
      app_usage_error("--random-weights %s: %s", o->random_preset, clmoe_last_error());
    if (o->ep) app_usage_error("--random-weights: not with --ep");
    snprintf(o->random_name, sizeof o->random_name, "random weights (%s)", o->random_preset);
    o->ckpt = o->random_name;
  }
  if (o->model_dir && !clmoe_hf_is_checkpoint(o->model_dir))
    app_usage_error("--model %s: not a directory holding a config.json (a Hugging Face checkpoint)", o->model_dir);
  if (o->model_dir) o->ckpt = o->model_dir;
  if (!o->nbench && !o->nprompts) app_usage_error("give at least one --prompt or --prompt-file (or --prefill-bench)");
  if (o->nbench && o->nprompts) app_usage_error("--prefill-bench makes its own prompts: leave out --prompt");
  for (int p = 0; p < o->nprompts; p++)
    if (o->prompt_len[p] == 0) app_usage_error("prompt %d (%s) is empty: a prompt needs at least one byte", p + 1,
                                               o->prompt_from[p]);
}
