/* Double-precision reference of clmoe_gen_sample's rule (include/clmoe/generate.h). */
#ifndef CLMOE_REF_SAMPLE_H
#define CLMOE_REF_SAMPLE_H

#include <stdint.h>

/* The candidates of logits lg [V] (no NaN) and their probabilities, in double: tokens
 * ordered by logit (descending; the lower index first on ties; denormals count as 0), the
 * first top_k (0 or >= V: all), then the shortest prefix whose probability within them
 * reaches top_p (0 or 1: all); token i weighs exp((lg_i - max) / temperature), 1 where lg_i
 * equals the maximum (so a row of -inf is uniform and +inf logits share the draw).
 * prob [V] gets each token's probability (0 outside the set). Returns the candidates'
 * count; *margin (may be NULL) gets how far the top-p cut's running probability lies from
 * top_p (1 without top-p): a set nearer than rounding to its cut is not well defined. */
int64_t ref_sample_probs(double temperature, int64_t top_k, double top_p, const float *lg, int64_t V,
                         double *prob, double *margin);

/* The token clmoe_gen_sample draws from prob [V] (ref_sample_probs) with uniform u in
 * [0, 1): the first token in index order whose running probability passes u. *margin (may
 * be NULL) gets the distance of u from the nearest running probability: under about 1e-5
 * the library's integer weights may pick the neighbour. */
int32_t ref_sample_pick(const double *prob, int64_t V, double u, double *margin);

/* u of the draw for (seed, seq, step): the high 32 bits of the library's counter-based
 * generator at (seed, seq << 32 | step), over 2^32. */
double ref_sample_uniform(uint64_t seed, int64_t seq, int64_t step);

#endif
