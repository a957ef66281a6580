/* References: embedding lookup and backward, AdamW. */
#include <math.h>

#include "reference.h"

void ref_embedding(const double *table, const int32_t *ids, int64_t ntok, int64_t d, double *out)
{
  for (int64_t t = 0; t < ntok; t++)
    for (int64_t c = 0; c < d; c++) out[t * d + c] = table[(int64_t)ids[t] * d + c];
}

void ref_embedding_backward(const int32_t *ids, const double *dout, int64_t ntok, int64_t d,
                            double *dtable)
{
  for (int64_t t = 0; t < ntok; t++)
    for (int64_t c = 0; c < d; c++) dtable[(int64_t)ids[t] * d + c] += dout[t * d + c];
}

void ref_adamw(double *param, const double *grad, double *m, double *v, size_t n, double lr,
               double beta1, double beta2, double eps, double weight_decay, double grad_scale,
               int64_t step)
{
  double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
  for (size_t i = 0; i < n; i++) {
    double g = grad_scale * grad[i];
    m[i] = beta1 * m[i] + (1.0 - beta1) * g;
    v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
    double mhat = m[i] / bc1, vhat = v[i] / bc2;
    param[i] -= lr * (weight_decay * param[i] + mhat / (sqrt(vhat) + eps));
  }
}
