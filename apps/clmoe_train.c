/* clmoe-train: the model's trainer. Reads a preset or config file, trains on a text file,
 * token shards or the recall task with progress, metrics, checkpoints and exact resume
 * (train_run.c), and counts parameters by component (--count-params). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app_common.h"
#include "train_run.h"

static void usage(void)
{
  printf("Usage: clmoe-train (--preset NAME | --config FILE | --resume CKPT|DIR|auto) [options]\n"
         "\n"
         "Model:\n"
         "  --preset NAME       a shipped model: tiny, demo, gpu, k3, kimi-linear-48b\n"
         "  --config FILE       a config file (format: docs/user-guide.md; `clmoe-train --preset\n"
         "                      tiny --print-config` prints a complete example)\n"
         "  --resume CKPT|DIR   continue a run from a checkpoint, or from the newest one of a run's\n"
         "                      directory (its config, step, data and optimizer state), in that\n"
         "                      directory unless --out says otherwise; the same device and seed\n"
         "                      give the same losses as a run that never stopped. --steps may\n"
         "                      extend the run\n"
         "  --resume auto       with --out DIR: go on with the run in DIR when it holds one, else\n"
         "                      start it (--preset/--config: the model to start; refused if DIR\n"
         "                      holds another model's run). One command for every job of a chain\n"
         "Data (one of):\n"
         "  --data FILE         any file as byte tokens (vocabulary 256), or a CLMOETOK token shard\n"
         "  --task mqar[:keys=K,values=V,pairs=P,queries=Q]\n"
         "                      the built-in recall task: P key-value pairs, then Q of the\n"
         "                      keys whose values the model must recall (defaults 64, 64, 16,\n"
         "                      8; chance is 1/V); validation accuracy is the recall rate\n"
         "Run:\n"
         "  --out DIR           the run's directory (default clmoe-run): DIR/checkpoint-STEP.safetensors,\n"
         "                      DIR/checkpoint.safetensors (a link to the newest), DIR/metrics.csv.\n"
         "                      A fresh run refuses a directory that holds a run\n"
         "  --overwrite         discard what --out holds of a run (a fresh run), or its checkpoints\n"
         "                      after the step a resume starts from\n"
         "  --keep-checkpoints N  keep the newest N step-numbered checkpoints (default 3; 0: all)\n"
         "  --metrics FILE      per-step CSV (default DIR/metrics.csv; - for none)\n"
         "  --steps N --batch N --seq-len N --lr X --seed N\n"
         "  --eval-every N --log-every N --checkpoint-every N\n"
         "                      override the config's [train] section\n"
         "  --precision P       bf16, fp32 or auto ([train] precision; default auto: bf16 where\n"
         "                      the device has a matrix unit, fp32 elsewhere); checkpoints stay\n"
         "                      fp32, so a run resumes in either\n"
         "  --sample N          after training, print N bytes sampled at temperature 0.8 (default 200;\n"
         "                      byte data only; 0: none)\n"
         "  --prompt TEXT       the sample's prompt (default \"The \")\n"
         "  --device SPEC       OpenCL device: P:D, gpu, cpu, an implementation (pocl, intel,\n"
         "                      nvidia, ...) or part of a name, as for clmoe-info; under mpirun a\n"
         "                      comma-separated list, one entry per local rank (default:\n"
         "                      CLMOE_DEVICE, else the GPUs in order, else the CPU)\n"
         "  --stop-at STEP      stop after STEP with a checkpoint (exit 75), keeping the schedule\n"
         "                      of --steps (split a run over several jobs; --resume goes on)\n"
         "  --time-limit S      stop with a checkpoint (exit 75) after the step that passes S\n"
         "                      seconds (below a batch job's wall time; --resume goes on)\n"
         "  --quiet             no progress lines (checkpoints and errors are still reported)\n"
         "  --ep N              expert parallelism over N MPI ranks (mpirun -np N clmoe-train --ep N\n"
         "                      ...): the routed experts spread over the ranks, the rest\n"
         "                      data-parallel, each rank on its share of every batch (--batch a\n"
         "                      multiple of N); same losses as one process within fp32 rounding;\n"
         "                      checkpoints hold whole tensors (resume on any rank count)\n"
         "  --ep-rebalance      with --ep: at every checkpoint, re-place the experts so that the\n"
         "                      ranks' measured loads (tokens routed since the last placement)\n"
         "                      even out, when that lowers the busiest rank's load by > 1%%\n"
         "  --profile           at the end, device time by operator family and kernel\n"
         "                      (OpenCL profiling events; steps after the first two), peak\n"
         "                      device memory and tokens/s\n"
         "Inspection (no training):\n"
         "  --count-params      total and active (per token) parameters by component; active counts\n"
         "                      the top-k routed experts and the output head, not the embedding table\n"
         "  --print-config      the config as parsed (after the overrides), in the file format\n"
         "  --json FILE         --count-params as JSON (- for stdout)\n"
         "  --help, --version\n"
         "\n"
         "SIGINT or SIGTERM (Ctrl-C, Slurm's warning before a time limit) ends the step, writes a\n"
         "checkpoint and exits 130 or 143. Several MPI ranks without --ep train expert- and\n"
         "data-parallel over all of them; srun tasks without PMI/PMIx are refused.\n"
         "\n"
         "Exit status: 0 the run is complete; 75 stopped with a checkpoint by --time-limit or\n"
         "--stop-at (resume to go on); 130/143 stopped by SIGINT/SIGTERM with a checkpoint; 1 failed;\n"
         "2 bad command line, config or run directory.\n");
}

static void human(char *buf, size_t len, double v)
{
  if (v >= 1e12) snprintf(buf, len, "%.3fT", v / 1e12);
  else if (v >= 1e9) snprintf(buf, len, "%.2fB", v / 1e9);
  else if (v >= 1e6) snprintf(buf, len, "%.2fM", v / 1e6);
  else if (v >= 1e3) snprintf(buf, len, "%.1fK", v / 1e3);
  else snprintf(buf, len, "%.0f", v);
}

static void count_params(const clmoe_config *c, const char *json)
{
  clmoe_param_count p;
  clmoe_config_count_params(c, &p);
  const struct { const char *name; double total, active; } rows[] = {
      {"embedding", p.embedding, 0.0},
      {"output head", p.head, p.head},
      {"KDA layers", p.kda, p.kda},
      {"MLA layers", p.mla, p.mla},
      {"dense FFN", p.dense_ffn, p.dense_ffn},
      {"MoE routed experts", p.moe_experts, p.active_moe_experts},
      {"MoE shared experts", p.moe_shared, p.moe_shared},
      {"MoE routers", p.moe_router, p.moe_router},
      {"MoE latent projections", p.moe_latent, p.moe_latent},
      {"RMSNorm gains", p.norms, p.norms},
      {"Block AttnRes", p.attn_res, p.attn_res},
  };
  const size_t n = sizeof rows / sizeof rows[0];
  if (json) {
    FILE *f = app_open_output(json);
    fprintf(f, "{\n  \"model\": ");
    json_string(f, c->name);
    fprintf(f, ",\n  \"components\": [\n");
    for (size_t i = 0; i < n; i++) {
      fprintf(f, "    {\"name\": ");
      json_string(f, rows[i].name);
      fprintf(f, ", \"total\": %.0f, \"active\": %.0f}%s\n", rows[i].total, rows[i].active, i + 1 < n ? "," : "");
    }
    fprintf(f, "  ],\n  \"total\": %.0f,\n  \"active\": %.0f\n}\n", p.total, p.active);
    app_close_output(f);
    if (!strcmp(json, "-")) return;
  }
  char a[32], b[32];
  printf("%s: %d layers (%d MLA), d %lld, vocab %lld\n", c->name, c->layers, clmoe_config_mla_count(c),
         (long long)c->d_model, (long long)c->vocab);
  printf("%-24s %12s %12s\n", "component", "total", "active");
  for (size_t i = 0; i < n; i++) {
    human(a, sizeof a, rows[i].total);
    human(b, sizeof b, rows[i].active);
    printf("%-24s %12s %12s\n", rows[i].name, a, b);
  }
  human(a, sizeof a, p.total);
  human(b, sizeof b, p.active);
  printf("%-24s %12s %12s   (%.0f / %.0f)\n", "all", a, b, p.total, p.active);
}

static double parse_real(const char *flag, const char *v, double min, double max)
{
  char *end;
  double x = strtod(v, &end);
  if (end == v || *end || !(x >= min && x <= max))
    app_usage_error("%s: '%s' is not a number in [%g, %g]", flag, v, min, max);
  return x;
}

/* Parses "mqar" or "mqar:keys=K,values=V,pairs=P,queries=Q" (any subset, defaults 64, 64,
 * 16, 8); exits with a usage error naming `flag` when malformed. */
static void train_parse_task(const char *flag, const char *spec, clmoe_mqar *task)
{
  *task = (clmoe_mqar){64, 64, 16, 8};
  if (strncmp(spec, "mqar", 4) || (spec[4] && spec[4] != ':'))
    app_usage_error("%s: unknown task '%s' (known: mqar[:keys=K,values=V,pairs=P,queries=Q])", flag, spec);
  for (const char *p = spec[4] ? spec + 5 : spec + 4; *p;) {
    const size_t n = strcspn(p, "=,");
    char *end;
    if (p[n] != '=') app_usage_error("%s: '%s': expected NAME=VALUE after '%.*s'", flag, spec, (int)n, p);
    errno = 0;
    const long v = strtol(p + n + 1, &end, 10);
    if (errno || end == p + n + 1 || (*end && *end != ',') || v < 1 || v > 100000)
      app_usage_error("%s: '%s': the value of '%.*s' must be an integer in [1, 100000]", flag, spec, (int)n, p);
    int *field = !strncmp(p, "keys", n) && n == 4      ? &task->keys
                 : !strncmp(p, "values", n) && n == 6  ? &task->values
                 : !strncmp(p, "pairs", n) && n == 5   ? &task->pairs
                 : !strncmp(p, "queries", n) && n == 7 ? &task->queries
                                                       : NULL;
    if (!field) app_usage_error("%s: '%s': unknown field '%.*s' (keys, values, pairs, queries)", flag, spec, (int)n, p);
    *field = (int)v;
    p = *end ? end + 1 : end;
  }
}

/* The config of a checkpoint (its "config" metadata), its data source and step; exits on
 * failure. */
static void config_of_checkpoint(const char *path, clmoe_config *cfg, char **data, int64_t *step)
{
  clmoe_st_file *f;
  if (clmoe_st_open(path, &f) != CLMOE_OK) {
    fprintf(stderr, "%s: %s\n", app_name, clmoe_last_error());
    exit(1);
  }
  const char *text = clmoe_st_metadata(f, "config"), *d = clmoe_st_metadata(f, "data");
  if (!text) {
    fprintf(stderr, "%s: %s: no \"config\" metadata (not a clmoe-train checkpoint)\n", app_name, path);
    exit(1);
  }
  if (clmoe_config_parse(text, path, cfg) != CLMOE_OK) {
    fprintf(stderr, "%s: %s\n", app_name, clmoe_last_error());
    exit(1);
  }
  if (!strncmp(text, "# ", 2)) /* the model's name, as clmoe_config_write put it */
    snprintf(cfg->name, sizeof cfg->name, "%.*s", (int)strcspn(text + 2, "\n"), text + 2);
  if (d && !(*data = strdup(d))) app_die(CLMOE_ERR_OUT_OF_MEMORY, "strdup");
  const char *s = clmoe_st_metadata(f, "step");
  clmoe_ckpt_meta m = {0}; /* read as train_run reads it (where it is also checked against the optimizer's) */
  APP_CHECK(clmoe_ckpt_meta_set(&m, "step", s ? s : ""));
  if (!s || clmoe_ckpt_meta_int(&m, "step", 0, CLMOE_CKPT_MAX_STEP, step) != CLMOE_OK)
    app_fail(APP_EXIT_FAILED, "%s: %s (a damaged or edited checkpoint?)", path,
             s ? clmoe_last_error() : "metadata 'step' is missing");
  clmoe_ckpt_meta_free(&m);
  clmoe_st_close(f);
}

/* The directory part of path ("." when it has none) in buf. */
static void dir_of(const char *path, char *buf, size_t len)
{
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(buf, len, ".");
  else if (slash == path) snprintf(buf, len, "/");
  else snprintf(buf, len, "%.*s", (int)(slash - path), path);
}

static int is_dir(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The model sections of two configs as text (the [train] sections made equal). */
static int same_model(const clmoe_config *a, const clmoe_config *b)
{
  clmoe_config x = *a, y = *b;
  y.train = x.train;
  snprintf(y.name, sizeof y.name, "%s", x.name);
  char *ta = NULL, *tb = NULL;
  size_t la = 0, lb = 0;
  FILE *fa = open_memstream(&ta, &la), *fb = open_memstream(&tb, &lb);
  if (!fa || !fb || clmoe_config_write(&x, fa) != 0 || clmoe_config_write(&y, fb) != 0)
    app_die(CLMOE_ERR_OUT_OF_MEMORY, "writing the configs");
  fclose(fa), fclose(fb);
  const int same = la == lb && !memcmp(ta, tb, la);
  free(ta), free(tb);
  return same;
}

/* Whether two paths name one existing directory. */
static int same_dir(const char *a, const char *b)
{
  struct stat sa, sb;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Several ranks without --ep: expert and data parallelism over all of them (an MPI launch),
 * or a refusal (srun tasks that MPI cannot join); never N copies of one run. */
static void launch_ranks(train_opts *o)
{
  clmoe_launch l;
  clmoe_launch_detect(&l);
  if (clmoe_launch_check(&l) != CLMOE_OK) app_fail(APP_EXIT_USAGE, "%s", clmoe_last_error());
  if (o->ep || !l.mpi || l.ranks == 1) return;
  o->ep = -1; /* every rank of the job (train_run: start_ep) */
}

int main(int argc, char **argv)
{
  app_name = "clmoe-train";
  app_flags flags = {.take = APP_FLAGS_ALL, .usage = usage};
  const char *preset = NULL, *config = NULL, *metrics = NULL;
  const char *steps = NULL, *batch = NULL, *seq_len = NULL, *lr = NULL, *seed = NULL, *eval_every = NULL,
             *log_every = NULL, *ckpt_every = NULL, *sample = NULL, *stop_at = NULL, *keep = NULL,
             *precision = NULL;
  int out_given = 0;
  train_opts o = {.out_dir = "clmoe-run", .sample_tokens = 200};
  int count = 0, print = 0;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--preset", &v)) preset = v;
    else if (app_option(argc, argv, &i, "--config", &v)) config = v;
    else if (app_option(argc, argv, &i, "--resume", &v)) o.resume = v;
    else if (app_option(argc, argv, &i, "--data", &v)) o.data = v;
    else if (app_option(argc, argv, &i, "--task", &v)) o.task = v;
    else if (app_option(argc, argv, &i, "--out", &v)) o.out_dir = v, out_given = 1;
    else if (!strcmp(argv[i], "--overwrite")) o.overwrite = 1;
    else if (app_option(argc, argv, &i, "--keep-checkpoints", &v)) keep = v;
    else if (app_option(argc, argv, &i, "--metrics", &v)) metrics = v;
    else if (app_option(argc, argv, &i, "--steps", &v)) steps = v;
    else if (app_option(argc, argv, &i, "--batch", &v)) batch = v;
    else if (app_option(argc, argv, &i, "--seq-len", &v)) seq_len = v;
    else if (app_option(argc, argv, &i, "--lr", &v)) lr = v;
    else if (app_option(argc, argv, &i, "--seed", &v)) seed = v;
    else if (app_option(argc, argv, &i, "--eval-every", &v)) eval_every = v;
    else if (app_option(argc, argv, &i, "--log-every", &v)) log_every = v;
    else if (app_option(argc, argv, &i, "--checkpoint-every", &v)) ckpt_every = v;
    else if (app_option(argc, argv, &i, "--precision", &v)) precision = v;
    else if (app_option(argc, argv, &i, "--sample", &v)) sample = v;
    else if (app_option(argc, argv, &i, "--stop-at", &v)) stop_at = v;
    else if (app_option(argc, argv, &i, "--time-limit", &v)) o.time_limit = parse_real("--time-limit", v, 1e-3, 1e9);
    else if (app_option(argc, argv, &i, "--prompt", &v)) o.prompt = v;
    else if (!strcmp(argv[i], "--count-params")) count = 1;
    else if (!strcmp(argv[i], "--print-config")) print = 1;
    else if (!strcmp(argv[i], "--quiet")) o.quiet = 1;
    else if (!strcmp(argv[i], "--profile")) o.profile = 1;
    else if (app_option(argc, argv, &i, "--ep", &v)) o.ep = (int)app_parse_int("--ep", v, 1, 1 << 20);
    else if (!strcmp(argv[i], "--ep-rebalance")) o.ep_rebalance = 1;
    else app_usage_error("unknown argument '%s'", argv[i]);
  }
  const char *json = flags.json;
  o.device = flags.device;
  const int auto_resume = o.resume && !strcmp(o.resume, "auto");
  const char *given_preset = NULL, *given_config = NULL; /* with --resume auto: the same model? */
  char latest[4096], ckpt_dir[4096];
  if (auto_resume) { /* the run in --out when there is one, else a fresh one */
    o.resume = train_dir_latest(o.out_dir, latest, sizeof latest) ? latest : NULL;
    if (!o.resume && !preset && !config)
      app_usage_error("--resume auto: %s holds no checkpoint, and there is no --preset or --config to start "
                      "a run from", o.out_dir);
    if (o.resume) given_preset = preset, given_config = config, preset = config = NULL;
    /* No checkpoint: nothing resumable is there (a first job killed before its first
     * checkpoint leaves only metrics rows): the run starts again, replacing them. */
    else if (is_dir(o.out_dir)) o.overwrite = 1;
  } else if (o.resume && is_dir(o.resume)) {
    if (!train_dir_latest(o.resume, latest, sizeof latest))
      app_fail(APP_EXIT_USAGE, "--resume %s: the directory holds no checkpoint", o.resume);
    o.resume = latest;
  }
  if (!auto_resume && (preset != NULL) + (config != NULL) + (o.resume != NULL) != 1)
    app_usage_error("give exactly one of --preset NAME, --config FILE and --resume CKPT|DIR|auto");
  if (o.task) train_parse_task("--task", o.task, &o.mqar);
  if (o.task && o.data) app_usage_error("give --data FILE or --task mqar, not both");
  if (o.resume) { /* the run goes on where its checkpoint is, unless --out says elsewhere */
    dir_of(o.resume, ckpt_dir, sizeof ckpt_dir);
    if (!out_given) o.out_dir = ckpt_dir;
  }

  clmoe_config c;
  char *ckpt_data = NULL;
  clmoe_status st = CLMOE_OK;
  o.resume_step = -1;
  if (o.resume) config_of_checkpoint(o.resume, &c, &ckpt_data, &o.resume_step);
  else st = preset ? clmoe_config_preset(preset, &c) : clmoe_config_load(config, &c);
  if (given_preset || given_config) { /* --resume auto found a run: of the model asked for? */
    clmoe_config g;
    st = given_preset ? clmoe_config_preset(given_preset, &g) : clmoe_config_load(given_config, &g);
    if (st == CLMOE_OK && !same_model(&c, &g))
      app_fail(APP_EXIT_USAGE, "--resume auto: %s is a run of another model than %s %s (its config differs "
               "outside [train]); give another --out, or --resume %s without --%s", o.resume,
               given_preset ? "--preset" : "--config", given_preset ? given_preset : given_config, o.out_dir,
               given_preset ? "preset" : "config");
  }
  if (st != CLMOE_OK) {
    fprintf(stderr, "%s: %s\n", app_name, clmoe_last_error());
    return preset ? 2 : 1;
  }
  clmoe_train_config *t = &c.train;
  if (steps) t->steps = app_parse_int("--steps", steps, 1, INT64_MAX / 2);
  if (batch) t->batch = app_parse_int("--batch", batch, 1, 1 << 20);
  if (seq_len) {
    t->seq_len = app_parse_int("--seq-len", seq_len, 2, 1 << 24);
    t->ncurriculum = 0; /* an explicit length replaces the curriculum */
  }
  if (lr) t->lr = parse_real("--lr", lr, 0.0, 10.0);
  if (seed) t->seed = (uint64_t)app_parse_int("--seed", seed, 0, INT64_MAX);
  if (eval_every) t->eval_every = app_parse_int("--eval-every", eval_every, 0, INT64_MAX);
  if (log_every) t->log_every = app_parse_int("--log-every", log_every, 1, INT64_MAX);
  if (ckpt_every) t->checkpoint_every = app_parse_int("--checkpoint-every", ckpt_every, 0, INT64_MAX);
  if (keep) t->keep_checkpoints = app_parse_int("--keep-checkpoints", keep, 0, 1000000000);
  if (precision) {
    int q = CLMOE_PRECISION_AUTO;
    while (q <= CLMOE_PRECISION_BF16 && strcmp(precision, clmoe_precision_name((clmoe_precision)q))) q++;
    if (q > CLMOE_PRECISION_BF16) app_usage_error("--precision: '%s' is not one of bf16, fp32, auto", precision);
    t->precision = q;
  }
  if (sample) o.sample_tokens = app_parse_int("--sample", sample, 0, 1 << 20);
  if (stop_at) o.stop_at = app_parse_int("--stop-at", stop_at, 1, INT64_MAX / 2);
  if (t->min_lr > t->lr) t->min_lr = t->lr;
  if (clmoe_config_validate(&c, preset ? preset : config ? config : o.resume) != CLMOE_OK) {
    fprintf(stderr, "%s: %s\n", app_name, clmoe_last_error());
    return 2;
  }

  if (print && clmoe_config_write(&c, stdout) != 0) app_die(CLMOE_ERR_IO, "writing the config");
  if (count) count_params(&c, json);
  if (count || print) {
    free(ckpt_data);
    return 0;
  }
  if (!o.data && !o.task) { /* a resumed run keeps its data unless told otherwise */
    if (ckpt_data && !strncmp(ckpt_data, "mqar", 4)) {
      o.task = ckpt_data;
      train_parse_task(o.resume, ckpt_data, &o.mqar);
    } else if (ckpt_data) {
      o.data = ckpt_data;
      if (access(o.data, R_OK) != 0)
        app_fail(APP_EXIT_USAGE, "%s: the run's data %s (metadata 'data') cannot be read: %s; give --data FILE "
                 "(the same data, moved: batches are drawn from it by step)", o.resume, o.data, strerror(errno));
    } else {
      app_usage_error("give the training data: --data FILE or --task mqar");
    }
  }
  char data_path[PATH_MAX]; /* stored absolute, so that a resume from anywhere finds it */
  if (o.data && realpath(o.data, data_path)) o.data = data_path;
  /* The run directory: a fresh run (or a resume into a new --out) must not overwrite a run;
   * a resume in its own directory must not rewrite later checkpoints. */
  o.resume_in_place = o.resume && same_dir(ckpt_dir, o.out_dir);
  train_dir_check(o.out_dir, o.resume_in_place ? o.resume_step : -1, o.overwrite);
  char src_metrics[4096 + 16];
  if (o.resume && !o.resume_in_place) {
    snprintf(src_metrics, sizeof src_metrics, "%s/metrics.csv", ckpt_dir);
    o.resume_metrics = src_metrics;
  }
  launch_ranks(&o);
  char mpath[4096];
  if (!metrics) {
    snprintf(mpath, sizeof mpath, "%s/metrics.csv", o.out_dir);
    o.metrics = mpath;
  } else if (strcmp(metrics, "-")) {
    o.metrics = metrics;
  }
  if (o.ep_rebalance && !o.ep) app_usage_error("--ep-rebalance needs --ep N");
  o.argc = &argc, o.argv = &argv;
  int rc = train_run(&c, &o);
  free(ckpt_data);
  return rc;
}
