/* clmoe-bench kda: the chunked KDA forward and forward + backward over B, T, H, D, timed by
 * OpenCL profiling events (sum of kernel times, host overhead excluded; the wall-clock
 * median is printed beside it), against the recurrent token loop in the same run, and the
 * forward and forward + backward on the tile interface (paths.h) beside the
 * portable ones.
 * FLOPs of the forward per the Kimi Linear report: B H (6 T D^2 + 3 T C D + T C^2), C = 16;
 * bytes: the inputs and o once each. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "clmoe/tile.h"
#include "clmoe/paths.h"

#define MAX_LIST BENCH_MAX_LIST

static void usage(void)
{
  printf("Usage: clmoe-bench kda [--batch B] [--T LIST] [--H LIST] [--D D] [--dtype bf16|f32]\n"
         "                       [--no-backward] [--no-tile] [--tc-warps N] [--tc-lookahead N]\n"
         "                       [--tc-recompute] [--gate bounded|unbounded]\n"
         "                       [--recurrent-max T] [--reps N] [--max-seconds S]\n"
         "                       [--device SPEC] [--json FILE|-]\n"
         "\n"
         "Times clmoe_kda_forward (chunked, 16-token tiles) and forward + backward for every\n"
         "H and T, with K = V = D, the bounded gate (lb -5; --gate unbounded: Kimi Linear's\n"
         "-exp(A_log) softplus(g + dt_bias), A_log 0, forward only), gate/L2 norm/sigmoid inside the op\n"
         "(as flash-linear-attention's chunk_kda with use_gate_in_kernel). Times are the sum of\n"
         "the kernels' OpenCL profiling times (median over runs); wall-clock medians are shown\n"
         "too. The recurrent token loop is timed for T <= --recurrent-max and its output compared.\n"
         "\"forward\" and \"fwd+bwd\" run the portable kernels; \"forward-tc\" the forward on the tile\n"
         "interface (bf16 tile products; on the device's matrix unit when clmoe-info reports one),\n"
         "compared with the portable forward's output; its two kernels' times follow (prep + state).\n"
         "\"fwd+bwd-tc\" is forward-tc + the backward on tiles, its gradients compared with the\n"
         "portable fwd+bwd's (worst of dq, dk, dv, dg, dbeta; needs the backward and the tile rows);\n"
         "then the backward's kernels: prep (ms per launch: the forward's, which also writes the\n"
         "backward's factors; with --tc-recompute the backward's own prep too) + the two state\n"
         "passes (one launch or two) + chunk.\n"
         "\n"
         "  --batch B          sequences (default 1)\n"
         "  --T LIST           sequence lengths (default 4096,16384)\n"
         "  --H LIST           heads (default 16)\n"
         "  --D D              K = V (default 128, at most 128)\n"
         "  --dtype T          storage of q, k, v, g, beta: bf16 (default) or f32\n"
         "  --gate G           bounded (default) or unbounded\n"
         "  --no-backward      forward only\n"
         "  --no-tile          skip the tile rows (they need D a multiple of 16)\n"
         "  --tc-warps N       warps per state work-group of the tile forward: 1, 2 or 4 (default 2)\n"
         "  --tc-lookahead N   chunks its state pass loads ahead: 1 or 2 (default 2; step 64: 1-3)\n"
         "  --tc-recompute     fwd+bwd-tc: the backward recomputes the per-chunk factors (its own\n"
         "                     prep) instead of reading what the forward kept\n"
         "  --recurrent-max T  longest T for the recurrent comparison (default 16384; 0: never)\n"
         "  --reps N           timed runs after one warm-up (default 10)\n"
         "  --max-seconds S    stop repeating after S seconds per measurement (default 10)\n"
         "  --json FILE        results as JSON (- for stdout)\n");
}

typedef struct kda_bench_tensors {
  clmoe_tensor q, k, v, g, beta, A_log, dt_bias, o, o_rec, o_tc, dout;
  clmoe_tensor dq, dk, dv, dg, dbeta, dA, ddt;
  clmoe_tensor tq, tk, tv, tg, tbeta, tA, tdt; /* the tile backward's gradients */
} kda_bench_tensors;

static void tensors_destroy(kda_bench_tensors *t)
{
  clmoe_tensor *all[] = {&t->q, &t->k, &t->v, &t->g, &t->beta, &t->A_log, &t->dt_bias, &t->o, &t->o_rec,
                         &t->o_tc, &t->dout, &t->dq, &t->dk, &t->dv, &t->dg, &t->dbeta, &t->dA, &t->ddt,
                         &t->tq, &t->tk, &t->tv, &t->tg, &t->tbeta, &t->tA, &t->tdt};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
}

static void tensors_create(clmoe_ctx *ctx, kda_bench_tensors *t, clmoe_dtype dt, long long B,
                           long long T, long long H, long long D, int backward, int tile)
{
  memset(t, 0, sizeof *t);
  const int64_t sk[4] = {B, T, H, D}, sb[3] = {B, T, H}, sdt[2] = {H, D}, sh[1] = {H};
  APP_CHECK(clmoe_tensor_create(ctx, &t->q, dt, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->k, dt, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->v, dt, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->g, dt, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->beta, dt, 3, sb));
  APP_CHECK(clmoe_tensor_create(ctx, &t->A_log, CLMOE_F32, 1, sh));
  APP_CHECK(clmoe_tensor_create(ctx, &t->dt_bias, CLMOE_F32, 2, sdt));
  APP_CHECK(clmoe_tensor_create(ctx, &t->o, CLMOE_F32, 4, sk));
  APP_CHECK(clmoe_tensor_fill_normal(&t->q, 11, 0.0f, 1.0f));
  APP_CHECK(clmoe_tensor_fill_normal(&t->k, 12, 0.0f, 1.0f));
  APP_CHECK(clmoe_tensor_fill_normal(&t->v, 13, 0.0f, 1.0f));
  APP_CHECK(clmoe_tensor_fill_normal(&t->g, 14, 0.0f, 2.0f));
  APP_CHECK(clmoe_tensor_fill_normal(&t->beta, 15, 0.0f, 1.0f));
  APP_CHECK(clmoe_tensor_fill(&t->A_log, 0.0));
  APP_CHECK(clmoe_tensor_fill_uniform(&t->dt_bias, 16, -1.0f, 1.0f));
  if (!backward) return;
  APP_CHECK(clmoe_tensor_create(ctx, &t->dout, CLMOE_F32, 4, sk));
  APP_CHECK(clmoe_tensor_fill_normal(&t->dout, 17, 0.0f, 1.0f));
  APP_CHECK(clmoe_tensor_create(ctx, &t->dq, CLMOE_F32, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->dk, CLMOE_F32, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->dv, CLMOE_F32, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->dg, CLMOE_F32, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->dbeta, CLMOE_F32, 3, sb));
  APP_CHECK(clmoe_tensor_create(ctx, &t->dA, CLMOE_F32, 1, sh));
  APP_CHECK(clmoe_tensor_create(ctx, &t->ddt, CLMOE_F32, 2, sdt));
  if (!tile) return;
  APP_CHECK(clmoe_tensor_create(ctx, &t->tq, CLMOE_F32, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->tk, CLMOE_F32, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->tv, CLMOE_F32, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->tg, CLMOE_F32, 4, sk));
  APP_CHECK(clmoe_tensor_create(ctx, &t->tbeta, CLMOE_F32, 3, sb));
  APP_CHECK(clmoe_tensor_create(ctx, &t->tA, CLMOE_F32, 1, sh));
  APP_CHECK(clmoe_tensor_create(ctx, &t->tdt, CLMOE_F32, 2, sdt));
}

enum { RUN_FWD, RUN_FWD_BWD, RUN_TC, RUN_TC_BWD, RUN_REC };

static int tc_warps, tc_ahead; /* --tc-warps, --tc-lookahead */
static clmoe_kda_gate gate;    /* --gate */
static int tc_keep = 1;        /* fwd+bwd-tc: the forward keeps the backward's factors (--tc-recompute: no) */
static clmoe_kda_tile_saved tc_saved;

static void run_once(clmoe_ctx *ctx, kda_bench_tensors *t, int what)
{
  clmoe_kda_options opts = {.gate = gate};
  clmoe_kda_inputs in = {&t->q, &t->k, &t->v, &t->g, &t->beta, &t->A_log, &t->dt_bias, NULL, NULL};
  if (what == RUN_TC || what == RUN_TC_BWD) {
    clmoe_kda_tile_config cfg = {tc_warps, tc_ahead, what == RUN_TC_BWD && tc_keep ? &tc_saved : NULL};
    APP_CHECK(clmoe_kda_forward_tile(ctx, &opts, &in, &t->o_tc, NULL, &cfg));
    if (what == RUN_TC_BWD) {
      clmoe_kda_grads g = {&t->tq, &t->tk, &t->tv, &t->tg, &t->tbeta, &t->tA, &t->tdt, NULL};
      APP_CHECK(clmoe_kda_backward_tile(ctx, &opts, &in, &t->dout, NULL, &g, &cfg));
    }
    return;
  }
  if (what == RUN_REC) {
    APP_CHECK(clmoe_kda_recurrent(ctx, &opts, &in, &t->o_rec, NULL));
    return;
  }
  APP_CHECK(clmoe_kda_forward(ctx, &opts, &in, &t->o, NULL));
  if (what == RUN_FWD_BWD) {
    clmoe_kda_grads g = {&t->dq, &t->dk, &t->dv, &t->dg, &t->dbeta, &t->dA, &t->ddt, NULL};
    APP_CHECK(clmoe_kda_backward(ctx, &opts, &in, &t->dout, NULL, &g));
  }
}

/* Median kernel time and median wall time of `what`. */
static void measure(clmoe_ctx *ctx, kda_bench_tensors *t, int what, int reps, double max_s,
                    double *kernel_s, double *wall_s, int *runs)
{
  double *kt = malloc((size_t)reps * sizeof *kt), *wt = malloc((size_t)reps * sizeof *wt);
  if (!kt || !wt) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  run_once(ctx, t, what); /* warm-up: builds kernels, fills the pool */
  APP_CHECK(clmoe_ctx_finish(ctx));
  int n = 0;
  double start = app_now();
  while (n < reps && (n < 3 || app_now() - start < max_s)) {
    double w0 = app_now();
    APP_CHECK(clmoe_ctx_profile_begin(ctx));
    run_once(ctx, t, what);
    APP_CHECK(clmoe_ctx_profile_end(ctx, &kt[n], NULL));
    wt[n] = app_now() - w0;
    n++;
  }
  *kernel_s = bench_median(kt, n);
  *wall_s = bench_median(wt, n);
  *runs = n;
  free(kt), free(wt);
}

/* Mean time per launch of one kernel over the last measurement (0 if it did not run). */
static double kernel_ms(const clmoe_ctx *ctx, const char *name)
{
  const clmoe_kernel_time *rows;
  int n = clmoe_ctx_profile_kernels(ctx, &rows);
  for (int i = 0; i < n; i++)
    if (!strcmp(rows[i].name, name) && rows[i].launches > 0) return rows[i].seconds * 1e3 / (double)rows[i].launches;
  return 0.0;
}

/* The backward's two state passes: one launch (kda_tile_states) or two (only one form runs
 * per call). */
static double states_ms(const clmoe_ctx *ctx)
{
  return kernel_ms(ctx, "kda_tile_states") + kernel_ms(ctx, "kda_tile_fwd_save") + kernel_ms(ctx, "kda_tile_state_bwd");
}

static double max_rel_diff(const clmoe_tensor *a, const clmoe_tensor *b)
{
  size_t n = (size_t)clmoe_tensor_numel(a);
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  if (!x || !y) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  APP_CHECK(clmoe_tensor_read_f32(a, x));
  APP_CHECK(clmoe_tensor_read_f32(b, y));
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)y[i]));
  for (size_t i = 0; i < n; i++) worst = isfinite(x[i]) ? fmax(worst, fabs((double)x[i] - y[i])) : INFINITY;
  free(x), free(y);
  return scale > 0 ? worst / scale : worst;
}

int bench_kda(int argc, char **argv)
{
  long long Ts[MAX_LIST] = {4096, 16384}, Hs[MAX_LIST] = {16}, B = 1, D = 128, rec_max = 16384;
  int nT = 2, nH = 1, reps = 10, backward = 1, tile = 1;
  double max_s = 10.0;
  const char *json = NULL, *device = NULL, *dtype_arg = "bf16";
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION | APP_FLAG_DEVICE | APP_FLAG_JSON, .usage = usage};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--batch", &v)) B = app_parse_int("--batch", v, 1, 4096);
    else if (app_option(argc, argv, &i, "--T", &v)) nT = bench_parse_list("--T", v, Ts, 1, 1 << 24);
    else if (app_option(argc, argv, &i, "--H", &v)) nH = bench_parse_list("--H", v, Hs, 1, 1024);
    else if (app_option(argc, argv, &i, "--D", &v)) D = app_parse_int("--D", v, 1, 128);
    else if (app_option(argc, argv, &i, "--dtype", &v)) dtype_arg = v;
    else if (app_option(argc, argv, &i, "--recurrent-max", &v)) rec_max = app_parse_int("--recurrent-max", v, 0, 1 << 24);
    else if (app_option(argc, argv, &i, "--reps", &v)) reps = (int)app_parse_int("--reps", v, 1, 100000);
    else if (app_option(argc, argv, &i, "--max-seconds", &v)) {
      max_s = atof(v);
      if (!(max_s > 0)) app_usage_error("--max-seconds: '%s' is not a positive number", v);
    } else if (!strcmp(argv[i], "--no-backward")) backward = 0;
    else if (!strcmp(argv[i], "--no-tile")) tile = 0;
    else if (app_option(argc, argv, &i, "--tc-warps", &v)) tc_warps = (int)app_parse_int("--tc-warps", v, 1, 4);
    else if (app_option(argc, argv, &i, "--tc-lookahead", &v)) tc_ahead = (int)app_parse_int("--tc-lookahead", v, 1, 3);
    else if (!strcmp(argv[i], "--tc-recompute")) tc_keep = 0;
    else if (app_option(argc, argv, &i, "--gate", &v)) {
      if (!strcmp(v, "unbounded")) gate = CLMOE_KDA_GATE_UNBOUNDED;
      else if (strcmp(v, "bounded")) app_usage_error("--gate: '%s' is not bounded or unbounded", v);
    } else app_usage_error("unknown argument '%s'", argv[i]);
  }
  device = flags.device;
  json = flags.json;
  if (gate == CLMOE_KDA_GATE_UNBOUNDED && backward)
    app_usage_error("--gate unbounded: the forward only (add --no-backward); the backward anchors its factors and "
                    "overflows at these decays");
  clmoe_dtype dt = CLMOE_BF16;
  if (!strcmp(dtype_arg, "f32")) dt = CLMOE_F32;
  else if (strcmp(dtype_arg, "bf16")) app_usage_error("--dtype: '%s' is not bf16 or f32", dtype_arg);

  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options copts = {.device = device, .profiling = 1};
  APP_CHECK(clmoe_ctx_create(&ctx, &copts));
  const clmoe_device_caps *caps = clmoe_ctx_caps(ctx);
  const char *impl = clmoe_tile_impl_name(clmoe_ctx_tile_impl(ctx));
  clmoe_ctx_set_fastpath(ctx, 0); /* "forward" and "fwd+bwd": the portable kernels */
  if (D % 16) tile = 0;
  printf("clmoe-bench kda on %s (%s): B = %lld, K = V = %lld, %s inputs, chunk 16, %s, tiles: %s\n",
         caps->device_name, caps->platform_name, B, D, dtype_arg,
         gate == CLMOE_KDA_GATE_UNBOUNDED ? "unbounded gate (A_log 0)" : "lb -5", impl);
  printf("%4s %8s  %-11s %10s %10s %12s %9s %9s  %s\n", "H", "T", "pass", "kernel ms", "wall ms",
         "tokens/s", "TFLOP/s", "GB/s", "check");
  FILE *jf = json ? app_open_output(json) : NULL;
  if (jf) {
    fprintf(jf, "{\n  \"benchmark\": \"kda\",\n  \"clmoe_version\": \"%s\",\n  \"device\": ", clmoe_version());
    json_string(jf, caps->device_name);
    fprintf(jf, ",\n  \"driver\": ");
    json_string(jf, caps->driver_version);
    fprintf(jf, ",\n  \"B\": %lld, \"D\": %lld, \"dtype\": \"%s\", \"tile_impl\": \"%s\", \"tc_warps\": %d, " /* (0: the library picks) */
                "\"tc_lookahead\": %d, \"gate\": \"%s\",\n  \"results\": [", B, D, dtype_arg, impl, tc_warps,
            tc_ahead ? tc_ahead : 2, gate == CLMOE_KDA_GATE_UNBOUNDED ? "unbounded" : "bounded");
  }
  int first = 1;
  for (int ih = 0; ih < nH; ih++)
    for (int it = 0; it < nT; it++) {
      long long H = Hs[ih], T = Ts[it];
      kda_bench_tensors t;
      tensors_create(ctx, &t, dt, B, T, H, D, backward, tile);
      const double flops = clmoe_kda_forward_flops(B, T, H, D);
      const double es = (double)clmoe_dtype_size(dt);
      const double bytes = (double)(B * T * H) * (es * (3.0 * D + D + 1.0) + 4.0 * D);
      int do_rec = T <= rec_max;
      if (do_rec) APP_CHECK(clmoe_tensor_create(ctx, &t.o_rec, CLMOE_F32, 4, (int64_t[]){B, T, H, D}));
      if (tile) APP_CHECK(clmoe_tensor_create(ctx, &t.o_tc, CLMOE_F32, 4, (int64_t[]){B, T, H, D}));
      int whats[5], nw = 0;
      whats[nw++] = RUN_FWD;
      if (backward) whats[nw++] = RUN_FWD_BWD;
      if (tile) whats[nw++] = RUN_TC;
      if (tile && backward) whats[nw++] = RUN_TC_BWD;
      if (do_rec) whats[nw++] = RUN_REC;
      for (int w = 0; w < nw; w++) {
        const int what = whats[w];
        const char *name = what == RUN_FWD ? "forward" : what == RUN_FWD_BWD ? "fwd+bwd"
                           : what == RUN_TC ? "forward-tc" : what == RUN_TC_BWD ? "fwd+bwd-tc" : "recurrent";
        double ks, ws;
        int runs;
        clmoe_ctx_profile_clear(ctx);
        measure(ctx, &t, what, reps, max_s, &ks, &ws, &runs);
        double prep_ms = kernel_ms(ctx, "kda_tile_prep"), state_ms = kernel_ms(ctx, "kda_tile_state");
        char check[160] = "";
        double diff = -1.0;
        if (what == RUN_REC) {
          diff = max_rel_diff(&t.o, &t.o_rec);
          snprintf(check, sizeof check, "|chunked - recurrent| %.1e", diff);
        } else if (what == RUN_TC) {
          diff = max_rel_diff(&t.o_tc, &t.o);
          snprintf(check, sizeof check, "|tile - portable| %.1e; %.3f + %.3f ms", diff, prep_ms, state_ms);
        } else if (what == RUN_TC_BWD) {
          const clmoe_tensor *a[5] = {&t.tq, &t.tk, &t.tv, &t.tg, &t.tbeta}, *b[5] = {&t.dq, &t.dk, &t.dv, &t.dg, &t.dbeta};
          diff = 0.0;
          for (int i = 0; i < 5; i++) diff = fmax(diff, max_rel_diff(a[i], b[i]));
          snprintf(check, sizeof check, "|tile - portable| grads %.1e; preps %.3f + state %.3f + bwd passes %.3f + "
                   "chunk %.3f ms", diff, prep_ms, state_ms, states_ms(ctx), kernel_ms(ctx, "kda_tile_bwd_chunk"));
        }
        const int fb = what == RUN_FWD_BWD || what == RUN_TC_BWD; /* no FLOP or byte model */
        double tf = fb ? 0.0 : flops / ks * 1e-12;
        printf("%4lld %8lld  %-11s %10.3f %10.3f %12.4g %9.3f %9.1f  %s\n", H, T, name, ks * 1e3, ws * 1e3,
               (double)(B * T) / ks, tf, fb ? 0.0 : bytes / ks * 1e-9, check);
        fflush(stdout);
        if (jf) {
          fprintf(jf, "%s\n    {\"H\": %lld, \"T\": %lld, \"pass\": \"%s\", \"runs\": %d, \"kernel_ms\": %.4f, "
                      "\"wall_ms\": %.4f, \"tokens_per_s\": %.6g, \"forward_flops\": %.6e, \"bytes\": %.6e, "
                      "\"tflops\": %.4f, ",
                  first ? "" : ",", H, T, name, runs, ks * 1e3, ws * 1e3, (double)(B * T) / ks, flops,
                  bytes, tf);
          if (what == RUN_TC) fprintf(jf, "\"prep_ms\": %.4f, \"state_ms\": %.4f, ", prep_ms, state_ms);
          if (what == RUN_TC_BWD)
            fprintf(jf, "\"prep_ms\": %.4f, \"state_ms\": %.4f, \"states_ms\": %.4f, \"chunk_ms\": %.4f, ",
                    prep_ms, state_ms, states_ms(ctx), kernel_ms(ctx, "kda_tile_bwd_chunk"));
          fprintf(jf, "\"max_rel_diff_vs_chunked\": ");
          json_double(jf, diff);
          fprintf(jf, "}");
          first = 0;
        }
      }
      tensors_destroy(&t);
      clmoe_kda_tile_saved_release(ctx, &tc_saved);
      clmoe_ctx_pool_trim(ctx); /* large shapes: give the memory back between sizes */
    }
  if (jf) {
    fprintf(jf, "\n  ]\n}\n");
    app_close_output(jf);
  }
  clmoe_ctx_destroy(ctx);
  return 0;
}
