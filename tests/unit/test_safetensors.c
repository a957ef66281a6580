/* CUnit suite: safetensors files. Bit-exact round trips (0-d and empty tensors, metadata), a
 * file built here byte by byte, tensors larger than the reader's chunks, and the writer's
 * errors. (Corrupt files: test_safetensors_corrupt.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st_fixture.h"

static const char *dir; /* test_tmpdir("st") */

/* -1 when the file does not exist. */
static int64_t file_size(const char *path)
{
  struct stat sb;
  return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

/* Loads `name`, checks its dtype and copies its bytes to host. */
static void load_read(clmoe_st_file *f, const char *name, int flags, clmoe_dtype dtype, void *host, size_t bytes)
{
  clmoe_tensor t;
  TEST_OK(clmoe_st_load(f, name, test_ctx, flags, &t));
  CU_ASSERT_EQUAL(t.dtype, dtype);
  TEST_OK(clmoe_tensor_read(&t, host, bytes));
  clmoe_tensor_destroy(&t);
}

/* ---- round trip ----------------------------------------------------------------------- */
static void test_roundtrip(void)
{
  const char *p = path_of("round.safetensors");
  float x[6] = {1.0f, -2.5f, 3.14159f, 0.0f, -0.0f, 1e-40f}, scalar = 42.5f, got[6];
  uint16_t hb[4] = {0x3f80, 0xc000, 0x7f80, 0x0001}, hb2[4];
  int32_t ix[6] = {-7, 0, 2147483647, (int32_t)0x80000000u, 5, 6}, ix2[6];
  int64_t i64[3] = {0, 5, 12};
  uint16_t f16[4] = {0x3c00, 0x0001, 0xfc00, 0x7bff}; /* 1, 2^-24, -inf, 65504 */
  clmoe_tensor a, b, c, s, e;
  TEST_OK(clmoe_tensor_create(test_ctx, &a, CLMOE_F32, 2, (int64_t[]){2, 3}));
  TEST_OK(clmoe_tensor_create(test_ctx, &b, CLMOE_BF16, 1, (int64_t[]){4}));
  TEST_OK(clmoe_tensor_create(test_ctx, &c, CLMOE_I32, 3, (int64_t[]){3, 1, 2}));
  TEST_OK(clmoe_tensor_create(test_ctx, &s, CLMOE_F32, 0, NULL));
  TEST_OK(clmoe_tensor_create(test_ctx, &e, CLMOE_F32, 2, (int64_t[]){0, 5}));
  TEST_OK(clmoe_tensor_write(&a, x, sizeof x));
  TEST_OK(clmoe_tensor_write(&b, hb, sizeof hb));
  TEST_OK(clmoe_tensor_write(&c, ix, sizeof ix));
  TEST_OK(clmoe_tensor_write(&s, &scalar, sizeof scalar));

  clmoe_st_writer *w;
  TEST_OK(clmoe_st_writer_create(p, &w));
  TEST_OK(clmoe_st_writer_add(w, "bf", &b)); /* 2-byte data first: the writer aligns */
  TEST_OK(clmoe_st_writer_add(w, "layers.0.weight", &a));
  TEST_OK(clmoe_st_writer_add(w, "ints", &c));
  TEST_OK(clmoe_st_writer_add(w, "scalar", &s));
  TEST_OK(clmoe_st_writer_add(w, "empty", &e));
  TEST_OK(clmoe_st_writer_add_host(w, "cu", CLMOE_ST_I64, 1, (int64_t[]){3}, i64));
  TEST_OK(clmoe_st_writer_add_host(w, "half", CLMOE_ST_F16, 1, (int64_t[]){4}, f16));
  TEST_OK(clmoe_st_writer_add_host(w, "q\"uote\\d\n\xc3\xa9", CLMOE_ST_F32, 1, (int64_t[]){1}, &scalar));
  TEST_OK(clmoe_st_writer_metadata(w, "format", "pt"));
  TEST_OK(clmoe_st_writer_metadata(w, "note", "first"));
  TEST_OK(clmoe_st_writer_metadata(w, "note", "\"quoted\"\ttab \xe2\x82\xac"));
  TEST_OK(clmoe_st_writer_finish(w));
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
  CU_ASSERT_EQUAL(file_size(tmp), -1);

  clmoe_st_file *f;
  TEST_OK(clmoe_st_open(p, &f));
  CU_ASSERT_STRING_EQUAL(clmoe_st_path(f), p);
  CU_ASSERT_EQUAL(clmoe_st_count(f), 8);
  clmoe_st_info info;
  clmoe_st_info_at(f, 0, &info);
  CU_ASSERT_STRING_EQUAL(info.name, "bf"); /* header order = order added */
  CU_ASSERT_EQUAL(info.offset % 2, 0);
  TEST_OK(clmoe_st_info_of(f, "layers.0.weight", &info));
  CU_ASSERT(info.dtype == CLMOE_ST_F32 && info.ndim == 2 && info.shape[0] == 2 && info.shape[1] == 3);
  CU_ASSERT(info.offset % 8 == 0 && info.bytes == 24);
  TEST_OK(clmoe_st_info_of(f, "scalar", &info));
  CU_ASSERT(info.ndim == 0 && info.numel == 1 && info.bytes == 4);
  TEST_OK(clmoe_st_info_of(f, "empty", &info));
  CU_ASSERT(info.ndim == 2 && info.numel == 0 && info.bytes == 0);
  CU_ASSERT(clmoe_st_has(f, "q\"uote\\d\n\xc3\xa9"));
  CU_ASSERT_FALSE(clmoe_st_has(f, "nope"));
  CU_ASSERT_EQUAL(clmoe_st_metadata_count(f), 4); /* and the two checksum entries */
  CU_ASSERT_PTR_NOT_NULL(clmoe_st_metadata(f, CLMOE_ST_CRC_TENSORS));
  CU_ASSERT_PTR_NOT_NULL(clmoe_st_metadata(f, CLMOE_ST_CRC_METADATA));
  CU_ASSERT_STRING_EQUAL(clmoe_st_metadata(f, "format"), "pt");
  CU_ASSERT_STRING_EQUAL(clmoe_st_metadata(f, "note"), "\"quoted\"\ttab \xe2\x82\xac");
  CU_ASSERT_PTR_NULL(clmoe_st_metadata(f, "absent"));

  /* Bit-exact: compare the loaded tensors' bytes with what was written. */
  clmoe_tensor t;
  load_read(f, "layers.0.weight", CLMOE_ST_LOAD_NATIVE, CLMOE_F32, got, sizeof got);
  CU_ASSERT_EQUAL(memcmp(got, x, sizeof x), 0);
  load_read(f, "bf", CLMOE_ST_LOAD_NATIVE, CLMOE_BF16, hb2, sizeof hb2);
  CU_ASSERT_EQUAL(memcmp(hb, hb2, sizeof hb), 0);
  load_read(f, "bf", CLMOE_ST_LOAD_F32, CLMOE_F32, got, 4 * sizeof(float));
  for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(got[i], clmoe_f32_from_bf16(hb[i]));
  load_read(f, "ints", CLMOE_ST_LOAD_NATIVE, CLMOE_I32, ix2, sizeof ix2);
  CU_ASSERT_EQUAL(memcmp(ix, ix2, sizeof ix), 0);
  load_read(f, "scalar", CLMOE_ST_LOAD_NATIVE, CLMOE_F32, got, sizeof(float));
  CU_ASSERT_EQUAL(got[0], scalar);
  load_read(f, "cu", CLMOE_ST_LOAD_NATIVE, CLMOE_I32, ix2, 3 * sizeof(int32_t)); /* I64 -> i32 */
  CU_ASSERT(ix2[0] == 0 && ix2[1] == 5 && ix2[2] == 12);
  load_read(f, "half", CLMOE_ST_LOAD_NATIVE, CLMOE_F32, got, 4 * sizeof(float)); /* F16: exact */
  CU_ASSERT(got[0] == 1.0f && got[1] == ldexpf(1.0f, -24) && isinf(got[2]) && got[2] < 0 && got[3] == 65504.0f);
  TEST_OK(clmoe_st_load(f, "empty", test_ctx, CLMOE_ST_LOAD_NATIVE, &t));
  CU_ASSERT(t.ndim == 2 && t.shape[0] == 0 && t.shape[1] == 5 && clmoe_tensor_numel(&t) == 0);
  clmoe_tensor_destroy(&t);

  /* Into an existing tensor: f32 data into a bf16 destination rounds; shapes must match. */
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_BF16, 2, (int64_t[]){2, 3}));
  TEST_OK(clmoe_st_load_into(f, "layers.0.weight", &t));
  uint16_t hb6[6];
  TEST_OK(clmoe_tensor_read(&t, hb6, sizeof hb6));
  for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(hb6[i], clmoe_bf16_from_f32(x[i]));
  CU_ASSERT_EQUAL(clmoe_st_load_into(f, "bf", &t), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "tensor 'bf' is BF16 [4]"));
  CU_ASSERT_EQUAL(clmoe_st_load_into(f, "half", &t), CLMOE_ERR_SHAPE);
  clmoe_tensor_destroy(&t);
  /* Integers do not go into bf16, floats do not go into i32. */
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_I32, 2, (int64_t[]){2, 3}));
  CU_ASSERT_EQUAL(clmoe_st_load_into(f, "layers.0.weight", &t), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "cannot be converted to i32"));
  clmoe_tensor_destroy(&t);

  /* Host reads. */
  float fh[6];
  unsigned char raw[24];
  TEST_OK(clmoe_st_read(f, "layers.0.weight", raw, sizeof raw));
  CU_ASSERT_EQUAL(memcmp(raw, x, sizeof raw), 0); /* little-endian host */
  CU_ASSERT_EQUAL(clmoe_st_read(f, "layers.0.weight", raw, 20), CLMOE_ERR_SHAPE);
  TEST_OK(clmoe_st_read_f32(f, "cu", fh, 3));
  CU_ASSERT(fh[0] == 0.0f && fh[1] == 5.0f && fh[2] == 12.0f);
  CU_ASSERT_EQUAL(clmoe_st_read_f32(f, "cu", fh, 4), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_st_load(f, "missing", test_ctx, 0, &t), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "has no tensor 'missing'"));
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), p));
  clmoe_st_close(f);

  /* Writing again replaces the file as a whole. */
  TEST_OK(clmoe_st_writer_create(p, &w));
  TEST_OK(clmoe_st_writer_finish(w));
  TEST_OK(clmoe_st_open(p, &f));
  CU_ASSERT_EQUAL(clmoe_st_count(f), 0);
  CU_ASSERT_EQUAL(file_size(p) % 8, 0);
  clmoe_st_close(f);
  clmoe_tensor_destroy(&a), clmoe_tensor_destroy(&b), clmoe_tensor_destroy(&c);
  clmoe_tensor_destroy(&s), clmoe_tensor_destroy(&e);
}

/* A file built byte by byte here: padding spaces, escapes in a name, F16 subnormals,
 * unknown fields, a gap between tensors. */
static void test_hand_built(void)
{
  const char *p = path_of("hand.safetensors");
  const char *json =
      "{\"__metadata__\": {\"a\": \"b\\u00e9\\ud83d\\ude00\"},\n"
      " \"w\\u0031\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8], \"extra\": [1, {\"x\": null}]},\n"
      " \"h\": {\"shape\": [3], \"dtype\": \"F16\", \"data_offsets\": [8, 14]},\n"
      " \"ids\": {\"dtype\": \"I64\", \"shape\": [2], \"data_offsets\": [16, 32]},\n"
      " \"big\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [32, 40]}}      ";
  /* w1 = {0.5, -3} (F32 little-endian), h = {1, the largest subnormal, -0}, a gap of two
   * bytes (allowed), ids = {7, -1}, big = 2^32. */
  const unsigned char data[40] = {0, 0, 0, 0x3f, 0, 0, 0x40, 0xc0, 0x00, 0x3c, 0xff, 0x03, 0x00, 0x80,
                                  0xee, 0xee, 7, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0, 0, 0, 0, 1, 0, 0, 0};
  size_t n = strlen(json);
  unsigned char body[600];
  CU_ASSERT_FATAL(n + sizeof data <= sizeof body);
  memcpy(body, json, n);
  memcpy(body + n, data, sizeof data);
  write_raw(p, n, body, n + sizeof data);

  clmoe_st_file *f;
  TEST_OK(clmoe_st_open(p, &f));
  CU_ASSERT_EQUAL(clmoe_st_count(f), 4);
  CU_ASSERT_STRING_EQUAL(clmoe_st_metadata(f, "a"), "b\xc3\xa9\xf0\x9f\x98\x80");
  float got[3];
  TEST_OK(clmoe_st_read_f32(f, "w1", got, 2));
  CU_ASSERT(got[0] == 0.5f && got[1] == -3.0f);
  TEST_OK(clmoe_st_read_f32(f, "h", got, 3));
  CU_ASSERT(got[0] == 1.0f && got[1] == ldexpf(1023.0f, -24) && got[2] == 0.0f && signbit(got[2]));
  clmoe_tensor t;
  TEST_OK(clmoe_st_load(f, "ids", test_ctx, CLMOE_ST_LOAD_NATIVE, &t));
  int32_t ids[2];
  TEST_OK(clmoe_tensor_read(&t, ids, sizeof ids));
  CU_ASSERT(ids[0] == 7 && ids[1] == -1);
  clmoe_tensor_destroy(&t);
  CU_ASSERT_EQUAL(clmoe_st_load(f, "big", test_ctx, CLMOE_ST_LOAD_NATIVE, &t), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "tensor 'big': element 0 = 4294967296 does not fit in i32"));
  CU_ASSERT_PTR_NULL(t.buf);
  TEST_OK(clmoe_st_load(f, "big", test_ctx, CLMOE_ST_LOAD_F32, &t));
  TEST_OK(clmoe_tensor_read(&t, got, sizeof(float)));
  CU_ASSERT_EQUAL(got[0], 4294967296.0f);
  clmoe_tensor_destroy(&t);
  clmoe_st_close(f);

  /* The file shrinks after it was opened: loading fails cleanly. */
  TEST_OK(clmoe_st_open(p, &f));
  CU_ASSERT_EQUAL(truncate(p, (off_t)(8 + n + 20)), 0);
  CU_ASSERT_EQUAL(clmoe_st_load(f, "ids", test_ctx, CLMOE_ST_LOAD_NATIVE, &t), CLMOE_ERR_IO);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "the file ends"));
  clmoe_st_close(f);
}

/* Tensors larger than the reader's 4 MB chunks, with and without conversion. */
static void test_large(void)
{
  const char *p = path_of("large.safetensors");
  const size_t n = 3000001;
  uint16_t *h = malloc(n * sizeof *h);
  float *x = malloc(n * sizeof *x), *got = malloc(n * sizeof *got);
  CU_ASSERT_FATAL(h && x && got);
  for (size_t i = 0; i < n; i++) h[i] = (uint16_t)(0x3c00 | (i & 1023)), x[i] = (float)i * 0.25f - 7.0f;
  clmoe_st_writer *w;
  TEST_OK(clmoe_st_writer_create(p, &w));
  TEST_OK(clmoe_st_writer_add_host(w, "half", CLMOE_ST_F16, 1, (int64_t[]){(int64_t)n}, h));
  TEST_OK(clmoe_st_writer_add_host(w, "f", CLMOE_ST_F32, 2, (int64_t[]){1, (int64_t)n}, x));
  TEST_OK(clmoe_st_writer_finish(w));
  clmoe_st_file *f;
  clmoe_tensor t;
  TEST_OK(clmoe_st_open(p, &f));
  load_read(f, "half", CLMOE_ST_LOAD_NATIVE, CLMOE_F32, got, n * sizeof *got);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != 1.0f + (float)(i & 1023) / 1024.0f;
  CU_ASSERT_EQUAL(bad, 0);
  load_read(f, "f", CLMOE_ST_LOAD_NATIVE, CLMOE_F32, got, n * sizeof *got);
  CU_ASSERT_EQUAL(memcmp(got, x, n * sizeof *x), 0);
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_BF16, 2, (int64_t[]){1, (int64_t)n}));
  TEST_OK(clmoe_st_load_into(f, "f", &t));
  TEST_OK(clmoe_tensor_read_f32(&t, got));
  bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != clmoe_f32_from_bf16(clmoe_bf16_from_f32(x[i]));
  CU_ASSERT_EQUAL(bad, 0);
  clmoe_tensor_destroy(&t);
  TEST_OK(clmoe_st_read_f32(f, "half", got, n));
  CU_ASSERT(got[n - 1] == 1.0f + (float)((n - 1) & 1023) / 1024.0f);
  clmoe_st_close(f);
  unlink(p);
  free(h), free(x), free(got);
}

static void test_writer_errors(void)
{
  const char *p = path_of("w.safetensors");
  clmoe_st_writer *w;
  float x = 1;
  TEST_OK(clmoe_st_writer_create(p, &w));
  TEST_OK(clmoe_st_writer_add_host(w, "a", CLMOE_ST_F32, 0, NULL, &x));
  CU_ASSERT_EQUAL(clmoe_st_writer_add_host(w, "a", CLMOE_ST_F32, 0, NULL, &x), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "tensor 'a' was already added"));
  CU_ASSERT_EQUAL(clmoe_st_writer_add_host(w, "", CLMOE_ST_F32, 0, NULL, &x), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_st_writer_add_host(w, "__metadata__", CLMOE_ST_F32, 0, NULL, &x), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_st_writer_add_host(w, "bad\xff", CLMOE_ST_F32, 0, NULL, &x), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_st_writer_add_host(w, "neg", CLMOE_ST_F32, 1, (int64_t[]){-1}, &x), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_st_writer_metadata(w, "k", "\xc3"), CLMOE_ERR_INVALID_ARGUMENT);
  /* A non-contiguous device tensor cannot be downloaded as is. */
  clmoe_tensor t, s;
  TEST_OK(clmoe_tensor_create(test_ctx, &t, CLMOE_F32, 2, (int64_t[]){2, 4}));
  TEST_OK(clmoe_tensor_slice(&t, &s, 1, 1, 2));
  CU_ASSERT_EQUAL(clmoe_st_writer_add(w, "slice", &s), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "writing tensor 'slice'"));
  clmoe_tensor_destroy(&t);
  TEST_OK(clmoe_st_writer_finish(w)); /* the failed adds left the writer usable */
  clmoe_st_file *f;
  TEST_OK(clmoe_st_open(p, &f));
  CU_ASSERT_EQUAL(clmoe_st_count(f), 1);
  clmoe_st_close(f);

  /* A directory that does not exist: an I/O error naming the path. */
  char missing[600];
  snprintf(missing, sizeof missing, "%s/no/such/dir.safetensors", dir);
  TEST_OK(clmoe_st_writer_create(missing, &w));
  CU_ASSERT_EQUAL(clmoe_st_writer_finish(w), CLMOE_ERR_IO);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "cannot create"));
  /* The destination is a directory: rename fails, the temporary file is removed and the
   * directory is untouched. */
  char target[600], tmp[700];
  snprintf(target, sizeof target, "%s/adir", dir);
  CU_ASSERT_EQUAL_FATAL(mkdir(target, 0700), 0);
  TEST_OK(clmoe_st_writer_create(target, &w));
  TEST_OK(clmoe_st_writer_add_host(w, "a", CLMOE_ST_F32, 0, NULL, &x));
  CU_ASSERT_EQUAL(clmoe_st_writer_finish(w), CLMOE_ERR_IO);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "cannot rename"));
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", target, (long)getpid());
  CU_ASSERT_EQUAL(file_size(tmp), -1);
  rmdir(target);
  clmoe_st_writer_discard(NULL);
  clmoe_st_close(NULL);
}

static void add_tests(CU_pSuite suite)
{
  dir = test_tmpdir("st");
  CU_add_test(suite, "roundtrip", test_roundtrip);
  CU_add_test(suite, "hand_built", test_hand_built);
  CU_add_test(suite, "large", test_large);
  CU_add_test(suite, "writer_errors", test_writer_errors);
}

int main(void) { return test_main("safetensors", add_tests); }
