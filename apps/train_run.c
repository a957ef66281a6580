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

static void save(run *r, const char *why)
{
  char path[4096], val[64];
  snprintf(path, sizeof path, "%s/checkpoint.safetensors", r->o->out_dir);
  clmoe_ckpt_meta meta = {0};
  char *text = NULL;
  config_text(r->cfg, &text);
  snprintf(val, sizeof val, "%lld", (long long)r->step);
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "config", text));
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "step", val));
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "data", r->o->data ? r->o->data : "mqar"));
  APP_CHECK(clmoe_ckpt_meta_set(&meta, "next_batch", val)); /* batches are drawn by (seed, index) */
  free(text);
  clmoe_status st = clmoe_params_save(clmoe_model_params(r->model), path, &meta);
  clmoe_ckpt_meta_free(&meta);
  if (st != CLMOE_OK) app_die(st, "writing the checkpoint");
  if (!r->o->quiet) fprintf(stderr, "%s: checkpoint %s at step %lld (%s)\n", app_name, path, (long long)r->step, why);
}

/* Validation loss and next-token accuracy (argmax) over the scored tokens of eval_batches
 * batches; for the recall task the accuracy is the recall rate (chance: 1 / values). */
static double evaluate(run *r, int64_t T, double *accuracy)
{
  const clmoe_train_config *t = &r->cfg->train;
  const int64_t V = r->cfg->vocab, BT = t->batch * T;
  float *logits = malloc((size_t)(BT * V) * sizeof *logits);
  if (!logits) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  double sum = 0.0;
  int64_t n = 0, right = 0;
  for (int64_t i = 0; i < t->eval_batches; i++) {
    APP_CHECK(clmoe_data_batch(r->data, CLMOE_SPLIT_VAL, t->seed, i, t->batch, T, r->tokens, r->targets));
    double loss;
    int64_t scored;
    APP_CHECK(clmoe_model_forward(r->model, t->batch, T, r->tokens, r->targets, 0, &loss, &scored));
    APP_CHECK(clmoe_tensor_read(clmoe_model_logits(r->model), logits, (size_t)(BT * V) * sizeof *logits));
    for (int64_t p = 0; p < BT; p++) {
      if (r->targets[p] < 0) continue;
      const float *row = logits + p * V;
      int64_t best = 0;
      for (int64_t v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
      right += best == r->targets[p];
    }
    sum += loss * (double)scored, n += scored;
  }
  free(logits);
  *accuracy = n ? (double)right / (double)n : NAN;
  return n ? sum / (double)n : NAN;
}

static void fmt_time(char *buf, size_t len, double s)
{
  if (!(s >= 0) || s > 1e8) snprintf(buf, len, "?");
  else if (s >= 3600) snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
  else snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
}

/* Greedy continuation of a prompt with full forwards (clmoe-generate does this properly,
 * with KDA states and the MLA cache). */
static void sample(run *r)
{
  if (r->o->sample_tokens <= 0 || strcmp(clmoe_data_kind(r->data), "bytes")) return;
  const char *prompt = r->o->prompt ? r->o->prompt : "The ";
  const int64_t n0 = (int64_t)strlen(prompt), n = n0 + r->o->sample_tokens, V = r->cfg->vocab;
  int32_t *seq = malloc((size_t)n * sizeof *seq);
  float *row = malloc((size_t)V * sizeof *row);
  if (!seq || !row) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  for (int64_t i = 0; i < n0; i++) seq[i] = (unsigned char)prompt[i];
  printf("%s: sample after %lld steps:\n%s", app_name, (long long)r->step, prompt);
  for (int64_t len = n0; len < n; len++) {
    APP_CHECK(clmoe_model_forward(r->model, 1, len, seq, NULL, 0, NULL, NULL));
    clmoe_tensor last;
    APP_CHECK(clmoe_tensor_view(clmoe_model_logits(r->model), &last, 1, &V, (len - 1) * V));
    APP_CHECK(clmoe_tensor_read(&last, row, (size_t)V * sizeof *row));
    int32_t best = 0;
    for (int64_t v = 1; v < V; v++)
      if (row[v] > row[best]) best = (int32_t)v;
    seq[len] = best;
    putchar(best >= 32 && best < 127 ? best : best == '\n' ? '\n' : '.');
    fflush(stdout);
  }
  printf("\n");
  free(seq), free(row);
}

int train_run(clmoe_config *cfg, const train_opts *o)
{
  run r = {0};
  r.cfg = cfg, r.o = o;
  const clmoe_train_config *t = &cfg->train;
  if (o->data) APP_CHECK(clmoe_data_open(o->data, &r.data));
  else {
    clmoe_mqar task = {64, 64, 16, 8};
    APP_CHECK(clmoe_data_mqar(&task, &r.data));
  }
  if (clmoe_data_vocab(r.data) > cfg->vocab)
    app_usage_error("the data's vocabulary (%lld) exceeds the model's ([model] vocab = %lld)",
                    (long long)clmoe_data_vocab(r.data), (long long)cfg->vocab);
  if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "%s: cannot create %s: %s\n", app_name, o->out_dir, strerror(errno));
    return 1;
  }
  clmoe_ctx_options copts = {.device = o->device};
  APP_CHECK(clmoe_ctx_create(&r.ctx, &copts));
  APP_CHECK(clmoe_model_create(r.ctx, cfg, &r.model));
  clmoe_params *ps = clmoe_model_params(r.model);
  if (o->resume) {
    clmoe_ckpt_meta meta = {0};
    APP_CHECK(clmoe_params_load(ps, o->resume, &meta));
    const char *s = clmoe_ckpt_meta_get(&meta, "step");
    r.step = s ? atoll(s) : 0;
    clmoe_ckpt_meta_free(&meta);
  } else {
    APP_CHECK(clmoe_model_init(r.model, t->seed));
  }
  int64_t maxT = t->seq_len;
  for (int i = 0; i < t->ncurriculum; i++) maxT = t->curriculum_len[i] > maxT ? t->curriculum_len[i] : maxT;
  r.tokens = malloc((size_t)(t->batch * maxT) * sizeof *r.tokens);
  r.targets = malloc((size_t)(t->batch * maxT) * sizeof *r.targets);
  if (!r.tokens || !r.targets) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  if (o->metrics) {
    r.metrics = fopen(o->metrics, r.step ? "a" : "w");
    if (!r.metrics) {
      fprintf(stderr, "%s: cannot write %s: %s\n", app_name, o->metrics, strerror(errno));
      return 1;
    }
    if (!r.step) fprintf(r.metrics, "step,loss,val_loss,val_accuracy,lr,grad_norm,tokens_per_s,moe_max_over_mean,moe_empty\n");
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  const int tty = isatty(STDERR_FILENO);
  if (!o->quiet)
    fprintf(stderr, "%s: %s, %lld parameters, %s data (%s), %lld steps of %lld x %lld tokens on %s\n", app_name,
            cfg->name, (long long)clmoe_params_count(ps), clmoe_data_kind(r.data), o->data ? o->data : "mqar",
            (long long)t->steps, (long long)t->batch, (long long)t->seq_len, clmoe_ctx_caps(r.ctx)->device_name);
  const double start = app_now();
  double train_s = 0.0; /* step time alone, for tokens/s (evaluation and checkpoints excluded) */
  const int64_t first = r.step;
  int64_t tokens_done = 0;
  double loss = NAN, val = NAN, acc = NAN, norm = NAN;
  while (r.step < t->steps && !stop_signal) {
    const int64_t T = seq_len_at(t, r.step);
    const double t0 = app_now();
    APP_CHECK(clmoe_data_batch(r.data, CLMOE_SPLIT_TRAIN, t->seed, r.step, t->batch, T, r.tokens, r.targets));
    clmoe_adamw hp = {(float)clmoe_lr_at(t->lr, t->min_lr, warmup_of(t), t->steps, r.step), (float)t->beta1,
                      (float)t->beta2, (float)t->adam_eps, (float)t->weight_decay, 1.0f, 0};
    int64_t scored;
    APP_CHECK(clmoe_params_zero_grad(ps));
    APP_CHECK(clmoe_model_forward(r.model, t->batch, T, r.tokens, r.targets, 1, &loss, &scored));
    clmoe_moe_load load = {0};
    int nmoe = clmoe_model_moe_layers(r.model);
    double worst = 0.0;
    int64_t empty = 0;
    for (int i = 0; i < nmoe; i++) { /* the most unbalanced MoE layer */
      APP_CHECK(clmoe_model_moe_load(r.model, i, &load));
      if (load.max_over_mean > worst) worst = load.max_over_mean, empty = load.empty;
    }
    APP_CHECK(clmoe_model_balance_update(r.model));
    APP_CHECK(clmoe_model_backward(r.model));
    clmoe_status st = clmoe_params_adamw(ps, &hp, t->clip, &norm);
    if (st != CLMOE_OK) {
      fprintf(stderr, "\n%s: step %lld: %s (loss %g): stopping; the last checkpoint is kept\n", app_name,
              (long long)r.step, clmoe_last_error(), loss);
      return 1;
    }
    r.step++;
    tokens_done += t->batch * T;
    train_s += app_now() - t0;
    const int last = r.step == t->steps;
    if (t->eval_every > 0 && (r.step % t->eval_every == 0 || last)) val = evaluate(&r, T, &acc);
    if (r.metrics)
      fprintf(r.metrics, "%lld,%.6f,%.6f,%.4f,%.6g,%.6g,%.1f,%.4f,%lld\n", (long long)r.step, loss, val, acc, hp.lr, norm,
              (double)tokens_done / train_s, worst, (long long)empty);
    if (!o->quiet && (r.step % t->log_every == 0 || last)) {
      const double el = app_now() - start;
      char e[32], eta[32];
      fmt_time(e, sizeof e, el);
      fmt_time(eta, sizeof eta, el / (double)(r.step - first) * (double)(t->steps - r.step));
      fprintf(stderr, "%sstep %6lld/%lld  loss %.4f  val %.4f (acc %.3f)  %.0f tok/s  lr %.2e  |g| %.3f  moe max/mean %.2f  %s ETA %s%s",
              tty ? "\r" : "", (long long)r.step, (long long)t->steps, loss, val, acc, (double)tokens_done / train_s, hp.lr, norm,
              worst, e, eta, tty ? "   " : "\n");
    }
    if (t->checkpoint_every > 0 && r.step % t->checkpoint_every == 0) save(&r, "interval");
  }
  if (!o->quiet && tty) fprintf(stderr, "\n");
  save(&r, stop_signal ? "interrupted" : "end");
  if (r.metrics) fclose(r.metrics);
  if (!stop_signal) sample(&r);
  free(r.tokens), free(r.targets);
  clmoe_model_destroy(r.model);
  clmoe_ctx_destroy(r.ctx);
  clmoe_data_close(r.data);
  return stop_signal ? 130 : 0;
}
