/* Double-precision reference of the token sampler (ref_sample.h): a full sort, weights in
 * double, the draw walked in index order. */
#include "ref_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_cl/runtime/random.cl"

typedef struct ref_cand {
  double logit;
  int64_t id;
} ref_cand;

static int by_logit(const void *a, const void *b)
{
  const ref_cand *x = a, *y = b;
  if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

static double canon(float l) { return fabsf(l) < 1.17549435e-38f ? 0.0 : (double)l; }

int64_t ref_sample_probs(double temperature, int64_t top_k, double top_p, const float *lg, int64_t V,
                         double *prob, double *margin)
{
  ref_cand *c = malloc((size_t)V * sizeof *c);
  double *w = malloc((size_t)V * sizeof *w);
  if (!c || !w) abort();
  for (int64_t i = 0; i < V; i++) c[i].logit = canon(lg[i]), c[i].id = i;
  qsort(c, (size_t)V, sizeof *c, by_logit);
  const double top = c[0].logit;
  for (int64_t j = 0; j < V; j++) w[j] = c[j].logit == top ? 1.0 : exp((c[j].logit - top) / temperature);
  int64_t keep = top_k > 0 && top_k < V ? top_k : V;
  double sum = 0.0;
  for (int64_t j = 0; j < keep; j++) sum += w[j];
  if (margin) *margin = 1.0;
  if (top_p > 0.0 && top_p < 1.0) {
    double acc = 0.0, before = 0.0;
    int64_t j = 0;
    for (; j < keep; j++) {
      before = acc;
      if ((acc += w[j] / sum) >= top_p) break;
    }
    if (margin) *margin = fmin(fabs(acc - top_p), fabs(top_p - before));
    keep = j < keep ? j + 1 : keep;
    sum = 0.0;
    for (j = 0; j < keep; j++) sum += w[j];
  }
  memset(prob, 0, (size_t)V * sizeof *prob);
  for (int64_t j = 0; j < keep; j++) prob[c[j].id] = w[j] / sum;
  free(c), free(w);
  return keep;
}

int32_t ref_sample_pick(const double *prob, int64_t V, double u, double *margin)
{
  double acc = 0.0, m = 1.0;
  int32_t pick = -1;
  for (int64_t i = 0; i < V; i++) {
    if (prob[i] == 0.0) continue;
    acc += prob[i];
    m = fmin(m, fabs(acc - u));
    if (pick < 0 && acc > u) pick = (int32_t)i;
  }
  for (int64_t i = V - 1; pick < 0 && i >= 0; i--) /* u past the rounded total: the last */
    if (prob[i] > 0.0) pick = (int32_t)i;
  if (margin) *margin = m;
  return pick;
}

double ref_sample_uniform(uint64_t seed, int64_t seq, int64_t step)
{
  const uint64_t r = rng_bits(seed, ((uint64_t)seq << 32) | ((uint64_t)step & 0xffffffffu)) >> 32;
  return (double)r * 0x1p-32;
}
