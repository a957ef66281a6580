/* Shared scaffolding of the CUnit suites. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "test_common.h"

#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

clmoe_ctx *test_ctx;
uint64_t test_seed = 20261129;

/* CUnit tests take no arguments, so each registered check gets a trampoline slot. */
#define MAX_CHECK_TESTS 256
static const clmoe_check *slot_check[MAX_CHECK_TESTS];
static int nslots;

static void run_slot(int i)
{
  const clmoe_check *c = slot_check[i];
  clmoe_check_result res;
  clmoe_status st = clmoe_check_run(c, test_ctx, test_seed, &res);
  if (st != CLMOE_OK)
    fprintf(stderr, "\n  %s: %s: %s\n", c->name, clmoe_strerror(st), clmoe_last_error());
  if (!res.passed)
    fprintf(stderr, "\n  %s FAILED (seed %" PRIu64 "): max error %.3g > tolerance %.3g; %s\n",
            c->name, test_seed, res.max_err, res.tolerance, res.worst);
  CU_ASSERT(res.passed);
}

#define SLOT(b, k) \
  static void slot_##b##_##k(void) { run_slot((b) * 8 + (k)); }
#define SLOT8(b) SLOT(b, 0) SLOT(b, 1) SLOT(b, 2) SLOT(b, 3) SLOT(b, 4) SLOT(b, 5) SLOT(b, 6) SLOT(b, 7)
SLOT8(0) SLOT8(1) SLOT8(2) SLOT8(3) SLOT8(4) SLOT8(5) SLOT8(6) SLOT8(7)
SLOT8(8) SLOT8(9) SLOT8(10) SLOT8(11) SLOT8(12) SLOT8(13) SLOT8(14) SLOT8(15)
SLOT8(16) SLOT8(17) SLOT8(18) SLOT8(19) SLOT8(20) SLOT8(21) SLOT8(22) SLOT8(23)
SLOT8(24) SLOT8(25) SLOT8(26) SLOT8(27) SLOT8(28) SLOT8(29) SLOT8(30) SLOT8(31)
#define REF(b, k) slot_##b##_##k,
#define REF8(b) REF(b, 0) REF(b, 1) REF(b, 2) REF(b, 3) REF(b, 4) REF(b, 5) REF(b, 6) REF(b, 7)
static void (*const slot_fn[MAX_CHECK_TESTS])(void) = {
    REF8(0) REF8(1) REF8(2) REF8(3) REF8(4) REF8(5) REF8(6) REF8(7)
    REF8(8) REF8(9) REF8(10) REF8(11) REF8(12) REF8(13) REF8(14) REF8(15)
    REF8(16) REF8(17) REF8(18) REF8(19) REF8(20) REF8(21) REF8(22) REF8(23)
    REF8(24) REF8(25) REF8(26) REF8(27) REF8(28) REF8(29) REF8(30) REF8(31)};

int test_kernel_ran(clmoe_ctx *ctx, const char *name)
{
  const clmoe_kernel_time *rows;
  int n = clmoe_ctx_profile_kernels(ctx, &rows);
  for (int i = 0; i < n; i++)
    if (!strcmp(rows[i].name, name) && rows[i].launches > 0) return 1;
  return 0;
}

char *test_env_set(const char *name, const char *value)
{
  const char *old = getenv(name);
  char *saved = old ? strdup(old) : NULL;
  if (value) setenv(name, value, 1);
  else unsetenv(name);
  return saved;
}

void test_env_restore(const char *name, char *saved)
{
  if (saved) setenv(name, saved, 1);
  else unsetenv(name);
  free(saved);
}

void test_add_checks(CU_pSuite suite, const char *prefix)
{
  int count;
  const clmoe_check *all = clmoe_checks(&count);
  for (int i = 0; i < count; i++) {
    if (!clmoe_check_matches(&all[i], prefix)) continue;
    if (nslots == MAX_CHECK_TESTS) {
      fprintf(stderr, "test_add_checks: more than %d checks; raise MAX_CHECK_TESTS\n",
              MAX_CHECK_TESTS);
      abort();
    }
    slot_check[nslots] = &all[i];
    CU_add_test(suite, all[i].name, slot_fn[nslots]);
    nslots++;
  }
}

int test_main(const char *suite_name, void (*add)(CU_pSuite suite))
{
  const char *seed = getenv("CLMOE_TEST_SEED");
  if (seed && *seed) test_seed = strtoull(seed, NULL, 0);
  clmoe_status st = clmoe_ctx_create(&test_ctx, NULL);
  if (st == CLMOE_ERR_NO_DEVICE) {
    fprintf(stderr, "%s: SKIPPED: %s\n", suite_name, clmoe_last_error());
    return 77;
  }
  if (st != CLMOE_OK) {
    fprintf(stderr, "%s: cannot create an OpenCL context: %s\n", suite_name, clmoe_last_error());
    return 1;
  }
  printf("%s on %s (%s), seed %" PRIu64 "\n", suite_name, clmoe_ctx_caps(test_ctx)->device_name,
         clmoe_ctx_caps(test_ctx)->platform_name, test_seed);
  if (CU_initialize_registry() != CUE_SUCCESS) {
    clmoe_ctx_destroy(test_ctx);
    return 1;
  }
  CU_pSuite suite = CU_add_suite(suite_name, NULL, NULL);
  add(suite);
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
  unsigned ran = CU_get_number_of_tests_run();
  CU_cleanup_registry();
  /* Every tensor a test (or the library) created must have been destroyed by now. */
  clmoe_pool_stats pool;
  clmoe_ctx_pool_stats(test_ctx, &pool);
  if (pool.in_use_bytes != 0) {
    fprintf(stderr, "%s: LEAK: %llu bytes of tensors were never destroyed\n", suite_name,
            (unsigned long long)pool.in_use_bytes);
    failed++;
  }
  clmoe_ctx_destroy(test_ctx);
  test_ctx = NULL;
  return failed || ran == 0 ? 1 : 0;
}

/* ---- the temporary directory ---------------------------------------------------------- */
static char tmpdir[512];

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
  (void)sb, (void)ftw;
  if ((type == FTW_DP ? rmdir(path) : unlink(path)) != 0)
    fprintf(stderr, "\n  note: cannot remove %s, left in place\n", path);
  return 0;
}

static void remove_tmpdir(void)
{
  if (tmpdir[0]) nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *test_tmpdir(const char *tag)
{
  if (tmpdir[0]) return tmpdir;
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/clmoe-%s.XXXXXX", base && *base ? base : "/tmp", tag);
  if (!mkdtemp(tmpdir)) {
    fprintf(stderr, "cannot create a temporary directory %s\n", tmpdir);
    exit(1);
  }
  atexit(remove_tmpdir);
  return tmpdir;
}

double test_rel_err(const float *a, const float *b, int64_t n)
{
  double ss = 0.0, worst = 0.0;
  for (int64_t i = 0; i < n; i++) ss += (double)b[i] * b[i];
  const double rms = sqrt(ss / (double)n);
  for (int64_t i = 0; i < n; i++) {
    const double e = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + rms);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}
