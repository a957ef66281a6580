/* clmoe-xcheck: runs every registered conformance check (random inputs, double-precision
 * reference, stated tolerance) on every device found, or on the ones named, and prints a
 * table and optionally JSON. This is what vendor-portability testers run. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "app_common.h"
#include "conformance/conformance.h"

#define MAX_SELECT 64

static void usage(void)
{
  printf("Usage: clmoe-xcheck [--device SPEC]... [--op PREFIX]... [--seed N] [--json FILE|-]\n"
         "                    [--list] [--quiet]\n"
         "\n"
         "Runs clmoe's conformance checks - each operator on random inputs against a\n"
         "double-precision C reference with a stated tolerance - on every OpenCL device\n"
         "found (or each --device given) and prints op, device, max error, tolerance and\n"
         "PASS/FAIL. Exit status 0 when everything passed, 1 otherwise.\n"
         "\n"
         "  --device SPEC  a device to check (repeatable): P:D, gpu, cpu, or part of a name;\n"
         "                 default: all devices\n"
         "  --op PREFIX    only checks whose name starts with PREFIX (repeatable), e.g. gemm,\n"
         "                 gemm.tiled, rmsnorm\n"
         "  --seed N       seed of the random inputs (default 20261129)\n"
         "  --json FILE    also write the results as JSON (- for stdout, then no table)\n"
         "  --list         list the checks and exit\n"
         "  --quiet        print failures and the summary only\n"
         "  --help, --version\n");
}

static int selected(const clmoe_check *c, const char **ops, int nops)
{
  if (nops == 0) return 1;
  for (int i = 0; i < nops; i++)
    if (clmoe_check_matches(c, ops[i])) return 1;
  return 0;
}

int main(int argc, char **argv)
{
  app_name = "clmoe-xcheck";
  const char *devices[MAX_SELECT], *ops[MAX_SELECT], *json = NULL;
  int ndevices = 0, nops = 0, list = 0, quiet = 0;
  uint64_t seed = 20261129;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage();
      return 0;
    } else if (!strcmp(argv[i], "--version")) {
      printf("clmoe-xcheck %s\n", clmoe_version());
      return 0;
    } else if (app_option(argc, argv, &i, "--device", &v)) {
      if (ndevices == MAX_SELECT) app_usage_error("too many --device options");
      devices[ndevices++] = v;
    } else if (app_option(argc, argv, &i, "--op", &v)) {
      if (nops == MAX_SELECT) app_usage_error("too many --op options");
      ops[nops++] = v;
    } else if (app_option(argc, argv, &i, "--seed", &v)) {
      seed = (uint64_t)app_parse_int("--seed", v, 0, INT64_MAX);
    } else if (app_option(argc, argv, &i, "--json", &v)) {
      json = v;
    } else if (!strcmp(argv[i], "--list")) {
      list = 1;
    } else if (!strcmp(argv[i], "--quiet")) {
      quiet = 1;
    } else {
      app_usage_error("unknown argument '%s'", argv[i]);
    }
  }
  int ncheck = 0;
  const clmoe_check *checks = clmoe_checks(&ncheck);
  int nsel = 0;
  for (int c = 0; c < ncheck; c++) nsel += selected(&checks[c], ops, nops);
  if (nsel == 0) app_usage_error("no check matches the --op prefixes given (try --list)");
  if (list) {
    for (int c = 0; c < ncheck; c++)
      if (selected(&checks[c], ops, nops)) printf("%-32s %s\n", checks[c].name, checks[c].description);
    return 0;
  }

  clmoe_device_caps *all = NULL;
  int nall = 0;
  APP_CHECK(clmoe_devices_list(&all, &nall));
  int *use = calloc((size_t)nall, sizeof *use);
  if (!use) app_die(CLMOE_ERR_OUT_OF_MEMORY, "calloc");
  if (ndevices == 0)
    for (int d = 0; d < nall; d++) use[d] = 1;
  for (int i = 0; i < ndevices; i++) {
    int idx;
    APP_CHECK(clmoe_device_choose(all, nall, devices[i], &idx, NULL, 0));
    use[idx] = 1;
  }

  int table = !json || strcmp(json, "-") != 0;
  FILE *jf = json ? app_open_output(json) : NULL;
  if (jf) fprintf(jf, "{\n  \"clmoe_version\": \"%s\",\n  \"seed\": %" PRIu64 ",\n  \"results\": [", clmoe_version(), seed);
  int first_json = 1, failed = 0, passed = 0;
  if (table) printf("%-30s %-34s %11s %9s  %s\n", "check", "device", "max error", "tolerance", "result");
  for (int d = 0; d < nall; d++) {
    if (!use[d]) continue;
    clmoe_ctx *ctx = NULL;
    char devname[160];
    snprintf(devname, sizeof devname, "[%d:%d] %s", all[d].platform_index, all[d].device_index,
             all[d].device_name);
    clmoe_status st = clmoe_ctx_create_at(&ctx, &all[d], NULL);
    if (st != CLMOE_OK) {
      fprintf(stderr, "%s: cannot open %s: %s\n", app_name, devname, clmoe_last_error());
      failed++;
      continue;
    }
    for (int c = 0; c < ncheck; c++) {
      if (!selected(&checks[c], ops, nops)) continue;
      clmoe_check_result res;
      double t0 = app_now();
      st = clmoe_check_run(&checks[c], ctx, seed, &res);
      double secs = app_now() - t0;
      if (res.passed) passed++;
      else failed++;
      if (table && (!quiet || !res.passed)) {
        printf("%-30s %-34.34s %11.3e %9.1e  %s\n", checks[c].name, devname, res.max_err,
               res.tolerance, res.passed ? "pass" : "FAIL");
        if (!res.passed) printf("    %s\n", res.worst);
        if (st != CLMOE_OK) printf("    %s\n", clmoe_last_error());
      }
      if (jf) {
        fprintf(jf, "%s\n    {\"check\": ", first_json ? "" : ",");
        json_string(jf, checks[c].name);
        fprintf(jf, ", \"device\": ");
        json_string(jf, all[d].device_name);
        fprintf(jf, ", \"platform\": ");
        json_string(jf, all[d].platform_name);
        fprintf(jf, ", \"device_index\": \"%d:%d\", \"max_error\": ", all[d].platform_index,
                all[d].device_index);
        json_double(jf, res.max_err);
        fprintf(jf, ", \"tolerance\": ");
        json_double(jf, res.tolerance);
        fprintf(jf, ", \"passed\": %s, \"seconds\": %.4f, \"detail\": ", res.passed ? "true" : "false", secs);
        json_string(jf, st != CLMOE_OK ? clmoe_last_error() : res.worst);
        fprintf(jf, "}");
        first_json = 0;
      }
    }
    clmoe_ctx_destroy(ctx);
  }
  if (jf) {
    fprintf(jf, "\n  ],\n  \"passed\": %d,\n  \"failed\": %d\n}\n", passed, failed);
    app_close_output(jf);
  }
  if (table) printf("\n%d passed, %d failed\n", passed, failed);
  free(use);
  free(all);
  return failed ? 1 : 0;
}
