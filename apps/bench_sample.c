/* clmoe-bench sample: the device sampler (clmoe_gen_sample_rows: a token per row of [batch,
 * vocab] logits, one work-group per row or each row over several) against the host sampler
 * (clmoe_gen_sample, row after row), over vocabularies, batch sizes, work-group counts per
 * row (CLMOE_SAMPLE_GROUPS) and four option sets (temperature only, top-p 0.95, top-k 50,
 * top-k 50 + top-p 0.9) on normal logits (sd 3). Device times: the kernels from OpenCL
 * profiling and the wall time of the launches + clFinish, medians; host: the wall time of
 * the batch's rows, median. Every row also checks that both draw the same tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "clmoe/paths.h"

static void usage(void)
{
  printf("Usage: clmoe-bench sample [--vocab LIST] [--batch LIST] [--groups LIST] [--reps N]\n"
         "                          [--max-seconds S] [--no-host] [--device SPEC] [--json FILE|-]\n"
         "\n"
         "Times one device draw per row of [batch, vocab] logits (clmoe_gen_sample_rows) and\n"
         "the host sampler over the same rows, in microseconds per launch (per batch), for\n"
         "temperature 0.8 alone, with top-p 0.95, top-k 50, and top-k 50 with top-p 0.9;\n"
         "'groups' is the work-groups per row; 'same' says whether the device drew the host's\n"
         "tokens.\n"
         "\n"
         "  --vocab LIST     vocabulary sizes (default 163840, Kimi-Linear's)\n"
         "  --batch LIST     rows per launch (default 1,16)\n"
         "  --groups LIST    work-groups per row, as CLMOE_SAMPLE_GROUPS (0: automatic, 1: one\n"
         "                   per row; default: the environment's CLMOE_SAMPLE_GROUPS)\n"
         "  --reps N         timed launches after one warm-up (default 20)\n"
         "  --max-seconds S  stop repeating a measurement after S seconds (default 5)\n"
         "  --no-host        skip the host sampler\n"
         "  --device SPEC    as for clmoe-info\n"
         "  --json FILE      write the results as JSON (- for stdout)\n");
}

static const clmoe_gen_sampling HOW[] = {{.temperature = 0.8, .seed = 1},
                                         {.temperature = 0.8, .top_p = 0.95, .seed = 1},
                                         {.temperature = 0.8, .top_k = 50, .seed = 1},
                                         {.temperature = 0.8, .top_k = 50, .top_p = 0.9, .seed = 1}};
static const char *const NAMES[] = {"temperature", "top-p 0.95", "top-k 50", "top-k 50 top-p 0.9"};
enum { NHOW = sizeof HOW / sizeof HOW[0] };

typedef struct sample_opts {
  int reps, host;
  double max_s;
} sample_opts;

/* Median kernel and wall seconds of a device draw at step 1..reps, after one warm-up. */
static void time_device(clmoe_ctx *ctx, const clmoe_gen_sampling *how, const clmoe_tensor *lg, clmoe_tensor *ids,
                        const sample_opts *o, double *kernel_s, double *wall_s)
{
  double *kt = malloc((size_t)o->reps * sizeof *kt), *wt = malloc((size_t)o->reps * sizeof *wt);
  if (!kt || !wt) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  APP_CHECK(clmoe_gen_sample_rows(ctx, how, lg, 0, ids)); /* build, warm */
  APP_CHECK(clmoe_ctx_finish(ctx));
  int n = 0;
  const double start = app_now();
  while (n < o->reps && (n < 3 || app_now() - start < o->max_s)) {
    const double w0 = app_now();
    APP_CHECK(clmoe_ctx_profile_begin(ctx));
    APP_CHECK(clmoe_gen_sample_rows(ctx, how, lg, n + 1, ids));
    APP_CHECK(clmoe_ctx_profile_end(ctx, &kt[n], NULL)); /* (waits for the kernel) */
    wt[n++] = app_now() - w0;
  }
  *kernel_s = bench_median(kt, n);
  *wall_s = bench_median(wt, n);
  free(kt), free(wt);
}

/* Median wall seconds of the host sampler over the R rows at the last device step (reps);
 * *same: whether its tokens are the device's (ids of that step). */
static double time_host(const clmoe_gen_sampling *how, const float *lg, int64_t R, int64_t V, int64_t step,
                        const int32_t *dev, const sample_opts *o, int *same)
{
  double t[5];
  const int n = o->reps < 5 ? o->reps : 5;
  *same = 1;
  for (int k = 0; k < n; k++) {
    const double t0 = app_now();
    for (int64_t r = 0; r < R; r++) {
      int32_t tok;
      APP_CHECK(clmoe_gen_sample(how, lg + r * V, V, r, step, &tok));
      *same &= tok == dev[r];
    }
    t[k] = app_now() - t0;
  }
  return bench_median(t, n);
}

int bench_sample(int argc, char **argv)
{
  const char *vocab_arg = "163840", *batch_arg = "1,16", *groups_arg = NULL;
  sample_opts o = {.reps = 20, .host = 1, .max_s = 5.0};
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION | APP_FLAG_DEVICE | APP_FLAG_JSON, .usage = usage};
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--vocab", &v)) vocab_arg = v;
    else if (app_option(argc, argv, &i, "--batch", &v)) batch_arg = v;
    else if (app_option(argc, argv, &i, "--groups", &v)) groups_arg = v;
    else if (app_option(argc, argv, &i, "--reps", &v)) o.reps = (int)app_parse_int("--reps", v, 1, 100000);
    else if (!strcmp(argv[i], "--no-host")) o.host = 0;
    else if (app_option(argc, argv, &i, "--max-seconds", &v)) {
      o.max_s = atof(v);
      if (!(o.max_s > 0)) app_usage_error("--max-seconds: '%s' is not a positive number", v);
    } else app_usage_error("unknown argument '%s'", argv[i]);
  }
  long long vocabs[BENCH_MAX_LIST], batches[BENCH_MAX_LIST], groups[BENCH_MAX_LIST];
  const int nv = bench_parse_list("--vocab", vocab_arg, vocabs, 1, 1LL << 30);
  const int nb = bench_parse_list("--batch", batch_arg, batches, 1, 65536);
  groups[0] = -1; /* no --groups: CLMOE_SAMPLE_GROUPS as the environment sets it */
  const int ng = groups_arg ? bench_parse_list("--groups", groups_arg, groups, 0, 65536) : 1;
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options copts = {.device = flags.device, .profiling = 1};
  APP_CHECK(clmoe_ctx_create(&ctx, &copts));
  const clmoe_device_caps *caps = clmoe_ctx_caps(ctx);
  printf("clmoe-bench sample on %s (%s), logits N(0, 3^2), median of up to %d launches\n", caps->device_name,
         caps->platform_name, o.reps);
  printf("%8s %6s %6s  %-20s %12s %12s %12s %5s\n", "vocab", "batch", "groups", "options", "kernel us", "device us",
         "host us", "same");
  FILE *jf = flags.json ? app_open_output(flags.json) : NULL;
  if (jf) {
    fprintf(jf, "{\n  \"benchmark\": \"sample\",\n  \"clmoe_version\": \"%s\",\n  \"device\": ", clmoe_version());
    json_string(jf, caps->device_name);
    fprintf(jf, ",\n  \"platform\": ");
    json_string(jf, caps->platform_name);
    fprintf(jf, ",\n  \"results\": [");
  }
  int first = 1, all_same = 1;
  for (int a = 0; a < nv; a++)
    for (int c = 0; c < nb * ng; c++) {
      const int64_t V = vocabs[a], R = batches[c / ng], shape[2] = {R, V};
      char knob[24];
      int64_t G;
      snprintf(knob, sizeof knob, "%lld", groups[c % ng]);
      APP_CHECK(clmoe_ctx_set_knob(ctx, "CLMOE_SAMPLE_GROUPS", groups[c % ng] < 0 ? NULL : knob));
      APP_CHECK(clmoe_gen_sample_groups(ctx, R, V, &G));
      clmoe_tensor lg = {0}, ids = {0};
      APP_CHECK(clmoe_tensor_create(ctx, &lg, CLMOE_F32, 2, shape));
      APP_CHECK(clmoe_tensor_create(ctx, &ids, CLMOE_I32, 1, &R));
      APP_CHECK(clmoe_tensor_fill_normal(&lg, 7, 0.0f, 3.0f));
      float *host = malloc((size_t)(R * V) * sizeof *host);
      int32_t *dev = malloc((size_t)R * sizeof *dev);
      if (!host || !dev) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
      APP_CHECK(clmoe_tensor_read(&lg, host, (size_t)(R * V) * sizeof *host));
      for (int h = 0; h < NHOW; h++) {
        double ks, ws, hs = -1.0;
        int same = -1;
        time_device(ctx, &HOW[h], &lg, &ids, &o, &ks, &ws);
        if (o.host) { /* the tokens of one more device launch, at a step of its own */
          APP_CHECK(clmoe_gen_sample_rows(ctx, &HOW[h], &lg, 1000, &ids));
          APP_CHECK(clmoe_tensor_read(&ids, dev, (size_t)R * sizeof *dev));
          hs = time_host(&HOW[h], host, R, V, 1000, dev, &o, &same);
          all_same &= same;
        }
        char hcol[24] = "-", scol[8] = "-";
        if (o.host) snprintf(hcol, sizeof hcol, "%.1f", 1e6 * hs), snprintf(scol, sizeof scol, "%s", same ? "yes" : "NO");
        printf("%8lld %6lld %6lld  %-20s %12.1f %12.1f %12s %5s\n", (long long)V, (long long)R, (long long)G, NAMES[h],
               1e6 * ks, 1e6 * ws, hcol, scol);
        fflush(stdout);
        if (jf) {
          fprintf(jf, "%s\n    {\"vocab\": %lld, \"batch\": %lld, \"groups\": %lld, \"options\": \"%s\", "
                  "\"kernel_us\": %.2f, \"device_us\": %.2f, \"host_us\": %.2f, \"same_tokens\": %d}",
                  first ? "" : ",", (long long)V, (long long)R, (long long)G, NAMES[h], 1e6 * ks, 1e6 * ws,
                  o.host ? 1e6 * hs : -1.0, same);
          first = 0;
        }
      }
      free(host), free(dev);
      clmoe_tensor_destroy(&lg), clmoe_tensor_destroy(&ids);
    }
  if (jf) {
    fprintf(jf, "\n  ]\n}\n");
    if (jf != stdout) fclose(jf);
  }
  clmoe_ctx_destroy(ctx);
  if (!all_same) fprintf(stderr, "clmoe-bench sample: the device drew other tokens than the host\n");
  return all_same ? 0 : 1;
}
