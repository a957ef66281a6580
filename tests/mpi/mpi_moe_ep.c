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
 * renormalisation). --bf16: the layer as a bf16 training step hands it over (bf16 copies of
 * the weight matrices): the expert-parallel train forward and backward against the
 * single-rank bf16 layer (1e-4) and against the fp32 layer (bf16 tolerance, 2e-2), the
 * inference forward (stacks widened to fp32) against fp32. Prints "mpi_moe_ep: OK ..." on rank 0
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
/* --bf16: the expert-parallel bf16 layer against the single-rank bf16 layer (the same bf16
 * weights and roundings; an input a few fp32 ulps apart may round to the neighbouring bf16
 * value, 2^-8 relative of that element) and against the fp32 layer (bf16 tolerance). */
#define TOLERANCE_SAME_BF16 1e-4
#define TOLERANCE_BF16 2e-2


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
static int check_grads(const clmoe_moe_ep_layer *ep, clmoe_moe_grads *g, const reference *r, double tol,
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
    if (!(err <= tol)) {
      fprintf(stderr, "mpi_moe_ep: rank %d, %s: gradient %s relative error %g exceeds %g\n",
              clmoe_dist_rank(mpi_dist), name, grad_name[i], err, tol);
      bad = 1;
    }
    free(sum), free(got);
  }
  return bad;
}

/* The references a check compares with: the single-rank layer run as the expert-parallel
 * one runs (fp32; with --bf16 the same layer with bf16 weight copies, a bf16 training step)
 * within `tol`, and with --bf16 also the fp32 layer (r32) within bf16 tolerance. The bf16
 * inference forward (bf16 stacks widened to fp32, fp32 rows) is compared with r32 only. */
typedef struct refs {
  const reference *r, *r32;
  double tol;
} refs;

/* err[i] against its limit; returns 1 when over (NaN is over). */
static int over(const double *err, const double *tol, const char *const *what, int n, const char *name,
                double *worst)
{
  int bad = 0;
  for (int i = 0; i < n; i++) {
    if (!(err[i] <= *worst)) *worst = err[i];
    if (!(err[i] <= tol[i])) {
      fprintf(stderr, "mpi_moe_ep: rank %d, %s: %s relative error %g exceeds %g\n", clmoe_dist_rank(mpi_dist),
              name, what[i], err[i], tol[i]);
      bad = 1;
    }
  }
  return bad;
}

/* This rank's rows of a [TOKENS, d] result against a reference's. */
static double rows_error(const clmoe_tensor *t, const float *want, int64_t first, int64_t m)
{
  if (m == 0) return 0.0;
  const int64_t d = config.d;
  float *h = read_host(t);
  const double e = rel_error(h, want + first * d, m * d, want, TOKENS * d);
  free(h);
  return e;
}

/* One map: forward (inference and train mode) and backward on this rank's share against
 * the references. Returns 1 when anything of this rank is off. */
static int check(clmoe_ctx *ctx, const clmoe_moe_layer *full, const clmoe_expert_map *map,
                 const char *map_name, const refs *R, const char *mutation, double worst[2])
{
  const int rank = clmoe_dist_rank(mpi_dist);
  const int64_t d = config.d;
  const reference *r = R->r, *r32 = R->r32 ? R->r32 : R->r;
  char name[64];
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
  double err[5], tol[5];
  TRY(clmoe_moe_ep_forward(ctx, mpi_dist, &ep, &x, &y, NULL));
  err[0] = rows_error(&y, r32->y, first, m);
  clmoe_moe_ep_saved saved;
  clmoe_moe_grads g;
  TRY(clmoe_moe_ep_forward(ctx, mpi_dist, &ep, &x, &y, &saved));
  if (mutation && strcmp(mutation, "--mutate-saved") == 0 && m > 0) saved.out[0] += 1.0f;
  err[1] = rows_error(&y, r->y, first, m);
  err[3] = rows_error(&y, r32->y, first, m);
  TRY(clmoe_moe_ep_grads_create(ctx, &ep, &g));
  TRY(clmoe_moe_ep_backward(ctx, mpi_dist, &ep, &x, &saved, &dy, &g, &dx));
  err[2] = rows_error(&dx, r->dx, first, m);
  err[4] = rows_error(&dx, r32->dx, first, m);
  /* [0] against r (the inference forward: r32), [1] with --bf16 against r32 */
  static const char *const what[5] = {"y (train)", "dx", "y (inference)", "y (train)", "dx"};
  const double e[5] = {err[1], err[2], err[0], err[3], err[4]};
  tol[0] = tol[1] = R->tol, tol[2] = R->r32 ? TOLERANCE_BF16 : R->tol, tol[3] = tol[4] = TOLERANCE_BF16;
  snprintf(name, sizeof name, "%s map%s", map_name, R->r32 ? " (bf16)" : "");
  int bad = over(e, tol, what, R->r32 ? 2 : 3, name, &worst[0]);
  bad |= check_grads(&ep, &g, r, R->tol, name, &worst[0]);
  if (R->r32) {
    snprintf(name, sizeof name, "%s map (bf16 against fp32)", map_name);
    bad |= over(e + 2, tol + 2, what + 2, 3, name, &worst[1]);
    bad |= check_grads(&ep, &g, R->r32, TOLERANCE_BF16, name, &worst[1]);
  }
  clmoe_moe_grads_destroy(&g);
  clmoe_moe_ep_saved_destroy(&saved);
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&dy), clmoe_tensor_destroy(&dx);
  clmoe_moe_ep_layer_destroy(&ep);
  return bad;
}

/* The layer with bf16 copies of its weight matrices in place of the fp32 ones (what a bf16
 * training step hands the layer; the gain and the bias stay fp32): *copy shares full's
 * other tensors, and clmoe_moe_layer_destroy must not see it (bf16_layer_destroy). */
static clmoe_tensor *bf16_matrix(clmoe_moe_layer *L, int i)
{
  clmoe_tensor *t[9] = {&L->w_router, &L->w_down, &L->w_up, &L->w_gate, &L->w_upp, &L->w_dn,
                        &L->shared.w_gate, &L->shared.w_upp, &L->shared.w_dn};
  return t[i];
}

static void bf16_layer(clmoe_ctx *ctx, const clmoe_moe_layer *full, clmoe_moe_layer *copy)
{
  *copy = *full;
  for (int i = 0; i < 9; i++) {
    clmoe_tensor *c = bf16_matrix(copy, i);
    const clmoe_tensor *f = bf16_matrix((clmoe_moe_layer *)full, i);
    if (!f->buf) continue;
    memset(c, 0, sizeof *c);
    TRY(clmoe_tensor_create(ctx, c, CLMOE_BF16, f->ndim, f->shape));
    TRY(clmoe_tensor_copy(c, f));
  }
}

static void bf16_layer_destroy(const clmoe_moe_layer *full, clmoe_moe_layer *copy)
{
  for (int i = 0; i < 9; i++)
    if (bf16_matrix((clmoe_moe_layer *)full, i)->buf) clmoe_tensor_destroy(bf16_matrix(copy, i));
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
  int bf16 = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--bf16") == 0) {
      bf16 = 1;
      continue;
    }
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
  clmoe_moe_layer full16; /* --bf16: the layer a bf16 training step runs */
  reference ref, ref32;
  if (bf16) bf16_layer(ctx, &full, &full16);
  reference_compute(ctx, bf16 ? &full16 : &full, &ref);
  if (bf16) reference_compute(ctx, &full, &ref32);
  const refs R = {&ref, bf16 ? &ref32 : NULL, bf16 ? TOLERANCE_SAME_BF16 : TOLERANCE};
  const clmoe_moe_layer *use = bf16 ? &full16 : &full;

  clmoe_expert_map *even = NULL, *balanced = NULL;
  TRY(clmoe_expert_map_even(E, size, &even));
  double load[64];
  for (int e = 0; e < E; e++) load[e] = 100.0 / (e + 1);
  int slots = even->slots + 1 > E ? E : even->slots + 1;
  TRY(clmoe_expert_map_balance(load, E, size, slots, &balanced));
  double worst[2] = {0.0, 0.0}; /* this rank's largest relative errors: against ref, ref32 */
  int64_t bad = check(ctx, use, even, "even", &R, mutation, worst);
  bad += check(ctx, use, balanced, "balanced", &R, mutation, worst);

  clmoe_expert_map_destroy(even);
  clmoe_expert_map_destroy(balanced);
  reference_free(&ref);
  if (bf16) reference_free(&ref32), bf16_layer_destroy(&full, &full16);
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
  if (bad == 0 && clmoe_dist_rank(mpi_dist) == 0 && !bf16)
    printf("mpi_moe_ep: OK %d rank%s, forward and backward, relative error %.3g on rank 0 "
           "(tolerance %g)\n", size, size == 1 ? "" : "s", worst[0], TOLERANCE);
  else if (bad == 0 && clmoe_dist_rank(mpi_dist) == 0)
    printf("mpi_moe_ep: OK %d rank%s, forward and backward in bf16, relative error %.3g against the "
           "single-rank bf16 layer (tolerance %g), %.3g against fp32 (tolerance %g) on rank 0\n", size,
           size == 1 ? "" : "s", worst[0], TOLERANCE_SAME_BF16, worst[1], TOLERANCE_BF16);
  else if (bad && clmoe_dist_rank(mpi_dist) == 0)
    printf("mpi_moe_ep: FAILED on %lld check%s\n", (long long)bad, bad == 1 ? "" : "s");
  TRY(clmoe_dist_finalize(mpi_dist));
  return bad ? 1 : 0;
}
