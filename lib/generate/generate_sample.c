/* Inference: sampling a token from logits (include/clmoe/generate.h). Host code: the logits of a
 * step are downloaded anyway, and a sort of one vocabulary row is cheap next to a step. */
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
  cand *c = malloc((size_t)V * sizeof *c);
  double *p = malloc((size_t)V * sizeof *p);
  if (!c || !p) {
    free(c), free(p);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (sampling)");
  }
  for (int64_t i = 0; i < V; i++) c[i].logit = logits[i], c[i].id = (int32_t)i;
  qsort(c, (size_t)V, sizeof *c, by_logit);
  int64_t keep = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
  /* softmax(logit / T) over the kept candidates, in double, from the largest */
  double sum = 0.0;
  for (int64_t i = 0; i < keep; i++) sum += p[i] = exp(((double)c[i].logit - (double)c[0].logit) / sp->temperature);
  if (sp->top_p > 0.0 && sp->top_p < 1.0) {
    double acc = 0.0;
    int64_t i = 0;
    while (i < keep && (acc += p[i] / sum) < sp->top_p) i++;
    keep = i < keep ? i + 1 : keep;
    sum = 0.0;
    for (i = 0; i < keep; i++) sum += p[i];
  }
  const uint64_t counter = ((uint64_t)seq << 32) | ((uint64_t)step & 0xffffffffu);
  const double u = (double)clmoe_random_uniform(sp->seed, counter, 0.0f, 1.0f) * sum;
  double acc = 0.0;
  int64_t pick = keep - 1; /* u at the very top (rounding): the last kept candidate */
  for (int64_t i = 0; i < keep; i++)
    if ((acc += p[i]) > u) {
      pick = i;
      break;
    }
  *token = c[pick].id;
  free(c), free(p);
  return CLMOE_OK;
}
