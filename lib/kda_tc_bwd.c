/* KDA backward on the tile interface (issue 9): host side of kernels_cl/kda_tc_bwd.cl and
 * kda_tc_bwdc.cl. The plan (argument checks, chunk and sequence tables) is kda.c's. Steps:
 *   1. kda_prep (portable, fp32): the per-chunk factors W, U, Qg, Kd, Aqk, gl again;
 *   2. kda_tcb_fwd_save (tiles, head-parallel): the states entering each chunk and Vnew;
 *   3. kda_tcb_state_bwd (tiles, head-parallel, reverse): dVnew and every chunk's dS;
 *   4. kda_tcb_inter (tiles, token-parallel): dQg, dW, dKd, dAqk, dgl;
 *   5. kda_tcb_chunk (tiles, token-parallel): back through the 16 x 16 factors, the gate,
 *      beta and the L2 norms; kda_param_reduce, kda_alog_reduce (kda_bwd.cl) sum the
 *      per-chunk partials of ddt_bias and dA_log.
 * Memory: S_c and dS bf16 [chunks, H, K, V] each, Vnew bf16 and dU fp32 [chunks, H, 16, V],
 * plus kda_prep's factors and the factor gradients (fp32, [chunks, H, 16, K] x 3). */
#include "kda_tc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fastpath.h"
#include "kda_internal.h"

#define TB_IW 128 /* kda_tcb_inter's work-group (kernels_cl/kda_tc_bwd.cl) */
#define TD_WG 128 /* kda_tcb_chunk's (kernels_cl/kda_tc_bwdc.cl) */

static clmoe_status tcb_alloc(clmoe_ctx *ctx, const kda_plan *p, kda_bwd_buffers *b)
{
  const size_t nch = (size_t)p->nchunks * (size_t)p->H, K = (size_t)p->K, V = (size_t)p->V;
  const size_t f = sizeof(float), hf = sizeof(cl_ushort), C = KDA_CHUNK;
  const size_t sizes[KB_COUNT] = {nch * K * V * hf, nch * C * V * hf, nch * K * V * hf, nch * C * V * f,
                                  nch * C * K * f,  nch * C * K * f,  nch * C * K * f,  nch * K * f,
                                  nch * C * C * f,  nch * K * f,      nch * K * f,      (size_t)p->H * K * f};
  return kda_bwd_buffers_alloc(ctx, b, sizes);
}

/* Local memory (bytes) of the tile kernels as declared in kda_tc_bwd.cl and kda_tc_bwdc.cl. */
static size_t fwd_save_bytes(size_t K, size_t w) { return 2 * 16 * (K + 8) * 2 + K * 4 + w * 8 * (K + 8 + 24) * 2; }
static size_t state_bwd_bytes(size_t K, size_t w)
{
  return 3 * 16 * (K + 8) * 2 + 16 * 24 * 2 + K * 4 + w * 8 * (K + 8 + 48) * 2;
}
static size_t inter_bytes(size_t K) { return (2 * K + 48) * 40 * 2; }
static size_t chunk_bytes(size_t K, size_t V)
{
  const size_t mkv = K > V ? K : V;
  return 16 * (mkv + 4) * 4 + 4 * 16 * (K + 8) * 2 + 2 * 16 * (V + 8) * 2 + 6 * 16 * 17 * 4 + 3 * K * 4 +
         16 * 8 * 4 + 5 * 16 * 4;
}

int kda_tc_bwd_covers(clmoe_ctx *ctx, const struct kda_plan *p)
{
  if (p->unbounded || p->K % 16 || p->V % 16 || p->K > 128 || p->V > 128) return 0;
  const clmoe_device_caps *c = clmoe_ctx_caps(ctx);
  const size_t K = (size_t)p->K;
  size_t need = chunk_bytes(K, (size_t)p->V);
  const size_t mine[3] = {fwd_save_bytes(K, 4), state_bwd_bytes(K, 4), inter_bytes(K)};
  for (int i = 0; i < 3; i++)
    if (mine[i] > need) need = mine[i];
  /* (kda_prep, the portable recomputation, needs 256 work-items and at most this much) */
  return c->max_work_group_size >= KDA_WG && c->local_mem_bytes >= need + 256;
}

/* Warps per work-group of the two head-parallel passes (8 columns of V each); default 4:
 * on the H200 at H 16 / 32, T 16384 the save + reverse passes took 5.3 / 5.3 ms with 4
 * warps against 6.3 / 7.1 with 2 and 11.7 / 14.0 with 1. */
static int pick_warps(const kda_plan *p, int warps)
{
  if (warps != 1 && warps != 2 && warps != 4) warps = 4;
  while (warps > 1 && p->V % (8 * warps)) warps /= 2;
  return warps;
}

/* The ring passes (kernels_cl/kda_tc_bwd_ring.cl, CLMOE_KDA_TCB_RING=1; not the default:
 * written after the session's GPU time was spent, checked on PoCL only so far): ushorts of
 * a packed block, local bytes of the two passes. */
static size_t ring_block(size_t K) { return 3 * 16 * (K + 8) + 2 * K + 16 * 24; }
static size_t ring_fwd_bytes(size_t K, size_t w, size_t ns)
{
  return ns * (2 * 16 * (K + 8) + 2 * K) * 2 + w * 8 * (K + 8 + 24) * 2;
}
static size_t ring_bwd_bytes(size_t K, size_t w, size_t ns) { return ns * ring_block(K) * 2 + w * 8 * (K + 8 + 48) * 2; }
/* CLMOE_KDA_TCB_RING: 1 or 3 (the ring, 3 stages), 2 (2 stages); otherwise 0 (no ring). */
static int ring_stages(void)
{
  const char *env = getenv("CLMOE_KDA_TCB_RING");
  if (!env) return 0;
  return !strcmp(env, "1") || !strcmp(env, "3") ? 3 : !strcmp(env, "2") ? 2 : 0;
}

/* The ring's stages (at most `most`, at least 2) and warps within the local memory; 0 when
 * even 2 stages of one warp do not fit (the register-staged passes then). */
static int fit_ring(clmoe_ctx *ctx, const kda_plan *p, int most, int *warps)
{
  const size_t avail = clmoe__local_mem_optin(ctx) - 256, K = (size_t)p->K;
  for (int w = *warps; w >= 1; w /= 2)
    for (int ns = most; ns >= 2; ns--)
      if (ring_bwd_bytes(K, (size_t)w, (size_t)ns) <= avail && ring_fwd_bytes(K, (size_t)w, (size_t)ns) <= avail) {
        *warps = w;
        return ns;
      }
  return 0;
}

/* Steps 2-3 with the ring: pack the factors, then the two passes (args as run_tiles'). */
static clmoe_status run_ring(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                             const kda_chunk_buffers *cb, const kda_bwd_buffers *b,
                             const clmoe_tensor *dout, const clmoe_tensor *dht, clmoe_tensor *dh0,
                             int warps, int prod, const char *prog, const char *opts)
{
  cl_kernel kp, kf, ks;
  CLMOE_TRY(clmoe__kernel(ctx, prog, opts, "kda_tcb_pack", &kp));
  CLMOE_TRY(clmoe__kernel(ctx, prog, opts, "kda_tcb_fwd_save_ring", &kf));
  CLMOE_TRY(clmoe__kernel(ctx, prog, opts, "kda_tcb_state_bwd_ring", &ks));
  const size_t bytes = (size_t)p->nchunks * (size_t)p->H * ring_block((size_t)p->K) * sizeof(cl_ushort);
  cl_mem blk = NULL;
  clmoe_status st = CLMOE_OK;
  cl_int H = (cl_int)p->H;
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, bytes, &blk), done);
  CLMOE_TRY_GOTO(st, clmoe__args(kp, 7, KA(cb->W), KA(cb->Kd), KA(cb->gl), KA(cb->Qg), KA(cb->Aqk), KA(H), KA(blk)),
                 done);
  size_t gp[2] = {(size_t)p->nchunks * 128, (size_t)p->H}, lp[2] = {128, 1};
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kp, 2, gp, lp), done);
  /* (V / 8 / warps, H, N) work-groups of the computing warps and the producer */
  size_t global[3] = {(size_t)(p->V / 8 / warps) * (size_t)(32 * (warps + prod)), (size_t)p->H, (size_t)p->N};
  size_t local[3] = {(size_t)(32 * (warps + prod)), 1, 1};
  const clmoe_tensor *h0 = in->initial_state;
  cl_mem h0m = h0 ? h0->buf : NULL;
  cl_ulong h0o = h0 ? (cl_ulong)h0->offset : 0;
  cl_int has_h0 = h0 != NULL;
  CLMOE_TRY_GOTO(st, clmoe__args(kf, 9, KA(blk), KA(cb->U), KA(p->seq_chunks), KA(H), KA(h0m), KA(h0o),
                                 KA(has_h0), KA(b->m[KB_SAVE]), KA(b->m[KB_VN])), done);
  CLMOE_TRY_GOTO(st, clmoe__launch(ctx, kf, 3, global, local), done);
  cl_mem dhtm = dht ? dht->buf : NULL, dh0m = dh0 ? dh0->buf : NULL;
  cl_ulong doo = (cl_ulong)dout->offset, dhto = dht ? (cl_ulong)dht->offset : 0;
  cl_ulong dh0o = dh0 ? (cl_ulong)dh0->offset : 0;
  cl_int has_dht = dht != NULL, has_dh0 = dh0 != NULL;
  CLMOE_TRY_GOTO(st, clmoe__args(ks, 14, KA(blk), KA(p->chunks), KA(p->seq_chunks), KA(H), KA(dout->buf), KA(doo),
                                 KA(dhtm), KA(dhto), KA(has_dht), KA(b->m[KB_DU]), KA(b->m[KB_DSAVE]), KA(dh0m),
                                 KA(dh0o), KA(has_dh0)), done);
  st = clmoe__launch(ctx, ks, 3, global, local);
done:
  clmoe__scratch_release(ctx, blk, bytes);
  return st;
}

/* Steps 2-4 (the tile kernels). */
static clmoe_status run_tiles(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                              const kda_chunk_buffers *cb, const kda_bwd_buffers *b,
                              const clmoe_tensor *dout, const clmoe_tensor *dht,
                              clmoe_tensor *dh0, int warps)
{
  char opts[256], base[128];
  kda_options(p, 0, base, sizeof base);
  const int most = ring_stages(), ns = most ? fit_ring(ctx, p, most, &warps) : 0;
  const int prod = ns && clmoe_ctx_tile_impl(ctx) == CLMOE_TILE_NV_MMA;
  snprintf(opts, sizeof opts, "%s -DTB_NW=%d -DTB_NS=%d -DTB_PROD=%d %s", base, warps, ns, prod,
           clmoe__tile_options(ctx));
  const char *prog = ns ? "tile+kda_common+kda_tc_bwd+kda_tc_bwd_ring" : "tile+kda_common+kda_tc_bwd";
  cl_kernel kf, ks, ki;
  CLMOE_TRY(clmoe__kernel(ctx, prog, opts, "kda_tcb_inter", &ki));
  cl_int H = (cl_int)p->H;
  if (ns) {
    CLMOE_TRY(run_ring(ctx, p, in, cb, b, dout, dht, dh0, warps, prod, prog, opts));
  } else {
    CLMOE_TRY(clmoe__kernel(ctx, prog, opts, "kda_tcb_fwd_save", &kf));
    CLMOE_TRY(clmoe__kernel(ctx, prog, opts, "kda_tcb_state_bwd", &ks));
    /* state work-groups: (V / 8 / warps, H, N), 8 columns of V per warp */
    size_t global[3] = {(size_t)(p->V / 8) * 32, (size_t)p->H, (size_t)p->N};
    size_t local[3] = {(size_t)(32 * warps), 1, 1};

    const clmoe_tensor *h0 = in->initial_state;
    cl_mem h0m = h0 ? h0->buf : NULL;
    cl_ulong h0o = h0 ? (cl_ulong)h0->offset : 0;
    cl_int has_h0 = h0 != NULL;
    CLMOE_TRY(clmoe__args(kf, 11, KA(cb->W), KA(cb->U), KA(cb->Kd), KA(cb->gl), KA(p->seq_chunks), KA(H),
                          KA(h0m), KA(h0o), KA(has_h0), KA(b->m[KB_SAVE]), KA(b->m[KB_VN])));
    CLMOE_TRY(clmoe__launch(ctx, kf, 3, global, local));

    cl_mem dhtm = dht ? dht->buf : NULL, dh0m = dh0 ? dh0->buf : NULL;
    cl_ulong doo = (cl_ulong)dout->offset, dhto = dht ? (cl_ulong)dht->offset : 0;
    cl_ulong dh0o = dh0 ? (cl_ulong)dh0->offset : 0;
    cl_int has_dht = dht != NULL, has_dh0 = dh0 != NULL;
    CLMOE_TRY(clmoe__args(ks, 18, KA(cb->W), KA(cb->Aqk), KA(cb->Qg), KA(cb->Kd), KA(cb->gl), KA(p->chunks),
                          KA(p->seq_chunks), KA(H), KA(dout->buf), KA(doo), KA(dhtm), KA(dhto), KA(has_dht),
                          KA(b->m[KB_DU]), KA(b->m[KB_DSAVE]), KA(dh0m), KA(dh0o), KA(has_dh0)));
    CLMOE_TRY(clmoe__launch(ctx, ks, 3, global, local));
  }
  cl_ulong doo = (cl_ulong)dout->offset;
  CLMOE_TRY(clmoe__args(ki, 13, KA(b->m[KB_SAVE]), KA(b->m[KB_DSAVE]), KA(b->m[KB_VN]), KA(b->m[KB_DU]),
                        KA(dout->buf), KA(doo), KA(p->chunks), KA(H), KA(b->m[KB_DQG]), KA(b->m[KB_DW]),
                        KA(b->m[KB_DKD]), KA(b->m[KB_DGL]), KA(b->m[KB_DA])));
  size_t gi[2] = {(size_t)p->nchunks * TB_IW, (size_t)p->H}, li[2] = {TB_IW, 1};
  return clmoe__launch(ctx, ki, 2, gi, li);
}

/* Step 5: kda_tcb_chunk (tiles) on the factor gradients, then kda_bwd.cl's reductions. */
static clmoe_status run_chunk_tail(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                   const kda_bwd_buffers *b, const clmoe_kda_grads *g)
{
  char opts[128], topts[256];
  kda_options(p, 0, opts, sizeof opts);
  snprintf(topts, sizeof topts, "%s %s", opts, clmoe__tile_options(ctx));
  cl_kernel k, k1, k2;
  CLMOE_TRY(clmoe__kernel(ctx, "tile+kda_common+kda_tc_bwdc", topts, "kda_tcb_chunk", &k));
  CLMOE_TRY(clmoe__kernel(ctx, "kda_common+kda_bwd", opts, "kda_param_reduce", &k1));
  CLMOE_TRY(clmoe__kernel(ctx, "kda_common+kda_bwd", opts, "kda_alog_reduce", &k2));
  cl_ulong qo = (cl_ulong)in->q->offset, ko = (cl_ulong)in->k->offset, vo = (cl_ulong)in->v->offset;
  cl_ulong zo = (cl_ulong)in->g->offset, bo = (cl_ulong)in->beta->offset;
  cl_ulong ao = (cl_ulong)in->A_log->offset, dto = (cl_ulong)in->dt_bias->offset;
  cl_ulong dqo = (cl_ulong)g->dq->offset, dko = (cl_ulong)g->dk->offset, dvo = (cl_ulong)g->dv->offset;
  cl_ulong dzo = (cl_ulong)g->dg->offset, dbo = (cl_ulong)g->dbeta->offset;
  cl_int H = (cl_int)p->H, nch = p->nchunks;
  float scale = p->scale, lb = p->lb;
  CLMOE_TRY(clmoe__args(k, 36, KA(in->q->buf), KA(qo), KA(in->k->buf), KA(ko), KA(in->v->buf), KA(vo),
                        KA(in->g->buf), KA(zo), KA(in->beta->buf), KA(bo), KA(in->A_log->buf), KA(ao),
                        KA(in->dt_bias->buf), KA(dto), KA(p->chunks), KA(H), KA(scale), KA(lb),
                        KA(b->m[KB_DQG]), KA(b->m[KB_DW]), KA(b->m[KB_DKD]), KA(b->m[KB_DGL]),
                        KA(b->m[KB_DA]), KA(b->m[KB_DU]), KA(g->dq->buf), KA(dqo), KA(g->dk->buf), KA(dko),
                        KA(g->dv->buf), KA(dvo), KA(g->dg->buf), KA(dzo), KA(g->dbeta->buf), KA(dbo),
                        KA(b->m[KB_PDDT]), KA(b->m[KB_PDA])));
  size_t global[2] = {(size_t)p->nchunks * TD_WG, (size_t)p->H}, local[2] = {TD_WG, 1};
  CLMOE_TRY(clmoe__launch(ctx, k, 2, global, local));
  cl_ulong ddto = (cl_ulong)g->ddt_bias->offset, dao = (cl_ulong)g->dA_log->offset;
  CLMOE_TRY(clmoe__args(k1, 7, KA(b->m[KB_PDDT]), KA(b->m[KB_PDA]), KA(nch), KA(H), KA(g->ddt_bias->buf),
                        KA(ddto), KA(b->m[KB_TMP])));
  CLMOE_TRY(clmoe__launch1d(ctx, k1, (size_t)(p->H * p->K)));
  CLMOE_TRY(clmoe__args(k2, 4, KA(b->m[KB_TMP]), KA(H), KA(g->dA_log->buf), KA(dao)));
  return clmoe__launch1d(ctx, k2, (size_t)p->H);
}

clmoe_status kda_tc_bwd_run(clmoe_ctx *ctx, const struct kda_plan *p, const clmoe_kda_inputs *in,
                            const clmoe_tensor *dout, const clmoe_tensor *dht,
                            const clmoe_kda_grads *g, int warps)
{
  if (p->nchunks == 0) return CLMOE_OK; /* (callers handle the empty case) */
  warps = pick_warps(p, warps);
  kda_chunk_buffers cb = {0};
  kda_bwd_buffers b = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, kda_run_prep(ctx, p, in, &cb), done);
  CLMOE_TRY_GOTO(st, tcb_alloc(ctx, p, &b), done);
  CLMOE_TRY_GOTO(st, run_tiles(ctx, p, in, &cb, &b, dout, dht, g->dinitial_state, warps), done);
  st = run_chunk_tail(ctx, p, in, &b, g);
done:
  kda_bwd_buffers_release(ctx, &b);
  kda_chunk_buffers_release(ctx, &cb);
  return st;
}

clmoe_status clmoe_kda_backward_tc(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                   const clmoe_kda_inputs *in, const clmoe_tensor *dout,
                                   const clmoe_tensor *dfinal_state, const clmoe_kda_grads *grads,
                                   const clmoe_kda_tc_config *cfg)
{
  const char *op = "clmoe_kda_backward_tc";
  kda_plan p;
  CLMOE_TRY(kda_plan_make(ctx, op, opts, in, &p));
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY_GOTO(st, kda_check_grads(op, &p, dout, dfinal_state, grads), done);
  if (!kda_tc_bwd_covers(ctx, &p)) {
    st = clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: the tile path needs the bounded gate, K, V "
                      "multiples of 16 up to 128, work-groups of 256 and about 45 KB of local "
                      "memory (K = %lld, V = %lld, %s gate)", op, (long long)p.K, (long long)p.V,
                      p.unbounded ? "unbounded" : "bounded");
    goto done;
  }
  if (p.nchunks == 0) {
    st = kda_backward_empty(dfinal_state, grads);
    goto done;
  }
  st = kda_tc_bwd_run(ctx, &p, in, dout, dfinal_state, grads, cfg ? cfg->warps : 0);
done:
  kda_plan_release(ctx, &p);
  return st;
}
