/* The clmoe-op harness (clmoe_op.h): what every operator command does the same way around
 * its library call. The shared flags and their checks, the random example files, reading
 * and checking the inputs of a safetensors file against the command's tensor table
 * (op_sig), loading them, and writing the outputs with the run's metadata. Bad input data
 * exits 1 (op_fail) naming the file and tensor, a bad command line 2 (app_usage_error). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe_op.h"

/* "clmoe-op kda: message" and exit 1: bad input data (a bad command line exits 2). */
void op_fail(const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "%s: ", app_name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

double op_parse_double(const char *flag, const char *value)
{
  char *end = NULL;
  errno = 0;
  double v = strtod(value, &end);
  if (errno || !end || end == value || *end != '\0' || !isfinite(v))
    app_usage_error("%s: '%s' is not a finite number", flag, value);
  return v;
}

/* "0,5,12" -> a new array of *n integers in [lo, hi] (free it). */
int64_t *op_parse_list(const char *flag, const char *value, int64_t lo, int64_t hi, int *n)
{
  int cap = 1;
  for (const char *c = value; *c; c++) cap += *c == ',';
  int64_t *out = malloc((size_t)cap * sizeof *out);
  if (!out) op_fail("out of memory");
  const char *s = value;
  for (*n = 0;; s++) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || (*end != ',' && *end != '\0') || v < lo || v > hi)
      app_usage_error("%s: '%s' is not a comma-separated list of integers in [%lld, %lld]", flag, value,
                      (long long)lo, (long long)hi);
    out[(*n)++] = v;
    if (*end == '\0') return out;
    s = end;
  }
}

/* "F32 [2, 3]" for messages; a negative size prints as *. */
const char *op_describe(const char *dtype, const int64_t *dims, int n, char *buf, size_t len)
{
  size_t used = (size_t)snprintf(buf, len, "%s [", dtype);
  for (int d = 0; d < n && used < len; d++)
    used += dims[d] < 0 ? (size_t)snprintf(buf + used, len - used, "%s*", d ? ", " : "")
                        : (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "", (long long)dims[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

int op_dims(const op_sig *s, const char *spec, const int64_t *sz, int64_t dims[4])
{
  int n = 0;
  for (; spec[n]; n++) dims[n] = sz[strchr(s->letters, spec[n]) - s->letters];
  return n;
}

/* ---- the command line ------------------------------------------------------------------ */

void op_args_init(op_args *a, void (*usage)(void))
{
  memset(a, 0, sizeof *a);
  a->std.take = APP_FLAG_HELP | APP_FLAG_VERSION | APP_FLAG_DEVICE;
  a->std.usage = usage;
  a->seed = -1; /* dtype NULL, seed -1: not given */
}

int op_flag(int argc, char **argv, int *i, op_args *a)
{
  const char *v;
  if (app_standard_flag(argc, argv, i, &a->std)) return 1;
  if (app_option(argc, argv, i, "--in", &v)) a->in = v;
  else if (app_option(argc, argv, i, "--out", &v)) a->out = v;
  else if (app_option(argc, argv, i, "--cu-seqlens", &v)) a->cu_list = v;
  else if (app_option(argc, argv, i, "--make-example", &v)) a->example = v;
  else if (app_option(argc, argv, i, "--shape", &v)) a->shape = v;
  else if (app_option(argc, argv, i, "--seed", &v)) a->seed = app_parse_int("--seed", v, 0, INT32_MAX);
  else if (app_option(argc, argv, i, "--dtype", &v)) a->dtype = v;
  else if (!strcmp(argv[*i], "--backward")) a->backward = 1;
  else if (!strcmp(argv[*i], "--with-backward")) a->with_backward = 1;
  else return 0;
  return 1;
}

int op_args_finish(op_args *a, const op_sig *s, int own_example)
{
  if (a->cu_list) { /* checked first: a bad list is a command-line error (exit 2) */
    a->cu = op_parse_list("--cu-seqlens", a->cu_list, 0, INT32_MAX, &a->ncu);
    int ok = a->ncu >= 2 && a->cu[0] == 0;
    for (int i = 1; i < a->ncu; i++) ok = ok && a->cu[i] >= a->cu[i - 1];
    if (!ok)
      app_usage_error("--cu-seqlens: '%s' must start at 0, never decrease and have two offsets or more",
                      a->cu_list);
  }
  if (a->example) {
    if (!a->shape) app_usage_error("--make-example needs --shape %s", s->shape);
    if (a->in || a->out) app_usage_error("--make-example does not run the op: leave out --in and --out");
    return 1;
  }
  if (a->shape || a->with_backward || a->dtype || a->seed >= 0 || own_example)
    app_usage_error("%s go with --make-example", s->example_flags);
  if (!a->in || !a->out) app_usage_error("%s: --in FILE and --out FILE are required", s->name);
  return 0;
}

/* ---- --make-example ---------------------------------------------------------------------- */

void op_example_sizes(const op_args *a, const op_sig *s, int64_t *sz)
{
  int n, want = 1;
  for (const char *c = s->shape; *c; c++) want += *c == ',';
  int64_t *shape = op_parse_list("--shape", a->shape, 0, 65536, &n);
  if (n != want) app_usage_error("--shape: '%s' is not %s", a->shape, s->shape);
  memcpy(sz, shape, (size_t)n * sizeof *sz);
  free(shape);
  if (a->ncu && (sz[0] != 1 || a->cu[a->ncu - 1] != sz[1]))
    app_usage_error("--cu-seqlens: with sequence offsets B must be 1 and the last offset T = %lld", (long long)sz[1]);
}

void op_example_write(const op_args *a, const op_sig *s, const int64_t *sz, const int *want,
                      const float *mean, const float *sd)
{
  const char *dtype = a->dtype ? a->dtype : "f32";
  uint64_t seed = a->seed < 0 ? 1 : (uint64_t)a->seed;
  int bf16 = !strcmp(dtype, "bf16");
  if (!bf16 && strcmp(dtype, "f32")) app_usage_error("--dtype: '%s' is not f32 or bf16", dtype);
  clmoe_st_writer *w;
  APP_CHECK(clmoe_st_writer_create(a->example, &w));
  for (int j = 0; j < s->nin; j++) {
    if (j == s->icu || !want[j]) continue;
    int64_t dims[4];
    int rank = op_dims(s, s->in_dims[j], sz, dims);
    double numel = 1;
    for (int d = 0; d < rank; d++) numel *= (double)dims[d];
    if (numel > (double)(1 << 28)) app_usage_error("--shape: %s would have over 2^28 elements", s->in_names[j]);
    float *x = malloc((size_t)numel * sizeof *x + 4);
    uint16_t *h = malloc((size_t)numel * sizeof *h + 2);
    if (!x || !h) op_fail("out of memory");
    for (size_t i = 0; i < (size_t)numel; i++)
      x[i] = clmoe_random_normal(seed * 64 + (uint64_t)j, i, mean[j], sd[j]), h[i] = clmoe_bf16_from_f32(x[i]);
    int as_bf16 = bf16 && j < s->nmain;
    APP_CHECK(clmoe_st_writer_add_host(w, s->in_names[j], as_bf16 ? CLMOE_ST_BF16 : CLMOE_ST_F32, rank, dims,
                                       as_bf16 ? (const void *)h : (const void *)x));
    free(x);
    free(h);
  }
  if (a->ncu) APP_CHECK(clmoe_st_writer_add_host(w, "cu_seqlens", CLMOE_ST_I64, 1, (int64_t[]){a->ncu}, a->cu));
  char generator[96];
  snprintf(generator, sizeof generator, "%s --make-example", app_name);
  APP_CHECK(clmoe_st_writer_metadata(w, "clmoe_version", clmoe_version()));
  APP_CHECK(clmoe_st_writer_metadata(w, "generator", generator));
  APP_CHECK(clmoe_st_writer_finish(w));
  printf("%s: wrote %s (N = %lld sequences, %s)\n", app_name, a->example,
         (long long)sz[strchr(s->letters, s->seqs) - s->letters], dtype);
}

/* ---- reading --in ------------------------------------------------------------------------ */

clmoe_st_file *op_open_input(const op_args *a)
{
  clmoe_st_file *f = NULL;
  clmoe_status st = clmoe_st_open(a->in, &f);
  if (st != CLMOE_OK) app_die(st, "reading --in");
  return f;
}

/* names[0..n) as "a, b and c" (and = 1) or "a, b, c" (and = 0). */
static const char *name_list(const char *const *names, int n, int and, char *buf, size_t len)
{
  size_t used = 0;
  buf[0] = '\0';
  for (int j = 0; j < n && used < len; j++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", j == 0 ? "" : and && j == n - 1 ? " and " : ", ",
                             names[j]);
  return buf;
}

void op_find_inputs(const clmoe_st_file *f, const op_args *a, const op_sig *s, op_inputs *in)
{
  const char *path = clmoe_st_path(f);
  for (int i = 0; i < clmoe_st_count(f); i++) {
    clmoe_st_info info;
    clmoe_st_info_at(f, i, &info);
    int j = 0;
    while (j < s->nin && strcmp(info.name, s->in_names[j])) j++;
    if (j == s->nin) {
      char takes[256];
      op_fail("%s: unknown tensor '%s' (%s takes %s)", path, info.name, s->name,
              name_list(s->in_names, s->nin, 0, takes, sizeof takes));
    }
    in->present[j] = 1;
  }
  for (int j = 0; j < s->nrequired; j++)
    if (!in->present[j]) op_fail("%s: the required tensor '%s' is missing", path, s->in_names[j]);
  if (a->backward && !in->present[s->ido])
    op_fail("%s: --backward needs the tensor '%s' %s", path, s->in_names[s->ido], s->do_shape);
  int ignored = 0;
  for (int j = s->ido; j < s->nin; j++) ignored |= !a->backward && in->present[j];
  if (ignored) {
    char grads[256];
    fprintf(stderr, "%s: note: %s of %s %s ignored without --backward\n", app_name,
            name_list(s->in_names + s->ido, s->nin - s->ido, 1, grads, sizeof grads), path,
            s->nin - s->ido > 1 ? "are" : "is");
    for (int j = s->ido; j < s->nin; j++) in->present[j] = 0;
  }
  if (in->present[s->icu] && a->cu_list)
    app_usage_error("--cu-seqlens: %s already has a cu_seqlens tensor (use one or the other)", path);
}

void op_want(const clmoe_st_file *f, const op_sig *s, int j, const int64_t *sz, clmoe_st_dtype qtype)
{
  const char *path = clmoe_st_path(f), *name = s->in_names[j];
  clmoe_st_info info;
  char have[160], expect[96];
  int64_t dims[4] = {-1, -1, -1, -1};
  int rank = sz ? op_dims(s, s->in_dims[j], sz, dims) : (int)strlen(s->in_dims[j]);
  APP_CHECK(clmoe_st_info_of(f, name, &info));
  int ok = info.ndim == rank;
  for (int d = 0; ok && d < rank; d++) ok = dims[d] < 0 || info.shape[d] == dims[d];
  op_describe("", dims, rank, expect, sizeof expect);
  op_describe(clmoe_st_dtype_name(info.dtype), info.shape, info.ndim, have, sizeof have);
  if (!ok) op_fail("%s: tensor '%s' is %s, expected%s (%s)", path, name, have, expect, s->in_dims[j]);
  if (j < s->nmain && (info.dtype != qtype || (qtype != CLMOE_ST_F32 && qtype != CLMOE_ST_BF16))) {
    char mains[256];
    op_fail("%s: tensor '%s' is %s; %s must all be F32 or all BF16", path, name, have,
            name_list(s->in_names, s->nmain, 1, mains, sizeof mains));
  }
  clmoe_st_dtype t = info.dtype;
  int is_float = t == CLMOE_ST_F32 || t == CLMOE_ST_BF16 || t == CLMOE_ST_F16 || t == CLMOE_ST_F64 ||
                 t == CLMOE_ST_F8_E4M3 || t == CLMOE_ST_F8_E5M2;
  if (j >= s->nmain && !is_float) op_fail("%s: tensor '%s' is %s; expected a float type", path, name, have);
}

int64_t op_sequences(const clmoe_st_file *f, const op_args *a, const op_sig *s, const op_inputs *in)
{
  const char *path = clmoe_st_path(f);
  int64_t n = in->sz[0]; /* B */
  if (in->present[s->icu]) {
    clmoe_st_info cu;
    APP_CHECK(clmoe_st_info_of(f, "cu_seqlens", &cu));
    if (cu.ndim != 1 || cu.shape[0] < 2 || (cu.dtype != CLMOE_ST_I32 && cu.dtype != CLMOE_ST_I64))
      op_fail("%s: tensor 'cu_seqlens' must be I32 or I64 [N + 1] with N >= 1", path);
    n = cu.shape[0] - 1;
  } else if (a->cu_list) {
    n = a->ncu - 1;
  }
  if ((in->present[s->icu] || a->cu_list) && in->sz[0] != 1)
    op_fail("%s: q is [%lld, ...]: with cu_seqlens the batch size B must be 1 (pack the sequences along T)", path,
            (long long)in->sz[0]);
  return n;
}

/* Loads the inputs; cu_seqlens from the flag is checked against T and uploaded. */
void op_load_inputs(clmoe_st_file *f, clmoe_ctx *ctx, const op_args *a, const op_sig *s, op_inputs *in)
{
  for (int j = 0; j < s->nin; j++) {
    if (!in->present[j]) continue;
    int flags = j < s->nmain || j == s->icu ? CLMOE_ST_LOAD_NATIVE : CLMOE_ST_LOAD_F32;
    clmoe_status st = clmoe_st_load(f, s->in_names[j], ctx, flags, &in->t[j]);
    if (st != CLMOE_OK) app_die(st, "loading the inputs");
  }
  if (!a->cu_list) return;
  int n = a->ncu;
  if (a->cu[n - 1] != in->sz[1])
    app_usage_error("--cu-seqlens: the last offset %lld differs from T = %lld of q in %s", (long long)a->cu[n - 1],
                    (long long)in->sz[1], a->in);
  int32_t *c32 = malloc((size_t)n * sizeof *c32);
  if (!c32) op_fail("out of memory");
  for (int i = 0; i < n; i++) c32[i] = (int32_t)a->cu[i];
  APP_CHECK(clmoe_tensor_create(ctx, &in->t[s->icu], CLMOE_I32, 1, (int64_t[]){n}));
  APP_CHECK(clmoe_tensor_write(&in->t[s->icu], c32, (size_t)n * sizeof *c32));
  in->present[s->icu] = 1;
  free(c32);
}

/* ---- the outputs ------------------------------------------------------------------------- */

void op_create_outputs(clmoe_ctx *ctx, const op_sig *s, const op_inputs *in, clmoe_tensor *out, int nout)
{
  memset(out, 0, (size_t)nout * sizeof *out);
  for (int i = 0; i < nout; i++) {
    int64_t dims[4];
    int rank = op_dims(s, s->out_dims[i], in->sz, dims);
    APP_CHECK(clmoe_tensor_create(ctx, &out[i], CLMOE_F32, rank, dims));
  }
}

void op_write_outputs(const op_args *a, clmoe_ctx *ctx, const op_sig *s, const op_inputs *in,
                      const clmoe_tensor *out, int nout, const char *const (*meta)[2], int nmeta)
{
  const clmoe_device_caps *caps = clmoe_ctx_caps(ctx);
  const char *head[][2] = {{"clmoe_version", clmoe_version()}, {"op", s->name},
                           {"device", caps->device_name},      {"platform", caps->platform_name},
                           {"driver", caps->driver_version},   {"input", a->in}};
  const char *tail[][2] = {
      {"cu_seqlens", a->cu_list ? a->cu_list : in->present[s->icu] ? "from the input file" : "none"},
      {"storage", in->t[0].dtype == CLMOE_BF16 ? "bf16" : "f32"}};
  clmoe_st_writer *w;
  APP_CHECK(clmoe_st_writer_create(a->out, &w));
  for (int i = 0; i < nout; i++) {
    clmoe_status st = clmoe_st_writer_add(w, s->out_names[i], &out[i]);
    if (st != CLMOE_OK) app_die(st, "collecting the outputs");
  }
  for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
    APP_CHECK(clmoe_st_writer_metadata(w, head[i][0], head[i][1]));
  for (int i = 0; i < nmeta; i++) APP_CHECK(clmoe_st_writer_metadata(w, meta[i][0], meta[i][1]));
  for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++)
    APP_CHECK(clmoe_st_writer_metadata(w, tail[i][0], tail[i][1]));
  clmoe_status st = clmoe_st_writer_finish(w);
  if (st != CLMOE_OK) app_die(st, "writing --out");
}

void op_release(clmoe_st_file *f, clmoe_ctx *ctx, op_inputs *in, clmoe_tensor *out, int nout)
{
  for (int i = 0; i < nout; i++) clmoe_tensor_destroy(&out[i]);
  for (int j = 0; j < OP_MAX_TENSORS; j++) clmoe_tensor_destroy(&in->t[j]);
  clmoe_ctx_destroy(ctx);
  clmoe_st_close(f);
}
