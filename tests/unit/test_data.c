/* CUnit suite: training data (bytes, shards, llm.c shards, MQAR), deterministic batches,
 * bad files, the shard writer, the learning-rate schedule. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_common.h"

static char dir[128]; /* a fresh temporary directory for this run */

static const char *path_of(const char *name)
{
  static char p[256];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return p;
}

static void write_file(const char *name, const void *data, size_t n)
{
  FILE *f = fopen(path_of(name), "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(data, 1, n, f), n);
  fclose(f);
}

/* A shard header (little-endian fields), then n tokens of `size` bytes. */
static void write_shard(const char *name, uint32_t version, uint32_t size, uint64_t count, uint32_t vocab,
                        const uint32_t *tok, size_t n)
{
  unsigned char buf[32 + 4 * 64] = "CLMOETOK";
  for (int i = 0; i < 4; i++) buf[8 + i] = (unsigned char)(version >> 8 * i);
  for (int i = 0; i < 4; i++) buf[12 + i] = (unsigned char)(size >> 8 * i);
  for (int i = 0; i < 8; i++) buf[16 + i] = (unsigned char)(count >> 8 * i);
  for (int i = 0; i < 4; i++) buf[24 + i] = (unsigned char)(vocab >> 8 * i);
  memset(buf + 28, 0, 4);
  for (size_t t = 0; t < n; t++)
    for (uint32_t i = 0; i < size; i++) buf[32 + t * size + i] = (unsigned char)(tok[t] >> 8 * i);
  write_file(name, buf, 32 + n * size);
}

static void test_bytes(void)
{
  const char text[] = "the quick brown fox jumps over the lazy dog, again and again and again.";
  write_file("text.txt", text, sizeof text - 1);
  clmoe_data *d = NULL;
  TEST_OK(clmoe_data_open(path_of("text.txt"), &d));
  CU_ASSERT_STRING_EQUAL(clmoe_data_kind(d), "bytes");
  CU_ASSERT_EQUAL(clmoe_data_vocab(d), 256);
  const int64_t n = (int64_t)sizeof text - 1, nval = clmoe_data_tokens(d, CLMOE_SPLIT_VAL);
  CU_ASSERT_EQUAL(clmoe_data_tokens(d, CLMOE_SPLIT_TRAIN) + nval, n);
  CU_ASSERT(nval >= 1);
  int32_t in[4 * 8], tg[4 * 8], in2[4 * 8], tg2[4 * 8];
  TEST_OK(clmoe_data_batch(d, CLMOE_SPLIT_TRAIN, 7, 3, 4, 8, in, tg));
  TEST_OK(clmoe_data_batch(d, CLMOE_SPLIT_TRAIN, 7, 3, 4, 8, in2, tg2));
  CU_ASSERT_EQUAL(memcmp(in, in2, sizeof in), 0); /* the same (seed, index): the same batch */
  for (int b = 0; b < 4; b++)
    for (int t = 0; t < 8; t++) {
      if (t + 1 < 8) CU_ASSERT_EQUAL(tg[b * 8 + t], in[b * 8 + t + 1]); /* next token */
      /* every window is a substring of the training part */
      CU_ASSERT(in[b * 8 + t] >= 0 && in[b * 8 + t] < 256);
    }
  char window[9];
  for (int t = 0; t < 8; t++) window[t] = (char)in[t];
  window[8] = '\0';
  CU_ASSERT_PTR_NOT_NULL(strstr(text, window));
  TEST_OK(clmoe_data_batch(d, CLMOE_SPLIT_TRAIN, 7, 4, 4, 8, in2, tg2));
  CU_ASSERT_NOT_EQUAL(memcmp(in, in2, sizeof in), 0);
  clmoe_data_close(d);
}

static void test_shard(void)
{
  uint32_t tok[40];
  for (int i = 0; i < 40; i++) tok[i] = (uint32_t)(i * 37 % 1000);
  write_shard("ok16.tok", 1, 2, 40, 1000, tok, 40);
  write_shard("ok32.tok", 1, 4, 40, 100000, tok, 40);
  for (int f = 0; f < 2; f++) {
    clmoe_data *d = NULL;
    TEST_OK(clmoe_data_open(path_of(f ? "ok32.tok" : "ok16.tok"), &d));
    CU_ASSERT_STRING_EQUAL(clmoe_data_kind(d), "shard");
    CU_ASSERT_EQUAL(clmoe_data_vocab(d), f ? 100000 : 1000);
    int32_t in[2 * 5], tg[2 * 5];
    TEST_OK(clmoe_data_batch(d, CLMOE_SPLIT_VAL, 1, 0, 2, 5, in, tg));
    /* Validation windows come from the last 5% (2 tokens: 74 % 1000 ... wraps). */
    for (int i = 0; i < 10; i++) CU_ASSERT(in[i] == (int32_t)tok[38] || in[i] == (int32_t)tok[39]);
    clmoe_data_close(d);
  }
}

static void test_bad_files(void)
{
  uint32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  write_shard("version.tok", 2, 2, 8, 100, tok, 8);
  write_shard("size.tok", 1, 3, 8, 100, tok, 8);
  write_shard("truncated.tok", 1, 2, 9, 100, tok, 8);
  write_shard("padded.tok", 1, 2, 7, 100, tok, 8);
  write_shard("vocab.tok", 1, 2, 8, 5, tok, 8);
  write_shard("vocab16.tok", 1, 2, 8, 70000, tok, 8);
  write_shard("vocab32.tok", 1, 4, 8, 0x80000000u, tok, 8);
  write_file("header.tok", "CLMOETOK\1\0", 10);
  write_file("empty.txt", "", 0);
  write_file("one.txt", "x", 1);
  const struct { const char *file, *expect; } bad[] = {
      {"version.tok", "shard version 2"},
      {"size.tok", "token size 3 bytes"},
      {"truncated.tok", "promises 9 tokens"},
      {"padded.tok", "promises 7 tokens"},
      {"vocab.tok", "token 4 is 5, not below the vocabulary size 5"},
      {"vocab16.tok", "vocabulary size 70000 does not fit 2-byte tokens"},
      {"vocab32.tok", "vocabulary size 2147483648 is above 2^31 - 1"},
      {"header.tok", "needs a 32-byte header"},
      {"empty.txt", "the file is empty"},
      {"one.txt", "too few to train on"},
      {"missing.txt", "cannot open"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    clmoe_data *d = NULL;
    clmoe_status st = clmoe_data_open(path_of(bad[i].file), &d);
    int ok = st != CLMOE_OK && d == NULL && strstr(clmoe_last_error(), bad[i].file) &&
             strstr(clmoe_last_error(), bad[i].expect);
    if (!ok) fprintf(stderr, "\n  %s: \"%s\"\n", bad[i].file, clmoe_last_error());
    CU_ASSERT(ok);
  }
  clmoe_data *d = NULL;
  CU_ASSERT_NOT_EQUAL(clmoe_data_open(dir, &d), CLMOE_OK); /* a directory */
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "not a regular file"));
}

/* An llm.c shard: 256 int32 (magic, version, count, zeros) then `count` tokens of `size`
 * bytes (n of them written). */
static void write_llmc(const char *name, uint32_t magic, uint32_t version, uint32_t count, int size,
                       const uint32_t *tok, size_t n)
{
  unsigned char *buf = calloc(1, 1024 + 4 * n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  const uint32_t head[3] = {magic, version, count};
  for (int f = 0; f < 3; f++)
    for (int i = 0; i < 4; i++) buf[4 * f + i] = (unsigned char)(head[f] >> 8 * i);
  for (size_t t = 0; t < n; t++)
    for (int i = 0; i < size; i++) buf[1024 + t * (size_t)size + (size_t)i] = (unsigned char)(tok[t] >> 8 * i);
  write_file(name, buf, 1024 + n * (size_t)size);
  free(buf);
}

/* llm.c shards are read as tokens (GPT-2's uint16, Llama-3's uint32), their vocabulary the
 * largest token + 1; other llm.c files and versions are refused by their magic number. */
static void test_llmc(void)
{
  uint32_t tok[60];
  for (int i = 0; i < 60; i++) tok[i] = (uint32_t)(i * 7919 % 50257);
  write_llmc("gpt2.bin", 20240520, 1, 60, 2, tok, 60);
  for (int i = 0; i < 60; i++) tok[i] = (uint32_t)(i * 104729 % 128256);
  write_llmc("llama3.bin", 20240801, 7, 60, 4, tok, 60);
  for (int f = 0; f < 2; f++) {
    clmoe_data *d = NULL;
    TEST_OK(clmoe_data_open(path_of(f ? "llama3.bin" : "gpt2.bin"), &d));
    CU_ASSERT_STRING_EQUAL(clmoe_data_kind(d), "llm.c shard");
    uint32_t top = 0;
    for (int i = 0; i < 60; i++) {
      const uint32_t t = f ? (uint32_t)(i * 104729 % 128256) : (uint32_t)(i * 7919 % 50257);
      top = t > top ? t : top;
    }
    CU_ASSERT_EQUAL(clmoe_data_vocab(d), (int64_t)top + 1);
    CU_ASSERT_EQUAL(clmoe_data_tokens(d, CLMOE_SPLIT_TRAIN) + clmoe_data_tokens(d, CLMOE_SPLIT_VAL), 60);
    int32_t in[3 * 8], tg[3 * 8];
    TEST_OK(clmoe_data_batch(d, CLMOE_SPLIT_TRAIN, 5, 0, 3, 8, in, tg));
    for (int b = 0; b < 3; b++) { /* each window is a run of the file's tokens */
      int start = -1;
      for (int i = 0; i + 8 <= 57 && start < 0; i++) {
        int same = 1;
        for (int t = 0; t < 8; t++) {
          const uint32_t want = f ? (uint32_t)((i + t) * 104729 % 128256) : (uint32_t)((i + t) * 7919 % 50257);
          same &= in[b * 8 + t] == (int32_t)want;
        }
        if (same) start = i;
      }
      CU_ASSERT(start >= 0);
    }
    clmoe_data_close(d);
  }
  write_llmc("v2.bin", 20240520, 2, 60, 2, tok, 60);
  write_llmc("model.bin", 20240326, 3, 0, 2, tok, 0);
  write_llmc("tokenizer.bin", 20240328, 2, 0, 2, tok, 0);
  write_llmc("short.bin", 20240520, 1, 61, 2, tok, 60);
  write_file("header.bin", "\x88\xd8\x34\x01\x01\0\0\0\x10\0\0\0", 12); /* 20240520, 1, 16 */
  const struct { const char *file, *expect; } bad[] = {
      {"v2.bin", "llm.c token shard (magic 20240520) of version 2"},
      {"model.bin", "an llm.c model checkpoint file (magic 20240326)"},
      {"tokenizer.bin", "an llm.c tokenizer file"},
      {"short.bin", "promises 61 tokens"},
      {"header.bin", "needs a 1024-byte header"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    clmoe_data *d = NULL;
    const clmoe_status st = clmoe_data_open(path_of(bad[i].file), &d);
    const int ok = st != CLMOE_OK && d == NULL && strstr(clmoe_last_error(), bad[i].expect);
    if (!ok) fprintf(stderr, "\n  %s: \"%s\"\n", bad[i].file, clmoe_last_error());
    CU_ASSERT(ok);
  }
}

/* The shard writer: what it writes reads back (uint16 and uint32 tokens), an id outside the
 * vocabulary is refused, and an aborted shard leaves nothing behind. */
static void test_shard_writer(void)
{
  static const int64_t vocabs[2] = {1000, 200000};
  for (int f = 0; f < 2; f++) {
    clmoe_shard_writer *w = NULL;
    TEST_OK(clmoe_shard_create(path_of("written.tok"), vocabs[f], &w));
    int32_t ids[70000];
    for (int i = 0; i < 70000; i++) ids[i] = (int32_t)((int64_t)i * 7919 % vocabs[f]);
    TEST_OK(clmoe_shard_append(w, ids, 30000)); /* in two parts, across the writer's buffer */
    TEST_OK(clmoe_shard_append(w, ids + 30000, 40000));
    CU_ASSERT_EQUAL(clmoe_shard_count(w), 70000);
    const int32_t outside = (int32_t)vocabs[f];
    CU_ASSERT_EQUAL(clmoe_shard_append(w, &outside, 1), CLMOE_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "token 70000"));
    TEST_OK(clmoe_shard_finish(w));
    struct stat s;
    CU_ASSERT_EQUAL(stat(path_of("written.tok"), &s), 0);
    CU_ASSERT_EQUAL(s.st_size, 32 + 70000 * (f ? 4 : 2));
    clmoe_data *d = NULL;
    TEST_OK(clmoe_data_open(path_of("written.tok"), &d));
    CU_ASSERT_STRING_EQUAL(clmoe_data_kind(d), "shard");
    CU_ASSERT_EQUAL(clmoe_data_vocab(d), vocabs[f]);
    CU_ASSERT_EQUAL(clmoe_data_tokens(d, CLMOE_SPLIT_TRAIN) + clmoe_data_tokens(d, CLMOE_SPLIT_VAL), 70000);
    clmoe_data_close(d);
    FILE *fp = fopen(path_of("written.tok"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    int same = 1;
    unsigned char h[32], t[4];
    CU_ASSERT_EQUAL(fread(h, 1, 32, fp), 32);
    for (int i = 0; i < 70000 && same; i++) {
      const int size = f ? 4 : 2;
      same = fread(t, 1, (size_t)size, fp) == (size_t)size;
      uint32_t v = 0;
      for (int b = size - 1; b >= 0; b--) v = v << 8 | t[b];
      same &= v == (uint32_t)ids[i];
    }
    fclose(fp);
    CU_ASSERT(same);
  }
  clmoe_shard_writer *w = NULL;
  TEST_OK(clmoe_shard_create(path_of("aborted.tok"), 100, &w));
  const int32_t one = 5;
  TEST_OK(clmoe_shard_append(w, &one, 1));
  clmoe_shard_abort(w);
  struct stat s;
  CU_ASSERT_NOT_EQUAL(stat(path_of("aborted.tok"), &s), 0);
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path_of("aborted.tok"), (long)getpid());
  CU_ASSERT_NOT_EQUAL(stat(tmp, &s), 0);
  CU_ASSERT_EQUAL(clmoe_shard_create(path_of("v.tok"), 1, &w), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_shard_create("/nonexistent-dir/x.tok", 100, &w), CLMOE_ERR_IO);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "cannot create"));
}

/* A file changed under an open clmoe_data: truncated (the size differs), or rewritten with
 * the same size (the modification time differs): the next batch is an error naming the
 * file, never a signal; the batch before the change is served. */
static void test_changed_file(void)
{
  char text[4096];
  for (size_t i = 0; i < sizeof text; i++) text[i] = (char)('a' + i % 26);
  for (int how = 0; how < 2; how++) {
    write_file("changing.txt", text, sizeof text);
    clmoe_data *d = NULL;
    int32_t in[4 * 64], tg[4 * 64];
    TEST_OK(clmoe_data_open(path_of("changing.txt"), &d));
    TEST_OK(clmoe_data_batch(d, CLMOE_SPLIT_TRAIN, 1, 0, 4, 64, in, tg));
    if (how == 0) {
      CU_ASSERT_EQUAL(truncate(path_of("changing.txt"), 100), 0);
    } else {
      text[0] = 'Z';
      write_file("changing.txt", text, sizeof text);
      struct timespec later[2] = {{0, UTIME_OMIT}, {time(NULL) + 10, 0}};
      CU_ASSERT_EQUAL(utimensat(AT_FDCWD, path_of("changing.txt"), later, 0), 0);
    }
    CU_ASSERT_EQUAL(clmoe_data_batch(d, CLMOE_SPLIT_TRAIN, 1, 1, 4, 64, in, tg), CLMOE_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "changing.txt"));
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), how ? "modified while in use" : "changed while in use"));
    clmoe_data_close(d);
  }
}

/* MQAR: every scored target is the value paired with the question's key earlier in the
 * same sequence. */
static void test_mqar(void)
{
  clmoe_mqar task = {64, 64, 8, 4};
  clmoe_data *d = NULL;
  TEST_OK(clmoe_data_mqar(&task, &d));
  CU_ASSERT_EQUAL(clmoe_data_vocab(d), 2 + 64 + 64);
  enum { B = 5, T = 40 };
  int32_t in[B * T], tg[B * T];
  TEST_OK(clmoe_data_batch(d, CLMOE_SPLIT_TRAIN, 3, 11, B, T, in, tg));
  int scored = 0;
  for (int b = 0; b < B; b++) {
    const int32_t *s = in + b * T, *g = tg + b * T;
    CU_ASSERT_EQUAL(s[16], 1); /* the separator after 8 pairs */
    for (int t = 0; t < T; t++) {
      if (g[t] < 0) continue;
      scored++;
      int found = 0;
      for (int p = 0; p < 16; p += 2)
        if (s[p] == s[t]) found = g[t] == s[p + 1];
      CU_ASSERT(found);
    }
  }
  CU_ASSERT_EQUAL(scored, B * 4);
  clmoe_mqar bad = {4, 4, 8, 2};
  clmoe_data *d2 = NULL;
  CU_ASSERT_EQUAL(clmoe_data_mqar(&bad, &d2), CLMOE_ERR_INVALID_ARGUMENT);
  clmoe_data_close(d);
}

static void test_lr(void)
{
  /* Warm-up 10 steps to 1e-3, cosine to 1e-4 at step 110. */
  CU_ASSERT(fabs(clmoe_lr_at(1e-3, 1e-4, 10, 110, 0) - 1e-4) < 1e-12);
  CU_ASSERT(fabs(clmoe_lr_at(1e-3, 1e-4, 10, 110, 9) - 1e-3) < 1e-12);
  CU_ASSERT(fabs(clmoe_lr_at(1e-3, 1e-4, 10, 110, 10) - 1e-3) < 1e-12);
  CU_ASSERT(fabs(clmoe_lr_at(1e-3, 1e-4, 10, 110, 60) - 5.5e-4) < 1e-12); /* half way */
  CU_ASSERT(fabs(clmoe_lr_at(1e-3, 1e-4, 10, 110, 110) - 1e-4) < 1e-12);
  CU_ASSERT(fabs(clmoe_lr_at(1e-3, 1e-4, 10, 110, 500) - 1e-4) < 1e-12);
}

static void add_tests(CU_pSuite suite)
{
  snprintf(dir, sizeof dir, "%s", test_tmpdir("data"));
  CU_add_test(suite, "byte files", test_bytes);
  CU_add_test(suite, "token shards", test_shard);
  CU_add_test(suite, "bad data files", test_bad_files);
  CU_add_test(suite, "llm.c token shards", test_llmc);
  CU_add_test(suite, "the shard writer", test_shard_writer);
  CU_add_test(suite, "a file changed while open", test_changed_file);
  CU_add_test(suite, "MQAR task", test_mqar);
  CU_add_test(suite, "learning-rate schedule", test_lr);
}

int main(void) { return test_main("data", add_tests); }
