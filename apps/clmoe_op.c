/* clmoe-op: runs one library operator on tensors from a safetensors file and writes the
 * results to another, to compare clmoe with other implementations (flash-linear-attention,
 * another device) tensor by tensor. Commands are a table: add mla, moe, ... there; each
 * describes its tensors to the harness (op_common.c), which reads, checks and writes
 * them. This file: the table, kda and compare. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe_op.h"

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
  op_args op;                /* the shared flags (op_common.c) */
  int recurrent, with_state; /* --recurrent; --with-state (--make-example) */
  double scale, lower_bound;
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
static const op_sig kda_sig = {
    .name = "kda", .letters = "BTHKVN", .seqs = 'N', .shape = "B,T,H,K,V",
    .example_flags = "--shape, --seed, --dtype, --with-state and --with-backward",
    .nin = IN_COUNT, .nmain = IN_ALOG, /* q, k, v, g, beta */
    .nrequired = IN_H0,                /* q to dt_bias */
    .icu = IN_CU, .ido = IN_DO, .do_shape = "[B, T, H, V]",
    .in_names = in_names, .in_dims = in_dims, .out_names = out_names, .out_dims = out_dims};

/* Writes a random input file (host only: clmoe's counter-based generator). */
static void kda_make_example(const kda_args *a)
{
  int64_t sz[6]; /* B, T, H, K, V, N */
  op_example_sizes(&a->op, &kda_sig, sz);
  sz[5] = a->op.ncu ? a->op.ncu - 1 : sz[0];
  int want[IN_COUNT];
  float mean[IN_COUNT], sd[IN_COUNT];
  for (int j = 0; j < IN_COUNT; j++) {
    want[j] = !(j == IN_H0 && !a->with_state) && !(j >= IN_DO && !a->op.with_backward);
    /* A_log around 1 (decay rates e^A_log), states small, everything else N(0, 1). */
    mean[j] = j == IN_ALOG ? 1.0f : 0.0f;
    sd[j] = j == IN_ALOG || j == IN_DTB ? 0.5f : j == IN_H0 || j == IN_DHT ? 0.3f : 1.0f;
  }
  op_example_write(&a->op, &kda_sig, sz, want, mean, sd);
}

/* Checks the input file before any device work: every name known, every shape consistent
 * with q's and v's (and N); dtypes: q, k, v, g, beta all F32 or all BF16, the others any
 * float type. */
static void kda_check_inputs(const clmoe_st_file *f, const kda_args *a, op_inputs *in)
{
  op_find_inputs(f, &a->op, &kda_sig, in);
  clmoe_st_info q, v;
  APP_CHECK(clmoe_st_info_of(f, "q", &q));
  op_want(f, &kda_sig, IN_Q, NULL, q.dtype);
  int64_t *sz = in->sz;
  memcpy(sz, q.shape, 4 * sizeof *sz);
  sz[4] = -1; /* V: any, taken from v */
  op_want(f, &kda_sig, IN_V, sz, q.dtype);
  APP_CHECK(clmoe_st_info_of(f, "v", &v));
  sz[4] = v.shape[3];
  sz[5] = op_sequences(f, &a->op, &kda_sig, in);
  for (int j = 0; j < IN_COUNT; j++)
    if (in->present[j] && j != IN_CU) op_want(f, &kda_sig, j, sz, q.dtype);
}

static void kda_run(const kda_args *a)
{
  if (!(a->lower_bound >= -5.0 && a->lower_bound < 0.0))
    app_usage_error("--lower-bound: %g is outside [-5, 0)", a->lower_bound);
  clmoe_st_file *f = op_open_input(&a->op);
  op_inputs in;
  memset(&in, 0, sizeof in);
  kda_check_inputs(f, a, &in);
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options copts = {.device = a->op.std.device};
  APP_CHECK(clmoe_ctx_create(&ctx, &copts));
  op_load_inputs(f, ctx, &a->op, &kda_sig, &in);
  clmoe_kda_options opts = {.scale = (float)a->scale, .lower_bound = (float)a->lower_bound};
  const clmoe_tensor *t = in.t;
  clmoe_kda_inputs ki = {&t[IN_Q], &t[IN_K], &t[IN_V], &t[IN_G], &t[IN_BETA], &t[IN_ALOG], &t[IN_DTB],
                         in.present[IN_H0] ? &t[IN_H0] : NULL, in.present[IN_CU] ? &t[IN_CU] : NULL};
  clmoe_tensor out[10];
  const int backward = a->op.backward, nout = backward ? 10 : 2;
  op_create_outputs(ctx, &kda_sig, &in, out, nout);
  double t0 = app_now();
  clmoe_status st;
  if (a->recurrent) st = clmoe_kda_recurrent(ctx, &opts, &ki, &out[0], &out[1]);
  else st = clmoe_kda_forward(ctx, &opts, &ki, &out[0], &out[1]);
  if (st != CLMOE_OK) app_die(st, a->recurrent ? "clmoe_kda_recurrent" : "clmoe_kda_forward");
  if (backward) {
    clmoe_kda_grads g = {&out[2], &out[3], &out[4], &out[5], &out[6], &out[7], &out[8], &out[9]};
    st = clmoe_kda_backward(ctx, &opts, &ki, &t[IN_DO], in.present[IN_DHT] ? &t[IN_DHT] : NULL, &g);
    if (st != CLMOE_OK) app_die(st, "clmoe_kda_backward");
  }
  APP_CHECK(clmoe_ctx_finish(ctx));
  double secs = app_now() - t0;
  char scale[32], lb[32];
  snprintf(scale, sizeof scale, "%.9g", a->scale != 0 ? a->scale : 1.0 / sqrt((double)in.sz[3]));
  snprintf(lb, sizeof lb, "%.9g", a->lower_bound);
  const char *const meta[][2] = {{"forward", a->recurrent ? "recurrent" : "chunked"},
                                 {"backward", backward ? "chunked" : "none"},
                                 {"scale", scale},
                                 {"lower_bound", lb},
                                 {"gate", "bounded"}};
  op_write_outputs(&a->op, ctx, &kda_sig, &in, out, nout, meta, (int)(sizeof meta / sizeof meta[0]));
  printf("%s: %s forward%s on %s in %.3f s; wrote %s\n", app_name, a->recurrent ? "recurrent" : "chunked",
         backward ? " + backward" : "", clmoe_ctx_caps(ctx)->device_name, secs, a->op.out);
  op_release(f, ctx, &in, out, nout);
}

static int cmd_kda(int argc, char **argv)
{
  kda_args a = {.lower_bound = -5.0};
  op_args_init(&a.op, kda_usage);
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (op_flag(argc, argv, &i, &a.op)) continue;
    if (app_option(argc, argv, &i, "--scale", &v)) a.scale = op_parse_double("--scale", v);
    else if (app_option(argc, argv, &i, "--lower-bound", &v)) a.lower_bound = op_parse_double("--lower-bound", v);
    else if (!strcmp(argv[i], "--recurrent")) a.recurrent = 1;
    else if (!strcmp(argv[i], "--with-state")) a.with_state = 1;
    else app_usage_error("unknown argument '%s'", argv[i]);
  }
  if (op_args_finish(&a.op, &kda_sig, a.with_state)) kda_make_example(&a);
  else kda_run(&a);
  free(a.op.cu);
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
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION, .usage = compare_usage};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--tol", &v)) {
      tol = op_parse_double("--tol", v);
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
  printf("\n"
         "  --help, -h   this text (COMMAND --help: that command's options)\n"
         "  --version    the version and what the build is: commit, configure arguments,\n"
         "               compiler, OpenCL, MPI, CLBlast and hwloc versions\n");
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
