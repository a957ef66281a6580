/* Training data: token streams and deterministic batches.
 *
 * Sources:
 *   - any file as bytes (vocabulary 256): text, or anything else;
 *   - a pre-tokenized shard: a 32-byte header then little-endian tokens:
 *       bytes 0-7   "CLMOETOK"        bytes 8-11   version (1)
 *       bytes 12-15 token size (2: uint16, 4: uint32)
 *       bytes 16-23 number of tokens  bytes 24-27  vocabulary size   bytes 28-31 zero
 *     every token must be below the vocabulary size (checked when opening);
 *   - the synthetic multi-query associative recall task (MQAR): each sequence lists
 *     key-value pairs, then asks for the values of some of the keys; only the answers are
 *     scored, so a model that recalls beats chance (1 / values) clearly.
 * A stream's last 5% is held out for validation (a split shorter than a window wraps around;
 * clmoe-train refuses such data). Batches are
 * drawn by position from (seed, batch index) alone, so a run resumes exactly by continuing
 * the batch index. */
#ifndef CLMOE_DATA_H
#define CLMOE_DATA_H

#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clmoe_data clmoe_data;

typedef enum clmoe_split { CLMOE_SPLIT_TRAIN = 0, CLMOE_SPLIT_VAL = 1 } clmoe_split;

/* A file: a shard when it starts with "CLMOETOK", bytes otherwise. */
CLMOE_API clmoe_status clmoe_data_open(const char *path, clmoe_data **data);

/* MQAR: vocabulary = 2 + keys + values tokens (0: padding, 1: the separator between the
 * pairs and the questions); `pairs` key-value pairs then `queries` questions per sequence. */
typedef struct clmoe_mqar {
  int keys, values, pairs, queries;
} clmoe_mqar;
CLMOE_API clmoe_status clmoe_data_mqar(const clmoe_mqar *task, clmoe_data **data);

CLMOE_API void clmoe_data_close(clmoe_data *data);

CLMOE_API int64_t clmoe_data_vocab(const clmoe_data *data);
/* Tokens of the split (0 for the synthetic task: it is unbounded). */
CLMOE_API int64_t clmoe_data_tokens(const clmoe_data *data, clmoe_split split);
/* "bytes", "shard" or "mqar", and the source's name. */
CLMOE_API const char *clmoe_data_kind(const clmoe_data *data);

/* Batch `index` of the split: B sequences of T tokens, inputs [B, T] and targets [B, T]
 * (the next token, or -1 where nothing is scored). The same (seed, index) gives the same
 * batch on any machine. */
CLMOE_API clmoe_status clmoe_data_batch(const clmoe_data *data, clmoe_split split, uint64_t seed,
                                        int64_t index, int64_t B, int64_t T, int32_t *inputs,
                                        int32_t *targets);

/* The learning rate at step s (0-based): linear warm-up to lr over `warmup` steps, then a
 * cosine to min_lr at `steps`. */
CLMOE_API double clmoe_lr_at(double lr, double min_lr, int64_t warmup, int64_t steps, int64_t s);

#ifdef __cplusplus
}
#endif
#endif
