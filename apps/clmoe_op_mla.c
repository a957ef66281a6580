/* clmoe-op mla: the MLA attention op (include/clmoe/mla.h) on tensors from a safetensors file, for
 * comparison with other implementations (PyTorch's scaled_dot_product_attention, flash
 * attention, another device) tensor by tensor; --naive runs the materialised kernel to
 * cross-check the tiled one through files. Registered in clmoe_op.c's command table. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "app_common.h"
#include "clmoe_op.h"


static void usage(void)
{
  printf("Usage: clmoe-op mla --in X.safetensors --out Y.safetensors [--backward] [--naive]\n"
         "                    [--device SPEC] [--scale S] [--cu-seqlens LIST]\n"
         "       clmoe-op mla --make-example FILE --shape B,T,H,Dn,Dr,Dv [--seed N]\n"
         "                    [--dtype f32|bf16] [--with-backward] [--cu-seqlens LIST]\n"
         "\n"
         "Runs the gated MLA's attention (include/clmoe/mla.h: causal softmax attention with a key of\n"
         "Dn per-head dims plus Dr dims shared by all heads, NoPE) on the tensors of a\n"
         "safetensors file and writes the results to another. The tiled kernel never forms a\n"
         "T x T matrix; --naive uses the materialised one instead (to cross-check).\n"
         "\n"
         "Inputs (any other name is an error):\n"
         "  q [B, T, H, Dn + Dr], k_nope [B, T, H, Dn], k_rope [B, T, Dr], v [B, T, H, Dv]:\n"
         "      all F32 or all BF16; Dn + Dr <= 256, Dv <= 256\n"
         "  cu_seqlens [N + 1] (optional, I32 or I64): N sequences packed along T, B = 1\n"
         "  do [B, T, H, Dv] (any float type): for --backward\n"
         "Outputs (F32): o [B, T, H, Dv], lse [B, T, H] (natural log-sum-exp of the scaled\n"
         "  scores); with --backward also dq, dk_nope, dk_rope (summed over heads), dv.\n"
         "  The metadata records the clmoe version, the device and the options.\n"
         "\n"
         "  --in FILE          the inputs\n"
         "  --out FILE         the outputs (written to FILE.tmp.PID, then renamed into place)\n"
         "  --backward         also the gradients, given do\n"
         "  --naive            the materialised kernel (memory T^2 H; forward only)\n"
         "  --scale S          softmax scale (default 1/sqrt(Dn + Dr))\n"
         "  --cu-seqlens LIST  sequence offsets such as 0,5,12 (B = 1, the last one = T); not\n"
         "                     with a cu_seqlens tensor in the file\n"
         "  --device SPEC      P:D, gpu, cpu, an implementation (pocl, intel, nvidia, amd, ...:\n"
         "                     only its own devices) or part of a name, as for clmoe-info\n"
         "                     (default: CLMOE_DEVICE, else the first GPU, else the first CPU)\n"
         "\n"
         "Testing aid: --make-example FILE writes random N(0, 1) inputs of --shape\n"
         "B,T,H,Dn,Dr,Dv without a device: --seed N (default 1), --dtype of q, k_nope, k_rope,\n"
         "v (default f32), --with-backward adds do, --cu-seqlens an I64 cu_seqlens.\n"
         "\n"
         "Exit status: 0 success, 1 bad input data or a failure, 2 a bad command line.\n");
}

typedef struct mla_args {
  const char *in, *out, *device, *example, *shape, *cu_list, *dtype;
  int64_t *cu;
  int ncu, backward, naive, with_backward;
  double scale;
  long long seed;
} mla_args;

/* Sizes by letter: B, T, H, N (Dn), R (Dr), V (Dv), Q (Dn + Dr), S (sequences). */
#define LETTERS "BTHNRVQS"
enum { IN_Q, IN_KN, IN_KR, IN_V, IN_CU, IN_DO, IN_COUNT };
static const char *const in_names[IN_COUNT] = {"q", "k_nope", "k_rope", "v", "cu_seqlens", "do"};
static const char *const in_dims[IN_COUNT] = {"BTHQ", "BTHN", "BTR", "BTHV", "", "BTHV"};
enum { OUT_O, OUT_LSE, OUT_DQ, OUT_DKN, OUT_DKR, OUT_DV, OUT_COUNT };
static const char *const out_names[OUT_COUNT] = {"o", "lse", "dq", "dk_nope", "dk_rope", "dv"};
static const char *const out_dims[OUT_COUNT] = {"BTHV", "BTH", "BTHQ", "BTHN", "BTR", "BTHV"};

static int dims_of(const char *spec, const int64_t sz[8], int64_t dims[4])
{
  int n = 0;
  for (; spec[n]; n++) dims[n] = sz[strchr(LETTERS, spec[n]) - LETTERS];
  return n;
}

static void make_example(const mla_args *a)
{
  int n, ncu = a->ncu;
  int64_t sz[8], *shape = op_parse_list("--shape", a->shape, 0, 65536, &n);
  if (n != 6) app_usage_error("--shape: '%s' is not B,T,H,Dn,Dr,Dv", a->shape);
  sz[0] = shape[0], sz[1] = shape[1], sz[2] = shape[2], sz[3] = shape[3], sz[4] = shape[4], sz[5] = shape[5];
  free(shape);
  sz[6] = sz[3] + sz[4], sz[7] = ncu ? ncu - 1 : sz[0];
  if (ncu && (sz[0] != 1 || a->cu[ncu - 1] != sz[1]))
    app_usage_error("--cu-seqlens: with sequence offsets B must be 1 and the last offset T = %lld", (long long)sz[1]);
  const char *dtype = a->dtype ? a->dtype : "f32";
  int bf16 = !strcmp(dtype, "bf16");
  if (!bf16 && strcmp(dtype, "f32")) app_usage_error("--dtype: '%s' is not f32 or bf16", dtype);
  uint64_t seed = a->seed < 0 ? 1 : (uint64_t)a->seed;
  clmoe_st_writer *w;
  APP_CHECK(clmoe_st_writer_create(a->example, &w));
  for (int j = 0; j < IN_COUNT; j++) {
    if (j == IN_CU || (j == IN_DO && !a->with_backward)) continue;
    int64_t dims[4];
    int rank = dims_of(in_dims[j], sz, dims);
    double numel = 1;
    for (int d = 0; d < rank; d++) numel *= (double)dims[d];
    if (numel > (double)(1 << 28)) app_usage_error("--shape: %s would have over 2^28 elements", in_names[j]);
    float *x = malloc((size_t)numel * sizeof *x + 4);
    uint16_t *h = malloc((size_t)numel * sizeof *h + 2);
    if (!x || !h) op_fail("out of memory");
    for (size_t i = 0; i < (size_t)numel; i++)
      x[i] = clmoe_random_normal(seed * 64 + (uint64_t)j, i, 0.0f, 1.0f), h[i] = clmoe_bf16_from_f32(x[i]);
    int as_bf16 = bf16 && j < IN_CU;
    APP_CHECK(clmoe_st_writer_add_host(w, in_names[j], as_bf16 ? CLMOE_ST_BF16 : CLMOE_ST_F32, rank, dims,
                                       as_bf16 ? (const void *)h : (const void *)x));
    free(x), free(h);
  }
  if (ncu) APP_CHECK(clmoe_st_writer_add_host(w, "cu_seqlens", CLMOE_ST_I64, 1, (int64_t[]){ncu}, a->cu));
  APP_CHECK(clmoe_st_writer_metadata(w, "clmoe_version", clmoe_version()));
  APP_CHECK(clmoe_st_writer_metadata(w, "generator", "clmoe-op mla --make-example"));
  APP_CHECK(clmoe_st_writer_finish(w));
  printf("%s: wrote %s (N = %lld sequences, %s)\n", app_name, a->example, (long long)sz[7], dtype);
}

typedef struct mla_inputs {
  int present[IN_COUNT];
  clmoe_tensor t[IN_COUNT];
  int64_t sz[8];
} mla_inputs;

/* Tensor j of the file: rank and sizes from sz, and its dtype (q, k_nope, k_rope, v: the
 * same F32 or BF16; do: any float type). */
static void want(const clmoe_st_file *f, int j, const int64_t *sz, clmoe_st_dtype qtype)
{
  clmoe_st_info info;
  char have[160], expect[96];
  int64_t dims[4];
  int rank = dims_of(in_dims[j], sz, dims);
  APP_CHECK(clmoe_st_info_of(f, in_names[j], &info));
  int ok = info.ndim == rank;
  for (int d = 0; ok && d < rank; d++) ok = info.shape[d] == dims[d];
  op_describe("", dims, rank, expect, sizeof expect);
  op_describe(clmoe_st_dtype_name(info.dtype), info.shape, info.ndim, have, sizeof have);
  if (!ok) op_fail("%s: tensor '%s' is %s, expected%s (%s)", clmoe_st_path(f), in_names[j], have, expect, in_dims[j]);
  if (j < IN_CU && (info.dtype != qtype || (qtype != CLMOE_ST_F32 && qtype != CLMOE_ST_BF16)))
    op_fail("%s: tensor '%s' is %s; q, k_nope, k_rope and v must all be F32 or all BF16", clmoe_st_path(f),
         in_names[j], have);
  clmoe_st_dtype t = info.dtype;
  if (j == IN_DO && !(t == CLMOE_ST_F32 || t == CLMOE_ST_BF16 || t == CLMOE_ST_F16 || t == CLMOE_ST_F64))
    op_fail("%s: tensor 'do' is %s; expected a float type", clmoe_st_path(f), have);
}

static void check_inputs(const clmoe_st_file *f, const mla_args *a, mla_inputs *in)
{
  const char *path = clmoe_st_path(f);
  for (int i = 0; i < clmoe_st_count(f); i++) {
    clmoe_st_info info;
    clmoe_st_info_at(f, i, &info);
    int j = 0;
    while (j < IN_COUNT && strcmp(info.name, in_names[j])) j++;
    if (j == IN_COUNT)
      op_fail("%s: unknown tensor '%s' (mla takes q, k_nope, k_rope, v, cu_seqlens, do)", path, info.name);
    in->present[j] = 1;
  }
  for (int j = 0; j < IN_CU; j++)
    if (!in->present[j]) op_fail("%s: the required tensor '%s' is missing", path, in_names[j]);
  if (a->backward && !in->present[IN_DO]) op_fail("%s: --backward needs the tensor 'do' [B, T, H, Dv]", path);
  if (!a->backward && in->present[IN_DO]) {
    fprintf(stderr, "%s: note: do of %s is ignored without --backward\n", app_name, path);
    in->present[IN_DO] = 0;
  }
  if (in->present[IN_CU] && a->cu_list)
    app_usage_error("--cu-seqlens: %s already has a cu_seqlens tensor (use one or the other)", path);
  clmoe_st_info q, kn, v, cu;
  APP_CHECK(clmoe_st_info_of(f, "q", &q));
  APP_CHECK(clmoe_st_info_of(f, "k_nope", &kn));
  APP_CHECK(clmoe_st_info_of(f, "v", &v));
  if (q.ndim != 4 || kn.ndim != 4 || v.ndim != 4)
    op_fail("%s: q, k_nope and v must be 4-D [B, T, H, .] (q is %dD, k_nope %dD, v %dD)", path, q.ndim, kn.ndim, v.ndim);
  int64_t *sz = in->sz;
  sz[0] = q.shape[0], sz[1] = q.shape[1], sz[2] = q.shape[2], sz[3] = kn.shape[3];
  sz[4] = q.shape[3] - kn.shape[3], sz[5] = v.shape[3], sz[6] = q.shape[3], sz[7] = sz[0];
  if (sz[4] < 1)
    op_fail("%s: q's last size %lld must exceed k_nope's %lld (q holds Dn + Dr dims per head)", path,
         (long long)q.shape[3], (long long)kn.shape[3]);
  if (in->present[IN_CU]) {
    APP_CHECK(clmoe_st_info_of(f, "cu_seqlens", &cu));
    if (cu.ndim != 1 || cu.shape[0] < 2 || (cu.dtype != CLMOE_ST_I32 && cu.dtype != CLMOE_ST_I64))
      op_fail("%s: tensor 'cu_seqlens' must be I32 or I64 [N + 1] with N >= 1", path);
    sz[7] = cu.shape[0] - 1;
  }
  if ((in->present[IN_CU] || a->cu_list) && sz[0] != 1)
    op_fail("%s: q is [%lld, ...]: with cu_seqlens the batch size B must be 1 (pack the sequences along T)", path,
         (long long)sz[0]);
  for (int j = 0; j < IN_COUNT; j++)
    if (in->present[j] && j != IN_CU) want(f, j, sz, q.dtype);
}

static void load_inputs(clmoe_st_file *f, clmoe_ctx *ctx, const mla_args *a, mla_inputs *in)
{
  for (int j = 0; j < IN_COUNT; j++) {
    if (!in->present[j]) continue;
    clmoe_status st = clmoe_st_load(f, in_names[j], ctx, j == IN_DO ? CLMOE_ST_LOAD_F32 : CLMOE_ST_LOAD_NATIVE,
                                    &in->t[j]);
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

static void run(const mla_args *a)
{
  if (!a->in || !a->out) app_usage_error("mla: --in FILE and --out FILE are required");
  if (a->naive && a->backward) app_usage_error("--naive is forward only: leave out --backward");
  clmoe_st_file *f = NULL;
  clmoe_status st = clmoe_st_open(a->in, &f);
  if (st != CLMOE_OK) app_die(st, "reading --in");
  mla_inputs in;
  memset(&in, 0, sizeof in);
  check_inputs(f, a, &in);
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options copts = {.device = a->device};
  APP_CHECK(clmoe_ctx_create(&ctx, &copts));
  load_inputs(f, ctx, a, &in);
  const clmoe_tensor *t = in.t;
  clmoe_mla_attn_inputs ai = {&t[IN_Q], &t[IN_KN], &t[IN_KR], &t[IN_V], in.present[IN_CU] ? &t[IN_CU] : NULL};
  clmoe_tensor out[OUT_COUNT];
  memset(out, 0, sizeof out);
  int nout = a->backward ? OUT_COUNT : 2;
  for (int i = 0; i < nout; i++) {
    int64_t dims[4];
    int rank = dims_of(out_dims[i], in.sz, dims);
    APP_CHECK(clmoe_tensor_create(ctx, &out[i], CLMOE_F32, rank, dims));
  }
  double t0 = app_now();
  float scale = (float)a->scale;
  if (a->naive) st = clmoe_mla_attention_naive(ctx, scale, &ai, &out[OUT_O], &out[OUT_LSE]);
  else st = clmoe_mla_attention(ctx, scale, &ai, &out[OUT_O], &out[OUT_LSE]);
  if (st != CLMOE_OK) app_die(st, a->naive ? "clmoe_mla_attention_naive" : "clmoe_mla_attention");
  if (a->backward) {
    clmoe_mla_attn_grads g = {&out[OUT_DQ], &out[OUT_DKN], &out[OUT_DKR], &out[OUT_DV]};
    st = clmoe_mla_attention_backward(ctx, scale, &ai, &out[OUT_O], &out[OUT_LSE], &t[IN_DO], &g);
    if (st != CLMOE_OK) app_die(st, "clmoe_mla_attention_backward");
  }
  APP_CHECK(clmoe_ctx_finish(ctx));
  double secs = app_now() - t0;
  const clmoe_device_caps *caps = clmoe_ctx_caps(ctx);
  char sc[32];
  snprintf(sc, sizeof sc, "%.9g", a->scale != 0 ? a->scale : 1.0 / sqrt((double)in.sz[6]));
  const char *meta[][2] = {
      {"clmoe_version", clmoe_version()}, {"op", "mla"}, {"device", caps->device_name},
      {"platform", caps->platform_name}, {"driver", caps->driver_version}, {"input", a->in},
      {"forward", a->naive ? "naive" : "tiled"}, {"backward", a->backward ? "tiled" : "none"}, {"scale", sc},
      {"cu_seqlens", a->cu_list ? a->cu_list : in.present[IN_CU] ? "from the input file" : "none"},
      {"storage", t[IN_Q].dtype == CLMOE_BF16 ? "bf16" : "f32"}};
  clmoe_st_writer *w;
  APP_CHECK(clmoe_st_writer_create(a->out, &w));
  for (int i = 0; i < nout; i++) {
    st = clmoe_st_writer_add(w, out_names[i], &out[i]);
    if (st != CLMOE_OK) app_die(st, "collecting the outputs");
  }
  for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) APP_CHECK(clmoe_st_writer_metadata(w, meta[i][0], meta[i][1]));
  st = clmoe_st_writer_finish(w);
  if (st != CLMOE_OK) app_die(st, "writing --out");
  printf("%s: %s forward%s on %s in %.3f s; wrote %s\n", app_name, a->naive ? "naive" : "tiled",
         a->backward ? " + backward" : "", caps->device_name, secs, a->out);
  for (int i = 0; i < nout; i++) clmoe_tensor_destroy(&out[i]);
  for (int j = 0; j < IN_COUNT; j++) clmoe_tensor_destroy(&in.t[j]);
  clmoe_ctx_destroy(ctx);
  clmoe_st_close(f);
}

int cmd_mla(int argc, char **argv)
{
  mla_args a = {.seed = -1};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage();
      return 0;
    } else if (app_option(argc, argv, &i, "--in", &v)) a.in = v;
    else if (app_option(argc, argv, &i, "--out", &v)) a.out = v;
    else if (app_option(argc, argv, &i, "--device", &v)) a.device = v;
    else if (app_option(argc, argv, &i, "--scale", &v)) {
      char *end = NULL;
      errno = 0;
      a.scale = strtod(v, &end);
      if (errno || !end || end == v || *end || !isfinite(a.scale) || a.scale <= 0)
        app_usage_error("--scale: '%s' is not a positive finite number", v);
    } else if (app_option(argc, argv, &i, "--cu-seqlens", &v)) a.cu_list = v;
    else if (app_option(argc, argv, &i, "--make-example", &v)) a.example = v;
    else if (app_option(argc, argv, &i, "--shape", &v)) a.shape = v;
    else if (app_option(argc, argv, &i, "--seed", &v)) a.seed = app_parse_int("--seed", v, 0, INT32_MAX);
    else if (app_option(argc, argv, &i, "--dtype", &v)) a.dtype = v;
    else if (!strcmp(argv[i], "--backward")) a.backward = 1;
    else if (!strcmp(argv[i], "--naive")) a.naive = 1;
    else if (!strcmp(argv[i], "--with-backward")) a.with_backward = 1;
    else app_usage_error("unknown argument '%s'", argv[i]);
  }
  if (a.cu_list) {
    a.cu = op_parse_list("--cu-seqlens", a.cu_list, 0, INT32_MAX, &a.ncu);
    int ok = a.ncu >= 2 && a.cu[0] == 0;
    for (int i = 1; i < a.ncu; i++) ok = ok && a.cu[i] >= a.cu[i - 1];
    if (!ok) app_usage_error("--cu-seqlens: '%s' must start at 0, never decrease and have two offsets or more", a.cu_list);
  }
  if (a.example) {
    if (!a.shape) app_usage_error("--make-example needs --shape B,T,H,Dn,Dr,Dv");
    if (a.in || a.out) app_usage_error("--make-example does not run the op: leave out --in and --out");
    make_example(&a);
  } else {
    if (a.shape || a.with_backward || a.dtype || a.seed >= 0)
      app_usage_error("--shape, --seed, --dtype and --with-backward go with --make-example");
    run(&a);
  }
  free(a.cu);
  return 0;
}
