/* CUnit suite: safetensors files. Bit-exact round trips (0-d and empty tensors, metadata), a
 * file built here byte by byte, and corrupt files that must each fail with a clear message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_common.h"

static char dir[256]; /* a fresh temporary directory for this run */

static const char *path_of(const char *name)
{
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  return buf;
}

/* An 8-byte little-endian length n, then `len` bytes of body (plain stdio, not our writer). */
static void write_raw(const char *path, uint64_t n, const void *body, size_t len)
{
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  unsigned char len8[8];
  for (int k = 0; k < 8; k++) len8[k] = (unsigned char)(n >> (8 * k));
  CU_ASSERT_EQUAL(fwrite(len8, 1, 8, f), 8);
  if (len) CU_ASSERT_EQUAL(fwrite(body, 1, len, f), len);
  CU_ASSERT_EQUAL(fclose(f), 0);
}

/* A file with header `json` followed by `data_len` bytes of data (0x5a). */
static void write_json(const char *path, const char *json, size_t data_len)
{
  size_t n = strlen(json);
  unsigned char *body = malloc(n + data_len + 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(body);
  memcpy(body, json, n);
  memset(body + n, 0x5a, data_len);
  write_raw(path, n, body, n + data_len);
  free(body);
}

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

/* Opening path must fail with `status` and a message naming the path and holding `what`. */
static int open_fails(const char *path, clmoe_status status, const char *what)
{
  clmoe_st_file *f = (clmoe_st_file *)1;
  clmoe_status st = clmoe_st_open(path, &f);
  int ok = st == status && !f && strstr(clmoe_last_error(), path) && (!what || strstr(clmoe_last_error(), what));
  if (!ok) fprintf(stderr, "\n  %s: %s: %s (expected '%s')\n", path, clmoe_strerror(st), clmoe_last_error(),
                  what ? what : "");
  if (st == CLMOE_OK) clmoe_st_close(f);
  return ok;
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

/* ---- corrupt files ------------------------------------------------------------------- */
typedef struct corrupt_case {
  const char *what;
  const char *json; /* the header; NULL: raw bytes below */
  size_t data_len;
  const char *expect; /* in the message */
} corrupt_case;

/* A tensor entry, a header with one tensor 't', one F32 element at [0, 4]. */
#define E(name, dtype, shape, offs) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offs "}"
#define T1(dtype, shape, offs) "{" E("t", dtype, shape, offs) "}"
#define ONE_F32 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"
#define ONES8 "1,1,1,1,1,1,1,1,"

static const corrupt_case cases[] = {
    {"not JSON", "hello", 0, "not a JSON object: found 'h'"},
    {"unterminated string", "{\"t\": {\"dtype\": \"F32", 0, "unterminated string"},
    {"unterminated object", "{\"t\": " ONE_F32, 4, "found the end of the header"},
    {"trailing comma", "{\"t\": " ONE_F32 ",}", 4, "a trailing comma?"},
    {"trailing comma in shape", T1("F32", "[1,]", "[0,4]"), 4, "shape[1]: expected a non-negative integer, found ']'"},
    {"garbage after the object", "{} x", 0, "unexpected data after"},
    {"dtype a number", "{\"t\":{\"dtype\":5,\"shape\":[],\"data_offsets\":[0,4]}}", 4, "expected a string (dtype), found '5'"},
    {"shape a string", T1("F32", "\"2\"", "[0,8]"), 8, "tensor 't': shape: expected an array of integers, found '\"'"},
    {"shape float", T1("F32", "[2.5]", "[0,8]"), 8, "shape[0] is 2.5, not a non-negative integer"},
    {"shape leading zero", T1("F32", "[02]", "[0,8]"), 8, "shape[0] is 02"},
    {"data_offsets one number", T1("F32", "[1]", "[0]"), 4, "data_offsets: expected two integers"},
    {"data_offsets three numbers", T1("F32", "[1]", "[0,4,8]"), 4, "expected exactly two integers"},
    {"data_offsets an object", T1("F32", "[1]", "{\"a\":1}"), 4, "data_offsets: expected an array"},
    {"tensor a string", "{\"t\": \"F32\"}", 0, "tensor 't': expected an object"},
    {"metadata value a number", "{\"__metadata__\": {\"k\": 1}}", 0, "__metadata__: expected a string (a metadata value"},
    {"metadata an array", "{\"__metadata__\": [\"k\"]}", 0, "__metadata__: expected an object of strings"},
    {"metadata twice", "{\"__metadata__\": {}, \"__metadata__\": {}}", 0, "__metadata__ appears twice"},
    {"metadata key twice", "{\"__metadata__\": {\"k\": \"a\", \"k\": \"b\"}}", 0, "key 'k' appears twice"},
    {"unknown dtype", T1("F4", "[2]", "[0,1]"), 1, "tensor 't': dtype 'F4' is not supported"},
    {"negative dim", T1("F32", "[2, -3]", "[0,8]"), 8, "tensor 't': shape[1] is -3, a negative number"},
    {"huge dim", T1("F32", "[99999999999999999999]", "[0,8]"), 8, "shape[0] is 99999999999999999999, too large"},
    {"numel overflow", T1("F32", "[4294967296, 4294967296]", "[0,8]"), 8, "has too many elements"},
    {"too many dims", T1("U8", "[" ONES8 ONES8 ONES8 ONES8 ONES8 ONES8 ONES8 ONES8 "1]", "[0,1]"), 1, "more than 64 dimensions"},
    {"missing field", "{\"t\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "the field 'data_offsets' is missing"},
    {"field twice", "{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "field 'dtype' appears twice"},
    {"wrong length", T1("F32", "[5, 7]", "[0, 100]"), 140, "tensor 't': data_offsets [0, 100] do not match F32 [5, 7] (140 bytes)"},
    {"end before begin", T1("F32", "[1]", "[8, 4]"), 8, "data_offsets [8, 4] do not match"},
    {"out of range", T1("F32", "[4]", "[0, 16]"), 12, "extend past the end of the data region (12 bytes)"},
    {"truncated data", "{" E("a", "F32", "[2]", "[0,8]") "," E("b", "BF16", "[4]", "[8,16]") "}", 13, "tensor 'b': data_offsets [8, 16] extend past"},
    {"overlapping", "{" E("a", "F32", "[2]", "[0,8]") "," E("b", "U8", "[4]", "[4,8]") "}", 8, "tensors 'a' [0, 8] and 'b' [4, 8] overlap"},
    {"duplicate names", "{" E("a", "F32", "[1]", "[0,4]") "," E("a", "F32", "[1]", "[4,8]") "}", 8, "tensor name 'a' appears more than once"},
    {"empty name", "{\"\": " ONE_F32 "}", 4, "empty name"},
    {"non-UTF-8 name", "{\"a\xff\": " ONE_F32 "}", 4, "invalid UTF-8 byte 0xff"},
    {"overlong UTF-8", "{\"a\xc0\x80\": {}}", 0, "invalid UTF-8 byte 0xc0"},
    {"UTF-8 surrogate", "{\"a\xed\xa0\x80\": {}}", 0, "invalid UTF-8 byte 0xed"},
    {"lone surrogate escape", "{\"a\\ud800\": {}}", 0, "unpaired UTF-16 surrogate"},
    {"NUL escape", "{\"a\\u0000b\": {}}", 0, "NUL character"},
    {"bad escape", "{\"a\\q\": {}}", 0, "bad escape sequence"},
    {"raw control character", "{\"a\tb\": {}}", 0, "control character 0x09"},
    {"deep nesting", "{\"t\": {\"x\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}", 0, "nested more than 32 deep"},
    {"bad literal", "{\"t\": {\"x\": nul}}", 0, "invalid value"},
};

/* Raw headers that JSON text cannot express: lengths and sizes. */
static void corrupt_raw(void)
{
  const char *p = path_of("raw.safetensors");
  FILE *fp = fopen(p, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
  fclose(fp);
  CU_ASSERT(open_fails(p, CLMOE_ERR_FORMAT, "0 bytes, too few")); /* empty file */
  fp = fopen(p, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
  fwrite("\x10\0\0\0\0", 1, 5, fp); /* truncated length */
  fclose(fp);
  CU_ASSERT(open_fails(p, CLMOE_ERR_FORMAT, "5 bytes, too few for the 8-byte header length"));
  write_raw(p, 100, "{}", 2); /* N beyond the file */
  CU_ASSERT(open_fails(p, CLMOE_ERR_FORMAT, "header length 100 is larger than the rest of the file"));
  write_raw(p, UINT64_MAX, "{}", 2); /* N huge */
  CU_ASSERT(open_fails(p, CLMOE_ERR_FORMAT, "header length 18446744073709551615"));
  write_raw(p, 0, NULL, 0); /* N zero */
  CU_ASSERT(open_fails(p, CLMOE_ERR_FORMAT, "is too small"));
  /* N above the 100 MB cap in a (sparse) file that is large enough. */
  write_raw(p, 200000000, "{}", 2);
  if (truncate(p, 200000100) == 0) CU_ASSERT(open_fails(p, CLMOE_ERR_FORMAT, "above the 100 MB limit"));
  unlink(p);
  CU_ASSERT(open_fails(p, CLMOE_ERR_IO, "cannot open"));
  CU_ASSERT(open_fails(dir, CLMOE_ERR_IO, "not a regular file"));
}

static void test_corrupt(void)
{
  const char *p = path_of("bad.safetensors");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_json(p, cases[i].json, cases[i].data_len);
    int ok = open_fails(p, CLMOE_ERR_FORMAT, cases[i].expect);
    if (!ok) fprintf(stderr, "  (case '%s')\n", cases[i].what);
    CU_ASSERT(ok);
  }
  corrupt_raw();
}

/* Every prefix of a valid file, and every single-byte change of its header, fails with a
 * message (never crashes; valgrind checks the reads). */
static void test_mutations(void)
{
  const char *p = path_of("mut.safetensors"), *q = path_of("mut2.safetensors");
  clmoe_st_writer *w;
  float v[3] = {1, 2, 3};
  TEST_OK(clmoe_st_writer_create(p, &w));
  TEST_OK(clmoe_st_writer_add_host(w, "a", CLMOE_ST_F32, 2, (int64_t[]){1, 3}, v));
  TEST_OK(clmoe_st_writer_add_host(w, "b", CLMOE_ST_BF16, 1, (int64_t[]){2}, (uint16_t[]){1, 2}));
  TEST_OK(clmoe_st_writer_metadata(w, "k", "v"));
  TEST_OK(clmoe_st_writer_finish(w));
  FILE *fp = fopen(p, "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
  unsigned char buf[512];
  size_t size = fread(buf, 1, sizeof buf, fp);
  fclose(fp);
  CU_ASSERT_FATAL(size > 8 && size < sizeof buf);
  int bad = 0, opened = 0;
  for (size_t len = 0; len < size; len++) { /* every strict prefix must be rejected */
    fp = fopen(q, "wb");
    fwrite(buf, 1, len, fp);
    fclose(fp);
    bad += !open_fails(q, CLMOE_ERR_FORMAT, NULL);
  }
  CU_ASSERT_EQUAL(bad, 0);
  size_t hlen = buf[0] | (size_t)buf[1] << 8;
  const unsigned char subst[] = {0, '"', '{', '}', '[', ']', ',', ':', '-', '9', ' ', 0x80, 0xff};
  for (size_t at = 8; at < 8 + hlen; at++)
    for (size_t k = 0; k < sizeof subst; k++) {
      unsigned char m[512];
      memcpy(m, buf, size);
      m[at] = subst[k];
      fp = fopen(q, "wb");
      fwrite(m, 1, size, fp);
      fclose(fp);
      clmoe_st_file *f = NULL;
      clmoe_status st = clmoe_st_open(q, &f);
      if (st == CLMOE_OK) opened += m[at] != buf[at];
      else if ((st != CLMOE_ERR_FORMAT && st != CLMOE_ERR_DAMAGED) || !clmoe_last_error()[0]) bad++;
      clmoe_st_close(f);
    }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(opened, 0); /* the checksums cover every byte that means something */
  unlink(q);
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
  snprintf(dir, sizeof dir, "%s", test_tmpdir("st"));
  CU_add_test(suite, "roundtrip", test_roundtrip);
  CU_add_test(suite, "hand_built", test_hand_built);
  CU_add_test(suite, "large", test_large);
  CU_add_test(suite, "corrupt", test_corrupt);
  CU_add_test(suite, "mutations", test_mutations);
  CU_add_test(suite, "writer_errors", test_writer_errors);
}

int main(void) { return test_main("safetensors", add_tests); }
