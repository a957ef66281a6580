/* clmoe-train's reports (train_run.h): the first lines, a progress line and a metrics CSV
 * row per step, the kernel profile and the expert-parallel split at the end, and a text
 * sample after training. Only rank 0 writes, but the collectives run on every rank. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_run.h"

static const char metrics_header[] =
    "step,loss,val_loss,val_accuracy,lr,grad_norm,tokens_per_s,moe_max_over_mean,moe_empty,seq_len\n";

/* The step of a metrics row: its first field, digits only, then a comma; -1 when the line
 * is not a row (the header, a torn or edited line). */
static int64_t row_step(const char *line)
{
  int64_t v = 0;
  const char *c = line;
  for (; *c >= '0' && *c <= '9'; c++) {
    if (v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (*c - '0');
  }
  return c > line && *c == ',' ? v : -1;
}

/* A resumed run's metrics file keeps its header and the rows up to the checkpoint's step,
 * by whole lines: rows a run wrote after its last checkpoint are about to be redone, and a
 * line a kill cut short (no newline) is dropped. The file is rewritten through a temporary
 * file (fsynced, renamed), so that a kill during the rewrite leaves the old one whole. A
 * missing or empty file starts with the header. A run resumed into a new directory starts
 * its file from the one of the checkpoint's directory (src) the same way. */
static int metrics_truncate(const char *src, const char *path, int64_t step)
{
  FILE *f = fopen(src, "r");
  if (!f && errno == ENOENT) return 0; /* a new file: opened with its header */
  if (!f) {
    fprintf(stderr, "%s: cannot read %s: %s\n", app_name, src, strerror(errno));
    return 1;
  }
  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
    fclose(f);
    fprintf(stderr, "%s: --metrics path too long: %s\n", app_name, path);
    return 1;
  }
  FILE *out = fopen(tmp, "w");
  if (!out) {
    fprintf(stderr, "%s: cannot write %s: %s\n", app_name, tmp, strerror(errno));
    fclose(f);
    return 1;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int64_t last = -1, dropped = 0;
  fputs(metrics_header, out);
  while ((n = getline(&line, &cap, f)) > 0) {
    if (!strcmp(line, metrics_header)) continue;
    const int64_t s = row_step(line);
    /* whole rows in step order up to the checkpoint */
    if (line[n - 1] == '\n' && s >= 0 && s <= step && s > last) {
      fputs(line, out);
      last = s;
    } else
      dropped++;
  }
  const int read_err = ferror(f);
  free(line);
  fclose(f);
  if (read_err || fflush(out) != 0 || fsync(fileno(out)) != 0 || fclose(out) != 0 ||
      rename(tmp, path) != 0) {
    fprintf(stderr, "%s: cannot rewrite %s: %s\n", app_name, path, strerror(errno));
    unlink(tmp);
    return 1;
  }
  if (dropped)
    fprintf(stderr, "%s: %s: kept the rows up to step %lld, dropped %lld line(s) after it or cut short\n",
            app_name, src, (long long)step, (long long)dropped);
  return 0;
}

int train_metrics_open(run *r)
{
  const train_opts *o = r->o;
  if (!o->metrics || r->rank != 0) return 0;
  const char *src = o->resume_metrics && strcmp(o->resume_metrics, o->metrics) ? o->resume_metrics : o->metrics;
  if (r->step && metrics_truncate(src, o->metrics, r->step)) return 1;
  r->metrics = fopen(o->metrics, r->step ? "a" : "w");
  if (!r->metrics) {
    fprintf(stderr, "%s: cannot write %s: %s\n", app_name, o->metrics, strerror(errno));
    return 1;
  }
  /* appending to a resumed file that had none (it did not exist) */
  if (!r->step || ftell(r->metrics) == 0) fputs(metrics_header, r->metrics);
  if (fflush(r->metrics) != 0) {
    fprintf(stderr, "%s: writing %s: %s\n", app_name, o->metrics, strerror(errno));
    return 1;
  }
  return 0;
}

int train_metrics_sync(run *r)
{
  if (!r->metrics) return 0;
  if (fflush(r->metrics) != 0 || fsync(fileno(r->metrics)) != 0) {
    fprintf(stderr, "%s: writing %s: %s\n", app_name, r->o->metrics, strerror(errno));
    return 1;
  }
  return 0;
}

/* (collective under --ep: the parameters are counted over the ranks) */
void train_announce(run *r)
{
  const clmoe_config *cfg = r->cfg;
  const clmoe_train_config *t = &cfg->train;
  const train_opts *o = r->o;
  clmoe_params *ps = clmoe_model_params(r->model);
  int64_t nparams = clmoe_params_count(ps);
  if (r->dist) { /* every rank's experts once */
    int64_t mine = 0, all;
    for (int i = 0; i < ps->n; i++)
      if (ps->p[i].rows) mine += clmoe_tensor_numel(ps->p[i].value);
    all = mine;
    APP_CHECK(clmoe_dist_allreduce_sum_i64(r->dist, &all, 1));
    nparams += all - mine;
  }
  if (r->quiet) return;
  fprintf(stderr, "%s: %s, %lld parameters, %s data (%s), %lld steps of %lld x %lld tokens on %s\n", app_name,
          cfg->name, (long long)nparams, clmoe_data_kind(r->data), o->data ? o->data : "mqar",
          (long long)t->steps, (long long)t->batch, (long long)t->seq_len, clmoe_ctx_caps(r->ctx)->device_name);
  const clmoe_precision prec = clmoe_model_precision(r->model);
  fprintf(stderr, "%s: precision %s%s%s\n", app_name, clmoe_precision_name(prec),
          t->precision == CLMOE_PRECISION_AUTO ? " (auto: " : "",
          t->precision != CLMOE_PRECISION_AUTO ? ""
          : prec == CLMOE_PRECISION_BF16 ? "the device has a matrix unit)" : "no matrix unit on the device)");
  if (r->dist)
    fprintf(stderr, "%s: expert parallelism over %d ranks: %lld sequences of each batch per rank, %d expert "
            "slots per rank (rank 0's device shown)\n", app_name, r->nranks,
            (long long)r->share, r->map->slots);
}

static void fmt_time(char *buf, size_t len, double s)
{
  if (!(s >= 0) || s > 1e8) snprintf(buf, len, "?");
  else if (s >= 3600) snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
  else snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
}

void train_report_step(run *r, const train_step *s, int evaluated, int last)
{
  const clmoe_train_config *t = &r->cfg->train;
  char vs[64] = ",", vp[64] = "-";
  if (!isnan(r->val)) { /* the CSV has val_loss and val_accuracy on evaluation steps only */
    if (evaluated) snprintf(vs, sizeof vs, "%.6f,%.4f", r->val, r->acc);
    snprintf(vp, sizeof vp, "%.4f (acc %.3f)", r->val, r->acc);
  }
  if (r->metrics) { /* each row flushed: a kill loses no finished row */
    fprintf(r->metrics, "%lld,%.6f,%s,%.6g,%.6g,%.1f,%.4f,%lld,%lld\n", (long long)r->step, s->loss, vs, s->lr,
            s->norm, (double)r->tokens_done / r->train_s, s->worst, (long long)s->empty, (long long)s->T);
    if (fflush(r->metrics) != 0) {
      fprintf(stderr, "%s: writing %s: %s\n", app_name, r->o->metrics, strerror(errno));
      app_die(CLMOE_ERR_IO, "the metrics row");
    }
  }
  /* a line every log_every steps, and at least every 10 s on slow devices */
  if (!r->quiet && (r->step % t->log_every == 0 || last || app_now() - r->last_log >= 10.0)) {
    r->last_log = app_now();
    const double el = app_now() - r->start;
    char e[32], eta[32];
    fmt_time(e, sizeof e, el);
    fmt_time(eta, sizeof eta, el / (double)(r->step - r->first) * (double)(r->end - r->step));
    fprintf(stderr, "%sstep %6lld/%lld  loss %.4f  val %s  %.0f tok/s  lr %.2e  |g| %.3f  moe max/mean %.2f  %s ETA %s%s",
            r->tty ? "\r" : "", (long long)r->step, (long long)t->steps, s->loss, vp, (double)r->tokens_done / r->train_s,
            s->lr, s->norm, s->worst, e, eta, r->tty ? "   " : "\n");
  }
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

/* --profile: device time by family, the top kernels, memory, throughput and host waits. */
void train_print_profile(run *r)
{
  clmoe_ctx *ctx = r->ctx;
  const double wall_s = r->prof_s, kernel_s = r->prof_kernel_s;
  const int64_t tokens = r->prof_tokens, steps = r->prof_steps;
  const clmoe_kernel_time *rows;
  const int n = clmoe_ctx_profile_kernels(ctx, &rows);
  clmoe_pool_stats ps;
  clmoe_ctx_pool_stats(ctx, &ps);
  printf("profile (%s): %lld tokens in %.3f s of steps (%.0f tok/s); device time %.3f s (%.0f%% of the steps)\n",
         clmoe_ctx_caps(ctx)->device_name, (long long)tokens, wall_s, tokens / (wall_s > 0 ? wall_s : 1), kernel_s,
         100.0 * kernel_s / (wall_s > 0 ? wall_s : 1));
  if (steps > 0) { /* each a round trip the device waits out while the host catches up */
    const clmoe_ctx_counters *w = &r->prof_waits;
    const double k = 1.0 / (double)steps;
    printf("host waits per step (mean of %lld steps): %.2f blocking reads, %.2f blocking writes, %.2f finishes; "
           "%.0f launches\n", (long long)steps, (double)w->blocking_reads * k, (double)w->blocking_writes * k,
           (double)w->finishes * k, (double)w->launches * k);
  }
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
void train_print_ep_split(run *r, double step_s, int64_t steps, int quiet)
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

/* A continuation of a prompt through the inference API (include/clmoe/generate.h: prefill, then one
 * recurrent step per token), sampled at temperature 0.8 with the config's seed. */
void train_sample(run *r)
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
