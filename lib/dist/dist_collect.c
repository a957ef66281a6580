/* The collectives that the layers above the distributed layer need (lib/dist/
 * dist_internal.h), and the broadcast of a tensor: every rank's rows gathered to rank 0
 * (checkpoints of row-sharded parameters), a rank-ordered float all-reduce (the gradient
 * buckets), all-gathers of fixed-size keys (agreement checks). Each one works without MPI
 * (one rank), so their callers need no MPI code of their own. */
#include "dist_mpi_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

clmoe_status clmoe__dist_gather_rows(clmoe_dist *d, const int32_t *ids, const float *rows,
                                     int64_t n, int64_t re, const int64_t *counts,
                                     int32_t *all_ids, float *all_rows, const char *what)
{
  const int R = clmoe_dist_size(d), root = clmoe_dist_rank(d) == 0;
  if (R <= 1) {
    if (root) {
      memcpy(all_ids, ids, (size_t)n * sizeof *all_ids);
      memcpy(all_rows, rows, (size_t)(n * re) * sizeof *all_rows);
    }
    return CLMOE_OK;
  }
#ifdef HAVE_MPI
  int64_t total = 0;
  for (int r = 0; r < R; r++) total += counts[r];
  if (total > INT_MAX || re > INT_MAX)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %lld rows of %lld numbers: beyond MPI's int "
                        "counts", what, (long long)total, (long long)re);
  int *ci = malloc((size_t)R * sizeof *ci), *di = malloc((size_t)R * sizeof *di);
  if (!ci || !di) {
    free(ci), free(di);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: counts", what);
  }
  int64_t off = 0;
  for (int r = 0; r < R; r++) ci[r] = (int)counts[r], di[r] = (int)off, off += counts[r];
  MPI_Comm comm = clmoe_dist_comm(d);
  int e = MPI_Gatherv(ids, (int)n, MPI_INT32_T, all_ids, ci, di, MPI_INT32_T, 0, comm);
  /* the rows' data in one datatype of a whole row, so that counts stay rows */
  MPI_Datatype row;
  if (e == MPI_SUCCESS) e = MPI_Type_contiguous((int)re, MPI_FLOAT, &row);
  if (e == MPI_SUCCESS) {
    if ((e = MPI_Type_commit(&row)) == MPI_SUCCESS)
      e = MPI_Gatherv(rows, (int)n, row, all_rows, ci, di, row, 0, comm);
    MPI_Type_free(&row);
  }
  free(ci), free(di);
  if (e != MPI_SUCCESS) {
    char call[96];
    snprintf(call, sizeof call, "MPI_Gatherv (%s rows)", what);
    return clmoe__dist_mpi_error(e, call);
  }
  return CLMOE_OK;
#else
  return clmoe__error(CLMOE_ERR_INTERNAL, "%s: %d ranks without MPI", what, R);
#endif
}

#ifdef HAVE_MPI
/* Slice r of a bucket of n elements over `size` ranks: [n r / size, n (r + 1) / size). */
static void slices(int64_t n, int size, int *count, int *displ)
{
  for (int r = 0; r < size; r++) {
    int64_t a = n * r / size, b = n * (r + 1) / size;
    displ[r] = (int)a, count[r] = (int)(b - a);
  }
}

/* Reduces one bucket of n elements in place: work has room for n + size elements. */
static clmoe_status reduce_bucket(MPI_Comm comm, int rank, int size, float *bucket, float *work,
                                  int64_t n, double scale, int *count, int *displ, int *rcount,
                                  int *rdispl)
{
  clmoe_status st = CLMOE_OK;
  slices(n, size, count, displ);
  const int mine = count[rank];
  /* Slice `rank` of every rank, in rank order: work[r * mine ...]. */
  for (int r = 0; r < size; r++) rcount[r] = mine, rdispl[r] = r * mine;
  CLMOE_MPI_GOTO(st, MPI_Alltoallv(bucket, count, displ, MPI_FLOAT, work, rcount, rdispl,
                                   MPI_FLOAT, comm), done);
  float *out = bucket + displ[rank];
  for (int j = 0; j < mine; j++) {
    double s = 0.0;
    for (int r = 0; r < size; r++) s += (double)work[(size_t)r * (size_t)mine + (size_t)j];
    out[j] = (float)(s * scale);
  }
  CLMOE_MPI_GOTO(st, MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, bucket, count, displ,
                                    MPI_FLOAT, comm), done);
done:
  return st;
}
#endif

clmoe_status clmoe__dist_allreduce_ordered_f32(clmoe_dist *d, float *buf, int64_t n,
                                               double scale, float *work, int64_t *bytes_sent)
{
  const int size = clmoe_dist_size(d);
  if (bytes_sent) *bytes_sent = 0;
  if (n < 0 || n > INT_MAX)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "rank-ordered all-reduce: %lld floats (at most "
                        "INT_MAX at a time)", (long long)n);
  if (size <= 1) {
    for (int64_t i = 0; i < n; i++) buf[i] = (float)((double)buf[i] * scale);
    return CLMOE_OK;
  }
#ifdef HAVE_MPI
  int *ints = malloc((size_t)size * 4 * sizeof(int));
  if (!ints)
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "rank-ordered all-reduce: out of host memory");
  const int rank = clmoe_dist_rank(d);
  clmoe_status st = reduce_bucket(clmoe_dist_comm(d), rank, size, buf, work, n, scale, ints,
                                  ints + size, ints + 2 * size, ints + 3 * size);
  /* Alltoallv: the other ranks' slices; Allgatherv: this rank's slice to each other rank. */
  if (st == CLMOE_OK && bytes_sent)
    *bytes_sent = (n - ints[rank] + (int64_t)ints[rank] * (size - 1)) * (int64_t)sizeof(float);
  free(ints);
  return st;
#else
  (void)work;
  return clmoe__error(CLMOE_ERR_INTERNAL, "rank-ordered all-reduce: %d ranks without MPI", size);
#endif
}

#ifdef HAVE_MPI
static clmoe_status allgather(clmoe_dist *d, const void *mine, size_t n, MPI_Datatype type,
                              void *all, const char *name)
{
  if (n > (size_t)INT_MAX)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %zu values (at most INT_MAX)", name, n);
  int e = MPI_Allgather(mine, (int)n, type, all, (int)n, type, clmoe_dist_comm(d));
  return e == MPI_SUCCESS ? CLMOE_OK : clmoe__dist_mpi_error(e, name);
}
#endif

clmoe_status clmoe__dist_allgather_u64(clmoe_dist *d, const uint64_t *mine, size_t n,
                                       uint64_t *all)
{
  if (clmoe_dist_size(d) <= 1) {
    memcpy(all, mine, n * sizeof *all);
    return CLMOE_OK;
  }
#ifdef HAVE_MPI
  return allgather(d, mine, n, MPI_UINT64_T, all, "MPI_Allgather (u64)");
#else
  return clmoe__error(CLMOE_ERR_INTERNAL, "all-gather: %d ranks without MPI", clmoe_dist_size(d));
#endif
}

clmoe_status clmoe__dist_allgather_u32(clmoe_dist *d, const uint32_t *mine, size_t n,
                                       uint32_t *all)
{
  if (clmoe_dist_size(d) <= 1) {
    memcpy(all, mine, n * sizeof *all);
    return CLMOE_OK;
  }
#ifdef HAVE_MPI
  return allgather(d, mine, n, MPI_UINT32_T, all, "MPI_Allgather (u32)");
#else
  return clmoe__error(CLMOE_ERR_INTERNAL, "all-gather: %d ranks without MPI", clmoe_dist_size(d));
#endif
}

#ifdef HAVE_MPI
/* MPI_Bcast of bytes in pieces of at most INT_MAX. */
static clmoe_status bcast_bytes(clmoe_dist *d, void *buf, size_t bytes, int root)
{
  clmoe_status st = CLMOE_OK;
  for (size_t done = 0; done < bytes;) {
    const size_t n = bytes - done > (size_t)INT_MAX ? (size_t)INT_MAX : bytes - done;
    CLMOE_MPI_GOTO(st, MPI_Bcast((char *)buf + done, (int)n, MPI_BYTE, root, clmoe_dist_comm(d)), out);
    done += n;
  }
out:
  return st;
}
#endif

clmoe_status clmoe_dist_broadcast_tensor(clmoe_dist *d, clmoe_tensor *t, int root)
{
  static const char op[] = "clmoe_dist_broadcast_tensor";
  if (!t) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: t is NULL", op);
  if (clmoe_dist_size(d) <= 1 || !clmoe_dist_uses_mpi(d)) return CLMOE_OK;
  if (root < 0 || root >= clmoe_dist_size(d))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: root %d of %d ranks", op, root,
                        clmoe_dist_size(d));
#ifdef HAVE_MPI
  const size_t bytes = clmoe_tensor_bytes(t);
  if (bytes == 0) return CLMOE_OK;
  void *host = malloc(bytes);
  if (!host) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: %zu bytes of host memory", op, bytes);
  const int me = clmoe_dist_rank(d);
  clmoe_status st = me == root ? clmoe_tensor_read(t, host, bytes) : CLMOE_OK;
  /* A root that failed to read still joins the broadcast (the others wait in it); then
   * every rank learns of the failure through the agreement below. */
  int ok = st == CLMOE_OK, all_ok = 0;
  CLMOE_MPI_GOTO(st, MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, clmoe_dist_comm(d)), done);
  if (!all_ok) {
    if (st == CLMOE_OK)
      st = clmoe__error(CLMOE_ERR_INTERNAL, "%s: rank %d could not read the tensor", op, root);
    goto done;
  }
  CLMOE_TRY_GOTO(st, bcast_bytes(d, host, bytes, root), done);
  if (me != root) st = clmoe_tensor_write(t, host, bytes);
done:
  free(host);
  return st;
#else
  return CLMOE_OK;
#endif
}
