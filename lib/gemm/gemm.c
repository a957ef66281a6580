/* GEMM: the backend names and choice, the shape checks that turn tensors into a GEMM's
 * sizes (clmoe__gemm_shape), and the dispatch to the backends: CLBlast (gemm_clblast.c), our
 * tiled and naive kernels (gemm_own.c) and the tile GEMM (gemm_tile.c). */
#include <stdint.h>

#include "clmoe/gemm.h"
#include "clmoe/tile.h"
#include "gemm/gemm_internal.h"
#include "runtime/internal.h"

typedef clmoe__gemm_shape gemm_shape; /* lib/gemm/gemm_internal.h */

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
  case CLMOE_GEMM_CLBLAST: return clmoe__gemm_clblast(ctx, ta, tb, alpha, A, B, beta, C, &s);
  case CLMOE_GEMM_TILED: return clmoe__gemm_own(ctx, 1, ta, tb, alpha, A, B, beta, C, &s);
  case CLMOE_GEMM_NAIVE: return clmoe__gemm_own(ctx, 0, ta, tb, alpha, A, B, beta, C, &s);
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

/* t itself when it is bf16, else a bf16 copy of it in *scratch (contiguous t only). */
static clmoe_status as_bf16(clmoe_ctx *ctx, const clmoe_tensor *t, clmoe_tensor *scratch,
                            const clmoe_tensor **out)
{
  *out = t;
  if (t->dtype == CLMOE_BF16) return CLMOE_OK;
  CLMOE_TRY(clmoe_tensor_create(ctx, scratch, CLMOE_BF16, t->ndim, t->shape));
  *out = scratch;
  return clmoe_tensor_copy(scratch, t);
}

clmoe_status clmoe_gemm_bf16(clmoe_ctx *ctx, clmoe_trans ta, clmoe_trans tb, float alpha,
                             const clmoe_tensor *A, const clmoe_tensor *B, float beta, clmoe_tensor *C)
{
  if (!A || !B || !C) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gemm_bf16: an operand is NULL");
  if (C->ndim != 2) return shape_error("clmoe_gemm_bf16 takes 2-D tensors", A, B, C);
  gemm_shape s;
  CLMOE_TRY(gemm_shape_of(ta, tb, A, B, C, &s));
  /* An fp32 operand with a row stride wider than its rows (a column slice) is not rounded
   * here: that product keeps clmoe_gemm's fp32 path, exact for the bf16 operand. */
  if ((A->dtype == CLMOE_F32 && !clmoe_tensor_is_contiguous(A)) ||
      (B->dtype == CLMOE_F32 && !clmoe_tensor_is_contiguous(B)))
    return clmoe_gemm(ctx, ta, tb, alpha, A, B, beta, C);
  clmoe_tensor sa = {0}, sb = {0};
  const clmoe_tensor *a, *b;
  clmoe_status st;
  CLMOE_TRY_GOTO(st, as_bf16(ctx, A, &sa, &a), done);
  CLMOE_TRY_GOTO(st, as_bf16(ctx, B, &sb, &b), done);
  st = clmoe_gemm_ex(ctx, CLMOE_GEMM_TILE, ta, tb, alpha, a, b, beta, C);
done:
  /* The in-order queue: the scratch may go back to the pool once the product is enqueued. */
  clmoe_tensor_destroy(&sa);
  clmoe_tensor_destroy(&sb);
  return st;
}
