/* CLBlast parameters tuned for a device, loaded at run time.
 *
 * CLBlast ships a database of kernel parameters per device; for a device it does not know
 * (the H200 in CLBlast 1.5) it falls back to defaults. Its tuners (clblast_tuner_xgemm,
 * clblast_tuner_xgemm_direct, Debian package clblast-utils) write the best parameters they
 * find to JSON files. CLMOE_CLBLAST_TUNING names such files (separated by ':'); before a
 * context's first CLBlast call, every file whose device name matches the context's device
 * and whose precision is single is applied with CLBlastOverrideParameters. Files for other
 * devices are skipped, so one list can serve a mixed cluster. Applied parameters are checked
 * by one product against the host before any result is used. */
#include "runtime/internal.h"

#include <clblast_c.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PARAMS = 32 };

/* The string value of a top-level "key": "value" pair of the tuner's flat JSON. */
static int json_field(const char *text, const char *key, char *out, size_t len)
{
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\"", key);
  const char *p = strstr(text, pattern);
  if (!p) return 0;
  p += strlen(pattern);
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  if (*p++ != ':') return 0;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  if (*p++ != '"') return 0;
  const char *end = strchr(p, '"');
  if (!end || (size_t)(end - p) >= len) return 0;
  memcpy(out, p, (size_t)(end - p));
  out[end - p] = 0;
  return 1;
}

static clmoe_status read_text(const char *path, char **text)
{
  FILE *f = fopen(path, "rb");
  if (!f) return clmoe__error(CLMOE_ERR_IO, "CLMOE_CLBLAST_TUNING: %s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    len += fread(buf + len, 1, cap - len, f);
    if (len < cap) break;
    char *grown = realloc(buf, 2 * cap + 1);
    if (!grown) free(buf);
    buf = grown, cap *= 2;
  }
  const int err = ferror(f);
  fclose(f);
  if (!buf) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "CLMOE_CLBLAST_TUNING: %s: out of host memory", path);
  if (err) {
    free(buf);
    return clmoe__error(CLMOE_ERR_IO, "CLMOE_CLBLAST_TUNING: %s: read error", path);
  }
  buf[len] = 0;
  *text = buf;
  return CLMOE_OK;
}

/* Applies one tuner file; *applied is set when it matched the device. */
static clmoe_status apply_file(clmoe_ctx *ctx, const char *path, int *applied)
{
  *applied = 0;
  char *text = NULL;
  CLMOE_TRY(read_text(path, &text));
  char kernel[64], precision[16], device[256], params[1024];
  const int ok = json_field(text, "best_kernel", kernel, sizeof kernel) &&
                 json_field(text, "precision", precision, sizeof precision) &&
                 json_field(text, "best_parameters", params, sizeof params) &&
                 (json_field(text, "device", device, sizeof device) || /* the OpenCL name */
                  json_field(text, "clblast_device_name", device, sizeof device));
  free(text);
  if (!ok)
    return clmoe__error(CLMOE_ERR_FORMAT,
                        "CLMOE_CLBLAST_TUNING: %s: not a CLBlast tuner result (needs best_kernel, precision, "
                        "best_parameters and the device name)", path);
  if (strcmp(device, ctx->caps.device_name) || strcmp(precision, "32")) return CLMOE_OK;
  /* the direct tuner names the variant it timed (XgemmDirectTN, ...); the parameters belong
   * to the kernel family's database entry */
  if (!strncmp(kernel, "XgemmDirect", 11)) kernel[11] = 0;
  const char *names[MAX_PARAMS];
  size_t values[MAX_PARAMS], n = 0;
  for (char *save = NULL, *tok = strtok_r(params, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(tok, '='), *end = NULL;
    if (!eq) return clmoe__error(CLMOE_ERR_FORMAT, "CLMOE_CLBLAST_TUNING: %s: best_parameters: '%s' is not NAME=VALUE", path, tok);
    *eq = 0;
    if (!strcmp(tok, "PRECISION")) continue; /* a tuner setting, not a kernel parameter */
    errno = 0;
    const unsigned long long v = strtoull(eq + 1, &end, 10);
    if (errno || end == eq + 1 || *end || n == MAX_PARAMS)
      return clmoe__error(CLMOE_ERR_FORMAT, "CLMOE_CLBLAST_TUNING: %s: best_parameters: bad value for %s", path, tok);
    names[n] = tok, values[n++] = (size_t)v;
  }
  const CLBlastStatusCode code =
      CLBlastOverrideParameters(ctx->device, kernel, CLBlastPrecisionSingle, n, names, values);
  if (code != CLBlastSuccess)
    return clmoe__error(CLMOE_ERR_CLBLAST, "CLMOE_CLBLAST_TUNING: %s: CLBlast refused the parameters of %s (status %d)",
                        path, kernel, (int)code);
  *applied = 1;
  return CLMOE_OK;
}

/* CLBlast does not check overridden parameters against the device: a file tuned on another
 * device of the same name, or edited by hand, can make its GEMM return garbage silently. So
 * once parameters are applied, one 1024^3 product through CLBlast (large enough for the
 * tuned indirect Xgemm kernel) is checked on 256 sampled entries against double sums on
 * the host. */
static clmoe_status self_check(clmoe_ctx *ctx)
{
  enum { S = 1024, SAMPLES = 256 };
  float *a = malloc((size_t)S * S * sizeof *a), *b = malloc((size_t)S * S * sizeof *b),
        *c = malloc((size_t)S * S * sizeof *c);
  clmoe_tensor A = {0}, B = {0}, C = {0};
  clmoe_status st = a && b && c ? CLMOE_OK : clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "CLMOE_CLBLAST_TUNING: out of host memory");
  uint64_t r = 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; st == CLMOE_OK && i < (size_t)S * S; i++) {
    r = r * 6364136223846793005ULL + 1442695040888963407ULL;
    a[i] = (float)((double)(r >> 40) / (double)(1 << 24) - 0.5);
    r = r * 6364136223846793005ULL + 1442695040888963407ULL;
    b[i] = (float)((double)(r >> 40) / (double)(1 << 24) - 0.5);
  }
  const int64_t shape[2] = {S, S};
  if (st == CLMOE_OK) st = clmoe_tensor_create(ctx, &A, CLMOE_F32, 2, shape);
  if (st == CLMOE_OK) st = clmoe_tensor_create(ctx, &B, CLMOE_F32, 2, shape);
  if (st == CLMOE_OK) st = clmoe_tensor_create(ctx, &C, CLMOE_F32, 2, shape);
  if (st == CLMOE_OK) st = clmoe_tensor_write(&A, a, (size_t)S * S * sizeof *a);
  if (st == CLMOE_OK) st = clmoe_tensor_write(&B, b, (size_t)S * S * sizeof *b);
  if (st == CLMOE_OK) {
    st = clmoe_gemm_ex(ctx, CLMOE_GEMM_CLBLAST, CLMOE_NOTRANS, CLMOE_NOTRANS, 1.0f, &A, &B, 0.0f, &C);
    /* a launch the device refuses (NVIDIA: too large a work-group) rather than garbage */
    if (st != CLMOE_OK)
      clmoe__append_error(" (CLMOE_CLBLAST_TUNING: CLBlast fails with the tuned parameters on %s: remove that "
                          "device's file from the list)", ctx->caps.device_name);
  }
  if (st == CLMOE_OK) st = clmoe_tensor_read(&C, c, (size_t)S * S * sizeof *c);
  for (int s = 0; st == CLMOE_OK && s < SAMPLES; s++) {
    const size_t i = (size_t)(s * 389 % S), j = (size_t)(s * 719 % S);
    double ref = 0.0;
    for (size_t p = 0; p < S; p++) ref += (double)a[i * S + p] * (double)b[p * S + j];
    const double got = c[i * S + j];
    if (!(fabs(got - ref) <= 1e-3 * (fabs(ref) + 1.0)))
      st = clmoe__error(CLMOE_ERR_CLBLAST,
                        "CLMOE_CLBLAST_TUNING: CLBlast with the tuned parameters computes wrong products on %s "
                        "(C[%zu][%zu] = %g, expected %g): remove that device's file from the list",
                        ctx->caps.device_name, i, j, got, ref);
  }
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&C);
  free(a), free(b), free(c);
  return st;
}

clmoe_status clmoe__clblast_tuning(clmoe_ctx *ctx)
{
  const char *list = getenv("CLMOE_CLBLAST_TUNING");
  if (!list || !*list) return CLMOE_OK;
  char *copy = strdup(list);
  if (!copy) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "CLMOE_CLBLAST_TUNING: out of host memory");
  clmoe_status st = CLMOE_OK;
  for (char *save = NULL, *path = strtok_r(copy, ":", &save); path && st == CLMOE_OK;
       path = strtok_r(NULL, ":", &save)) {
    int applied = 0;
    st = apply_file(ctx, path, &applied);
    ctx->clblast_tuned += applied;
  }
  free(copy);
  if (st == CLMOE_OK && ctx->clblast_tuned > 0) st = self_check(ctx);
  return st;
}

int clmoe_gemm_tuned_kernels(const clmoe_ctx *ctx) { return ctx->clblast_tuned; }
