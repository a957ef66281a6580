/* Expert-parallel exchange of token rows through MPI collectives (see dist_exchange.h). */
#include "dist_mpi_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clmoe/dist_exchange.h"

void clmoe_ep_plan_destroy(clmoe_ep_plan *p)
{
  if (!p) return;
  free(p->send_counts);
  free(p->send_displs);
  free(p->recv_counts);
  free(p->recv_displs);
  free(p->send_copy);
  free(p->recv_expert);
  free(p);
}

static clmoe_status plan_alloc(int ranks, int64_t copies, clmoe_ep_plan **out)
{
  clmoe_ep_plan *p = calloc(1, sizeof *p);
  size_t n = (size_t)ranks, c = copies > 0 ? (size_t)copies : 1;
  if (p) {
    p->ranks = ranks, p->copies = copies;
    p->send_counts = calloc(n, sizeof(int)), p->send_displs = calloc(n, sizeof(int));
    p->recv_counts = calloc(n, sizeof(int)), p->recv_displs = calloc(n, sizeof(int));
    p->send_copy = malloc(c * sizeof(int32_t));
  }
  if (!p || !p->send_counts || !p->send_displs || !p->recv_counts || !p->recv_displs ||
      !p->send_copy) {
    clmoe_ep_plan_destroy(p);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "expert exchange plan: out of host memory");
  }
  *out = p;
  return CLMOE_OK;
}

/* Prefix sums of counts; fails when a total does not fit MPI's int counts. */
static clmoe_status prefix(const int *counts, int *displs, int n, int64_t *total, const char *what)
{
  int64_t sum = 0;
  for (int r = 0; r < n; r++) {
    if (sum > INT_MAX)
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "expert exchange: more than %d %s rows", INT_MAX, what);
    displs[r] = (int)sum;
    sum += counts[r];
  }
  if (sum > INT_MAX)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "expert exchange: more than %d %s rows", INT_MAX, what);
  *total = sum;
  return CLMOE_OK;
}

clmoe_status clmoe_ep_plan_create(clmoe_dist *d, const clmoe_expert_map *map,
                                  const int32_t *experts, int64_t tokens, int top_k,
                                  clmoe_ep_plan **plan)
{
  if (!plan || !map || (!experts && tokens > 0) || tokens < 0 || top_k < 1)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_ep_plan_create: bad arguments");
  *plan = NULL;
  const int rank = clmoe_dist_rank(d), size = clmoe_dist_size(d);
  if (map->ranks != size)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "expert exchange: the expert map has %d ranks, "
                        "the job %d", map->ranks, size);
  const int64_t copies = tokens * top_k;
  if (copies > INT_MAX)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "expert exchange: %lld routed copies (at most %d)",
                        (long long)copies, INT_MAX);
  clmoe_ep_plan *p = NULL;
  CLMOE_TRY(plan_alloc(size, copies, &p));
  p->top_k = top_k;
  clmoe_status st = CLMOE_OK;
  int32_t *dest = malloc((size_t)(copies > 0 ? copies : 1) * sizeof *dest);
  int32_t *ids = malloc((size_t)(copies > 0 ? copies : 1) * sizeof *ids);
  int *cursor = calloc((size_t)size, sizeof *cursor);
  if (!dest || !ids || !cursor) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "expert exchange plan: out of host memory");
    goto done;
  }
  for (int64_t c = 0; c < copies; c++) {
    int e = experts[c];
    if (e < 0 || e >= map->experts) {
      st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "expert exchange: token %lld routes to expert "
                        "%d (want 0..%d)", (long long)(c / top_k), e, map->experts - 1);
      goto done;
    }
    dest[c] = clmoe_expert_map_route(map, e, rank);
    p->send_counts[dest[c]]++;
  }
  int64_t total;
  CLMOE_TRY_GOTO(st, prefix(p->send_counts, p->send_displs, size, &total, "sent"), done);
  /* bucket by destination, copy order kept within a bucket */
  memcpy(cursor, p->send_displs, (size_t)size * sizeof *cursor);
  for (int64_t c = 0; c < copies; c++) {
    int at = cursor[dest[c]]++;
    p->send_copy[at] = (int32_t)c;
    ids[at] = experts[c];
  }
#ifdef HAVE_MPI
  if (clmoe_dist_uses_mpi(d)) {
    MPI_Comm comm = clmoe_dist_comm(d);
    CLMOE_MPI_GOTO(st, MPI_Alltoall(p->send_counts, 1, MPI_INT, p->recv_counts, 1, MPI_INT, comm), done);
    CLMOE_TRY_GOTO(st, prefix(p->recv_counts, p->recv_displs, size, &p->recv_rows, "received"), done);
    if (!(p->recv_expert = malloc((size_t)(p->recv_rows > 0 ? p->recv_rows : 1) * sizeof(int32_t)))) {
      st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "expert exchange plan: out of host memory");
      goto done;
    }
    CLMOE_MPI_GOTO(st, MPI_Alltoallv(ids, p->send_counts, p->send_displs, MPI_INT32_T, p->recv_expert,
                                     p->recv_counts, p->recv_displs, MPI_INT32_T, comm), done);
  } else
#endif
  {
    memcpy(p->recv_counts, p->send_counts, (size_t)size * sizeof(int));
    memcpy(p->recv_displs, p->send_displs, (size_t)size * sizeof(int));
    p->recv_rows = copies;
    if (!(p->recv_expert = malloc((size_t)(copies > 0 ? copies : 1) * sizeof(int32_t)))) {
      st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "expert exchange plan: out of host memory");
      goto done;
    }
    if (copies > 0) memcpy(p->recv_expert, ids, (size_t)copies * sizeof(int32_t));
  }
  /* every row that arrived must be for an expert held here: ranks disagreeing on the map
   * would show up now rather than as wrong numbers later */
  for (int src = 0, row = 0; src < size; src++)
    for (int k = 0; k < p->recv_counts[src]; k++, row++) {
      int e = p->recv_expert[row], held = 0;
      for (int s = 0; s < map->slots && !held; s++)
        held = map->slot_expert[(size_t)rank * map->slots + s] == e;
      if (!held) {
        st = clmoe__error(CLMOE_ERR_INTERNAL, "expert exchange: rank %d sent a token for expert %d "
                          "to rank %d, which does not hold it (do the ranks use the same map?)",
                          src, e, rank);
        goto done;
      }
    }
done:
  free(dest);
  free(ids);
  free(cursor);
  if (st != CLMOE_OK) clmoe_ep_plan_destroy(p);
  else *plan = p;
  return st;
}

static clmoe_status check_width(const clmoe_ep_plan *p, int64_t width, const void *a, const void *b,
                                const char *who)
{
  if (!p || width < 1 || width > INT_MAX || (!a && p->copies > 0) || (!b && p->recv_rows > 0))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: bad arguments (width %lld)", who,
                        (long long)width);
  return CLMOE_OK;
}

/* One Alltoallv of rows of `width` floats, as a contiguous datatype. */
static clmoe_status exchange_rows(clmoe_dist *d, int64_t width, const float *send, const int *scounts,
                                  const int *sdispls, float *recv, const int *rcounts,
                                  const int *rdispls)
{
#ifdef HAVE_MPI
  clmoe_status st = CLMOE_OK;
  MPI_Datatype row;
  int e = MPI_Type_contiguous((int)width, MPI_FLOAT, &row);
  if (e != MPI_SUCCESS) return clmoe__dist_mpi_error(e, "MPI_Type_contiguous");
  CLMOE_MPI_GOTO(st, MPI_Type_commit(&row), done);
  CLMOE_MPI_GOTO(st, MPI_Alltoallv(send, scounts, sdispls, row, recv, rcounts, rdispls, row,
                                   clmoe_dist_comm(d)), done);
done:
  MPI_Type_free(&row);
  return st;
#else
  (void)d, (void)width, (void)send, (void)scounts, (void)sdispls, (void)recv, (void)rcounts,
      (void)rdispls;
  return clmoe__error(CLMOE_ERR_INTERNAL, "expert exchange: MPI path in a build without MPI");
#endif
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rows of `width` floats that this rank sends to the others (its own share excluded). */
static int64_t bytes_to_others(clmoe_dist *d, const int *counts, int ranks, int64_t width)
{
  int64_t rows = 0;
  for (int r = 0; r < ranks; r++)
    if (r != clmoe_dist_rank(d)) rows += counts[r];
  return rows * width * (int64_t)sizeof(float);
}

static void count(clmoe_dist *d, int combine, double t0, int64_t bytes)
{
  clmoe_dist_stats *s = clmoe__dist_stats(d);
  if (!s) return;
  if (combine) s->combine_s += now_s() - t0, s->combine_bytes += bytes, s->combines++;
  else s->dispatch_s += now_s() - t0, s->dispatch_bytes += bytes, s->dispatches++;
}

clmoe_status clmoe_ep_dispatch(clmoe_dist *d, const clmoe_ep_plan *p, const float *x,
                               int64_t width, float *recv)
{
  const double t0 = now_s();
  CLMOE_TRY(check_width(p, width, x, recv, "clmoe_ep_dispatch"));
  const size_t w = (size_t)width;
  if (!clmoe_dist_uses_mpi(d)) { /* one rank: the send order is the receive order */
    for (int64_t i = 0; i < p->copies; i++)
      memcpy(recv + (size_t)i * w, x + (size_t)(p->send_copy[i] / p->top_k) * w, w * sizeof(float));
    count(d, 0, t0, 0);
    return CLMOE_OK;
  }
  float *send = malloc((size_t)(p->copies > 0 ? p->copies : 1) * w * sizeof(float));
  if (!send) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_ep_dispatch: out of host memory");
  for (int64_t i = 0; i < p->copies; i++)
    memcpy(send + (size_t)i * w, x + (size_t)(p->send_copy[i] / p->top_k) * w, w * sizeof(float));
  clmoe_status st = exchange_rows(d, width, send, p->send_counts, p->send_displs, recv,
                                  p->recv_counts, p->recv_displs);
  free(send);
  count(d, 0, t0, bytes_to_others(d, p->send_counts, p->ranks, width));
  return st;
}

clmoe_status clmoe_ep_combine(clmoe_dist *d, const clmoe_ep_plan *p, const float *y, int64_t width,
                              float *out)
{
  CLMOE_TRY(check_width(p, width, out, y, "clmoe_ep_combine"));
  const double t0 = now_s();
  const size_t w = (size_t)width;
  const float *back = y;
  float *tmp = NULL;
  if (clmoe_dist_uses_mpi(d)) {
    if (!(tmp = malloc((size_t)(p->copies > 0 ? p->copies : 1) * w * sizeof(float))))
      return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_ep_combine: out of host memory");
    clmoe_status st = exchange_rows(d, width, y, p->recv_counts, p->recv_displs, tmp,
                                    p->send_counts, p->send_displs);
    if (st != CLMOE_OK) {
      free(tmp);
      return st;
    }
    back = tmp;
  }
  for (int64_t i = 0; i < p->copies; i++)
    memcpy(out + (size_t)p->send_copy[i] * w, back + (size_t)i * w, w * sizeof(float));
  free(tmp);
  count(d, 1, t0, clmoe_dist_uses_mpi(d) ? bytes_to_others(d, p->recv_counts, p->ranks, width) : 0);
  return CLMOE_OK;
}
