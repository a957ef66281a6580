/* The KDA plan, at the bottom of the KDA host code: argument checks, the chunk and sequence
 * tables on the device, the build options of the KDA programs, the backward's gradient
 * checks and its result for zero tokens, and the backward's scratch set. Everything else in
 * lib/kda/ builds on these (kda_internal.h). */
#include "kda_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void clmoe__kda_options(const kda_plan *p, int out_bf16, char *buf, size_t len)
{
  snprintf(buf, len, "-DKD=%d -DVD=%d -DSTORE_BF16=%d -DOUT_BF16=%d", (int)p->K, (int)p->V,
           p->in_bf16, out_bf16);
}

static clmoe_status upload_int2(clmoe_ctx *ctx, const cl_int *host, size_t pairs, cl_mem *mem,
                                size_t *bytes)
{
  *bytes = (pairs ? pairs : 1) * 2 * sizeof(cl_int);
  CLMOE_TRY(clmoe__scratch(ctx, *bytes, mem));
  if (pairs == 0) return CLMOE_OK;
  const clmoe_status st = clmoe__write_staged(ctx, *mem, 0, pairs * 2 * sizeof(cl_int), host);
  if (st != CLMOE_OK) {
    clmoe__scratch_release(ctx, *mem, *bytes);
    *mem = NULL;
    return st;
  }
  return CLMOE_OK;
}

clmoe_status clmoe__kda_resolve_options(const char *op, const clmoe_kda_options *opts, int64_t K, float *scale,
                                        float *lb, int *unbounded)
{
  *lb = opts->lower_bound == 0.0f ? -5.0f : opts->lower_bound;
  if (!(*lb >= -5.0f && *lb < 0.0f))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: lower_bound %g is outside [-5, 0)", op,
                        (double)opts->lower_bound);
  *scale = opts->scale == 0.0f ? 1.0f / sqrtf((float)K) : opts->scale;
  if (!isfinite(*scale)) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: scale is not finite", op);
  if (opts->gate != CLMOE_KDA_GATE_BOUNDED && opts->gate != CLMOE_KDA_GATE_UNBOUNDED)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: unknown gate form %d", op, (int)opts->gate);
  *unbounded = opts->gate == CLMOE_KDA_GATE_UNBOUNDED;
  return CLMOE_OK;
}

clmoe_status clmoe__kda_plan_make(clmoe_ctx *ctx, const char *op, const clmoe_kda_options *opts,
                                  const clmoe_kda_inputs *in, kda_plan *p)
{
  memset(p, 0, sizeof *p);
  clmoe_kda_options none = {0};
  if (!opts) opts = &none;
  if (!in || !in->q || !in->k || !in->v || !in->g || !in->beta || !in->A_log || !in->dt_bias)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: q, k, v, g, beta, A_log and dt_bias are required", op);
  const clmoe_tensor *q = in->q;
  char desc[96];
  if (q->ndim != 4 || (q->dtype != CLMOE_F32 && q->dtype != CLMOE_BF16))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: q is %s, expected [B, T, H, K] f32 or bf16", op,
                        clmoe_tensor_describe(q, desc, sizeof desc));
  p->B = q->shape[0], p->T = q->shape[1], p->H = q->shape[2], p->K = q->shape[3];
  p->V = in->v->ndim == 4 ? in->v->shape[3] : -1;
  p->in_bf16 = q->dtype == CLMOE_BF16;
  if (p->K < 1 || p->K > KDA_MAX_K || p->V < 1 || p->V > KDA_MAX_V || p->H < 1)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: head sizes K = %lld, V = %lld (H = %lld): "
                        "1 <= K, V <= %d are supported", op, (long long)p->K, (long long)p->V,
                        (long long)p->H, KDA_MAX_K);
  if (p->B * p->T * p->H > INT32_MAX)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: B T H = %lld tokens x heads exceeds 2^31", op,
                        (long long)(p->B * p->T * p->H));
  int bf = p->in_bf16;
  struct { const clmoe_tensor *t; const char *name; int64_t last; } same[] = {
      {in->q, "q", p->K}, {in->k, "k", p->K}, {in->g, "g", p->K}, {in->v, "v", p->V}};
  for (int i = 0; i < 4; i++) {
    CLMOE_TRY(clmoe__want_shape(same[i].t, op, same[i].name, 1, 4, p->B, p->T, p->H, same[i].last));
    if ((same[i].t->dtype == CLMOE_BF16) != bf)
      return clmoe__error(CLMOE_ERR_SHAPE, "%s: q, k, v, g and beta must share one storage type "
                          "(q is %s, %s is %s)", op, clmoe_dtype_name(q->dtype), same[i].name,
                          clmoe_dtype_name(same[i].t->dtype));
  }
  CLMOE_TRY(clmoe__want_shape(in->beta, op, "beta", 1, 3, p->B, p->T, p->H, 0));
  if ((in->beta->dtype == CLMOE_BF16) != bf)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: beta's storage type differs from q's", op);
  CLMOE_TRY(clmoe__want_shape(in->A_log, op, "A_log", 0, 1, p->H, 0, 0, 0));
  CLMOE_TRY(clmoe__want_shape(in->dt_bias, op, "dt_bias", 0, 2, p->H, p->K, 0, 0));

  CLMOE_TRY(clmoe__kda_resolve_options(op, opts, p->K, &p->scale, &p->lb, &p->unbounded));
  p->nvs = (int)((p->V + KDA_VS - 1) / KDA_VS);

  cl_int *bounds = NULL;
  CLMOE_TRY(clmoe__seq_bounds(op, in->cu_seqlens, p->B, p->T, &p->N, &bounds));
  if (in->initial_state) {
    clmoe_status st = clmoe__want_shape(in->initial_state, op, "initial_state", 0, 4, p->N, p->H, p->K, p->V);
    if (st != CLMOE_OK) {
      free(bounds);
      return st;
    }
  }
  /* Tables: chunks of 16 tokens inside each sequence. */
  int64_t nchunks = 0;
  for (int64_t n = 0; n < p->N; n++) nchunks += (bounds[n + 1] - bounds[n] + KDA_CHUNK - 1) / KDA_CHUNK;
  cl_int *chunks = malloc((size_t)(nchunks ? nchunks : 1) * 2 * sizeof *chunks);
  cl_int *seqc = malloc((size_t)p->N * 2 * sizeof *seqc), *seqt = malloc((size_t)p->N * 2 * sizeof *seqt);
  clmoe_status st = CLMOE_OK;
  if (!chunks || !seqc || !seqt) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    goto done;
  }
  int64_t c = 0;
  for (int64_t n = 0; n < p->N; n++) {
    seqc[2 * n] = (cl_int)c;
    seqt[2 * n] = bounds[n];
    seqt[2 * n + 1] = bounds[n + 1] - bounds[n];
    for (cl_int t = bounds[n]; t < bounds[n + 1]; t += KDA_CHUNK, c++) {
      chunks[2 * c] = t;
      chunks[2 * c + 1] = bounds[n + 1] - t < KDA_CHUNK ? bounds[n + 1] - t : KDA_CHUNK;
    }
    seqc[2 * n + 1] = (cl_int)(c - seqc[2 * n]);
  }
  p->nchunks = (int)nchunks;
  CLMOE_TRY_GOTO(st, upload_int2(ctx, chunks, (size_t)nchunks, &p->chunks, &p->chunks_bytes), done);
  CLMOE_TRY_GOTO(st, upload_int2(ctx, seqc, (size_t)p->N, &p->seq_chunks, &p->seq_bytes), done);
  CLMOE_TRY_GOTO(st, upload_int2(ctx, seqt, (size_t)p->N, &p->seq_tokens, &p->seq_bytes), done);
done:
  free(bounds), free(chunks), free(seqc), free(seqt);
  if (st != CLMOE_OK) clmoe__kda_plan_release(ctx, p);
  return st;
}

void clmoe__kda_plan_release(clmoe_ctx *ctx, kda_plan *p)
{
  clmoe__scratch_release(ctx, p->chunks, p->chunks_bytes);
  clmoe__scratch_release(ctx, p->seq_chunks, p->seq_bytes);
  clmoe__scratch_release(ctx, p->seq_tokens, p->seq_bytes);
  p->chunks = p->seq_chunks = p->seq_tokens = NULL;
}

clmoe_status clmoe__kda_check_grads(const char *op, const kda_plan *p, const clmoe_tensor *dout,
                                    const clmoe_tensor *dht, const clmoe_kda_grads *g)
{
  if (!g) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: grads is NULL", op);
  CLMOE_TRY(clmoe__want_shape(dout, op, "dout", 0, 4, p->B, p->T, p->H, p->V));
  if (dht) CLMOE_TRY(clmoe__want_shape(dht, op, "dfinal_state", 0, 4, p->N, p->H, p->K, p->V));
  CLMOE_TRY(clmoe__want_shape(g->dq, op, "dq", 0, 4, p->B, p->T, p->H, p->K));
  CLMOE_TRY(clmoe__want_shape(g->dk, op, "dk", 0, 4, p->B, p->T, p->H, p->K));
  CLMOE_TRY(clmoe__want_shape(g->dg, op, "dg", 0, 4, p->B, p->T, p->H, p->K));
  CLMOE_TRY(clmoe__want_shape(g->dv, op, "dv", 0, 4, p->B, p->T, p->H, p->V));
  CLMOE_TRY(clmoe__want_shape(g->dbeta, op, "dbeta", 0, 3, p->B, p->T, p->H, 0));
  CLMOE_TRY(clmoe__want_shape(g->dA_log, op, "dA_log", 0, 1, p->H, 0, 0, 0));
  CLMOE_TRY(clmoe__want_shape(g->ddt_bias, op, "ddt_bias", 0, 2, p->H, p->K, 0, 0));
  if (g->dinitial_state)
    CLMOE_TRY(clmoe__want_shape(g->dinitial_state, op, "dinitial_state", 0, 4, p->N, p->H, p->K, p->V));
  return CLMOE_OK;
}

/* No tokens at all: every gradient is zero, the state's passes straight through. */
clmoe_status clmoe__kda_backward_empty(const clmoe_tensor *dht, const clmoe_kda_grads *g)
{
  clmoe_tensor *zero[] = {g->dq, g->dk, g->dv, g->dg, g->dbeta, g->dA_log, g->ddt_bias};
  for (int i = 0; i < 7; i++) CLMOE_TRY(clmoe_tensor_fill(zero[i], 0.0));
  if (!g->dinitial_state) return CLMOE_OK;
  return dht ? clmoe_tensor_copy(g->dinitial_state, dht) : clmoe_tensor_fill(g->dinitial_state, 0.0);
}

clmoe_status clmoe__kda_bwd_buffers_alloc(clmoe_ctx *ctx, kda_bwd_buffers *b, const size_t *sizes)
{
  for (int i = 0; i < KB_COUNT; i++) b->bytes[i] = sizes[i];
  return clmoe__scratch_set(ctx, KB_COUNT, b->m, b->bytes);
}

void clmoe__kda_bwd_buffers_release(clmoe_ctx *ctx, kda_bwd_buffers *b)
{
  clmoe__scratch_release_set(ctx, KB_COUNT, b->m, b->bytes);
}
