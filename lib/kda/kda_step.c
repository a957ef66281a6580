/* A KDA layer's decode step after its input projections in one launch (kernels_cl/kda/
 * kda_step.cl): the short convolutions of q, k and v, the gate, the norms and the recurrent
 * update, for N sequences of one token each. The generation path's KDA step calls it
 * (lib/generate/generate_kda.c); clmoe_kda_layer_step composes the same math from
 * clmoe_short_conv_step and clmoe_kda_decode_step. */
#include "kda_internal.h"

#include <stdio.h>

clmoe_status clmoe__kda_conv_step(clmoe_ctx *ctx, const clmoe_kda_layer *l, const clmoe_tensor *const x[3],
                                  const clmoe_tensor *z, const clmoe_tensor *beta, clmoe_kda_layer_state *state,
                                  clmoe_tensor *o)
{
  static const char op[] = "clmoe__kda_conv_step";
  const int64_t N = x[0]->shape[0], H = l->H, K = l->D, V = l->D, W = l->conv_width;
  if (K > KDA_MAX_K || V > KDA_MAX_V || W < 1 || W > 16)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: head %lld, convolution width %lld", op, (long long)K,
                        (long long)W);
  const clmoe_tensor *const cw[3] = {&l->conv_q, &l->conv_k, &l->conv_v};
  const clmoe_tensor *const cs[3] = {&state->conv_q, &state->conv_k, &state->conv_v};
  for (int i = 0; i < 3; i++) {
    CLMOE_TRY(clmoe__want_shape(x[i], op, "x", 0, 2, N, H * (i < 2 ? K : V), 0, 0));
    CLMOE_TRY(clmoe__want_shape(cs[i], op, "conv state", 0, 3, N, W - 1, H * (i < 2 ? K : V), 0));
    if (x[i]->offset || x[i]->dtype != CLMOE_F32 || cw[i]->dtype != CLMOE_F32)
      return clmoe__error(CLMOE_ERR_SHAPE, "%s: fp32 inputs at the start of their buffers", op);
  }
  CLMOE_TRY(clmoe__want_shape(z, op, "z", 0, 2, N, H * K, 0, 0));
  CLMOE_TRY(clmoe__want_shape(beta, op, "beta", 0, 2, N, H, 0, 0));
  CLMOE_TRY(clmoe__want_shape(&state->kda, op, "state", 0, 4, N, H, K, V));
  CLMOE_TRY(clmoe__want_shape(o, op, "o", 0, 2, N, H * V, 0, 0));
  if (z->offset || beta->offset || o->offset)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: z, beta and o must start their buffers", op);
  if (N == 0) return CLMOE_OK;
  float scale, lb;
  cl_int unb;
  CLMOE_TRY(clmoe__kda_resolve_options(op, &l->opts, K, &scale, &lb, &unb));
  char opts[96];
  snprintf(opts, sizeof opts, "-DKD=%d -DVD=%d -DSTORE_BF16=0 -DOUT_BF16=0 -DKS_CONV_W=%d", (int)K, (int)V, (int)W);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "kda_common+kda_step", opts, "kda_step", &k));
  cl_ulong wo[3], so[3];
  for (int i = 0; i < 3; i++) wo[i] = (cl_ulong)cw[i]->offset, so[i] = (cl_ulong)cs[i]->offset;
  cl_ulong ao = (cl_ulong)l->A_log.offset, dto = (cl_ulong)l->dt_bias.offset, sto = (cl_ulong)state->kda.offset;
  cl_int iH = (cl_int)H;
  CLMOE_TRY(clmoe__args(k, 28, KA(x[0]->buf), KA(x[1]->buf), KA(x[2]->buf), KA(cw[0]->buf), KA(wo[0]),
                        KA(cw[1]->buf), KA(wo[1]), KA(cw[2]->buf), KA(wo[2]), KA(cs[0]->buf), KA(so[0]),
                        KA(cs[1]->buf), KA(so[1]), KA(cs[2]->buf), KA(so[2]), KA(z->buf), KA(beta->buf),
                        KA(l->A_log.buf), KA(ao), KA(l->dt_bias.buf), KA(dto), KA(iH), KA(scale), KA(lb), KA(unb),
                        KA(state->kda.buf), KA(sto), KA(o->buf)));
  size_t local[2] = {KDA_STEP_WG, 1}, global[2] = {(size_t)H * KDA_STEP_WG, (size_t)N};
  return clmoe__launch(ctx, k, 2, global, local);
}
