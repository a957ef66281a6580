/* KDA backward on the tile interface: host side of kernels_cl/kda/kda_tile_bwd.cl and
 * kda_tile_bwd_chunk.cl. The plan (argument checks, chunk and sequence tables) is
 * kda_plan.c's, the prep's launch kda_tile_common.c's, the kept factors' layout
 * kda_tile_kept.c's. Steps:
 *   1. kda_tile_prep (kda_tile.cl built with -DTC_BWD=1, token-parallel): the per-chunk factors
 *      W, Kd, gl, Qg, Aqk as one bf16 block per (chunk, head) in the passes' layout, U^T fp32;
 *   2-3. two independent head-parallel passes, kda_tile_fwd_save (the states entering each
 *      chunk and Vnew) and kda_tile_state_bwd (reverse: dVnew and every chunk's dS), or both
 *      in one launch (kda_tile_states) when they leave compute units idle;
 *   4. kda_tile_bwd_chunk (kda_tile_bwd_chunk.cl, token-parallel): the factor gradients from
 *      the saved states, then back through the 16 x 16 factors, the gate, beta and the L2
 *      norms; kda_param_reduce, kda_alog_reduce (kda_bwd.cl) sum the per-chunk partials of
 *      ddt_bias and dA_log.
 * Steps 1-3 are one program (kda_tile.cl's prep with -DTC_BWD=1, kda_tile_state.cl's fragment
 * helpers, kda_tile_bwd.cl). When the forward kept its factors and states
 * (clmoe_kda_tile_saved) steps 1 and 2 are skipped: the reverse pass runs alone. Memory:
 * S_c^T, dS^T [chunks, H, V, K] bf16, Vnew^T bf16 [chunks, H, V, 16], dU fp32 [chunks, H, 16,
 * V], the blocks (bf16, about [chunks, H, 5, 16, K], with Tm and P in fp32) and U^T. */
#include "kda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tile/tile_internal.h"


/* kept: the forward kept S_c^T and Vnew^T (KB_SAVE, KB_VN then hold nothing) */
static clmoe_status tile_bwd_alloc(clmoe_ctx *ctx, const kda_plan *p, int kept, kda_bwd_buffers *b)
{
  const size_t nch = (size_t)p->nchunks * (size_t)p->H, K = (size_t)p->K, V = (size_t)p->V;
  const size_t f = sizeof(float), hf = sizeof(cl_ushort), C = KDA_CHUNK;
  /* (the portable backward's factor gradients, KB_DQG .. KB_DA, stay in registers here) */
  const size_t sizes[KB_COUNT] = {kept ? f : nch * K * V * hf, kept ? f : nch * C * V * hf, nch * K * V * hf,
                                  nch * C * V * f,
                                  f, f, f, f, f, nch * K * f, nch * K * f, (size_t)p->H * K * f};
  return clmoe__kda_bwd_buffers_alloc(ctx, b, sizes);
}

/* Local memory (bytes) of the tile kernels of kda_tile_bwd.cl and kda_tile_bwd_chunk.cl
 * (kernels_cl/kda/kda_common.cl's layouts): the state passes (ns stages of the reverse pass's
 * part of a block, the larger, w computing warps' dO rows, the portable tiles' scratch, the
 * stmatrix staging), kda_tile_bwd_chunk per (chunk, head) (a pool for its steps' operands,
 * dU, six fp32 16 x 16 matrices, reductions; the portable tiles' scratch). */
static size_t states_bytes(size_t K, size_t w, size_t ns, int ptx, int stsm)
{
  return KDA_TILE_BWD_STATES_LOCAL_BYTES(K, w, ns, ptx, stsm);
}
static size_t chunk_bytes(size_t K, size_t V, int ptx, size_t ns)
{
  return KDA_TILE_CHUNK_LOCAL_BYTES(K, V, ns, ptx);
}

int clmoe__kda_tile_bwd_covers(clmoe_ctx *ctx, const kda_plan *p)
{
  if (p->unbounded || p->K % 16 || p->V % 16 || p->K > 128 || p->V > 128) return 0;
  const clmoe_device_caps *c = clmoe_ctx_caps(ctx);
  const size_t K = (size_t)p->K;
  const clmoe_tile_features *tf = clmoe__tile_features(ctx);
  size_t need = chunk_bytes(K, (size_t)p->V, tf->lane_shuffle, 2);
  /* the state passes with their smallest ring: 2 stages, 1 warp */
  const size_t mine[2] = {states_bytes(K, 1, 2, tf->a_from_c, clmoe__kda_tile_stsm(ctx)),
                          KDA_TILE_PREP_LOCAL_BYTES(K, (size_t)p->V)};
  for (int i = 0; i < 2; i++)
    if (mine[i] > need) need = mine[i];
  return c->max_work_group_size >= KDA_TILE_CHUNK_WG && c->local_mem_bytes >= need + 256;
}

/* Computing warps of the two head-parallel passes (1, 2 or 4), 16 columns of V each. By
 * default the most that still give every compute unit a work-group: these passes are
 * latency-bound chains, so spreading the columns over more units wins until they run out.
 * On the H200 (132 units) at T 16384, save + reverse pass: H 16 (128 warps) 0.86 + 0.97 ms
 * with 1 warp per work-group, 1.03 + 1.16 with 2, 1.82 + 1.89 with 4; H 32 1.09 + 1.36 with
 * 1, 1.25 + 1.21 with 2, 1.76 + 1.92 with 4. The reverse pass alone (the forward kept the
 * states: `both` 0) takes the fewest warps that leave no more work-groups than units: H 16
 * 0.97 ms with 1 warp, H 32 1.24 with 2 (1.36 with 1), H 64 2.11 with 2, 2.14 with 4. */
static int pick_warps(clmoe_ctx *ctx, const kda_plan *p, int warps, int both)
{
  if (warps != 1 && warps != 2 && warps != 4) {
    const size_t units = clmoe_ctx_caps(ctx)->compute_units, cols = (size_t)(p->V / 16) * (size_t)p->H * (size_t)p->N;
    if (both) {
      warps = 1;
      while (warps < 4 && cols / (size_t)(2 * warps) >= units) warps *= 2;
    } else {
      warps = clmoe__kda_tile_spread_warps(ctx, p, 4);
    }
  }
  while (warps > 1 && p->V % (16 * warps)) warps /= 2;
  return warps;
}

/* The ring's stages (at most `most`, at least 2) and the passes' warps within the local
 * memory (covers checked that 2 stages of one warp fit). */
static int fit_ring(clmoe_ctx *ctx, const kda_plan *p, int most, int ptx, int stsm, int *w)
{
  const size_t avail = clmoe__local_mem_optin(ctx) - 256, K = (size_t)p->K;
  for (int ns = most; ns >= 2; ns--) {
    int f = *w;
    while (f > 1 && states_bytes(K, (size_t)f, (size_t)ns, ptx, stsm) > avail) f /= 2;
    if (states_bytes(K, (size_t)f, (size_t)ns, ptx, stsm) <= avail) {
      *w = f;
      return ns;
    }
  }
  *w = 1;
  return 2;
}

/* The two passes in one launch (kda_tile_states) while their work-groups together leave
 * compute units free for more (at most 2 per unit), else one after the other: on the H200 at
 * T 16384, one launch took 1.31 ms against 0.84 + 0.96 at H 16 (256 work-groups of 1
 * warp), 2.44 against 1.08 + 1.36 at H 32 (512), and 4.52 against 2.04 + 2.09 at H 64 (512
 * of 2 warps). CLMOE_KDA_TCB_FUSE=0 / 1 (a knob of the context) forces either. */
static int pick_fused(clmoe_ctx *ctx, const kda_plan *p, size_t cols)
{
  const char *env = clmoe__knob_text(ctx, CLMOE_K_KDA_TCB_FUSE); /* auto, 0 or 1 */
  if (env && (!strcmp(env, "0") || !strcmp(env, "1"))) return env[0] == '1';
  const size_t groups = 2 * cols * (size_t)p->H * (size_t)p->N;
  const size_t per_unit = (size_t)clmoe__device_defaults_for(ctx, clmoe__tile_features(ctx))->kda_bwd_fuse_per_unit;
  return groups <= per_unit * (size_t)clmoe_ctx_caps(ctx)->compute_units;
}

/* Steps 1-3 in one program: the prep (blocks into blk, U) and the two ring passes (one
 * launch or two); with prep 0 (a forward kept the blocks, U^T and the states) the reverse
 * pass alone. warps, stages: the passes' (fitted down to the local memory). */
static clmoe_status run_tiles(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in, cl_mem blk,
                              cl_mem U, int prep, const kda_bwd_buffers *b, const clmoe_tensor *dout,
                              const clmoe_tensor *dht, clmoe_tensor *dh0, int warps, int stages)
{
  char opts[320], base[128];
  clmoe__kda_options(p, 0, base, sizeof base);
  const int prod = clmoe__tile_features(ctx)->async_copy, stsm = clmoe__kda_tile_stsm(ctx);
  int w = pick_warps(ctx, p, warps, prep);
  const int ns = fit_ring(ctx, p, stages, prod, stsm, &w);
  snprintf(opts, sizeof opts, "%s -DTC_STEP=64 -DTC_BWD=1 -DTB_NW=%d -DTB_NS=%d -DTB_PROD=%d -DTC_STSM=%d %s", base,
           w, ns, prod, stsm, clmoe__tile_options(ctx));
  const char *prog = "tile+kda_common+kda_tile+kda_tile_state+kda_tile_bwd";
  cl_kernel kp;
  CLMOE_TRY(clmoe__kernel(ctx, prog, opts, "kda_tile_prep", &kp));
  if (prep) CLMOE_TRY(clmoe__kda_tile_prep_launch(ctx, p, in, kp, blk, U, NULL));
  cl_int H = (cl_int)p->H;
  /* (V / 16 / w, H, N) work-groups of w computing warps + the producer per pass */
  const size_t cols = (size_t)(p->V / 16 / w), wg = (size_t)(32 * (w + prod));
  size_t gs[3] = {cols * wg, (size_t)p->H, (size_t)p->N}, ls[3] = {wg, 1, 1};
  const clmoe_tensor *h0 = in->initial_state;
  cl_mem h0m = h0 ? h0->buf : NULL, dhtm = dht ? dht->buf : NULL, dh0m = dh0 ? dh0->buf : NULL;
  cl_ulong h0o = h0 ? (cl_ulong)h0->offset : 0, doo = (cl_ulong)dout->offset;
  cl_ulong dhto = dht ? (cl_ulong)dht->offset : 0, dh0o = dh0 ? (cl_ulong)dh0->offset : 0;
  cl_int has_h0 = h0 != NULL, has_dht = dht != NULL, has_dh0 = dh0 != NULL;
  if (prep && pick_fused(ctx, p, cols)) {
    cl_kernel ks;
    CLMOE_TRY(clmoe__kernel(ctx, prog, opts, "kda_tile_states", &ks));
    CLMOE_TRY(clmoe__args(ks, 20, KA(blk), KA(U), KA(p->chunks), KA(p->seq_chunks), KA(H), KA(h0m), KA(h0o),
                          KA(has_h0), KA(dout->buf), KA(doo), KA(dhtm), KA(dhto), KA(has_dht), KA(b->m[KB_SAVE]),
                          KA(b->m[KB_VN]), KA(b->m[KB_DU]), KA(b->m[KB_DSAVE]), KA(dh0m), KA(dh0o), KA(has_dh0)));
    gs[0] *= 2; /* the save pass's columns, then the reverse pass's */
    CLMOE_TRY(clmoe__launch(ctx, ks, 3, gs, ls));
  } else { /* the save pass unless the forward kept the states, then the reverse pass */
    cl_kernel kf, kr;
    if (prep) {
      CLMOE_TRY(clmoe__kernel(ctx, prog, opts, "kda_tile_fwd_save", &kf));
      CLMOE_TRY(clmoe__args(kf, 9, KA(blk), KA(U), KA(p->seq_chunks), KA(H), KA(h0m), KA(h0o), KA(has_h0),
                            KA(b->m[KB_SAVE]), KA(b->m[KB_VN])));
      CLMOE_TRY(clmoe__launch(ctx, kf, 3, gs, ls));
    }
    CLMOE_TRY(clmoe__kernel(ctx, prog, opts, "kda_tile_state_bwd", &kr));
    CLMOE_TRY(clmoe__args(kr, 14, KA(blk), KA(p->chunks), KA(p->seq_chunks), KA(H), KA(dout->buf), KA(doo),
                          KA(dhtm), KA(dhto), KA(has_dht), KA(b->m[KB_DU]), KA(b->m[KB_DSAVE]), KA(dh0m),
                          KA(dh0o), KA(has_dh0)));
    CLMOE_TRY(clmoe__launch(ctx, kr, 3, gs, ls));
  }
  return CLMOE_OK;
}

/* kda_tile_bwd_chunk's (chunk, head) pairs per work-group: 2 (512 work-items, which holds the
 * compiler to 128 registers: 16 warps per SM instead of 8) where the matrix unit is NVIDIA's
 * and twice its local memory fits, else 1; then the stages of its warps' copy rings: 3 where
 * they fit, else 2. CLMOE_KDA_TCB_PAIR=1 / 2 and CLMOE_KDA_TCB_STAGES=2 / 3 (knobs of the
 * context) force either where it fits. */
static int pick_pair(clmoe_ctx *ctx, const kda_plan *p, int *ns)
{
  const clmoe_tile_features *tf = clmoe__tile_features(ctx);
  const size_t K = (size_t)p->K, V = (size_t)p->V, avail = clmoe__local_mem_optin(ctx);
  const int fits = 2 * chunk_bytes(K, V, tf->lane_shuffle, 2) + 256 <= avail &&
                   clmoe_ctx_caps(ctx)->max_work_group_size >= 2 * KDA_TILE_CHUNK_WG;
  const char *env = clmoe__knob_text(ctx, CLMOE_K_KDA_TCB_PAIR), *env_s = clmoe__knob_text(ctx, CLMOE_K_KDA_TCB_STAGES);
  const clmoe__device_defaults *dd = clmoe__device_defaults_for(ctx, tf); /* knobs_device.c */
  int pair = fits ? dd->kda_bwd_pair : 1;
  if (env && (!strcmp(env, "1") || !strcmp(env, "2"))) pair = env[0] == '2' && fits ? 2 : 1;
  *ns = (size_t)pair * chunk_bytes(K, V, tf->lane_shuffle, dd->kda_bwd_stages) + 256 <= avail ? dd->kda_bwd_stages : 2;
  if (env_s && !strcmp(env_s, "2")) *ns = 2;
  return pair;
}

/* Step 4: kda_tile_bwd_chunk (tiles) on the saved states and the blocks, then kda_bwd.cl's
 * reductions (kda_chunk.c). */
static clmoe_status run_chunk_tail(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in, cl_mem blk,
                                   cl_mem Sm, cl_mem Vm, const kda_bwd_buffers *b, const clmoe_tensor *dout, const clmoe_kda_grads *g)
{
  char opts[128], topts[256];
  int ns;
  const int pair = pick_pair(ctx, p, &ns);
  clmoe__kda_options(p, 0, opts, sizeof opts);
  snprintf(topts, sizeof topts, "%s -DTD_PAIR=%d -DTD_NS=%d %s", opts, pair, ns, clmoe__tile_options(ctx));
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "tile+kda_common+kda_tile_warp+kda_tile_bwd_chunk", topts,
                          "kda_tile_bwd_chunk", &k));
  cl_ulong qo = (cl_ulong)in->q->offset, ko = (cl_ulong)in->k->offset, vo = (cl_ulong)in->v->offset;
  cl_ulong zo = (cl_ulong)in->g->offset, bo = (cl_ulong)in->beta->offset;
  cl_ulong ao = (cl_ulong)in->A_log->offset, dto = (cl_ulong)in->dt_bias->offset;
  cl_ulong dqo = (cl_ulong)g->dq->offset, dko = (cl_ulong)g->dk->offset, dvo = (cl_ulong)g->dv->offset;
  cl_ulong dzo = (cl_ulong)g->dg->offset, dbo = (cl_ulong)g->dbeta->offset;
  cl_ulong doo = (cl_ulong)dout->offset;
  cl_int H = (cl_int)p->H, nch = p->nchunks;
  float scale = p->scale, lb = p->lb;
  CLMOE_TRY(clmoe__args(k, 38, KA(in->q->buf), KA(qo), KA(in->k->buf), KA(ko), KA(in->v->buf), KA(vo),
                        KA(in->g->buf), KA(zo), KA(in->beta->buf), KA(bo), KA(in->A_log->buf), KA(ao),
                        KA(in->dt_bias->buf), KA(dto), KA(p->chunks), KA(nch), KA(H), KA(scale),
                        KA(lb), KA(blk), KA(Sm), KA(b->m[KB_DSAVE]), KA(Vm), KA(b->m[KB_DU]),
                        KA(dout->buf), KA(doo), KA(g->dq->buf), KA(dqo), KA(g->dk->buf), KA(dko),
                        KA(g->dv->buf), KA(dvo), KA(g->dg->buf), KA(dzo), KA(g->dbeta->buf), KA(dbo),
                        KA(b->m[KB_PDDT]), KA(b->m[KB_PDA])));
  const size_t groups = ((size_t)p->nchunks + (size_t)pair - 1) / (size_t)pair;
  size_t global[2] = {groups * KDA_TILE_CHUNK_WG * (size_t)pair, (size_t)p->H};
  size_t local[2] = {KDA_TILE_CHUNK_WG * (size_t)pair, 1};
  CLMOE_TRY(clmoe__launch(ctx, k, 2, global, local));
  return clmoe__kda_param_reduce(ctx, p, b, g);
}

clmoe_status clmoe__kda_tile_bwd_run(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                     const clmoe_tensor *dout, const clmoe_tensor *dht,
                                     const clmoe_kda_grads *g, int warps, int lookahead,
                                     const clmoe_kda_tile_saved *saved)
{
  if (p->nchunks == 0) return CLMOE_OK; /* (callers handle the empty case) */
  const int stages = lookahead >= 1 && lookahead <= 3
                         ? lookahead + 1
                         : clmoe__device_defaults_for(ctx, clmoe__tile_features(ctx))->kda_lookahead + 1;
  /* the blocks and U^T (made here, or kept by a forward: clmoe_kda_tile_saved, when they are
   * this plan's, with the states) */
  size_t ks[4];
  clmoe__kda_tile_kept_sizes((size_t)p->nchunks * (size_t)p->H, p->K, p->V, ks);
  const size_t blk_bytes = ks[0], u_bytes = ks[1];
  const int kept = clmoe__kda_tile_kept_matches(saved, p);
  cl_mem blk = NULL, U = NULL;
  kda_bwd_buffers b = {0};
  clmoe_status st;
  if (!kept) {
    CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, blk_bytes, &blk), done);
    CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, u_bytes, &U), done);
  }
  cl_mem bk = kept ? saved->blocks : blk, uk = kept ? saved->ut : U;
  CLMOE_TRY_GOTO(st, tile_bwd_alloc(ctx, p, kept, &b), done);
  CLMOE_TRY_GOTO(st, run_tiles(ctx, p, in, bk, uk, !kept, &b, dout, dht, g->dinitial_state, warps, stages), done);
  st = run_chunk_tail(ctx, p, in, bk, kept ? saved->states : b.m[KB_SAVE], kept ? saved->vnew : b.m[KB_VN], &b,
                      dout, g);
done:
  clmoe__kda_bwd_buffers_release(ctx, &b);
  clmoe__scratch_release(ctx, blk, blk_bytes);
  clmoe__scratch_release(ctx, U, u_bytes);
  return st;
}

clmoe_status clmoe_kda_backward_tile(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                   const clmoe_kda_inputs *in, const clmoe_tensor *dout,
                                   const clmoe_tensor *dfinal_state, const clmoe_kda_grads *grads,
                                   const clmoe_kda_tile_config *cfg)
{
  const char *op = "clmoe_kda_backward_tile";
  kda_plan p;
  CLMOE_TRY(clmoe__kda_plan_make(ctx, op, opts, in, &p));
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY_GOTO(st, clmoe__kda_check_grads(op, &p, dout, dfinal_state, grads), done);
  if (!clmoe__kda_tile_bwd_covers(ctx, &p)) {
    st = clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: the tile path needs the bounded gate, K, V "
                      "multiples of 16 up to 128, work-groups of 256 and about 48 KB of local "
                      "memory (K = %lld, V = %lld, %s gate)", op, (long long)p.K, (long long)p.V,
                      p.unbounded ? "unbounded" : "bounded");
    goto done;
  }
  if (p.nchunks == 0) {
    st = clmoe__kda_backward_empty(dfinal_state, grads);
    goto done;
  }
  st = clmoe__kda_tile_bwd_run(ctx, &p, in, dout, dfinal_state, grads, cfg ? cfg->warps : 0, cfg ? cfg->lookahead : 0,
                      cfg ? cfg->saved : NULL);
done:
  clmoe__kda_plan_release(ctx, &p);
  return st;
}
