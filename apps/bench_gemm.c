/* clmoe-bench gemm: C = op(A) op(B) over a list of sizes on each GEMM backend.
 * FLOPs 2 m n k; bytes (the least any implementation must move) = A + B + C once each.
 * Times are the sum of the backend's kernels from OpenCL profiling events (for CLBlast on
 * bf16 input that includes the conversion copies), median of the runs; wall time beside.
 * Every backend's result is compared with CLBlast's (or the first backend's) from the
 * same run, so a fast wrong kernel shows up. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_SIZES 32

typedef struct gemm_size { long long m, n, k; } gemm_size;

static void usage(void)
{
  printf("Usage: clmoe-bench gemm [--sizes LIST] [--backends LIST] [--dtype f32|bf16]\n"
         "                        [--trans NN|NT|TN|TT] [--tile-block BMxBN] [--reps N]\n"
         "                        [--max-seconds S] [--device SPEC] [--json FILE|-]\n"
         "\n"
         "Times C = op(A) op(B) (row-major, fp32 accumulate) for every size and backend and\n"
         "prints the median kernel time (OpenCL profiling events; CLBlast on bf16 input\n"
         "includes its conversion copies), TFLOP/s (2mnk / time), GB/s (A + B + C bytes /\n"
         "time) and the median wall time of the call.\n"
         "\n"
         "  --sizes LIST     comma-separated N (square) or MxNxK (default 256,512,1024,2048,4096)\n"
         "  --backends LIST  of clblast, tiled, naive, tile (default: clblast, tiled, naive,\n"
         "                   and tile with --dtype bf16; naive is skipped above 2^33\n"
         "                   multiply-adds unless named explicitly; tile needs bf16)\n"
         "  --dtype T        storage of A and B: f32 (default) or bf16 (C is always f32)\n"
         "  --trans XY       transposes of A and B (default NN)\n"
         "  --tile-block B   the tile GEMM's work-group block: 128x256, 128x128 or 64x64\n"
         "                   (default: chosen by the device)\n"
         "  --reps N         timed repetitions after 2 warm-ups (default 10)\n"
         "  --max-seconds S  stop repeating a measurement after S seconds (default 3)\n"
         "  --device SPEC    as for clmoe-info\n"
         "  --json FILE      write the results as JSON (- for stdout)\n");
}

static int parse_sizes(const char *s, gemm_size *out)
{
  int n = 0;
  char *copy = strdup(s), *save = NULL;
  if (!copy) return 0;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (n == MAX_SIZES) app_usage_error("--sizes: at most %d sizes", MAX_SIZES);
    long long m, nn, k;
    char tail;
    if (sscanf(tok, "%lldx%lldx%lld%c", &m, &nn, &k, &tail) == 3) {
    } else if (sscanf(tok, "%lld%c", &m, &tail) == 1) {
      nn = k = m;
    } else {
      app_usage_error("--sizes: '%s' is neither N nor MxNxK", tok);
    }
    if (m < 1 || nn < 1 || k < 1 || m > 65536 || nn > 65536 || k > 65536)
      app_usage_error("--sizes: '%s' must be between 1 and 65536 in each dimension", tok);
    out[n].m = m, out[n].n = nn, out[n].k = k;
    n++;
  }
  free(copy);
  return n;
}

static double max_rel_diff(const float *a, const float *ref, size_t n)
{
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)ref[i]));
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)ref[i]);
    if (!isfinite(a[i])) return INFINITY;
    worst = fmax(worst, d);
  }
  return scale > 0 ? worst / scale : worst;
}

int bench_gemm(int argc, char **argv)
{
  const char *sizes_arg = "256,512,1024,2048,4096", *backends_arg = NULL, *json = NULL;
  const char *device = NULL, *dtype_arg = "f32", *trans_arg = "NN", *block_arg = NULL;
  int reps = 10;
  double max_seconds = 3.0;
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION | APP_FLAG_DEVICE | APP_FLAG_JSON, .usage = usage};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--sizes", &v)) sizes_arg = v;
    else if (app_option(argc, argv, &i, "--backends", &v)) backends_arg = v;
    else if (app_option(argc, argv, &i, "--dtype", &v)) dtype_arg = v;
    else if (app_option(argc, argv, &i, "--trans", &v)) trans_arg = v;
    else if (app_option(argc, argv, &i, "--tile-block", &v)) block_arg = v;
    else if (app_option(argc, argv, &i, "--reps", &v)) reps = (int)app_parse_int("--reps", v, 1, 100000);
    else if (app_option(argc, argv, &i, "--max-seconds", &v)) {
      max_seconds = atof(v);
      if (!(max_seconds > 0)) app_usage_error("--max-seconds: '%s' is not a positive number", v);
    } else app_usage_error("unknown argument '%s'", argv[i]);
  }
  device = flags.device;
  json = flags.json;
  clmoe_dtype dtype = CLMOE_F32;
  if (!strcmp(dtype_arg, "bf16")) dtype = CLMOE_BF16;
  else if (strcmp(dtype_arg, "f32")) app_usage_error("--dtype: '%s' is not f32 or bf16", dtype_arg);
  if (strlen(trans_arg) != 2 || !strchr("NT", trans_arg[0]) || !strchr("NT", trans_arg[1]))
    app_usage_error("--trans: '%s' is not NN, NT, TN or TT", trans_arg);
  clmoe_trans ta = trans_arg[0] == 'T' ? CLMOE_TRANS : CLMOE_NOTRANS;
  clmoe_trans tb = trans_arg[1] == 'T' ? CLMOE_TRANS : CLMOE_NOTRANS;
  int block_m = 0, block_n = 0;
  char tail;
  if (block_arg && sscanf(block_arg, "%dx%d%c", &block_m, &block_n, &tail) != 2)
    app_usage_error("--tile-block: '%s' is not BMxBN", block_arg);
  gemm_size sizes[MAX_SIZES];
  int nsizes = parse_sizes(sizes_arg, sizes);
  clmoe_gemm_backend backends[4];
  int nb = 0, naive_named = 0;
  if (!backends_arg) {
    backends[nb++] = CLMOE_GEMM_CLBLAST;
    if (dtype == CLMOE_BF16) backends[nb++] = CLMOE_GEMM_TILE;
    backends[nb++] = CLMOE_GEMM_TILED, backends[nb++] = CLMOE_GEMM_NAIVE;
  } else {
    char *copy = strdup(backends_arg), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && nb < 4; tok = strtok_r(NULL, ",", &save)) {
      if (!strcmp(tok, "clblast")) backends[nb++] = CLMOE_GEMM_CLBLAST;
      else if (!strcmp(tok, "tiled")) backends[nb++] = CLMOE_GEMM_TILED;
      else if (!strcmp(tok, "naive")) backends[nb++] = CLMOE_GEMM_NAIVE, naive_named = 1;
      else if (!strcmp(tok, "tile")) {
        if (dtype != CLMOE_BF16) app_usage_error("--backends: tile needs --dtype bf16");
        backends[nb++] = CLMOE_GEMM_TILE;
      } else app_usage_error("--backends: unknown backend '%s' (clblast, tiled, naive, tile)", tok);
    }
    free(copy);
  }

  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.device = device, .profiling = 1};
  APP_CHECK(clmoe_ctx_create(&ctx, &opts));
  const clmoe_device_caps *caps = clmoe_ctx_caps(ctx);
  if (block_arg) APP_CHECK(clmoe_ctx_set_gemm_tile_block(ctx, block_m, block_n));
  printf("clmoe-bench gemm on %s (%s), A and B %s, C f32, %s, median of up to %d runs\n",
         caps->device_name, caps->platform_name, dtype_arg, trans_arg, reps);
  printf("tile implementation %s (%s), fast path %s\n",
         clmoe_tile_impl_name(clmoe_ctx_tile_impl(ctx)), clmoe_ctx_tile_summary(ctx),
         clmoe_ctx_fastpath_reason(ctx));
  printf("%-18s %-8s %10s %9s %9s %10s %12s\n", "m x n x k", "backend", "kernel ms", "TFLOP/s", "GB/s",
         "wall ms", "diff vs first");
  FILE *jf = json ? app_open_output(json) : NULL;
  if (jf) {
    fprintf(jf, "{\n  \"benchmark\": \"gemm\",\n  \"clmoe_version\": \"%s\",\n  \"device\": ", clmoe_version());
    json_string(jf, caps->device_name);
    fprintf(jf, ",\n  \"platform\": ");
    json_string(jf, caps->platform_name);
    fprintf(jf, ",\n  \"driver\": ");
    json_string(jf, caps->driver_version);
    fprintf(jf, ",\n  \"dtype\": \"%s\",\n  \"trans\": \"%s\",\n  \"tile_impl\": \"%s\",\n  \"results\": [",
            dtype_arg, trans_arg, clmoe_tile_impl_name(clmoe_ctx_tile_impl(ctx)));
  }
  int first_json = 1;
  double *times = malloc((size_t)reps * sizeof *times), *walls = malloc((size_t)reps * sizeof *walls);
  if (!times || !walls) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  for (int s = 0; s < nsizes; s++) {
    long long m = sizes[s].m, n = sizes[s].n, k = sizes[s].k;
    clmoe_tensor A, B, C;
    APP_CHECK(clmoe_tensor_create(ctx, &A, dtype, 2, ta ? (int64_t[]){k, m} : (int64_t[]){m, k}));
    APP_CHECK(clmoe_tensor_create(ctx, &B, dtype, 2, tb ? (int64_t[]){n, k} : (int64_t[]){k, n}));
    APP_CHECK(clmoe_tensor_create(ctx, &C, CLMOE_F32, 2, (int64_t[]){m, n}));
    APP_CHECK(clmoe_tensor_fill_uniform(&A, 1, -1.0f, 1.0f));
    APP_CHECK(clmoe_tensor_fill_uniform(&B, 2, -1.0f, 1.0f));
    size_t cn = (size_t)(m * n);
    float *first = malloc(cn * sizeof *first), *got = malloc(cn * sizeof *got);
    if (!first || !got) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
    double flops = 2.0 * (double)m * (double)n * (double)k;
    double bytes = (double)clmoe_dtype_size(dtype) * (double)(m * k + k * n) + 4.0 * (double)(m * n);
    int have_first = 0;
    for (int b = 0; b < nb; b++) {
      char label[48];
      snprintf(label, sizeof label, "%lldx%lldx%lld", m, n, k);
      if (backends[b] == CLMOE_GEMM_NAIVE && !naive_named && (double)m * n * k > 8589934592.0) {
        printf("%-18s %-8s %10s\n", label, "naive", "skipped");
        continue;
      }
      /* A stale result from the previous backend must not pass for this one's. */
      APP_CHECK(clmoe_tensor_fill(&C, NAN));
      for (int w = 0; w < 2; w++)
        APP_CHECK(clmoe_gemm_ex(ctx, backends[b], ta, tb, 1.0f, &A, &B, 0.0f, &C));
      APP_CHECK(clmoe_ctx_finish(ctx));
      int done = 0;
      double start = app_now();
      while (done < reps && (done < 3 || app_now() - start < max_seconds)) {
        double t0 = app_now();
        APP_CHECK(clmoe_ctx_profile_begin(ctx));
        APP_CHECK(clmoe_gemm_ex(ctx, backends[b], ta, tb, 1.0f, &A, &B, 0.0f, &C));
        APP_CHECK(clmoe_ctx_profile_end(ctx, &times[done], NULL));
        walls[done++] = app_now() - t0;
      }
      double t = bench_median(times, done), wall = bench_median(walls, done);
      APP_CHECK(clmoe_tensor_read(&C, have_first ? got : first, cn * sizeof *got));
      double diff = have_first ? max_rel_diff(got, first, cn) : 0.0;
      have_first = 1;
      printf("%-18s %-8s %10.3f %9.3f %9.1f %10.3f %12.2e\n", label, clmoe_gemm_backend_name(backends[b]),
             1e3 * t, flops / t * 1e-12, bytes / t * 1e-9, 1e3 * wall, diff);
      fflush(stdout);
      if (jf) {
        fprintf(jf, "%s\n    {\"m\": %lld, \"n\": %lld, \"k\": %lld, \"backend\": \"%s\", \"runs\": %d, "
                    "\"median_s\": %.6e, \"median_wall_s\": %.6e, \"flops\": %.6e, \"bytes\": %.6e, "
                    "\"tflops\": %.4f, \"gbps\": %.2f, \"max_rel_diff_vs_first\": ",
                first_json ? "" : ",", m, n, k, clmoe_gemm_backend_name(backends[b]), done, t, wall,
                flops, bytes, flops / t * 1e-12, bytes / t * 1e-9);
        json_double(jf, diff);
        fprintf(jf, "}");
        first_json = 0;
      }
    }
    free(first);
    free(got);
    clmoe_tensor_destroy(&A);
    clmoe_tensor_destroy(&B);
    clmoe_tensor_destroy(&C);
  }
  if (jf) {
    fprintf(jf, "\n  ]\n}\n");
    app_close_output(jf);
  }
  free(times);
  free(walls);
  clmoe_ctx_destroy(ctx);
  return 0;
}
