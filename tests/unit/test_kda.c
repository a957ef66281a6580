/* CUnit suite: KDA. The conformance checks ("kda": chunked, recurrent, decode, backward
 * against the double reference), the reference's own backward against finite differences,
 * what the lower bound prevents, and argument errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check/ref/ref_kda.h"
#include "test_common.h"

static double urand(uint64_t *s)
{
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0;
}

/* sum(o * dO) + sum(ht * dht) of the reference forward. */
static double ref_loss(const ref_kda_shape *s, double *const in[8], const double *dO, const double *dht)
{
  const int64_t no = s->B * s->T * s->H * s->V, nh = ref_kda_nseq(s) * s->H * s->K * s->V;
  double *o = malloc((size_t)no * sizeof *o), *ht = malloc((size_t)nh * sizeof *ht), L = 0.0;
  ref_kda_forward(s, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], o, ht);
  for (int64_t i = 0; i < no; i++) L += o[i] * dO[i];
  for (int64_t i = 0; i < nh; i++) L += ht[i] * dht[i];
  free(o), free(ht);
  return L;
}

/* The reference backward against central differences, packed sequences (one of length
 * 1), an initial state and a final-state gradient, for both gate forms. */
static void fd_case(int unbounded)
{
  static const int32_t cu[4] = {0, 3, 4, 9};
  ref_kda_shape s = {1, 9, 2, 4, 3, cu, 3, 0.5, -5.0, unbounded};
  const int64_t nk = 9 * 2 * 4, nv = 9 * 2 * 3, nb = 9 * 2, nh = 3 * 2 * 4 * 3;
  const int64_t count[8] = {nk, nk, nv, nk, nb, 2, 8, nh};
  const char *names[8] = {"q", "k", "v", "z", "beta", "A_log", "dt_bias", "h0"};
  double *in[8], *grad[8];
  uint64_t seed = test_seed;
  for (int p = 0; p < 8; p++) {
    in[p] = malloc((size_t)count[p] * sizeof(double));
    grad[p] = malloc((size_t)count[p] * sizeof(double));
    for (int64_t i = 0; i < count[p]; i++) in[p][i] = (p == 3 ? 2.0 : p == 5 ? 0.3 : 1.0) * urand(&seed);
  }
  double *dO = malloc((size_t)nv * sizeof *dO), *dht = malloc((size_t)nh * sizeof *dht);
  for (int64_t i = 0; i < nv; i++) dO[i] = urand(&seed);
  for (int64_t i = 0; i < nh; i++) dht[i] = urand(&seed);
  ref_kda_backward(&s, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], dO, dht, grad[0],
                   grad[1], grad[2], grad[3], grad[4], grad[5], grad[6], grad[7]);
  for (int p = 0; p < 8; p++) {
    double worst = 0.0;
    for (int64_t i = 0; i < count[p]; i++) {
      double x = in[p][i], h = 1e-5;
      in[p][i] = x + h;
      double lp = ref_loss(&s, in, dO, dht);
      in[p][i] = x - h;
      double lm = ref_loss(&s, in, dO, dht);
      in[p][i] = x;
      double fd = (lp - lm) / (2.0 * h), err = fabs(fd - grad[p][i]) / (fabs(fd) + 1e-3);
      if (!(err <= worst)) worst = err;
    }
    if (!(worst < 1e-6)) fprintf(stderr, "\n  %s gate: d%s differs from finite differences by %.3g\n",
                                 unbounded ? "unbounded" : "bounded", names[p], worst);
    CU_ASSERT(worst < 1e-6);
  }
  for (int p = 0; p < 8; p++) free(in[p]), free(grad[p]);
  free(dO), free(dht);
}

static void test_ref_fd_bounded(void) { fd_case(0); }
static void test_ref_fd_unbounded(void) { fd_case(1); }

/* The largest anchored factor exp(G_first - G_r) of any 16-token tile (per channel), for
 * the gate logits z of one head. */
static double max_tile_factor(const ref_kda_shape *s, const double *z, int64_t T, int64_t K,
                              double A_log, double dt_bias)
{
  double worst = 0.0;
  for (int64_t d = 0; d < K; d++)
    for (int64_t t0 = 0; t0 < T; t0 += 16) {
      double G = 0.0, G0 = 0.0;
      for (int64_t r = 0; r < 16 && t0 + r < T; r++) {
        G += ref_kda_gate(s, z[(t0 + r) * K + d], A_log, dt_bias, NULL, NULL);
        if (r == 0) G0 = G;
        worst = fmax(worst, G0 - G);
      }
    }
  return worst; /* the log of the factor */
}

/* The same gate logits: the bounded gate keeps every anchored tile factor below e^80
 * (inside fp32 and bf16, whose largest value is about 2^128 = e^88.7); Kimi Linear's
 * unbounded form takes one past it, so the chunked forward forms such a chunk's factors
 * pairwise for that gate (products of per-token decays, never above 1): finite and equal to
 * the recurrent kernel (which never divides by a decay). */
static void test_bound(void)
{
  const int64_t T = 64, H = 1, K = 16, V = 16;
  ref_kda_shape sb = {1, T, H, K, V, NULL, 0, 0.25, -5.0, 0}, su = sb;
  su.unbounded = 1;
  double *z = malloc((size_t)(T * K) * sizeof *z);
  uint64_t seed = test_seed + 3;
  for (int64_t i = 0; i < T * K; i++) z[i] = 6.0 + 2.0 * urand(&seed); /* strongly forgetting */
  const double A_log = 0.5, dt_bias = 0.0, bf16_max_log = 128.0 * log(2.0);
  double fb = max_tile_factor(&sb, z, T, K, A_log, dt_bias), fu = max_tile_factor(&su, z, T, K, A_log, dt_bias);
  CU_ASSERT(fb <= 80.0);           /* 15 steps of at most 5 */
  CU_ASSERT(fb < bf16_max_log);
  CU_ASSERT(fu > bf16_max_log);    /* outside bf16 (and fp32) range */

  /* On the device: chunked with the unbounded gate is finite and equals the recurrent kernel. */
  clmoe_tensor q, k, v, g, beta, A, dt, o, o2;
  const int64_t sk[4] = {1, T, H, K}, sb3[3] = {1, T, H}, sdt[2] = {H, K};
  float *zf = malloc((size_t)(T * K) * sizeof *zf), a = (float)A_log, out[64 * 16];
  for (int64_t i = 0; i < T * K; i++) zf[i] = (float)z[i];
  TEST_OK(clmoe_tensor_create(test_ctx, &q, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &k, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &v, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &g, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &beta, CLMOE_F32, 3, sb3));
  TEST_OK(clmoe_tensor_create(test_ctx, &A, CLMOE_F32, 1, &H));
  TEST_OK(clmoe_tensor_create(test_ctx, &dt, CLMOE_F32, 2, sdt));
  TEST_OK(clmoe_tensor_create(test_ctx, &o, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &o2, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_fill_uniform(&q, 1, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&k, 2, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&v, 3, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&beta, 4, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_write(&g, zf, (size_t)(T * K) * sizeof *zf));
  TEST_OK(clmoe_tensor_write(&A, &a, sizeof a));
  TEST_OK(clmoe_tensor_fill(&dt, 0.0));
  clmoe_kda_inputs in = {&q, &k, &v, &g, &beta, &A, &dt, NULL, NULL};
  clmoe_kda_options unb = {.gate = CLMOE_KDA_GATE_UNBOUNDED}, bnd = {0};
  float ou[64 * 16];
  TEST_OK(clmoe_tensor_fill(&o, NAN));
  TEST_OK(clmoe_kda_forward(test_ctx, &unb, &in, &o, NULL));
  TEST_OK(clmoe_tensor_read(&o, ou, sizeof ou));
  TEST_OK(clmoe_kda_recurrent(test_ctx, &unb, &in, &o2, NULL));
  TEST_OK(clmoe_tensor_read(&o2, out, sizeof out));
  for (int i = 0; i < 64 * 16; i++) {
    CU_ASSERT(isfinite(out[i]) && isfinite(ou[i]));
    CU_ASSERT(fabs(ou[i] - out[i]) <= 1e-5 * (fabs(out[i]) + 0.1));
  }
  /* The bounded gate on the same logits: the chunked path is finite and agrees with the
   * recurrent one. */
  TEST_OK(clmoe_kda_forward(test_ctx, &bnd, &in, &o, NULL));
  TEST_OK(clmoe_kda_recurrent(test_ctx, &bnd, &in, &o2, NULL));
  float o1[64 * 16];
  TEST_OK(clmoe_tensor_read(&o, o1, sizeof o1));
  TEST_OK(clmoe_tensor_read(&o2, out, sizeof out));
  for (int i = 0; i < 64 * 16; i++) {
    CU_ASSERT(isfinite(o1[i]));
    CU_ASSERT(fabs(o1[i] - out[i]) <= 1e-5 * (fabs(out[i]) + 0.1));
  }
  clmoe_tensor *all[] = {&q, &k, &v, &g, &beta, &A, &dt, &o, &o2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  free(z), free(zf);
}

static void test_errors(void)
{
  clmoe_tensor q, v, b, A, dt, o, cu, qh;
  const int64_t sk[4] = {1, 20, 2, 16}, sb[3] = {1, 20, 2}, sdt[2] = {2, 16}, H = 2, ncu = 3;
  TEST_OK(clmoe_tensor_zeros(test_ctx, &q, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &qh, CLMOE_BF16, 4, sk));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &v, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &b, CLMOE_F32, 3, sb));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &A, CLMOE_F32, 1, &H));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &dt, CLMOE_F32, 2, sdt));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &o, CLMOE_F32, 4, sk));
  TEST_OK(clmoe_tensor_create(test_ctx, &cu, CLMOE_I32, 1, &ncu));
  clmoe_kda_inputs in = {&q, &q, &v, &q, &b, &A, &dt, NULL, NULL};
  clmoe_kda_options bad_lb = {.lower_bound = -6.0f}, ok = {0};
  CU_ASSERT_EQUAL(clmoe_kda_forward(test_ctx, &bad_lb, &in, &o, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "lower_bound"));
  TEST_OK(clmoe_kda_forward(test_ctx, &ok, &in, &o, NULL));
  in.k = &qh; /* one input in bf16, the others f32 */
  CU_ASSERT_EQUAL(clmoe_kda_forward(test_ctx, &ok, &in, &o, NULL), CLMOE_ERR_SHAPE);
  in.k = &q;
  in.beta = &A; /* wrong shape */
  CU_ASSERT_EQUAL(clmoe_kda_forward(test_ctx, &ok, &in, &o, NULL), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "beta"));
  in.beta = &b;
  int32_t bad_cu[3] = {0, 25, 20};
  TEST_OK(clmoe_tensor_write(&cu, bad_cu, sizeof bad_cu));
  in.cu_seqlens = &cu; /* decreasing */
  CU_ASSERT_EQUAL(clmoe_kda_forward(test_ctx, &ok, &in, &o, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "cu_seqlens"));
  int32_t short_cu[3] = {0, 5, 19};
  TEST_OK(clmoe_tensor_write(&cu, short_cu, sizeof short_cu));
  CU_ASSERT_EQUAL(clmoe_kda_forward(test_ctx, &ok, &in, &o, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  clmoe_tensor *all[] = {&q, &qh, &v, &b, &A, &dt, &o, &cu};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "reference backward = finite differences (bounded gate)", test_ref_fd_bounded);
  CU_add_test(suite, "reference backward = finite differences (unbounded gate)", test_ref_fd_unbounded);
  CU_add_test(suite, "the bound keeps anchored factors in range; unbounded chunks are exact", test_bound);
  CU_add_test(suite, "argument errors", test_errors);
  test_add_checks(suite, "kda");
}

int main(void) { return test_main("kda", add_tests); }
