/* CUnit suite: the model's layer pieces (Block AttnRes): the conformance checks and the
 * reference backward against finite differences. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check/ref/ref_layers.h"
#include "test_common.h"

static double urand(uint64_t *s)
{
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0;
}

static void test_attn_res_fd(void)
{
  enum { S = 3, T = 2, D = 5 };
  double src[S * T * D], w[D], g[D], dh[T * D], h[T * D], dsrc[S * T * D], dw[D], dg[D];
  uint64_t seed = test_seed;
  for (int i = 0; i < S * T * D; i++) src[i] = 2.0 * urand(&seed);
  for (int i = 0; i < D; i++) w[i] = urand(&seed), g[i] = 1.0 + 0.5 * urand(&seed);
  for (int i = 0; i < T * D; i++) dh[i] = urand(&seed);
  memset(dsrc, 0, sizeof dsrc);
  ref_attn_res_backward(src, S, T, D, w, g, 1e-5, dh, dsrc, dw, dg);
  double *params[3] = {src, w, g}, *grads[3] = {dsrc, dw, dg};
  const int count[3] = {S * T * D, D, D};
  for (int p = 0; p < 3; p++)
    for (int i = 0; i < count[p]; i++) {
      double x = params[p][i], e = 1e-6, lp = 0.0, lm = 0.0;
      params[p][i] = x + e;
      ref_attn_res(src, S, T, D, w, g, 1e-5, h, NULL);
      for (int j = 0; j < T * D; j++) lp += h[j] * dh[j];
      params[p][i] = x - e;
      ref_attn_res(src, S, T, D, w, g, 1e-5, h, NULL);
      for (int j = 0; j < T * D; j++) lm += h[j] * dh[j];
      params[p][i] = x;
      double fd = (lp - lm) / (2.0 * e);
      CU_ASSERT(fabs(fd - grads[p][i]) <= 1e-6 * (fabs(fd) + 1.0));
    }
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "AttnRes reference backward = finite differences", test_attn_res_fd);
  test_add_checks(suite, "attn_res");
  test_add_checks(suite, "kda_layer");
}

int main(void) { return test_main("layers", add_tests); }
