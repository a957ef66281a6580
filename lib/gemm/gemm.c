/* GEMM through CLBlast, with our own tiled, naive and tile (matrix-unit) kernels beside it. */
#include "runtime/internal.h"

#include <clblast_c.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "clmoe/tile.h"
#include "gemm_tile.h"

/* CLBlast keeps compiled programs in a process-wide cache keyed by context and device; we
 * keep one cl_context per clmoe context, so its kernels are compiled once and reused. The
 * cache holds references to our contexts, so it is cleared when the last clmoe context
 * that used CLBlast goes away (keeping leak checkers quiet). */
static atomic_int clblast_users;

typedef clmoe__gemm_shape gemm_shape; /* lib/gemm/gemm_tile.h */

const char *clmoe_gemm_backend_name(clmoe_gemm_backend backend)
{
  switch (backend) {
  case CLMOE_GEMM_AUTO: return "auto";
  case CLMOE_GEMM_CLBLAST: return "clblast";
  case CLMOE_GEMM_TILED: return "tiled";
  case CLMOE_GEMM_NAIVE: return "naive";
  case CLMOE_GEMM_TILE: return "tile";
  }
  return "?";
}

void clmoe_ctx_set_gemm_backend(clmoe_ctx *ctx, clmoe_gemm_backend backend)
{
  ctx->gemm_backend = backend;
}

void clmoe__gemm_destroy(clmoe_ctx *ctx)
{
  if (ctx->clblast_state) {
    ctx->clblast_state = NULL;
    if (atomic_fetch_sub(&clblast_users, 1) == 1) CLBlastClearCache();
  }
}

static clmoe_status shape_error(const char *why, const clmoe_tensor *A, const clmoe_tensor *B,
                                const clmoe_tensor *C)
{
  char a[96], b[96], c[96];
  return clmoe__error(CLMOE_ERR_SHAPE, "gemm: %s (A %s, B %s, C %s)", why,
                      clmoe_tensor_describe(A, a, sizeof a), clmoe_tensor_describe(B, b, sizeof b),
                      clmoe_tensor_describe(C, c, sizeof c));
}

/* Reads the dimensions of a 2-D or 3-D operand: rows, cols, row stride, batch, batch stride. */
static int matrix_dims(const clmoe_tensor *t, int rank, int64_t *batch, int64_t *rows,
                       int64_t *cols, int64_t *ld, int64_t *bstride)
{
  if (t->ndim != rank || (t->dtype != CLMOE_F32 && t->dtype != CLMOE_BF16)) return 0;
  int r = rank - 2;
  *rows = t->shape[r];
  *cols = t->shape[r + 1];
  if (t->stride[r + 1] != 1 && *cols > 1) return 0;
  *ld = *rows > 1 ? t->stride[r] : (*cols > 0 ? *cols : 1);
  if (*ld < *cols) return 0;
  *batch = rank == 3 ? t->shape[0] : 1;
  *bstride = rank == 3 && t->shape[0] > 1 ? t->stride[0] : 0;
  return 1;
}

static clmoe_status gemm_shape_of(clmoe_trans ta, clmoe_trans tb, const clmoe_tensor *A,
                                  const clmoe_tensor *B, const clmoe_tensor *C, gemm_shape *s)
{
  int rank = C->ndim;
  if (rank != 2 && rank != 3) return shape_error("C must be 2-D or 3-D", A, B, C);
  int64_t ab, ar, ac, bb, br, bc, cb, cr, cc;
  if (!matrix_dims(A, rank, &ab, &ar, &ac, &s->lda, &s->astride) ||
      !matrix_dims(B, rank, &bb, &br, &bc, &s->ldb, &s->bstride) ||
      !matrix_dims(C, rank, &cb, &cr, &cc, &s->ldc, &s->cstride))
    return shape_error("operands must be f32/bf16 matrices of C's rank with contiguous rows", A, B, C);
  s->m = ta ? ac : ar;
  s->k = ta ? ar : ac;
  int64_t kb = tb ? bc : br;
  s->n = tb ? br : bc;
  if (s->k != kb || s->m != cr || s->n != cc) return shape_error("inner or outer sizes differ", A, B, C);
  if ((ab != cb && ab != 1) || (bb != cb && bb != 1))
    return shape_error("batch sizes differ (A and B may have batch 1)", A, B, C);
  s->batch = cb;
  if (s->m > INT32_MAX || s->n > INT32_MAX || s->k > INT32_MAX || s->lda > INT32_MAX ||
      s->ldb > INT32_MAX || s->ldc > INT32_MAX)
    return shape_error("a dimension exceeds 2^31 - 1", A, B, C);
  return CLMOE_OK;
}

static clmoe_status gemm_own(clmoe_ctx *ctx, int tiled, clmoe_trans ta, clmoe_trans tb, float alpha,
                             const clmoe_tensor *A, const clmoe_tensor *B, float beta,
                             clmoe_tensor *C, const gemm_shape *s)
{
  char opts[96];
  snprintf(opts, sizeof opts, "-DA_BF16=%d -DB_BF16=%d -DC_BF16=%d", A->dtype == CLMOE_BF16,
           B->dtype == CLMOE_BF16, C->dtype == CLMOE_BF16);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "gemm", opts, tiled ? "gemm_tiled" : "gemm_naive", &k));
  cl_int m = (cl_int)s->m, n = (cl_int)s->n, kk = (cl_int)s->k;
  cl_int lda = (cl_int)s->lda, ldb = (cl_int)s->ldb, ldc = (cl_int)s->ldc;
  cl_int ita = ta, itb = tb;
  cl_ulong aoff = (cl_ulong)A->offset, boff = (cl_ulong)B->offset, coff = (cl_ulong)C->offset;
  cl_ulong as = (cl_ulong)s->astride, bs = (cl_ulong)s->bstride, cs = (cl_ulong)s->cstride;
  CLMOE_TRY(clmoe__args(k, 19, KA(m), KA(n), KA(kk), KA(alpha), KA(beta), KA(A->buf), KA(aoff),
                        KA(lda), KA(as), KA(ita), KA(B->buf), KA(boff), KA(ldb), KA(bs), KA(itb),
                        KA(C->buf), KA(coff), KA(ldc), KA(cs)));
  if (tiled) {
    size_t global[3] = {(size_t)n, (size_t)m, (size_t)s->batch};
    size_t local[3] = {16, 16, 1};
    global[0] = clmoe__round_up(global[0], 64) / 4;
    global[1] = clmoe__round_up(global[1], 64) / 4;
    return clmoe__launch(ctx, k, 3, global, local);
  }
  size_t global[3] = {(size_t)n, (size_t)m, (size_t)s->batch};
  size_t local[3] = {16, 16, 1};
  if (ctx->caps.max_work_group_size < 256) local[0] = local[1] = 8;
  return clmoe__launch(ctx, k, 3, global, local);
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

/* fp32 operands only: CLBlast's strided-batched SGEMM (plain SGEMM when batch is 1). */
static clmoe_status gemm_clblast(clmoe_ctx *ctx, clmoe_trans ta, clmoe_trans tb, float alpha,
                                 const clmoe_tensor *A, const clmoe_tensor *B, float beta,
                                 clmoe_tensor *C, const gemm_shape *s)
{
  if (!ctx->clblast_state) {
    ctx->clblast_state = ctx; /* marks this context as a CLBlast user */
    atomic_fetch_add(&clblast_users, 1);
    CLMOE_TRY(clmoe__clblast_tuning(ctx)); /* CLMOE_CLBLAST_TUNING, before the first call */
  }
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

static clmoe_status gemm_clblast_any(clmoe_ctx *ctx, clmoe_trans ta, clmoe_trans tb, float alpha,
                                     const clmoe_tensor *A, const clmoe_tensor *B, float beta,
                                     clmoe_tensor *C, const gemm_shape *s)
{
  if (A->dtype == CLMOE_F32 && B->dtype == CLMOE_F32 && C->dtype == CLMOE_F32)
    return gemm_clblast(ctx, ta, tb, alpha, A, B, beta, C, s);
  clmoe_tensor a32, b32, c32;
  int made_a = 0, made_b = 0, made_c = 0;
  clmoe_status st;
  gemm_shape s32 = *s;
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
  CLMOE_TRY_GOTO(st, gemm_clblast(ctx, ta, tb, alpha, &a32, &b32, beta, &c32, &s32), done);
  if (made_c) st = clmoe_tensor_copy(C, &c32);
done:
  if (made_a) clmoe_tensor_destroy(&a32);
  if (made_b) clmoe_tensor_destroy(&b32);
  if (made_c) clmoe_tensor_destroy(&c32);
  return st;
}

clmoe_status clmoe_gemm_ex(clmoe_ctx *ctx, clmoe_gemm_backend backend, clmoe_trans ta,
                           clmoe_trans tb, float alpha, const clmoe_tensor *A,
                           const clmoe_tensor *B, float beta, clmoe_tensor *C)
{
  gemm_shape s;
  CLMOE_TRY(gemm_shape_of(ta, tb, A, B, C, &s));
  if (s.m == 0 || s.n == 0 || s.batch == 0) return CLMOE_OK;
  if (backend == CLMOE_GEMM_AUTO)
    backend = clmoe__gemm_tile_accepts(A, B, C) && clmoe_ctx_fastpath(ctx) ? CLMOE_GEMM_TILE
                                                                          : CLMOE_GEMM_CLBLAST;
  /* CLBlast rejects k == 0; C = beta C is then the whole product. */
  if (backend == CLMOE_GEMM_CLBLAST && s.k == 0) backend = CLMOE_GEMM_NAIVE;
  switch (backend) {
  case CLMOE_GEMM_CLBLAST: return gemm_clblast_any(ctx, ta, tb, alpha, A, B, beta, C, &s);
  case CLMOE_GEMM_TILED: return gemm_own(ctx, 1, ta, tb, alpha, A, B, beta, C, &s);
  case CLMOE_GEMM_NAIVE: return gemm_own(ctx, 0, ta, tb, alpha, A, B, beta, C, &s);
  case CLMOE_GEMM_TILE: return clmoe__gemm_tile(ctx, ta, tb, alpha, A, B, beta, C, &s);
  default: return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "unknown GEMM backend %d", (int)backend);
  }
}

clmoe_status clmoe_gemm(clmoe_ctx *ctx, clmoe_trans ta, clmoe_trans tb, float alpha,
                        const clmoe_tensor *A, const clmoe_tensor *B, float beta, clmoe_tensor *C)
{
  if (C->ndim != 2) return shape_error("clmoe_gemm takes 2-D tensors", A, B, C);
  return clmoe_gemm_ex(ctx, ctx->gemm_backend, ta, tb, alpha, A, B, beta, C);
}

clmoe_status clmoe_gemm_batched(clmoe_ctx *ctx, clmoe_trans ta, clmoe_trans tb, float alpha,
                                const clmoe_tensor *A, const clmoe_tensor *B, float beta,
                                clmoe_tensor *C)
{
  if (C->ndim != 3) return shape_error("clmoe_gemm_batched takes 3-D tensors", A, B, C);
  return clmoe_gemm_ex(ctx, ctx->gemm_backend, ta, tb, alpha, A, B, beta, C);
}
