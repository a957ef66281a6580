/* Conformance checks: every operator run on a device against a double-precision C
 * reference on random inputs, with a stated tolerance. The same checks run in the CUnit
 * suites (make check) and in clmoe-xcheck (every device, table or JSON). */
#ifndef CLMOE_CONFORMANCE_H
#define CLMOE_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>

#include "clmoe.h"

typedef struct clmoe_check_result {
  double max_err;   /* worst error over all compared outputs (see ck_compare) */
  double tolerance; /* the check's bound on max_err */
  int passed;       /* max_err <= tolerance and no NaN/Inf where the reference is finite */
  char worst[160];  /* where the worst error was: output name, index, got, expected */
} clmoe_check_result;

/* Runs one check on ctx with inputs drawn from seed; fills res. A non-OK status means the
 * check could not run (the op failed); res->passed is then 0. */
typedef clmoe_status (*clmoe_check_fn)(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res);

typedef struct clmoe_check {
  const char *name;        /* "op.variant", e.g. "gemm.f32.nt" or "rmsnorm.backward" */
  const char *description; /* one line */
  clmoe_check_fn run;
} clmoe_check;

/* Every registered check (registry.c). */
const clmoe_check *clmoe_checks(int *count);
/* Checks whose name starts with prefix ("gemm" matches "gemm.f32.nn", ...). */
int clmoe_check_matches(const clmoe_check *check, const char *prefix);
/* Runs a check, resetting res first and turning an op failure into a failed result. */
clmoe_status clmoe_check_run(const clmoe_check *check, clmoe_ctx *ctx, uint64_t seed,
                             clmoe_check_result *res);

/* ---- helpers for writing checks (harness.c) ----
 * A check declares `clmoe_status st = CLMOE_OK;`, zero-initialised tensors and NULL host
 * arrays, runs its calls through CK() (which jumps to `done` on failure), and at `done`
 * destroys every tensor and frees every array. */
#define CK(call)                                                                           \
  do {                                                                                     \
    if ((st = (call)) != CLMOE_OK) goto done;                                              \
  } while (0)
/* malloc that sets st and jumps to done on failure. */
#define CK_ALLOC(ptr, count)                                                               \
  do {                                                                                     \
    (ptr) = malloc((size_t)(count) * sizeof *(ptr) + 1);                                   \
    if (!(ptr)) {                                                                          \
      st = CLMOE_ERR_OUT_OF_MEMORY;                                                        \
      goto done;                                                                           \
    }                                                                                      \
  } while (0)


/* A device tensor filled with uniform values in (lo, hi] from the counter-based generator,
 * and its contents read back as doubles (*host, malloc'ed; free it). */
clmoe_status ck_uniform(clmoe_ctx *ctx, clmoe_tensor *t, clmoe_dtype dtype, int ndim,
                        const int64_t *shape, uint64_t seed, float lo, float hi, double **host);
/* Reads any f32/bf16 tensor into a malloc'ed double array. */
clmoe_status ck_read(const clmoe_tensor *t, double **host);
/* Compares n values with the error measure
 *     err_i = |got_i - ref_i| / (|ref_i| + rms(ref))
 * (relative for large entries, relative to the output's scale for small ones) and folds
 * the worst into res. A NaN or Inf in got where ref is finite counts as infinite error. */
void ck_compare(const char *what, const double *got, const double *ref, size_t n,
                clmoe_check_result *res);
/* Uniform doubles on the host (for inputs built on the host, e.g. integer ids). */
double ck_host_uniform(uint64_t seed, uint64_t index, double lo, double hi);

#endif
