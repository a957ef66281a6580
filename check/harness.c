/* Helpers shared by the conformance checks. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

static int check_small;

void clmoe_check_set_small(int small) { check_small = small != 0; }

int clmoe_check_small(void) { return check_small; }

int clmoe_check_matches(const clmoe_check *check, const char *prefix)
{
  if (!prefix || !*prefix || !strcmp(prefix, "all")) return 1;
  size_t n = strlen(prefix);
  return !strncmp(check->name, prefix, n) && (check->name[n] == '\0' || check->name[n] == '.');
}

void clmoe_check_capture_clear(clmoe_check_capture *cap)
{
  if (!cap) return;
  for (int i = 0; i < cap->count; i++) {
    free(cap->outputs[i].got);
    free(cap->outputs[i].den);
  }
  free(cap->outputs);
  size_t max_values = cap->max_values;
  memset(cap, 0, sizeof *cap);
  cap->max_values = max_values;
}

/* Appends one output to cap: got as float32 and the denominators of the check's measure,
 * den_i (when den is given), else (add_ref ? |ref_i| : 0) + scale; ref_i itself where it is
 * NaN or Inf. Over the bound or out of memory: counted as dropped. */
static void capture_output(clmoe_check_capture *cap, const char *what, const double *got,
                           const double *ref, const double *den_given, size_t n, double scale,
                           int add_ref)
{
  const size_t bound = cap->max_values ? cap->max_values : CLMOE_CHECK_CAPTURE_MAX;
  if (n > bound - cap->values) {
    cap->dropped++;
    return;
  }
  if (cap->count == cap->capacity) {
    int grown = cap->capacity ? 2 * cap->capacity : 8;
    clmoe_check_output *o = realloc(cap->outputs, (size_t)grown * sizeof *o);
    if (!o) {
      cap->dropped++;
      return;
    }
    cap->outputs = o;
    cap->capacity = grown;
  }
  clmoe_check_output *o = &cap->outputs[cap->count];
  memset(o, 0, sizeof *o);
  snprintf(o->name, sizeof o->name, "%s", what);
  o->n = n;
  o->got = malloc(n * sizeof *o->got + 1);
  o->den = malloc(n * sizeof *o->den + 1);
  if (!o->got || !o->den) {
    free(o->got);
    free(o->den);
    cap->dropped++;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    o->got[i] = (float)got[i];
    if (!isfinite(ref[i])) {
      o->den[i] = (float)ref[i]; /* NaN or Inf: where the reference is not finite */
    } else {
      /* a finite denominator past float's range stays finite: the largest float */
      const double den = den_given ? den_given[i] : (add_ref ? fabs(ref[i]) : 0.0) + scale;
      o->den[i] = den < FLT_MAX ? (float)den : FLT_MAX;
    }
  }
  cap->count++;
  cap->values += n;
}

void ck_capture_scaled(const char *what, const double *got, const double *ref, size_t n, double scale,
                       clmoe_check_result *res)
{
  if (res->capture) capture_output(res->capture, what, got, ref, NULL, n, scale > 0.0 ? scale : 1e-30, 0);
}

void ck_capture_den(const char *what, const double *got, const double *ref, const double *den, size_t n,
                    clmoe_check_result *res)
{
  if (res->capture) capture_output(res->capture, what, got, ref, den, n, 0.0, 0);
}

clmoe_status clmoe_check_run(const clmoe_check *check, clmoe_ctx *ctx, uint64_t seed,
                             clmoe_check_result *res)
{
  return clmoe_check_run_capture(check, ctx, seed, res, NULL);
}

clmoe_status clmoe_check_run_capture(const clmoe_check *check, clmoe_ctx *ctx, uint64_t seed,
                                     clmoe_check_result *res, clmoe_check_capture *cap)
{
  memset(res, 0, sizeof *res);
  clmoe_check_capture_clear(cap);
  res->capture = cap;
  res->passed = 1;
  /* The checks of the portable kernels (the reference, with their fp32-class tolerances)
   * run with the fast path off, whatever the device; the tile families (tile., kda_tile.,
   * mla_tile.) choose their paths themselves. */
  const int tiles = !strncmp(check->name, "tile.", 5) || !strncmp(check->name, "kda_tile.", 9) ||
                    !strncmp(check->name, "mla_tile.", 9);
  const int setting = clmoe_ctx_fastpath_setting(ctx);
  if (!tiles) clmoe_ctx_set_fastpath(ctx, 0);
  clmoe_status st = check->run(ctx, seed, res);
  clmoe_ctx_set_fastpath(ctx, setting);
  if (st != CLMOE_OK) {
    res->passed = 0;
    snprintf(res->worst, sizeof res->worst, "did not run: %s", clmoe_strerror(st));
  } else if (!(res->max_err <= res->tolerance)) {
    res->passed = 0;
  }
  return st;
}

clmoe_status ck_read(const clmoe_tensor *t, double **host)
{
  size_t n = (size_t)clmoe_tensor_numel(t);
  float *tmp = malloc(n * sizeof *tmp + 1);
  double *out = malloc(n * sizeof *out + 1);
  clmoe_status st = tmp && out ? clmoe_tensor_read_f32(t, tmp) : CLMOE_ERR_OUT_OF_MEMORY;
  if (st == CLMOE_OK)
    for (size_t i = 0; i < n; i++) out[i] = tmp[i];
  free(tmp);
  if (st != CLMOE_OK) {
    free(out);
    out = NULL;
  }
  *host = out;
  return st;
}

clmoe_status ck_uniform(clmoe_ctx *ctx, clmoe_tensor *t, clmoe_dtype dtype, int ndim,
                        const int64_t *shape, uint64_t seed, float lo, float hi, double **host)
{
  if (host) *host = NULL;
  clmoe_status st = clmoe_tensor_create(ctx, t, dtype, ndim, shape);
  if (st == CLMOE_OK) st = clmoe_tensor_fill_uniform(t, seed, lo, hi);
  if (st == CLMOE_OK && host) st = ck_read(t, host);
  if (st != CLMOE_OK) clmoe_tensor_destroy(t);
  return st;
}

void ck_compare(const char *what, const double *got, const double *ref, size_t n,
                clmoe_check_result *res)
{
  double ss = 0.0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(ref[i])) ss += ref[i] * ref[i];
  double rms = n ? sqrt(ss / (double)n) : 0.0;
  if (rms == 0.0) rms = 1e-30;
  for (size_t i = 0; i < n; i++) {
    double err;
    if (!isfinite(ref[i])) err = (got[i] == ref[i]) ? 0.0 : INFINITY; /* same Inf, or NaN vs NaN */
    else if (!isfinite(got[i])) err = INFINITY;
    else err = fabs(got[i] - ref[i]) / (fabs(ref[i]) + rms);
    if (isnan(ref[i]) && isnan(got[i])) err = 0.0;
    if (err > res->max_err || (i == 0 && res->worst[0] == '\0')) {
      if (err > res->max_err) res->max_err = err;
      snprintf(res->worst, sizeof res->worst, "%s[%zu]: got %.9g, expected %.9g", what, i, got[i],
               ref[i]);
    }
  }
  if (res->capture) capture_output(res->capture, what, got, ref, NULL, n, rms, 1);
}

double ck_host_uniform(uint64_t seed, uint64_t index, double lo, double hi)
{
  return clmoe_random_uniform(seed, index, (float)lo, (float)hi);
}
