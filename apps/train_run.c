/* clmoe-train's loop: data, steps, evaluation, progress, metrics, checkpoints (every N
 * steps and on SIGINT/SIGTERM), exact resume, and text samples at the end. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_run.h"

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) { stop_signal = sig; }

typedef struct run {
  clmoe_dist *dist;      /* expert-parallel ranks (--ep), else NULL */
  clmoe_expert_map *map; /* with dist: where the experts live */
  int rank, nranks;      /* 0 and 1 without --ep */
  int64_t share;         /* sequences of a batch on this rank (batch / nranks) */
  double *loads;         /* --ep-rebalance: tokens routed to each expert since the last map */
  int64_t *counts;       /* [experts] one layer's counts of one step */
  clmoe_ctx *ctx;
  clmoe_model *model;
  clmoe_data *data;
  clmoe_config *cfg;
  const train_opts *o;
  int32_t *tokens, *targets;
  FILE *metrics;
  int64_t step; /* steps done */
} run;

static int64_t seq_len_at(const clmoe_train_config *t, int64_t step)
{
  int64_t len = t->seq_len;
  for (int i = 0; i < t->ncurriculum; i++)
    if (step >= t->curriculum_step[i]) len = t->curriculum_len[i];
  return len;
}

static int64_t warmup_of(const clmoe_train_config *t)
{
  return t->warmup_steps >= 0 ? t->warmup_steps : (t->steps + 99) / 100; /* 1% */
}

static void config_text(const clmoe_config *cfg, char **text)
{
  size_t len = 0;
  FILE *f = open_memstream(text, &len);
  if (!f || clmoe_config_write(cfg, f) != 0) app_die(CLMOE_ERR_OUT_OF_MEMORY, "writing the config");
  fclose(f);
}

/* --ep-rebalance: a map that packs the experts by their measured loads (no replicas:
 * training keeps each expert on one rank), if it lowers the busiest rank's load by more than
 * 1%; NULL otherwise. Every rank computes the same map from the same summed counts. */
static clmoe_expert_map *rebalanced_map(run *r)
{
  const int E = r->map->experts, N = r->map->ranks;
  double before, after, *rank_load = malloc((size_t)N * sizeof *rank_load);
  clmoe_expert_map *m = NULL;
  if (!rank_load) app_die(CLMOE_ERR_OUT_OF_MEMORY, "rank loads");
  APP_CHECK(clmoe_expert_map_pack(r->loads, E, N, r->map->slots, &m));
  before = clmoe_expert_map_imbalance(r->map, r->loads, rank_load);
  after = clmoe_expert_map_imbalance(m, r->loads, rank_load);
  free(rank_load);
  if (!(after < before * 0.99)) {
    clmoe_expert_map_destroy(m);
    return NULL;
  }
  if (r->rank == 0) /* (reported like a checkpoint, also under --quiet) */
    fprintf(stderr, "%s: step %lld: experts re-placed by their loads: busiest rank at %.3f x the mean, was %.3f\n",
            app_name, (long long)r->step, after, before);
  memset(r->loads, 0, (size_t)E * sizeof *r->loads);
  return m;
}

/* After a checkpoint written with a new map: the model rebuilt on it and the checkpoint
 * read back (the file holds whole tensors: each rank takes its new experts' rows). */
static void apply_map(run *r, clmoe_expert_map *m, const char *path)
{
  clmoe_model_destroy(r->model);
  r->model = NULL;
  clmoe_expert_map_destroy(r->map);
  r->map = m;
  APP_CHECK(clmoe_model_create_ep(r->ctx, r->cfg, r->dist, r->map, &r->model));
  APP_CHECK(clmoe_params_load_dist(clmoe_model_params(r->model), r->dist, path, NULL));
}

/* Writes the checkpoint; under --ep-rebalance first re-places the experts (the new map goes
 * into the file) and, unless the run ends here, goes on with the new placement. */
static void save(run *r, const char *why, int last)
{
  clmoe_expert_map *next = r->loads ? rebalanced_map(r) : NULL;
  const clmoe_expert_map *write_map = next ? next : r->map;
  char path[4096], val[64];
  snprintf(path, sizeof path, "%s/checkpoint.safetensors", r->o->out_dir);
  clmoe_ckpt_meta meta = {0};
  char *text = NULL;
  config_text(r->cfg, &text);
  snprintf(val, sizeof val, "%lld", (long long)r->step);
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "config", text));
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "step", val));
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "data", r->o->data ? r->o->data : r->o->task));
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "next_batch", val)); /* batches are drawn by (seed, index) */
  free(text);
  if (write_map) { /* where the experts go (the file holds them whole: any rank count resumes) */
    char *m = clmoe_expert_map_to_string(write_map);
    if (!m) app_die(CLMOE_ERR_OUT_OF_MEMORY, "the expert map");
    APP_CHECK(clmoe_ckpt_meta_set(&meta, "expert_map", m));
    free(m);
  }
  /* Ranks on different OpenCL implementations round the optimizer step differently: the
   * file holds rank 0's replicas, and every rank goes on from them. */
  int differed = 0;
  if (r->dist) {
    clmoe_grad_allreduce_opts go = {.no_average = 1};
    APP_CHECK(clmoe_dist_sync_replicas(r->dist, clmoe_model_params(r->model), &go, &differed));
  }
  clmoe_status st = clmoe_params_save_dist(clmoe_model_params(r->model), r->dist, path, &meta);
  clmoe_ckpt_meta_free(&meta);
  if (st != CLMOE_OK) app_die(st, "writing the checkpoint");
  if (r->rank == 0) {
    fprintf(stderr, "%s: checkpoint %s at step %lld (%s)", app_name, path, (long long)r->step, why);
    if (differed)
      fprintf(stderr, "; %d replicated tensors differed between ranks (rounding): rank 0's kept",
              differed);
    fputc('\n', stderr);
  }
  if (next && !last) apply_map(r, next, path);
  else clmoe_expert_map_destroy(next);
}

/* Validation loss and next-token accuracy (argmax) over the scored tokens of eval_batches
 * batches; for the recall task the accuracy is the recall rate (chance: 1 / values). */
static double evaluate(run *r, int64_t T, double *accuracy)
{
  const clmoe_train_config *t = &r->cfg->train;
  const int64_t V = r->cfg->vocab, BT = r->share * T, off = r->rank * BT;
  float *logits = malloc((size_t)(BT * V) * sizeof *logits);
  if (!logits) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  double tot[3] = {0.0, 0.0, 0.0}; /* loss sum, scored, right: summed over the ranks' shares */
  for (int64_t i = 0; i < t->eval_batches; i++) {
    APP_CHECK(clmoe_data_batch(r->data, CLMOE_SPLIT_VAL, t->seed, i, t->batch, T, r->tokens, r->targets));
    double loss;
    int64_t scored;
    const int32_t *tg = r->targets + off;
    APP_CHECK(clmoe_model_forward(r->model, r->share, T, r->tokens + off, tg, 0, &loss, &scored));
    APP_CHECK(clmoe_tensor_read(clmoe_model_logits(r->model), logits, (size_t)(BT * V) * sizeof *logits));
    for (int64_t p = 0; p < BT; p++) {
      if (tg[p] < 0) continue;
      const float *row = logits + p * V;
      int64_t best = 0;
      for (int64_t v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
      tot[2] += best == tg[p];
    }
    tot[0] += loss * (double)scored, tot[1] += (double)scored;
  }
  free(logits);
  if (r->dist) APP_CHECK(clmoe_dist_allreduce_sum_f64(r->dist, tot, 3));
  *accuracy = tot[1] > 0 ? tot[2] / tot[1] : NAN;
  return tot[1] > 0 ? tot[0] / tot[1] : NAN;
}

static void fmt_time(char *buf, size_t len, double s)
{
  if (!(s >= 0) || s > 1e8) snprintf(buf, len, "?");
  else if (s >= 3600) snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
  else snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
}

/* A continuation of a prompt through the inference API (include/clmoe/generate.h: prefill, then one
 * recurrent step per token), sampled at temperature 0.8 with the config's seed. */
static void sample(run *r)
{
  if (r->o->sample_tokens <= 0 || strcmp(clmoe_data_kind(r->data), "bytes")) return;
  if (r->dist) { /* the inference API runs whole MoE layers: one process */
    if (r->rank == 0)
      printf("%s: no sample under --ep; sample the checkpoint with clmoe-generate (one process)\n", app_name);
    return;
  }
  const char *prompt = r->o->prompt && *r->o->prompt ? r->o->prompt : "The "; /* prefill needs a token */
  const int64_t n0 = (int64_t)strlen(prompt), V = r->cfg->vocab;
  int32_t *seq = malloc((size_t)n0 * sizeof *seq);
  float *row = malloc((size_t)V * sizeof *row);
  if (!seq || !row) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  for (int64_t i = 0; i < n0; i++) seq[i] = (unsigned char)prompt[i];
  const clmoe_gen_sampling how = {0, 0.8, 0, 1.0, r->cfg->train.seed};
  clmoe_gen_state *g = NULL;
  APP_CHECK(clmoe_gen_state_create(r->model, 1, NULL, &g));
  const int32_t *toks[1] = {seq};
  APP_CHECK(clmoe_gen_prefill(g, toks, &n0, row, NULL));
  printf("%s: sample after %lld steps (temperature 0.8):\n%s", app_name, (long long)r->step, prompt);
  for (int64_t k = 0; k < r->o->sample_tokens; k++) {
    int32_t next;
    APP_CHECK(clmoe_gen_sample(&how, row, V, 0, k, &next));
    putchar(next >= 32 && next < 127 ? next : next == '\n' ? '\n' : '.');
    fflush(stdout);
    if (k + 1 < r->o->sample_tokens) APP_CHECK(clmoe_gen_step(g, &next, row));
  }
  printf("\n");
  clmoe_gen_state_destroy(g);
  free(seq), free(row);
}

/* The op family of a kernel: its name up to the first '_' ("kda_chunk_fwd" -> "kda"). */
static void family_of(const char *kernel, char *fam, size_t len)
{
  size_t n = strcspn(kernel, "_");
  if (n >= len) n = len - 1;
  memcpy(fam, kernel, n);
  fam[n] = 0;
}

static int by_seconds(const void *a, const void *b)
{
  const double x = ((const clmoe_kernel_time *)a)->seconds, y = ((const clmoe_kernel_time *)b)->seconds;
  return (x < y) - (x > y);
}

/* --profile: device time by family, the top kernels, memory and throughput. */
static void print_profile(clmoe_ctx *ctx, double wall_s, double kernel_s, int64_t tokens)
{
  const clmoe_kernel_time *rows;
  const int n = clmoe_ctx_profile_kernels(ctx, &rows);
  clmoe_pool_stats ps;
  clmoe_ctx_pool_stats(ctx, &ps);
  printf("profile (%s): %lld tokens in %.3f s of steps (%.0f tok/s); device time %.3f s (%.0f%% of the steps)\n",
         clmoe_ctx_caps(ctx)->device_name, (long long)tokens, wall_s, tokens / (wall_s > 0 ? wall_s : 1), kernel_s,
         100.0 * kernel_s / (wall_s > 0 ? wall_s : 1));
  printf("device memory: peak in use %.1f MiB, held by the pool %.1f MiB\n", ps.peak_in_use_bytes / 1048576.0,
         ps.device_bytes / 1048576.0);
  if (n == 0) return;
  clmoe_kernel_time *k = malloc((size_t)n * sizeof *k), *fam = calloc((size_t)n, sizeof *fam);
  if (!k || !fam) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  memcpy(k, rows, (size_t)n * sizeof *k);
  int nf = 0;
  for (int i = 0; i < n; i++) {
    char f[64];
    family_of(k[i].name, f, sizeof f);
    int j = 0;
    while (j < nf && strcmp(fam[j].name, f)) j++;
    if (j == nf) snprintf(fam[nf++].name, sizeof fam[0].name, "%s", f);
    fam[j].seconds += k[i].seconds, fam[j].launches += k[i].launches;
  }
  qsort(fam, (size_t)nf, sizeof *fam, by_seconds);
  qsort(k, (size_t)n, sizeof *k, by_seconds);
  printf("%-28s %10s %7s %10s\n", "family", "seconds", "share", "launches");
  for (int i = 0; i < nf; i++)
    printf("%-28s %10.4f %6.1f%% %10lld\n", fam[i].name, fam[i].seconds, 100.0 * fam[i].seconds / kernel_s,
           (long long)fam[i].launches);
  printf("%-28s %10s %7s %10s %10s\n", "kernel (top 15)", "seconds", "share", "launches", "us/launch");
  for (int i = 0; i < n && i < 15; i++)
    printf("%-28s %10.4f %6.1f%% %10lld %10.1f\n", k[i].name, k[i].seconds, 100.0 * k[i].seconds / kernel_s,
           (long long)k[i].launches, 1e6 * k[i].seconds / (double)k[i].launches);
  free(k), free(fam);
}

/* Under --ep: the mean step split over the ranks (steps after the first two): the expert
 * exchange (dispatch and combine, forward and backward), the gradient all-reduce, and the
 * rest ("compute": kernels, host staging, the loss and flag sums), with the bytes each rank
 * sent to the others per step. Collective. */
static void print_ep_split(run *r, double step_s, int64_t steps, int quiet)
{
  clmoe_dist_stats s;
  clmoe_dist_stats_get(r->dist, &s);
  double v[7] = {step_s, s.dispatch_s, s.combine_s, s.allreduce_s, (double)s.dispatch_bytes,
                 (double)s.combine_bytes, (double)s.allreduce_bytes};
  APP_CHECK(clmoe_dist_allreduce_sum_f64(r->dist, v, 7));
  if (quiet) return;
  const double k = 1.0 / ((double)r->nranks * (double)steps), st = v[0] * k;
  printf("ep split (%d ranks, mean of %lld steps and the ranks): step %.4f s = compute %.4f + dispatch %.4f + "
         "combine %.4f + all-reduce %.4f; sent per rank and step: dispatch %.3f MB, combine %.3f MB, all-reduce "
         "%.3f MB\n", r->nranks, (long long)steps, st, st - (v[1] + v[2] + v[3]) * k, v[1] * k, v[2] * k, v[3] * k,
         v[4] * k / 1e6, v[5] * k / 1e6, v[6] * k / 1e6);
}

void train_parse_task(const char *flag, const char *spec, clmoe_mqar *task)
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

/* A resumed run's metrics file keeps the rows up to the checkpoint's step (a run that went
 * on past its last checkpoint before it died wrote rows that are about to be redone). */
static void metrics_truncate(const char *path, int64_t step)
{
  FILE *f = fopen(path, "r");
  if (!f) return; /* a new file */
  char *keep = NULL, line[1024];
  size_t len = 0;
  FILE *m = open_memstream(&keep, &len);
  if (!m) app_die(CLMOE_ERR_OUT_OF_MEMORY, "open_memstream");
  while (fgets(line, sizeof line, f))
    if (!(line[0] >= '0' && line[0] <= '9') || atoll(line) <= step) fputs(line, m);
  fclose(f);
  fclose(m);
  f = fopen(path, "w");
  if (!f || fwrite(keep, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "%s: cannot rewrite %s: %s\n", app_name, path, strerror(errno));
    exit(1);
  }
  free(keep);
}

/* Releases whatever the run holds (any of it may not exist yet) and returns rc. */
static int run_end(run *r, int rc)
{
  if (r->metrics) fclose(r->metrics);
  free(r->tokens), free(r->targets), free(r->loads), free(r->counts);
  clmoe_model_destroy(r->model);
  clmoe_ctx_destroy(r->ctx);
  clmoe_data_close(r->data);
  clmoe_expert_map_destroy(r->map);
  if (r->dist) app_dist_end();
  return rc;
}

/* --ep N: MPI, this rank's device (and binding, with the per-rank report), the expert map
 * (the checkpoint's when it was written by as many ranks, else the even one: a checkpoint
 * holds whole tensors, so any rank count resumes it) and the expert-parallel model. */
static void start_ep(run *r)
{
  const train_opts *o = r->o;
  r->ctx = app_dist_start(o->device, o->profile, o->quiet ? NULL : stdout, o->argc, o->argv);
  r->dist = app_dist;
  r->rank = clmoe_dist_rank(r->dist), r->nranks = clmoe_dist_size(r->dist);
  if (r->nranks != o->ep) {
    app_fail(2, "--ep %d: the job has %d rank%s (start it as mpirun -np %d clmoe-train --ep %d ...)", o->ep,
             r->nranks, r->nranks == 1 ? "" : "s", o->ep, o->ep);
  }
  const int64_t B = r->cfg->train.batch;
  if (B % r->nranks != 0) {
    app_fail(2, "--batch %lld is not a multiple of --ep %d: every rank trains on an equal share of each batch",
             (long long)B, r->nranks);
  }
  r->share = B / r->nranks;
  const int E = (int)r->cfg->experts;
  if (o->resume) {
    clmoe_st_file *f = NULL;
    APP_CHECK(clmoe_st_open(o->resume, &f));
    const char *text = clmoe_st_metadata(f, "expert_map");
    clmoe_expert_map *m = NULL;
    if (text) APP_CHECK(clmoe_expert_map_parse(text, o->resume, &m));
    if (m && m->ranks == r->nranks && m->experts == E) r->map = m;
    else clmoe_expert_map_destroy(m);
    clmoe_st_close(f);
  }
  if (!r->map) APP_CHECK(clmoe_expert_map_even(E, r->nranks, &r->map));
  if (o->ep_rebalance) {
    r->loads = calloc((size_t)E, sizeof *r->loads);
    r->counts = calloc((size_t)E, sizeof *r->counts);
    if (!r->loads || !r->counts) app_die(CLMOE_ERR_OUT_OF_MEMORY, "expert loads");
  }
  APP_CHECK(clmoe_model_create_ep(r->ctx, r->cfg, r->dist, r->map, &r->model));
}

int train_run(clmoe_config *cfg, const train_opts *o)
{
  run r = {0};
  r.cfg = cfg, r.o = o;
  const clmoe_train_config *t = &cfg->train;
  if (o->data) APP_CHECK(clmoe_data_open(o->data, &r.data));
  else APP_CHECK(clmoe_data_mqar(&o->mqar, &r.data));
  if (clmoe_data_vocab(r.data) > cfg->vocab) {
    fprintf(stderr, "%s: %s: the data's vocabulary (%lld) exceeds the model's ([model] vocab = %lld)\n", app_name,
            o->data ? o->data : o->task, (long long)clmoe_data_vocab(r.data), (long long)cfg->vocab);
    return run_end(&r, 1);
  }
  int64_t maxT = t->seq_len;
  for (int i = 0; i < t->ncurriculum; i++) maxT = t->curriculum_len[i] > maxT ? t->curriculum_len[i] : maxT;
  for (int split = 0; o->data && split < 2; split++) { /* windows must not wrap around */
    const int64_t have = clmoe_data_tokens(r.data, (clmoe_split)split);
    if (have < maxT + 1) {
      fprintf(stderr, "%s: %s: the %s split has %lld tokens, fewer than one sequence of %lld + 1 (use more data or "
              "a shorter --seq-len)\n", app_name, o->data, split ? "validation (last 5%)" : "training",
              (long long)have, (long long)maxT);
      return run_end(&r, 1);
    }
  }
  if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "%s: cannot create %s: %s\n", app_name, o->out_dir, strerror(errno));
    return run_end(&r, 1);
  }
  r.nranks = 1, r.share = t->batch;
  if (o->ep > 0) {
    start_ep(&r);
  } else {
    clmoe_ctx_options copts = {.device = o->device, .profiling = o->profile};
    APP_CHECK(clmoe_ctx_create(&r.ctx, &copts));
    APP_CHECK(clmoe_model_create(r.ctx, cfg, &r.model));
  }
  clmoe_params *ps = clmoe_model_params(r.model);
  if (o->resume) {
    clmoe_ckpt_meta meta = {0};
    APP_CHECK(clmoe_params_load_dist(ps, r.dist, o->resume, &meta));
    const char *s = clmoe_ckpt_meta_get(&meta, "step");
    r.step = s ? atoll(s) : 0;
    clmoe_ckpt_meta_free(&meta);
  } else {
    APP_CHECK(clmoe_model_init(r.model, t->seed));
  }
  r.tokens = malloc((size_t)(t->batch * maxT) * sizeof *r.tokens);
  r.targets = malloc((size_t)(t->batch * maxT) * sizeof *r.targets);
  if (!r.tokens || !r.targets) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  if (o->metrics && r.rank == 0) {
    if (r.step) metrics_truncate(o->metrics, r.step);
    r.metrics = fopen(o->metrics, r.step ? "a" : "w");
    if (!r.metrics) {
      fprintf(stderr, "%s: cannot write %s: %s\n", app_name, o->metrics, strerror(errno));
      return run_end(&r, 1);
    }
    if (!r.step) fprintf(r.metrics, "step,loss,val_loss,val_accuracy,lr,grad_norm,tokens_per_s,moe_max_over_mean,moe_empty,seq_len\n");
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  const int tty = isatty(STDERR_FILENO);
  const int quiet = o->quiet || r.rank != 0; /* one rank reports */
  int64_t nparams = clmoe_params_count(ps);
  if (r.dist) { /* every rank's experts once */
    int64_t mine = 0, all;
    for (int i = 0; i < ps->n; i++)
      if (ps->p[i].rows) mine += clmoe_tensor_numel(ps->p[i].value);
    all = mine;
    APP_CHECK(clmoe_dist_allreduce_sum_i64(r.dist, &all, 1));
    nparams += all - mine;
  }
  if (!quiet) {
    fprintf(stderr, "%s: %s, %lld parameters, %s data (%s), %lld steps of %lld x %lld tokens on %s\n", app_name,
            cfg->name, (long long)nparams, clmoe_data_kind(r.data), o->data ? o->data : "mqar",
            (long long)t->steps, (long long)t->batch, (long long)t->seq_len, clmoe_ctx_caps(r.ctx)->device_name);
    if (r.dist)
      fprintf(stderr, "%s: expert parallelism over %d ranks: %lld sequences of each batch per rank, %d expert "
              "slots per rank (rank 0's device shown)\n", app_name, r.nranks,
              (long long)r.share, r.map->slots);
  }
  const double start = app_now();
  double train_s = 0.0; /* step time alone, for tokens/s (evaluation and checkpoints excluded) */
  const int64_t first = r.step;
  int64_t tokens_done = 0;
  double loss = NAN, val = NAN, acc = NAN, norm = NAN;
  double prof_s = 0.0, prof_kernel_s = 0.0, ep_s = 0.0; /* ep_: steps after the first two */
  int64_t ep_steps = 0;
  int64_t prof_tokens = 0;
  const int64_t end = o->stop_at > 0 && o->stop_at < t->steps ? o->stop_at : t->steps;
  int timed_out = 0;
  double last_log = start;
  while (r.step < end && !stop_signal && !timed_out) {
    const int64_t T = seq_len_at(t, r.step);
    const double t0 = app_now();
    APP_CHECK(clmoe_data_batch(r.data, CLMOE_SPLIT_TRAIN, t->seed, r.step, t->batch, T, r.tokens, r.targets));
    clmoe_adamw hp = {(float)clmoe_lr_at(t->lr, t->min_lr, warmup_of(t), t->steps, r.step), (float)t->beta1,
                      (float)t->beta2, (float)t->adam_eps, (float)t->weight_decay, 1.0f, 0};
    int64_t scored;
    const int profiled = o->profile && r.step - first >= 2; /* skip warm-up (kernel builds) */
    if (r.dist && r.step - first == 2) clmoe_dist_stats_reset(r.dist), ep_s = 0.0, ep_steps = 0;
    if (profiled) APP_CHECK(clmoe_ctx_profile_begin(r.ctx));
    APP_CHECK(clmoe_params_zero_grad(ps));
    const int64_t off = r.rank * r.share * T; /* this rank's sequences of the batch */
    APP_CHECK(clmoe_model_forward(r.model, r.share, T, r.tokens + off, r.targets + off, 1, &loss, &scored));
    if (r.dist) { /* the batch's mean loss; every rank's gradient scaled to it */
      double sums[2] = {loss * (double)scored, (double)scored};
      APP_CHECK(clmoe_dist_allreduce_sum_f64(r.dist, sums, 2));
      loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0, scored = (int64_t)sums[1];
      clmoe_model_set_loss_count(r.model, scored);
    }
    clmoe_moe_load load = {0};
    int nmoe = clmoe_model_moe_layers(r.model);
    double worst = 0.0;
    int64_t empty = 0;
    for (int i = 0; i < nmoe; i++) { /* the most unbalanced MoE layer */
      APP_CHECK(clmoe_model_moe_load_counts(r.model, i, &load, r.counts));
      for (int64_t e = 0; r.loads && e < cfg->experts; e++) r.loads[e] += (double)r.counts[e];
      if (load.max_over_mean > worst) worst = load.max_over_mean, empty = load.empty;
    }
    APP_CHECK(clmoe_model_balance_update(r.model));
    APP_CHECK(clmoe_model_backward(r.model));
    if (r.dist) { /* the dense gradients summed over the ranks (in rank order: deterministic) */
      clmoe_grad_allreduce_opts go = {.no_average = 1};
      clmoe_grad_allreduce_stats gs;
      const double a0 = app_now();
      APP_CHECK(clmoe_dist_allreduce_grads(r.dist, ps, &go, &gs));
      clmoe_dist_stats_add_allreduce(r.dist, app_now() - a0, gs.bytes_sent);
    }
    clmoe_status st = clmoe_params_adamw_dist(ps, r.dist, &hp, t->clip, &norm);
    if (st != CLMOE_OK) {
      fprintf(stderr, "\n%s: step %lld: %s (loss %g): stopping; the last checkpoint is kept\n", app_name,
              (long long)r.step, clmoe_last_error(), loss);
      return run_end(&r, 1);
    }
    if (profiled) {
      double ks;
      APP_CHECK(clmoe_ctx_profile_end(r.ctx, &ks, NULL));
      prof_s += app_now() - t0, prof_kernel_s += ks, prof_tokens += t->batch * T;
    }
    r.step++;
    tokens_done += t->batch * T;
    train_s += app_now() - t0;
    ep_s += app_now() - t0, ep_steps++;
    timed_out = o->time_limit > 0 && app_now() - start >= o->time_limit && r.step < end;
    if (r.dist) { /* every rank stops after the same step (signals and clocks differ) */
      int64_t flags[2] = {stop_signal != 0, timed_out};
      APP_CHECK(clmoe_dist_allreduce_sum_i64(r.dist, flags, 2));
      if (flags[0] && !stop_signal) stop_signal = SIGTERM;
      timed_out = flags[1] > 0;
    }
    const int last = r.step == end || timed_out;
    const int evaluated = t->eval_every > 0 && (r.step % t->eval_every == 0 || r.step == t->steps || timed_out);
    if (evaluated) val = evaluate(&r, T, &acc);
    char vs[64] = ",", vp[64] = "-";
    if (!isnan(val)) { /* the CSV has val_loss and val_accuracy on evaluation steps only */
      if (evaluated) snprintf(vs, sizeof vs, "%.6f,%.4f", val, acc);
      snprintf(vp, sizeof vp, "%.4f (acc %.3f)", val, acc);
    }
    if (r.metrics)
      fprintf(r.metrics, "%lld,%.6f,%s,%.6g,%.6g,%.1f,%.4f,%lld,%lld\n", (long long)r.step, loss, vs, hp.lr, norm,
              (double)tokens_done / train_s, worst, (long long)empty, (long long)T);
    /* a line every log_every steps, and at least every 10 s on slow devices */
    if (!quiet && (r.step % t->log_every == 0 || last || app_now() - last_log >= 10.0)) {
      last_log = app_now();
      const double el = app_now() - start;
      char e[32], eta[32];
      fmt_time(e, sizeof e, el);
      fmt_time(eta, sizeof eta, el / (double)(r.step - first) * (double)(end - r.step));
      fprintf(stderr, "%sstep %6lld/%lld  loss %.4f  val %s  %.0f tok/s  lr %.2e  |g| %.3f  moe max/mean %.2f  %s ETA %s%s",
              tty ? "\r" : "", (long long)r.step, (long long)t->steps, loss, vp, (double)tokens_done / train_s, hp.lr, norm,
              worst, e, eta, tty ? "   " : "\n");
    }
    if (t->checkpoint_every > 0 && r.step % t->checkpoint_every == 0 && !timed_out) {
      save(&r, "interval", r.step == end);
      ps = clmoe_model_params(r.model); /* (a new model after re-placing the experts) */
    }
  }
  if (!quiet && tty) fprintf(stderr, "\n");
  if (o->profile && r.rank == 0) print_profile(r.ctx, prof_s, prof_kernel_s, prof_tokens);
  if (r.dist && ep_steps > 0) print_ep_split(&r, ep_s, ep_steps, quiet);
  save(&r, stop_signal ? "interrupted" : timed_out ? "--time-limit" : r.step < t->steps ? "--stop-at" : "end", 1);
  FILE *metrics = r.metrics;
  r.metrics = NULL;
  if (metrics && fclose(metrics) != 0) {
    fprintf(stderr, "%s: writing %s: %s\n", app_name, o->metrics, strerror(errno));
    return run_end(&r, 1);
  }
  if (!stop_signal) sample(&r);
  return run_end(&r, stop_signal ? 130 : 0);
}
