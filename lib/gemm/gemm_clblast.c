/* The CLBlast backend of clmoe_gemm: fp32 SGEMM through CLBlast (bf16 operands converted to
 * fp32 copies first), and CLBlast's parameters tuned for a device, loaded at run time.
 *
 * CLBlast keeps compiled programs in a process-wide cache keyed by context and device; we
 * keep one cl_context per clmoe context, so its kernels are compiled once and reused. The
 * cache holds references to our contexts, so it is cleared when the last clmoe context
 * that used CLBlast goes away (keeping leak checkers quiet).
 *
 * CLBlast ships a database of kernel parameters per device; for a device it does not know
 * (the H200 in CLBlast 1.5) it falls back to defaults. Its tuners (clblast_tuner_xgemm,
 * clblast_tuner_xgemm_direct, Debian package clblast-utils) write the best parameters they
 * find to JSON files. CLMOE_CLBLAST_TUNING names such files (separated by ':'); before a
 * context's first CLBlast call, every file whose device name matches the context's device
 * and whose precision is single is applied with CLBlastOverrideParameters. Files for other
 * devices are skipped, so one list can serve a mixed cluster. Applied parameters are checked
 * by one product against the host before any result is used. */
#include <clblast_c.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/gemm.h"
#include "gemm/gemm_internal.h"
#include "runtime/internal.h"

/* ---- CLBlast's SGEMM ---------------------------------------------------------------------- */

/* Contexts that called CLBlast and are not destroyed yet. */
static atomic_int clblast_users;

/* The context's hook on destruction (ctx->gemm_release): the last context of the process
 * that used CLBlast clears CLBlast's program cache. */
static void clblast_release(clmoe_ctx *ctx)
{
  ctx->gemm_release = NULL;
  if (atomic_fetch_sub(&clblast_users, 1) == 1) CLBlastClearCache();
}

static clmoe_status clblast_error(CLBlastStatusCode code)
{
  if (code > -1000)
    return clmoe__cl_error(code, "CLBlastSgemm", __FILE__, __LINE__);
  return clmoe__error(CLMOE_ERR_CLBLAST, "CLBlast SGEMM failed with CLBlast status %d%s", (int)code,
                      code == CLBlastInvalidLocalMemUsage ? " (not enough local memory)"
                      : code == CLBlastNotImplemented     ? " (not implemented)"
                                                          : "");
}

/* fp32 operands only: CLBlast's strided-batched SGEMM (plain SGEMM when batch is 1), timed
 * while profiling. */
static clmoe_status clblast_sgemm(clmoe_ctx *ctx, int ta, int tb, float alpha,
                                  const clmoe_tensor *A, const clmoe_tensor *B, float beta,
                                  clmoe_tensor *C, const clmoe__gemm_shape *s)
{
  CLBlastTranspose cta = ta ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose ctb = tb ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastStatusCode code;
  /* profiling: a marker before the call and CLBlast's event (its last kernel) after it */
  cl_event start = NULL, ev = NULL, *evp = NULL;
  if (ctx->prof_active && ctx->profiling) {
    CLMOE_CL(clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &start));
    evp = &ev;
  }
  if (s->batch == 1)
    code = CLBlastSgemm(CLBlastLayoutRowMajor, cta, ctb, (size_t)s->m, (size_t)s->n, (size_t)s->k,
                        alpha, A->buf, (size_t)A->offset, (size_t)s->lda, B->buf,
                        (size_t)B->offset, (size_t)s->ldb, beta, C->buf, (size_t)C->offset,
                        (size_t)s->ldc, &ctx->queue, evp);
  else
    code = CLBlastSgemmStridedBatched(
        CLBlastLayoutRowMajor, cta, ctb, (size_t)s->m, (size_t)s->n, (size_t)s->k, alpha, A->buf,
        (size_t)A->offset, (size_t)s->lda, (size_t)s->astride, B->buf, (size_t)B->offset,
        (size_t)s->ldb, (size_t)s->bstride, beta, C->buf, (size_t)C->offset, (size_t)s->ldc,
        (size_t)s->cstride, (size_t)s->batch, &ctx->queue, evp);
  if (code != CLBlastSuccess) {
    if (start) clReleaseEvent(start);
    if (ev) clReleaseEvent(ev);
    return clblast_error(code);
  }
  return evp ? clmoe__profile_record(ctx, ev, start, "clblast_sgemm") : CLMOE_OK;
}

/* ---- tuned parameters (CLMOE_CLBLAST_TUNING) ------------------------------------------------ */

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
    const clmoe__gemm_shape sizes = {
        .batch = 1, .m = S, .n = S, .k = S, .lda = S, .ldb = S, .ldc = S};
    st = clblast_sgemm(ctx, 0, 0, 1.0f, &A, &B, 0.0f, &C, &sizes);
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

/* Applies the tuner files named by CLMOE_CLBLAST_TUNING that match ctx's device, and checks
 * the result when any was applied. */
static clmoe_status clblast_tuning(clmoe_ctx *ctx)
{
  const char *list = clmoe__knob_text(ctx, CLMOE_K_CLBLAST_TUNING);
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

/* ---- the backend -------------------------------------------------------------------------- */

/* fp32 operands: on a context's first call, registers it as a CLBlast user and applies the
 * tuned parameters; then the SGEMM. */
static clmoe_status gemm_f32(clmoe_ctx *ctx, int ta, int tb, float alpha, const clmoe_tensor *A,
                             const clmoe_tensor *B, float beta, clmoe_tensor *C,
                             const clmoe__gemm_shape *s)
{
  if (!ctx->gemm_release) {
    ctx->gemm_release = clblast_release; /* marks this context as a CLBlast user */
    atomic_fetch_add(&clblast_users, 1);
    CLMOE_TRY(clblast_tuning(ctx)); /* CLMOE_CLBLAST_TUNING, before the first call */
  }
  return clblast_sgemm(ctx, ta, tb, alpha, A, B, beta, C, s);
}

/* A contiguous fp32 copy of a bf16 operand (the CLBlast path only takes fp32). */
static clmoe_status as_f32(clmoe_ctx *ctx, const clmoe_tensor *t, clmoe_tensor *tmp, int *made)
{
  *made = 0;
  if (t->dtype == CLMOE_F32) {
    *tmp = *t;
    return CLMOE_OK;
  }
  if (!clmoe_tensor_is_contiguous(t))
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "gemm: bf16 operands of the CLBlast path must be contiguous");
  CLMOE_TRY(clmoe_tensor_create(ctx, tmp, CLMOE_F32, t->ndim, t->shape));
  *made = 1;
  return clmoe_tensor_copy(tmp, t);
}

clmoe_status clmoe__gemm_clblast(clmoe_ctx *ctx, int ta, int tb, float alpha, const clmoe_tensor *A,
                                 const clmoe_tensor *B, float beta, clmoe_tensor *C,
                                 const clmoe__gemm_shape *s)
{
  if (A->dtype == CLMOE_F32 && B->dtype == CLMOE_F32 && C->dtype == CLMOE_F32)
    return gemm_f32(ctx, ta, tb, alpha, A, B, beta, C, s);
  clmoe_tensor a32, b32, c32;
  int made_a = 0, made_b = 0, made_c = 0;
  clmoe_status st;
  clmoe__gemm_shape s32 = *s;
  CLMOE_TRY_GOTO(st, as_f32(ctx, A, &a32, &made_a), done);
  CLMOE_TRY_GOTO(st, as_f32(ctx, B, &b32, &made_b), done);
  if (C->dtype == CLMOE_BF16) {
    if (!clmoe_tensor_is_contiguous(C)) {
      st = clmoe__error(CLMOE_ERR_UNSUPPORTED, "gemm: a bf16 C of the CLBlast path must be contiguous");
      goto done;
    }
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &c32, CLMOE_F32, C->ndim, C->shape), done);
    made_c = 1;
    if (beta != 0.0f) CLMOE_TRY_GOTO(st, clmoe_tensor_copy(&c32, C), done);
  } else {
    c32 = *C;
  }
  /* Copies are contiguous: their leading dimensions are the column counts. */
  if (made_a) s32.lda = a32.shape[a32.ndim - 1], s32.astride = s->astride ? s32.lda * a32.shape[a32.ndim - 2] : 0;
  if (made_b) s32.ldb = b32.shape[b32.ndim - 1], s32.bstride = s->bstride ? s32.ldb * b32.shape[b32.ndim - 2] : 0;
  if (made_c) s32.ldc = c32.shape[c32.ndim - 1], s32.cstride = s->cstride ? s32.ldc * c32.shape[c32.ndim - 2] : 0;
  CLMOE_TRY_GOTO(st, gemm_f32(ctx, ta, tb, alpha, &a32, &b32, beta, &c32, &s32), done);
  if (made_c) st = clmoe_tensor_copy(C, &c32);
done:
  if (made_a) clmoe_tensor_destroy(&a32);
  if (made_b) clmoe_tensor_destroy(&b32);
  if (made_c) clmoe_tensor_destroy(&c32);
  return st;
}
