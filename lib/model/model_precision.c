/* The training precision of a model (clmoe_precision, include/clmoe/model.h): which
 * parameters get a bf16 copy, and the layers' weight structs seen with those copies in
 * place of the fp32 values, for the forward and backward of a bf16 step. */
#include "model_internal.h"
#include "params_internal.h"

#include <stdio.h>
#include <string.h>
#include "clmoe/model.h"
#include "clmoe/params.h"
#include "clmoe/tile.h"

/* A parameter that only ever feeds matrix products as a weight: a 2-D "w_*" of a layer or
 * the output head (clmoe_linear / clmoe_gemm), or a routed expert stack w_gate / w_upp
 * [E, f, l], w_dn [E, l, f] (the grouped expert GEMMs on tiles, lib/moe/moe_experts_bf16.c;
 * in an expert-parallel model the rank's rows [n_local, ...], the same kernels on the
 * experts it holds). Not the embedding (a lookup), the KDA convolutions and dt_bias (2-D,
 * elementwise), nor gains. */
static int feeds_products(const clmoe_param *p)
{
  if (!p->trainable) return 0;
  const char *base = strrchr(p->name, '/');
  base = base ? base + 1 : p->name;
  if (p->value->ndim == 3)
    return strstr(p->name, "/ffn/") && strstr(p->name, "/shared/") == NULL &&
           (!strcmp(base, "w_gate") || !strcmp(base, "w_upp") || !strcmp(base, "w_dn"));
  if (p->value->ndim != 2) return 0;
  if (!strcmp(p->name, "head")) return 1;
  return strncmp(base, "w_", 2) == 0;
}

clmoe_precision clmoe__model_resolve_precision(clmoe_ctx *ctx, clmoe_precision p)
{
  if (p != CLMOE_PRECISION_AUTO) return p;
  return clmoe_ctx_tile_impl(ctx) == CLMOE_TILE_PORTABLE ? CLMOE_PRECISION_FP32 : CLMOE_PRECISION_BF16;
}

clmoe_status clmoe_model_set_precision(clmoe_model *m, clmoe_precision precision)
{
  return clmoe__model_set_precision(m, precision, 1);
}

clmoe_status clmoe__model_set_precision(clmoe_model *m, clmoe_precision precision, int copy)
{
  if (!m) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_model_set_precision: model is NULL");
  if (!clmoe_precision_name(precision))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_model_set_precision: precision %d is not one of "
                        "bf16, fp32, auto", (int)precision);
  const clmoe_precision p = clmoe__model_resolve_precision(m->ctx, precision);
  if (m->inference_only || m->params.inference) {
    m->precision = CLMOE_PRECISION_FP32; /* no optimizer step refreshes copies: none are made */
    return CLMOE_OK;
  }
  for (int i = 0; i < m->params.n; i++) {
    clmoe_param *q = &m->params.p[i];
    CLMOE_TRY(clmoe__params_set_bf16_copy(&m->params, q, p == CLMOE_PRECISION_BF16 && feeds_products(q), copy));
  }
  m->precision = p;
  return CLMOE_OK;
}

clmoe_precision clmoe_model_precision(const clmoe_model *m) { return (clmoe_precision)m->precision; }

const clmoe_tensor *clmoe__model_weight(const clmoe_model *m, const clmoe_tensor *w)
{
  if (m->precision != CLMOE_PRECISION_BF16) return w;
  for (int i = 0; i < m->params.n; i++)
    if (m->params.p[i].value == w) return m->params.p[i].bf16.buf ? &m->params.p[i].bf16 : w;
  return w;
}

#define SWAP(m, dst, src, field) ((dst)->field = *clmoe__model_weight(m, &(src)->field))

const clmoe_kda_layer *clmoe__model_kda(const clmoe_model *m, const clmoe_kda_layer *l, clmoe_kda_layer *tmp)
{
  if (m->precision != CLMOE_PRECISION_BF16) return l;
  *tmp = *l;
  clmoe_tensor *src[CLMOE_KDA_LAYER_PARAMS], *dst[CLMOE_KDA_LAYER_PARAMS];
  clmoe_kda_layer_params((clmoe_kda_layer *)l, src, NULL, NULL);
  clmoe_kda_layer_params(tmp, dst, NULL, NULL);
  for (int i = 0; i < CLMOE_KDA_LAYER_PARAMS; i++) *dst[i] = *clmoe__model_weight(m, src[i]);
  return tmp;
}

const clmoe_mla_weights *clmoe__model_mla(const clmoe_model *m, const clmoe_mla_weights *w, clmoe_mla_weights *tmp)
{
  if (m->precision != CLMOE_PRECISION_BF16) return w;
  *tmp = *w;
  for (int i = 0; i < CLMOE_MLA_NWEIGHTS; i++)
    *clmoe_mla_weight_at(tmp, i) = *clmoe__model_weight(m, clmoe_mla_weight_at((clmoe_mla_weights *)w, i));
  return tmp;
}

const clmoe_situ_ffn *clmoe__model_ffn(const clmoe_model *m, const clmoe_situ_ffn *f, clmoe_situ_ffn *tmp)
{
  if (m->precision != CLMOE_PRECISION_BF16) return f;
  *tmp = *f; /* the FFN's form (its gated unit) with the weights swapped below */
  SWAP(m, tmp, f, w_gate);
  SWAP(m, tmp, f, w_upp);
  SWAP(m, tmp, f, w_dn);
  return tmp;
}

const clmoe_moe_layer *clmoe__model_moe(const clmoe_model *m, const clmoe_moe_layer *l, clmoe_moe_layer *tmp)
{
  if (m->precision != CLMOE_PRECISION_BF16) return l;
  *tmp = *l;
  SWAP(m, tmp, l, w_router);
  SWAP(m, tmp, l, w_down);
  SWAP(m, tmp, l, w_up);
  SWAP(m, tmp, l, w_gate); /* the routed experts [E, ...]: the grouped GEMMs on tiles */
  SWAP(m, tmp, l, w_upp);
  SWAP(m, tmp, l, w_dn);
  clmoe__model_ffn(m, &l->shared, &tmp->shared);
  return tmp;
}

const clmoe_moe_ep_layer *clmoe__model_moe_ep(const clmoe_model *m, const clmoe_moe_ep_layer *ep,
                                              clmoe_moe_ep_layer *tmp)
{
  if (m->precision != CLMOE_PRECISION_BF16) return ep;
  *tmp = *ep; /* the tables and map borrowed; the dense tensors and the local experts swapped */
  clmoe__model_moe(m, &ep->dense, &tmp->dense);
  clmoe__model_moe(m, &ep->experts, &tmp->experts);
  return tmp;
}
