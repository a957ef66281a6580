/* clmoe-train's loop (train_run.h): setup (data, device, model, resume), the steps,
 * evaluation, and the end of the run; checkpoints every N steps and on SIGINT/SIGTERM
 * (train_ckpt.c), exact resume, progress, metrics and text samples (train_report.c). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_run.h"

/* SIGINT and SIGTERM ask for a checkpoint and a stop after the current step. They are
 * blocked in every thread (the mask is set before any OpenCL or MPI call, so the drivers'
 * threads inherit it) and taken by one thread with sigwait: a handler would run inside
 * whichever thread the signal hits, and the compilers inside OpenCL drivers install their
 * own (LLVM's deletes its temporary files and then calls ours), so a signal during a kernel
 * build failed the build and lost the run. A second signal of a kind ends the process at
 * once, by that signal. */
static _Atomic int stop_signal;

static void *signal_waiter(void *arg)
{
  const sigset_t *set = arg;
  for (;;) {
    int sig = 0;
    if (sigwait(set, &sig) != 0) continue;
    if (atomic_load(&stop_signal) == sig) { /* the second: die by it */
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      signal(sig, SIG_DFL);
      pthread_sigmask(SIG_UNBLOCK, &one, NULL);
      raise(sig);
    }
    atomic_store(&stop_signal, sig);
  }
  return NULL;
}

static void catch_stop_signals(void)
{
  static sigset_t set;
  pthread_t waiter;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int err = pthread_sigmask(SIG_BLOCK, &set, NULL);
  if (!err) err = pthread_create(&waiter, NULL, signal_waiter, &set);
  if (!err) err = pthread_detach(waiter);
  if (err) {
    fprintf(stderr, "%s: cannot set up the signal handling: %s\n", app_name, strerror(err));
    exit(1);
  }
}

/* The sequence length at a step (the curriculum's, else the config's). */
static int64_t seq_len_at(const clmoe_train_config *t, int64_t step)
{
  int64_t len = t->seq_len;
  for (int i = 0; i < t->ncurriculum; i++)
    if (step >= t->curriculum_step[i]) len = t->curriculum_len[i];
  return len;
}

/* The learning rate's warm-up steps: the config's, else 1% of the run. */
static int64_t warmup_of(const clmoe_train_config *t)
{
  return t->warmup_steps >= 0 ? t->warmup_steps : (t->steps + 99) / 100; /* 1% */
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

/* ---- setup ---------------------------------------------------------------------------- */

/* The longest sequence of the run (its curriculum's). */
static int64_t max_seq_len(const clmoe_train_config *t)
{
  int64_t maxT = t->seq_len;
  for (int i = 0; i < t->ncurriculum; i++) maxT = t->curriculum_len[i] > maxT ? t->curriculum_len[i] : maxT;
  return maxT;
}

/* The training data, checked against the model's vocabulary and the longest sequence;
 * returns 0, or 1 after a message. */
static int open_data(run *r)
{
  const train_opts *o = r->o;
  const clmoe_config *cfg = r->cfg;
  if (o->data) APP_CHECK(clmoe_data_open(o->data, &r->data));
  else APP_CHECK(clmoe_data_mqar(&o->mqar, &r->data));
  if (clmoe_data_vocab(r->data) > cfg->vocab) {
    fprintf(stderr, "%s: %s: the data's vocabulary (%lld) exceeds the model's ([model] vocab = %lld)\n", app_name,
            o->data ? o->data : o->task, (long long)clmoe_data_vocab(r->data), (long long)cfg->vocab);
    return 1;
  }
  const int64_t maxT = max_seq_len(&cfg->train);
  for (int split = 0; o->data && split < 2; split++) { /* windows must not wrap around */
    const int64_t have = clmoe_data_tokens(r->data, (clmoe_split)split);
    if (have < maxT + 1) {
      fprintf(stderr, "%s: %s: the %s split has %lld tokens, fewer than one sequence of %lld + 1 (use more data or "
              "a shorter --seq-len)\n", app_name, o->data, split ? "validation (last 5%)" : "training",
              (long long)have, (long long)maxT);
      return 1;
    }
  }
  return 0;
}

/* The run directory for this run (rank 0): its lock, and what --overwrite discards. */
static void claim_dir(run *r)
{
  train_dir_lock(r->o->out_dir);
  train_dir_claim(r->o->out_dir, r->o->resume_in_place ? r->o->resume_step : -1, r->o->overwrite);
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
  if (o->ep < 0 && r->rank == 0) /* several ranks without --ep */
    fprintf(stderr, "%s: %d ranks without --ep: expert and data parallelism over all of them (as --ep %d)\n",
            app_name, r->nranks, r->nranks);
  if (o->ep > 0 && r->nranks != o->ep) {
    app_fail(2, "--ep %d: the job has %d rank%s (start it as mpirun -np %d clmoe-train --ep %d ...)", o->ep,
             r->nranks, r->nranks == 1 ? "" : "s", o->ep, o->ep);
  }
  if (r->rank == 0) claim_dir(r);
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

/* Where a resumed run goes on: the checkpoint's "step", strictly (a whole integer, equal to
 * the optimizer steps taken since every step takes one, and "next_batch" since batches are
 * drawn by step, not past the run's end); exits with a message naming the file and entry. */
static void resume_position(run *r, const clmoe_ckpt_meta *meta)
{
  const char *path = r->o->resume;
  const int64_t taken = clmoe_model_params(r->model)->step, steps = r->cfg->train.steps;
  int64_t step, next;
  if (clmoe_ckpt_meta_int(meta, "step", 0, CLMOE_CKPT_MAX_STEP, &step) != CLMOE_OK)
    app_fail(1, "%s: %s (a damaged or edited checkpoint?)", path, clmoe_last_error());
  if (step != taken)
    app_fail(1, "%s: metadata 'step' is %lld but 'optimizer_step' is %lld: every training step takes one optimizer "
             "step (a damaged or edited checkpoint?)", path, (long long)step, (long long)taken);
  if (clmoe_ckpt_meta_get(meta, "next_batch")) {
    if (clmoe_ckpt_meta_int(meta, "next_batch", 0, CLMOE_CKPT_MAX_STEP, &next) != CLMOE_OK)
      app_fail(1, "%s: %s (a damaged or edited checkpoint?)", path, clmoe_last_error());
    if (next != step)
      app_fail(1, "%s: metadata 'next_batch' is %lld but 'step' is %lld (a damaged or edited checkpoint?)", path,
               (long long)next, (long long)step);
  }
  if (step > steps)
    app_fail(1, "%s: the checkpoint is at step %lld, past the run's %lld steps (give --steps)", path,
             (long long)step, (long long)steps);
  if (!clmoe_ckpt_meta_get(meta, "clmoe_format") && r->rank == 0)
    fprintf(stderr, "%s: warning: %s was written before checkpoints carried checksums: loaded unverified; the "
            "checkpoints this run writes have them\n", app_name, path);
  r->step = step;
}

/* The context and the model (expert-parallel under --ep), initialised or resumed. */
static void create_model(run *r)
{
  const train_opts *o = r->o;
  const clmoe_train_config *t = &r->cfg->train;
  r->nranks = 1, r->share = t->batch;
  if (o->ep != 0) {
    start_ep(r);
  } else {
    claim_dir(r);
    clmoe_ctx_options copts = {.device = o->device, .profiling = o->profile};
    APP_CHECK(clmoe_ctx_create(&r->ctx, &copts));
    APP_CHECK(clmoe_model_create(r->ctx, r->cfg, &r->model));
  }
  clmoe_params *ps = clmoe_model_params(r->model);
  if (o->resume) {
    clmoe_ckpt_meta meta = {0};
    APP_CHECK(clmoe_params_load_dist(ps, r->dist, o->resume, &meta));
    resume_position(r, &meta);
    clmoe_ckpt_meta_free(&meta);
  } else {
    APP_CHECK(clmoe_model_init(r->model, t->seed));
  }
}

/* Everything before the first step; returns 0, or the exit status after a message. */
static int setup(run *r)
{
  const train_opts *o = r->o;
  const clmoe_train_config *t = &r->cfg->train;
  if (open_data(r)) return 1;
  if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "%s: cannot create %s: %s\n", app_name, o->out_dir, strerror(errno));
    return 1;
  }
  create_model(r);
  const int64_t maxT = max_seq_len(t);
  r->tokens = malloc((size_t)(t->batch * maxT) * sizeof *r->tokens);
  r->targets = malloc((size_t)(t->batch * maxT) * sizeof *r->targets);
  if (!r->tokens || !r->targets) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  if (train_metrics_open(r)) return 1;
  r->tty = isatty(STDERR_FILENO);
  r->quiet = o->quiet || r->rank != 0; /* one rank reports */
  r->first = r->step;
  r->end = o->stop_at > 0 && o->stop_at < t->steps ? o->stop_at : t->steps;
  r->val = r->acc = NAN;
  r->saved_step = o->resume_in_place ? r->step : -1; /* its checkpoint is there already */
  return 0;
}

/* ---- a step ------------------------------------------------------------------------------ */

/* The most unbalanced MoE layer of the step (s->worst, s->empty); under --ep-rebalance the
 * layers' counts add to the experts' loads. */
static void moe_loads(run *r, train_step *s)
{
  clmoe_moe_load load = {0};
  int nmoe = clmoe_model_moe_layers(r->model);
  s->worst = 0.0, s->empty = 0;
  for (int i = 0; i < nmoe; i++) { /* the most unbalanced MoE layer */
    APP_CHECK(clmoe_model_moe_load_counts(r->model, i, &load, r->counts));
    for (int64_t e = 0; r->loads && e < r->cfg->experts; e++) r->loads[e] += (double)r->counts[e];
    if (load.max_over_mean > s->worst) s->worst = load.max_over_mean, s->empty = load.empty;
  }
}

/* The step's failure (the optimizer's, or an error the step's read reports): a message
 * naming it; the last checkpoint is kept. Returns 1. */
static int step_failed(run *r, const train_step *s)
{
  fprintf(stderr, "\n%s: step %lld: %s (loss %g): stopping; the last checkpoint is kept\n", app_name,
          (long long)r->step, clmoe_last_error(), s->loss);
  return 1;
}

/* Forward, backward and the optimizer on the batch in r->tokens; returns 0, or 1 after a
 * message when the optimizer step fails (the last checkpoint is kept). One process: nothing
 * waits for the device until the step's one read at its end (clmoe_model_step_read); the
 * MoE loads come from that read. */
static int train_batch(run *r, train_step *s)
{
  const clmoe_train_config *t = &r->cfg->train;
  clmoe_params *ps = clmoe_model_params(r->model);
  const int64_t T = s->T;
  clmoe_adamw hp = {(float)clmoe_lr_at(t->lr, t->min_lr, warmup_of(t), t->steps, r->step), (float)t->beta1,
                    (float)t->beta2, (float)t->adam_eps, (float)t->weight_decay, 1.0f, 0};
  int64_t scored;
  s->lr = hp.lr, s->loss = NAN, s->norm = NAN;
  APP_CHECK(clmoe_params_zero_grad(ps));
  const int64_t off = r->rank * r->share * T; /* this rank's sequences of the batch */
  if (!r->dist) {
    APP_CHECK(clmoe_model_forward(r->model, r->share, T, r->tokens + off, r->targets + off, 1, NULL, &scored));
    APP_CHECK(clmoe_model_balance_update(r->model));
    APP_CHECK(clmoe_model_backward(r->model));
    clmoe_status st = clmoe_model_adamw(r->model, &hp, t->clip);
    if (st == CLMOE_OK) st = clmoe_model_step_read(r->model, &s->loss, &s->norm);
    if (st != CLMOE_OK) return step_failed(r, s);
    moe_loads(r, s);
    return 0;
  }
  APP_CHECK(clmoe_model_forward(r->model, r->share, T, r->tokens + off, r->targets + off, 1, &s->loss, &scored));
  { /* the batch's mean loss; every rank's gradient scaled to it */
    double sums[2] = {s->loss * (double)scored, (double)scored};
    APP_CHECK(clmoe_dist_allreduce_sum_f64(r->dist, sums, 2));
    s->loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0, scored = (int64_t)sums[1];
    clmoe_model_set_loss_count(r->model, scored);
  }
  moe_loads(r, s);
  APP_CHECK(clmoe_model_balance_update(r->model));
  APP_CHECK(clmoe_model_backward(r->model));
  { /* the dense gradients summed over the ranks (in rank order: deterministic) */
    clmoe_grad_allreduce_opts go = {.no_average = 1};
    clmoe_grad_allreduce_stats gs;
    const double a0 = app_now();
    APP_CHECK(clmoe_dist_allreduce_grads(r->dist, ps, &go, &gs));
    clmoe_dist_stats_add_allreduce(r->dist, app_now() - a0, gs.bytes_sent);
  }
  if (clmoe_params_adamw_dist(ps, r->dist, &hp, t->clip, &s->norm) != CLMOE_OK) return step_failed(r, s);
  return 0;
}

/* One training step on the next batch, with its timing and profile, and whether the run
 * stops after it (signals, --time-limit: the same answer on every rank); returns 0, or 1
 * after a message. */
static int step(run *r, train_step *s)
{
  const train_opts *o = r->o;
  const clmoe_train_config *t = &r->cfg->train;
  const int64_t T = s->T = seq_len_at(t, r->step);
  const double t0 = app_now();
  APP_CHECK(clmoe_data_batch(r->data, CLMOE_SPLIT_TRAIN, t->seed, r->step, t->batch, T, r->tokens, r->targets));
  const int profiled = o->profile && r->step - r->first >= 2; /* skip warm-up (kernel builds) */
  if (r->dist && r->step - r->first == 2) clmoe_dist_stats_reset(r->dist), r->ep_s = 0.0, r->ep_steps = 0;
  clmoe_ctx_counters c0, c1;
  if (profiled) APP_CHECK(clmoe_ctx_profile_begin(r->ctx));
  clmoe_ctx_counters_get(r->ctx, &c0);
  if (train_batch(r, s)) return 1;
  clmoe_ctx_counters_get(r->ctx, &c1); /* before the profiler's own finish */
  if (profiled) {
    double ks;
    APP_CHECK(clmoe_ctx_profile_end(r->ctx, &ks, NULL));
    r->prof_s += app_now() - t0, r->prof_kernel_s += ks, r->prof_tokens += t->batch * T, r->prof_steps++;
    r->prof_waits.launches += c1.launches - c0.launches;
    r->prof_waits.blocking_reads += c1.blocking_reads - c0.blocking_reads;
    r->prof_waits.blocking_writes += c1.blocking_writes - c0.blocking_writes;
    r->prof_waits.finishes += c1.finishes - c0.finishes;
  }
  r->step++;
  r->tokens_done += t->batch * T;
  r->train_s += app_now() - t0;
  r->ep_s += app_now() - t0, r->ep_steps++;
  r->timed_out = o->time_limit > 0 && app_now() - r->start >= o->time_limit && r->step < r->end;
  if (r->dist) { /* every rank stops after the same step (signals and clocks differ) */
    int64_t flags[3] = {stop_signal == SIGTERM, stop_signal == SIGINT, r->timed_out};
    APP_CHECK(clmoe_dist_allreduce_sum_i64(r->dist, flags, 3));
    if (flags[0] || flags[1]) stop_signal = flags[0] ? SIGTERM : SIGINT; /* TERM first: a batch system's */
    r->timed_out = flags[2] > 0;
  }
  return 0;
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

/* After a step: the evaluation when due, the metrics row and the progress line. */
static void report(run *r, const train_step *s)
{
  const clmoe_train_config *t = &r->cfg->train;
  const int last = r->step == r->end || r->timed_out;
  const int evaluated = t->eval_every > 0 && (r->step % t->eval_every == 0 || r->step == t->steps || r->timed_out);
  if (evaluated) r->val = evaluate(r, s->T, &r->acc);
  train_report_step(r, s, evaluated, last);
}

/* After a step: the checkpoint every checkpoint_every steps (the run's end writes its own). */
static void checkpoint(run *r)
{
  const clmoe_train_config *t = &r->cfg->train;
  if (t->checkpoint_every > 0 && r->step % t->checkpoint_every == 0 && !r->timed_out)
    train_save(r, "interval", r->step == r->end);
}

/* ---- the end ------------------------------------------------------------------------------ */

/* The profile, the last checkpoint (saying why the run stopped; not again when the interval
 * wrote it), the metrics file closed and the sample; returns the exit status: APP_EXIT_OK
 * when the run is complete, else APP_EXIT_SIGINT/_SIGTERM after a signal and
 * APP_EXIT_RESUMABLE after --time-limit or --stop-at (apps/app_common.h). */
static int finish(run *r)
{
  const clmoe_train_config *t = &r->cfg->train;
  const int complete = r->step >= t->steps;
  if (!r->quiet && r->tty && r->step > r->first) fprintf(stderr, "\n");
  if (r->o->profile && r->rank == 0) train_print_profile(r);
  if (r->dist && r->ep_steps > 0) train_print_ep_split(r, r->ep_s, r->ep_steps, r->quiet);
  const char *why = complete ? "end" : stop_signal == SIGINT ? "SIGINT" : stop_signal ? "SIGTERM" : r->timed_out ? "--time-limit" : "--stop-at";
  if (r->saved_step != r->step) train_save(r, why, 1);
  else if (r->rank == 0 && r->step == r->first)
    fprintf(stderr, "%s: %s: the run is %s at step %lld; nothing to do%s\n", app_name, r->o->out_dir,
            complete ? "complete" : "already", (long long)r->step, complete ? " (--steps N extends it)" : "");
  FILE *metrics = r->metrics;
  r->metrics = NULL;
  if (metrics && fclose(metrics) != 0) {
    fprintf(stderr, "%s: writing %s: %s\n", app_name, r->o->metrics, strerror(errno));
    return run_end(r, 1);
  }
  if (!stop_signal && r->step > r->first) train_sample(r);
  const int rc = complete      ? APP_EXIT_OK
                 : stop_signal ? (stop_signal == SIGINT ? APP_EXIT_SIGINT : APP_EXIT_SIGTERM)
                               : APP_EXIT_RESUMABLE;
  return run_end(r, rc);
}

int train_run(clmoe_config *cfg, const train_opts *o)
{
  run r = {0};
  r.cfg = cfg, r.o = o;
  catch_stop_signals();
  int rc = setup(&r);
  if (rc) return run_end(&r, rc);
  train_announce(&r);
  r.start = r.last_log = app_now();
  while (r.step < r.end && !stop_signal && !r.timed_out) {
    train_step s;
    if (step(&r, &s)) return run_end(&r, 1);
    report(&r, &s);
    checkpoint(&r);
  }
  return finish(&r);
}
