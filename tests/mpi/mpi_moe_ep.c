/* Run by tests/mpi/test_moe_ep.sh under mpirun (and once without it): the expert-parallel MoE
 * layer (include/clmoe/moe_ep.h) on N ranks equals the single-rank clmoe_moe_forward / _backward on
 * the same weights and the whole batch. Every rank builds the same whole layer (same seed, a
 * random selection bias so that it matters), the same whole batch and output gradient, and
 * computes the single-rank output, input gradient and weight gradients. Then it runs the
 * expert-parallel forward (inference and train mode) and backward on its own contiguous
 * share of the tokens (shares of different sizes; on 3 or more ranks rank 1 gets none) and
 * compares its rows of y and dx; the weight gradients are summed over the ranks (dense: the
 * data-parallel sum; experts: each rank adds its local experts' into the whole [E, ...]
 * tensor) and compared whole. Error: max |got - ref| / max |ref| per tensor <= 1e-5 (fp32);
 * NaN fails. Both the even map and a balanced map with replicas are checked.
 * --mutate: every rank takes its experts' weights from the next expert (a wrong expert
 * offset); --mutate-saved: the saved expert output of each rank's first routed copy is off
 * by 1 (only the backward sees it). Both must fail. --kimi: the layer in the Kimi Linear form
 * (no latent projection, SwiGLU, 2 groups of 11 experts of which 1 is kept, p = 2 s without
 * renormalisation). Prints "mpi_moe_ep: OK ..." on rank 0
 * when every rank passed; exits non-zero naming the rank otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/clmoe.h"
#include "mpi_common.h"

#define TOKENS 45
#define NGRAD 10 /* the layer's gradient tensors */
#define TOLERANCE 1e-5


/* The small layer: E not divisible by 3 or 4, k = 3, shared experts on (--kimi changes it). */
static clmoe_moe_config config = {
  .d = 24, .latent = 16, .n_experts = 22, .top_k = 3, .expert_ff = 12,
  .n_shared = 1, .shared_ff = 8, .balance = CLMOE_MOE_BALANCE_NONE,
};

/* Weight of a rank's share: unequal, and on 3 or more ranks rank 1 gets no tokens. */
static int64_t weight(int rank, int size) { return size >= 3 && rank == 1 ? 0 : rank + 2; }

/* The first token and the number of tokens of `rank`. */
static void share(int rank, int size, int64_t *first, int64_t *count)
{
  int64_t w = 0, start = 0;
  for (int r = 0; r < size; r++) w += weight(r, size);
  for (int r = 0; r < rank; r++) start += TOKENS * weight(r, size) / w;
  int64_t n = rank == size - 1 ? TOKENS - start : TOKENS * weight(rank, size) / w;
  *first = start, *count = n;
}

/* Overwrites each local expert with the next expert's weights (a wrong offset). */
static void mutate(clmoe_moe_ep_layer *ep, const clmoe_moe_layer *full)
{
  const int64_t f = config.expert_ff, l = config.latent > 0 ? config.latent : config.d, E = config.n_experts;
  const clmoe_tensor *src[3] = {&full->w_gate, &full->w_upp, &full->w_dn};
  clmoe_tensor *dst[3] = {&ep->experts.w_gate, &ep->experts.w_upp, &ep->experts.w_dn};
  const int64_t shape[2] = {f, l};
  for (int64_t i = 0; i < ep->n_local; i++)
    for (int t = 0; t < 3; t++) {
      clmoe_tensor s, d;
      TRY(clmoe_tensor_view(src[t], &s, 2, shape, ((ep->local_expert[i] + 1) % E) * f * l));
      TRY(clmoe_tensor_view(dst[t], &d, 2, shape, i * f * l));
      TRY(clmoe_tensor_copy(&d, &s));
    }
}

/* The single-rank results on the whole batch (host, the same on every rank). */
typedef struct reference {
  float *x, *dy, *y, *dx; /* [TOKENS, d] */
  float *grad[NGRAD];     /* the whole layer's gradients, in grad_list order */
  int64_t grad_n[NGRAD];
} reference;

static const char *const grad_name[NGRAD] = {"w_router", "w_down", "w_gate", "w_upp", "w_dn",
                                             "norm_gain", "w_up", "shared.w_gate",
                                             "shared.w_upp", "shared.w_dn"};

static void grad_list(clmoe_moe_grads *g, clmoe_tensor *t[NGRAD])
{
  t[0] = &g->w_router, t[1] = &g->w_down, t[2] = &g->w_gate, t[3] = &g->w_upp, t[4] = &g->w_dn;
  t[5] = &g->norm_gain, t[6] = &g->w_up, t[7] = &g->shared.w_gate, t[8] = &g->shared.w_upp;
  t[9] = &g->shared.w_dn;
}

static float *read_host(const clmoe_tensor *t)
{
  float *h = malloc(clmoe_tensor_bytes(t) > 0 ? clmoe_tensor_bytes(t) : 1);
  if (!h) mpi_die("malloc", CLMOE_ERR_OUT_OF_MEMORY);
  TRY(clmoe_tensor_read(t, h, clmoe_tensor_bytes(t)));
  return h;
}

static void reference_compute(clmoe_ctx *ctx, const clmoe_moe_layer *full, reference *r)
{
  const int64_t shape[2] = {TOKENS, config.d};
  clmoe_tensor x = {0}, y = {0}, dy = {0}, dx = {0}, *gt[NGRAD];
  TRY(clmoe_tensor_create(ctx, &x, CLMOE_F32, 2, shape));
  TRY(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, shape));
  TRY(clmoe_tensor_create(ctx, &dy, CLMOE_F32, 2, shape));
  TRY(clmoe_tensor_create(ctx, &dx, CLMOE_F32, 2, shape));
  TRY(clmoe_tensor_fill_normal(&x, 808, 0.0f, 1.0f));
  TRY(clmoe_tensor_fill_normal(&dy, 809, 0.0f, 1.0f));
  clmoe_moe_saved saved;
  clmoe_moe_grads g;
  TRY(clmoe_moe_forward(ctx, full, &x, &y, &saved));
  TRY(clmoe_moe_grads_create(ctx, full, &g));
  TRY(clmoe_moe_backward(ctx, full, &x, &saved, &dy, &g, &dx));
  r->x = read_host(&x), r->dy = read_host(&dy), r->y = read_host(&y), r->dx = read_host(&dx);
  grad_list(&g, gt);
  for (int i = 0; i < NGRAD; i++) { /* latent 0: no w_down, norm_gain, w_up */
    r->grad[i] = gt[i]->buf ? read_host(gt[i]) : NULL;
    r->grad_n[i] = gt[i]->buf ? clmoe_tensor_numel(gt[i]) : 0;
  }
  clmoe_moe_grads_destroy(&g);
  clmoe_moe_saved_destroy(&saved);
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&dy), clmoe_tensor_destroy(&dx);
}

static void reference_free(reference *r)
{
  free(r->x), free(r->dy), free(r->y), free(r->dx);
  for (int i = 0; i < NGRAD; i++) free(r->grad[i]);
}

/* max |got - want| / max |whole| over n values (NaN when got has one or whole is 0). */
static double rel_error(const float *got, const float *want, int64_t n, const float *whole, int64_t wn)
{
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < wn; i++) den = fmax(den, fabs(whole[i]));
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]);
    if (isnan(e)) return NAN;
    num = fmax(num, e);
  }
  return den > 0.0 ? num / den : NAN;
}

/* Sums the gradients of every rank's part into the whole layer's shapes and compares. */
static int check_grads(const clmoe_moe_ep_layer *ep, clmoe_moe_grads *g, const reference *r,
                       const char *name, double *worst)
{
  clmoe_tensor *gt[NGRAD];
  grad_list(g, gt);
  int bad = 0;
  for (int i = 0; i < NGRAD; i++) {
    const int64_t n = r->grad_n[i];
    double *sum = calloc((size_t)(n > 0 ? n : 1), sizeof *sum);
    float *got = malloc((size_t)(n > 0 ? n : 1) * sizeof *got);
    if (!sum || !got) mpi_die("malloc", CLMOE_ERR_OUT_OF_MEMORY);
    if (gt[i]->buf) {
      float *mine = read_host(gt[i]);
      const int expert = i >= 2 && i <= 4;
      const int64_t per = expert ? n / config.n_experts : n; /* one expert's, or all */
      for (int64_t j = 0; j < (expert ? ep->n_local : 1); j++) {
        const int64_t to = expert ? ep->local_expert[j] * per : 0;
        for (int64_t c = 0; c < per; c++) sum[to + c] += mine[j * per + c];
      }
      free(mine);
    }
    TRY(clmoe_dist_allreduce_sum_f64(mpi_dist, sum, (size_t)n));
    for (int64_t c = 0; c < n; c++) got[c] = (float)sum[c];
    double err = n > 0 ? rel_error(got, r->grad[i], n, r->grad[i], n) : 0.0;
    if (!(err <= *worst)) *worst = err;
    if (!(err <= TOLERANCE)) {
      fprintf(stderr, "mpi_moe_ep: rank %d, %s map: gradient %s relative error %g exceeds %g\n",
              clmoe_dist_rank(mpi_dist), name, grad_name[i], err, TOLERANCE);
      bad = 1;
    }
    free(sum), free(got);
  }
  return bad;
}

/* One map: forward (inference and train mode) and backward on this rank's share against
 * the reference. Returns 1 when anything of this rank is off. */
static int check(clmoe_ctx *ctx, const clmoe_moe_layer *full, const clmoe_expert_map *map,
                 const char *name, const reference *r, const char *mutation, double *worst)
{
  const int rank = clmoe_dist_rank(mpi_dist);
  const int64_t d = config.d;
  int64_t first, m;
  share(rank, clmoe_dist_size(mpi_dist), &first, &m);
  clmoe_moe_ep_layer ep;
  TRY(clmoe_moe_ep_layer_from_full(ctx, full, map, rank, &ep));
  if (mutation && strcmp(mutation, "--mutate") == 0) mutate(&ep, full);
  clmoe_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
  const int64_t shape[2] = {m, d};
  TRY(clmoe_tensor_create(ctx, &x, CLMOE_F32, 2, shape));
  TRY(clmoe_tensor_create(ctx, &y, CLMOE_F32, 2, shape));
  TRY(clmoe_tensor_create(ctx, &dy, CLMOE_F32, 2, shape));
  TRY(clmoe_tensor_create(ctx, &dx, CLMOE_F32, 2, shape));
  if (m > 0) {
    TRY(clmoe_tensor_write(&x, r->x + first * d, (size_t)(m * d) * sizeof(float)));
    TRY(clmoe_tensor_write(&dy, r->dy + first * d, (size_t)(m * d) * sizeof(float)));
  }
  const int64_t whole = TOKENS * d;
  double err[3];
  TRY(clmoe_moe_ep_forward(ctx, mpi_dist, &ep, &x, &y, NULL));
  float *yh = read_host(&y);
  err[0] = m > 0 ? rel_error(yh, r->y + first * d, m * d, r->y, whole) : 0.0;
  free(yh);
  clmoe_moe_ep_saved saved;
  clmoe_moe_grads g;
  TRY(clmoe_moe_ep_forward(ctx, mpi_dist, &ep, &x, &y, &saved));
  if (mutation && strcmp(mutation, "--mutate-saved") == 0 && m > 0) saved.out[0] += 1.0f;
  yh = read_host(&y);
  err[1] = m > 0 ? rel_error(yh, r->y + first * d, m * d, r->y, whole) : 0.0;
  free(yh);
  TRY(clmoe_moe_ep_grads_create(ctx, &ep, &g));
  TRY(clmoe_moe_ep_backward(ctx, mpi_dist, &ep, &x, &saved, &dy, &g, &dx));
  float *dxh = read_host(&dx);
  err[2] = m > 0 ? rel_error(dxh, r->dx + first * d, m * d, r->dx, whole) : 0.0;
  free(dxh);
  static const char *const what[3] = {"y (inference)", "y (train)", "dx"};
  int bad = 0;
  for (int i = 0; i < 3; i++) {
    if (!(err[i] <= *worst)) *worst = err[i];
    if (!(err[i] <= TOLERANCE)) {
      fprintf(stderr, "mpi_moe_ep: rank %d, %s map: %s relative error %g exceeds %g\n", rank, name,
              what[i], err[i], TOLERANCE);
      bad = 1;
    }
  }
  bad |= check_grads(&ep, &g, r, name, worst);
  clmoe_moe_grads_destroy(&g);
  clmoe_moe_ep_saved_destroy(&saved);
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&dy), clmoe_tensor_destroy(&dx);
  clmoe_moe_ep_layer_destroy(&ep);
  return bad;
}

int main(int argc, char **argv)
{
  mpi_prog = "mpi_moe_ep";
  clmoe_status st = clmoe_dist_init(&mpi_dist, &argc, &argv);
  if (st != CLMOE_OK) {
    fprintf(stderr, "mpi_moe_ep: clmoe_dist_init: %s\n", clmoe_last_error());
    return 1;
  }
  const char *mutation = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--kimi") != 0) {
      mutation = argv[i];
      continue;
    }
    config.latent = 0, config.glu = CLMOE_GLU_SWIGLU, config.groups = 2, config.topk_groups = 1;
    config.no_renormalize = 1, config.routed_scale = 2.0f;
  }
  const int size = clmoe_dist_size(mpi_dist), E = (int)config.n_experts;
  clmoe_ctx *ctx = NULL;
  TRY(clmoe_ctx_create(&ctx, NULL));
  clmoe_moe_layer full;
  TRY(clmoe_moe_layer_create(ctx, &full, &config));
  TRY(clmoe_moe_layer_init(&full, 8, 0.3f));
  TRY(clmoe_tensor_fill_uniform(&full.bias, 81, -0.1f, 0.1f));
  reference ref;
  reference_compute(ctx, &full, &ref);

  clmoe_expert_map *even = NULL, *balanced = NULL;
  TRY(clmoe_expert_map_even(E, size, &even));
  double load[64];
  for (int e = 0; e < E; e++) load[e] = 100.0 / (e + 1);
  int slots = even->slots + 1 > E ? E : even->slots + 1;
  TRY(clmoe_expert_map_balance(load, E, size, slots, &balanced));
  double worst = 0.0; /* this rank's largest relative error */
  int64_t bad = check(ctx, &full, even, "even", &ref, mutation, &worst);
  bad += check(ctx, &full, balanced, "balanced", &ref, mutation, &worst);

  clmoe_expert_map_destroy(even);
  clmoe_expert_map_destroy(balanced);
  reference_free(&ref);
  clmoe_moe_layer_destroy(&full);
  clmoe_pool_stats pool;
  clmoe_ctx_pool_stats(ctx, &pool); /* every tensor given back */
  if (pool.in_use_bytes != 0) {
    fprintf(stderr, "mpi_moe_ep: rank %d: %llu bytes of tensors not destroyed\n", clmoe_dist_rank(mpi_dist),
            (unsigned long long)pool.in_use_bytes);
    bad++;
  }
  clmoe_ctx_destroy(ctx);
  TRY(clmoe_dist_allreduce_sum_i64(mpi_dist, &bad, 1));
  if (bad == 0 && clmoe_dist_rank(mpi_dist) == 0)
    printf("mpi_moe_ep: OK %d rank%s, forward and backward, relative error %.3g on rank 0 "
           "(tolerance %g)\n", size, size == 1 ? "" : "s", worst, TOLERANCE);
  else if (bad && clmoe_dist_rank(mpi_dist) == 0)
    printf("mpi_moe_ep: FAILED on %lld check%s\n", (long long)bad, bad == 1 ? "" : "s");
  TRY(clmoe_dist_finalize(mpi_dist));
  return bad ? 1 : 0;
}
