/* clmoe-xcheck: runs every registered conformance check (random inputs, double-precision
 * reference, stated tolerance) on every device found, or on the ones named, and prints a
 * table and optionally JSON. With several devices it also compares the devices' outputs
 * with each other, pair by pair; --compare and --matrix read JSON files written on other
 * nodes (xcheck_report.c). This is what vendor-portability testers run. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app_common.h"
#include "xcheck.h"

#define MAX_SELECT 64

static void usage(void)
{
  printf("Usage: clmoe-xcheck [--device SPEC]... [--op PREFIX]... [--skip PREFIX]... [--seed N]\n"
         "                    [--json FILE|-] [--outputs] [--pair-factor X] [--small] [--shard I/N]\n"
         "                    [--claim DIR] [--kernel-times] [--list] [--quiet]\n"
         "       clmoe-xcheck --compare A.json B.json [--pair-factor X] [--quiet]\n"
         "       clmoe-xcheck --matrix FILE.json...\n"
         "\n"
         "Runs clmoe's conformance checks - each operator on random inputs against a\n"
         "double-precision C reference with a stated tolerance - on every OpenCL device\n"
         "found (or each --device given) and prints op, device, max error, tolerance and\n"
         "PASS/FAIL. With two or more devices a second table compares the devices' outputs\n"
         "with each other, every pair, by the checks' measure with the other device in the\n"
         "place of the reference (mostly |a - b| / (|ref| + rms(ref))), a NaN or Inf the\n"
         "other device does not share infinite. Exit status 0 when every check passed and every\n"
         "pair differs by at most X times the check's tolerance, 1 otherwise.\n"
         "\n"
         "  --device SPEC  a device to check (repeatable): P:D, gpu, cpu, an implementation\n"
         "                 (pocl, intel, nvidia, amd, oclgrind, ...) or part of a name;\n"
         "                 default: all devices\n"
         "  --op PREFIX    only checks whose name starts with PREFIX (repeatable), e.g. gemm,\n"
         "                 gemm.tiled, rmsnorm\n"
         "  --skip PREFIX  leave out the checks whose name starts with PREFIX (repeatable)\n"
         "  --seed N       seed of the random inputs (default 20261129)\n"
         "  --json FILE    also write the results as JSON (- for stdout, then no table): the\n"
         "                 date, clmoe version and build (--version's facts; the commit from\n"
         "                 CLMOE_COMMIT when set), each device's platform and driver\n"
         "                 versions, every result and pair\n"
         "  --outputs      with --json: also write every check's outputs (base64 float32\n"
         "                 values and the measure's denominators), for --compare on another\n"
         "                 node; all checks on one device write over 120 MB (248 checks: 11.4\n"
         "                 million values, 70 MB gzipped), select checks with --op\n"
         "  --pair-factor X  a pair of devices fails when it differs by more than X times\n"
         "                 the check's tolerance (default 1; two devices that each pass can\n"
         "                 differ by up to 2)\n"
         "  --compare A B  compare two --json files: every device of A against every device\n"
         "                 of B, check by check (outputs when both were written with\n"
         "                 --outputs, else max errors and pass/fail); exit 1 when a pair\n"
         "                 differs beyond its bound or a check failed in either file\n"
         "  --matrix FILE...  a Markdown conformance matrix of --json files: one row per\n"
         "                 check, one column per device; a header with each file's date,\n"
         "                 platforms, drivers and clmoe version\n"
         "  --small        run the checks at their smallest sizes (the same cases and code\n"
         "                 paths, shorter sequences and rows): for a simulator such as\n"
         "                 Oclgrind\n"
         "  --shard I/N    only the selected checks whose position in the list is I modulo\n"
         "                 N (0 <= I < N): N processes run a selection between them\n"
         "  --claim DIR    run a selected check only after making the directory DIR/NAME\n"
         "                 (NAME the check's): processes given the same DIR share the checks\n"
         "                 out as each becomes free, every check run once\n"
         "  --kernel-times after each check, its kernels by device time, longest first\n"
         "                 (OpenCL profiling events; CLBlast's calls as clblast_sgemm): where\n"
         "                 a check spends its time, e.g. under a simulator\n"
         "  --list         list the checks and exit\n"
         "  --quiet        print failures and the summaries only\n"
         "  --help, --version\n");
}

/* Matched by one of ops (all when none is given) and by none of skips. */
static int selected(const clmoe_check *c, const char **ops, int nops, const char **skips, int nskips)
{
  for (int i = 0; i < nskips; i++)
    if (clmoe_check_matches(c, skips[i])) return 0;
  if (nops == 0) return 1;
  for (int i = 0; i < nops; i++)
    if (clmoe_check_matches(c, ops[i])) return 1;
  return 0;
}

/* One pair of devices on one check. */
typedef struct pair_row {
  int check, a, b; /* a < b: indices into the device list */
  double tolerance;
  xc_diff d;
} pair_row;

/* The JSON header: what ran, when, where, on which drivers. */
static void json_header(FILE *jf, uint64_t seed, int outputs, int small, double factor,
                        const clmoe_device_caps *all, int nall, const int *use)
{
  char date[32] = "", host[256] = "";
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  fprintf(jf, "{\n  \"xcheck_format\": 2,\n  \"clmoe_version\": ");
  json_string(jf, clmoe_version());
  /* the commit: CLMOE_COMMIT when set, else the build's own when it knows it */
  const char *commit = getenv("CLMOE_COMMIT");
  char built[128];
  app_build_commit(built, sizeof built);
  if (!(commit && *commit) && strcmp(built, "unknown")) commit = built;
  if (commit && *commit) {
    fprintf(jf, ",\n  \"commit\": ");
    json_string(jf, commit);
  }
  fprintf(jf, ",\n  \"build\": ");
  json_build(jf);
  fprintf(jf, ",\n  \"date\": ");
  json_string(jf, date);
  fprintf(jf, ",\n  \"host\": ");
  json_string(jf, host);
  fprintf(jf, ",\n  \"seed\": %" PRIu64 ",\n  \"outputs\": %s,\n  \"small\": %s,\n  \"pair_factor\": ", seed,
          outputs ? "true" : "false", small ? "true" : "false");
  json_double(jf, factor);
  fprintf(jf, ",\n  \"devices\": [");
  int first = 1;
  for (int d = 0; d < nall; d++) {
    if (!use[d]) continue;
    const clmoe_device_caps *c = &all[d];
    fprintf(jf, "%s\n    {\"device_index\": \"%d:%d\", \"device\": ", first ? "" : ",",
            c->platform_index, c->device_index);
    json_string(jf, c->device_name);
    fprintf(jf, ", \"platform\": ");
    json_string(jf, c->platform_name);
    fprintf(jf, ", \"platform_version\": ");
    json_string(jf, c->platform_version);
    fprintf(jf, ", \"device_version\": ");
    json_string(jf, c->device_version);
    fprintf(jf, ", \"driver_version\": ");
    json_string(jf, c->driver_version);
    fprintf(jf, ", \"opencl_c_version\": ");
    json_string(jf, c->opencl_c_version);
    fprintf(jf, "}");
    first = 0;
  }
  fprintf(jf, "\n  ],\n  \"results\": [");
}

static void json_result(FILE *jf, int first, const clmoe_check *check, const clmoe_device_caps *c,
                        const clmoe_check_result *res, clmoe_status st, double secs,
                        const clmoe_check_capture *cap)
{
  fprintf(jf, "%s\n    {\"check\": ", first ? "" : ",");
  json_string(jf, check->name);
  fprintf(jf, ", \"device\": ");
  json_string(jf, c->device_name);
  fprintf(jf, ", \"platform\": ");
  json_string(jf, c->platform_name);
  fprintf(jf, ", \"device_index\": \"%d:%d\", \"max_error\": ", c->platform_index, c->device_index);
  json_double(jf, res->max_err);
  fprintf(jf, ", \"tolerance\": ");
  json_double(jf, res->tolerance);
  fprintf(jf, ", \"passed\": %s, \"ran\": %s, \"seconds\": %.4f, \"detail\": ", res->passed ? "true" : "false",
          st == CLMOE_OK ? "true" : "false", secs);
  json_string(jf, st != CLMOE_OK ? clmoe_last_error() : res->worst);
  if (cap) xc_write_outputs(jf, st == CLMOE_OK ? cap : NULL); /* a check that did not run: none */
  fprintf(jf, "}");
}

static void json_pairs(FILE *jf, const pair_row *rows, int nrows, const clmoe_check *checks,
                       const clmoe_device_caps *all, double factor)
{
  fprintf(jf, "\n  ],\n  \"pairs\": [");
  for (int r = 0; r < nrows; r++) {
    const pair_row *p = &rows[r];
    fprintf(jf, "%s\n    {\"check\": ", r ? "," : "");
    json_string(jf, checks[p->check].name);
    fprintf(jf, ", \"a\": \"%d:%d\", \"b\": \"%d:%d\", \"compared\": %s, \"max_difference\": ",
            all[p->a].platform_index, all[p->a].device_index, all[p->b].platform_index,
            all[p->b].device_index, p->d.compared ? "true" : "false");
    if (p->d.compared) json_double(jf, p->d.max); /* null: infinite (a NaN/Inf mismatch) */
    else fputs("null", jf);
    fprintf(jf, ", \"tolerance\": ");
    json_double(jf, p->tolerance);
    fprintf(jf, ", \"within\": %s, \"where\": ", xc_pair_within(&p->d, p->tolerance, factor) ? "true" : "false");
    json_string(jf, p->d.where);
    fprintf(jf, "}");
  }
}

/* The second table: every pair of devices on every check; returns the pairs beyond bound. */
static int print_pairs(const pair_row *rows, int nrows, const clmoe_check *checks,
                       const clmoe_device_caps *all, double factor, int quiet, int table)
{
  int same = 0, within = 0, beyond = 0, skipped = 0;
  for (int r = 0; r < nrows; r++) {
    const pair_row *p = &rows[r];
    const char *v = xc_pair_verdict(&p->d, p->tolerance, factor);
    if (!p->d.compared) skipped++;
    else if (p->d.max == 0.0) same++;
    else if (xc_pair_within(&p->d, p->tolerance, factor)) within++;
    else beyond++;
    if (!table) continue;
    if (r == 0)
      printf("\nDevice pairs: |a - b| by each check's measure; a pair fails beyond %g x the tolerance\n"
             "%-30s %-5s %-5s %11s %9s  %-6s  %s\n", factor, "check", "A", "B", "max diff",
             "tolerance", "result", "where");
    if (quiet && strcmp(v, "DIFFER") != 0) continue;
    char a[16], b[16], diff[16];
    snprintf(a, sizeof a, "%d:%d", all[p->a].platform_index, all[p->a].device_index);
    snprintf(b, sizeof b, "%d:%d", all[p->b].platform_index, all[p->b].device_index);
    if (p->d.compared) snprintf(diff, sizeof diff, "%.3e", p->d.max);
    else snprintf(diff, sizeof diff, "-");
    printf("%-30s %-5s %-5s %11s %9.1e  %-6s  %s\n", checks[p->check].name, a, b, diff, p->tolerance,
           v, p->d.where);
  }
  if (table && nrows)
    printf("\n%d device pairs: %d identical, %d within the bound, %d beyond it, %d not compared\n",
           nrows, same, within, beyond, skipped);
  return beyond;
}

/* --claim: 1 when this process made DIR/NAME (the check is its to run), 0 when another
 * process made it first; any other failure ends the run. */
static int claim_check(const char *dir, const char *name)
{
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
    app_usage_error("--claim: '%s' is too long a path", dir);
  if (mkdir(path, 0755) == 0) return 1;
  if (errno == EEXIST) return 0;
  app_fail(1, "--claim: cannot make %s: %s", path, strerror(errno));
}

/* --kernel-times: the check's kernels by device time, longest first, then the counts cleared. */
static int by_seconds(const void *a, const void *b)
{
  const double x = ((const clmoe_kernel_time *)a)->seconds, y = ((const clmoe_kernel_time *)b)->seconds;
  return (x < y) - (x > y);
}

static void print_kernel_times(clmoe_ctx *ctx, const char *check)
{
  double total = 0.0;
  int n = 0;
  APP_CHECK(clmoe_ctx_profile_end(ctx, &total, &n));
  const clmoe_kernel_time *rows;
  const int nrows = clmoe_ctx_profile_kernels(ctx, &rows);
  clmoe_kernel_time *sorted = malloc((size_t)(nrows > 0 ? nrows : 1) * sizeof *sorted);
  if (!sorted) app_die(CLMOE_ERR_OUT_OF_MEMORY, "malloc");
  memcpy(sorted, rows, (size_t)nrows * sizeof *sorted);
  qsort(sorted, (size_t)nrows, sizeof *sorted, by_seconds);
  printf("  %s: %.3f s of device time in %d kernels\n", check, total, n);
  for (int i = 0; i < nrows; i++)
    printf("    %9.3f s %6lld x %s\n", sorted[i].seconds, (long long)sorted[i].launches, sorted[i].name);
  fflush(stdout); /* a long run under a simulator shows each check as it ends */
  free(sorted);
  clmoe_ctx_profile_clear(ctx);
}

int main(int argc, char **argv)
{
  app_name = "clmoe-xcheck";
  app_flags flags = {.take = APP_FLAGS_ALL, .usage = usage};
  const char *ops[MAX_SELECT], *skips[MAX_SELECT], *compare[2] = {NULL, NULL}, *claim = NULL;
  const char *const *matrix = NULL;
  int nops = 0, nskips = 0, list = 0, quiet = 0, outputs = 0, nmatrix = 0, small = 0, ktimes = 0;
  int64_t shard = 0, nshards = 1;
  double factor = 1.0;
  uint64_t seed = 20261129;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (app_standard_flag(argc, argv, &i, &flags)) continue;
    if (app_option(argc, argv, &i, "--op", &v)) {
      if (nops == MAX_SELECT) app_usage_error("too many --op options");
      ops[nops++] = v;
    } else if (app_option(argc, argv, &i, "--skip", &v)) {
      if (nskips == MAX_SELECT) app_usage_error("too many --skip options");
      skips[nskips++] = v;
    } else if (app_option(argc, argv, &i, "--seed", &v)) {
      seed = (uint64_t)app_parse_int("--seed", v, 0, INT64_MAX);
    } else if (app_option(argc, argv, &i, "--pair-factor", &v)) {
      char *end = NULL;
      factor = strtod(v, &end);
      if (!end || end == v || *end || !(factor >= 0.0 && factor < 1e300))
        app_usage_error("--pair-factor: '%s' is not a number >= 0", v);
    } else if (!strcmp(argv[i], "--outputs")) {
      outputs = 1;
    } else if (!strcmp(argv[i], "--small")) {
      small = 1;
    } else if (app_option(argc, argv, &i, "--claim", &v)) {
      claim = v;
    } else if (!strcmp(argv[i], "--kernel-times")) {
      ktimes = 1;
    } else if (app_option(argc, argv, &i, "--shard", &v)) {
      const char *slash = strchr(v, '/');
      char part[32];
      if (!slash || slash == v || (size_t)(slash - v) >= sizeof part)
        app_usage_error("--shard: '%s' is not I/N (e.g. 0/2)", v);
      memcpy(part, v, (size_t)(slash - v));
      part[slash - v] = '\0';
      nshards = app_parse_int("--shard (N)", slash + 1, 1, 1 << 20);
      shard = app_parse_int("--shard (I)", part, 0, nshards - 1);
    } else if (!strcmp(argv[i], "--compare")) {
      if (i + 2 >= argc) app_usage_error("--compare needs two JSON files");
      compare[0] = argv[++i];
      compare[1] = argv[++i];
    } else if (!strcmp(argv[i], "--matrix")) {
      matrix = (const char *const *)&argv[i + 1]; /* every argument after it */
      nmatrix = argc - i - 1;
      if (nmatrix == 0) app_usage_error("--matrix needs at least one JSON file");
      break;
    } else if (!strcmp(argv[i], "--list")) {
      list = 1;
    } else if (!strcmp(argv[i], "--quiet")) {
      quiet = 1;
    } else {
      app_usage_error("unknown argument '%s'", argv[i]);
    }
  }
  const char *json = flags.json, *const *devices = flags.devices;
  const int ndevices = flags.ndevices;
  if (compare[0] && matrix) app_usage_error("--compare and --matrix cannot be combined");
  if (compare[0]) return xc_compare_files(compare[0], compare[1], factor, quiet);
  if (matrix) return xc_matrix_files(nmatrix, matrix);
  if (outputs && !json) app_usage_error("--outputs writes into the --json file: give --json too");

  int ncheck = 0;
  const clmoe_check *checks = clmoe_checks(&ncheck);
  /* pick[c]: check c is selected by --op and falls in this --shard */
  char *pick = calloc((size_t)ncheck + 1, 1);
  if (!pick) app_die(CLMOE_ERR_OUT_OF_MEMORY, "calloc");
  int nsel = 0, nmatch = 0;
  for (int c = 0; c < ncheck; c++)
    if (selected(&checks[c], ops, nops, skips, nskips)) nsel += pick[c] = nmatch++ % nshards == shard;
  if (nmatch == 0) app_usage_error("no check matches the --op and --skip prefixes given (try --list)");
  if (list) {
    for (int c = 0; c < ncheck; c++)
      if (pick[c]) printf("%-32s %s\n", checks[c].name, checks[c].description);
    return 0;
  }
  clmoe_check_set_small(small);

  clmoe_device_caps *all = NULL;
  int nall = 0;
  APP_CHECK(clmoe_devices_list(&all, &nall));
  int *use = calloc((size_t)nall, sizeof *use), nuse = 0;
  clmoe_ctx **ctx = calloc((size_t)nall, sizeof *ctx);
  clmoe_check_capture *cap = calloc((size_t)nall, sizeof *cap);
  clmoe_status *st = calloc((size_t)nall, sizeof *st);
  double *tol = calloc((size_t)nall, sizeof *tol);
  int *ok = calloc((size_t)nall, sizeof *ok);
  if (!use || !ctx || !cap || !st || !tol || !ok) app_die(CLMOE_ERR_OUT_OF_MEMORY, "calloc");
  if (ndevices == 0)
    for (int d = 0; d < nall; d++) use[d] = 1;
  for (int i = 0; i < ndevices; i++) {
    int idx;
    APP_CHECK(clmoe_device_choose(all, nall, devices[i], &idx, NULL, 0));
    use[idx] = 1;
  }
  for (int d = 0; d < nall; d++) nuse += use[d];
  /* Outputs are kept for the pairs (several devices) and for --outputs: one check at a
   * time, every device, freed before the next check. */
  const int capture = nuse > 1 || outputs;
  const int npairs_max = nsel * nuse * (nuse - 1) / 2;
  pair_row *pairs = calloc((size_t)npairs_max + 1, sizeof *pairs);
  if (!pairs) app_die(CLMOE_ERR_OUT_OF_MEMORY, "calloc");
  int npairs = 0;

  int table = !json || strcmp(json, "-") != 0;
  FILE *jf = json ? app_open_output(json) : NULL;
  if (jf) json_header(jf, seed, outputs, small, factor, all, nall, use);
  int first_json = 1, failed = 0, passed = 0;
  for (int d = 0; d < nall; d++) {
    if (!use[d]) continue;
    const clmoe_ctx_options copts = {.profiling = ktimes};
    if (clmoe_ctx_create_at(&ctx[d], &all[d], &copts) != CLMOE_OK) {
      fprintf(stderr, "%s: cannot open [%d:%d] %s: %s\n", app_name, all[d].platform_index,
              all[d].device_index, all[d].device_name, clmoe_last_error());
      ctx[d] = NULL;
      failed++;
    }
  }
  if (table) printf("%-30s %-34s %11s %9s  %s\n", "check", "device", "max error", "tolerance", "result");
  for (int c = 0; c < ncheck; c++) {
    if (!pick[c] || (claim && !claim_check(claim, checks[c].name))) continue;
    for (int d = 0; d < nall; d++) {
      if (!ctx[d]) continue;
      char devname[160];
      snprintf(devname, sizeof devname, "[%d:%d] %s", all[d].platform_index, all[d].device_index,
               all[d].device_name);
      clmoe_check_result res;
      double t0 = app_now();
      if (ktimes) APP_CHECK(clmoe_ctx_profile_begin(ctx[d]));
      st[d] = clmoe_check_run_capture(&checks[c], ctx[d], seed, &res, capture ? &cap[d] : NULL);
      if (ktimes) print_kernel_times(ctx[d], checks[c].name);
      double secs = app_now() - t0;
      tol[d] = res.tolerance;
      ok[d] = res.passed;
      if (res.passed) passed++;
      else failed++;
      if (table && (!quiet || !res.passed)) {
        printf("%-30s %-34.34s %11.3e %9.1e  %s\n", checks[c].name, devname, res.max_err,
               res.tolerance, res.passed ? "pass" : "FAIL");
        if (!res.passed) printf("    %s\n", res.worst);
        if (st[d] != CLMOE_OK) printf("    %s\n", clmoe_last_error());
      }
      if (jf) json_result(jf, first_json, &checks[c], &all[d], &res, st[d], secs, outputs ? &cap[d] : NULL);
      first_json = 0;
    }
    for (int a = 0; a < nall; a++)
      for (int b = a + 1; b < nall && use[a]; b++) {
        if (!use[b]) continue;
        pair_row *p = &pairs[npairs++];
        /* the check's tolerance (the larger if it chose one per device) */
        p->check = c, p->a = a, p->b = b, p->tolerance = tol[a] > tol[b] ? tol[a] : tol[b];
        int bad = !ctx[a] ? a : !ctx[b] ? b : st[a] != CLMOE_OK ? a : st[b] != CLMOE_OK ? b : -1;
        if (bad >= 0)
          snprintf(p->d.where, sizeof p->d.where, "did not run on [%d:%d]", all[bad].platform_index,
                   all[bad].device_index);
        else if (cap[a].dropped || cap[b].dropped) /* partial outputs: no verdict */
          snprintf(p->d.where, sizeof p->d.where, "outputs past the capture bound were left out");
        else if (!cap[a].count && !cap[b].count && tol[a] == 0.0 && tol[b] == 0.0 && ok[a] && ok[b])
          xc_pair_exact(&p->d); /* both equal the reference bit for bit (outputs not floats) */
        else
          xc_pair_diff(cap[a].outputs, cap[a].count, cap[b].outputs, cap[b].count, &p->d);
      }
    for (int d = 0; d < nall; d++) clmoe_check_capture_clear(&cap[d]);
  }
  int beyond = print_pairs(pairs, npairs, checks, all, factor, quiet, table);
  if (jf) {
    json_pairs(jf, pairs, npairs, checks, all, factor);
    fprintf(jf, "\n  ],\n  \"passed\": %d,\n  \"failed\": %d,\n  \"pairs_beyond\": %d\n}\n", passed,
            failed, beyond);
    app_close_output(jf);
  }
  if (table) printf("\n%d passed, %d failed\n", passed, failed);
  for (int d = 0; d < nall; d++) clmoe_ctx_destroy(ctx[d]);
  free(pairs);
  free(pick);
  free(tol);
  free(ok);
  free(st);
  free(cap);
  free(ctx);
  free(use);
  free(all);
  return failed || beyond ? 1 : 0;
}
