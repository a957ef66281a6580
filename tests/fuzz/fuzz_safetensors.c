/* fuzz_safetensors: the safetensors reader (include/clmoe/safetensors.h) on any bytes.
 *
 * Each input is a file for clmoe_st_open. When it opens, every tensor is described
 * (clmoe_st_info_at, clmoe_st_info_of, clmoe_st_has), tensors of up to 64 KiB are read
 * into host memory as stored bytes and as f32, a read of the wrong size is refused, and
 * every metadata entry is looked up by index and by key. A malformed file must be a status
 * code; what an open file reports must hold together (sizes, offsets, names), else the
 * harness aborts and libFuzzer keeps the input.
 *
 * Seeds: tests/fuzz/corpus/fuzz_safetensors/ (valid files of a few tensors of several
 * dtypes, with and without metadata, and damaged ones). Build and run: `make fuzz`, then
 * tests/fuzz/fuzz_safetensors CORPUS_DIR, or scripts/fuzz.sh SECONDS for every harness. */
#include "fuzz_common.h" /* first: it sets _GNU_SOURCE */

#include <string.h>

#define READ_LIMIT (64u << 10) /* tensors read into host memory: up to this many bytes */

static void check_tensor(clmoe_st_file *f, int index)
{
  clmoe_st_info info, again;
  clmoe_st_info_at(f, index, &info);
  FUZZ_REQUIRE(info.name != NULL && info.name[0] != '\0', "tensor %d has no name", index);
  FUZZ_REQUIRE(info.dtype >= 0 && info.dtype < CLMOE_ST_DTYPE_COUNT, "tensor %s: dtype %d",
               info.name, (int)info.dtype);
  FUZZ_REQUIRE(info.ndim >= 0 && info.ndim <= CLMOE_ST_MAX_DIMS, "tensor %s: ndim %d", info.name,
               info.ndim);
  int64_t numel = 1;
  for (int d = 0; d < info.ndim; d++) {
    FUZZ_REQUIRE(info.shape[d] >= 0, "tensor %s: dimension %d is %lld", info.name, d,
                 (long long)info.shape[d]);
    numel *= info.shape[d]; /* no overflow: the reader checked the shape (else UBSan stops here) */
  }
  FUZZ_REQUIRE(numel == info.numel, "tensor %s: numel %lld, shape gives %lld", info.name,
               (long long)info.numel, (long long)numel);
  FUZZ_REQUIRE(info.bytes == (uint64_t)numel * clmoe_st_dtype_size(info.dtype),
               "tensor %s: %llu bytes for %lld elements of %s", info.name,
               (unsigned long long)info.bytes, (long long)numel, clmoe_st_dtype_name(info.dtype));
  FUZZ_REQUIRE(clmoe_st_has(f, info.name) == 1, "tensor %s: clmoe_st_has says no", info.name);
  FUZZ_REQUIRE(clmoe_st_info_of(f, info.name, &again) == CLMOE_OK, "tensor %s: no info by name",
               info.name);
  FUZZ_REQUIRE(again.offset == info.offset && again.bytes == info.bytes,
               "tensor %s: two descriptions differ", info.name);
  if (info.bytes > READ_LIMIT) return;

  /* the stored bytes, then the elements as f32; a file that opened may still fail here
   * (data past the end is checked at opening, but conversions may refuse), never crash */
  unsigned char *bytes = malloc(info.bytes + 1);
  float *f32 = malloc(((size_t)numel + 1) * sizeof *f32);
  if (!bytes || !f32) abort();
  clmoe_status st = clmoe_st_read(f, info.name, bytes, (size_t)info.bytes);
  FUZZ_REQUIRE(st == CLMOE_OK || st == CLMOE_ERR_IO || st == CLMOE_ERR_FORMAT || st == CLMOE_ERR_DAMAGED,
               "tensor %s: clmoe_st_read gave %s", info.name, clmoe_strerror(st));
  st = clmoe_st_read(f, info.name, bytes, (size_t)info.bytes + 1);
  FUZZ_REQUIRE(st != CLMOE_OK, "tensor %s: a read of the wrong size succeeded", info.name);
  st = clmoe_st_read_f32(f, info.name, f32, (size_t)numel);
  FUZZ_REQUIRE(st == CLMOE_OK || st == CLMOE_ERR_IO || st == CLMOE_ERR_FORMAT || st == CLMOE_ERR_DAMAGED,
               "tensor %s: clmoe_st_read_f32 gave %s", info.name, clmoe_strerror(st));
  free(bytes);
  free(f32);
}

static void check_metadata(clmoe_st_file *f)
{
  const int n = clmoe_st_metadata_count(f);
  FUZZ_REQUIRE(n >= 0, "metadata count %d", n);
  for (int i = 0; i < n; i++) {
    const char *key = NULL, *value = NULL;
    clmoe_st_metadata_at(f, i, &key, &value);
    FUZZ_REQUIRE(key && value, "metadata entry %d is missing", i);
    FUZZ_REQUIRE(clmoe_st_metadata(f, key) != NULL, "metadata key '%s' not found by name", key);
    (void)strlen(value); /* ASan: a terminated string */
  }
  const char *key = "", *value = "";
  clmoe_st_metadata_at(f, n, &key, &value);
  FUZZ_REQUIRE(key == NULL && value == NULL, "metadata entry past the end");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const char *path = fuzz_file(data, size);
  clmoe_st_file *f = NULL;
  clmoe_status st = clmoe_st_open(path, &f);
  if (st != CLMOE_OK) {
    FUZZ_REQUIRE(st == CLMOE_ERR_IO || st == CLMOE_ERR_FORMAT || st == CLMOE_ERR_DAMAGED, "clmoe_st_open gave %s",
                 clmoe_strerror(st));
    FUZZ_REQUIRE(clmoe_last_error()[0] != '\0', "an error without a message");
    return 0;
  }
  const int n = clmoe_st_count(f);
  FUZZ_REQUIRE(n >= 0, "tensor count %d", n);
  for (int i = 0; i < n; i++) check_tensor(f, i);
  clmoe_st_info past;
  clmoe_st_info_at(f, n, &past);
  FUZZ_REQUIRE(past.name && past.name[0] == '\0', "tensor past the end has a name");
  FUZZ_REQUIRE(!clmoe_st_has(f, "__metadata__"), "__metadata__ taken for a tensor");
  check_metadata(f);
  clmoe_st_close(f);
  return 0;
}
