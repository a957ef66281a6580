/* clmoe-op mla: the MLA attention op (include/clmoe/mla.h) on tensors from a safetensors file, for
 * comparison with other implementations (PyTorch's scaled_dot_product_attention, flash
 * attention, another device) tensor by tensor; --naive runs the materialised kernel to
 * cross-check the tiled one through files. Registered in clmoe_op.c's command table; reads,
 * checks and writes its tensors through the harness (op_common.c). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
  op_args op; /* the shared flags (op_common.c) */
  int naive;  /* --naive */
  double scale;
} mla_args;

/* Sizes by letter: B, T, H, N (Dn), R (Dr), V (Dv), Q (Dn + Dr), S (sequences). */
#define LETTERS "BTHNRVQS"
enum { IN_Q, IN_KN, IN_KR, IN_V, IN_CU, IN_DO, IN_COUNT };
static const char *const in_names[IN_COUNT] = {"q", "k_nope", "k_rope", "v", "cu_seqlens", "do"};
static const char *const in_dims[IN_COUNT] = {"BTHQ", "BTHN", "BTR", "BTHV", "", "BTHV"};
enum { OUT_O, OUT_LSE, OUT_DQ, OUT_DKN, OUT_DKR, OUT_DV, OUT_COUNT };
static const char *const out_names[OUT_COUNT] = {"o", "lse", "dq", "dk_nope", "dk_rope", "dv"};
static const char *const out_dims[OUT_COUNT] = {"BTHV", "BTH", "BTHQ", "BTHN", "BTR", "BTHV"};
static const op_sig mla_sig = {
    .name = "mla", .letters = LETTERS, .seqs = 'S', .shape = "B,T,H,Dn,Dr,Dv",
    .example_flags = "--shape, --seed, --dtype and --with-backward",
    .nin = IN_COUNT, .nmain = IN_CU, .nrequired = IN_CU, /* q, k_nope, k_rope, v */
    .icu = IN_CU, .ido = IN_DO, .do_shape = "[B, T, H, Dv]",
    .in_names = in_names, .in_dims = in_dims, .out_names = out_names, .out_dims = out_dims};

static void make_example(const mla_args *a)
{
  int64_t sz[8];
  op_example_sizes(&a->op, &mla_sig, sz);
  sz[6] = sz[3] + sz[4], sz[7] = a->op.ncu ? a->op.ncu - 1 : sz[0];
  int want[IN_COUNT];
  float mean[IN_COUNT], sd[IN_COUNT];
  for (int j = 0; j < IN_COUNT; j++) /* N(0, 1) */
    want[j] = j != IN_DO || a->op.with_backward, mean[j] = 0.0f, sd[j] = 1.0f;
  op_example_write(&a->op, &mla_sig, sz, want, mean, sd);
}

/* The inputs' names and shapes; dtypes: q, k_nope, k_rope, v the same F32 or BF16, do any
 * float type. */
static void check_inputs(const clmoe_st_file *f, const mla_args *a, op_inputs *in)
{
  const char *path = clmoe_st_path(f);
  op_find_inputs(f, &a->op, &mla_sig, in);
  clmoe_st_info q, kn, v;
  APP_CHECK(clmoe_st_info_of(f, "q", &q));
  APP_CHECK(clmoe_st_info_of(f, "k_nope", &kn));
  APP_CHECK(clmoe_st_info_of(f, "v", &v));
  if (q.ndim != 4 || kn.ndim != 4 || v.ndim != 4)
    op_fail("%s: q, k_nope and v must be 4-D [B, T, H, .] (q is %dD, k_nope %dD, v %dD)", path, q.ndim, kn.ndim, v.ndim);
  int64_t *sz = in->sz;
  sz[0] = q.shape[0], sz[1] = q.shape[1], sz[2] = q.shape[2], sz[3] = kn.shape[3];
  sz[4] = q.shape[3] - kn.shape[3], sz[5] = v.shape[3], sz[6] = q.shape[3];
  if (sz[4] < 1)
    op_fail("%s: q's last size %lld must exceed k_nope's %lld (q holds Dn + Dr dims per head)", path,
         (long long)q.shape[3], (long long)kn.shape[3]);
  sz[7] = op_sequences(f, &a->op, &mla_sig, in);
  for (int j = 0; j < IN_COUNT; j++)
    if (in->present[j] && j != IN_CU) op_want(f, &mla_sig, j, sz, q.dtype);
}

static void run(const mla_args *a)
{
  if (a->naive && a->op.backward) app_usage_error("--naive is forward only: leave out --backward");
  clmoe_st_file *f = op_open_input(&a->op);
  op_inputs in;
  memset(&in, 0, sizeof in);
  check_inputs(f, a, &in);
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options copts = {.device = a->op.std.device};
  APP_CHECK(clmoe_ctx_create(&ctx, &copts));
  op_load_inputs(f, ctx, &a->op, &mla_sig, &in);
  const clmoe_tensor *t = in.t;
  clmoe_mla_attn_inputs ai = {&t[IN_Q], &t[IN_KN], &t[IN_KR], &t[IN_V], in.present[IN_CU] ? &t[IN_CU] : NULL};
  clmoe_tensor out[OUT_COUNT];
  const int backward = a->op.backward, nout = backward ? OUT_COUNT : 2;
  op_create_outputs(ctx, &mla_sig, &in, out, nout);
  double t0 = app_now();
  float scale = (float)a->scale;
  clmoe_status st;
  if (a->naive) st = clmoe_mla_attention_naive(ctx, scale, &ai, &out[OUT_O], &out[OUT_LSE]);
  else st = clmoe_mla_attention(ctx, scale, &ai, &out[OUT_O], &out[OUT_LSE]);
  if (st != CLMOE_OK) app_die(st, a->naive ? "clmoe_mla_attention_naive" : "clmoe_mla_attention");
  if (backward) {
    clmoe_mla_attn_grads g = {&out[OUT_DQ], &out[OUT_DKN], &out[OUT_DKR], &out[OUT_DV]};
    st = clmoe_mla_attention_backward(ctx, scale, &ai, &out[OUT_O], &out[OUT_LSE], &t[IN_DO], &g);
    if (st != CLMOE_OK) app_die(st, "clmoe_mla_attention_backward");
  }
  APP_CHECK(clmoe_ctx_finish(ctx));
  double secs = app_now() - t0;
  char sc[32];
  snprintf(sc, sizeof sc, "%.9g", a->scale != 0 ? a->scale : 1.0 / sqrt((double)in.sz[6]));
  const char *const meta[][2] = {
      {"forward", a->naive ? "naive" : "tiled"}, {"backward", backward ? "tiled" : "none"}, {"scale", sc}};
  op_write_outputs(&a->op, ctx, &mla_sig, &in, out, nout, meta, (int)(sizeof meta / sizeof meta[0]));
  printf("%s: %s forward%s on %s in %.3f s; wrote %s\n", app_name, a->naive ? "naive" : "tiled",
         backward ? " + backward" : "", clmoe_ctx_caps(ctx)->device_name, secs, a->op.out);
  op_release(f, ctx, &in, out, nout);
}

int cmd_mla(int argc, char **argv)
{
  mla_args a = {0};
  op_args_init(&a.op, usage);
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (op_flag(argc, argv, &i, &a.op)) continue;
    if (app_option(argc, argv, &i, "--scale", &v)) {
      char *end = NULL;
      errno = 0;
      a.scale = strtod(v, &end);
      if (errno || !end || end == v || *end || !isfinite(a.scale) || a.scale <= 0)
        app_usage_error("--scale: '%s' is not a positive finite number", v);
    } else if (!strcmp(argv[i], "--naive")) a.naive = 1;
    else app_usage_error("unknown argument '%s'", argv[i]);
  }
  if (op_args_finish(&a.op, &mla_sig, 0)) make_example(&a);
  else run(&a);
  free(a.op.cu);
  return 0;
}
