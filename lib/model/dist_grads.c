/* Bucketed, rank-ordered gradient all-reduce and the QB histogram sum (include/clmoe/
 * dist_grads.h), over the distributed layer's collectives (lib/dist/dist_collect.c). */
#include "clmoe/dist_grads.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_internal.h"

int clmoe_grad_param_is_local(const clmoe_param *p, const clmoe_grad_allreduce_opts *opts)
{
  if (!p) return 0;
  if (p->rows) return 1; /* row-sharded: a rank's own experts */
  if (!opts) return 0;
  if (opts->is_local && opts->is_local(p, opts->user)) return 1;
  for (int i = 0; i < opts->n_local_prefixes; i++) {
    const char *pre = opts->local_prefixes ? opts->local_prefixes[i] : NULL;
    if (pre && pre[0] && strncmp(p->name, pre, strlen(pre)) == 0) return 1;
  }
  return 0;
}

/* Whether p takes part: trainable, with elements, not local. */
static int reduced(const clmoe_param *p, const clmoe_grad_allreduce_opts *o)
{
  return p->trainable && clmoe_tensor_numel(&p->grad) > 0 && !clmoe_grad_param_is_local(p, o);
}

/* FNV-1a over what every rank must agree on: names, sizes, which are reduced, options. */
static uint64_t fingerprint(const clmoe_params *ps, const clmoe_grad_allreduce_opts *o,
                            size_t bucket)
{
  uint64_t h = 1469598103934665603ull;
#define MIX(ptr, len)                                                                      \
  for (size_t k_ = 0; k_ < (len); k_++) h = (h ^ ((const unsigned char *)(ptr))[k_]) * 1099511628211ull
  for (int i = 0; i < ps->n; i++) {
    const clmoe_param *p = &ps->p[i];
    int r = reduced(p, o);
    /* a local parameter's size may differ between ranks (a rank's share of the experts) */
    int64_t n = !p->trainable ? -1 : r ? clmoe_tensor_numel(&p->grad) : -2;
    MIX(p->name, strlen(p->name) + 1);
    MIX(&n, sizeof n);
    MIX(&r, sizeof r);
  }
  MIX(&bucket, sizeof bucket);
  MIX(&o->no_average, sizeof o->no_average);
#undef MIX
  return h;
}

static clmoe_status check_args(clmoe_params *ps, const clmoe_grad_allreduce_opts *o, size_t *bucket)
{
  static const char op[] = "clmoe_dist_allreduce_grads";
  if (!ps) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: ps is NULL", op);
  if (ps->inference)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the parameters were created for "
                        "inference: no gradients", op);
  size_t b = o->bucket_bytes ? o->bucket_bytes : CLMOE_DIST_GRADS_DEFAULT_BUCKET_BYTES;
  if (b % sizeof(float) != 0 || b / sizeof(float) > (size_t)INT_MAX)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: bucket_bytes = %zu must be a multiple "
                        "of 4 and at most 4 * INT_MAX", op, b);
  if (o->n_local_prefixes < 0 || (o->n_local_prefixes > 0 && !o->local_prefixes))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: n_local_prefixes = %d without a "
                        "local_prefixes array", op, o->n_local_prefixes);
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i].trainable && reduced(&ps->p[i], o) && ps->p[i].grad.dtype != CLMOE_F32)
      return clmoe__error(CLMOE_ERR_SHAPE, "%s: gradient of %s is %s, not f32", op,
                          ps->p[i].name, clmoe_dtype_name(ps->p[i].grad.dtype));
  *bucket = b / sizeof(float);
  return CLMOE_OK;
}

/* A cursor over the reduced gradients in registration order. */
typedef struct cursor {
  clmoe_params *ps;
  const clmoe_grad_allreduce_opts *o;
  int i;       /* parameter */
  int64_t pos; /* element within its gradient */
} cursor;

static void cursor_skip(cursor *c)
{
  while (c->i < c->ps->n && (!reduced(&c->ps->p[c->i], c->o) ||
                             c->pos >= clmoe_tensor_numel(&c->ps->p[c->i].grad)))
    c->i++, c->pos = 0;
}

/* Copies up to cap elements from (to, when put) the gradients at the cursor into host;
 * advances the cursor; *got = elements moved. */
static clmoe_status cursor_move(cursor *c, float *host, int64_t cap, int put, int64_t *got)
{
  int64_t done = 0;
  cursor_skip(c);
  while (done < cap && c->i < c->ps->n) {
    clmoe_tensor *g = &c->ps->p[c->i].grad;
    int64_t n = clmoe_tensor_numel(g) - c->pos;
    if (n > cap - done) n = cap - done;
    clmoe_tensor v;
    CLMOE_TRY(clmoe_tensor_view(g, &v, 1, &n, c->pos));
    if (put) CLMOE_TRY(clmoe_tensor_write(&v, host + done, (size_t)n * sizeof(float)));
    else CLMOE_TRY(clmoe_tensor_read(&v, host + done, (size_t)n * sizeof(float)));
    done += n, c->pos += n;
    cursor_skip(c);
  }
  *got = done;
  return CLMOE_OK;
}

/* Every rank's fingerprint must be rank 0's. */
static clmoe_status agree(clmoe_dist *d, int size, uint64_t fp)
{
  clmoe_status st = CLMOE_OK;
  uint64_t *all = malloc((size_t)size * sizeof *all);
  if (!all) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  CLMOE_TRY_GOTO(st, clmoe__dist_allgather_u64(d, &fp, 1, all), done);
  for (int r = 1; r < size; r++)
    if (all[r] != all[0]) {
      st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_dist_allreduce_grads: rank %d's "
                        "parameters (names, sizes, expert-local marks) or options differ from "
                        "rank 0's", r);
      break;
    }
done:
  free(all);
  return st;
}

clmoe_status clmoe_dist_allreduce_grads(clmoe_dist *d, clmoe_params *ps,
                                        const clmoe_grad_allreduce_opts *opts,
                                        clmoe_grad_allreduce_stats *stats)
{
  const clmoe_grad_allreduce_opts none = {0};
  const clmoe_grad_allreduce_opts *o = opts ? opts : &none;
  size_t bucket = 0;
  CLMOE_TRY(check_args(ps, o, &bucket));
  clmoe_grad_allreduce_stats s = {0};
  for (int i = 0; i < ps->n; i++) {
    if (!ps->p[i].trainable) continue;
    if (reduced(&ps->p[i], o)) s.params_reduced++, s.elements += clmoe_tensor_numel(&ps->p[i].grad);
    else if (clmoe_tensor_numel(&ps->p[i].grad) > 0) s.params_local++;
  }
  const int size = clmoe_dist_size(d);
  if (size <= 1 || !clmoe_dist_uses_mpi(d)) { /* the sum and the mean are the rank's own */
    s.elements = 0;
    if (stats) *stats = s;
    return CLMOE_OK;
  }
  CLMOE_TRY(agree(d, size, fingerprint(ps, o, bucket)));
  int64_t cap = s.elements < (int64_t)bucket ? s.elements : (int64_t)bucket;
  clmoe_status st = CLMOE_OK;
  /* The bucket, then the received slices: size * ceil(cap / size) <= cap + size floats. */
  float *buf = malloc(((size_t)cap * 2 + (size_t)size) * sizeof(float));
  if (!buf) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_dist_allreduce_grads: no host memory "
                      "for a bucket of %lld floats", (long long)cap);
    goto done;
  }
  const double scale = o->no_average ? 1.0 : 1.0 / size;
  cursor rd = {ps, o, 0, 0}, wr = {ps, o, 0, 0};
  for (int64_t left = s.elements; left > 0;) {
    int64_t n = 0, n2 = 0, sent = 0;
    CLMOE_TRY_GOTO(st, cursor_move(&rd, buf, cap, 0, &n), done);
    if (n <= 0) {
      st = clmoe__error(CLMOE_ERR_INTERNAL, "clmoe_dist_allreduce_grads: gradients ended early");
      goto done;
    }
    CLMOE_TRY_GOTO(st, clmoe__dist_allreduce_ordered_f32(d, buf, n, scale, buf + cap, &sent), done);
    CLMOE_TRY_GOTO(st, cursor_move(&wr, buf, n, 1, &n2), done);
    if (n2 != n) {
      st = clmoe__error(CLMOE_ERR_INTERNAL, "clmoe_dist_allreduce_grads: bucket of %lld "
                        "written back as %lld", (long long)n, (long long)n2);
      goto done;
    }
    s.buckets++;
    s.bytes_sent += sent;
    left -= n;
  }
done:
  free(buf);
  if (st == CLMOE_OK && stats) *stats = s;
  return st;
}

/* Two ranks' QB histogram ranges {lo, hi, scale} agree when they differ by rounding only:
 * ranks on different OpenCL implementations derive the range from the same bias with
 * their own float division (OpenCL allows 2.5 ulp), so only E, bins and the bias are
 * exact. A margin within that rounding of a bin edge may land in the neighbouring bin on
 * one rank: below the estimate's own resolution of one bin. */
static int qb_ranges_agree(const float *a, const float *b)
{
  const double span = fabs((double)a[1] - (double)a[0]);
  const double tol = 1e-5 * span;
  return fabs((double)a[0] - (double)b[0]) <= tol && fabs((double)a[1] - (double)b[1]) <= tol &&
         fabs((double)a[2] - (double)b[2]) <= 1e-5 * fabs((double)a[2]);
}

clmoe_status clmoe_dist_sum_qb_histogram(clmoe_dist *d, clmoe_moe_saved *saved)
{
  static const char op[] = "clmoe_dist_sum_qb_histogram";
  if (!saved || !saved->hist.buf || !saved->range.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: saved holds no QB histogram (not "
                        "from a train-mode forward with balance = qb-hist)", op);
  const clmoe_tensor *h = &saved->hist;
  if (h->dtype != CLMOE_I32 || h->ndim != 2 || !clmoe_tensor_is_contiguous(h) ||
      clmoe_tensor_numel(&saved->range) != 3 || saved->range.dtype != CLMOE_F32)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: hist must be contiguous i32 [E, bins] and "
                        "range f32 [3]", op);
  if (clmoe_dist_size(d) <= 1 || !clmoe_dist_uses_mpi(d)) return CLMOE_OK;
  const int size = clmoe_dist_size(d);
  const size_t n = (size_t)clmoe_tensor_numel(h);
  clmoe_status st = CLMOE_OK;
  int32_t *counts = malloc(n * sizeof *counts);
  int64_t *sum = malloc((n + 1) * sizeof *sum);
  /* What must agree: E and bins exactly; the range {lo, hi, scale} up to rounding. */
  uint32_t key[5], *keys = malloc((size_t)size * sizeof key);
  if (!counts || !sum || !keys) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  float range[3];
  CLMOE_TRY_GOTO(st, clmoe_tensor_read(&saved->range, range, sizeof range), done);
  key[0] = (uint32_t)h->shape[0], key[1] = (uint32_t)h->shape[1];
  memcpy(key + 2, range, sizeof range);
  CLMOE_TRY_GOTO(st, clmoe__dist_allgather_u32(d, key, 5, keys), done);
  float root[3];
  memcpy(root, keys + 2, sizeof root);
  for (int r = 1; r < size; r++) {
    float other[3];
    memcpy(other, keys + 5 * r + 2, sizeof other);
    if (keys[5 * r] != keys[0] || keys[5 * r + 1] != keys[1]) {
      st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: rank %d's histogram is [%u, %u], rank 0's "
                        "[%u, %u] (the ranks must run the same model)", op, r, keys[5 * r],
                        keys[5 * r + 1], keys[0], keys[1]);
      goto done;
    }
    if (!qb_ranges_agree(root, other)) {
      st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: rank %d's histogram range [%.9g, %.9g] "
                        "differs from rank 0's [%.9g, %.9g] by more than rounding (the ranks must "
                        "share the selection bias)", op, r, (double)other[0], (double)other[1],
                        (double)root[0], (double)root[1]);
      goto done;
    }
  }
  /* Every rank reads the summed counts on rank 0's bins, so that all derive the same
   * thresholds from the same numbers. */
  if (memcmp(root, range, sizeof range) != 0)
    CLMOE_TRY_GOTO(st, clmoe_tensor_write(&saved->range, root, sizeof root), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_read(h, counts, n * sizeof *counts), done);
  for (size_t i = 0; i < n; i++) sum[i] = counts[i];
  sum[n] = saved->hist_tokens;
  CLMOE_TRY_GOTO(st, clmoe_dist_allreduce_sum_i64(d, sum, n + 1), done);
  for (size_t i = 0; i < n; i++) {
    if (sum[i] > INT32_MAX || sum[i] < 0) {
      st = clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: bin %zu totals %lld over the ranks, beyond "
                        "the i32 counts", op, i, (long long)sum[i]);
      goto done;
    }
    counts[i] = (int32_t)sum[i];
  }
  CLMOE_TRY_GOTO(st, clmoe_tensor_write(&saved->hist, counts, n * sizeof *counts), done);
  saved->hist_tokens = sum[n];
done:
  free(counts);
  free(sum);
  free(keys);
  return st;
}
