/* The on-disk cache of built program binaries (include/clmoe/program.h): the cache folder,
 * entry keys, reading and writing entries, and a program's binary. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clmoe/program.h"
#include "runtime_internal.h"

/* The cache folder for the knobs' values: CLMOE_CACHE (on), CLMOE_CACHE_DIR (dir, NULL: unset),
 * else $XDG_CACHE_HOME/clmoe, else ~/.cache/clmoe; 0 when off or no folder can be named. */
static int cache_dir_of(int on, const char *dir, char *out, size_t len)
{
  if (!on) return 0;
  if (dir && *dir) {
    snprintf(out, len, "%s", dir);
    return 1;
  }
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) {
    snprintf(out, len, "%s/clmoe", xdg);
    return 1;
  }
  const char *home = getenv("HOME");
  if (home && *home) {
    snprintf(out, len, "%s/.cache/clmoe", home);
    return 1;
  }
  return 0;
}

int clmoe_cache_dir(char *out, size_t len)
{
  clmoe__knob_value on, dir;
  int ok = 0;
  if (clmoe__knob_env(CLMOE_K_CACHE, &on) == CLMOE_OK) {
    if (clmoe__knob_env(CLMOE_K_CACHE_DIR, &dir) == CLMOE_OK) {
      ok = cache_dir_of((int)on.i, dir.text, out, len);
      clmoe__knob_value_free(&dir);
    }
    clmoe__knob_value_free(&on);
  }
  return ok;
}

/* mkdir -p; failures are left for the open() that follows to report (silently). */
static void make_dirs(const char *path)
{
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(buf, 0755);
      *p = '/';
    }
  mkdir(buf, 0755);
}

typedef struct cache_header {
  char magic[8];     /* "CLMOEPRG" */
  uint32_t format;   /* CLMOE_CACHE_FORMAT */
  uint32_t reserved;
  uint64_t key_a, key_b;
  uint64_t size;     /* payload bytes */
  uint64_t checksum; /* FNV-1a 64 of the payload */
} cache_header;

static clmoe_hash program_key(const clmoe_ctx *ctx, int count, const char *const *texts,
                              const char *options)
{
  clmoe_hash h;
  clmoe__hash_init(&h);
  uint32_t format = CLMOE_CACHE_FORMAT;
  clmoe__hash_bytes(&h, &format, sizeof format);
  clmoe__hash_str(&h, ctx->caps.platform_name);
  clmoe__hash_str(&h, ctx->caps.platform_version);
  clmoe__hash_str(&h, ctx->caps.device_name);
  clmoe__hash_str(&h, ctx->caps.driver_version);
  clmoe__hash_str(&h, options);
  for (int i = 0; i < count; i++) clmoe__hash_str(&h, texts[i]);
  return h;
}

static void cache_path(const char *dir, const clmoe_hash *key, char *out, size_t len)
{
  char hex[33];
  clmoe__hash_hex(key, hex);
  snprintf(out, len, "%s/%s.clbin", dir, hex);
}

/* Loads a cached binary; returns NULL when there is no usable entry. */
static unsigned char *cache_read(const char *path, const clmoe_hash *key, size_t *size, int *rejected)
{
  *rejected = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  cache_header h;
  unsigned char *data = NULL;
  if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, "CLMOEPRG", 8) != 0 ||
      h.format != CLMOE_CACHE_FORMAT || h.key_a != key->a || h.key_b != key->b ||
      h.size == 0 || h.size > ((uint64_t)1 << 32))
    goto reject;
  /* the claimed size against the file before allocating it: a damaged header costs nothing */
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || sb.st_size < (off_t)sizeof h ||
      (uint64_t)sb.st_size - sizeof h != h.size)
    goto reject;
  data = malloc(h.size);
  if (!data || fread(data, 1, h.size, f) != h.size || clmoe__fnv64(data, h.size) != h.checksum)
    goto reject;
  fclose(f);
  *size = h.size;
  return data;
reject:
  free(data);
  fclose(f);
  *rejected = 1;
  return NULL;
}

/* Writes an entry to a temporary file in the same directory and renames it into place,
 * so that concurrent processes (MPI ranks on one node) never read half a file. */
static int cache_write(const char *dir, const char path[4200], const clmoe_hash *key,
                       const unsigned char *data, size_t size)
{
  make_dirs(dir);
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 0;
  cache_header h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, "CLMOEPRG", 8);
  h.format = CLMOE_CACHE_FORMAT;
  h.key_a = key->a, h.key_b = key->b;
  h.size = size;
  h.checksum = clmoe__fnv64(data, size);
  int ok = write(fd, &h, sizeof h) == (ssize_t)sizeof h && write(fd, data, size) == (ssize_t)size;
  ok = close(fd) == 0 && ok;
  if (ok && rename(tmp, path) == 0) return 1;
  unlink(tmp);
  return 0;
}

clmoe_status clmoe__runtime_program_binary(clmoe_ctx *ctx, cl_program prog, unsigned char **data,
                                           size_t *size)
{
  *data = NULL;
  cl_uint ndev = 0;
  CLMOE_CL(clGetProgramInfo(prog, CL_PROGRAM_NUM_DEVICES, sizeof ndev, &ndev, NULL));
  if (ndev != 1) return clmoe__error(CLMOE_ERR_INTERNAL, "program built for %u devices", ndev);
  CLMOE_CL(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof *size, size, NULL));
  if (*size == 0) return CLMOE_OK; /* the driver offers no binaries: nothing to cache */
  *data = malloc(*size);
  if (!*data) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  unsigned char *ptrs[1] = {*data};
  cl_int err = clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof ptrs, ptrs, NULL);
  if (err != CL_SUCCESS) {
    free(*data);
    *data = NULL;
    return clmoe__cl_error(err, "clGetProgramInfo(CL_PROGRAM_BINARIES)", __FILE__, __LINE__);
  }
  return CLMOE_OK;
}

/* Tries a cached binary; on any failure returns NULL and the caller builds from source. */
static cl_program program_from_binary(clmoe_ctx *ctx, const unsigned char *data, size_t size,
                                      const char *options)
{
  cl_int err = CL_SUCCESS, status = CL_SUCCESS;
  cl_program prog = clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &size, &data,
                                              &status, &err);
  if (err != CL_SUCCESS || status != CL_SUCCESS) {
    if (prog) clReleaseProgram(prog);
    return NULL;
  }
  if (clBuildProgram(prog, 1, &ctx->device, options, NULL, NULL) != CL_SUCCESS) {
    clReleaseProgram(prog);
    return NULL;
  }
  return prog;
}

void clmoe__runtime_cache_locate(const clmoe_ctx *ctx, int count, const char *const *texts,
                                 const char *options, clmoe__runtime_cache_slot *slot)
{
  slot->enabled = cache_dir_of((int)clmoe__knob_int(ctx, CLMOE_K_CACHE),
                               clmoe__knob_text(ctx, CLMOE_K_CACHE_DIR), slot->dir, sizeof slot->dir);
  slot->key = program_key(ctx, count, texts, options);
  slot->path[0] = '\0';
  if (slot->enabled) cache_path(slot->dir, &slot->key, slot->path, sizeof slot->path);
}

cl_program clmoe__runtime_cache_load(clmoe_ctx *ctx, const clmoe__runtime_cache_slot *slot,
                                     const char *options)
{
  if (!slot->enabled) return NULL;
  int rejected = 0;
  size_t bin_size = 0;
  cl_program prog = NULL;
  unsigned char *bin = cache_read(slot->path, &slot->key, &bin_size, &rejected);
  if (bin) {
    prog = program_from_binary(ctx, bin, bin_size, options);
    if (prog) ctx->prog_stats.cache_hits++;
    else rejected = 1;
  }
  if (rejected) ctx->prog_stats.cache_rejects++;
  free(bin);
  return prog;
}

void clmoe__runtime_cache_store(clmoe_ctx *ctx, const clmoe__runtime_cache_slot *slot,
                                cl_program prog)
{
  unsigned char *bin = NULL;
  size_t bin_size = 0;
  if (slot->enabled && clmoe__runtime_program_binary(ctx, prog, &bin, &bin_size) == CLMOE_OK &&
      bin && cache_write(slot->dir, slot->path, &slot->key, bin, bin_size))
    ctx->prog_stats.cache_writes++;
  clmoe_clear_error(); /* a cache that cannot be written is not an error */
  free(bin);
}
