/* The shared KDA conformance inputs (kda_inputs.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kda_inputs.h"


void ck_kda_data_free(kda_data *d)
{
  clmoe_tensor *t[] = {&d->q, &d->k, &d->v, &d->z, &d->beta, &d->A_log, &d->dt_bias, &d->h0, &d->cu_t};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
  free(d->cu), free(d->hq), free(d->hk), free(d->hv), free(d->hz), free(d->hbeta), free(d->hA);
  free(d->hdt), free(d->hh0);
  memset(d, 0, sizeof *d);
}

clmoe_status ck_kda_setup(clmoe_ctx *ctx, uint64_t seed, const kda_input_spec *kc, kda_data *d)
{
  clmoe_status st = CLMOE_OK;
  float *zz = NULL;
  memset(d, 0, sizeof *d);
  d->B = kc->B, d->T = kc->T, d->H = kc->H, d->K = kc->K, d->V = kc->V, d->N = kc->B;
  /* smallest shapes: three chunks (the last partial); the saturated gate's long run 32 */
  if (clmoe_check_small()) d->T = d->T < CK_SMALL_T ? d->T : kc->saturate ? 512 : CK_SMALL_T;
  if (kc->lens) {
    d->B = 1, d->T = 0, d->N = kc->nlens;
    CK_ALLOC(d->cu, kc->nlens + 1);
    d->cu[0] = 0;
    for (int i = 0; i < kc->nlens; i++) d->cu[i + 1] = d->cu[i] + kc->lens[i];
    d->T = d->cu[kc->nlens];
    const int64_t nc = kc->nlens + 1;
    CK(clmoe_tensor_create(ctx, &d->cu_t, CLMOE_I32, 1, &nc));
    CK(clmoe_tensor_write(&d->cu_t, d->cu, (size_t)nc * sizeof *d->cu));
  }
  const int64_t sk[4] = {d->B, d->T, d->H, d->K}, sv[4] = {d->B, d->T, d->H, d->V};
  const int64_t sb[3] = {d->B, d->T, d->H}, sdt[2] = {d->H, d->K}, sh[4] = {d->N, d->H, d->K, d->V};
  CK(ck_uniform(ctx, &d->q, kc->dtype, 4, sk, seed, -1.0f, 1.0f, &d->hq));
  CK(ck_uniform(ctx, &d->k, kc->dtype, 4, sk, seed + 1, -1.0f, 1.0f, &d->hk));
  CK(ck_uniform(ctx, &d->v, kc->dtype, 4, sv, seed + 2, -1.0f, 1.0f, &d->hv));
  CK(ck_uniform(ctx, &d->beta, kc->dtype, 3, sb, seed + 3, -3.0f, 3.0f, &d->hbeta));
  CK(ck_uniform(ctx, &d->A_log, CLMOE_F32, 1, &d->H, seed + 4, -0.5f, 0.5f, &d->hA));
  CK(ck_uniform(ctx, &d->dt_bias, CLMOE_F32, 2, sdt, seed + 5, -1.0f, 1.0f, &d->hdt));
  if (kc->extreme || kc->saturate) {
    size_t n = (size_t)(d->B * d->T * d->H * d->K);
    CK_ALLOC(zz, n);
    for (size_t i = 0; i < n; i++)
      zz[i] = kc->saturate || ck_host_uniform(seed + 6, i, 0.0, 1.0) < 0.5 ? 1e4f : -1e4f;
    CK(clmoe_tensor_create(ctx, &d->z, kc->dtype, 4, sk));
    CK(clmoe_tensor_write_f32(&d->z, zz));
    CK(ck_read(&d->z, &d->hz));
  } else if (kc->kimi) {
    /* -exp(A_log) softplus(z + dt_bias) = -rate: z = log(expm1(rate / exp(A_log))) - dt_bias */
    size_t n = (size_t)(d->B * d->T * d->H * d->K);
    CK_ALLOC(zz, n);
    for (size_t i = 0; i < n; i++) {
      const int64_t t = (int64_t)(i / (size_t)(d->H * d->K)) % d->T, h = (int64_t)(i / (size_t)d->K) % d->H;
      const int64_t c = (int64_t)(i % (size_t)d->K);
      const int strong = kc->kimi == 2 && (t / 16) % 4 == 3;
      const double hi = kc->kimi == 2 ? log(strong ? 50.0 : 4.0) : (t / 8) % 3 == 0 ? log(1e-2) : log(50.0);
      const double rate = exp(ck_host_uniform(seed + 6, i, strong ? log(4.0) : log(1e-4), hi));
      zz[i] = (float)(log(expm1(rate / exp(d->hA[h]))) - d->hdt[h * d->K + c]);
    }
    CK(clmoe_tensor_create(ctx, &d->z, kc->dtype, 4, sk));
    CK(clmoe_tensor_write_f32(&d->z, zz));
    CK(ck_read(&d->z, &d->hz));
  } else {
    CK(ck_uniform(ctx, &d->z, kc->dtype, 4, sk, seed + 6, kc->zlo, kc->zhi, &d->hz));
  }
  if (kc->h0) CK(ck_uniform(ctx, &d->h0, CLMOE_F32, 4, sh, seed + 7, -1.0f, 1.0f, &d->hh0));
done:
  free(zz);
  if (st != CLMOE_OK) ck_kda_data_free(d);
  return st;
}

