/* KDA backward: recompute the forward keeping each chunk's entering state and Vnew, walk
 * the chunks in reverse for the state gradient (kda_state_bwd), then per chunk the
 * factor gradients (kda_bwd_inter) and the tile backward (kda_bwd_chunk), and sum the
 * per-chunk parameter partials in a fixed order (kda_param_reduce, kda_alog_reduce). The
 * dispatch: the tile backward (kda_tile_bwd.c) where the fast path is on and covers the call,
 * this portable one otherwise.
 * Memory: two [chunks, H, K, V] fp32 buffers (states and their gradients) plus per-chunk
 * tiles; about 2 T H K V / 16 x 4 bytes. */
#include "kda_internal.h"

#include "clmoe/tile.h"

#include <string.h>

static clmoe_status bwd_alloc(clmoe_ctx *ctx, const kda_plan *p, kda_bwd_buffers *b)
{
  const size_t nch = (size_t)p->nchunks * (size_t)p->H, K = (size_t)p->K, V = (size_t)p->V;
  const size_t f = sizeof(float), C = KDA_CHUNK;
  const size_t sizes[KB_COUNT] = {nch * K * V * f, nch * C * V * f, nch * K * V * f, nch * C * V * f,
                                  nch * C * K * f, nch * C * K * f, nch * C * K * f, nch * K * f,
                                  nch * C * C * f, nch * K * f, nch * K * f, (size_t)p->H * K * f};
  return clmoe__kda_bwd_buffers_alloc(ctx, b, sizes);
}

static clmoe_status run_state_bwd(clmoe_ctx *ctx, const kda_plan *p, const kda_chunk_buffers *cb,
                                  const kda_bwd_buffers *b, const clmoe_tensor *dout,
                                  const clmoe_tensor *dht, clmoe_tensor *dh0, const char *opts)
{
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "kda_common+kda_bwd", opts, "kda_state_bwd", &k));
  cl_mem dhtm = dht ? dht->buf : NULL, dh0m = dh0 ? dh0->buf : NULL;
  cl_ulong doo = (cl_ulong)dout->offset, dhto = dht ? (cl_ulong)dht->offset : 0;
  cl_ulong dh0o = dh0 ? (cl_ulong)dh0->offset : 0;
  cl_int H = (cl_int)p->H, has_dht = dht != NULL, has_dh0 = dh0 != NULL;
  CLMOE_TRY(clmoe__args(k, 18, KA(cb->W), KA(cb->Aqk), KA(cb->Qg), KA(cb->Kd), KA(cb->gl), KA(p->chunks),
                        KA(p->seq_chunks), KA(H), KA(dout->buf), KA(doo), KA(dhtm), KA(dhto), KA(has_dht),
                        KA(b->m[KB_DU]), KA(b->m[KB_DSAVE]), KA(dh0m), KA(dh0o), KA(has_dh0)));
  size_t global[3] = {(size_t)p->nvs * KDA_WG, (size_t)p->H, (size_t)p->N}, local[3] = {KDA_WG, 1, 1};
  return clmoe__launch(ctx, k, 3, global, local);
}

static clmoe_status run_inter(clmoe_ctx *ctx, const kda_plan *p, const kda_bwd_buffers *b,
                              const clmoe_tensor *dout, const char *opts)
{
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "kda_common+kda_bwd", opts, "kda_bwd_inter", &k));
  cl_ulong doo = (cl_ulong)dout->offset;
  cl_int H = (cl_int)p->H;
  CLMOE_TRY(clmoe__args(k, 13, KA(b->m[KB_SAVE]), KA(b->m[KB_DSAVE]), KA(b->m[KB_VN]), KA(b->m[KB_DU]),
                        KA(dout->buf), KA(doo), KA(p->chunks), KA(H), KA(b->m[KB_DQG]), KA(b->m[KB_DW]),
                        KA(b->m[KB_DKD]), KA(b->m[KB_DGL]), KA(b->m[KB_DA])));
  size_t global[2] = {(size_t)p->nchunks * KDA_WG, (size_t)p->H}, local[2] = {KDA_WG, 1};
  return clmoe__launch(ctx, k, 2, global, local);
}

static clmoe_status run_chunk_bwd(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                  const kda_bwd_buffers *b, const clmoe_kda_grads *g, const char *opts)
{
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "kda_common+kda_bwd", opts, "kda_bwd_chunk", &k));
  cl_ulong qo = (cl_ulong)in->q->offset, ko = (cl_ulong)in->k->offset, vo = (cl_ulong)in->v->offset;
  cl_ulong zo = (cl_ulong)in->g->offset, bo = (cl_ulong)in->beta->offset;
  cl_ulong ao = (cl_ulong)in->A_log->offset, dto = (cl_ulong)in->dt_bias->offset;
  cl_ulong dqo = (cl_ulong)g->dq->offset, dko = (cl_ulong)g->dk->offset, dvo = (cl_ulong)g->dv->offset;
  cl_ulong dzo = (cl_ulong)g->dg->offset, dbo = (cl_ulong)g->dbeta->offset;
  cl_int H = (cl_int)p->H, unb = p->unbounded;
  float scale = p->scale, lb = p->lb;
  CLMOE_TRY(clmoe__args(k, 37, KA(in->q->buf), KA(qo), KA(in->k->buf), KA(ko), KA(in->v->buf), KA(vo),
                        KA(in->g->buf), KA(zo), KA(in->beta->buf), KA(bo), KA(in->A_log->buf), KA(ao),
                        KA(in->dt_bias->buf), KA(dto), KA(p->chunks), KA(H), KA(scale), KA(lb), KA(unb),
                        KA(b->m[KB_DQG]), KA(b->m[KB_DW]), KA(b->m[KB_DKD]), KA(b->m[KB_DGL]),
                        KA(b->m[KB_DA]), KA(b->m[KB_DU]), KA(g->dq->buf), KA(dqo), KA(g->dk->buf), KA(dko),
                        KA(g->dv->buf), KA(dvo), KA(g->dg->buf), KA(dzo), KA(g->dbeta->buf), KA(dbo),
                        KA(b->m[KB_PDDT]), KA(b->m[KB_PDA])));
  size_t global[2] = {(size_t)p->nchunks * KDA_WG, (size_t)p->H}, local[2] = {KDA_WG, 1};
  return clmoe__launch(ctx, k, 2, global, local);
}

clmoe_status clmoe_kda_backward(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                const clmoe_kda_inputs *in, const clmoe_tensor *dout,
                                const clmoe_tensor *dfinal_state, const clmoe_kda_grads *grads)
{
  return clmoe__kda_backward_kept(ctx, opts, in, dout, dfinal_state, grads, NULL);
}

clmoe_status clmoe__kda_backward_kept(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                      const clmoe_kda_inputs *in, const clmoe_tensor *dout,
                                      const clmoe_tensor *dfinal_state, const clmoe_kda_grads *grads,
                                      const clmoe_kda_tile_saved *saved)
{
  const char *op = "clmoe_kda_backward";
  kda_plan p;
  CLMOE_TRY(clmoe__kda_plan_make(ctx, op, opts, in, &p));
  kda_chunk_buffers cb = {0};
  kda_bwd_buffers b = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe__kda_check_grads(op, &p, dout, dfinal_state, grads), done);
  if (p.nchunks == 0) {
    st = clmoe__kda_backward_empty(dfinal_state, grads);
    goto done;
  }
  /* the tile kernels (kda_tile_bwd.c): forced by CLMOE_FASTPATH=1, or for bf16 inputs on a
   * matrix unit (as the forward, kda_forward.c) */
  if (clmoe_ctx_fastpath_for(ctx, p.in_bf16) && clmoe__kda_tile_bwd_covers(ctx, &p)) {
    st = clmoe__kda_tile_bwd_run(ctx, &p, in, dout, dfinal_state, grads, 0, 0, saved);
    goto done;
  }
  char kopts[160];
  clmoe__kda_options(&p, 0, kopts, sizeof kopts);
  /* the unbounded gate's chunk pass forms its decay factors from products (kda_bwd.cl) */
  if (p.unbounded) strncat(kopts, " -DKDA_UNB=1", sizeof kopts - strlen(kopts) - 1);
  CLMOE_TRY_GOTO(st, clmoe__kda_run_prep(ctx, &p, in, &cb), done);
  CLMOE_TRY_GOTO(st, bwd_alloc(ctx, &p, &b), done);
  CLMOE_TRY_GOTO(st, clmoe__kda_run_state(ctx, &p, in, &cb, NULL, NULL, b.m[KB_SAVE], b.m[KB_VN]), done);
  CLMOE_TRY_GOTO(st, run_state_bwd(ctx, &p, &cb, &b, dout, dfinal_state, grads->dinitial_state, kopts), done);
  CLMOE_TRY_GOTO(st, run_inter(ctx, &p, &b, dout, kopts), done);
  CLMOE_TRY_GOTO(st, run_chunk_bwd(ctx, &p, in, &b, grads, kopts), done);
  st = clmoe__kda_param_reduce(ctx, &p, &b, grads);
done:
  clmoe__kda_bwd_buffers_release(ctx, &b);
  clmoe__kda_chunk_buffers_release(ctx, &cb);
  clmoe__kda_plan_release(ctx, &p);
  return st;
}
