/* clmoe-train's training loop (train_run.c), driven by clmoe_train.c's options. */
#ifndef CLMOE_TRAIN_RUN_H
#define CLMOE_TRAIN_RUN_H

#include "app_common.h"

typedef struct train_opts {
  const char *device, *data, *task, *out_dir, *resume, *metrics, *prompt;
  int64_t sample_tokens;
  int64_t stop_at;
  double time_limit; /* seconds: stop (with a checkpoint) after the step that passes it; 0: none */  /* stop (with a checkpoint) after this step; 0: run to the end */
  clmoe_mqar mqar;  /* the recall task's sizes when task is set */
  int quiet;
  int profile; /* kernel time by op family after the run (steps after the first two) */
  int ep;      /* expert parallelism over this many MPI ranks (mpirun -np ep); 0: one process */
  int ep_rebalance; /* re-place the experts by their loads at every checkpoint */
  int *argc;   /* main's, for MPI_Init */
  char ***argv;
} train_opts;

/* Parses "mqar" or "mqar:keys=K,values=V,pairs=P,queries=Q" (any subset, defaults 64, 64,
 * 16, 8); exits with a usage error naming `flag` when malformed. */
void train_parse_task(const char *flag, const char *spec, clmoe_mqar *task);

/* Trains cfg (its [train] section as adjusted by the flags); returns the exit status. */
int train_run(clmoe_config *cfg, const train_opts *o);

#endif
