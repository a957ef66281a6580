/* Programs: their sources (embedded, or read from CLMOE_KERNEL_DIR), building them (through
 * the disk cache of program_cache.c, and the sm_90a retargeting of ptx_sm90a.c), and the
 * context's table of built programs and their kernels (clmoe__kernel). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/program.h"
#include "ptx_sm90a.h"
#include "runtime_internal.h"

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
 * ("gemm") or several joined by '+' ("kda_common+kda_fwd"), read in that order. The part
 * "tile" stands for two files: the tile implementation that the build option
 * -DCLMOE_TILE_IMPL=<file> names (lib/tile/tile.c gives it with the context's tile
 * options; tile_portable without it), then the interface's contract tile.cl. Sources read
 * from CLMOE_KERNEL_DIR are malloc'ed and listed in owned[] (NULL otherwise). */
#define MAX_PARTS 6 /* (the KDA backward's program has 6 with its tile implementation) */
#define TILE_IMPL_OPTION "-DCLMOE_TILE_IMPL="
typedef struct program_sources {
  int count;
  const char *text[MAX_PARTS + 1];
  char *owned[MAX_PARTS + 1];
} program_sources;

static void free_sources(program_sources *ps)
{
  for (int i = 0; i < ps->count; i++) free(ps->owned[i]);
}

/* The tile implementation's file that `options` name (TILE_IMPL_OPTION), into impl. */
static clmoe_status tile_impl_name(const char *options, char *impl, size_t size)
{
  const char *o = options ? strstr(options, TILE_IMPL_OPTION) : NULL;
  if (!o) {
    snprintf(impl, size, "tile_portable");
    return CLMOE_OK;
  }
  o += strlen(TILE_IMPL_OPTION);
  size_t len = strcspn(o, " \t");
  if (len == 0 || len >= size)
    return clmoe__error(CLMOE_ERR_INTERNAL, "bad tile implementation in options '%s'", options);
  memcpy(impl, o, len);
  impl[len] = '\0';
  return CLMOE_OK;
}

static clmoe_status load_sources(const char *family, const char *options, const char *dir,
                                 program_sources *ps)
{
  memset(ps, 0, sizeof *ps);
  char names[MAX_PARTS + 1][64];
  snprintf(names[0], sizeof names[0], "common");
  int n = 1;
  for (const char *p = family; *p; n++) {
    const char *plus = strchr(p, '+');
    size_t len = plus ? (size_t)(plus - p) : strlen(p);
    int tile = len == 4 && !strncmp(p, "tile", 4);
    if (n + tile > MAX_PARTS || len == 0 || len >= sizeof names[0])
      return clmoe__error(CLMOE_ERR_INTERNAL, "bad kernel family '%s'", family);
    if (tile) CLMOE_TRY(tile_impl_name(options, names[n++], sizeof names[0]));
    memcpy(names[n], p, len);
    names[n][len] = '\0';
    p += len + (plus ? 1 : 0);
  }
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

/* A program whose options ask for it (CLMOE_PTX_SM90A_OPTION) is built a second time from
 * its first build's PTX retargeted to sm_90a (lib/runtime/ptx_sm90a.c); *out replaces prog. */
static clmoe_status rebuild_sm90a(clmoe_ctx *ctx, cl_program prog, const char *family,
                                  const char *options, cl_program *out)
{
  *out = NULL;
  unsigned char *bin = NULL, *ptx = NULL;
  size_t bin_size = 0, ptx_size = 0;
  CLMOE_TRY(clmoe__runtime_program_binary(ctx, prog, &bin, &bin_size));
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
  CLMOE_TRY(load_sources(family, extra, clmoe__knob_text(ctx, CLMOE_K_KERNEL_DIR), &ps));
  /* CLMOE_CL_OPTIONS adds compiler options to every build (e.g. -cl-nv-verbose, whose
   * register and spill counts CLMOE_BUILD_LOG=1 prints): a tool for kernel work. */
  const char *user = clmoe__knob_text(ctx, CLMOE_K_CL_OPTIONS);
  char options[1280];
  snprintf(options, sizeof options, "%s%s%s%s%s", ctx->base_options, extra && *extra ? " " : "",
           extra ? extra : "", user && *user ? " " : "", user && *user ? user : "");
  clmoe_status st = CLMOE_OK;
  clmoe__runtime_cache_slot slot;
  clmoe__runtime_cache_locate(ctx, ps.count, ps.text, options, &slot);
  cl_program prog = clmoe__runtime_cache_load(ctx, &slot, options);
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
    if (clmoe__knob_int(ctx, CLMOE_K_BUILD_LOG)) print_build_log(ctx, prog, family, options);
    clmoe__runtime_cache_store(ctx, &slot, prog);
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
