/* The training step's record on the device and its one read (include/clmoe/model.h:
 * clmoe_model_adamw, clmoe_model_step_read): the loss sum, the embedding's and the
 * cross-entropy's bad-input flags, the gradient norm and each MoE layer's expert offsets
 * are copied into one i32 buffer as the step runs (model_run.c), and the host reads it once
 * at the step's end. Layout: REC_* in model_internal.h. */
#include "model_internal.h"
#include "params_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clmoe/model.h"
#include "clmoe/ops.h"

/* Frees the record and forgets what was read of it. */
void clmoe__model_record_release(clmoe_model *m)
{
  clmoe_tensor_destroy(&m->record);
  free(m->rec_host);
  m->rec_host = NULL, m->rec_words = 0, m->rec_state = REC_NONE, m->norm_src = NORM_NONE;
}

/* Words [w, w + n) of the step record. */
clmoe_status clmoe__model_record_word(clmoe_model *m, int64_t w, int64_t n, clmoe_tensor *v)
{
  return clmoe_tensor_view(&m->record, v, 1, (int64_t[]){n}, w);
}

/* n words of src into the record at word w, on the device. */
static clmoe_status record_put(clmoe_model *m, int64_t w, const clmoe_tensor *src, int64_t n)
{
  if (n == 0) return CLMOE_OK;
  CLMOE_CL(clEnqueueCopyBuffer(m->ctx->queue, src->buf, m->record.buf, (size_t)src->offset * 4,
                               (size_t)(m->record.offset + w) * 4, (size_t)n * 4, 0, NULL, NULL));
  return CLMOE_OK;
}

/* The record of a forward with targets, filled with -1 (no word is read unwritten); MoE
 * offsets in a training forward of one process. */
clmoe_status clmoe__model_record_create(clmoe_model *m, int train)
{
  int64_t words = REC_MOE;
  for (int l = 0; train && !m->dist && l < m->cfg.layers; l++)
    if (!m->layers[l].is_dense) words += m->layers[l].moe.cfg.n_experts + 1;
  CLMOE_TRY(clmoe_tensor_create(m->ctx, &m->record, CLMOE_I32, 1, &words));
  m->rec_words = words;
  CLMOE_TRY(clmoe_tensor_fill(&m->record, -1.0));
  m->rec_state = REC_QUEUED;
  return CLMOE_OK;
}

/* The loss sum and each MoE layer's expert offsets into the record. */
clmoe_status clmoe__model_record_forward(clmoe_model *m, const clmoe_tensor *sum1, int train)
{
  CLMOE_TRY(record_put(m, REC_LOSS, sum1, 1));
  int64_t w = REC_MOE;
  for (int l = 0; train && !m->dist && l < m->cfg.layers; l++) {
    const model_layer *L = &m->layers[l];
    if (L->is_dense) continue;
    const int64_t n = L->moe.cfg.n_experts + 1;
    if (clmoe_tensor_numel(&L->moesaved.disp.offsets) != n)
      return clmoe__error(CLMOE_ERR_SHAPE, "layer %d: no expert offsets [%lld]", l, (long long)n);
    CLMOE_TRY(record_put(m, w, &L->moesaved.disp.offsets, n));
    w += n;
  }
  return CLMOE_OK;
}

/* One read of the record, then its errors in the step's order: a bad token id, a bad
 * target (forward, backward). *loss and *norm are set first (NAN: none). */
clmoe_status clmoe__model_record_read(clmoe_model *m, double *loss, double *norm)
{
  if (loss) *loss = NAN;
  if (norm) *norm = NAN;
  if (m->rec_state == REC_NONE || !m->record.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_model_step_read: no step to read");
  if (m->rec_state == REC_QUEUED) {
    if (!m->rec_host) m->rec_host = malloc((size_t)m->rec_words * sizeof *m->rec_host);
    if (!m->rec_host) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "the step record");
    CLMOE_TRY(clmoe_tensor_read(&m->record, m->rec_host, (size_t)m->rec_words * sizeof *m->rec_host));
    m->rec_state = REC_READ;
  }
  const int32_t *h = m->rec_host;
  float total;
  double nrm;
  memcpy(&total, &h[REC_LOSS], sizeof total);
  const uint64_t bits = (uint64_t)(uint32_t)h[REC_NORM] | (uint64_t)(uint32_t)h[REC_NORM + 1] << 32;
  memcpy(&nrm, &bits, sizeof nrm);
  if (m->norm_src == NORM_HOST) nrm = m->norm_host;
  if (m->norm_src == NORM_NONE) nrm = NAN;
  if (loss) *loss = m->scored ? (double)total / (double)m->scored : 0.0;
  if (norm) *norm = nrm;
  CLMOE_TRY(clmoe_embedding_report(m->ctx, &m->embed, &m->ids, h[REC_EMBED]));
  if (m->targets.buf) {
    CLMOE_TRY(clmoe_cross_entropy_report(m->ctx, m->cfg.vocab, &m->targets, 0, h[REC_XENT_FWD]));
    CLMOE_TRY(clmoe_cross_entropy_report(m->ctx, m->cfg.vocab, &m->targets, 1, h[REC_XENT_BWD]));
  }
  return CLMOE_OK;
}

clmoe_status clmoe_model_adamw(clmoe_model *m, const clmoe_adamw *hp, double clip)
{
  if (m->rec_state == REC_NONE || !m->record.buf)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_model_adamw needs a train forward first");
  clmoe_tensor norm;
  CLMOE_TRY(clmoe__model_record_word(m, REC_NORM, 2, &norm));
  m->norm_src = NORM_NONE;
  clmoe_status st = clmoe__params_adamw_nowait(&m->params, hp, clip, &norm);
  if (st == CLMOE_OK) m->norm_src = NORM_RECORD, m->rec_state = REC_QUEUED;
  if (st != CLMOE_ERR_UNSUPPORTED) return st;
  /* no fp64: the norm is read here */
  st = clmoe_params_adamw(&m->params, hp, clip, &m->norm_host);
  if (st == CLMOE_OK) m->norm_src = NORM_HOST;
  return st;
}

clmoe_status clmoe_model_step_read(clmoe_model *m, double *loss, double *norm)
{
  double nrm;
  CLMOE_TRY(clmoe__model_record_read(m, loss, &nrm));
  if (norm) *norm = nrm;
  if (m->norm_src != NORM_NONE && !isfinite(nrm)) {
    if (m->norm_src == NORM_RECORD) m->params.step--; /* the kernels skipped the step */
    m->norm_src = NORM_HOST, m->norm_host = nrm;       /* once */
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "the gradient norm is %g: the step was not taken", nrm);
  }
  return CLMOE_OK;
}

