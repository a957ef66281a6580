/* clmoe-bench: performance measurements. `clmoe-bench gemm --help` for one benchmark. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int bench_parse_list(const char *flag, const char *s, long long *out, long long lo, long long hi)
{
  int n = 0;
  char *copy = strdup(s), *save = NULL;
  if (!copy) app_die(CLMOE_ERR_OUT_OF_MEMORY, "strdup");
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (n == BENCH_MAX_LIST) app_usage_error("%s: at most %d values", flag, BENCH_MAX_LIST);
    out[n++] = app_parse_int(flag, tok, lo, hi);
  }
  free(copy);
  if (n == 0) app_usage_error("%s: empty list", flag);
  return n;
}

double bench_median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(void)
{
  printf("Usage: clmoe-bench BENCHMARK [options]   (clmoe-bench BENCHMARK --help)\n"
         "\n"
         "Benchmarks:\n"
         "  gemm   clmoe_gemm over sizes: CLBlast, our tiled kernel and a naive kernel side by\n"
         "         side, fp32 or bf16 operands, TFLOP/s and GB/s\n");
}

int main(int argc, char **argv)
{
  app_name = "clmoe-bench";
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("clmoe-bench %s\n", clmoe_version());
    return 0;
  }
  if (!strcmp(argv[1], "gemm")) {
    app_name = "clmoe-bench gemm";
    return bench_gemm(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "kda")) {
    app_name = "clmoe-bench kda";
    return bench_kda(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "mla")) {
    app_name = "clmoe-bench mla";
    return bench_mla(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "moe")) {
    app_name = "clmoe-bench moe";
    return bench_moe(argc - 1, argv + 1);
  }
  app_usage_error("unknown benchmark '%s'", argv[1]);
}
