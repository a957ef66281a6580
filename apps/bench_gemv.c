/* clmoe-bench gemv: the few-token products of a decode step (clmoe_gen_gemv: y [T, N] =
 * x [T, K] W^T, W bf16 or fp32) over matrix shapes and token counts, in microseconds per
 * launch and the rate at which the weights are read, against a copy of the same matrix on
 * the device in the same run (clmoe_tensor_copy, a buffer copy: the bytes read and written
 * once, the device's own memory rate; timed on the wall clock over `reps` copies). The default shapes are a Kimi-Linear-48B-A3B decode step's:
 * KDA's q, k, v in one launch (3 x 4096 rows of 2304), its W_o (2304 of 4096), a shared
 * expert's gate and up (2 x 1024 of 2304) and the head (163,840 of 2304). Kernel times come
 * from OpenCL profiling, medians. The launches cycle through copies of the matrix that
 * together exceed a GPU's last-level cache (BENCH_GEMV_COLD_MB), as a decode step reads each
 * matrix once; --warm reads one copy again and again. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void usage(void)
{
  printf("Usage: clmoe-bench gemv [--shapes LIST] [--tokens LIST] [--dtype bf16|fp32] [--reps N]\n"
         "                        [--warm] [--device SPEC] [--json FILE|-]\n"
         "\n"
         "Times clmoe_gen_gemv launches (one matrix of N rows and K columns read for T tokens)\n"
         "and a device copy of the same matrix: microseconds per launch, GB/s of weights read.\n"
         "The launch's form follows the CLMOE_GEMV_* knobs (clmoe-info --knobs).\n"
         "\n"
         "  --shapes LIST   NxK matrices, comma-separated (default: Kimi-Linear-48B's decode\n"
         "                  products 12288x2304,2304x4096,2048x2304,163840x2304)\n"
         "  --tokens LIST   tokens per launch (default 1,4,8,16)\n"
         "  --dtype D       the weights: bf16 (default) or fp32\n"
         "  --reps N        timed launches after one warm-up (default 30)\n"
         "  --warm          every launch reads the same copy of the matrix (by default they\n"
         "                  cycle through copies of at least 256 MiB in all, beyond the cache)\n"
         "  --device SPEC   as for clmoe-info\n"
         "  --json FILE     write the results as JSON (- for stdout)\n");
}

#define BENCH_GEMV_COLD_MB 256 /* the copies' bytes at least: beyond an H100's or H200's L2 */
#define BENCH_GEMV_COPIES 64   /* copies at most */

typedef struct gemv_run {
  clmoe_ctx *ctx;
  clmoe_tensor *x, *w, *y, *copy;
  int nw, next; /* copies of the matrix in w, the next one read */
} gemv_run;

/* Median kernel seconds of `reps` launches of fn after one warm-up. */
static double time_kernel(clmoe_ctx *ctx, int reps, clmoe_status (*fn)(gemv_run *), gemv_run *arg)
{
  double *t = malloc((size_t)reps * sizeof *t);
  if (!t) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  APP_CHECK(fn(arg));
  APP_CHECK(clmoe_ctx_finish(ctx));
  for (int i = 0; i < reps; i++) {
    APP_CHECK(clmoe_ctx_profile_begin(ctx));
    APP_CHECK(fn(arg));
    APP_CHECK(clmoe_ctx_profile_end(ctx, &t[i], NULL));
  }
  const double m = bench_median(t, reps);
  free(t);
  return m;
}

static clmoe_status run_gemv(gemv_run *r)
{
  const clmoe_tensor *w = &r->w[r->next++ % r->nw];
  clmoe_tensor *y = r->y;
  return clmoe_gen_gemv(r->ctx, r->x, NULL, NULL, CLMOE_GEN_GEMV_PLAIN, 0, 0.0f, 0, 1, &w, &y);
}

static clmoe_status run_copy(gemv_run *r)
{
  return clmoe_tensor_copy(r->copy, &r->w[r->next++ % r->nw]);
}

int bench_gemv(int argc, char **argv)
{
  const char *shape_arg = "12288x2304,2304x4096,2048x2304,163840x2304", *tok_arg = "1,4,8,16";
  int reps = 30, warm = 0;
  clmoe_dtype dt = CLMOE_BF16;
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION | APP_FLAG_DEVICE | APP_FLAG_JSON, .usage = usage};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--shapes", &v)) shape_arg = v;
    else if (app_option(argc, argv, &i, "--tokens", &v)) tok_arg = v;
    else if (!strcmp(argv[i], "--warm")) warm = 1;
    else if (app_option(argc, argv, &i, "--reps", &v)) reps = (int)app_parse_int("--reps", v, 1, 100000);
    else if (app_option(argc, argv, &i, "--dtype", &v)) {
      if (!strcmp(v, "bf16")) dt = CLMOE_BF16;
      else if (!strcmp(v, "fp32")) dt = CLMOE_F32;
      else app_usage_error("--dtype: '%s' is not bf16 or fp32", v);
    } else app_usage_error("unknown argument '%s'", argv[i]);
  }
  long long ns[BENCH_MAX_LIST], ks[BENCH_MAX_LIST], toks[BENCH_MAX_LIST];
  const int nshape = bench_parse_pairs("--shapes", shape_arg, 'x', ns, 1, 1LL << 30, ks, 1, 1LL << 20);
  const int ntok = bench_parse_list("--tokens", tok_arg, toks, 1, 16);
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options copts = {.device = flags.device, .profiling = 1};
  APP_CHECK(clmoe_ctx_create(&ctx, &copts));
  const clmoe_device_caps *caps = clmoe_ctx_caps(ctx);
  const double wbytes = dt == CLMOE_BF16 ? 2.0 : 4.0;
  printf("clmoe-bench gemv on %s (%s), %s weights, median of %d launches, %s\n", caps->device_name,
         caps->platform_name, dt == CLMOE_BF16 ? "bf16" : "fp32", reps,
         warm ? "one copy of each matrix (warm)" : "cycling through copies (cold)");
  printf("%8s %6s %4s %12s %10s %14s %10s\n", "N", "K", "T", "gemv us", "GB/s", "copy us", "copy GB/s");
  FILE *jf = flags.json ? app_open_output(flags.json) : NULL;
  if (jf) {
    fprintf(jf, "{\n  \"benchmark\": \"gemv\",\n  \"clmoe_version\": \"%s\",\n  \"device\": ", clmoe_version());
    json_string(jf, caps->device_name);
    fprintf(jf, ",\n  \"weights\": \"%s\",\n  \"cache\": \"%s\",\n  \"results\": [", dt == CLMOE_BF16 ? "bf16" : "fp32",
            warm ? "warm" : "cold");
  }
  int first = 1;
  for (int s = 0; s < nshape; s++) {
    const int64_t N = ns[s], K = ks[s], ws[2] = {N, K};
    const double bytes = wbytes * (double)N * (double)K;
    int nw = 1;
    if (!warm) {
      const double c = ceil((double)BENCH_GEMV_COLD_MB * 1048576.0 / bytes);
      nw = c > BENCH_GEMV_COPIES ? BENCH_GEMV_COPIES : (int)c;
    }
    clmoe_tensor w[BENCH_GEMV_COPIES] = {{0}}, copy = {0};
    for (int i = 0; i < nw; i++) {
      APP_CHECK(clmoe_tensor_create(ctx, &w[i], dt, 2, ws));
      APP_CHECK(clmoe_tensor_fill_normal(&w[i], 3 + (uint64_t)i, 0.0f, 0.02f));
    }
    APP_CHECK(clmoe_tensor_create(ctx, &copy, dt, 2, ws));
    gemv_run r = {ctx, NULL, w, NULL, &copy, nw, 0};
    APP_CHECK(run_copy(&r));
    APP_CHECK(clmoe_ctx_finish(ctx));
    const double c0 = app_now();
    for (int i = 0; i < reps; i++) APP_CHECK(run_copy(&r));
    APP_CHECK(clmoe_ctx_finish(ctx));
    const double cs = (app_now() - c0) / reps; /* reads and writes the bytes once */
    for (int t = 0; t < ntok; t++) {
      const int64_t T = toks[t], xs[2] = {T, K}, ys[2] = {T, N};
      clmoe_tensor x = {0}, y = {0};
      APP_CHECK(clmoe_tensor_create(ctx, &x, CLMOE_F32, 2, xs));
      APP_CHECK(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, ys));
      APP_CHECK(clmoe_tensor_fill_normal(&x, 5, 0.0f, 1.0f));
      r.x = &x, r.y = &y;
      const double gs = time_kernel(ctx, reps, run_gemv, &r);
      printf("%8lld %6lld %4lld %12.1f %10.0f %14.1f %10.0f\n", (long long)N, (long long)K, (long long)T, 1e6 * gs,
             1e-9 * bytes / gs, 1e6 * cs, 2e-9 * bytes / cs);
      fflush(stdout);
      if (jf) {
        fprintf(jf, "%s\n    {\"n\": %lld, \"k\": %lld, \"tokens\": %lld, \"gemv_us\": %.2f, \"gemv_gb_s\": %.1f, "
                "\"copy_us\": %.2f, \"copy_gb_s\": %.1f}", first ? "" : ",", (long long)N, (long long)K, (long long)T,
                1e6 * gs, 1e-9 * bytes / gs, 1e6 * cs, 2e-9 * bytes / cs);
        first = 0;
      }
      clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y);
    }
    for (int i = 0; i < nw; i++) clmoe_tensor_destroy(&w[i]);
    clmoe_tensor_destroy(&copy);
  }
  if (jf) {
    fprintf(jf, "\n  ]\n}\n");
    if (jf != stdout) fclose(jf);
  }
  clmoe_ctx_destroy(ctx);
  return 0;
}
