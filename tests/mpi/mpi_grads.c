/* Run by tests/mpi/test_dist_grads.sh under mpirun (and once without it): the bucketed gradient
 * all-reduce and the QB histogram sum (include/clmoe/dist_grads.h).
 * Gradients: every rank registers the same parameters (two of them expert-local, one by
 * name prefix and one by predicate, plus a buffer) and fills each gradient with values that
 * depend on the rank (counter-based, seed = rank and parameter). Every rank can compute
 * every rank's values on the host, so it computes the expected result itself: the sum in
 * rank order in double, times 1/N, rounded once to fp32, and requires the same bits (hence
 * the same on every rank and every run), for buckets of 3 and 7 floats (smaller than
 * every tensor), 37 floats, and the default (larger than all), averaged and summed; the
 * expert-local gradients must keep their own values. A registry that differs on one rank
 * must be an error on every rank.
 * QB histogram: each rank runs a train-mode forward (balance = qb-hist) on its share of a
 * batch; the summed counts and token total must equal, exactly, those of one forward over
 * the whole batch, and the biases from them must be the same bits.
 * Ranks that round differently: histogram ranges one ulp apart are summed on rank 0's
 * range, 1% apart refused; replicated parameters, moments and buffers changed on the other
 * ranks are put back to rank 0's bits by clmoe_dist_sync_replicas, and only those.
 * --mutate: one bucket (elements [37, 74) in registration order) keeps the rank's own values,
 * as if it had been skipped: must fail ("mismatch") on 2 or more ranks.
 * Prints "mpi_grads: OK N rank(s)" on rank 0 when every rank passed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/clmoe.h"
#include "mpi_common.h"

#define NP 7
#define TOKENS 45


static const char *const names[NP] = {"embed", "layer0/w_q", "layer0/experts/w_up", "layer0/bias",
                                      "layer1/w_o", "layer1/routed_w", "head"};
static const int64_t shapes[NP][3] = {{37, 13, 1}, {101, 1, 1}, {7, 11, 1}, {5, 1, 1},
                                      {3, 5, 2},   {9, 4, 1},   {257, 1, 1}};
static const int is_buffer[NP] = {0, 0, 0, 1, 0, 0, 0};

static int routed(const clmoe_param *p, void *user)
{
  (void)user;
  return strstr(p->name, "routed") != NULL;
}

static uint64_t seed_of(int rank, int i) { return 7919u * (uint64_t)rank + 31u * (uint64_t)i + 5u; }

/* Fills every trainable gradient with this rank's values. */
static void fill(clmoe_params *ps, int rank)
{
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i].trainable)
      TRY(clmoe_tensor_fill_uniform(&ps->p[i].grad, seed_of(rank, i), -1.0f, 1.0f));
}

/* Checks every gradient against the expected bits; returns the number of mismatches. */
static int64_t check(clmoe_params *ps, const clmoe_grad_allreduce_opts *o, const char *label,
                     int mutate)
{
  const int rank = clmoe_dist_rank(mpi_dist), size = clmoe_dist_size(mpi_dist);
  const double scale = o->no_average ? 1.0 : 1.0 / size;
  int64_t bad = 0, pos = 0; /* pos: index among the reduced elements */
  for (int i = 0; i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!p->trainable) continue;
    const int64_t n = clmoe_tensor_numel(&p->grad);
    const int local = clmoe_grad_param_is_local(p, o);
    float *got = malloc((size_t)n * sizeof *got);
    if (!got) mpi_die("malloc", CLMOE_ERR_OUT_OF_MEMORY);
    TRY(clmoe_tensor_read(&p->grad, got, (size_t)n * sizeof *got));
    for (int64_t j = 0; j < n; j++) {
      float want;
      if (local) {
        want = clmoe_random_uniform(seed_of(rank, i), (uint64_t)j, -1.0f, 1.0f);
      } else {
        double s = 0.0;
        for (int r = 0; r < size; r++) s += (double)clmoe_random_uniform(seed_of(r, i), (uint64_t)j, -1.0f, 1.0f);
        want = (float)(s * scale);
        if (mutate && pos >= 37 && pos < 74) /* a skipped bucket */
          got[j] = clmoe_random_uniform(seed_of(rank, i), (uint64_t)j, -1.0f, 1.0f);
        pos++;
      }
      if (memcmp(&got[j], &want, sizeof want) != 0) {
        if (bad < 3)
          fprintf(stderr, "mpi_grads: rank %d: %s: %s[%lld] = %.9g, want %.9g: mismatch\n", rank,
                  label, p->name, (long long)j, got[j], want);
        bad++;
      }
    }
    free(got);
  }
  return bad;
}

static int64_t check_grads(clmoe_ctx *ctx, int mutate)
{
  const int rank = clmoe_dist_rank(mpi_dist), size = clmoe_dist_size(mpi_dist);
  clmoe_tensor values[NP];
  clmoe_params ps;
  clmoe_params_init(&ps, ctx);
  for (int i = 0; i < NP; i++) {
    TRY(clmoe_tensor_zeros(ctx, &values[i], CLMOE_F32, 3, shapes[i]));
    if (is_buffer[i]) TRY(clmoe_params_add_buffer(&ps, names[i], &values[i]));
    else TRY(clmoe_params_add(&ps, names[i], &values[i], 1));
  }
  static const char *const prefixes[] = {"layer0/experts/"};
  const size_t buckets[4] = {3 * 4, 7 * 4, 37 * 4, 0};
  int64_t bad = 0;
  for (int b = 0; b < 4; b++)
    for (int avg = 0; avg < 2; avg++) {
      clmoe_grad_allreduce_opts o = {.bucket_bytes = buckets[b], .no_average = !avg,
                                     .is_local = routed, .local_prefixes = prefixes,
                                     .n_local_prefixes = 1};
      clmoe_grad_allreduce_stats s;
      char label[64];
      snprintf(label, sizeof label, "bucket %zu bytes, %s", buckets[b], avg ? "mean" : "sum");
      for (int run = 0; run < 2; run++) { /* the same bits on a second run */
        fill(&ps, rank);
        TRY(clmoe_dist_allreduce_grads(mpi_dist, &ps, &o, &s));
        bad += check(&ps, &o, label, mutate && buckets[b] == 37 * 4);
      }
      if (s.params_local != 2 || s.params_reduced != 4) {
        fprintf(stderr, "mpi_grads: rank %d: %s: %d reduced, %d local (want 4, 2)\n", rank,
                label, s.params_reduced, s.params_local);
        bad++;
      }
    }
  if (size > 1) { /* the last rank marks one more parameter local: every rank must refuse */
    static const char *const more[] = {"layer0/experts/", "head"};
    clmoe_grad_allreduce_opts o = {.local_prefixes = more, .n_local_prefixes = rank == size - 1 ? 2 : 1};
    clmoe_status st = clmoe_dist_allreduce_grads(mpi_dist, &ps, &o, NULL);
    if (st != CLMOE_ERR_INVALID_ARGUMENT) {
      fprintf(stderr, "mpi_grads: rank %d: a registry differing on one rank gave %s\n", rank,
              clmoe_strerror(st));
      bad++;
    }
  }
  clmoe_params_destroy(&ps);
  for (int i = 0; i < NP; i++) clmoe_tensor_destroy(&values[i]);
  return bad;
}

/* The histogram counts and bias after a qb-hist forward of x [m, d]. */
static void qb_run(clmoe_ctx *ctx, clmoe_moe_layer *L, const clmoe_tensor *x, int sum,
                   int32_t *hist, size_t hist_len, float *bias, int64_t *tokens)
{
  clmoe_tensor y;
  clmoe_moe_saved saved;
  memset(&saved, 0, sizeof saved);
  TRY(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, x->shape));
  TRY(clmoe_moe_forward(ctx, L, x, &y, &saved));
  if (sum) TRY(clmoe_dist_sum_qb_histogram(mpi_dist, &saved));
  TRY(clmoe_tensor_read(&saved.hist, hist, hist_len * sizeof *hist));
  *tokens = saved.hist_tokens;
  TRY(clmoe_moe_balance_update(ctx, L, &saved));
  TRY(clmoe_tensor_read(&L->bias, bias, (size_t)L->cfg.n_experts * sizeof *bias));
  clmoe_moe_saved_destroy(&saved);
  clmoe_tensor_destroy(&y);
}

static int64_t check_qb(clmoe_ctx *ctx)
{
  const int rank = clmoe_dist_rank(mpi_dist), size = clmoe_dist_size(mpi_dist);
  const clmoe_moe_config cfg = {.d = 24, .latent = 16, .n_experts = 22, .top_k = 3, .expert_ff = 12,
                                .balance = CLMOE_MOE_BALANCE_QB_HIST, .hist_bins = 64};
  const size_t E = 22, bins = 64;
  clmoe_moe_layer L;
  TRY(clmoe_moe_layer_create(ctx, &L, &cfg));
  TRY(clmoe_moe_layer_init(&L, 8, 0.3f));
  clmoe_tensor x, mine;
  const int64_t shape[2] = {TOKENS, cfg.d};
  TRY(clmoe_tensor_create(ctx, &x, CLMOE_F32, 2, shape));
  TRY(clmoe_tensor_fill_uniform(&x, 99, -1.0f, 1.0f));
  const int64_t first = TOKENS * rank / size, rows = TOKENS * (rank + 1) / size - first;
  TRY(clmoe_tensor_view(&x, &mine, 2, (int64_t[]){rows, cfg.d}, first * cfg.d));
  int32_t h_all[22 * 64], h_sum[22 * 64];
  float b_all[22], b_sum[22];
  int64_t t_all, t_sum;
  TRY(clmoe_tensor_fill_uniform(&L.bias, 81, -0.1f, 0.1f));
  qb_run(ctx, &L, &x, 0, h_all, E * bins, b_all, &t_all);
  TRY(clmoe_tensor_fill_uniform(&L.bias, 81, -0.1f, 0.1f)); /* the same starting bias */
  qb_run(ctx, &L, &mine, 1, h_sum, E * bins, b_sum, &t_sum);
  int64_t bad = 0;
  if (t_all != TOKENS || t_sum != TOKENS) bad++;
  if (memcmp(h_all, h_sum, sizeof h_all) != 0) bad++;
  if (memcmp(b_all, b_sum, sizeof b_all) != 0) bad++;
  if (bad)
    fprintf(stderr, "mpi_grads: rank %d: QB histogram: tokens %lld/%lld, counts %s, bias %s: "
            "mismatch\n", rank, (long long)t_sum, (long long)t_all,
            memcmp(h_all, h_sum, sizeof h_all) ? "differ" : "agree",
            memcmp(b_all, b_sum, sizeof b_all) ? "differs" : "agrees");
  clmoe_tensor_destroy(&x);
  clmoe_moe_layer_destroy(&L);
  return bad;
}

/* Ranks whose devices round differently: the other ranks' ranges moved by one ulp must be
 * summed on rank 0's range (which every rank then holds); a range 1% off (a bias that
 * differs) must be refused on every rank. */
static int64_t check_qb_ranges(clmoe_ctx *ctx)
{
  const int rank = clmoe_dist_rank(mpi_dist), size = clmoe_dist_size(mpi_dist);
  if (size < 2) return 0;
  const clmoe_moe_config cfg = {.d = 24, .latent = 16, .n_experts = 22, .top_k = 3, .expert_ff = 12,
                                .balance = CLMOE_MOE_BALANCE_QB_HIST, .hist_bins = 64};
  clmoe_moe_layer L;
  TRY(clmoe_moe_layer_create(ctx, &L, &cfg));
  TRY(clmoe_moe_layer_init(&L, 8, 0.3f));
  clmoe_tensor x, y;
  const int64_t shape[2] = {TOKENS, cfg.d};
  TRY(clmoe_tensor_create(ctx, &x, CLMOE_F32, 2, shape));
  TRY(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, shape));
  TRY(clmoe_tensor_fill_uniform(&x, 99 + (uint64_t)rank, -1.0f, 1.0f));
  int64_t bad = 0;
  for (int big = 0; big < 2; big++) {
    clmoe_moe_saved saved;
    memset(&saved, 0, sizeof saved);
    TRY(clmoe_moe_forward(ctx, &L, &x, &y, &saved));
    float range[3], root[3], got[3];
    TRY(clmoe_tensor_read(&saved.range, range, sizeof range));
    memcpy(root, range, sizeof root);
    if (rank > 0) {
      if (big) range[1] += 0.01f * (range[1] - range[0]);
      else range[0] = nextafterf(range[0], 0.0f), range[2] = nextafterf(range[2], 1e30f);
      TRY(clmoe_tensor_write(&saved.range, range, sizeof range));
    }
    clmoe_status st = clmoe_dist_sum_qb_histogram(mpi_dist, &saved);
    if (big) {
      if (st != CLMOE_ERR_INVALID_ARGUMENT || !strstr(clmoe_last_error(), "by more than rounding")) {
        fprintf(stderr, "mpi_grads: rank %d: a range 1%% off gave %s (%s): mismatch\n", rank,
                clmoe_strerror(st), clmoe_last_error());
        bad++;
      }
    } else if (st != CLMOE_OK) {
      fprintf(stderr, "mpi_grads: rank %d: ranges one ulp apart: %s: mismatch\n", rank, clmoe_last_error());
      bad++;
    } else {
      TRY(clmoe_tensor_read(&saved.range, got, sizeof got));
      if (memcmp(got, root, sizeof got) != 0) { /* every rank's forward ran on the same bias */
        fprintf(stderr, "mpi_grads: rank %d: the summed histogram's range is not rank 0's: "
                "mismatch\n", rank);
        bad++;
      }
    }
    clmoe_moe_saved_destroy(&saved);
  }
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y);
  clmoe_moe_layer_destroy(&L);
  return bad;
}

/* Replicas: ranks above 0 change one weight element, one AdamW moment and the buffer, as a
 * device that rounds differently would; after clmoe_dist_sync_replicas every replicated
 * tensor holds rank 0's bits (known on every rank: counter-based values), exactly those
 * three tensors are counted, the expert-local one keeps each rank's own values, and a second
 * sync finds nothing. clmoe_dist_broadcast_tensor alone: rank 1's values everywhere. */
/* Element 0 of t, through a one-element view. */
static void set_first(clmoe_tensor *t, float v)
{
  clmoe_tensor one;
  TRY(clmoe_tensor_view(t, &one, 1, (int64_t[]){1}, 0));
  TRY(clmoe_tensor_write(&one, &v, sizeof v));
}

static float get_first(clmoe_tensor *t)
{
  clmoe_tensor one;
  float v = -1.0f;
  TRY(clmoe_tensor_view(t, &one, 1, (int64_t[]){1}, 0));
  TRY(clmoe_tensor_read(&one, &v, sizeof v));
  return v;
}

static int64_t check_replicas(clmoe_ctx *ctx)
{
  const int rank = clmoe_dist_rank(mpi_dist), size = clmoe_dist_size(mpi_dist);
  clmoe_tensor values[NP];
  clmoe_params ps;
  clmoe_params_init(&ps, ctx);
  for (int i = 0; i < NP; i++) {
    TRY(clmoe_tensor_create(ctx, &values[i], CLMOE_F32, 3, shapes[i]));
    TRY(clmoe_tensor_fill_uniform(&values[i], seed_of(0, i), -1.0f, 1.0f));
    if (is_buffer[i]) TRY(clmoe_params_add_buffer(&ps, names[i], &values[i]));
    else TRY(clmoe_params_add(&ps, names[i], &values[i], 1));
  }
  for (int i = 0; i < ps.n; i++) /* the expert-local tensor: each rank's own values */
    if (routed(&ps.p[i], NULL)) TRY(clmoe_tensor_fill_uniform(ps.p[i].value, seed_of(rank, i), -1.0f, 1.0f));
  if (rank > 0) {
    const float one = 1.0f + (float)rank;
    set_first(&values[1], one); /* layer0/w_q[0] */
    set_first(&ps.p[4].m, one); /* layer1/w_o's m[0] */
    set_first(&values[3], one); /* the buffer layer0/bias[0] */
  }
  clmoe_grad_allreduce_opts o = {.is_local = routed};
  int differed = -1, again = -1;
  TRY(clmoe_dist_sync_replicas(mpi_dist, &ps, &o, &differed));
  TRY(clmoe_dist_sync_replicas(mpi_dist, &ps, &o, &again));
  int64_t bad = 0;
  const int want = size > 1 ? 3 : 0;
  if (differed != want || again != 0) {
    fprintf(stderr, "mpi_grads: rank %d: replicas: %d then %d tensors differed (want %d, 0): "
            "mismatch\n", rank, differed, again, want);
    bad++;
  }
  for (int i = 0; i < NP; i++) {
    const int64_t n = clmoe_tensor_numel(&values[i]);
    const int local = routed(&ps.p[i], NULL);
    float *got = malloc((size_t)n * sizeof *got);
    if (!got) mpi_die("malloc", CLMOE_ERR_OUT_OF_MEMORY);
    TRY(clmoe_tensor_read(&values[i], got, (size_t)n * sizeof *got));
    for (int64_t j = 0; j < n; j++) {
      const float want_v = clmoe_random_uniform(seed_of(local ? rank : 0, i), (uint64_t)j, -1.0f, 1.0f);
      if (memcmp(&got[j], &want_v, sizeof want_v) != 0) {
        fprintf(stderr, "mpi_grads: rank %d: replica %s[%lld] = %.9g, want %.9g: mismatch\n", rank,
                names[i], (long long)j, got[j], want_v);
        bad++;
        break;
      }
    }
    free(got);
  }
  const float m0 = get_first(&ps.p[4].m);
  if (m0 != 0.0f) {
    fprintf(stderr, "mpi_grads: rank %d: replica moment m[0] = %g, want 0: mismatch\n", rank, m0);
    bad++;
  }
  if (size > 1) {
    set_first(&values[0], 42.0f + (float)rank);
    TRY(clmoe_dist_broadcast_tensor(mpi_dist, &values[0], 1));
    const float got = get_first(&values[0]);
    if (got != 43.0f) {
      fprintf(stderr, "mpi_grads: rank %d: broadcast from rank 1 gave %g: mismatch\n", rank, got);
      bad++;
    }
  }
  clmoe_params_destroy(&ps);
  for (int i = 0; i < NP; i++) clmoe_tensor_destroy(&values[i]);
  return bad;
}

int main(int argc, char **argv)
{
  mpi_prog = "mpi_grads";
  clmoe_status st = clmoe_dist_init(&mpi_dist, &argc, &argv);
  if (st != CLMOE_OK) {
    fprintf(stderr, "mpi_grads: clmoe_dist_init: %s\n", clmoe_last_error());
    return 1;
  }
  const int mutate = argc > 1 && strcmp(argv[1], "--mutate") == 0;
  clmoe_ctx *ctx = NULL;
  TRY(clmoe_ctx_create(&ctx, NULL));
  int64_t bad = check_grads(ctx, mutate) + check_qb(ctx) + check_qb_ranges(ctx) + check_replicas(ctx);
  clmoe_pool_stats pool;
  clmoe_ctx_pool_stats(ctx, &pool);
  if (pool.in_use_bytes != 0) {
    fprintf(stderr, "mpi_grads: rank %d: %llu bytes of tensors not destroyed\n",
            clmoe_dist_rank(mpi_dist), (unsigned long long)pool.in_use_bytes);
    bad++;
  }
  clmoe_ctx_destroy(ctx);
  TRY(clmoe_dist_allreduce_sum_i64(mpi_dist, &bad, 1));
  const int rank = clmoe_dist_rank(mpi_dist), size = clmoe_dist_size(mpi_dist);
  if (rank == 0) {
    if (bad) fprintf(stderr, "mpi_grads: FAILED: %lld mismatches over %d rank(s)\n", (long long)bad, size);
    else printf("mpi_grads: OK %d rank%s\n", size, size == 1 ? "" : "s");
  }
  TRY(clmoe_dist_finalize(mpi_dist));
  return bad ? 1 : 0;
}
