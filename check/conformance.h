/* Conformance checks: every operator run on a device against a double-precision C
 * reference on random inputs, with a stated tolerance. The same checks run in the CUnit
 * suites (make check) and in clmoe-xcheck (every device, table or JSON). */
#ifndef CLMOE_CONFORMANCE_H
#define CLMOE_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>

#include "clmoe/clmoe.h"

/* One output a check passed through ck_compare, as captured for comparing devices with
 * each other (clmoe_check_run_capture): the device's values rounded to float32 (the devices
 * compute fp32 or bf16, so nothing is lost) and, per element, the denominator of the check's
 * measure (ck_compare's den_i = |ref_i| + rms(ref); a check with a measure of its own
 * records its own through ck_capture_scaled or ck_capture_den), or ref_i itself where ref_i
 * is NaN or Inf (so a reader knows where the reference is not finite). */
typedef struct clmoe_check_output {
  char name[48]; /* ck_compare's `what`, e.g. "C" or "dq" (cut to 47 characters) */
  size_t n;      /* number of values */
  float *got;    /* [n] device values, malloc'ed */
  float *den;    /* [n] denominators (see above), malloc'ed */
} clmoe_check_output;

/* The outputs of one run of one check, in the order the check compared them (a check may
 * compare several outputs, and may reuse a name). Bounded: an output that would take the
 * total past max_values is left out and counted in `dropped`. */
typedef struct clmoe_check_capture {
  clmoe_check_output *outputs; /* [count] */
  int count, capacity;
  size_t values;     /* sum of n over outputs */
  size_t max_values; /* bound on values; 0: CLMOE_CHECK_CAPTURE_MAX */
  int dropped;       /* outputs left out (over the bound, or host memory ran out) */
} clmoe_check_capture;
/* Default bound of one run's captured values: 64 Mi values, 512 MiB with the denominators
 * (the largest check of the registry compares about 1.5 million). */
#define CLMOE_CHECK_CAPTURE_MAX ((size_t)64 << 20)
/* Frees the captured outputs and empties cap (max_values is kept). */
void clmoe_check_capture_clear(clmoe_check_capture *cap);

typedef struct clmoe_check_result {
  double max_err;   /* worst error over all compared outputs (see ck_compare) */
  double tolerance; /* the check's bound on max_err */
  int passed;       /* max_err <= tolerance and no NaN/Inf where the reference is finite */
  char worst[160];  /* where the worst error was: output name, index, got, expected */
  clmoe_check_capture *capture; /* NULL, or where ck_compare records the outputs */
} clmoe_check_result;

/* Runs one check on ctx with inputs drawn from seed; fills res. A non-OK status means the
 * check could not run (the op failed); res->passed is then 0. */
typedef clmoe_status (*clmoe_check_fn)(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res);

typedef struct clmoe_check {
  const char *name;        /* "op.variant", e.g. "gemm.f32.nt" or "rmsnorm.backward" */
  const char *description; /* one line */
  clmoe_check_fn run;
} clmoe_check;

/* Every registered check (registry.c): *list, *count. CLMOE_ERR_INTERNAL, with the cause in
 * why[len] (may be NULL) and an empty list, when the families hold more checks than the
 * registry has room for or two checks share a name: the registry never drops a check. */
clmoe_status clmoe_checks_list(const clmoe_check **list, int *count, char *why, size_t len);
/* The same for callers without an error path: on failure it prints the cause on stderr and
 * aborts. */
const clmoe_check *clmoe_checks(int *count);
/* Checks whose name starts with prefix ("gemm" matches "gemm.f32.nn", ...). */
int clmoe_check_matches(const clmoe_check *check, const char *prefix);
/* Runs a check, resetting res first and turning an op failure into a failed result. */
clmoe_status clmoe_check_run(const clmoe_check *check, clmoe_ctx *ctx, uint64_t seed,
                             clmoe_check_result *res);
/* The same, recording every output the check passes through ck_compare into cap (cleared
 * first; NULL: nothing recorded). res->capture is cap afterwards. */
clmoe_status clmoe_check_run_capture(const clmoe_check *check, clmoe_ctx *ctx, uint64_t seed,
                                     clmoe_check_result *res, clmoe_check_capture *cap);

/* The checks' sizes: full (the default) or smallest (clmoe-xcheck --small), for a simulator
 * such as Oclgrind that runs kernels a thousand times slower. At the smallest sizes a check
 * keeps its cases and code paths - ragged and packed shapes, several chunks and splits, a
 * partial last work-group - and only shortens what is long: sequences, rows, key counts. */
void clmoe_check_set_small(int small);
int clmoe_check_small(void);
/* n, or small at the smallest sizes */
#define CK_SIZE(n, small) (clmoe_check_small() ? (small) : (n))
/* Sequence length at the smallest sizes: three KDA chunks of 16, the last partial. */
#define CK_SMALL_T 40

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
 * the worst into res. A NaN or Inf in got where ref is finite counts as infinite error.
 * With res->capture set it also records got and the denominators (clmoe_check_output). */
void ck_compare(const char *what, const double *got, const double *ref, size_t n,
                clmoe_check_result *res);
/* For checks with a measure of their own, err_i = |got_i - ref_i| / scale (one scale for the
 * whole output, e.g. its largest |ref|): with res->capture set, records got with that
 * denominator, so that devices can be compared by the check's measure; folds nothing into
 * res. */
void ck_capture_scaled(const char *what, const double *got, const double *ref, size_t n, double scale,
                       clmoe_check_result *res);
/* The same with a denominator per element (den[n], positive), for err_i = |got_i - ref_i| / den_i. */
void ck_capture_den(const char *what, const double *got, const double *ref, const double *den, size_t n,
                    clmoe_check_result *res);
/* Uniform doubles on the host (for inputs built on the host, e.g. integer ids). */
double ck_host_uniform(uint64_t seed, uint64_t index, double lo, double hi);

#endif
