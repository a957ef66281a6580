/* Inference: sampling a token from logits (include/clmoe/generate.h). Host code: the logits of a
 * step are downloaded anyway; one pass over a vocabulary row and a heap of its best
 * candidates are cheap next to a step (a full sort of 160K logits would not be). */
#include "generate_internal.h"

#include <math.h>
#include <stdlib.h>

typedef struct cand {
  float logit;
  int32_t id;
} cand;

/* Descending logits, ascending ids on ties (a total order: the same result everywhere). */
static int by_logit(const void *a, const void *b)
{
  const cand *x = a, *y = b;
  if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Restores the heap below r: every parent comes after its children in by_logit order. */
static void sift(cand *c, int64_t m, int64_t r)
{
  for (;;) {
    int64_t w = r, a = 2 * r + 1, b = a + 1;
    if (a < m && by_logit(&c[a], &c[w]) > 0) w = a;
    if (b < m && by_logit(&c[b], &c[w]) > 0) w = b;
    if (w == r) return;
    const cand t = c[r];
    c[r] = c[w], c[w] = t;
    r = w;
  }
}

/* The m best of logits[V] in by_logit order into c[0..m): a heap whose root is the worst
 * kept so far, replaced by any better logit, then sorted. */
static void best_of(const float *logits, int64_t V, int64_t m, cand *c)
{
  for (int64_t i = 0; i < m; i++) c[i].logit = logits[i], c[i].id = (int32_t)i;
  /* heapify: parent after child in by_logit order (max-heap of "worse") */
  for (int64_t r = m / 2 - 1; r >= 0; r--) sift(c, m, r);
  for (int64_t i = m; i < V; i++) {
    const cand x = {logits[i], (int32_t)i};
    if (by_logit(&x, &c[0]) >= 0) continue;
    c[0] = x;
    sift(c, m, 0);
  }
  qsort(c, (size_t)m, sizeof *c, by_logit);
}

clmoe_status clmoe_gen_sample(const clmoe_gen_sampling *sp, const float *logits, int64_t V, int64_t seq,
                              int64_t step, int32_t *token)
{
  const char *op = "clmoe_gen_sample";
  if (!sp || !logits || !token || V < 1 || V > INT32_MAX)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: sampling, logits, token and vocab >= 1 are required", op);
  if (!(sp->temperature >= 0.0) || !(sp->top_p >= 0.0 && sp->top_p <= 1.0) || sp->top_k < 0)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: temperature %g must be >= 0, top_p %g in [0, 1], top_k %lld "
                        ">= 0", op, sp->temperature, sp->top_p, (long long)sp->top_k);
  int64_t best = 0;
  for (int64_t i = 0; i < V; i++) {
    if (isnan(logits[i]))
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: logit %lld is NaN", op, (long long)i);
    if (logits[i] > logits[best]) best = i;
  }
  if (sp->greedy || sp->temperature == 0.0 || sp->top_k == 1) {
    *token = (int32_t)best;
    return CLMOE_OK;
  }
  /* The candidates are walked from the most likely down; only a prefix of them is ever
   * needed (the top-p cut, the uniform draw), so the m best are selected and sorted, and m
   * grows 16-fold when the walk runs past them (a flat tail). A vocabulary of 160K tokens
   * then usually costs one pass and a heap, not a sort. */
  const int64_t keep = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
  const int top_p = sp->top_p > 0.0 && sp->top_p < 1.0;
  const double lmax = logits[best], T = sp->temperature;
  double total = 0.0; /* the kept set's weight exp((logit - max) / T); all V: in id order */
  if (keep == V)
    for (int64_t i = 0; i < V; i++) total += exp(((double)logits[i] - lmax) / T);
  const uint64_t counter = ((uint64_t)seq << 32) | ((uint64_t)step & 0xffffffffu);
  const double u01 = (double)clmoe_random_uniform(sp->seed, counter, 0.0f, 1.0f);
  clmoe_status st = CLMOE_OK;
  cand *c = NULL;
  double *p = NULL;
  /* top-k: its whole set is selected (the weights are normalised over it) */
  for (int64_t m = keep < V || keep < 256 ? keep : 256;; m = 16 * m < keep ? 16 * m : keep) {
    free(c), free(p);
    c = malloc((size_t)m * sizeof *c);
    p = malloc((size_t)m * sizeof *p);
    if (!c || !p) {
      st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (sampling)");
      break;
    }
    best_of(logits, V, m, c);
    for (int64_t i = 0; i < m; i++) p[i] = exp(((double)c[i].logit - lmax) / T);
    double sum = total;
    if (keep < V) {
      sum = 0.0;
      for (int64_t i = 0; i < keep; i++) sum += p[i];
    }
    int64_t cut = keep; /* the candidates the draw is among */
    if (top_p) {
      double acc = 0.0;
      int64_t i = 0;
      while (i < m && (acc += p[i] / sum) < sp->top_p) i++;
      if (i == m && m < keep) continue; /* the cut lies beyond the m best */
      if (i < m) cut = i + 1;
      if (cut < keep)
        for (i = 0, sum = 0.0; i < cut; i++) sum += p[i];
    }
    const double u = u01 * sum;
    const int64_t walk = cut < m ? cut : m;
    double acc = 0.0;
    int64_t pick = -1;
    for (int64_t i = 0; i < walk && pick < 0; i++)
      if ((acc += p[i]) > u) pick = i;
    if (pick < 0 && walk < cut) continue; /* the draw lies beyond the m best */
    *token = c[pick < 0 ? walk - 1 : pick].id; /* u at the very top (rounding): the last one */
    break;
  }
  free(c), free(p);
  return st;
}
