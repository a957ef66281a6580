/* Training data: byte files, token shards (clmoe's CLMOETOK and llm.c's .bin), MQAR;
 * deterministic batches. Files are read with
 * pread, never mapped: a file truncated or rewritten under a running job is an error naming
 * it (its size and modification time are checked before every batch, and a short read is
 * an error), not a SIGBUS. */
#include "runtime/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels_cl/runtime/random.cl" /* the counter-based generator: same batches everywhere */
#include "clmoe/data.h"

#define SHARD_HEADER 32
/* llm.c's token shards (dev/data/data_common.py): 256 little-endian int32 (magic, version,
 * token count, zeros), then the tokens; GPT-2's as uint16 (magic 20240520, version 1),
 * Llama-3's as uint32 (magic 20240801, version 7). The vocabulary is not recorded. */
#define LLMC_HEADER 1024
#define LLMC_MAGIC_GPT2 20240520u
#define LLMC_MAGIC_LLAMA3 20240801u
#define LLMC_MAGIC_MODEL 20240326u     /* llm.c model checkpoints: not data */
#define LLMC_MAGIC_TOKENIZER 20240328u /* llm.c tokenizer files: not data */
#define VAL_FRACTION 0.05
#define SCAN_TOKENS (1 << 18) /* tokens per read when the shard is checked at opening */

struct clmoe_data {
  char name[512];
  const char *kind;
  int64_t vocab;
  /* streams: an open file */
  int fd;                  /* -1: synthetic */
  struct stat opened;      /* size and modification time at opening */
  int64_t first;           /* byte offset of the first token */
  int token_size;          /* 1 (bytes), 2, 4 */
  int64_t ntokens, ntrain; /* [0, ntrain) train, [ntrain, ntokens) validation */
  /* synthetic */
  clmoe_mqar mqar;
};

static uint32_t token_in(const unsigned char *p, int size)
{
  if (size == 1) return p[0];
  if (size == 2) return (uint32_t)p[0] | (uint32_t)p[1] << 8;
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le_u(const unsigned char *p, int n)
{
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* n bytes at `offset` of the file, all of them or an error naming the file. */
static clmoe_status read_at(const clmoe_data *d, void *buf, size_t n, int64_t offset)
{
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(d->fd, (char *)buf + got, n - got, (off_t)(offset + (int64_t)got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return clmoe__error(CLMOE_ERR_IO, "%s: read failed: %s", d->name, strerror(errno));
    if (r == 0)
      return clmoe__error(CLMOE_ERR_IO, "%s: the file ends at byte %lld, expected %lld bytes: "
                          "it was truncated while in use", d->name,
                          (long long)(offset + (int64_t)got), (long long)d->opened.st_size);
    got += (size_t)r;
  }
  return CLMOE_OK;
}

/* The file must still be the one opened: same size, same modification time. */
static clmoe_status check_unchanged(const clmoe_data *d)
{
  struct stat now;
  if (fstat(d->fd, &now) != 0)
    return clmoe__error(CLMOE_ERR_IO, "%s: cannot stat: %s", d->name, strerror(errno));
  if (now.st_size != d->opened.st_size)
    return clmoe__error(CLMOE_ERR_IO, "%s: the file changed while in use: %lld bytes, %lld when opened",
                        d->name, (long long)now.st_size, (long long)d->opened.st_size);
  if (now.st_mtim.tv_sec != d->opened.st_mtim.tv_sec || now.st_mtim.tv_nsec != d->opened.st_mtim.tv_nsec)
    return clmoe__error(CLMOE_ERR_IO, "%s: the file was modified while in use (its modification time changed)",
                        d->name);
  return CLMOE_OK;
}

static clmoe_status scan_tokens(clmoe_data *d);

static clmoe_status check_shard(clmoe_data *d, int64_t file_bytes)
{
  unsigned char h[SHARD_HEADER];
  if (file_bytes < SHARD_HEADER)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: a token shard needs a 32-byte header, the file has %lld bytes",
                        d->name, (long long)file_bytes);
  CLMOE_TRY(read_at(d, h, sizeof h, 0));
  uint64_t version = le_u(h + 8, 4), size = le_u(h + 12, 4), count = le_u(h + 16, 8), vocab = le_u(h + 24, 4);
  if (version != 1)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: shard version %llu (this clmoe reads version 1)", d->name,
                        (unsigned long long)version);
  if (size != 2 && size != 4)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: token size %llu bytes (2 or 4 expected)", d->name,
                        (unsigned long long)size);
  /* tokens are int32 in every batch: a vocabulary of at most 2^31 - 1 */
  if (vocab < 2 || (size == 2 && vocab > 65536))
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: vocabulary size %llu does not fit %llu-byte tokens", d->name,
                        (unsigned long long)vocab, (unsigned long long)size);
  if (vocab > INT32_MAX)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: vocabulary size %llu is above 2^31 - 1 (batches hold int32 tokens)",
                        d->name, (unsigned long long)vocab);
  if (le_u(h + 28, 4) != 0) return clmoe__error(CLMOE_ERR_FORMAT, "%s: header bytes 28-31 must be zero", d->name);
  const uint64_t body = (uint64_t)(file_bytes - SHARD_HEADER);
  if (count > body / size || count * size != body)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: the header promises %llu tokens (%llu bytes) but the file has "
                        "%llu bytes after the header (truncated or padded)", d->name, (unsigned long long)count,
                        (unsigned long long)(count * size), (unsigned long long)body);
  d->kind = "shard";
  d->first = SHARD_HEADER;
  d->token_size = (int)size;
  d->ntokens = (int64_t)count;
  d->vocab = (int64_t)vocab;
  return scan_tokens(d);
}

/* Every token below d->vocab (vocab 0: sets it to the largest token + 1). */
static clmoe_status scan_tokens(clmoe_data *d)
{
  const int64_t size = d->token_size;
  const int set_vocab = d->vocab == 0;
  uint32_t top = 0;
  unsigned char *buf = malloc((size_t)(SCAN_TOKENS * size));
  if (!buf) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  clmoe_status st = CLMOE_OK;
  for (int64_t i0 = 0; i0 < d->ntokens && st == CLMOE_OK; i0 += SCAN_TOKENS) {
    const int64_t n = d->ntokens - i0 < SCAN_TOKENS ? d->ntokens - i0 : SCAN_TOKENS;
    st = read_at(d, buf, (size_t)(n * size), d->first + i0 * size);
    for (int64_t i = 0; st == CLMOE_OK && i < n; i++) {
      const uint32_t t = token_in(buf + i * size, (int)size);
      if (set_vocab) top = t > top ? t : top;
      else if (t >= d->vocab)
        st = clmoe__error(CLMOE_ERR_FORMAT, "%s: token %lld is %u, not below the vocabulary size %llu",
                          d->name, (long long)(i0 + i), t, (unsigned long long)d->vocab);
    }
  }
  free(buf);
  if (st == CLMOE_OK && set_vocab) {
    if (top >= INT32_MAX)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: token %u is above 2^31 - 2 (batches hold int32 tokens)", d->name, top);
    d->vocab = (int64_t)top + 1;
  }
  return st;
}

/* An llm.c shard (its magic read): tokens after the 1024-byte header; anything else with
 * an llm.c magic is refused, never read as bytes. */
static clmoe_status check_llmc(clmoe_data *d, int64_t file_bytes, uint32_t magic)
{
  unsigned char h[12];
  CLMOE_TRY(read_at(d, h, sizeof h, 0));
  const uint32_t version = (uint32_t)le_u(h + 4, 4);
  const int64_t count = (int64_t)(int32_t)le_u(h + 8, 4);
  if (magic == LLMC_MAGIC_MODEL || magic == LLMC_MAGIC_TOKENIZER)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: an llm.c %s file (magic %u), not training data", d->name,
                        magic == LLMC_MAGIC_MODEL ? "model checkpoint" : "tokenizer", magic);
  const int size = magic == LLMC_MAGIC_GPT2 && version == 1 ? 2 : magic == LLMC_MAGIC_LLAMA3 && version == 7 ? 4 : 0;
  if (!size)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: an llm.c token shard (magic %u) of version %u: this clmoe reads "
                        "magic 20240520 version 1 (uint16 tokens) and magic 20240801 version 7 (uint32)",
                        d->name, magic, version);
  if (file_bytes < LLMC_HEADER)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: an llm.c token shard needs a 1024-byte header, the file has %lld bytes",
                        d->name, (long long)file_bytes);
  const int64_t body = file_bytes - LLMC_HEADER;
  if (count < 0 || count > body / size || count * size != body)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: the llm.c header promises %lld tokens (%lld bytes) but the file has "
                        "%lld bytes after the header (truncated or padded)", d->name, (long long)count,
                        (long long)count * size, (long long)body);
  d->kind = "llm.c shard";
  d->first = LLMC_HEADER;
  d->token_size = size;
  d->ntokens = count;
  d->vocab = 0; /* not recorded: the largest token + 1 */
  return scan_tokens(d);
}

clmoe_status clmoe_data_open(const char *path, clmoe_data **out)
{
  *out = NULL;
  clmoe_data *d = calloc(1, sizeof *d);
  if (!d) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  snprintf(d->name, sizeof d->name, "%s", path);
  clmoe_status st = CLMOE_OK;
  d->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (d->fd < 0 || fstat(d->fd, &d->opened) != 0) {
    st = clmoe__error(CLMOE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    goto fail;
  }
  if (!S_ISREG(d->opened.st_mode)) {
    st = clmoe__error(CLMOE_ERR_IO, "%s: not a regular file", path);
    goto fail;
  }
  const int64_t bytes = (int64_t)d->opened.st_size;
  if (bytes == 0) {
    st = clmoe__error(CLMOE_ERR_FORMAT, "%s: the file is empty", path);
    goto fail;
  }
  char magic[8] = {0};
  if (bytes >= 8) CLMOE_TRY_GOTO(st, read_at(d, magic, 8, 0), fail);
  const uint32_t m = (uint32_t)le_u((const unsigned char *)magic, 4);
  if (bytes >= 8 && !memcmp(magic, "CLMOETOK", 8)) {
    CLMOE_TRY_GOTO(st, check_shard(d, bytes), fail);
  } else if (bytes >= 12 && (m == LLMC_MAGIC_GPT2 || m == LLMC_MAGIC_LLAMA3 || m == LLMC_MAGIC_MODEL ||
                             m == LLMC_MAGIC_TOKENIZER)) {
    CLMOE_TRY_GOTO(st, check_llmc(d, bytes, m), fail);
  } else {
    d->kind = "bytes";
    d->first = 0;
    d->token_size = 1;
    d->ntokens = bytes;
    d->vocab = 256;
  }
  if (d->ntokens < 2) {
    st = clmoe__error(CLMOE_ERR_FORMAT, "%s: %lld tokens: too few to train on", path, (long long)d->ntokens);
    goto fail;
  }
  d->ntrain = d->ntokens - (int64_t)ceil(VAL_FRACTION * (double)d->ntokens);
  *out = d;
  return CLMOE_OK;
fail:
  clmoe_data_close(d);
  return st;
}

clmoe_status clmoe_data_mqar(const clmoe_mqar *task, clmoe_data **out)
{
  *out = NULL;
  if (!task || task->keys < 1 || task->values < 2 || task->pairs < 1 || task->pairs > task->keys ||
      task->queries < 1 || task->queries > task->pairs)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT,
                        "MQAR task: need keys >= pairs >= queries >= 1 and values >= 2");
  clmoe_data *d = calloc(1, sizeof *d);
  if (!d) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  snprintf(d->name, sizeof d->name, "mqar(%d keys, %d values, %d pairs, %d queries)", task->keys,
           task->values, task->pairs, task->queries);
  d->kind = "mqar";
  d->fd = -1;
  d->mqar = *task;
  d->vocab = 2 + task->keys + task->values;
  *out = d;
  return CLMOE_OK;
}

void clmoe_data_close(clmoe_data *d)
{
  if (!d) return;
  if (d->fd >= 0) close(d->fd);
  free(d);
}

int64_t clmoe_data_vocab(const clmoe_data *d) { return d->vocab; }
const char *clmoe_data_kind(const clmoe_data *d) { return d->kind; }

int64_t clmoe_data_tokens(const clmoe_data *d, clmoe_split split)
{
  if (d->fd < 0) return 0;
  return split == CLMOE_SPLIT_TRAIN ? d->ntrain : d->ntokens - d->ntrain;
}

/* One MQAR sequence of T tokens from the random stream (seed, base): pairs, the separator,
 * then questions with their answers scored; the rest padding, unscored. */
static void mqar_sequence(const clmoe_mqar *m, uint64_t seed, uint64_t base, int64_t T, int32_t *in, int32_t *tg)
{
  int32_t seq[4096 + 2];
  int key[1024], val[1024];
  int64_t n = 0;
  /* Distinct keys by a partial Fisher-Yates shuffle driven by the counter generator. */
  int perm[1024];
  int nk = m->keys < 1024 ? m->keys : 1024, np = m->pairs < nk ? m->pairs : nk;
  for (int i = 0; i < nk; i++) perm[i] = i;
  for (int i = 0; i < np; i++) {
    int j = i + (int)(rng_bits(seed, base + (uint64_t)i) % (uint64_t)(nk - i));
    int t = perm[i];
    perm[i] = perm[j], perm[j] = t;
    key[i] = perm[i];
    val[i] = (int)(rng_bits(seed, base + 1024 + (uint64_t)i) % (uint64_t)m->values);
  }
  for (int i = 0; i < np && n + 2 <= 4096; i++) {
    seq[n++] = 2 + key[i];
    seq[n++] = 2 + m->keys + val[i];
  }
  seq[n++] = 1;
  int64_t qstart = n;
  for (int i = 0; i < m->queries && n + 2 <= 4096; i++) {
    int which = (int)(rng_bits(seed, base + 2048 + (uint64_t)i) % (uint64_t)np);
    seq[n++] = 2 + key[which];
    seq[n++] = 2 + m->keys + val[which];
  }
  for (int64_t t = 0; t < T; t++) {
    in[t] = t < n ? seq[t] : 0;
    /* Score the answer tokens only: the target of a question token is its value. */
    int scored = t + 1 < n && t >= qstart && (t - qstart) % 2 == 0;
    tg[t] = scored ? seq[t + 1] : -1;
  }
}

clmoe_status clmoe_data_batch(const clmoe_data *d, clmoe_split split, uint64_t seed, int64_t index,
                              int64_t B, int64_t T, int32_t *inputs, int32_t *targets)
{
  if (B < 1 || T < 1 || index < 0)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_data_batch: B, T >= 1 and index >= 0 needed");
  /* Separate random streams for the two splits. */
  const uint64_t s = rng_mix64(seed ^ (split == CLMOE_SPLIT_VAL ? 0x5eed0f0a11ULL : 0x5eed0f7ea1ULL));
  if (d->fd < 0) {
    for (int64_t b = 0; b < B; b++)
      mqar_sequence(&d->mqar, s, ((uint64_t)index * (uint64_t)B + (uint64_t)b) * 4096, T, inputs + b * T,
                    targets + b * T);
    return CLMOE_OK;
  }
  const int64_t first = split == CLMOE_SPLIT_TRAIN ? 0 : d->ntrain;
  const int64_t len = clmoe_data_tokens(d, split);
  if (len < 2)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: the %s split has %lld tokens: too few", d->name,
                        split == CLMOE_SPLIT_TRAIN ? "training" : "validation", (long long)len);
  CLMOE_TRY(check_unchanged(d));
  /* a window of T + 1 tokens, read as at most two pieces (a shorter split wraps around) */
  const int64_t win = T + 1, ts = d->token_size;
  unsigned char *buf = malloc((size_t)(win * ts));
  if (!buf) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  clmoe_status st = CLMOE_OK;
  for (int64_t b = 0; b < B && st == CLMOE_OK; b++) {
    /* A window of T + 1 tokens at a random start. */
    const uint64_t r = rng_bits(s, (uint64_t)index * (uint64_t)B + (uint64_t)b);
    const int64_t span = len > win ? len - win + 1 : len;
    const int64_t start = (int64_t)(r % (uint64_t)span);
    for (int64_t got = 0; got < win && st == CLMOE_OK;) { /* pieces up to the split's end */
      const int64_t at = (start + got) % len, n = win - got < len - at ? win - got : len - at;
      st = read_at(d, buf + got * ts, (size_t)(n * ts), d->first + (first + at) * ts);
      got += n;
    }
    for (int64_t t = 0; st == CLMOE_OK && t < win; t++) {
      const uint32_t tok = token_in(buf + t * ts, (int)ts);
      if (tok >= (uint64_t)d->vocab) {
        st = clmoe__error(CLMOE_ERR_IO, "%s: token %u is not below the vocabulary size %lld: "
                          "the file changed while in use", d->name, tok, (long long)d->vocab);
        break;
      }
      if (t < T) inputs[b * T + t] = (int32_t)tok;
      if (t > 0) targets[b * T + t - 1] = (int32_t)tok;
    }
  }
  free(buf);
  return st;
}

double clmoe_lr_at(double lr, double min_lr, int64_t warmup, int64_t steps, int64_t s)
{
  if (warmup > 0 && s < warmup) return lr * (double)(s + 1) / (double)warmup;
  if (steps <= warmup) return lr;
  double p = (double)(s - warmup) / (double)(steps - warmup);
  if (p > 1.0) p = 1.0;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(3.14159265358979323846 * p));
}
