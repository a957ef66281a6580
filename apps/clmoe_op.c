/* clmoe-op: runs one library operator on tensors from a safetensors file and writes the
 * results to another, to compare clmoe with other implementations (flash-linear-attention,
 * another device) tensor by tensor. Commands are a table: add mla, moe, ... there. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "app_common.h"
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

static double parse_double(const char *flag, const char *value)
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

/* ---- kda ---------------------------------------------------------------------------- */
static void kda_usage(void)
{
  printf("Usage: clmoe-op kda --in X.safetensors --out Y.safetensors [--backward] [--recurrent]\n"
         "                    [--device SPEC] [--scale S] [--lower-bound LB] [--cu-seqlens LIST]\n"
         "       clmoe-op kda --make-example FILE --shape B,T,H,K,V [--seed N] [--dtype f32|bf16]\n"
         "                    [--with-state] [--with-backward] [--cu-seqlens LIST]\n"
         "\n"
         "Runs KDA (Kimi Delta Attention, include/clmoe/kda.h) on the tensors of a safetensors file and\n"
         "writes the results to another. Like flash-linear-attention's chunk_kda with\n"
         "use_gate_in_kernel and use_qk_l2norm_in_kernel, the op applies the gate, the L2 norm\n"
         "of q and k and the sigmoid of beta itself: pass raw logits.\n"
         "\n"
         "Inputs (fla's names; any other name is an error):\n"
         "  q, k, g (gate logits) [B, T, H, K], v [B, T, H, V], beta (logits) [B, T, H]:\n"
         "      all F32 or all BF16; K <= 128, V <= 256\n"
         "  A_log [H], dt_bias [H, K]; optional initial_state [N, H, K, V]: any float type\n"
         "  cu_seqlens [N + 1] (optional, I32 or I64): N sequences packed along T, B = 1;\n"
         "      without it N = B\n"
         "  do [B, T, H, V] and optional dfinal_state [N, H, K, V]: for --backward\n"
         "Outputs (F32): o [B, T, H, V], final_state [N, H, K, V]; with --backward also dq, dk,\n"
         "  dg, dv, dbeta, dA_log, ddt_bias, dinitial_state (shaped as their inputs). The\n"
         "  metadata records the clmoe version, the device and the options.\n"
         "\n"
         "  --in FILE          the inputs\n"
         "  --out FILE         the outputs (written to FILE.tmp.PID, then renamed into place)\n"
         "  --backward         also the gradients, given do (and dfinal_state)\n"
         "  --recurrent        forward token by token (clmoe_kda_recurrent) instead of chunked,\n"
         "                     to cross-check the chunked kernel; the backward is always chunked\n"
         "  --scale S          multiplies o (default 1/sqrt(K))\n"
         "  --lower-bound LB   the gate's lower bound, in [-5, 0) (default -5)\n"
         "  --cu-seqlens LIST  sequence offsets such as 0,5,12 (B = 1, the last one = T); not\n"
         "                     with a cu_seqlens tensor in the file\n"
         "  --device SPEC      P:D, gpu, cpu, an implementation (pocl, intel, nvidia, amd, ...:\n"
         "                     only its own devices) or part of a name, as for clmoe-info\n"
         "                     (default: CLMOE_DEVICE, else the first GPU, else the first CPU)\n"
         "\n"
         "Testing aid: --make-example FILE writes random inputs of --shape B,T,H,K,V without a\n"
         "device: --seed N (default 1), --dtype of q, k, v, g, beta (default f32), --with-state\n"
         "adds initial_state, --with-backward do and dfinal_state, --cu-seqlens an I64 cu_seqlens.\n"
         "\n"
         "Exit status: 0 success, 1 bad input data or a failure, 2 a bad command line.\n");
}

typedef struct kda_args {
  const char *in, *out, *device, *example, *shape, *cu_list, *dtype;
  int64_t *cu; /* --cu-seqlens parsed, ncu offsets */
  int ncu, backward, recurrent, with_state, with_backward;
  double scale, lower_bound;
  long long seed;
} kda_args;

/* Tensors by name, with shapes spelled in the sizes B, T, H, K, V and N (sequences): the
 * inputs, then the outputs o, final_state and the gradients (in clmoe_kda_grads' order). */
enum { IN_Q, IN_K, IN_V, IN_G, IN_BETA, IN_ALOG, IN_DTB, IN_H0, IN_CU, IN_DO, IN_DHT, IN_COUNT };
static const char *const in_names[IN_COUNT] = {"q", "k", "v", "g", "beta", "A_log", "dt_bias",
                                               "initial_state", "cu_seqlens", "do", "dfinal_state"};
static const char *const in_dims[IN_COUNT] = {"BTHK", "BTHK", "BTHV", "BTHK", "BTH", "H", "HK", "NHKV", "", "BTHV", "NHKV"};
static const char *const out_names[10] = {"o", "final_state", "dq", "dk", "dv", "dg", "dbeta", "dA_log",
                                          "ddt_bias", "dinitial_state"};
static const char *const out_dims[10] = {"BTHV", "NHKV", "BTHK", "BTHK", "BTHV", "BTHK", "BTH", "H", "HK", "NHKV"};

/* Sizes of a shape spelled "BTHK" given sz = {B, T, H, K, V, N}; returns the rank. */
static int dims_of(const char *spec, const int64_t sz[6], int64_t dims[4])
{
  int n = 0;
  for (; spec[n]; n++) dims[n] = sz[strchr("BTHKVN", spec[n]) - "BTHKVN"];
  return n;
}

/* Writes a random input file (host only: clmoe's counter-based generator). */
static void kda_make_example(const kda_args *a)
{
  int n, ncu = a->ncu;
  int64_t sz[6], *cu = a->cu, *shape = op_parse_list("--shape", a->shape, 0, 65536, &n); /* B, T, H, K, V, N */
  if (n != 5) app_usage_error("--shape: '%s' is not B,T,H,K,V", a->shape);
  memcpy(sz, shape, 5 * sizeof *sz);
  free(shape);
  if (ncu && (sz[0] != 1 || cu[ncu - 1] != sz[1]))
    app_usage_error("--cu-seqlens: with sequence offsets B must be 1 and the last offset T = %lld", (long long)sz[1]);
  sz[5] = ncu ? ncu - 1 : sz[0];
  const char *dtype = a->dtype ? a->dtype : "f32";
  uint64_t seed = a->seed < 0 ? 1 : (uint64_t)a->seed;
  int bf16 = !strcmp(dtype, "bf16");
  if (!bf16 && strcmp(dtype, "f32")) app_usage_error("--dtype: '%s' is not f32 or bf16", dtype);
  clmoe_st_writer *w;
  APP_CHECK(clmoe_st_writer_create(a->example, &w));
  for (int j = 0; j < IN_COUNT; j++) {
    if (j == IN_CU || (j == IN_H0 && !a->with_state) || (j >= IN_DO && !a->with_backward)) continue;
    int64_t dims[4];
    int rank = dims_of(in_dims[j], sz, dims);
    double numel = 1;
    for (int d = 0; d < rank; d++) numel *= (double)dims[d];
    if (numel > (double)(1 << 28)) app_usage_error("--shape: %s would have over 2^28 elements", in_names[j]);
    float *x = malloc((size_t)numel * sizeof *x + 4);
    uint16_t *h = malloc((size_t)numel * sizeof *h + 2);
    if (!x || !h) op_fail("out of memory");
    /* A_log around 1 (decay rates e^A_log), states small, everything else N(0, 1). */
    float mean = j == IN_ALOG ? 1.0f : 0.0f, sd = j == IN_ALOG || j == IN_DTB ? 0.5f : j == IN_H0 || j == IN_DHT ? 0.3f : 1.0f;
    for (size_t i = 0; i < (size_t)numel; i++)
      x[i] = clmoe_random_normal(seed * 64 + (uint64_t)j, i, mean, sd), h[i] = clmoe_bf16_from_f32(x[i]);
    int as_bf16 = bf16 && j <= IN_BETA;
    APP_CHECK(clmoe_st_writer_add_host(w, in_names[j], as_bf16 ? CLMOE_ST_BF16 : CLMOE_ST_F32, rank, dims,
                                       as_bf16 ? (const void *)h : (const void *)x));
    free(x);
    free(h);
  }
  if (ncu) APP_CHECK(clmoe_st_writer_add_host(w, "cu_seqlens", CLMOE_ST_I64, 1, (int64_t[]){ncu}, cu));
  APP_CHECK(clmoe_st_writer_metadata(w, "clmoe_version", clmoe_version()));
  APP_CHECK(clmoe_st_writer_metadata(w, "generator", "clmoe-op kda --make-example"));
  APP_CHECK(clmoe_st_writer_finish(w));
  printf("%s: wrote %s (N = %lld sequences, %s)\n", app_name, a->example, (long long)sz[5], dtype);
}

typedef struct kda_inputs {
  int present[IN_COUNT];
  clmoe_tensor t[IN_COUNT];
  int64_t sz[6]; /* B, T, H, K, V, N */
} kda_inputs;

/* Checks the file's tensor j (not cu_seqlens): rank and sizes (sz NULL: 4-D, any sizes) and
 * dtype: q, k, v, g, beta all F32 or all BF16, the others any float type. */
static void want(const clmoe_st_file *f, int j, const int64_t *sz, clmoe_st_dtype qtype)
{
  clmoe_st_info info;
  char have[160], expect[96];
  int64_t dims[4] = {-1, -1, -1, -1};
  int rank = sz ? dims_of(in_dims[j], sz, dims) : 4;
  APP_CHECK(clmoe_st_info_of(f, in_names[j], &info));
  int ok = info.ndim == rank;
  for (int d = 0; ok && d < rank; d++) ok = dims[d] < 0 || info.shape[d] == dims[d];
  op_describe("", dims, rank, expect, sizeof expect);
  op_describe(clmoe_st_dtype_name(info.dtype), info.shape, info.ndim, have, sizeof have);
  if (!ok) op_fail("%s: tensor '%s' is %s, expected%s (%s)", clmoe_st_path(f), in_names[j], have, expect, in_dims[j]);
  if (j <= IN_BETA && (info.dtype != qtype || (qtype != CLMOE_ST_F32 && qtype != CLMOE_ST_BF16)))
    op_fail("%s: tensor '%s' is %s; q, k, v, g and beta must all be F32 or all BF16", clmoe_st_path(f), in_names[j], have);
  clmoe_st_dtype t = info.dtype;
  int is_float = t == CLMOE_ST_F32 || t == CLMOE_ST_BF16 || t == CLMOE_ST_F16 || t == CLMOE_ST_F64 ||
                 t == CLMOE_ST_F8_E4M3 || t == CLMOE_ST_F8_E5M2;
  if (j > IN_BETA && !is_float)
    op_fail("%s: tensor '%s' is %s; expected a float type", clmoe_st_path(f), in_names[j], have);
}

/* Checks the input file before any device work: every name known, every shape consistent
 * with q's and v's (and N). */
static void kda_check_inputs(const clmoe_st_file *f, const kda_args *a, kda_inputs *in)
{
  const char *path = clmoe_st_path(f);
  for (int i = 0; i < clmoe_st_count(f); i++) {
    clmoe_st_info info;
    clmoe_st_info_at(f, i, &info);
    int j = 0;
    while (j < IN_COUNT && strcmp(info.name, in_names[j])) j++;
    if (j == IN_COUNT)
      op_fail("%s: unknown tensor '%s' (kda takes q, k, v, g, beta, A_log, dt_bias, initial_state, "
           "cu_seqlens, do, dfinal_state)", path, info.name);
    in->present[j] = 1;
  }
  for (int j = 0; j < IN_H0; j++)
    if (!in->present[j]) op_fail("%s: the required tensor '%s' is missing", path, in_names[j]);
  if (a->backward && !in->present[IN_DO]) op_fail("%s: --backward needs the tensor 'do' [B, T, H, V]", path);
  if (!a->backward && (in->present[IN_DO] || in->present[IN_DHT])) {
    fprintf(stderr, "%s: note: do and dfinal_state of %s are ignored without --backward\n", app_name, path);
    in->present[IN_DO] = in->present[IN_DHT] = 0;
  }
  if (in->present[IN_CU] && a->cu_list)
    app_usage_error("--cu-seqlens: %s already has a cu_seqlens tensor (use one or the other)", path);
  clmoe_st_info q, v, cu;
  APP_CHECK(clmoe_st_info_of(f, "q", &q));
  want(f, IN_Q, NULL, q.dtype);
  int64_t *sz = in->sz;
  memcpy(sz, q.shape, 4 * sizeof *sz);
  sz[4] = -1; /* V: any, taken from v */
  want(f, IN_V, sz, q.dtype);
  APP_CHECK(clmoe_st_info_of(f, "v", &v));
  sz[4] = v.shape[3], sz[5] = sz[0];
  if (in->present[IN_CU]) {
    APP_CHECK(clmoe_st_info_of(f, "cu_seqlens", &cu));
    if (cu.ndim != 1 || cu.shape[0] < 2 || (cu.dtype != CLMOE_ST_I32 && cu.dtype != CLMOE_ST_I64))
      op_fail("%s: tensor 'cu_seqlens' must be I32 or I64 [N + 1] with N >= 1", path);
    sz[5] = cu.shape[0] - 1;
  } else if (a->cu_list) {
    sz[5] = a->ncu - 1;
  }
  if ((in->present[IN_CU] || a->cu_list) && sz[0] != 1)
    op_fail("%s: q is [%lld, ...]: with cu_seqlens the batch size B must be 1 (pack the sequences along T)", path,
         (long long)sz[0]);
  for (int j = 0; j < IN_COUNT; j++)
    if (in->present[j] && j != IN_CU) want(f, j, sz, q.dtype);
}

/* Loads the inputs; cu_seqlens from the flag is checked against T and uploaded. */
static void kda_load_inputs(clmoe_st_file *f, clmoe_ctx *ctx, const kda_args *a, kda_inputs *in)
{
  for (int j = 0; j < IN_COUNT; j++) {
    if (!in->present[j]) continue;
    int flags = j <= IN_BETA || j == IN_CU ? CLMOE_ST_LOAD_NATIVE : CLMOE_ST_LOAD_F32;
    clmoe_status st = clmoe_st_load(f, in_names[j], ctx, flags, &in->t[j]);
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
  APP_CHECK(clmoe_tensor_create(ctx, &in->t[IN_CU], CLMOE_I32, 1, (int64_t[]){n}));
  APP_CHECK(clmoe_tensor_write(&in->t[IN_CU], c32, (size_t)n * sizeof *c32));
  in->present[IN_CU] = 1;
  free(c32);
}

static void kda_write(const kda_args *a, clmoe_ctx *ctx, const kda_inputs *in, const clmoe_tensor *out)
{
  const clmoe_device_caps *caps = clmoe_ctx_caps(ctx);
  char scale[32], lb[32];
  snprintf(scale, sizeof scale, "%.9g", a->scale != 0 ? a->scale : 1.0 / sqrt((double)in->sz[3]));
  snprintf(lb, sizeof lb, "%.9g", a->lower_bound);
  const char *meta[][2] = {
      {"clmoe_version", clmoe_version()}, {"op", "kda"}, {"device", caps->device_name},
      {"platform", caps->platform_name}, {"driver", caps->driver_version}, {"input", a->in},
      {"forward", a->recurrent ? "recurrent" : "chunked"}, {"backward", a->backward ? "chunked" : "none"},
      {"scale", scale}, {"lower_bound", lb}, {"gate", "bounded"},
      {"cu_seqlens", a->cu_list ? a->cu_list : in->present[IN_CU] ? "from the input file" : "none"},
      {"storage", in->t[IN_Q].dtype == CLMOE_BF16 ? "bf16" : "f32"}};
  clmoe_st_writer *w;
  APP_CHECK(clmoe_st_writer_create(a->out, &w));
  for (int i = 0; i < (a->backward ? 10 : 2); i++) {
    clmoe_status st = clmoe_st_writer_add(w, out_names[i], &out[i]);
    if (st != CLMOE_OK) app_die(st, "collecting the outputs");
  }
  for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++)
    APP_CHECK(clmoe_st_writer_metadata(w, meta[i][0], meta[i][1]));
  clmoe_status st = clmoe_st_writer_finish(w);
  if (st != CLMOE_OK) app_die(st, "writing --out");
}

static void kda_run(const kda_args *a)
{
  if (!a->in || !a->out) app_usage_error("kda: --in FILE and --out FILE are required");
  if (!(a->lower_bound >= -5.0 && a->lower_bound < 0.0))
    app_usage_error("--lower-bound: %g is outside [-5, 0)", a->lower_bound);
  clmoe_st_file *f = NULL;
  clmoe_status st = clmoe_st_open(a->in, &f);
  if (st != CLMOE_OK) app_die(st, "reading --in");
  kda_inputs in;
  memset(&in, 0, sizeof in);
  kda_check_inputs(f, a, &in);
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options copts = {.device = a->device};
  APP_CHECK(clmoe_ctx_create(&ctx, &copts));
  kda_load_inputs(f, ctx, a, &in);
  clmoe_kda_options opts = {.scale = (float)a->scale, .lower_bound = (float)a->lower_bound};
  const clmoe_tensor *t = in.t;
  clmoe_kda_inputs ki = {&t[IN_Q], &t[IN_K], &t[IN_V], &t[IN_G], &t[IN_BETA], &t[IN_ALOG], &t[IN_DTB],
                         in.present[IN_H0] ? &t[IN_H0] : NULL, in.present[IN_CU] ? &t[IN_CU] : NULL};
  clmoe_tensor out[10];
  memset(out, 0, sizeof out);
  int nout = a->backward ? 10 : 2;
  for (int i = 0; i < nout; i++) {
    int64_t dims[4];
    int rank = dims_of(out_dims[i], in.sz, dims);
    APP_CHECK(clmoe_tensor_create(ctx, &out[i], CLMOE_F32, rank, dims));
  }
  double t0 = app_now();
  if (a->recurrent) st = clmoe_kda_recurrent(ctx, &opts, &ki, &out[0], &out[1]);
  else st = clmoe_kda_forward(ctx, &opts, &ki, &out[0], &out[1]);
  if (st != CLMOE_OK) app_die(st, a->recurrent ? "clmoe_kda_recurrent" : "clmoe_kda_forward");
  if (a->backward) {
    clmoe_kda_grads g = {&out[2], &out[3], &out[4], &out[5], &out[6], &out[7], &out[8], &out[9]};
    st = clmoe_kda_backward(ctx, &opts, &ki, &t[IN_DO], in.present[IN_DHT] ? &t[IN_DHT] : NULL, &g);
    if (st != CLMOE_OK) app_die(st, "clmoe_kda_backward");
  }
  APP_CHECK(clmoe_ctx_finish(ctx));
  double secs = app_now() - t0;
  kda_write(a, ctx, &in, out);
  printf("%s: %s forward%s on %s in %.3f s; wrote %s\n", app_name, a->recurrent ? "recurrent" : "chunked",
         a->backward ? " + backward" : "", clmoe_ctx_caps(ctx)->device_name, secs, a->out);
  for (int i = 0; i < nout; i++) clmoe_tensor_destroy(&out[i]);
  for (int j = 0; j < IN_COUNT; j++) clmoe_tensor_destroy(&in.t[j]);
  clmoe_ctx_destroy(ctx);
  clmoe_st_close(f);
}

static int cmd_kda(int argc, char **argv)
{
  kda_args a = {.lower_bound = -5.0, .seed = -1}; /* dtype NULL, seed -1: not given */
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      kda_usage();
      return 0;
    } else if (app_option(argc, argv, &i, "--in", &v)) a.in = v;
    else if (app_option(argc, argv, &i, "--out", &v)) a.out = v;
    else if (app_option(argc, argv, &i, "--device", &v)) a.device = v;
    else if (app_option(argc, argv, &i, "--scale", &v)) a.scale = parse_double("--scale", v);
    else if (app_option(argc, argv, &i, "--lower-bound", &v)) a.lower_bound = parse_double("--lower-bound", v);
    else if (app_option(argc, argv, &i, "--cu-seqlens", &v)) a.cu_list = v;
    else if (app_option(argc, argv, &i, "--make-example", &v)) a.example = v;
    else if (app_option(argc, argv, &i, "--shape", &v)) a.shape = v;
    else if (app_option(argc, argv, &i, "--seed", &v)) a.seed = app_parse_int("--seed", v, 0, INT32_MAX);
    else if (app_option(argc, argv, &i, "--dtype", &v)) a.dtype = v;
    else if (!strcmp(argv[i], "--backward")) a.backward = 1;
    else if (!strcmp(argv[i], "--recurrent")) a.recurrent = 1;
    else if (!strcmp(argv[i], "--with-state")) a.with_state = 1;
    else if (!strcmp(argv[i], "--with-backward")) a.with_backward = 1;
    else app_usage_error("unknown argument '%s'", argv[i]);
  }
  if (a.cu_list) { /* checked first: a bad list is a command-line error (exit 2) */
    a.cu = op_parse_list("--cu-seqlens", a.cu_list, 0, INT32_MAX, &a.ncu);
    int ok = a.ncu >= 2 && a.cu[0] == 0;
    for (int i = 1; i < a.ncu; i++) ok = ok && a.cu[i] >= a.cu[i - 1];
    if (!ok) app_usage_error("--cu-seqlens: '%s' must start at 0, never decrease and have two offsets or more", a.cu_list);
  }
  if (a.example) {
    if (!a.shape) app_usage_error("--make-example needs --shape B,T,H,K,V");
    if (a.in || a.out) app_usage_error("--make-example does not run the op: leave out --in and --out");
    kda_make_example(&a);
  } else {
    if (a.shape || a.with_state || a.with_backward || a.dtype || a.seed >= 0)
      app_usage_error("--shape, --seed, --dtype, --with-state and --with-backward go with --make-example");
    kda_run(&a);
  }
  free(a.cu);
  return 0;
}

/* ---- compare ------------------------------------------------------------------------ */
static void compare_usage(void)
{
  printf("Usage: clmoe-op compare A.safetensors B.safetensors [--tol T]\n"
         "\n"
         "Testing aid: compares every tensor of A with the tensor of the same name in B (B is\n"
         "the reference) and prints the max absolute error and the max relative error\n"
         "max|a - b| / max|b|. Exit status 0 when both files have the same tensor names and\n"
         "shapes and every relative error is <= T (default 1e-4; NaN never passes), 1 otherwise,\n"
         "2 for a bad command line. Any dtype is compared as f32.\n");
}

/* Max abs and relative error of a against the reference b. */
static double compare_one(clmoe_st_file *fa, clmoe_st_file *fb, const clmoe_st_info *ia, double *abs_err)
{
  size_t n = (size_t)ia->numel;
  float *x = malloc(n * sizeof *x + 4), *y = malloc(n * sizeof *y + 4);
  if (!x || !y) op_fail("out of memory comparing tensor '%s'", ia->name);
  APP_CHECK(clmoe_st_read_f32(fa, ia->name, x, n));
  APP_CHECK(clmoe_st_read_f32(fb, ia->name, y, n));
  double worst = 0, scale = 0;
  for (size_t i = 0; i < n; i++) {
    if (isfinite(y[i])) scale = fmax(scale, fabs((double)y[i]));
    if (x[i] == y[i]) continue; /* equal infinities too */
    if (!isfinite(x[i]) || !isfinite(y[i])) worst = INFINITY; /* NaN never passes */
    else worst = fmax(worst, fabs((double)x[i] - (double)y[i]));
  }
  free(x);
  free(y);
  *abs_err = worst;
  return scale > 0 ? worst / scale : worst;
}

static int cmd_compare(int argc, char **argv)
{
  const char *files[2] = {NULL, NULL};
  int nfiles = 0;
  double tol = 1e-4;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      compare_usage();
      return 0;
    } else if (app_option(argc, argv, &i, "--tol", &v)) {
      tol = parse_double("--tol", v);
      if (tol < 0) app_usage_error("--tol: %s is negative", v);
    } else if (argv[i][0] == '-' && argv[i][1]) app_usage_error("unknown argument '%s'", argv[i]);
    else if (nfiles == 2) app_usage_error("compare takes two files ('%s' is a third)", argv[i]);
    else files[nfiles++] = argv[i];
  }
  if (nfiles != 2) app_usage_error("compare needs two files: A.safetensors B.safetensors");
  clmoe_st_file *f[2];
  for (int k = 0; k < 2; k++) {
    clmoe_status st = clmoe_st_open(files[k], &f[k]);
    if (st != CLMOE_OK) app_die(st, "reading a file to compare");
  }
  int bad = 0;
  printf("%-24s %-24s %12s %12s  %s\n", "tensor", "shape", "max abs err", "max rel err", "result");
  for (int k = 0; k < 2; k++) /* the tensors of A, then those only in B */
    for (int i = 0; i < clmoe_st_count(f[k]); i++) {
      clmoe_st_info ia, ib;
      char da[160], db[160], result[400];
      double abs_err = NAN, rel = NAN;
      clmoe_st_info_at(f[k], i, &ia);
      if (k == 1 && clmoe_st_has(f[0], ia.name)) continue;
      op_describe(clmoe_st_dtype_name(ia.dtype), ia.shape, ia.ndim, da, sizeof da);
      if (k == 1 || !clmoe_st_has(f[1], ia.name)) {
        snprintf(result, sizeof result, "MISSING in %s", files[1 - k]);
      } else {
        APP_CHECK(clmoe_st_info_of(f[1], ia.name, &ib));
        int same = ia.ndim == ib.ndim;
        for (int d = 0; same && d < ia.ndim; d++) same = ia.shape[d] == ib.shape[d];
        if (same) rel = compare_one(f[0], f[1], &ia, &abs_err);
        snprintf(result, sizeof result, "%s%s", !same ? "SHAPE differs: " : rel <= tol ? "ok" : "FAIL",
                 same ? "" : op_describe(clmoe_st_dtype_name(ib.dtype), ib.shape, ib.ndim, db, sizeof db));
      }
      printf("%-24s %-24s %12.3e %12.3e  %s\n", ia.name, da, abs_err, rel, result);
      bad += !(rel <= tol);
    }
  printf("%s: %d problem(s); tolerance %g\n", bad ? "FAIL" : "ok", bad, tol);
  clmoe_st_close(f[0]);
  clmoe_st_close(f[1]);
  return bad ? 1 : 0;
}

/* ---- commands ---------------------------------------------------------------------------- */

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} commands[] = {
    {"kda", cmd_kda, "KDA (Kimi Delta Attention) forward and backward: inputs q, k, v, g, beta,\n"
                     "           A_log, dt_bias [, initial_state, cu_seqlens, do, dfinal_state]"},
    {"mla", cmd_mla, "Gated MLA attention forward and backward: inputs q, k_nope, k_rope, v\n"
                     "           [, cu_seqlens, do]"},
    {"compare", cmd_compare, "testing aid: max errors between the tensors of two files"},
};

static void usage(void)
{
  printf("Usage: clmoe-op COMMAND [options]   (clmoe-op COMMAND --help)\n"
         "\n"
         "Runs one clmoe operator on tensors from a safetensors file and writes the results to\n"
         "another, for comparison with other implementations.\n"
         "\n"
         "Commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    printf("  %-8s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
  app_name = "clmoe-op";
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION, .usage = usage};
  int first = 1;
  if (argc < 2) {
    usage();
    return 2;
  }
  app_standard_flag(argc, argv, &first, &flags); /* --help, --version: exit */
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(argv[1], commands[i].name)) continue;
    static char name[64];
    snprintf(name, sizeof name, "clmoe-op %s", commands[i].name);
    app_name = name;
    return commands[i].run(argc - 1, argv + 1);
  }
  app_usage_error("unknown command '%s' (kda, mla, compare)", argv[1]);
}
