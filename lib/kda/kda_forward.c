/* The KDA forward entries: clmoe_kda_forward (the chunked forward: the portable kda_prep +
 * kda_state of kda_chunk.c, or the tile path of kda_tile_fwd.c), the recurrent path and the
 * decode step. The backward is in kda_backward.c. */
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
  return clmoe__kda_forward_kept(ctx, opts, in, o, final_state, NULL);
}

clmoe_status clmoe__kda_forward_kept(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                     const clmoe_kda_inputs *in, clmoe_tensor *o,
                                     clmoe_tensor *final_state, clmoe_kda_tile_saved *saved)
{
  const char *op = "clmoe_kda_forward";
  kda_plan p;
  if (saved) saved->nchunks = 0;
  CLMOE_TRY(clmoe__kda_plan_make(ctx, op, opts, in, &p));
  kda_chunk_buffers cb = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, check_outputs(op, &p, o, final_state), done);
  /* the tile kernels (kda_tile_fwd.c): forced by CLMOE_FASTPATH=1, or for bf16 inputs on a matrix
   * unit (fp32 callers keep fp32 products unless they ask) */
  if (clmoe_ctx_fastpath_for(ctx, p.in_bf16) && clmoe__kda_tile_fwd_covers(ctx, &p)) {
    st = clmoe__kda_tile_fwd_run(ctx, &p, in, o, final_state, 0, 0, saved);
    goto done;
  }
  CLMOE_TRY_GOTO(st, clmoe__kda_run_prep(ctx, &p, in, &cb), done);
  st = clmoe__kda_run_state(ctx, &p, in, &cb, o, final_state, NULL, NULL);
done:
  clmoe__kda_chunk_buffers_release(ctx, &cb);
  clmoe__kda_plan_release(ctx, &p);
  return st;
}

/* The recurrent kernel over a plan's sequences (first token, tokens). */
static clmoe_status run_recurrent(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                  const clmoe_tensor *h0, clmoe_tensor *o, clmoe_tensor *ht)
{
  if (p->N == 0) return CLMOE_OK;
  char opts[128];
  clmoe__kda_options(p, o->dtype == CLMOE_BF16, opts, sizeof opts);
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
  CLMOE_TRY(clmoe__kda_plan_make(ctx, op, opts, in, &p));
  clmoe_status st = check_outputs(op, &p, o, final_state);
  if (st == CLMOE_OK) st = run_recurrent(ctx, &p, in, in->initial_state, o, final_state);
  clmoe__kda_plan_release(ctx, &p);
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
  CLMOE_TRY(clmoe__kda_plan_make(ctx, op, opts, &in, &p));
  /* The kernel reads each state slice before it writes it back: in place is safe. */
  clmoe_status st = clmoe__want_shape(state, op, "state", 0, 4, N, H, K, V);
  if (st == CLMOE_OK) st = run_recurrent(ctx, &p, &in, state, &o4, state);
  clmoe__kda_plan_release(ctx, &p);
  return st;
}
