/* Inference: the decoding state of a batch of sequences, memory and timing (include/clmoe/generate.h). */
#include "generate_internal.h"

#include <stdlib.h>
#include <string.h>
#include "clmoe/kda_layer.h"
#include "clmoe/mla.h"

clmoe_status clmoe_gen_state_create(clmoe_model *m, int64_t nseq, const clmoe_gen_options *opts,
                                    clmoe_gen_state **out)
{
  if (!out) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_state_create: state is NULL");
  *out = NULL;
  if (!m || nseq < 1 || nseq > (1 << 20))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_state_create: a model and nseq in [1, 2^20] are "
                        "required (nseq = %lld)", (long long)nseq);
  clmoe_gen_options o = {0};
  if (opts) o = *opts;
  if (o.prefill_chunk == 0) o.prefill_chunk = 2048;
  if (o.cache_dtype == 0) o.cache_dtype = CLMOE_F32;
  if (o.prefill_chunk < 1 || o.prefill_chunk > ((int64_t)1 << 24) || o.reserve_tokens < 0 ||
      (o.cache_dtype != CLMOE_F32 && o.cache_dtype != CLMOE_BF16) || (unsigned)o.extend_form > 2u)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_state_create: prefill_chunk %lld must be in [1, 2^24], "
                        "reserve_tokens %lld >= 0, cache_dtype f32 or bf16, extend_form 0-2", (long long)o.prefill_chunk,
                        (long long)o.reserve_tokens);
  const clmoe_config *c = &m->cfg;
  clmoe_gen_state *g = calloc(1, sizeof *g);
  if (!g) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (generation state)");
  g->model = m, g->ctx = m->ctx, g->nseq = nseq, g->opts = o;
  g->kda = calloc((size_t)c->layers, sizeof *g->kda);
  g->mla = calloc((size_t)c->layers, sizeof *g->mla);
  g->len = calloc((size_t)nseq, sizeof *g->len);
  clmoe_status st = CLMOE_OK;
  if (!g->kda || !g->mla || !g->len) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (generation state)");
    goto fail;
  }
  for (int l = 0; l < c->layers; l++) {
    model_layer *L = &m->layers[l];
    if (L->is_mla) {
      /* reserve_tokens is per sequence */
      int64_t reserve = o.reserve_tokens > 0 ? o.reserve_tokens * nseq : 0;
      CLMOE_TRY_GOTO(st, clmoe_mla_cache_create(g->ctx, &L->mla_cfg, nseq, o.cache_dtype, reserve, &g->mla[l]), fail);
    } else {
      CLMOE_TRY_GOTO(st, clmoe_kda_layer_state_create(g->ctx, &L->kda, nseq, &g->kda[l]), fail);
    }
  }
  *out = g;
  return CLMOE_OK;
fail:
  clmoe__append_error(" (generation state for %lld sequences)", (long long)nseq);
  clmoe_gen_state_destroy(g);
  return st;
}

void clmoe_gen_state_destroy(clmoe_gen_state *g)
{
  if (!g) return;
  for (int l = 0; g->model && l < g->model->cfg.layers; l++) {
    if (g->kda) clmoe_kda_layer_state_destroy(&g->kda[l]);
    if (g->mla) clmoe_mla_cache_destroy(g->mla[l]);
  }
  free(g->kda), free(g->mla), free(g->len);
  free(g);
}

int64_t clmoe_gen_state_nseq(const clmoe_gen_state *g) { return g ? g->nseq : 0; }

int64_t clmoe_gen_length(const clmoe_gen_state *g, int64_t seq)
{
  return g && seq >= 0 && seq < g->nseq ? g->len[seq] : -1;
}

/* Zeroes the slice of sequence seq of a state tensor [nseq, ...]. */
static clmoe_status zero_row(clmoe_tensor *t, int64_t seq)
{
  const int64_t per = clmoe_tensor_numel(t) / t->shape[0];
  clmoe_tensor v;
  CLMOE_TRY(clmoe_tensor_view(t, &v, 1, &per, seq * per));
  return clmoe_tensor_fill(&v, 0.0);
}

clmoe_status clmoe_gen_reset(clmoe_gen_state *g, int64_t seq)
{
  if (!g || seq < 0 || seq >= g->nseq)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_reset: sequence %lld is out of range", (long long)seq);
  for (int l = 0; l < g->model->cfg.layers; l++) {
    if (g->mla[l]) {
      CLMOE_TRY(clmoe_mla_cache_reset(g->mla[l], seq));
      continue;
    }
    clmoe_kda_layer_state *s = &g->kda[l];
    CLMOE_TRY(zero_row(&s->kda, seq));
    CLMOE_TRY(zero_row(&s->conv_q, seq));
    CLMOE_TRY(zero_row(&s->conv_k, seq));
    CLMOE_TRY(zero_row(&s->conv_v, seq));
  }
  g->len[seq] = 0;
  return CLMOE_OK;
}

void clmoe_gen_memory_usage(const clmoe_gen_state *g, clmoe_gen_memory *mem)
{
  memset(mem, 0, sizeof *mem);
  if (!g) return;
  const clmoe_params *ps = &g->model->params;
  for (int i = 0; i < ps->n; i++) mem->weights += clmoe_tensor_bytes(ps->p[i].value);
  for (int64_t s = 0; s < g->nseq; s++) mem->tokens += g->len[s];
  for (int l = 0; l < g->model->cfg.layers; l++) {
    if (g->mla[l]) {
      mem->mla_cache += clmoe_mla_cache_device_bytes(g->mla[l]);
      mem->mla_token_bytes += clmoe_mla_cache_token_bytes(g->mla[l]);
      continue;
    }
    const clmoe_kda_layer_state *s = &g->kda[l];
    mem->kda_state += clmoe_tensor_bytes(&s->kda) + clmoe_tensor_bytes(&s->conv_q) + clmoe_tensor_bytes(&s->conv_k) +
                      clmoe_tensor_bytes(&s->conv_v);
  }
  mem->mla_cache_used = (size_t)mem->tokens * mem->mla_token_bytes;
}

void clmoe_gen_stats_get(const clmoe_gen_state *g, clmoe_gen_stats *stats)
{
  if (g) *stats = g->stats;
  else memset(stats, 0, sizeof *stats);
}
