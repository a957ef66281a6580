/* fuzz_data: the training-data reader (include/clmoe/data.h) on any bytes.
 *
 * Each input is a file for clmoe_data_open: a token shard when it starts with "CLMOETOK",
 * bytes otherwise. When it opens, the vocabulary and split sizes must make sense and a few
 * batches of both splits (several shapes, seeds and indices, some past the end of the
 * split) must succeed with every input token in [0, vocab) and every target in
 * [-1, vocab); a split of fewer than 2 tokens (a 2-token file) must refuse them. A malformed file must be a status code with a message; anything else
 * aborts, and libFuzzer keeps the input.
 *
 * Seeds: tests/fuzz/corpus/fuzz_data/ (a text, valid 2-byte and 4-byte shards, and
 * tests/data/bad/data). Build and run: `make fuzz`, then tests/fuzz/fuzz_data CORPUS_DIR,
 * or scripts/fuzz.sh SECONDS. */
#include "fuzz_common.h" /* first: it sets _GNU_SOURCE */

#include <string.h>

#define MAX_B 3
#define MAX_T 17

/* Batches of a split of at least 2 tokens (a shorter one is refused: there is no target). */
static void check_batches(const clmoe_data *d, clmoe_split split, uint64_t seed)
{
  static const int64_t shapes[][2] = {{1, 1}, {2, 8}, {MAX_B, MAX_T}};
  static const int64_t indices[] = {0, 1, 1000003};
  const int64_t vocab = clmoe_data_vocab(d);
  if (clmoe_data_tokens(d, split) < 2) {
    int32_t in[1], tg[1];
    FUZZ_REQUIRE(clmoe_data_batch(d, split, seed, 0, 1, 1, in, tg) == CLMOE_ERR_FORMAT,
                 "a batch of a split of %lld tokens", (long long)clmoe_data_tokens(d, split));
    return;
  }
  int32_t inputs[MAX_B * MAX_T], targets[MAX_B * MAX_T];
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (size_t i = 0; i < sizeof indices / sizeof indices[0]; i++) {
      const int64_t B = shapes[s][0], T = shapes[s][1];
      memset(inputs, 0xa5, sizeof inputs);
      memset(targets, 0xa5, sizeof targets);
      clmoe_status st = clmoe_data_batch(d, split, seed, indices[i], B, T, inputs, targets);
      FUZZ_REQUIRE(st == CLMOE_OK, "batch %lld [%lld, %lld] of split %d: %s",
                   (long long)indices[i], (long long)B, (long long)T, (int)split,
                   clmoe_strerror(st));
      for (int64_t k = 0; k < B * T; k++) {
        FUZZ_REQUIRE(inputs[k] >= 0 && inputs[k] < vocab, "input %lld is %d (vocabulary %lld)",
                     (long long)k, inputs[k], (long long)vocab);
        FUZZ_REQUIRE(targets[k] >= -1 && targets[k] < vocab,
                     "target %lld is %d (vocabulary %lld)", (long long)k, targets[k],
                     (long long)vocab);
      }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  clmoe_data *d = NULL;
  clmoe_status st = clmoe_data_open(fuzz_file(data, size), &d);
  if (st != CLMOE_OK) {
    FUZZ_REQUIRE(st == CLMOE_ERR_FORMAT || st == CLMOE_ERR_IO, "clmoe_data_open gave %s",
                 clmoe_strerror(st));
    FUZZ_REQUIRE(clmoe_last_error()[0] != '\0', "an error without a message");
    FUZZ_REQUIRE(d == NULL, "a failed open returned a handle");
    return 0;
  }
  const int64_t vocab = clmoe_data_vocab(d);
  const int64_t train = clmoe_data_tokens(d, CLMOE_SPLIT_TRAIN);
  const int64_t val = clmoe_data_tokens(d, CLMOE_SPLIT_VAL);
  const char *kind = clmoe_data_kind(d);
  FUZZ_REQUIRE(vocab >= 1 && vocab <= INT32_MAX, "vocabulary %lld", (long long)vocab);
  FUZZ_REQUIRE(train >= 1 && val >= 1, "splits of %lld and %lld tokens", (long long)train,
               (long long)val);
  FUZZ_REQUIRE(kind && (!strcmp(kind, "bytes") || !strcmp(kind, "shard")), "kind '%s'",
               kind ? kind : "(null)");
  if (!strcmp(kind, "bytes"))
    FUZZ_REQUIRE(vocab == 256 && train + val == (int64_t)size, "bytes: vocabulary %lld, %lld tokens of %zu bytes",
                 (long long)vocab, (long long)(train + val), size);
  const uint64_t seed = size >= 1 ? data[size - 1] : 0;
  check_batches(d, CLMOE_SPLIT_TRAIN, seed);
  check_batches(d, CLMOE_SPLIT_VAL, seed + 1);
  clmoe_data_close(d);
  return 0;
}
