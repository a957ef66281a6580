/* The parameters that every rank holds a copy of, kept bit for bit equal across ranks whose
 * OpenCL implementations round differently (include/clmoe/dist_grads.h:
 * clmoe_dist_sync_replicas), through the distributed layer's all-gather and broadcast. */
#include "clmoe/dist_grads.h"

#include <stdlib.h>
#include <string.h>

#include "dist/dist_internal.h"

/* The replicated tensors of ps in a fixed order (the same on every rank): value, m, v of each
 * non-local trainable parameter, the value of each buffer. Fills out (may be NULL) and
 * returns the count. */
static int replicated(clmoe_params *ps, const clmoe_grad_allreduce_opts *o, clmoe_tensor **out)
{
  int n = 0;
  for (int i = 0; i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (clmoe_grad_param_is_local(p, o)) continue;
    clmoe_tensor *t[3] = {p->value, &p->m, &p->v};
    const int k = p->trainable && !ps->inference ? 3 : 1;
    for (int j = 0; j < k; j++) {
      if (out) out[n] = t[j];
      n++;
    }
  }
  return n;
}

/* 64-bit FNV-1a of t's bytes (read to the host). */
static clmoe_status tensor_hash(const clmoe_tensor *t, void **scratch, size_t *cap, uint64_t *h)
{
  const size_t bytes = clmoe_tensor_bytes(t);
  if (bytes > *cap) {
    void *p = realloc(*scratch, bytes);
    if (!p) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_dist_sync_replicas: %zu bytes", bytes);
    *scratch = p, *cap = bytes;
  }
  if (bytes) CLMOE_TRY(clmoe_tensor_read(t, *scratch, bytes));
  *h = clmoe__fnv64(*scratch, bytes);
  return CLMOE_OK;
}

clmoe_status clmoe_dist_sync_replicas(clmoe_dist *d, clmoe_params *ps,
                                      const clmoe_grad_allreduce_opts *opts, int *differed)
{
  if (differed) *differed = 0;
  if (!ps) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_dist_sync_replicas: ps is NULL");
  if (clmoe_dist_size(d) <= 1 || !clmoe_dist_uses_mpi(d)) return CLMOE_OK;
  const int size = clmoe_dist_size(d), n = replicated(ps, opts, NULL);
  clmoe_tensor **t = malloc((size_t)(n + 1) * sizeof *t);
  uint64_t *mine = malloc((size_t)(n + 1) * sizeof *mine);
  uint64_t *all = malloc((size_t)size * (size_t)(n + 1) * sizeof *all);
  void *scratch = NULL;
  size_t cap = 0;
  clmoe_status st = t && mine && all ? CLMOE_OK
                                     : clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_dist_sync_replicas");
  if (st != CLMOE_OK) goto done;
  replicated(ps, opts, t);
  /* The count first: ranks that disagree on it hold different models. */
  mine[0] = (uint64_t)n;
  for (int i = 0; i < n && st == CLMOE_OK; i++) st = tensor_hash(t[i], &scratch, &cap, &mine[i + 1]);
  if (st != CLMOE_OK) mine[0] = UINT64_MAX; /* tells the others; everyone fails below */
  /* (a rank that failed still joins, keeping its own message) */
  const clmoe_status gathered = clmoe__dist_allgather_u64(d, mine, (size_t)n + 1, all);
  if (gathered != CLMOE_OK) {
    st = gathered;
    goto done;
  }
  for (int r = 0; r < size; r++)
    if (all[(size_t)r * (size_t)(n + 1)] != (uint64_t)n) {
      if (st == CLMOE_OK)
        st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_dist_sync_replicas: rank %d %s", r,
                          all[(size_t)r * (size_t)(n + 1)] == UINT64_MAX
                              ? "could not read its tensors"
                              : "holds a different number of replicated tensors");
      goto done;
    }
  for (int i = 0; i < n; i++) {
    int same = 1;
    for (int r = 1; r < size && same; r++) same = all[(size_t)r * (size_t)(n + 1) + 1 + i] == all[1 + i];
    if (same) continue;
    CLMOE_TRY_GOTO(st, clmoe_dist_broadcast_tensor(d, t[i], 0), done);
    if (differed) (*differed)++;
  }
  st = clmoe_params_refresh_bf16(ps); /* the bf16 copies follow the values they came from */
done:
  free(t), free(mine), free(all), free(scratch);
  return st;
}
