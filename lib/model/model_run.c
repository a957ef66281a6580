/* The model's forward and backward (include/clmoe/model.h): the layer stack in the order of
 * its schedule (model_stack.c: Block AttnRes, or the plain residual x += f(RMSNorm(x))),
 * each sub-layer's activations kept for the backward, which walks the same steps in
 * reverse. */
#include "model_internal.h"
#include "params_internal.h"
#include "moe/moe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clmoe/model.h"
#include "clmoe/attn_res.h"
#include "clmoe/dist_grads.h"
#include "clmoe/gemm.h"
#include "clmoe/kda_layer.h"
#include "clmoe/mla.h"
#include "clmoe/ops.h"

/* What the forward kept for the backward (the ids, targets and step record stay). */
static void release_kept(clmoe_model *m)
{
  for (int l = 0; m->layers && l < m->cfg.layers; l++) {
    model_layer *L = &m->layers[l];
    for (int s = 0; s < 2; s++) {
      clmoe_tensor_destroy(&L->snap[s]);
      clmoe_tensor_destroy(&L->alpha[s]);
      clmoe_tensor_destroy(&L->h[s]);
      clmoe_tensor_destroy(&L->hn[s]);
      clmoe_tensor_destroy(&L->rstd[s]);
      L->has_snap[s] = 0;
    }
    clmoe_kda_layer_cache_destroy(&L->kcache);
    clmoe_mla_saved_release(&L->msaved);
    clmoe_situ_saved_destroy(&L->fsaved);
    clmoe_moe_saved_destroy(&L->moesaved);
    clmoe_moe_ep_saved_destroy(&L->epsaved);
  }
  clmoe_tensor *t[] = {&m->stream, &m->falpha, &m->fh, &m->fhn, &m->frstd, &m->logits, &m->loss, &m->lse};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
  m->trained = 0;
}

void clmoe__model_release_activations(clmoe_model *m)
{
  release_kept(m);
  clmoe_tensor_destroy(&m->ids), clmoe_tensor_destroy(&m->targets);
  clmoe__model_record_release(m);
}

/* Room for a layer's weight struct with bf16 copies in place (clmoe__model_kda, ...). */
typedef union step_weights {
  clmoe_kda_layer kda;
  clmoe_mla_weights mla;
  clmoe_situ_ffn ffn;
  clmoe_moe_layer moe;
  clmoe_moe_ep_layer ep;
} step_weights;

/* The sub-layer's function: y [N, d] from its normed input x [N, d]. */
static clmoe_status sublayer_forward(clmoe_model *m, model_layer *L, int s, const clmoe_tensor *x,
                                     clmoe_tensor *y, int train)
{
  clmoe_tensor x3, y3;
  const int64_t s3[3] = {m->B, m->T, m->cfg.d_model};
  step_weights wt; /* the layer's weights with their bf16 copies (a bf16 model) */
  if (s == SUB_MIXER) {
    CLMOE_TRY(clmoe_tensor_view(x, &x3, 3, s3, 0));
    CLMOE_TRY(clmoe_tensor_view(y, &y3, 3, s3, 0));
    if (L->is_mla)
      return clmoe_mla_forward(m->ctx, &L->mla_cfg, clmoe__model_mla(m, &L->mla, &wt.mla), &x3, NULL, &y3,
                               train ? &L->msaved : NULL);
    return clmoe_kda_layer_forward(m->ctx, clmoe__model_kda(m, &L->kda, &wt.kda), &x3, NULL, &y3,
                                   train ? &L->kcache : NULL, NULL);
  }
  if (L->is_dense)
    return clmoe_situ_ffn_forward(m->ctx, clmoe__model_ffn(m, &L->ffn, &wt.ffn), x, 0.0f, y, train ? &L->fsaved : NULL);
  if (m->dist) /* a bf16 step's evaluation forward on the tiles too, as the single-rank layer */
    return clmoe__moe_ep_forward(m->ctx, m->dist, clmoe__model_moe_ep(m, &L->ep, &wt.ep), x, y,
                                 train ? &L->epsaved : NULL, m->precision == CLMOE_PRECISION_BF16);
  return clmoe_moe_forward(m->ctx, clmoe__model_moe(m, &L->moe, &wt.moe), x, y, train ? &L->moesaved : NULL);
}

/* dx [N, d] (overwritten) from dy for the sub-layer; its weight gradients are added to the
 * registry's (the layers overwrite their gradient tensors; each runs once per step). */
static clmoe_status sublayer_backward(clmoe_model *m, model_layer *L, int s, const clmoe_tensor *x,
                                      const clmoe_tensor *dy, clmoe_tensor *dx)
{
  clmoe_tensor x3, dy3, dx3;
  const int64_t s3[3] = {m->B, m->T, m->cfg.d_model};
  step_weights wt;
  if (s == SUB_MIXER) {
    CLMOE_TRY(clmoe_tensor_view(x, &x3, 3, s3, 0));
    CLMOE_TRY(clmoe_tensor_view(dy, &dy3, 3, s3, 0));
    CLMOE_TRY(clmoe_tensor_view(dx, &dx3, 3, s3, 0));
    if (L->is_mla)
      return clmoe_mla_backward(m->ctx, &L->mla_cfg, clmoe__model_mla(m, &L->mla, &wt.mla), &x3, NULL, &L->msaved,
                                &dy3, &dx3, &L->mla_g);
    CLMOE_TRY(clmoe_tensor_fill(dx, 0.0)); /* the KDA mixer adds into dx */
    return clmoe_kda_layer_backward(m->ctx, clmoe__model_kda(m, &L->kda, &wt.kda), &x3, NULL, &L->kcache, &dy3,
                                    &L->kda_g, &dx3);
  }
  if (L->is_dense)
    return clmoe_situ_ffn_backward(m->ctx, clmoe__model_ffn(m, &L->ffn, &wt.ffn), x, &L->fsaved, dy, &L->ffn_g,
                                   0.0f, dx);
  if (m->dist)
    return clmoe_moe_ep_backward(m->ctx, m->dist, clmoe__model_moe_ep(m, &L->ep, &wt.ep), x, &L->epsaved, dy,
                                 &L->moe_g, dx);
  return clmoe_moe_backward(m->ctx, clmoe__model_moe(m, &L->moe, &wt.moe), x, &L->moesaved, dy, &L->moe_g, dx);
}

/* The storage of a sub-layer's normed input [N, d]: bf16 in a bf16 step where every reader
 * of it rounds it to bf16 anyway (the KDA and MLA projections and the dense FFN, all with
 * bf16 weight copies), so the norm rounds it once and the forward's products and the
 * backward's dW = dY^T X read it as it is; fp32 otherwise. The MoE layers keep fp32: their
 * router's input check takes fp32 only. */
static clmoe_dtype normed_dtype(const clmoe_model *m, const model_layer *L, int s)
{
  if (m->precision != CLMOE_PRECISION_BF16) return CLMOE_F32;
  return s == SUB_MIXER || L->is_dense ? CLMOE_BF16 : CLMOE_F32;
}

static clmoe_status upload_ids(clmoe_model *m, clmoe_tensor *t, const int32_t *host, const char *what)
{
  const int64_t V = m->cfg.vocab;
  for (int64_t i = 0; i < m->N; i++)
    if (host[i] >= V || (host[i] < 0 && t == &m->ids))
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s %lld is %d: outside the vocabulary [0, %lld)", what,
                          (long long)i, host[i], (long long)V);
  CLMOE_TRY(clmoe_tensor_create(m->ctx, t, CLMOE_I32, 1, &m->N));
  /* staged: the runtime keeps a copy, the host does not wait */
  return clmoe__write_staged(m->ctx, t->buf, (size_t)t->offset * sizeof *host, (size_t)m->N * sizeof *host, host);
}

/* A sub-layer of the plain residual: x [N, d] += f(RMSNorm(x)), out [N, d] scratch. A train
 * forward keeps the x it saw (h), RMSNorm(x) (hn, in normed_dtype) and its rstd; inference
 * keeps nothing. */
static clmoe_status plain_sublayer(clmoe_model *m, model_layer *L, int s, clmoe_tensor *x, clmoe_tensor *out,
                                   int train)
{
  clmoe_ctx *ctx = m->ctx;
  const int64_t d = m->cfg.d_model;
  const float eps = (float)m->cfg.norm_eps;
  clmoe_status st;
  if (train) {
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &L->h[s], CLMOE_F32, 2, (int64_t[]){m->N, d}), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_copy(&L->h[s], x), done);
  }
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &L->hn[s], normed_dtype(m, L, s), 2, (int64_t[]){m->N, d}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &L->rstd[s], CLMOE_F32, 1, &m->N), done);
  CLMOE_TRY_GOTO(st, clmoe_rmsnorm(ctx, x, &L->norm[s], eps, &L->hn[s], &L->rstd[s]), done);
  CLMOE_TRY_GOTO(st, sublayer_forward(m, L, s, &L->hn[s], out, train), done);
  st = clmoe_axpy(ctx, 1.0f, out, x);
done:
  if (!train) clmoe_tensor_destroy(&L->hn[s]), clmoe_tensor_destroy(&L->rstd[s]);
  return st; /* a failed train forward's tensors go with the rest of its activations */
}

clmoe_status clmoe_model_forward(clmoe_model *m, int64_t B, int64_t T, const int32_t *tokens,
                                 const int32_t *targets, int train, double *loss, int64_t *scored)
{
  clmoe__model_release_activations(m);
  if (B < 1 || T < 1 || !tokens)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_model_forward: B, T >= 1 and tokens are required");
  if (train && !targets) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_model_forward: training needs targets");
  if (train && m->inference_only)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_model_forward: this model was loaded for inference only");
  clmoe_ctx *ctx = m->ctx;
  const clmoe_config *c = &m->cfg;
  const int64_t d = c->d_model, V = c->vocab;
  m->B = B, m->T = T, m->N = B * T;
  clmoe_status st;
  clmoe_tensor out = {0}, x0, slot, src, sum1 = {0};
  CLMOE_TRY_GOTO(st, upload_ids(m, &m->ids, tokens, "token"), fail);
  if (targets) CLMOE_TRY_GOTO(st, upload_ids(m, &m->targets, targets, "target"), fail);
  if (targets) CLMOE_TRY_GOTO(st, clmoe__model_record_create(m, train), fail);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m->stream, CLMOE_F32, 3, (int64_t[]){m->nslots, m->N, d}), fail);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &out, CLMOE_F32, 2, (int64_t[]){m->N, d}), fail);
  CLMOE_TRY_GOTO(st, clmoe__model_stream_slot(&m->stream, 0, &x0), fail);
  clmoe_tensor flag; /* with targets: the bad-id check read with the loss */
  if (targets) CLMOE_TRY_GOTO(st, clmoe__model_record_word(m, REC_EMBED, 1, &flag), fail);
  CLMOE_TRY_GOTO(st, targets ? clmoe_embedding_nowait(ctx, &m->embed, &m->ids, &x0, &flag)
                             : clmoe_embedding(ctx, &m->embed, &m->ids, &x0), fail);
  const float eps = (float)c->norm_eps;
  model_stack it;
  for (clmoe__model_stack_begin(&it, c); !it.final; clmoe__model_stack_next(&it)) {
    model_layer *L = &m->layers[it.layer];
    const int s = it.sub, nsrc = it.nsrc;
    L->slot[s] = it.slot, L->nsrc[s] = nsrc;
    CLMOE_TRY_GOTO(st, clmoe__model_stream_slot(&m->stream, it.slot, &slot), fail);
    if (it.plain) {
      CLMOE_TRY_GOTO(st, plain_sublayer(m, L, s, &slot, &out, train), fail);
      continue;
    }
    if (train && !it.empty) { /* the partial sum this sub-layer sees, for the backward */
      CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &L->snap[s], CLMOE_F32, 2, (int64_t[]){m->N, d}), fail);
      CLMOE_TRY_GOTO(st, clmoe_tensor_copy(&L->snap[s], &slot), fail);
      L->has_snap[s] = 1;
    }
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &L->alpha[s], CLMOE_F32, 2, (int64_t[]){m->N, nsrc}), fail);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &L->h[s], CLMOE_F32, 2, (int64_t[]){m->N, d}), fail);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &L->hn[s], normed_dtype(m, L, s), 2, (int64_t[]){m->N, d}), fail);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &L->rstd[s], CLMOE_F32, 1, &m->N), fail);
    CLMOE_TRY_GOTO(st, clmoe__model_stream_sources(&m->stream, nsrc, &src), fail);
    CLMOE_TRY_GOTO(st, clmoe_attn_res(ctx, &src, &L->ar_w[s], &L->ar_g[s], eps, &L->h[s], &L->alpha[s]), fail);
    CLMOE_TRY_GOTO(st, clmoe_rmsnorm(ctx, &L->h[s], &L->norm[s], eps, &L->hn[s], &L->rstd[s]), fail);
    CLMOE_TRY_GOTO(st, sublayer_forward(m, L, s, &L->hn[s], &out, train), fail);
    CLMOE_TRY_GOTO(st, it.empty ? clmoe_tensor_copy(&slot, &out) : clmoe_axpy(ctx, 1.0f, &out, &slot), fail);
    if (!train) { /* inference keeps nothing */
      clmoe_tensor_destroy(&L->alpha[s]), clmoe_tensor_destroy(&L->h[s]);
      clmoe_tensor_destroy(&L->hn[s]), clmoe_tensor_destroy(&L->rstd[s]);
    }
  }
  m->final_nsrc = it.nsrc;
  if (!it.plain) {
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m->falpha, CLMOE_F32, 2, (int64_t[]){m->N, m->final_nsrc}), fail);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m->fh, CLMOE_F32, 2, (int64_t[]){m->N, d}), fail);
  }
  /* the head's input: bf16 when the head's product rounds it (its bf16 copy) */
  const clmoe_dtype fdt = clmoe__model_weight(m, &m->head)->dtype == CLMOE_BF16 ? CLMOE_BF16 : CLMOE_F32;
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m->fhn, fdt, 2, (int64_t[]){m->N, d}), fail);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m->frstd, CLMOE_F32, 1, &m->N), fail);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m->logits, CLMOE_F32, 2, (int64_t[]){m->N, V}), fail);
  if (it.plain) { /* the final norm of the running sum (slot 0, which the backward reads) */
    CLMOE_TRY_GOTO(st, clmoe__model_stream_slot(&m->stream, 0, &slot), fail);
    CLMOE_TRY_GOTO(st, clmoe_rmsnorm(ctx, &slot, &m->fnorm, eps, &m->fhn, &m->frstd), fail);
  } else {
    CLMOE_TRY_GOTO(st, clmoe__model_stream_sources(&m->stream, m->final_nsrc, &src), fail);
    CLMOE_TRY_GOTO(st, clmoe_attn_res(ctx, &src, &m->far_w, &m->far_g, eps, &m->fh, &m->falpha), fail);
    CLMOE_TRY_GOTO(st, clmoe_rmsnorm(ctx, &m->fh, &m->fnorm, eps, &m->fhn, &m->frstd), fail);
  }
  CLMOE_TRY_GOTO(st, clmoe_linear(ctx, &m->fhn, clmoe__model_weight(m, &m->head), NULL, &m->logits), fail);
  m->scored = 0;
  if (targets) {
    for (int64_t i = 0; i < m->N; i++) m->scored += targets[i] >= 0;
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m->loss, CLMOE_F32, 1, &m->N), fail);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m->lse, CLMOE_F32, 1, &m->N), fail);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &sum1, CLMOE_F32, 1, (int64_t[]){1}), fail);
    CLMOE_TRY_GOTO(st, clmoe__model_record_word(m, REC_XENT_FWD, 1, &flag), fail);
    CLMOE_TRY_GOTO(st, clmoe_cross_entropy_nowait(ctx, &m->logits, &m->targets, &m->loss, &m->lse, &flag), fail);
    CLMOE_TRY_GOTO(st, clmoe_sum(ctx, &m->loss, &sum1), fail);
    CLMOE_TRY_GOTO(st, clmoe__model_record_forward(m, &sum1, train), fail);
    /* loss: read now (the later words are still -1), else at the step's end */
    if (loss) CLMOE_TRY_GOTO(st, clmoe__model_record_read(m, loss, NULL), fail);
  }
  if (scored) *scored = m->scored;
  m->trained = train;
  clmoe_tensor_destroy(&out);
  clmoe_tensor_destroy(&sum1);
  return CLMOE_OK;
fail:
  clmoe_tensor_destroy(&out);
  clmoe_tensor_destroy(&sum1);
  clmoe__model_release_activations(m);
  return st;
}

/* The registry's gradient of a parameter tensor the model owns. */
static clmoe_tensor *grad_of(clmoe_model *m, const clmoe_tensor *value)
{
  for (int i = 0; i < m->params.n; i++)
    if (m->params.p[i].value == value) return &m->params.p[i].grad;
  return NULL;
}

/* The backward of an RMSNorm: dhn -> *tmp_dh (overwritten), the gain's gradient (added). */
static clmoe_status norm_backward(clmoe_model *m, const clmoe_tensor *norm, const clmoe_tensor *h,
                                  const clmoe_tensor *rstd, const clmoe_tensor *dhn, clmoe_tensor *tmp_dh,
                                  clmoe_tensor *tmp_d)
{
  CLMOE_TRY(clmoe_rmsnorm_backward(m->ctx, h, norm, rstd, dhn, tmp_dh, tmp_d));
  return clmoe_axpy(m->ctx, 1.0f, tmp_d, grad_of(m, norm));
}

/* The backward of the plain residual's RMSNorm: dhn -> dx [N, d] (added: the running sum's
 * gradient, which also passes through the residual), the gain's gradient (added). */
static clmoe_status plain_backward(clmoe_model *m, const clmoe_tensor *norm, const clmoe_tensor *x,
                                   const clmoe_tensor *rstd, const clmoe_tensor *dhn, clmoe_tensor *dx,
                                   clmoe_tensor *tmp_dh, clmoe_tensor *tmp_d)
{
  CLMOE_TRY(norm_backward(m, norm, x, rstd, dhn, tmp_dh, tmp_d));
  return clmoe_axpy(m->ctx, 1.0f, tmp_dh, dx);
}

/* The backward of an AttnRes + RMSNorm pair: dhn -> dsources (added), gains and query. */
static clmoe_status mix_backward(clmoe_model *m, const clmoe_tensor *src, const clmoe_tensor *w, const clmoe_tensor *g,
                                 const clmoe_tensor *norm, const clmoe_tensor *alpha, const clmoe_tensor *h,
                                 const clmoe_tensor *rstd, const clmoe_tensor *dhn, clmoe_tensor *dsrc,
                                 clmoe_tensor *tmp_dh, clmoe_tensor *tmp_d)
{
  clmoe_ctx *ctx = m->ctx;
  const float eps = (float)m->cfg.norm_eps;
  CLMOE_TRY(norm_backward(m, norm, h, rstd, dhn, tmp_dh, tmp_d));
  clmoe_tensor dw = {0}, dg = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dw, CLMOE_F32, 1, &m->cfg.d_model), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dg, CLMOE_F32, 1, &m->cfg.d_model), done);
  CLMOE_TRY_GOTO(st, clmoe_attn_res_backward(ctx, src, w, g, eps, alpha, tmp_dh, dsrc, &dw, &dg), done);
  CLMOE_TRY_GOTO(st, clmoe_axpy(ctx, 1.0f, &dw, grad_of(m, w)), done);
  st = clmoe_axpy(ctx, 1.0f, &dg, grad_of(m, g));
done:
  clmoe_tensor_destroy(&dw);
  clmoe_tensor_destroy(&dg);
  return st;
}

clmoe_status clmoe_model_backward(clmoe_model *m)
{
  if (!m->trained) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_model_backward needs a train forward first");
  /* The loss is a mean over loss_count tokens (every rank's, set by the trainer) or over this
   * forward's scored ones. Expert-parallel ranks run the backward even with nothing scored
   * here: their experts serve the other ranks' tokens. */
  const int64_t count = m->loss_count > 0 ? m->loss_count : m->scored;
  if (count == 0 || (m->scored == 0 && !m->dist)) {
    release_kept(m);
    return CLMOE_OK; /* nothing scored: no gradient */
  }
  clmoe_ctx *ctx = m->ctx;
  const clmoe_config *c = &m->cfg;
  const int64_t d = c->d_model, V = c->vocab;
  clmoe_tensor dstream = {0}, dlogits = {0}, dhn = {0}, dh = {0}, dd = {0}, src, dsrc, slot, dslot;
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe_tensor_zeros(ctx, &dstream, CLMOE_F32, 3, (int64_t[]){m->nslots, m->N, d}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dlogits, CLMOE_F32, 2, (int64_t[]){m->N, V}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dhn, CLMOE_F32, 2, (int64_t[]){m->N, d}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dh, CLMOE_F32, 2, (int64_t[]){m->N, d}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dd, CLMOE_F32, 1, &d), done);
  /* loss -> logits -> head, final norm, final AttnRes */
  clmoe_tensor flag;
  CLMOE_TRY_GOTO(st, clmoe__model_record_word(m, REC_XENT_BWD, 1, &flag), done);
  CLMOE_TRY_GOTO(st, clmoe_cross_entropy_backward_nowait(ctx, &m->logits, &m->targets, &m->lse,
                                                         1.0f / (float)count, &dlogits, &flag), done);
  CLMOE_TRY_GOTO(st, clmoe_linear_backward(ctx, &m->fhn, clmoe__model_weight(m, &m->head), &dlogits, &dhn,
                                           grad_of(m, &m->head), NULL, CLMOE_LINEAR_ACC_DW), done);
  clmoe_tensor_destroy(&dlogits);
  const int plain = c->residual == CLMOE_RESIDUAL_PLAIN;
  if (plain) { /* one slot: the running sum, what the final norm saw */
    CLMOE_TRY_GOTO(st, clmoe__model_stream_slot(&m->stream, 0, &slot), done);
    CLMOE_TRY_GOTO(st, clmoe__model_stream_slot(&dstream, 0, &dslot), done);
    CLMOE_TRY_GOTO(st, plain_backward(m, &m->fnorm, &slot, &m->frstd, &dhn, &dslot, &dh, &dd), done);
  } else {
    CLMOE_TRY_GOTO(st, clmoe__model_stream_sources(&m->stream, m->final_nsrc, &src), done);
    CLMOE_TRY_GOTO(st, clmoe__model_stream_sources(&dstream, m->final_nsrc, &dsrc), done);
    CLMOE_TRY_GOTO(st, mix_backward(m, &src, &m->far_w, &m->far_g, &m->fnorm, &m->falpha, &m->fh, &m->frstd, &dhn,
                                    &dsrc, &dh, &dd), done);
  }
  /* The sub-layers in reverse: each one's output gradient is its block slot's gradient so
   * far (every later consumer has added to it). */
  for (int l = c->layers - 1; l >= 0; l--) {
    model_layer *L = &m->layers[l];
    for (int s = 1; s >= 0; s--) {
      const int bi = L->slot[s], nsrc = L->nsrc[s];
      CLMOE_TRY_GOTO(st, clmoe__model_stream_slot(&m->stream, bi, &slot), done);
      CLMOE_TRY_GOTO(st, clmoe__model_stream_slot(&dstream, bi, &dslot), done);
      CLMOE_TRY_GOTO(st, sublayer_backward(m, L, s, &L->hn[s], &dslot, &dhn), done);
      if (plain) { /* dx = dy + RMSNorm's backward of dhn at the x the sub-layer saw */
        CLMOE_TRY_GOTO(st, plain_backward(m, &L->norm[s], &L->h[s], &L->rstd[s], &dhn, &dslot, &dh, &dd), done);
        continue;
      }
      /* The sources as this sub-layer saw them: its block's partial sum before it. */
      if (L->has_snap[s]) CLMOE_TRY_GOTO(st, clmoe_tensor_copy(&slot, &L->snap[s]), done);
      CLMOE_TRY_GOTO(st, clmoe__model_stream_sources(&m->stream, nsrc, &src), done);
      CLMOE_TRY_GOTO(st, clmoe__model_stream_sources(&dstream, nsrc, &dsrc), done);
      CLMOE_TRY_GOTO(st, mix_backward(m, &src, &L->ar_w[s], &L->ar_g[s], &L->norm[s], &L->alpha[s], &L->h[s],
                                      &L->rstd[s], &dhn, &dsrc, &dh, &dd), done);
    }
  }
  CLMOE_TRY_GOTO(st, clmoe__model_stream_slot(&dstream, 0, &dslot), done);
  st = clmoe_embedding_backward(ctx, &m->ids, &dslot, grad_of(m, &m->embed));
done:
  clmoe_tensor_destroy(&dstream), clmoe_tensor_destroy(&dlogits), clmoe_tensor_destroy(&dhn);
  clmoe_tensor_destroy(&dh), clmoe_tensor_destroy(&dd);
  if (st == CLMOE_OK) release_kept(m), m->rec_state = REC_QUEUED; /* a new flag */
  return st;
}

clmoe_status clmoe_model_balance_update(clmoe_model *m)
{
  if (!m->trained) return CLMOE_OK;
  for (int l = 0; l < m->cfg.layers; l++) {
    model_layer *L = &m->layers[l];
    if (L->is_dense) continue;
    if (m->dist) { /* every rank's histogram counts, so that every rank sets the same bias */
      if (L->ep.cfg.balance == CLMOE_MOE_BALANCE_NONE) continue;
      CLMOE_TRY(clmoe_dist_sum_qb_histogram(m->dist, &L->epsaved.local));
      CLMOE_TRY(clmoe_moe_balance_update(m->ctx, &L->ep.dense, &L->epsaved.local));
      /* the same counts, but each device rounds its own way: rank 0's bias for all */
      CLMOE_TRY(clmoe_dist_broadcast_tensor(m->dist, &L->ep.dense.bias, 0));
    } else {
      CLMOE_TRY(clmoe_moe_balance_update(m->ctx, &L->moe, &L->moesaved));
    }
  }
  return CLMOE_OK;
}
