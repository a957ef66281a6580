/* Inference: sampling a token from logits (include/clmoe/generate.h), on the host and on the
 * device. The arithmetic (keys, integer weights, top-p and the draw) is
 * kernels_cl/generate/gen_sample_math.cl's, included here and built into gen_sample.cl, so
 * both give the same token: here the candidates are found by selecting the best keys with a
 * heap and sorting them, there by a radix select of the threshold key; with every weight an
 * integer, both sums are exact and the sets, totals and draws agree bit for bit. */
#include "generate_internal.h"
#include "clmoe/paths.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_cl/runtime/random.cl"
#include "kernels_cl/generate/gen_sample_math.cl"

clmoe_status clmoe__gen_sampling_plan(const clmoe_gen_sampling *sp, int64_t V, const char *op, gen_sampling_plan *pl)
{
  if (!sp) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: sampling options are required", op);
  if (!(sp->temperature >= 0.0) || !(sp->top_p >= 0.0 && sp->top_p <= 1.0) || sp->top_k < 0)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: temperature %g must be >= 0, top_p %g in [0, 1], top_k %lld "
                        ">= 0", op, sp->temperature, sp->top_p, (long long)sp->top_k);
  memset(pl, 0, sizeof *pl);
  pl->greedy = sp->greedy || sp->temperature == 0.0 || sp->top_k == 1;
  pl->keep = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
  if (sp->top_p > 0.0 && sp->top_p < 1.0) pl->pq = (uint64_t)(sp->top_p * 4294967296.0 + 0.5);
  double inv = 1.0 / sp->temperature;
  inv = inv > FLT_MAX ? FLT_MAX : inv < FLT_MIN ? FLT_MIN : inv; /* a normal float */
  pl->inv_t = (float)inv;
  pl->scale = smp_scale((uint64_t)V);
  pl->seed = sp->seed;
  return CLMOE_OK;
}

/* Restores the heap below r: every parent key is below its children's (the root: the
 * worst key kept). */
static void sift(uint64_t *c, int64_t m, int64_t r)
{
  for (;;) {
    int64_t w = r, a = 2 * r + 1, b = a + 1;
    if (a < m && c[a] < c[w]) w = a;
    if (b < m && c[b] < c[w]) w = b;
    if (w == r) return;
    const uint64_t t = c[r];
    c[r] = c[w], c[w] = t;
    r = w;
  }
}

static int by_key(const void *a, const void *b) /* descending */
{
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x < y) - (x > y);
}

/* The m best keys of key[V], best first. */
static void best_keys(const uint64_t *key, int64_t V, int64_t m, uint64_t *c)
{
  memcpy(c, key, (size_t)m * sizeof *c);
  for (int64_t r = m / 2 - 1; r >= 0; r--) sift(c, m, r);
  for (int64_t i = m; i < V; i++)
    if (key[i] > c[0]) {
      c[0] = key[i];
      sift(c, m, 0);
    }
  qsort(c, (size_t)m, sizeof *c, by_key);
}

static int32_t key_index(uint64_t k) { return (int32_t)(0xffffffffu - (uint32_t)k); }

/* The candidates' threshold K (keys >= K) of a row without NaN (key, weight [V]), or
 * CLMOE_ERR_OUT_OF_MEMORY. The keys are walked from the best down; only a prefix is ever
 * needed (top-k's last, top-p's cut), so the m best are selected and sorted, and m grows
 * 16-fold when top-p's walk runs past them (a flat tail). */
static clmoe_status threshold(const gen_sampling_plan *pl, const uint64_t *key, const uint64_t *q, int64_t V,
                              uint64_t *K)
{
  *K = 0;
  if (pl->keep == V && !pl->pq) return CLMOE_OK;
  uint64_t total = 0; /* the top-k set's weight */
  if (pl->keep == V)
    for (int64_t i = 0; i < V; i++) total += q[i];
  uint64_t *c = NULL;
  for (int64_t m = pl->keep < V || !pl->pq || V < 256 ? pl->keep : 256;; m = 16 * m < pl->keep ? 16 * m : pl->keep) {
    free(c);
    if (!(c = malloc((size_t)m * sizeof *c))) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (sampling)");
    best_keys(key, V, m, c);
    if (pl->keep < V) {
      *K = c[m - 1];
      total = 0;
      for (int64_t j = 0; j < m; j++) total += q[key_index(c[j])];
    }
    if (!pl->pq) break;
    uint64_t acc = 0;
    int64_t j = 0;
    while (j < m && !smp_reaches(acc += q[key_index(c[j])], total, pl->pq)) j++;
    if (j < m) {
      *K = c[j];
      break;
    }
    /* (the walk reaches the whole set at its end: j == m only when m < keep) */
  }
  free(c);
  return CLMOE_OK;
}

clmoe_status clmoe_gen_sample(const clmoe_gen_sampling *sp, const float *logits, int64_t V, int64_t seq,
                              int64_t step, int32_t *token)
{
  const char *op = "clmoe_gen_sample";
  if (!sp || !logits || !token || V < 1 || V > INT32_MAX)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: sampling, logits, token and vocab >= 1 are required", op);
  gen_sampling_plan pl;
  CLMOE_TRY(clmoe__gen_sampling_plan(sp, V, op, &pl));
  int64_t best = 0;
  for (int64_t i = 0; i < V; i++) {
    if (isnan(logits[i]))
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: logit %lld is NaN", op, (long long)i);
    if (logits[i] > logits[best]) best = i;
  }
  if (pl.greedy) {
    *token = (int32_t)best;
    return CLMOE_OK;
  }
  uint64_t *key = malloc((size_t)V * sizeof *key), *q = malloc((size_t)V * sizeof *q), K = 0, top = 0;
  clmoe_status st = CLMOE_OK;
  if (!key || !q) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (sampling)");
    goto done;
  }
  for (int64_t i = 0; i < V; i++) {
    key[i] = smp_key(smp_canon(logits[i]), (uint32_t)i);
    if (key[i] > top) top = key[i];
  }
  const float lmax = smp_key_logit(top);
  for (int64_t i = 0; i < V; i++) q[i] = smp_weight(smp_canon(logits[i]), lmax, pl.inv_t, pl.scale);
  CLMOE_TRY_GOTO(st, threshold(&pl, key, q, V, &K), done);
  uint64_t Q = 0, acc = 0;
  for (int64_t i = 0; i < V; i++)
    if (key[i] >= K) Q += q[i];
  const uint64_t U = smp_point(pl.seed, (uint64_t)seq, (uint64_t)step, Q);
  *token = -1;
  for (int64_t i = 0; i < V && *token < 0; i++)
    if (key[i] >= K && (acc += q[i]) > U) *token = (int32_t)i;
  if (*token < 0) st = clmoe__error(CLMOE_ERR_INTERNAL, "%s: the draw %llu passed no candidate of %llu", op,
                                    (unsigned long long)U, (unsigned long long)Q);
done:
  free(key), free(q);
  return st;
}

uint64_t clmoe__gen_sample_weight(float logit, float lmax, float inv_t, int scale)
{
  return smp_weight(smp_canon(logit), smp_canon(lmax), inv_t, scale);
}

/* A device sampler's kernel (gen_sample: one work-group per row; gen_sample_split,
 * gen_sample_draw: several): digits of 11 bits (bins of 2 x 8 KB, 20 KB of local memory in
 * all) where the device's local memory holds them, else of 8 (6 KB); the build's local
 * memory is checked against the device's. A GPU's work-item loads 16 logits at a time (a
 * row's one work-group needs many loads in flight), a CPU's 4. *bits: the digits'. */
static clmoe_status sample_kernel(clmoe_ctx *ctx, const char *name, cl_kernel *k, int *bits)
{
  const int unroll = ctx->caps.is_gpu ? 16 : 4;
  *bits = ctx->caps.local_mem_bytes >= 24 * 1024 ? 11 : 8;
  char opts[64];
  snprintf(opts, sizeof opts, "-DGEN_SAMPLE_BITS=%d -DGEN_SAMPLE_UNROLL=%d", *bits, unroll);
  const char *src = strcmp(name, "gen_sample") ? "random+gen_sample_math+gen_sample_select+gen_sample_split"
                                               : "random+gen_sample_math+gen_sample_select+gen_sample";
  CLMOE_TRY(clmoe__kernel(ctx, src, opts, name, k));
  cl_ulong used = 0;
  CLMOE_CL(clGetKernelWorkGroupInfo(*k, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof used, &used, NULL));
  if (used > ctx->caps.local_mem_bytes)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_gen_sample_rows: %s (%d-bit digits) needs %llu bytes of "
                        "local memory, the device has %llu", name, *bits, (unsigned long long)used,
                        (unsigned long long)ctx->caps.local_mem_bytes);
  return CLMOE_OK;
}

/* Work-groups per row of [R, V] logits at work-group size local (clmoe_gen_sample_groups). */
static int64_t sample_groups(clmoe_ctx *ctx, int64_t R, int64_t V, size_t local)
{
  const long long knob = clmoe__knob_int(ctx, CLMOE_K_SAMPLE_GROUPS);
  if (knob > 0) return knob;
  /* enough groups for two per compute unit, each work-item keeping 8 logits or more */
  const int64_t most = V / ((int64_t)local * 8), want = (2 * (int64_t)ctx->caps.compute_units + R - 1) / R;
  const int64_t G = most < want ? most : want;
  return G < 2 ? 1 : G;
}

/* The passes of a split draw: the scan, then the levels of top-k's and top-p's searches,
 * each as many as the key has digits (an index level that finds its answer early leaves the
 * last passes idle). */
static uint32_t split_passes(const gen_sampling_plan *pl, int64_t V, int bits)
{
  const uint32_t b = (uint32_t)(62 - pl->scale), levels = (32 + bits - 1) / bits + (b + bits - 1) / bits;
  return 1 + (pl->keep < V ? levels : 0) + (pl->pq ? levels : 0);
}

static clmoe_status sample_split(clmoe_ctx *ctx, const gen_sampling_plan *pl, const clmoe_tensor *logits,
                                 int64_t R, int64_t V, int64_t G, int64_t step, clmoe_tensor *ids)
{
  cl_kernel kp, kd;
  int bits;
  CLMOE_TRY(sample_kernel(ctx, "gen_sample_split", &kp, &bits));
  CLMOE_TRY(sample_kernel(ctx, "gen_sample_draw", &kd, &bits));
  size_t local, ld;
  CLMOE_TRY(clmoe__row_local(ctx, kp, V, &local));
  CLMOE_TRY(clmoe__row_local(ctx, kd, V, &ld));
  local = ld < local ? ld : local;
  const size_t slot = (2u << bits) + 1u, bytes[3] = {3 * (size_t)R * slot * 4, 2 * (size_t)(R * G) * 64,
                                                        (size_t)(R * G) * 8};
  cl_mem m[3];
  CLMOE_TRY(clmoe__scratch_set(ctx, 3, m, bytes));
  clmoe_status st = CLMOE_OK;
  const cl_uint uG = (cl_uint)G, P = split_passes(pl, V, bits);
  cl_ulong uV = (cl_ulong)V, seed = pl->seed, ustep = (cl_ulong)step, topk = (cl_ulong)pl->keep, pq = pl->pq;
  cl_float inv_t = pl->inv_t;
  cl_int scale = pl->scale;
  for (cl_uint h = 0; h <= P; h++) {
    const cl_int last = h == P;
    CLMOE_TRY_GOTO(st, clmoe__args(kp, 12, KA(logits->buf), KA(uV), KA(m[0]), KA(m[1]), KA(m[2]), KA(uG), KA(h),
                                   KA(last), KA(inv_t), KA(topk), KA(pq), KA(scale)), done);
    CLMOE_TRY_GOTO(st, clmoe__launch_groups(ctx, kp, R * G, local), done);
  }
  CLMOE_TRY_GOTO(st, clmoe__args(kd, 11, KA(logits->buf), KA(uV), KA(ids->buf), KA(m[1]), KA(m[2]), KA(uG), KA(P),
                                 KA(seed), KA(ustep), KA(inv_t), KA(scale)), done);
  st = clmoe__launch_groups(ctx, kd, R, local);
done:
  clmoe__scratch_release_set(ctx, 3, m, bytes);
  return st;
}

clmoe_status clmoe_gen_sample_rows(clmoe_ctx *ctx, const clmoe_gen_sampling *sp, const clmoe_tensor *logits,
                                   int64_t step, clmoe_tensor *ids)
{
  static const char op[] = "clmoe_gen_sample_rows";
  if (!ctx || !sp || !logits || !ids)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: ctx, sampling, logits and ids are required", op);
  CLMOE_TRY(clmoe__want(logits, CLMOE_F32, op, "logits"));
  CLMOE_TRY(clmoe__want(ids, CLMOE_I32, op, "ids"));
  const int64_t R = logits->ndim == 2 ? logits->shape[0] : -1, V = logits->ndim == 2 ? logits->shape[1] : 0;
  if (R < 1 || V < 1 || V > INT32_MAX || logits->offset || ids->offset || clmoe_tensor_numel(ids) != R)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: logits must be a whole [R, V] tensor and ids [R]", op);
  gen_sampling_plan pl;
  CLMOE_TRY(clmoe__gen_sampling_plan(sp, V, op, &pl));
  if (pl.greedy) return clmoe_gen_argmax(ctx, logits, ids);
  cl_kernel k;
  int bits;
  CLMOE_TRY(sample_kernel(ctx, "gen_sample", &k, &bits));
  size_t local;
  CLMOE_TRY(clmoe__row_local(ctx, k, V, &local));
  const int64_t G = sample_groups(ctx, R, V, local);
  if (G > 1) return sample_split(ctx, &pl, logits, R, V, G, step, ids);
  cl_ulong uV = (cl_ulong)V, seed = pl.seed, ustep = (cl_ulong)step, topk = (cl_ulong)pl.keep, pq = pl.pq;
  cl_float inv_t = pl.inv_t;
  cl_int scale = pl.scale;
  CLMOE_TRY(clmoe__args(k, 9, KA(logits->buf), KA(uV), KA(ids->buf), KA(seed), KA(ustep), KA(inv_t), KA(topk), KA(pq),
                        KA(scale)));
  return clmoe__launch_groups(ctx, k, R, local);
}

clmoe_status clmoe_gen_sample_groups(clmoe_ctx *ctx, int64_t rows, int64_t vocab, int64_t *groups)
{
  if (!ctx || !groups || rows < 1 || vocab < 1 || vocab > INT32_MAX)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_sample_groups: ctx, groups, rows >= 1 and vocab in "
                        "1..2^31-1 are required");
  cl_kernel k;
  int bits;
  size_t local;
  CLMOE_TRY(sample_kernel(ctx, "gen_sample", &k, &bits));
  CLMOE_TRY(clmoe__row_local(ctx, k, vocab, &local));
  *groups = sample_groups(ctx, rows, vocab, local);
  return CLMOE_OK;
}
