/* Training data: token streams and deterministic batches.
 *
 * Sources:
 *   - any file as bytes (vocabulary 256): text, or anything else;
 *   - a pre-tokenized shard: a 32-byte header then little-endian tokens:
 *       bytes 0-7   "CLMOETOK"        bytes 8-11   version (1)
 *       bytes 12-15 token size (2: uint16, 4: uint32)
 *       bytes 16-23 number of tokens  bytes 24-27  vocabulary size   bytes 28-31 zero
 *     every token must be below the vocabulary size (checked when opening);
 *   - an llm.c token shard (karpathy/llm.c, dev/data): a header of 256 little-endian int32
 *     (magic 20240520 version 1: uint16 tokens; magic 20240801 version 7: uint32), then the
 *     tokens; its vocabulary is not recorded, so it is taken as the largest token + 1.
 *     Other llm.c files (model checkpoints, tokenizers, other versions) are refused by their
 *     magic number, never read as bytes;
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

/* A file: a shard when it starts with "CLMOETOK" or an llm.c magic, bytes otherwise. */
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
/* "bytes", "shard", "llm.c shard" or "mqar". */
CLMOE_API const char *clmoe_data_kind(const clmoe_data *data);

/* Batch `index` of the split: B sequences of T tokens, inputs [B, T] and targets [B, T]
 * (the next token, or -1 where nothing is scored). The same (seed, index) gives the same
 * batch on any machine. */
CLMOE_API clmoe_status clmoe_data_batch(const clmoe_data *data, clmoe_split split, uint64_t seed,
                                        int64_t index, int64_t B, int64_t T, int32_t *inputs,
                                        int32_t *targets);

/* A CLMOETOK shard being written: tokens are appended, then clmoe_shard_finish writes the
 * header, fsyncs and renames the temporary file "<path>.tmp.<pid>" over path (a failure or
 * clmoe_shard_abort leaves no file at path and removes the temporary one). uint16 tokens
 * when vocab <= 65536, else uint32. */
typedef struct clmoe_shard_writer clmoe_shard_writer;
CLMOE_API clmoe_status clmoe_shard_create(const char *path, int64_t vocab, clmoe_shard_writer **writer);
/* Appends ids [n]; each must be in [0, vocab) (an error names the first that is not). */
CLMOE_API clmoe_status clmoe_shard_append(clmoe_shard_writer *writer, const int32_t *ids, int64_t n);
/* Tokens appended so far. */
CLMOE_API int64_t clmoe_shard_count(const clmoe_shard_writer *writer);
/* Completes the file and frees the writer (also on failure). */
CLMOE_API clmoe_status clmoe_shard_finish(clmoe_shard_writer *writer);
/* Removes the temporary file and frees the writer (NULL: nothing). */
CLMOE_API void clmoe_shard_abort(clmoe_shard_writer *writer);

/* The learning rate at step s (0-based): linear warm-up to lr over `warmup` steps, then a
 * cosine to min_lr at `steps`. */
CLMOE_API double clmoe_lr_at(double lr, double min_lr, int64_t warmup, int64_t steps, int64_t s);

#ifdef __cplusplus
}
#endif
#endif
