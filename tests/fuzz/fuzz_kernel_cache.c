/* fuzz_kernel_cache: the reader of the on-disk program cache (include/clmoe/program.h)
 * on any bytes, through the public API, on the default OpenCL device.
 *
 * LLVMFuzzerInitialize points CLMOE_CACHE_DIR at a fresh folder of its own, builds one small
 * program there (clmoe_tensor_fill_uniform on a fresh context, no probes) and takes the entry that
 * build wrote: its path (the key's hash, which depends on the device and driver) and its
 * bytes. Each input then replaces that entry, and a fresh context fills a tensor again: the
 * library must either use the entry or reject it and rebuild from source, and the tensor
 * must hold the generator's values. The key is device-specific, so bytes 16-31 of an input (the key in
 * the 48-byte header) are replaced by the valid entry's key: otherwise nearly every input
 * would stop at the key comparison. The FNV-1a checksum of the payload is left as the input
 * has it, so a damaged payload is rejected before the driver sees it (what the driver does
 * with a well-summed but corrupt binary is the driver's business). A bad entry must be a
 * silent rebuild, never a crash, a leak, a huge allocation or a wrong value.
 *
 * Seeds: the valid entry, written at start-up into the folder named by CLMOE_FUZZ_SEED_DIR
 * (scripts/fuzz.sh does this: a committed entry would be of another device), plus
 * tests/fuzz/corpus/fuzz_kernel_cache/ (damaged headers). Slow for a fuzzer (a context per
 * input, and a rebuild for each rejected entry): a few ms to tens of ms per input on PoCL.
 * Build and run: `make fuzz`, then tests/fuzz/fuzz_kernel_cache CORPUS_DIR, or
 * scripts/fuzz.sh SECONDS. */
#include "fuzz_common.h" /* first: it sets _GNU_SOURCE */

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#define KEY_AT 16 /* the key's 16 bytes in the entry's header */
#define KEY_BYTES 16

static char cache_dir[] = "/tmp/clmoe-fuzz-cache-XXXXXX";
static char entry_path[4096];
static unsigned char valid_key[KEY_BYTES];
static unsigned char *valid;
static size_t valid_size;

#define OK_OR_DIE(call)                                                                    \
  do {                                                                                     \
    clmoe_status st_ = (call);                                                             \
    if (st_ != CLMOE_OK) {                                                                 \
      fprintf(stderr, "fuzz_kernel_cache: %s: %s\n", #call, clmoe_last_error());           \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* A fresh context (no probes: they would build programs of their own) fills a tensor with
 * counter-based random numbers of `seed` (the kernel of kernels_cl/runtime/random.cl) and
 * reads it back: the same bits as the host's generator. The program comes from the cache
 * or is built. */
static void fill_once(uint64_t seed, clmoe_program_stats *stats)
{
  clmoe_ctx_options opts = {0};
  opts.no_probe = 1;
  clmoe_ctx *ctx = NULL;
  OK_OR_DIE(clmoe_ctx_create(&ctx, &opts));
  clmoe_tensor t;
  const int64_t shape[1] = {37};
  float host[37];
  OK_OR_DIE(clmoe_tensor_create(ctx, &t, CLMOE_F32, 1, shape));
  OK_OR_DIE(clmoe_tensor_fill_uniform(&t, seed, -1.0f, 1.0f));
  OK_OR_DIE(clmoe_tensor_read_f32(&t, host));
  for (int i = 0; i < 37; i++) {
    const float want = clmoe_random_uniform(seed, (uint64_t)i, -1.0f, 1.0f);
    FUZZ_REQUIRE(host[i] == want, "element %d is %.9g, the generator gives %.9g", i, host[i],
                 want);
  }
  clmoe_tensor_destroy(&t);
  clmoe_ctx_program_stats(ctx, stats);
  clmoe_ctx_destroy(ctx);
}

/* The one .clbin entry of dir, or exit. */
static void find_entry(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int found = 0;
  while (d && (e = readdir(d)) != NULL) {
    const size_t n = strlen(e->d_name);
    if (n > 6 && !strcmp(e->d_name + n - 6, ".clbin")) {
      snprintf(entry_path, sizeof entry_path, "%s/%s", dir, e->d_name);
      found++;
    }
  }
  if (d) closedir(d);
  if (found != 1) {
    fprintf(stderr, "fuzz_kernel_cache: %d cache entries in %s after one build, expected 1 "
            "(does the driver give program binaries?)\n", found, dir);
    exit(1);
  }
}

static unsigned char *read_all(const char *path, size_t *size)
{
  FILE *f = fopen(path, "rb");
  struct stat sb;
  if (!f || fstat(fileno(f), &sb) != 0) exit(1);
  unsigned char *data = malloc((size_t)sb.st_size + 1);
  if (!data || fread(data, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) exit(1);
  fclose(f);
  *size = (size_t)sb.st_size;
  return data;
}

static void write_all(const char *path, const uint8_t *data, size_t size)
{
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
    perror(path);
    abort();
  }
}

/* At exit: the folder of this process and what the library wrote there. */
static void remove_cache_dir(void)
{
  DIR *d = opendir(cache_dir);
  struct dirent *e;
  char path[4400];
  while (d && (e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(path, sizeof path, "%s/%s", cache_dir, e->d_name);
      unlink(path);
    }
  if (d) closedir(d);
  rmdir(cache_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  const char *dir = mkdtemp(cache_dir);
  if (!dir) {
    perror("mkdtemp");
    exit(1);
  }
  atexit(remove_cache_dir);
  setenv("CLMOE_CACHE_DIR", dir, 1);
  setenv("CLMOE_CACHE", "1", 1);
  clmoe_program_stats stats;
  fill_once(1, &stats);
  find_entry(dir);
  valid = read_all(entry_path, &valid_size);
  if (valid_size < KEY_AT + KEY_BYTES) exit(1);
  memcpy(valid_key, valid + KEY_AT, KEY_BYTES);
  fill_once(2, &stats); /* the entry must serve a second context */
  if (stats.cache_hits != 1 || stats.builds != 0) {
    fprintf(stderr, "fuzz_kernel_cache: a valid entry was not used (%lu hits, %lu builds)\n",
            stats.cache_hits, stats.builds);
    exit(1);
  }
  const char *seed_dir = getenv("CLMOE_FUZZ_SEED_DIR");
  if (seed_dir && *seed_dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/valid.clbin", seed_dir);
    write_all(path, valid, valid_size);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  uint8_t *entry = malloc(size ? size : 1);
  if (!entry) abort();
  memcpy(entry, data, size);
  if (size >= KEY_AT + KEY_BYTES) memcpy(entry + KEY_AT, valid_key, KEY_BYTES);
  write_all(entry_path, entry, size);
  const int same = size == valid_size && !memcmp(entry, valid, size);
  free(entry);

  clmoe_program_stats stats;
  fill_once(size, &stats);
  FUZZ_REQUIRE(stats.cache_hits + stats.builds == 1, "%lu hits and %lu builds for one program",
               stats.cache_hits, stats.builds);
  if (same) FUZZ_REQUIRE(stats.cache_hits == 1, "the valid entry was not used");
  return 0;
}
