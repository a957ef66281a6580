/* The inputs of a KDA conformance case, shared by the portable checks (check_kda.c) and the
 * tile-path checks (check_kda_tile.c): device tensors and their host copies as stored (so the
 * bf16 rounding is shared with the reference), from one seed. */
#ifndef CLMOE_CHECK_KDA_INPUTS_H
#define CLMOE_CHECK_KDA_INPUTS_H

#include "conformance.h"

typedef struct kda_input_spec {
  int64_t B, T, H, K, V;
  const int32_t *lens; /* packed sequence lengths (then B = 1 and T = their sum), or NULL */
  int nlens;
  int h0;              /* a random initial state */
  clmoe_dtype dtype;   /* storage of q, k, v, g, beta */
  float zlo, zhi;      /* gate logits uniform in [zlo, zhi] ... */
  int extreme;         /* ... or +-1e4 at random */
  int saturate;        /* ... or +1e4 everywhere: g = lb on every channel */
  int kimi;            /* ... or logits that give Kimi Linear's unbounded gate per-token decays
                          -g log-uniform in [1e-4, 50] (every third run of 8 tokens in
                          [1e-4, 1e-2]: long memories across chunks of strong decays);
                          2: in [1e-4, 4], every fourth run of 16 tokens in [4, 50]
                          (chunks whose whole decay stays above 1e-30, and chunks whose
                          does not) */
} kda_input_spec;

/* Device inputs [B, T, H, K] etc. and host copies (N sequences: B, or nlens when packed). */
typedef struct kda_data {
  int64_t B, T, H, K, V, N;
  int32_t *cu;
  clmoe_tensor q, k, v, z, beta, A_log, dt_bias, h0, cu_t;
  double *hq, *hk, *hv, *hz, *hbeta, *hA, *hdt, *hh0;
} kda_data;

clmoe_status ck_kda_setup(clmoe_ctx *ctx, uint64_t seed, const kda_input_spec *spec, kda_data *d);
void ck_kda_data_free(kda_data *d);

#endif
