/* Run by tests/mpi/test_gen_weights.sh under mpirun (and once without it): generation with
 * bf16 weights under expert parallelism (clmoe_gen_load_weights with a dist, lib/generate/).
 * Rank 0 writes a checkpoint of the tiny preset with random weights (a training model,
 * fp32); then every rank
 *  1. loads its part of the model with bf16 matrices in a fresh context: every matrix
 *     parameter, its rows of the expert stacks included, is bf16, and the context's peak
 *     device bytes in use and held by the pool stay within that part's own size (2 bytes a
 *     matrix element, 4 the rest, plus the pool's size-class rounding), a bound below the
 *     part's fp32 size;
 *  2. finds that part equal, to the bit, to clmoe_gen_load_ep + clmoe_gen_set_weights;
 *  3. prefills two prompts and decodes STEPS greedy tokens (rank 0's, fed to every rank)
 *     with it, and the same with one process's model in bf16 (clmoe_gen_load_weights
 *     without a dist) on its own: the greedy tokens are the same and every logit agrees
 *     within TOLERANCE (test_rel_err's measure: |a - b| / (|b| + rms b); the same bf16
 *     weights, sums in other orders); NaN fails.
 * --hf DIR: the same for a Hugging Face Kimi Linear checkpoint directory instead of the
 * written checkpoint (clmoe_hf_load_ep_weights, clmoe_hf_load_weights).
 * --fp32-reference: the one-process model keeps fp32 weights, which the comparison must
 * catch (bf16 rounding moves the logits by about 1e-2). Prints "mpi_gen_weights: OK ..." on
 * rank 0 when every rank passed; exits non-zero naming the rank otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/clmoe.h"
#include "mpi_common.h"

#define NSEQ 2
#define STEPS 6
#define TOLERANCE 1e-4

/* The largest |a - b| / (|b| + rms(b)) over n numbers; infinity for NaN or Inf. */
static double rel_err(const float *a, const float *b, int64_t n)
{
  double ss = 0.0, worst = 0.0;
  for (int64_t i = 0; i < n; i++) ss += (double)b[i] * b[i];
  const double rms = sqrt(ss / (double)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
    const double e = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + rms);
    worst = e > worst ? e : worst;
  }
  return worst;
}

/* Rank 0 writes a tiny-preset training model with random weights and its config. */
static void write_checkpoint(const char *path)
{
  if (clmoe_dist_rank(mpi_dist) == 0) {
    clmoe_ctx *ctx = NULL;
    clmoe_config cfg;
    clmoe_model *m = NULL;
    TRY(clmoe_ctx_create(&ctx, NULL));
    TRY(clmoe_config_preset("tiny", &cfg));
    TRY(clmoe_model_create(ctx, &cfg, &m));
    TRY(clmoe_model_init(m, 5));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) mpi_die("open_memstream", CLMOE_ERR_OUT_OF_MEMORY);
    clmoe_config_write(&cfg, f);
    fclose(f);
    clmoe_ckpt_meta meta = {0};
    TRY(clmoe_ckpt_meta_set(&meta, "config", text));
    TRY(clmoe_params_save(clmoe_model_params(m), path, &meta));
    clmoe_ckpt_meta_free(&meta);
    free(text);
    clmoe_model_destroy(m);
    clmoe_ctx_destroy(ctx);
  }
  TRY(clmoe_dist_barrier(mpi_dist));
}

/* 1. This rank's part in bf16: matrices bf16, peak within its own size. Returns failures. */
static int64_t check_part(clmoe_ctx *ctx, clmoe_model *m)
{
  clmoe_params *ps = clmoe_model_params(m);
  double mat = 0.0, other = 0.0;
  int64_t bad = 0, rows = 0;
  for (int i = 0; i < ps->n; i++) {
    const clmoe_tensor *v = ps->p[i].value;
    const char *base = strrchr(ps->p[i].name, '/');
    base = base ? base + 1 : ps->p[i].name;
    const int matrix = ps->p[i].trainable && (!strcmp(ps->p[i].name, "head") || !strncmp(base, "w_", 2));
    if (matrix != (v->dtype == CLMOE_BF16)) {
      fprintf(stderr, "mpi_gen_weights: rank %d: parameter %s is %s\n", clmoe_dist_rank(mpi_dist), ps->p[i].name,
              clmoe_dtype_name(v->dtype));
      bad++;
    }
    rows += ps->p[i].rows != NULL && v->dtype == CLMOE_BF16;
    if (v->dtype == CLMOE_BF16) mat += (double)clmoe_tensor_numel(v);
    else other += (double)clmoe_tensor_bytes(v);
  }
  if (rows == 0) {
    fprintf(stderr, "mpi_gen_weights: rank %d: no bf16 expert rows\n", clmoe_dist_rank(mpi_dist));
    bad++;
  }
  clmoe_pool_stats st;
  clmoe_ctx_pool_stats(ctx, &st);
  const double bound = 1.125 * (2.0 * mat + other) + 256.0 * ps->n, fp32 = 4.0 * mat + other;
  if (!(bound < fp32) || (double)st.peak_in_use_bytes > bound || (double)st.device_bytes > bound) {
    fprintf(stderr, "mpi_gen_weights: rank %d: peak in use %llu B, held %llu B; bound %.0f B (fp32 part %.0f B)\n",
            clmoe_dist_rank(mpi_dist), (unsigned long long)st.peak_in_use_bytes,
            (unsigned long long)st.device_bytes, bound, fp32);
    bad++;
  }
  return bad;
}

/* 2. The same registry entries, dtypes and bytes. */
static int64_t same_params(clmoe_model *a, clmoe_model *b)
{
  clmoe_params *pa = clmoe_model_params(a), *pb = clmoe_model_params(b);
  if (pa->n != pb->n) return 1;
  int64_t bad = 0;
  for (int i = 0; i < pa->n; i++) {
    const clmoe_tensor *x = pa->p[i].value, *y = pb->p[i].value;
    const size_t n = clmoe_tensor_bytes(x);
    unsigned char *hx = malloc(n + 1), *hy = malloc(n + 1);
    if (!hx || !hy) mpi_die("malloc", CLMOE_ERR_OUT_OF_MEMORY);
    int differ = x->dtype != y->dtype || n != clmoe_tensor_bytes(y);
    if (!differ) {
      TRY(clmoe_tensor_read(x, hx, n));
      TRY(clmoe_tensor_read(y, hy, n));
      differ = memcmp(hx, hy, n) != 0;
    }
    if (differ)
      fprintf(stderr, "mpi_gen_weights: rank %d: %s differs from clmoe_gen_load_ep + clmoe_gen_set_weights\n",
              clmoe_dist_rank(mpi_dist), pa->p[i].name);
    bad += differ;
    free(hx), free(hy);
  }
  return bad;
}

/* 3. Prefill and STEPS greedy steps: logits [(1 + STEPS) NSEQ, V] and tokens [STEPS NSEQ].
 * share: the tokens are rank 0's (summed into zeros elsewhere), as clmoe-generate feeds them. */
static void run(clmoe_model *m, int share, float *logits, int32_t *tokens)
{
  const int64_t V = clmoe_model_config(m)->vocab;
  static const char *prompts[NSEQ] = {"The cat sat on", "0123456789 0123"};
  int32_t buf[NSEQ][32];
  const int32_t *p[NSEQ];
  int64_t len[NSEQ];
  for (int s = 0; s < NSEQ; s++) {
    len[s] = (int64_t)strlen(prompts[s]);
    for (int64_t i = 0; i < len[s]; i++) buf[s][i] = (unsigned char)prompts[s][i];
    p[s] = buf[s];
  }
  clmoe_gen_state *g = NULL;
  TRY(clmoe_gen_state_create(m, NSEQ, NULL, &g));
  TRY(clmoe_gen_prefill(g, p, len, logits, NULL));
  for (int k = 0; k < STEPS; k++) {
    int64_t next[NSEQ];
    int32_t t[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
      const float *l = logits + ((int64_t)k * NSEQ + s) * V;
      int64_t best = 0;
      for (int64_t v = 1; v < V; v++) best = l[v] > l[best] ? v : best;
      next[s] = share && clmoe_dist_rank(mpi_dist) != 0 ? 0 : best;
    }
    if (share) TRY(clmoe_dist_allreduce_sum_i64(mpi_dist, next, NSEQ));
    for (int s = 0; s < NSEQ; s++) t[s] = (int32_t)next[s], tokens[k * NSEQ + s] = t[s];
    TRY(clmoe_gen_step(g, t, logits + ((int64_t)(k + 1) * NSEQ) * V));
  }
  clmoe_gen_state_destroy(g);
}

int main(int argc, char **argv)
{
  mpi_prog = "mpi_gen_weights";
  clmoe_status st = clmoe_dist_init(&mpi_dist, &argc, &argv);
  if (st != CLMOE_OK) {
    fprintf(stderr, "mpi_gen_weights: clmoe_dist_init: %s\n", clmoe_last_error());
    return 1;
  }
  const char *path = NULL, *hf = NULL;
  int fp32_reference = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--fp32-reference")) fp32_reference = 1;
    else if (!strcmp(argv[i], "--hf") && i + 1 < argc) hf = argv[++i];
    else path = argv[i];
  }
  if (!path && !hf) {
    fprintf(stderr, "usage: mpi_gen_weights CHECKPOINT | --hf DIR [--fp32-reference]\n");
    clmoe_dist_abort(mpi_dist, 2);
    return 2;
  }
  if (!hf) write_checkpoint(path);
  clmoe_ctx *ctx = NULL;
  TRY(clmoe_ctx_create(&ctx, NULL));
  clmoe_model *ep = NULL, *converted = NULL, *one = NULL;
  const clmoe_dtype ref = fp32_reference ? CLMOE_F32 : CLMOE_BF16;
  if (hf) TRY(clmoe_hf_load_ep_weights(ctx, hf, mpi_dist, NULL, CLMOE_BF16, &ep));
  else TRY(clmoe_gen_load_weights(ctx, path, mpi_dist, NULL, CLMOE_BF16, &ep, NULL));
  int64_t bad = check_part(ctx, ep);
  if (hf) TRY(clmoe_hf_load_ep(ctx, hf, mpi_dist, NULL, &converted));
  else TRY(clmoe_gen_load_ep(ctx, path, mpi_dist, NULL, &converted, NULL));
  TRY(clmoe_gen_set_weights(converted, CLMOE_BF16));
  bad += same_params(ep, converted);
  clmoe_model_destroy(converted);

  if (hf) TRY(clmoe_hf_load_weights(ctx, hf, ref, &one));
  else TRY(clmoe_gen_load_weights(ctx, path, NULL, NULL, ref, &one, NULL));
  const int64_t V = clmoe_model_config(ep)->vocab, n = (int64_t)(1 + STEPS) * NSEQ * V;
  float *le = malloc((size_t)n * sizeof *le), *lo = malloc((size_t)n * sizeof *lo);
  int32_t te[STEPS * NSEQ], to[STEPS * NSEQ];
  if (!le || !lo) mpi_die("malloc", CLMOE_ERR_OUT_OF_MEMORY);
  run(ep, 1, le, te);
  run(one, 0, lo, to);
  const double err = rel_err(le, lo, n);
  if (!(err <= TOLERANCE)) {
    fprintf(stderr, "mpi_gen_weights: rank %d: logits relative error %.3g (tolerance %g)\n", clmoe_dist_rank(mpi_dist),
            err, TOLERANCE);
    bad++;
  }
  if (memcmp(te, to, sizeof te)) {
    fprintf(stderr, "mpi_gen_weights: rank %d: the greedy tokens differ from one process's\n",
            clmoe_dist_rank(mpi_dist));
    bad++;
  }
  free(le), free(lo);
  clmoe_model_destroy(one);
  clmoe_model_destroy(ep);
  clmoe_pool_stats pool;
  clmoe_ctx_pool_stats(ctx, &pool); /* every tensor given back */
  if (pool.in_use_bytes != 0) {
    fprintf(stderr, "mpi_gen_weights: rank %d: %llu bytes of tensors not destroyed\n", clmoe_dist_rank(mpi_dist),
            (unsigned long long)pool.in_use_bytes);
    bad++;
  }
  clmoe_ctx_destroy(ctx);
  const int size = clmoe_dist_size(mpi_dist);
  double worst = err;
  TRY(clmoe_dist_allreduce_sum_i64(mpi_dist, &bad, 1));
  if (bad == 0 && clmoe_dist_rank(mpi_dist) == 0)
    printf("mpi_gen_weights: OK %d rank%s, bf16 expert stacks, greedy tokens and logits of one process, relative "
           "error %.3g on rank 0 (tolerance %g)\n", size, size == 1 ? "" : "s", worst, TOLERANCE);
  else if (bad && clmoe_dist_rank(mpi_dist) == 0)
    printf("mpi_gen_weights: FAILED on %lld check%s\n", (long long)bad, bad == 1 ? "" : "s");
  TRY(clmoe_dist_finalize(mpi_dist));
  return bad ? 1 : 0;
}
