/* Program building, the on-disk binary cache, kernel lookup and launch helpers. */
#include "internal.h"
#include "ptx_sm90a.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- sources --------------------------------------------------------------------------- */

static const clmoe_kernel_source *embedded_source(const char *family)
{
  for (const clmoe_kernel_source *s = clmoe__kernel_sources; s->family; s++)
    if (!strcmp(s->family, family)) return s;
  return NULL;
}

/* Reads a family's file below CLMOE_KERNEL_DIR (a copy of kernels_cl/) into a malloc'ed
 * string: at the embedded copy's place (<dir>/kda/kda_fwd.cl), <dir>/<family>.cl for a
 * family that is not built in. */
static clmoe_status read_source_file(const char *dir, const char *family, char **text)
{
  char path[4096];
  const clmoe_kernel_source *known = embedded_source(family);
  if (known)
    snprintf(path, sizeof path, "%s/%s", dir, known->path);
  else
    snprintf(path, sizeof path, "%s/%s.cl", dir, family);
  FILE *f = fopen(path, "rb");
  if (!f)
    return clmoe__error(CLMOE_ERR_IO, "CLMOE_KERNEL_DIR: cannot open %s: %s", path,
                        strerror(errno));
  clmoe_status st = CLMOE_OK;
  char *buf = NULL;
  if (fseek(f, 0, SEEK_END) != 0) goto io;
  long size = ftell(f);
  if (size < 0 || fseek(f, 0, SEEK_SET) != 0) goto io;
  buf = malloc((size_t)size + 1);
  if (!buf) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory reading %s", path);
    goto out;
  }
  if (fread(buf, 1, (size_t)size, f) != (size_t)size) goto io;
  buf[size] = '\0';
  *text = buf;
  buf = NULL;
  goto out;
io:
  st = clmoe__error(CLMOE_ERR_IO, "CLMOE_KERNEL_DIR: cannot read %s: %s", path, strerror(errno));
out:
  free(buf);
  fclose(f);
  return st;
}

/* A program's sources: common.cl, then each file of the family. A family is one file name
 * ("gemm") or several joined by '+' ("kda_common+kda_fwd"), read in that order. Sources
 * read from CLMOE_KERNEL_DIR are malloc'ed and listed in owned[] (NULL otherwise). */
#define MAX_PARTS 5 /* (the KDA backward's program has 5) */
typedef struct program_sources {
  int count;
  const char *text[MAX_PARTS + 1];
  char *owned[MAX_PARTS + 1];
} program_sources;

static void free_sources(program_sources *ps)
{
  for (int i = 0; i < ps->count; i++) free(ps->owned[i]);
}

static clmoe_status load_sources(const char *family, program_sources *ps)
{
  memset(ps, 0, sizeof *ps);
  char names[MAX_PARTS + 1][64];
  snprintf(names[0], sizeof names[0], "common");
  int n = 1;
  for (const char *p = family; *p; n++) {
    const char *plus = strchr(p, '+');
    size_t len = plus ? (size_t)(plus - p) : strlen(p);
    if (n > MAX_PARTS || len == 0 || len >= sizeof names[0])
      return clmoe__error(CLMOE_ERR_INTERNAL, "bad kernel family '%s'", family);
    memcpy(names[n], p, len);
    names[n][len] = '\0';
    p += len + (plus ? 1 : 0);
  }
  const char *dir = getenv("CLMOE_KERNEL_DIR");
  for (int i = 0; i < n; i++) {
    const clmoe_kernel_source *known = embedded_source(names[i]);
    if (dir && *dir) {
      clmoe_status st = read_source_file(dir, names[i], &ps->owned[i]);
      if (st != CLMOE_OK) {
        free_sources(ps);
        return st;
      }
      ps->text[i] = ps->owned[i];
    } else if (known) {
      ps->text[i] = known->text;
    } else {
      return clmoe__error(CLMOE_ERR_INTERNAL, "no kernel source '%s' is compiled into clmoe",
                          names[i]);
    }
    ps->count = i + 1;
  }
  return CLMOE_OK;
}

/* ---- the disk cache ---------------------------------------------------------------------- */

int clmoe_cache_dir(char *out, size_t len)
{
  const char *off = getenv("CLMOE_CACHE");
  if (off && !strcmp(off, "0")) return 0;
  const char *dir = getenv("CLMOE_CACHE_DIR");
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

static clmoe_hash program_key(const clmoe_ctx *ctx, const program_sources *ps, const char *options)
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
  for (int i = 0; i < ps->count; i++) clmoe__hash_str(&h, ps->text[i]);
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

/* ---- building ------------------------------------------------------------------------- */

static clmoe_status build_log_error(clmoe_ctx *ctx, cl_program prog, const char *family,
                                    cl_int err)
{
  size_t size = 0;
  char *log = NULL;
  if (clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) ==
          CL_SUCCESS && size > 0 && (log = malloc(size + 1)) != NULL) {
    if (clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, size, log, NULL) !=
        CL_SUCCESS)
      size = 0;
    log[size] = '\0';
  }
  clmoe__error(CLMOE_ERR_BUILD, "kernels_cl/%s.cl failed to build for %s (%s, error %d). "
               "Compiler log:\n%s", family, ctx->caps.device_name, clmoe_strerror(err), err,
               log && *log ? log : "(empty)");
  free(log);
  return CLMOE_ERR_BUILD;
}

/* The compiler's log of a successful build on stderr (CLMOE_BUILD_LOG set). */
static void print_build_log(clmoe_ctx *ctx, cl_program prog, const char *family,
                            const char *options)
{
  size_t size = 0;
  char *log = NULL;
  if (clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) != CL_SUCCESS ||
      size == 0 || !(log = malloc(size + 1)))
    return;
  if (clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, size, log, NULL) == CL_SUCCESS) {
    log[size] = '\0';
    fprintf(stderr, "clmoe: build log of %s [%s]:\n%s\n", family, options, log);
  }
  free(log);
}

static clmoe_status program_binary(clmoe_ctx *ctx, cl_program prog, unsigned char **data,
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

/* A program whose options ask for it (CLMOE_PTX_SM90A_OPTION) is built a second time from
 * its first build's PTX retargeted to sm_90a (lib/runtime/ptx_sm90a.c); *out replaces prog. */
static clmoe_status rebuild_sm90a(clmoe_ctx *ctx, cl_program prog, const char *family,
                                  const char *options, cl_program *out)
{
  *out = NULL;
  unsigned char *bin = NULL, *ptx = NULL;
  size_t bin_size = 0, ptx_size = 0;
  CLMOE_TRY(program_binary(ctx, prog, &bin, &bin_size));
  if (!bin)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "kernels_cl/%s.cl: the driver gives no PTX to retarget", family);
  clmoe_status st = clmoe__ptx_sm90a(bin, bin_size, &ptx, &ptx_size);
  free(bin);
  if (st != CLMOE_OK) return st;
  cl_int err = CL_SUCCESS, status = CL_SUCCESS;
  const unsigned char *p = ptx;
  cl_program np = clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &ptx_size, &p, &status, &err);
  free(ptx);
  if (err == CL_SUCCESS && status != CL_SUCCESS) err = status;
  if (err != CL_SUCCESS) {
    if (np) clReleaseProgram(np);
    return clmoe__cl_error(err, "clCreateProgramWithBinary (sm_90a PTX)", __FILE__, __LINE__);
  }
  err = clBuildProgram(np, 1, &ctx->device, options, NULL, NULL);
  if (err != CL_SUCCESS) {
    st = build_log_error(ctx, np, family, err);
    clReleaseProgram(np);
    return st;
  }
  *out = np;
  return CLMOE_OK;
}

static clmoe_status build_program(clmoe_ctx *ctx, const char *family, const char *extra,
                                  cl_program *out)
{
  *out = NULL;
  program_sources ps;
  CLMOE_TRY(load_sources(family, &ps));
  /* CLMOE_CL_OPTIONS adds compiler options to every build (e.g. -cl-nv-verbose, whose
   * register and spill counts CLMOE_BUILD_LOG=1 prints): a tool for kernel work. */
  const char *user = getenv("CLMOE_CL_OPTIONS");
  char options[1280];
  snprintf(options, sizeof options, "%s%s%s%s%s", ctx->base_options, extra && *extra ? " " : "",
           extra ? extra : "", user && *user ? " " : "", user && *user ? user : "");
  clmoe_status st = CLMOE_OK;
  char dir[4096], path[4200];
  int use_cache = clmoe_cache_dir(dir, sizeof dir);
  clmoe_hash key = program_key(ctx, &ps, options);
  unsigned char *bin = NULL;
  size_t bin_size = 0;
  cl_program prog = NULL;

  if (use_cache) {
    cache_path(dir, &key, path, sizeof path);
    int rejected = 0;
    bin = cache_read(path, &key, &bin_size, &rejected);
    if (bin) {
      prog = program_from_binary(ctx, bin, bin_size, options);
      if (prog) ctx->prog_stats.cache_hits++;
      else rejected = 1;
    }
    if (rejected) ctx->prog_stats.cache_rejects++;
    free(bin);
    bin = NULL;
  }
  if (!prog) {
    cl_int err = CL_SUCCESS;
    prog = clCreateProgramWithSource(ctx->context, (cl_uint)ps.count, ps.text, NULL, &err);
    CLMOE_CL_GOTO(st, err, done);
    err = clBuildProgram(prog, 1, &ctx->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
      st = build_log_error(ctx, prog, family, err);
      clReleaseProgram(prog);
      prog = NULL;
      goto done;
    }
    ctx->prog_stats.builds++;
    if (strstr(options, CLMOE_PTX_SM90A_OPTION)) {
      cl_program retargeted = NULL;
      st = rebuild_sm90a(ctx, prog, family, options, &retargeted);
      clReleaseProgram(prog);
      prog = retargeted;
      if (st != CLMOE_OK) goto done;
    }
    if (getenv("CLMOE_BUILD_LOG")) print_build_log(ctx, prog, family, options);
    if (use_cache && program_binary(ctx, prog, &bin, &bin_size) == CLMOE_OK && bin &&
        cache_write(dir, path, &key, bin, bin_size))
      ctx->prog_stats.cache_writes++;
    clmoe_clear_error(); /* a cache that cannot be written is not an error */
    free(bin);
  }
  *out = prog;
done:
  free_sources(&ps);
  return st;
}

static int same_options(const char *a, const char *b)
{
  return !strcmp(a ? a : "", b ? b : "");
}

static clmoe_status program_entry(clmoe_ctx *ctx, const char *family, const char *options,
                                  clmoe_program_entry **out)
{
  for (int i = 0; i < ctx->nprograms; i++) {
    clmoe_program_entry *p = &ctx->programs[i];
    if (!strcmp(p->family, family) && same_options(p->options, options)) {
      *out = p;
      return CLMOE_OK;
    }
  }
  if (ctx->nprograms == ctx->cap_programs) {
    int cap = ctx->cap_programs ? 2 * ctx->cap_programs : 16;
    clmoe_program_entry *grown = realloc(ctx->programs, (size_t)cap * sizeof *grown);
    if (!grown) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
    ctx->programs = grown;
    ctx->cap_programs = cap;
  }
  cl_program prog = NULL;
  CLMOE_TRY(build_program(ctx, family, options, &prog));
  clmoe_program_entry *p = &ctx->programs[ctx->nprograms];
  memset(p, 0, sizeof *p);
  p->family = strdup(family);
  p->options = strdup(options ? options : "");
  p->program = prog;
  if (!p->family || !p->options) {
    free(p->family);
    free(p->options);
    clReleaseProgram(prog);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  ctx->nprograms++;
  *out = p;
  return CLMOE_OK;
}

clmoe_status clmoe__kernel(clmoe_ctx *ctx, const char *family, const char *options,
                           const char *name, cl_kernel *kernel)
{
  clmoe_program_entry *p = NULL;
  CLMOE_TRY(program_entry(ctx, family, options, &p));
  for (int i = 0; i < p->nkernels; i++)
    if (!strcmp(p->kernels[i].name, name)) {
      *kernel = p->kernels[i].kernel;
      return CLMOE_OK;
    }
  if (strlen(name) >= sizeof p->kernels[0].name)
    return clmoe__error(CLMOE_ERR_INTERNAL, "kernel name too long: %s", name);
  if (p->nkernels == p->cap_kernels) {
    int cap = p->cap_kernels ? 2 * p->cap_kernels : 8;
    clmoe_kernel_entry *grown = realloc(p->kernels, (size_t)cap * sizeof *grown);
    if (!grown) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
    p->kernels = grown;
    p->cap_kernels = cap;
  }
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(p->program, name, &err);
  if (err != CL_SUCCESS) {
    clmoe__cl_error(err, "clCreateKernel", __FILE__, __LINE__);
    clmoe__append_error(" (kernel %s in kernels_cl/%s.cl)", name, family);
    return err;
  }
  snprintf(p->kernels[p->nkernels].name, sizeof p->kernels[0].name, "%s", name);
  p->kernels[p->nkernels].kernel = k;
  p->nkernels++;
  *kernel = k;
  return CLMOE_OK;
}

void clmoe_ctx_program_stats(const clmoe_ctx *ctx, clmoe_program_stats *stats)
{
  *stats = ctx->prog_stats;
}

clmoe_status clmoe_ctx_build_all(clmoe_ctx *ctx)
{
  for (const clmoe_kernel_source *s = clmoe__kernel_sources; s->family; s++) {
    if (!strcmp(s->family, "common") || !strcmp(s->family, "probe")) continue;
    clmoe_program_entry *p;
    CLMOE_TRY(program_entry(ctx, s->family, NULL, &p));
  }
  return CLMOE_OK;
}

/* ---- launching ---------------------------------------------------------------------------- */

static const char *kernel_name(cl_kernel k, char *buf, size_t len)
{
  if (clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, len, buf, NULL) != CL_SUCCESS)
    snprintf(buf, len, "?");
  return buf;
}

clmoe_status clmoe__args(cl_kernel kernel, int count, ...)
{
  va_list ap;
  va_start(ap, count);
  clmoe_status st = CLMOE_OK;
  for (int i = 0; i < count; i++) {
    size_t size = va_arg(ap, size_t);
    const void *ptr = va_arg(ap, const void *);
    cl_int err = clSetKernelArg(kernel, (cl_uint)i, size, ptr);
    if (err != CL_SUCCESS) {
      char name[64];
      st = clmoe__cl_error(err, "clSetKernelArg", __FILE__, __LINE__);
      clmoe__append_error(" (kernel %s, argument %d)", kernel_name(kernel, name, sizeof name), i);
      break;
    }
  }
  va_end(ap);
  return st;
}

clmoe_status clmoe__launch(clmoe_ctx *ctx, cl_kernel kernel, int dims, const size_t *global,
                           const size_t *local)
{
  size_t g[3];
  for (int d = 0; d < dims; d++) {
    g[d] = local ? clmoe__round_up(global[d], local[d]) : global[d];
    if (g[d] == 0) return CLMOE_OK; /* nothing to do */
  }
  cl_event ev = NULL;
  const int keep = ctx->prof_active && ctx->profiling;
  cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, (cl_uint)dims, NULL, g, local, 0, NULL,
                                      keep ? &ev : NULL);
  if (err == CL_SUCCESS && keep) {
    char name[64];
    return clmoe__profile_record(ctx, ev, NULL, kernel_name(kernel, name, sizeof name));
  }
  if (err != CL_SUCCESS) {
    char name[64];
    clmoe__cl_error(err, "clEnqueueNDRangeKernel", __FILE__, __LINE__);
    clmoe__append_error(" (kernel %s)", kernel_name(kernel, name, sizeof name));
    return err;
  }
  return CLMOE_OK;
}

clmoe_status clmoe__launch1d(clmoe_ctx *ctx, cl_kernel kernel, size_t n)
{
  size_t local = ctx->caps.wg_size;
  return clmoe__launch(ctx, kernel, 1, &n, &local);
}

clmoe_status clmoe__row_local(clmoe_ctx *ctx, cl_kernel kernel, int64_t n, size_t *local)
{
  size_t kmax = 0;
  CLMOE_CL(clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax,
                                    &kmax, NULL));
  size_t l = 256;
  while (l > 1 && (l > ctx->caps.max_work_group_size || l > kmax || (int64_t)(l / 2) >= n)) l /= 2;
  *local = l;
  return CLMOE_OK;
}

clmoe_status clmoe__launch_groups(clmoe_ctx *ctx, cl_kernel kernel, int64_t groups, size_t local)
{
  size_t global = (size_t)groups * local;
  return clmoe__launch(ctx, kernel, 1, &global, &local);
}

/* ---- profiling --------------------------------------------------------------------------- */

struct clmoe__prof_event {
  cl_event ev, start;
  char name[64];
};

static void profile_release(clmoe_ctx *ctx)
{
  for (int i = 0; i < ctx->prof_count; i++) {
    clReleaseEvent(ctx->prof_events[i].ev);
    if (ctx->prof_events[i].start) clReleaseEvent(ctx->prof_events[i].start);
  }
  ctx->prof_count = 0;
}

clmoe_status clmoe__profile_record(clmoe_ctx *ctx, cl_event ev, cl_event start, const char *name)
{
  if (!(ctx->prof_active && ctx->profiling) || !ev) {
    if (ev) clReleaseEvent(ev);
    if (start) clReleaseEvent(start);
    return CLMOE_OK;
  }
  if (ctx->prof_count == ctx->prof_cap) {
    int cap = ctx->prof_cap ? 2 * ctx->prof_cap : 256;
    struct clmoe__prof_event *grown = realloc(ctx->prof_events, (size_t)cap * sizeof *grown);
    if (!grown) {
      clReleaseEvent(ev);
      if (start) clReleaseEvent(start);
      return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (profiling)");
    }
    ctx->prof_events = grown;
    ctx->prof_cap = cap;
  }
  struct clmoe__prof_event *e = &ctx->prof_events[ctx->prof_count++];
  e->ev = ev, e->start = start;
  snprintf(e->name, sizeof e->name, "%s", name);
  return CLMOE_OK;
}

clmoe_status clmoe_ctx_profile_begin(clmoe_ctx *ctx)
{
  if (!ctx->profiling)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT,
                        "clmoe_ctx_profile_begin: the context was created without profiling");
  profile_release(ctx);
  ctx->prof_active = 1;
  return CLMOE_OK;
}

/* Adds `seconds` to the table row of `name` (a linear search: a model has ~100 kernels). */
static clmoe_status table_add(clmoe_ctx *ctx, const char *name, double seconds)
{
  int i = 0;
  while (i < ctx->prof_rows && strcmp(ctx->prof_table[i].name, name)) i++;
  if (i == ctx->prof_rows) {
    if (ctx->prof_rows == ctx->prof_table_cap) {
      int cap = ctx->prof_table_cap ? 2 * ctx->prof_table_cap : 64;
      clmoe_kernel_time *grown = realloc(ctx->prof_table, (size_t)cap * sizeof *grown);
      if (!grown) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (profiling)");
      ctx->prof_table = grown;
      ctx->prof_table_cap = cap;
    }
    memset(&ctx->prof_table[i], 0, sizeof ctx->prof_table[i]);
    snprintf(ctx->prof_table[i].name, sizeof ctx->prof_table[i].name, "%s", name);
    ctx->prof_rows++;
  }
  ctx->prof_table[i].seconds += seconds;
  ctx->prof_table[i].launches++;
  return CLMOE_OK;
}

clmoe_status clmoe_ctx_profile_end(clmoe_ctx *ctx, double *kernel_seconds, int *kernels)
{
  ctx->prof_active = 0;
  *kernel_seconds = 0.0;
  if (kernels) *kernels = ctx->prof_count;
  clmoe_status st = CLMOE_OK;
  cl_int err = clFinish(ctx->queue);
  for (int i = 0; i < ctx->prof_count && err == CL_SUCCESS && st == CLMOE_OK; i++) {
    const struct clmoe__prof_event *e = &ctx->prof_events[i];
    cl_ulong t0 = 0, t1 = 0;
    err = e->start ? clGetEventProfilingInfo(e->start, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL)
                   : clGetEventProfilingInfo(e->ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    if (err == CL_SUCCESS)
      err = clGetEventProfilingInfo(e->ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    if (err != CL_SUCCESS) break;
    const double s = t1 > t0 ? 1e-9 * (double)(t1 - t0) : 0.0;
    *kernel_seconds += s;
    st = table_add(ctx, e->name, s);
  }
  if (err != CL_SUCCESS) st = clmoe__cl_error(err, "clGetEventProfilingInfo", __FILE__, __LINE__);
  profile_release(ctx);
  return st;
}

int clmoe_ctx_profile_kernels(const clmoe_ctx *ctx, const clmoe_kernel_time **rows)
{
  *rows = ctx->prof_table;
  return ctx->prof_rows;
}

void clmoe_ctx_profile_clear(clmoe_ctx *ctx) { ctx->prof_rows = 0; }

void clmoe__profile_destroy(clmoe_ctx *ctx)
{
  profile_release(ctx);
  free(ctx->prof_events);
  ctx->prof_events = NULL;
  free(ctx->prof_table);
  ctx->prof_table = NULL;
  ctx->prof_rows = ctx->prof_table_cap = 0;
}
