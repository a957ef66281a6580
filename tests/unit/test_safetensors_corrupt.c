/* CUnit suite: corrupt safetensors files, each of which must fail to open with a clear
 * message naming the file and the fault: malformed headers (JSON, fields, dtypes, shapes,
 * offsets, names), raw lengths and sizes that JSON cannot express, every prefix of a valid
 * file and every single-byte change of its header. (Valid files: test_safetensors.c.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "st_fixture.h"

static const char *dir; /* test_tmpdir("st") */

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

static void add_tests(CU_pSuite suite)
{
  dir = test_tmpdir("st");
  CU_add_test(suite, "corrupt", test_corrupt);
  CU_add_test(suite, "mutations", test_mutations);
}

int main(void) { return test_main("safetensors_corrupt", add_tests); }
