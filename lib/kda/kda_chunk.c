/* The portable chunk passes of kernels_cl/kda/kda_fwd.cl, shared by the chunked forward
 * (kda_forward.c) and the portable backward (kda_backward.c): kda_prep (the per-chunk
 * intermediates; for the unbounded gate kda_fwd_pairwise.cl's kda_prep_pairwise, the same
 * outputs for any gate values) and kda_state (the chunk-to-chunk state recurrence); and the sums of the
 * per-chunk parameter partials (kda_bwd.cl) that close both backwards. */
#include "kda_internal.h"

#include <string.h>

void clmoe__kda_chunk_buffers_release(clmoe_ctx *ctx, kda_chunk_buffers *cb)
{
  cl_mem *m[6] = {&cb->W, &cb->U, &cb->Aqk, &cb->Qg, &cb->Kd, &cb->gl};
  for (int i = 0; i < 6; i++) {
    clmoe__scratch_release(ctx, *m[i], cb->bytes[i]);
    *m[i] = NULL;
  }
}

clmoe_status clmoe__kda_run_prep(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
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
  clmoe__kda_options(p, 0, opts, sizeof opts);
  cl_kernel k;
  /* the unbounded gate's decays overflow kda_prep's anchored factors: the pairwise pass */
  if (p->unbounded)
    CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "kda_common+kda_fwd_pairwise", opts, "kda_prep_pairwise", &k), fail);
  else
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
  clmoe__kda_chunk_buffers_release(ctx, cb);
  return st;
}

clmoe_status clmoe__kda_run_state(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                  const kda_chunk_buffers *cb, clmoe_tensor *o, clmoe_tensor *ht,
                                  cl_mem saved, cl_mem saved_vn)
{
  if (p->N == 0) return CLMOE_OK;
  char opts[128];
  clmoe__kda_options(p, o && o->dtype == CLMOE_BF16, opts, sizeof opts);
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

clmoe_status clmoe__kda_param_reduce(clmoe_ctx *ctx, const kda_plan *p, const kda_bwd_buffers *b,
                                     const clmoe_kda_grads *g)
{
  char opts[128];
  clmoe__kda_options(p, 0, opts, sizeof opts);
  cl_kernel k1, k2;
  CLMOE_TRY(clmoe__kernel(ctx, "kda_common+kda_bwd", opts, "kda_param_reduce", &k1));
  CLMOE_TRY(clmoe__kernel(ctx, "kda_common+kda_bwd", opts, "kda_alog_reduce", &k2));
  cl_int nch = p->nchunks, H = (cl_int)p->H;
  cl_ulong ddto = (cl_ulong)g->ddt_bias->offset, dao = (cl_ulong)g->dA_log->offset;
  CLMOE_TRY(clmoe__args(k1, 7, KA(b->m[KB_PDDT]), KA(b->m[KB_PDA]), KA(nch), KA(H), KA(g->ddt_bias->buf),
                        KA(ddto), KA(b->m[KB_TMP])));
  CLMOE_TRY(clmoe__launch1d(ctx, k1, (size_t)(p->H * p->K)));
  CLMOE_TRY(clmoe__args(k2, 4, KA(b->m[KB_TMP]), KA(H), KA(g->dA_log->buf), KA(dao)));
  return clmoe__launch1d(ctx, k2, (size_t)p->H);
}
