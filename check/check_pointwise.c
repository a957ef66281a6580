/* Conformance checks of the pointwise ops: add, mul (fp32 and bf16 output), scale, axpy,
 * SiLU, sigmoid and their backwards. */
#include <stdlib.h>

#include "conformance.h"
#include "ref/reference.h"

#define TOL_F32 1e-5
#define F CLMOE_F32

/* ---- pointwise ops ---- */
enum { PW_ADD, PW_MUL, PW_SCALE, PW_AXPY, PW_MUL_BWD, PW_SILU, PW_SILU_BWD, PW_SIGMOID, PW_SIGMOID_BWD };

static clmoe_status check_pointwise(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, int op)
{
  clmoe_status st = CLMOE_OK;
  const int64_t shape[3] = {3, 37, 41};
  const size_t n = 3 * 37 * 41;
  clmoe_tensor A = {0}, B = {0}, O = {0}, O2 = {0};
  double *a = NULL, *b = NULL, *got = NULL, *got2 = NULL, *ref = NULL, *ref2 = NULL;
  float alpha = 0.75f;
  CK(ck_uniform(ctx, &A, F, 3, shape, seed, -6.0f, 6.0f, &a));
  CK(ck_uniform(ctx, &B, F, 3, shape, seed + 1, -2.0f, 2.0f, &b));
  CK(clmoe_tensor_create(ctx, &O, F, 3, shape));
  CK(clmoe_tensor_create(ctx, &O2, F, 3, shape));
  CK_ALLOC(ref, n);
  CK_ALLOC(ref2, n);
  switch (op) {
  case PW_ADD: CK(clmoe_add(ctx, &A, &B, &O)); break;
  case PW_MUL: CK(clmoe_mul(ctx, &A, &B, &O)); break;
  case PW_SCALE: CK(clmoe_scale(ctx, alpha, &A, &O)); break;
  case PW_AXPY: CK(clmoe_tensor_copy(&O, &B)); CK(clmoe_axpy(ctx, alpha, &A, &O)); break;
  case PW_MUL_BWD: CK(clmoe_mul_backward(ctx, &B, &A, &A, &O, &O2)); break; /* dout = B, a = b = A */
  case PW_SILU: CK(clmoe_silu(ctx, &A, &O)); break;
  case PW_SILU_BWD: CK(clmoe_silu_backward(ctx, &A, &B, &O)); break;
  case PW_SIGMOID: CK(clmoe_sigmoid(ctx, &A, &O)); break;
  case PW_SIGMOID_BWD: CK(clmoe_sigmoid(ctx, &A, &O2)); CK(clmoe_sigmoid_backward(ctx, &O2, &B, &O)); break;
  }
  for (size_t i = 0; i < n; i++) {
    double s = ref_sigmoid(a[i]);
    switch (op) {
    case PW_ADD: ref[i] = a[i] + b[i]; break;
    case PW_MUL: ref[i] = a[i] * b[i]; break;
    case PW_SCALE: ref[i] = alpha * a[i]; break;
    case PW_AXPY: ref[i] = b[i] + alpha * a[i]; break;
    case PW_MUL_BWD: ref[i] = ref2[i] = b[i] * a[i]; break;
    case PW_SILU: ref[i] = ref_silu(a[i]); break;
    case PW_SILU_BWD: ref[i] = b[i] * ref_silu_grad(a[i]); break;
    case PW_SIGMOID: ref[i] = s; break;
    case PW_SIGMOID_BWD: ref[i] = b[i] * s * (1.0 - s); break;
    }
  }
  CK(ck_read(&O, &got));
  res->tolerance = TOL_F32;
  ck_compare("out", got, ref, n, res);
  if (op == PW_MUL_BWD) {
    CK(ck_read(&O2, &got2));
    ck_compare("db", got2, ref2, n, res);
  }
done:
  free(a), free(b), free(got), free(got2), free(ref), free(ref2);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&O), clmoe_tensor_destroy(&O2);
  return st;
}

/* mul into bf16 storage: within bf16's rounding (2^-8 relative) of a b, plus fp32's error;
 * with exact = 1, bit for bit the fp32 mul's output rounded to nearest even on the host
 * (tolerance 0). */
#define TOL_BF16_OUT 4e-3
static clmoe_status check_mul_bf16(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, int exact)
{
  clmoe_status st = CLMOE_OK;
  const int64_t shape[2] = {37, 1001};
  const size_t n = 37 * 1001;
  clmoe_tensor A = {0}, B = {0}, O = {0}, O32 = {0};
  double *a = NULL, *b = NULL, *got = NULL, *ref = NULL;
  CK(ck_uniform(ctx, &A, F, 2, shape, seed, -6.0f, 6.0f, &a));
  CK(ck_uniform(ctx, &B, F, 2, shape, seed + 1, -2.0f, 2.0f, &b));
  CK(clmoe_tensor_create(ctx, &O, CLMOE_BF16, 2, shape));
  CK(clmoe_mul(ctx, &A, &B, &O));
  CK(ck_read(&O, &got));
  if (exact) {
    CK(clmoe_tensor_create(ctx, &O32, F, 2, shape));
    CK(clmoe_mul(ctx, &A, &B, &O32));
    CK(ck_read(&O32, &ref));
    for (size_t i = 0; i < n; i++) ref[i] = clmoe_f32_from_bf16(clmoe_bf16_from_f32((float)ref[i]));
    res->tolerance = 0.0;
    ck_compare("out = bf16(fp32 a b)", got, ref, n, res);
  } else {
    CK_ALLOC(ref, n);
    for (size_t i = 0; i < n; i++) ref[i] = a[i] * b[i];
    res->tolerance = TOL_BF16_OUT;
    ck_compare("out (bf16)", got, ref, n, res);
  }
done:
  free(a), free(b), free(got), free(ref);
  clmoe_tensor_destroy(&A), clmoe_tensor_destroy(&B), clmoe_tensor_destroy(&O), clmoe_tensor_destroy(&O32);
  return st;
}
static clmoe_status pw_mul_bf16(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_mul_bf16(c, s, r, 0); }
static clmoe_status pw_mul_bf16_bits(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_mul_bf16(c, s, r, 1); }

#define PW_CHECK(fname, op) \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_pointwise(c, s, r, op); }
PW_CHECK(pw_add, PW_ADD)
PW_CHECK(pw_mul, PW_MUL)
PW_CHECK(pw_scale, PW_SCALE)
PW_CHECK(pw_axpy, PW_AXPY)
PW_CHECK(pw_mul_bwd, PW_MUL_BWD)
PW_CHECK(pw_silu, PW_SILU)
PW_CHECK(pw_silu_bwd, PW_SILU_BWD)
PW_CHECK(pw_sigmoid, PW_SIGMOID)
PW_CHECK(pw_sigmoid_bwd, PW_SIGMOID_BWD)

const clmoe_check clmoe_checks_pointwise[] = {
    {"pointwise.add", "out = a + b", pw_add},
    {"pointwise.mul", "out = a b", pw_mul},
    {"pointwise.mul.bf16", "out = a b into bf16 storage", pw_mul_bf16},
    {"pointwise.mul.bf16.bits", "the bf16 output is the fp32 product rounded to nearest even", pw_mul_bf16_bits},
    {"pointwise.scale", "out = alpha x", pw_scale},
    {"pointwise.axpy", "y += alpha x", pw_axpy},
    {"pointwise.mul.backward", "da = dout b, db = dout a", pw_mul_bwd},
    {"pointwise.silu", "x sigmoid(x)", pw_silu},
    {"pointwise.silu.backward", "dy silu'(x)", pw_silu_bwd},
    {"pointwise.sigmoid", "1 / (1 + exp(-x))", pw_sigmoid},
    {"pointwise.sigmoid.backward", "dy y (1 - y)", pw_sigmoid_bwd},
    {NULL, NULL, NULL}};
