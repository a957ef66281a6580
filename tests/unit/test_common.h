/* Shared scaffolding of the CUnit suites: the device, the seed, the runner. */
#ifndef CLMOE_TEST_COMMON_H
#define CLMOE_TEST_COMMON_H

#include <CUnit/Basic.h>
#include <stdint.h>

#include "clmoe/clmoe.h"
#include "check/conformance.h"

/* The context every test of a suite uses (device as the apps choose it: CLMOE_DEVICE or
 * the default). */
extern clmoe_ctx *test_ctx;
/* Seed of the random inputs: CLMOE_TEST_SEED or a fixed default; printed on failure. */
extern uint64_t test_seed;

/* Asserts that a clmoe call succeeded, printing the library's message if not. */
#define TEST_OK(call)                                                                      \
  do {                                                                                     \
    clmoe_status test_st_ = (call);                                                        \
    if (test_st_ != CLMOE_OK)                                                              \
      fprintf(stderr, "\n  %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,              \
              clmoe_strerror(test_st_), clmoe_last_error());                               \
    CU_ASSERT_EQUAL_FATAL(test_st_, CLMOE_OK);                                             \
  } while (0)

/* Runs every registered conformance check whose name starts with prefix as its own test
 * in `suite` (one CUnit test each). */
void test_add_checks(CU_pSuite suite, const char *prefix);

/* 1 when a kernel named `name` was launched since the last clmoe_ctx_profile_clear (ctx
 * made with profiling on). */
int test_kernel_ran(clmoe_ctx *ctx, const char *name);

/* Largest |a - b| / (|b| + rms(b)) over n numbers (the conformance checks' measure); NaN
 * or Inf in either gives infinity. */
double test_rel_err(const float *a, const float *b, int64_t n);

/* Sets environment variable name to value (NULL: unsets it) and returns its previous value
 * (malloc'd, or NULL) for test_env_restore, which puts it back and frees it. */
char *test_env_set(const char *name, const char *value);
void test_env_restore(const char *name, char *saved);

/* A fresh temporary directory for this process ($TMPDIR or /tmp, "clmoe-TAG.XXXXXX"),
 * created on the first call and removed with everything in it when the process exits;
 * exits 1 when it cannot be made. */
const char *test_tmpdir(const char *tag);

/* Creates the context, registers the suite through add(), runs it, prints CUnit's summary
 * and returns the exit status (0 all passed, 1 failures, 77 skipped: no OpenCL device). */
int test_main(const char *suite_name, void (*add)(CU_pSuite suite));

#endif
