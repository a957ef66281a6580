/* clmoe-train's training loop, driven by clmoe_train.c's options, and its parts: the loop
 * (train_run.c: setup, step, evaluation, the end), checkpoints (train_ckpt.c) and the
 * reports (train_report.c: progress, metrics CSV, profile, sample). */
#ifndef CLMOE_TRAIN_RUN_H
#define CLMOE_TRAIN_RUN_H

#include "app_common.h"

typedef struct train_opts {
  const char *device, *data, *task, *out_dir, *resume, *metrics, *prompt;
  const char *resume_metrics; /* a resumed run in a new --out: the metrics file it came from */
  int64_t resume_step; /* the checkpoint's step when resuming, -1 for a fresh run */
  int overwrite;       /* --overwrite: discard what --out holds of a run */
  int resume_in_place; /* resuming a checkpoint of --out itself (it holds the step's file) */
  int64_t sample_tokens;
  int64_t stop_at;   /* stop (with a checkpoint) after this step; 0: run to the end */
  double time_limit; /* seconds: stop (with a checkpoint) after the step that passes it; 0: none */
  clmoe_mqar mqar;  /* the recall task's sizes when task is set */
  int quiet;
  int profile; /* kernel time by op family after the run (steps after the first two) */
  int ep;      /* expert parallelism over this many MPI ranks (mpirun -np ep); 0: one process;
                  -1: over every rank of the job (an MPI launch of several ranks without --ep) */
  int ep_rebalance; /* re-place the experts by their loads at every checkpoint */
  int *argc;   /* main's, for MPI_Init */
  char ***argv;
} train_opts;

/* Trains cfg (its [train] section as adjusted by the flags); returns the exit status. */
int train_run(clmoe_config *cfg, const train_opts *o);

/* ---- between the parts of the loop ---------------------------------------------------- */

/* A training run: what it holds, and its progress. */
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
  /* progress */
  int64_t first, end;   /* the step the run started from; the step it stops after */
  int quiet, tty;       /* no progress lines (--quiet or not rank 0); stderr is a terminal */
  double start;         /* app_now() before the first step */
  double last_log;      /* app_now() at the last progress line */
  double train_s;       /* step time alone, for tokens/s (evaluation and checkpoints excluded) */
  int64_t tokens_done;
  double val, acc;      /* the last evaluation's loss and accuracy (NAN: none yet) */
  double prof_s, prof_kernel_s; /* --profile: steps after the first two */
  int64_t prof_tokens, prof_steps;
  clmoe_ctx_counters prof_waits; /* --profile: the host waits of those steps (the profiler's own excluded) */
  double ep_s;          /* --ep: step time of the steps after the first two */
  int64_t ep_steps;
  int timed_out;        /* --time-limit passed */
  int64_t saved_step;   /* the step of the last checkpoint written (-1: none) */
} run;

/* What one step measured. */
typedef struct train_step {
  int64_t T;      /* its sequence length */
  double loss;    /* the batch's mean loss */
  double lr;      /* the learning rate it used */
  double norm;    /* the gradient norm before clipping */
  double worst;   /* the most unbalanced MoE layer: its max / mean expert load */
  int64_t empty;  /* and its experts that got no token */
} train_step;

/* train_dir.c: the run directory (see there). The path of DIR's checkpoint at step. */
void train_dir_ckpt_path(char *buf, size_t len, const char *dir, int64_t step);
/* The checkpoint a resume of DIR starts from (DIR/checkpoint.safetensors, else the newest
 * numbered one) in path: 1, or 0 when DIR holds none. */
int train_dir_latest(const char *dir, char *path, size_t len);
/* Exits with a usage error when DIR holds what this run would overwrite: any run for a fresh
 * one (resume_step -1), checkpoints after resume_step for a resumed one; unless overwrite. */
void train_dir_check(const char *dir, int64_t resume_step, int overwrite);
/* With overwrite, removes what train_dir_check would have refused (after the lock). */
void train_dir_claim(const char *dir, int64_t resume_step, int overwrite);
/* Takes DIR's lock for the life of the process, or exits naming its holder. */
void train_dir_lock(const char *dir);
/* After the checkpoint of step is written: the link at it, and all but the newest keep
 * checkpoints removed (keep 0: all kept). */
void train_dir_publish(const char *dir, int64_t step, int64_t keep);

/* train_ckpt.c: writes the checkpoint (DIR/checkpoint.safetensors) at r->step, `why` for the
 * message; under --ep-rebalance first re-places the experts and, unless `last`, goes on with
 * the new placement (a new r->model). */
void train_save(run *r, const char *why, int last);

/* train_report.c. Opens --metrics (a resumed run's file keeps the rows up to its step; in a
 * new directory it starts with those of the file it came from);
 * returns 0, or 1 after a message. */
int train_metrics_open(run *r);
/* Flushes and fsyncs the metrics rows written so far (before a checkpoint is saved, so that
 * the file holds every row up to the checkpoint's step); 1 on a write error. */
int train_metrics_sync(run *r);
/* The run's first lines: model, parameters, data, steps, device. */
void train_announce(run *r);
/* One step's metrics row (evaluated: with the evaluation's columns) and progress line. */
void train_report_step(run *r, const train_step *s, int evaluated, int last);
/* --profile: device time by family, the top kernels, memory, throughput and the host waits
 * per step. */
void train_print_profile(run *r);
/* Under --ep: the mean step split over the ranks (steps after the first two). Collective. */
void train_print_ep_split(run *r, double step_s, int64_t steps, int quiet);
/* A continuation of the prompt after training (byte data, one process). */
void train_sample(run *r);

#endif
