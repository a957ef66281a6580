/* KDA host side: argument checks, chunk tables, the chunked forward (kda_prep + kda_state),
 * the recurrent path and the decode step. The backward is in kda_backward.c. */
#include "kda_internal.h"

#include "clmoe/tile.h"
#include "clmoe/paths.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double clmoe_kda_forward_flops(int64_t B, int64_t T, int64_t H, int64_t D)
{
  const double C = KDA_CHUNK;
  return (double)B * (double)H * (6.0 * (double)T * D * D + 3.0 * (double)T * C * D + (double)T * C * C);
}

void kda_options(const kda_plan *p, int out_bf16, char *buf, size_t len)
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
  cl_int err = clEnqueueWriteBuffer(ctx->queue, *mem, CL_TRUE, 0, pairs * 2 * sizeof(cl_int), host,
                                    0, NULL, NULL);
  if (err != CL_SUCCESS) {
    clmoe__scratch_release(ctx, *mem, *bytes);
    *mem = NULL;
    return clmoe__cl_error(err, "clEnqueueWriteBuffer", __FILE__, __LINE__);
  }
  return CLMOE_OK;
}

clmoe_status kda_plan_make(clmoe_ctx *ctx, const char *op, const clmoe_kda_options *opts,
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

  p->lb = opts->lower_bound == 0.0f ? -5.0f : opts->lower_bound;
  if (!(p->lb >= -5.0f && p->lb < 0.0f))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: lower_bound %g is outside [-5, 0)", op,
                        (double)opts->lower_bound);
  p->scale = opts->scale == 0.0f ? 1.0f / sqrtf((float)p->K) : opts->scale;
  if (!isfinite(p->scale))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: scale is not finite", op);
  if (opts->gate != CLMOE_KDA_GATE_BOUNDED && opts->gate != CLMOE_KDA_GATE_UNBOUNDED)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: unknown gate form %d", op, (int)opts->gate);
  p->unbounded = opts->gate == CLMOE_KDA_GATE_UNBOUNDED;
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
  if (st != CLMOE_OK) kda_plan_release(ctx, p);
  return st;
}

void kda_plan_release(clmoe_ctx *ctx, kda_plan *p)
{
  clmoe__scratch_release(ctx, p->chunks, p->chunks_bytes);
  clmoe__scratch_release(ctx, p->seq_chunks, p->seq_bytes);
  clmoe__scratch_release(ctx, p->seq_tokens, p->seq_bytes);
  p->chunks = p->seq_chunks = p->seq_tokens = NULL;
}

void kda_chunk_buffers_release(clmoe_ctx *ctx, kda_chunk_buffers *cb)
{
  cl_mem *m[6] = {&cb->W, &cb->U, &cb->Aqk, &cb->Qg, &cb->Kd, &cb->gl};
  for (int i = 0; i < 6; i++) {
    clmoe__scratch_release(ctx, *m[i], cb->bytes[i]);
    *m[i] = NULL;
  }
}

clmoe_status kda_run_prep(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                          kda_chunk_buffers *cb)
{
  memset(cb, 0, sizeof *cb);
  const size_t nch = (size_t)(p->nchunks ? p->nchunks : 1) * (size_t)p->H;
  const size_t K = (size_t)p->K, V = (size_t)p->V, f = sizeof(float);
  const size_t sizes[6] = {nch * KDA_CHUNK * K * f, nch * KDA_CHUNK * V * f, nch * KDA_CHUNK * KDA_CHUNK * f,
                           nch * KDA_CHUNK * K * f, nch * KDA_CHUNK * K * f, nch * K * f};
  cl_mem *m[6] = {&cb->W, &cb->U, &cb->Aqk, &cb->Qg, &cb->Kd, &cb->gl};
  clmoe_status st = CLMOE_OK;
  for (int i = 0; i < 6; i++) {
    cb->bytes[i] = sizes[i];
    CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, sizes[i], m[i]), fail);
  }
  if (p->nchunks == 0) return CLMOE_OK;
  char opts[128];
  kda_options(p, 0, opts, sizeof opts);
  cl_kernel k;
  CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "kda_common+kda_fwd", opts, "kda_prep", &k), fail);
  cl_ulong qo = (cl_ulong)in->q->offset, ko = (cl_ulong)in->k->offset, vo = (cl_ulong)in->v->offset;
  cl_ulong zo = (cl_ulong)in->g->offset, bo = (cl_ulong)in->beta->offset;
  cl_ulong ao = (cl_ulong)in->A_log->offset, dto = (cl_ulong)in->dt_bias->offset;
  cl_int H = (cl_int)p->H, unb = p->unbounded;
  float scale = p->scale, lb = p->lb;
  CLMOE_TRY_GOTO(st, clmoe__args(k, 25, KA(in->q->buf), KA(qo), KA(in->k->buf), KA(ko), KA(in->v->buf),
                                 KA(vo), KA(in->g->buf), KA(zo), KA(in->beta->buf), KA(bo),
                                 KA(in->A_log->buf), KA(ao), KA(in->dt_bias->buf), KA(dto), KA(p->chunks),
                                 KA(H), KA(scale), KA(lb), KA(unb), KA(cb->W), KA(cb->U), KA(cb->Aqk),
                                 KA(cb->Qg), KA(cb->Kd), KA(cb->gl)), fail);
  size_t global[2] = {(size_t)p->nchunks * KDA_WG, (size_t)p->H}, local[2] = {KDA_WG, 1};
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, k, 2, global, local), fail);
  return CLMOE_OK;
fail:
  kda_chunk_buffers_release(ctx, cb);
  return st;
}

clmoe_status kda_run_state(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                           const kda_chunk_buffers *cb, clmoe_tensor *o, clmoe_tensor *ht,
                           cl_mem saved, cl_mem saved_vn)
{
  if (p->N == 0) return CLMOE_OK;
  char opts[128];
  kda_options(p, o && o->dtype == CLMOE_BF16, opts, sizeof opts);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "kda_common+kda_fwd", opts, "kda_state", &k));
  const clmoe_tensor *h0 = in->initial_state;
  cl_mem h0m = h0 ? h0->buf : NULL, om = o ? o->buf : NULL, htm = ht ? ht->buf : NULL;
  cl_ulong h0o = h0 ? (cl_ulong)h0->offset : 0, oo = o ? (cl_ulong)o->offset : 0;
  cl_ulong hto = ht ? (cl_ulong)ht->offset : 0;
  cl_int H = (cl_int)p->H, has_h0 = h0 != NULL, has_ht = ht != NULL, has_o = o != NULL;
  cl_int save = saved != NULL;
  CLMOE_TRY(clmoe__args(k, 21, KA(cb->W), KA(cb->U), KA(cb->Aqk), KA(cb->Qg), KA(cb->Kd), KA(cb->gl),
                        KA(p->chunks), KA(p->seq_chunks), KA(H), KA(h0m), KA(h0o), KA(has_h0), KA(om),
                        KA(oo), KA(has_o), KA(htm), KA(hto), KA(has_ht), KA(saved), KA(saved_vn),
                        KA(save)));
  size_t global[3] = {(size_t)p->nvs * KDA_WG, (size_t)p->H, (size_t)p->N};
  size_t local[3] = {KDA_WG, 1, 1};
  return clmoe__launch(ctx, k, 3, global, local);
}

static clmoe_status check_outputs(const char *op, const kda_plan *p, clmoe_tensor *o,
                                  clmoe_tensor *final_state)
{
  CLMOE_TRY(clmoe__want_shape(o, op, "o", 1, 4, p->B, p->T, p->H, p->V));
  if (final_state) CLMOE_TRY(clmoe__want_shape(final_state, op, "final_state", 0, 4, p->N, p->H, p->K, p->V));
  return CLMOE_OK;
}

clmoe_status clmoe_kda_forward(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                               const clmoe_kda_inputs *in, clmoe_tensor *o,
                               clmoe_tensor *final_state)
{
  return kda_forward_kept(ctx, opts, in, o, final_state, NULL);
}

clmoe_status kda_forward_kept(clmoe_ctx *ctx, const clmoe_kda_options *opts, const clmoe_kda_inputs *in,
                              clmoe_tensor *o, clmoe_tensor *final_state, clmoe_kda_tc_saved *saved)
{
  const char *op = "clmoe_kda_forward";
  kda_plan p;
  if (saved) saved->nchunks = 0;
  CLMOE_TRY(kda_plan_make(ctx, op, opts, in, &p));
  kda_chunk_buffers cb = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, check_outputs(op, &p, o, final_state), done);
  /* the tile kernels (kda_tc.c): forced by CLMOE_FASTPATH=1, or for bf16 inputs on a matrix
   * unit (fp32 callers keep fp32 products unless they ask) */
  if (clmoe_ctx_fastpath_for(ctx, p.in_bf16) && kda_tc_covers(ctx, &p)) {
    st = kda_tc_run(ctx, &p, in, o, final_state, 0, 0, saved);
    goto done;
  }
  CLMOE_TRY_GOTO(st, kda_run_prep(ctx, &p, in, &cb), done);
  st = kda_run_state(ctx, &p, in, &cb, o, final_state, NULL, NULL);
done:
  kda_chunk_buffers_release(ctx, &cb);
  kda_plan_release(ctx, &p);
  return st;
}

/* The recurrent kernel over a plan's sequences (first token, tokens). */
static clmoe_status run_recurrent(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                  const clmoe_tensor *h0, clmoe_tensor *o, clmoe_tensor *ht)
{
  if (p->N == 0) return CLMOE_OK;
  char opts[128];
  kda_options(p, o->dtype == CLMOE_BF16, opts, sizeof opts);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "kda_common+kda_rec", opts, "kda_recurrent", &k));
  cl_ulong qo = (cl_ulong)in->q->offset, ko = (cl_ulong)in->k->offset, vo = (cl_ulong)in->v->offset;
  cl_ulong zo = (cl_ulong)in->g->offset, bo = (cl_ulong)in->beta->offset;
  cl_ulong ao = (cl_ulong)in->A_log->offset, dto = (cl_ulong)in->dt_bias->offset;
  cl_mem h0m = h0 ? h0->buf : NULL, htm = ht ? ht->buf : NULL;
  cl_ulong h0o = h0 ? (cl_ulong)h0->offset : 0, hto = ht ? (cl_ulong)ht->offset : 0, oo = (cl_ulong)o->offset;
  cl_int H = (cl_int)p->H, unb = p->unbounded, has_h0 = h0 != NULL, has_ht = ht != NULL;
  float scale = p->scale, lb = p->lb;
  CLMOE_TRY(clmoe__args(k, 27, KA(in->q->buf), KA(qo), KA(in->k->buf), KA(ko), KA(in->v->buf), KA(vo),
                        KA(in->g->buf), KA(zo), KA(in->beta->buf), KA(bo), KA(in->A_log->buf), KA(ao),
                        KA(in->dt_bias->buf), KA(dto), KA(p->seq_tokens), KA(H), KA(scale), KA(lb),
                        KA(unb), KA(h0m), KA(h0o), KA(has_h0), KA(o->buf), KA(oo), KA(htm), KA(hto),
                        KA(has_ht)));
  size_t global[3] = {(size_t)p->nvs * KDA_WG, (size_t)p->H, (size_t)p->N};
  size_t local[3] = {KDA_WG, 1, 1};
  return clmoe__launch(ctx, k, 3, global, local);
}

clmoe_status clmoe_kda_recurrent(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                 const clmoe_kda_inputs *in, clmoe_tensor *o,
                                 clmoe_tensor *final_state)
{
  const char *op = "clmoe_kda_recurrent";
  kda_plan p;
  CLMOE_TRY(kda_plan_make(ctx, op, opts, in, &p));
  clmoe_status st = check_outputs(op, &p, o, final_state);
  if (st == CLMOE_OK) st = run_recurrent(ctx, &p, in, in->initial_state, o, final_state);
  kda_plan_release(ctx, &p);
  return st;
}

clmoe_status clmoe_kda_decode_step(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                   const clmoe_tensor *q, const clmoe_tensor *k,
                                   const clmoe_tensor *v, const clmoe_tensor *g,
                                   const clmoe_tensor *beta, const clmoe_tensor *A_log,
                                   const clmoe_tensor *dt_bias, clmoe_tensor *state,
                                   clmoe_tensor *o)
{
  const char *op = "clmoe_kda_decode_step";
  if (!q || !k || !v || !g || !beta || !state || !o)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: every tensor is required", op);
  char desc[96];
  if (q->ndim != 3 || v->ndim != 3 || beta->ndim != 2 || o->ndim != 3)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: q is %s; expected q, k, g [N, H, K], v and o [N, H, V], "
                        "beta [N, H]", op, clmoe_tensor_describe(q, desc, sizeof desc));
  /* Views as one-token sequences: [N, 1, H, .]. */
  clmoe_tensor q4, k4, v4, g4, b3, o4;
  const int64_t N = q->shape[0], H = q->shape[1], K = q->shape[2], V = v->shape[2];
  int64_t sk[4] = {N, 1, H, K}, sv[4] = {N, 1, H, V}, sb[3] = {N, 1, H};
  CLMOE_TRY(clmoe__want_shape(k, op, "k", 1, 3, N, H, K, 0));
  CLMOE_TRY(clmoe__want_shape(g, op, "g", 1, 3, N, H, K, 0));
  CLMOE_TRY(clmoe__want_shape(beta, op, "beta", 1, 2, N, H, 0, 0));
  CLMOE_TRY(clmoe__want_shape(o, op, "o", 1, 3, N, H, V, 0));
  CLMOE_TRY(clmoe_tensor_view(q, &q4, 4, sk, 0));
  CLMOE_TRY(clmoe_tensor_view(k, &k4, 4, sk, 0));
  CLMOE_TRY(clmoe_tensor_view(g, &g4, 4, sk, 0));
  CLMOE_TRY(clmoe_tensor_view(v, &v4, 4, sv, 0));
  CLMOE_TRY(clmoe_tensor_view(beta, &b3, 3, sb, 0));
  CLMOE_TRY(clmoe_tensor_view(o, &o4, 4, sv, 0));
  clmoe_kda_inputs in = {&q4, &k4, &v4, &g4, &b3, A_log, dt_bias, state, NULL};
  kda_plan p;
  CLMOE_TRY(kda_plan_make(ctx, op, opts, &in, &p));
  /* The kernel reads each state slice before it writes it back: in place is safe. */
  clmoe_status st = clmoe__want_shape(state, op, "state", 0, 4, N, H, K, V);
  if (st == CLMOE_OK) st = run_recurrent(ctx, &p, &in, state, &o4, state);
  kda_plan_release(ctx, &p);
  return st;
}
