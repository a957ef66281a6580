/* Private to lib/hf/ (Hugging Face Kimi Linear checkpoints, include/clmoe/hf.h). The file
 * graph, bottom up:
 *   hf_config.c   config.json (both forms) -> clmoe_config
 *   hf_weights.c  the weight files: model.safetensors or an index and its shards, one
 *                 sorted table of every tensor with its file, and which ones were used
 *   hf_load.c     the model's parameters from the hub's tensor names: shapes checked,
 *                 converted to f32 on the way to the device */
#ifndef CLMOE_HF_INTERNAL_H
#define CLMOE_HF_INTERNAL_H

#include "runtime/internal.h"
#include "clmoe/hf.h"
#include "clmoe/safetensors.h"

/* ---- hf_weights.c ---------------------------------------------------------------------- */
typedef struct hf_tensor {
  const char *name;  /* owned by its file */
  int file;          /* index into hf_weights.files */
  int used;          /* read by the loader */
} hf_tensor;

typedef struct hf_weights {
  char dir[4096];
  clmoe_st_file **files;
  int nfiles;
  hf_tensor *t; /* sorted by name */
  int n;
} hf_weights;

/* Opens dir's weights: model.safetensors.index.json (every shard it names, each checked to
 * hold the tensors the index gives it) or model.safetensors. */
clmoe_status clmoe__hf_weights_open(const char *dir, hf_weights *w);
void clmoe__hf_weights_close(hf_weights *w);
/* The tensor of that name, or NULL. */
hf_tensor *clmoe__hf_weights_find(hf_weights *w, const char *name);
/* Its file and description. */
clmoe_st_file *clmoe__hf_weights_file(const hf_weights *w, const hf_tensor *t);
/* The first tensor no parameter used, or NULL. */
const hf_tensor *clmoe__hf_weights_unused(const hf_weights *w);

#endif
