/* Embedding lookup and its backward (kernels_cl/ops/embedding.cl). The backward groups tokens
 * by id with the device sort and sums each row's gradient in token order: deterministic,
 * no float atomics. */
#include "clmoe/ops.h"
#include "clmoe/paths.h"
#include "runtime/internal.h"

#define EMB_CHUNK 512 /* must match kernels_cl/ops/embedding.cl */

/* Checks table [V, d] and a [.., d] tensor of N*d elements (out or dout) against ids [N]. */
static clmoe_status check_shapes(const char *op, const clmoe_tensor *table, const char *tname,
                                 const clmoe_tensor *ids, const clmoe_tensor *rows,
                                 const char *rname, int64_t *V, int64_t *d, int64_t *N)
{
  char dt[96], dr[96], di[96];
  CLMOE_TRY(clmoe__want(table, CLMOE_F32, op, tname));
  CLMOE_TRY(clmoe__want(ids, CLMOE_I32, op, "ids"));
  CLMOE_TRY(clmoe__want(rows, CLMOE_F32, op, rname));
  if (table->ndim != 2)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s %s must be [V, d]", op, tname,
                        clmoe_tensor_describe(table, dt, sizeof dt));
  *V = table->shape[0], *d = table->shape[1], *N = clmoe_tensor_numel(ids);
  if (rows->ndim < 1 || rows->shape[rows->ndim - 1] != *d || clmoe_tensor_numel(rows) != *N * *d)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s %s must be [N, d] for ids %s and %s %s", op,
                        rname, clmoe_tensor_describe(rows, dr, sizeof dr),
                        clmoe_tensor_describe(ids, di, sizeof di), tname,
                        clmoe_tensor_describe(table, dt, sizeof dt));
  /* Positions travel in 32 bits (the flag of bad ids, the low half of the sort keys). */
  if (*N >= (int64_t)UINT32_MAX)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %lld tokens is too many (at most %u)", op,
                        (long long)*N, UINT32_MAX - 1);
  if (*V > INT32_MAX)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: a vocabulary of %lld rows does not fit int32 ids",
                        op, (long long)*V);
  return CLMOE_OK;
}

/* 2-D launch geometry: dimension 0 over `cols` columns, dimension 1 over `rows`. Narrow
 * rows share a work-group so that small d does not leave most work-items idle. */
static void grid2(const clmoe_ctx *ctx, size_t cols, size_t rows, size_t global[2], size_t local[2])
{
  size_t wg = ctx->caps.wg_size, l0 = 1;
  while (l0 < cols && l0 < wg) l0 <<= 1;
  if (l0 > wg) l0 = wg;
  local[0] = l0, local[1] = wg / l0 ? wg / l0 : 1;
  global[0] = cols, global[1] = rows;
}

/* The error for the first bad position of ids (one blocking read of that id: the failure
 * path only). */
static clmoe_status bad_id_error(clmoe_ctx *ctx, const char *op, const clmoe_tensor *ids, cl_uint first_bad,
                                 int64_t V)
{
  cl_int id = 0;
  CLMOE_CL(clEnqueueReadBuffer(ctx->queue, ids->buf, CL_TRUE, ((size_t)ids->offset + first_bad) * sizeof id,
                               sizeof id, &id, 0, NULL, NULL));
  clmoe__count_wait(ctx, CLMOE_WAIT_READ);
  return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: id %d at position %u is outside the table's rows [0, %lld)",
                      op, (int)id, (unsigned)first_bad, (long long)V);
}

/* The lookup; bad NULL: the bad-id flag read back now (one small blocking read), else copied
 * into bad (i32 [1], -1: none) on the device for the caller to read with other results. */
static clmoe_status embedding(clmoe_ctx *ctx, const char *op, const clmoe_tensor *table, const clmoe_tensor *ids,
                              clmoe_tensor *out, clmoe_tensor *bad_out)
{
  int64_t V, d, N;
  CLMOE_TRY(check_shapes(op, table, "table", ids, out, "output", &V, &d, &N));
  if (bad_out) {
    CLMOE_TRY(clmoe__want(bad_out, CLMOE_I32, op, "bad"));
    if (clmoe_tensor_numel(bad_out) != 1) return clmoe__error(CLMOE_ERR_SHAPE, "%s: bad must hold one element", op);
  }
  cl_uint first_bad = UINT32_MAX;
  if (N == 0) return bad_out ? clmoe_tensor_fill(bad_out, -1.0) : CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "embedding", NULL, "embedding_forward", &k));
  /* Bad ids are found on the device: one flag word, the first bad position. */
  cl_mem bad = NULL;
  CLMOE_TRY(clmoe__scratch(ctx, sizeof first_bad, &bad));
  clmoe_status st = CLMOE_OK;
  CLMOE_CL_GOTO(st, clEnqueueFillBuffer(ctx->queue, bad, &first_bad, sizeof first_bad, 0,
                                        sizeof first_bad, 0, NULL, NULL), done);
  cl_ulong to = (cl_ulong)table->offset, io = (cl_ulong)ids->offset, oo = (cl_ulong)out->offset;
  cl_ulong uV = (cl_ulong)V, ud = (cl_ulong)d, uN = (cl_ulong)N;
  CLMOE_TRY_GOTO(st, clmoe__args(k, 10, KA(table->buf), KA(to), KA(uV), KA(ud), KA(ids->buf),
                                 KA(io), KA(uN), KA(out->buf), KA(oo), KA(bad)), done);
  size_t global[2], local[2];
  /* At least one column so that the ids are checked even when d = 0. */
  grid2(ctx, d > 0 ? (size_t)d : 1, (size_t)N, global, local);
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, k, 2, global, local), done);
  if (bad_out) { /* UINT32_MAX reads as -1 in i32 */
    CLMOE_CL_GOTO(st, clEnqueueCopyBuffer(ctx->queue, bad, bad_out->buf, 0, (size_t)bad_out->offset * 4,
                                          sizeof first_bad, 0, NULL, NULL), done);
    goto done;
  }
  CLMOE_CL_GOTO(st, clEnqueueReadBuffer(ctx->queue, bad, CL_TRUE, 0, sizeof first_bad,
                                        &first_bad, 0, NULL, NULL), done);
  clmoe__count_wait(ctx, CLMOE_WAIT_READ);
  if (first_bad != UINT32_MAX) st = bad_id_error(ctx, op, ids, first_bad, V);
done:
  clmoe__scratch_release(ctx, bad, sizeof first_bad);
  return st;
}

clmoe_status clmoe_embedding(clmoe_ctx *ctx, const clmoe_tensor *table, const clmoe_tensor *ids,
                             clmoe_tensor *out)
{
  return embedding(ctx, "clmoe_embedding", table, ids, out, NULL);
}

clmoe_status clmoe_embedding_nowait(clmoe_ctx *ctx, const clmoe_tensor *table, const clmoe_tensor *ids,
                                    clmoe_tensor *out, clmoe_tensor *bad)
{
  if (!bad) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_embedding_nowait: bad is NULL");
  return embedding(ctx, "clmoe_embedding", table, ids, out, bad);
}

clmoe_status clmoe_embedding_report(clmoe_ctx *ctx, const clmoe_tensor *table, const clmoe_tensor *ids,
                                    int32_t bad)
{
  if (bad == -1) return CLMOE_OK;
  const int64_t N = clmoe_tensor_numel(ids);
  if (bad < 0 || bad >= N || !table || table->ndim != 2)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_embedding: bad-id flag %d is not a position of ids [%lld]",
                        (int)bad, (long long)N);
  return bad_id_error(ctx, "clmoe_embedding", ids, (cl_uint)bad, table->shape[0]);
}

clmoe_status clmoe_embedding_backward(clmoe_ctx *ctx, const clmoe_tensor *ids,
                                      const clmoe_tensor *dout, clmoe_tensor *dtable)
{
  const char *op = "clmoe_embedding_backward";
  int64_t V, d, N;
  CLMOE_TRY(check_shapes(op, dtable, "dtable", ids, dout, "dout", &V, &d, &N));
  /* Ids outside [0, V) (reported by the forward) sort past row V - 1 and are skipped. */
  if (N == 0 || d == 0 || V == 0) return CLMOE_OK;
  cl_kernel kkeys, kseg, kchunk, kacc;
  CLMOE_TRY(clmoe__kernel(ctx, "embedding", NULL, "embedding_keys", &kkeys));
  CLMOE_TRY(clmoe__kernel(ctx, "embedding", NULL, "embedding_segments", &kseg));
  CLMOE_TRY(clmoe__kernel(ctx, "embedding", NULL, "embedding_chunks", &kchunk));
  CLMOE_TRY(clmoe__kernel(ctx, "embedding", NULL, "embedding_accumulate", &kacc));
  cl_ulong uV = (cl_ulong)V, ud = (cl_ulong)d, uN = (cl_ulong)N;
  cl_ulong io = (cl_ulong)ids->offset, dof = (cl_ulong)dout->offset, dto = (cl_ulong)dtable->offset;
  cl_ulong nchunks = uN / EMB_CHUNK; /* whole chunks of sorted positions */
  size_t keys_bytes = (size_t)N * sizeof(cl_ulong), seg_bytes = (size_t)(V + 1) * sizeof(cl_uint);
  size_t part_bytes = (size_t)nchunks * (size_t)d * sizeof(float);
  cl_mem keys = NULL, seg = NULL, part = NULL; /* [N] ulong, [V + 1] uint, [nchunks, d] f32 */
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, keys_bytes, &keys), done);
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, seg_bytes, &seg), done);
  if (nchunks) CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, part_bytes, &part), done);

  CLMOE_TRY_GOTO(st, clmoe__args(kkeys, 4, KA(ids->buf), KA(io), KA(uN), KA(keys)), done);
  CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, kkeys, (size_t)N), done);
  CLMOE_TRY_GOTO(st, clmoe_sort_u64(ctx, keys, 0, (size_t)N), done);
  CLMOE_TRY_GOTO(st, clmoe__args(kseg, 4, KA(keys), KA(uN), KA(uV), KA(seg)), done);
  CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, kseg, (size_t)V + 1), done);
  size_t global[2], local[2];
  if (nchunks) {
    CLMOE_TRY_GOTO(st, clmoe__args(kchunk, 7, KA(keys), KA(nchunks), KA(dout->buf), KA(dof), KA(ud),
                                   KA(uV), KA(part)), done);
    grid2(ctx, (size_t)d, (size_t)nchunks, global, local);
    CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kchunk, 2, global, local), done);
  }
  /* Without whole chunks the kernel never reads part: any buffer will do for the argument. */
  cl_mem part_arg = part ? part : keys;
  CLMOE_TRY_GOTO(st, clmoe__args(kacc, 9, KA(keys), KA(seg), KA(dout->buf), KA(dof), KA(ud),
                                 KA(uV), KA(part_arg), KA(dtable->buf), KA(dto)), done);
  grid2(ctx, (size_t)d, (size_t)V, global, local);
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kacc, 2, global, local), done);
done:
  /* The queue is in order: the scratch buffers can go back to the pool at once. */
  clmoe__scratch_release(ctx, keys, keys_bytes);
  clmoe__scratch_release(ctx, seg, seg_bytes);
  clmoe__scratch_release(ctx, part, part_bytes);
  return st;
}
