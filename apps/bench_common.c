/* What the clmoe-bench benchmarks (bench_*.c) share: the median of a set of timings and the
 * comma-separated size lists of their flags. Below the benchmarks, which are below the
 * dispatcher clmoe_bench.c. */
#include <stdio.h>
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

int bench_parse_pairs(const char *flag, const char *s, char sep, long long *a, long long alo, long long ahi,
                      long long *b, long long blo, long long bhi)
{
  int n = 0;
  char *copy = strdup(s), *save = NULL, fa[64], fb[64];
  if (!copy) app_die(CLMOE_ERR_OUT_OF_MEMORY, "strdup");
  snprintf(fa, sizeof fa, "%s (first of a pair)", flag);
  snprintf(fb, sizeof fb, "%s (second of a pair)", flag);
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *mid = strchr(tok, sep);
    if (!mid || n == BENCH_MAX_LIST)
      app_usage_error("%s: '%s' is not a list of at most %d pairs A%cB", flag, s, BENCH_MAX_LIST, sep);
    *mid = '\0';
    a[n] = app_parse_int(fa, tok, alo, ahi);
    b[n++] = app_parse_int(fb, mid + 1, blo, bhi);
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
