/* clmoe-train's training loop (train_run.c), driven by clmoe_train.c's options. */
#ifndef CLMOE_TRAIN_RUN_H
#define CLMOE_TRAIN_RUN_H

#include "app_common.h"

typedef struct train_opts {
  const char *device, *data, *task, *out_dir, *resume, *metrics, *prompt;
  int64_t sample_tokens;
  int quiet;
} train_opts;

/* Trains cfg (its [train] section as adjusted by the flags); returns the exit status. */
int train_run(clmoe_config *cfg, const train_opts *o);

#endif
