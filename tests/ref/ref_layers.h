/* Double-precision references of the model's layer pieces: Block AttnRes. */
#ifndef CLMOE_REF_LAYERS_H
#define CLMOE_REF_LAYERS_H

#include <stdint.h>

/* sources [S, T, d]; w, g [d]; h [T, d]; alpha [T, S] (may be NULL). */
void ref_attn_res(const double *src, int64_t S, int64_t T, int64_t d, const double *w,
                  const double *g, double eps, double *h, double *alpha);
/* dsrc [S, T, d] is added to; dw, dg [d] are overwritten. */
void ref_attn_res_backward(const double *src, int64_t S, int64_t T, int64_t d, const double *w,
                           const double *g, double eps, const double *dh, double *dsrc,
                           double *dw, double *dg);

#endif
