/* KDA forward on the tile interface: host side of kernels_cl/kda/kda_tile.cl,
 * kda_tile_state16.cl and kda_tile_state.cl. The plan (argument checks, chunk and sequence
 * tables) is kda_plan.c's, the prep's launch kda_tile_common.c's and the kept factors
 * kda_tile_kept.c's; this file sizes the per-chunk intermediates, picks the state pass (16- or
 * 64-token steps) and launches the two kernels. */
#include "kda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tile/tile_internal.h"

/* Local memory of the register-state pass (kernels_cl/kda/kda_tile_state.cl, bytes): a ring
 * of `stages` blocks and U^T rows, the portable tiles' per-warp scratch, the stmatrix staging
 * (kernels_cl/kda/kda_common.cl's layouts). */
static size_t state64_local_bytes(size_t K, size_t warps, size_t stages, int ptx, int stsm)
{
  return KDA_TILE_STATE64_LOCAL_BYTES(K, warps, stages, ptx, stsm);
}

int clmoe__kda_tile_fwd_covers(clmoe_ctx *ctx, const kda_plan *p)
{
  if (p->K % 16 || p->V % 16 || p->K > 128 || p->V > 128) return 0;
  const clmoe_device_caps *c = clmoe_ctx_caps(ctx);
  /* the prep and the 16-token state pass of 4 warps (kernels_cl/kda/kda_common.cl's layouts) */
  const size_t K = (size_t)p->K, prep = KDA_TILE_PREP_LOCAL_BYTES(K, (size_t)p->V);
  const size_t state = KDA_TILE_STATE16_LOCAL_BYTES(K, (size_t)4);
  const size_t need = prep > state ? prep : state;
  return c->max_work_group_size >= KDA_TILE_PREP_WG && c->local_mem_bytes >= need + 256;
}

/* Warps per state work-group: step 16, 8 columns of V each (1, 2, 4); step 64, 16 columns
 * each (1, 2, 4, 8); default 2. On the H200 (step 64, no producer warp) 2 warps took 16%
 * less time than 1 at H 16 and 32 (the copies' issue shared) and 4 warps 2-7% less than 2 at
 * H 64 (the blocks' L2 traffic, read once per work-group, starts to count). */
static int pick_warps(clmoe_ctx *ctx, const kda_plan *p, int warps, int step, int save)
{
  const int cols = step == 64 ? 16 : 8, most = step == 64 ? 8 : 4;
  /* Saving the states (TC_SAVE) the stores are spread over the compute units (on the H200 at
   * T 16384, H 16: 1 warp 0.72 ms against 0.91 with 2; H 32: 2 warps; H 64: 2 or 4). */
  if (save && warps != 1 && warps != 2 && warps != 4 && warps != most) warps = clmoe__kda_tile_spread_warps(ctx, p, most);
  if (warps != 1 && warps != 2 && warps != 4 && warps != most)
    warps = clmoe__device_defaults_for(ctx, clmoe__tile_features(ctx))->kda_warps; /* knobs_device.c */
  while (warps > 1 && p->V % (cols * warps)) warps /= 2;
  return warps;
}

/* Step 64: copy stages (lookahead + 1, default 3) and warps within the local memory. */
static void fit_ring(clmoe_ctx *ctx, const kda_plan *p, int ptx, int stsm, int *warps, int *stages)
{
  const size_t avail = clmoe__local_mem_optin(ctx) - 256;
  while (*stages > 2 && state64_local_bytes((size_t)p->K, (size_t)*warps, (size_t)*stages, ptx, stsm) > avail)
    (*stages)--;
  while (*warps > 1 && state64_local_bytes((size_t)p->K, (size_t)*warps, (size_t)*stages, ptx, stsm) > avail)
    *warps /= 2;
}

/* The state pass: the register-state pass fed by a ring of asynchronous copies
 * (kda_tile_state.cl, "step 64" for history: it first ran 4 chunks per step), unless
 * CLMOE_KDA_TC_STEP=16 (a knob of the context, so one process can time both) selects the
 * 16-token pass with S staged through local memory (kda_tile_state16.cl). On the H200 at
 * H 16, T 16384 the state pass takes 0.57 ms (with the producer warp) against 1.49
 * (docs/benchmarks-kda-ring.md). With step 64 the config's warps are warps of 16 columns
 * of V and its lookahead the chunks copied ahead (1, 2 or 3; default 2). */
static int pick_step(clmoe_ctx *ctx)
{
  const char *env = clmoe__knob_text(ctx, CLMOE_K_KDA_TC_STEP);
  if (env && !strcmp(env, "16")) return 16;
  return 64;
}

/* A producer warp issuing the ring's copies (PTX tiles; CLMOE_KDA_TC_PRODUCER=0 drops it):
 * on the H200 the state pass took 0.57 ms against 0.87 at H 16, T 16384 with it, the
 * computing warps' chains no longer interleaved with the copies' issue. The portable tiles
 * never take it (their chunk holds barriers that every work-item must reach). */
static int pick_producer(clmoe_ctx *ctx)
{
  return (int)clmoe__knob_int(ctx, CLMOE_K_KDA_TC_PRODUCER);
}

static clmoe_status run_step(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                             clmoe_tensor *o, clmoe_tensor *ht, int step, int warps, int lookahead,
                             clmoe_kda_tile_saved *saved)
{
  const clmoe_tile_features *tf = clmoe__tile_features(ctx);
  const int regs = tf->a_from_c; /* no per-warp scratch (KDA_TILE_STATE64_LOCAL_BYTES) */
  if (saved && step != 64) saved->nchunks = 0; /* (the 16-token pass's U is not U^T) */
  /* Intermediates: the blocks [chunks, H, block] and U [chunks, H, 16, V] f32 (step 64: the
   * same sizes, fragment order and U^T [chunks, H, V, 16]: kernels_cl/kda/kda_tile.cl). */
  const size_t nch = (size_t)(p->nchunks ? p->nchunks : 1) * (size_t)p->H;
  const size_t blk_bytes = nch * KDA_TILE_FWD_BLOCK((size_t)p->K) * sizeof(cl_ushort);
  const size_t u_bytes = nch * KDA_CHUNK * (size_t)p->V * sizeof(float);
  int save = 0;
  if (saved && step == 64 && p->nchunks > 0) CLMOE_TRY(clmoe__kda_tile_keep_or_not(ctx, p, saved, &save));
  const int stsm = save && clmoe__kda_tile_stsm(ctx);
  warps = pick_warps(ctx, p, warps, step, save);
  int stages = 0;
  if (step == 64) {
    stages = lookahead >= 1 && lookahead <= 3
                 ? lookahead + 1
                 : clmoe__device_defaults_for(ctx, clmoe__tile_features(ctx))->kda_lookahead + 1;
    lookahead = 0; /* (TC_PF: the 16-token pass's; one build per ring) */
    fit_ring(ctx, p, regs, stsm, &warps, &stages);
    if (state64_local_bytes((size_t)p->K, (size_t)warps, (size_t)stages, regs, stsm) + 256 > clmoe__local_mem_optin(ctx)) {
      if (save) clmoe_kda_tile_saved_release(ctx, saved);
      return run_step(ctx, p, in, o, ht, 16, 0, 0, saved); /* too little local memory */
    }
  } else if (lookahead != 1 && lookahead != 2) {
    /* Two register sets of look-ahead cost 2 x 26 uint4 per work-item with one warp. */
    lookahead = warps >= 2 ? 2 : 1;
  }
  const int prod = step == 64 && tf->async_copy && pick_producer(ctx);
  char opts[320], base[128];
  clmoe__kda_options(p, o->dtype == CLMOE_BF16, base, sizeof base);
  /* (-DTC_UNB=1: the prep for the unbounded gate, kda_tile.cl; the bounded builds' options
   * stay as they were) */
  snprintf(opts, sizeof opts, "%s -DTC_STEP=%d -DTC_NW=%d -DTC_PF=%d -DTC_NS=%d -DTC_PROD=%d -DTC_SAVE=%d -DTC_STSM=%d%s %s",
           base, step, warps, lookahead, stages, prod, save, stsm, p->unbounded ? " -DTC_UNB=1" : "",
           clmoe__tile_options(ctx));
  const char *family = "tile+kda_common+kda_tile+kda_tile_state16+kda_tile_state";
  cl_kernel kp, ks;
  CLMOE_TRY(clmoe__kernel(ctx, family, opts, "kda_tile_prep", &kp));
  CLMOE_TRY(clmoe__kernel(ctx, family, opts, "kda_tile_state", &ks));

  cl_mem blk = NULL, U = NULL, bb = NULL;
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, blk_bytes, &blk), done);
  if (save) { /* U^T goes where the backward reads it */
    bb = saved->blocks;
  } else {
    CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, u_bytes, &U), done);
  }
  cl_mem Uk = save ? saved->ut : U;
  cl_int H = (cl_int)p->H;
  CLMOE_TRY_GOTO(st, clmoe__kda_tile_prep_launch(ctx, p, in, kp, blk, Uk, bb), done);
  const clmoe_tensor *h0 = in->initial_state;
  cl_mem h0m = h0 ? h0->buf : NULL, htm = ht ? ht->buf : NULL;
  cl_ulong h0o = h0 ? (cl_ulong)h0->offset : 0, oo = (cl_ulong)o->offset;
  cl_ulong hto = ht ? (cl_ulong)ht->offset : 0;
  cl_int has_h0 = h0 != NULL, has_ht = ht != NULL;
  cl_mem Sk = save ? saved->states : blk, Vk = save ? saved->vnew : blk; /* (blk: unused) */
  CLMOE_TRY_GOTO(st, clmoe__args(ks, 15, KA(blk), KA(Uk), KA(p->chunks), KA(p->seq_chunks), KA(H), KA(h0m),
                                 KA(h0o), KA(has_h0), KA(o->buf), KA(oo), KA(htm), KA(hto), KA(has_ht),
                                 KA(Sk), KA(Vk)), done);
  /* One warp per 8 (step 16) or 16 (step 64) columns of V. */
  size_t global[3] = {(size_t)(p->V / (step == 64 ? 16 : 8)) * 32, (size_t)p->H, (size_t)p->N};
  size_t local[3] = {(size_t)(32 * (warps + prod)), 1, 1};
  global[0] = global[0] / (size_t)(32 * warps) * local[0];
  st = clmoe__launch(ctx, ks, 3, global, local);
  if (st == CLMOE_OK && save) saved->nchunks = p->nchunks, saved->H = p->H, saved->K = p->K, saved->V = p->V;
done:
  clmoe__scratch_release(ctx, blk, blk_bytes);
  clmoe__scratch_release(ctx, U, u_bytes);
  return st;
}

clmoe_status clmoe__kda_tile_fwd_run(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                     clmoe_tensor *o, clmoe_tensor *ht, int warps, int lookahead,
                                     clmoe_kda_tile_saved *saved)
{
  if (saved) saved->nchunks = 0;
  if (saved && p->unbounded) { /* the tile backward takes the bounded gate only: nothing to keep */
    clmoe_kda_tile_saved_release(ctx, saved);
    saved = NULL;
  }
  if (p->N == 0) return CLMOE_OK;
  return run_step(ctx, p, in, o, ht, pick_step(ctx), warps, lookahead, saved);
}

clmoe_status clmoe_kda_forward_tile(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                  const clmoe_kda_inputs *in, clmoe_tensor *o,
                                  clmoe_tensor *final_state, const clmoe_kda_tile_config *cfg)
{
  const char *op = "clmoe_kda_forward_tile";
  kda_plan p;
  CLMOE_TRY(clmoe__kda_plan_make(ctx, op, opts, in, &p));
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY_GOTO(st, clmoe__want_shape(o, op, "o", 1, 4, p.B, p.T, p.H, p.V), done);
  if (final_state)
    CLMOE_TRY_GOTO(st, clmoe__want_shape(final_state, op, "final_state", 0, 4, p.N, p.H, p.K, p.V), done);
  if (!clmoe__kda_tile_fwd_covers(ctx, &p)) {
    st = clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: the tile path needs K, V multiples of 16 up "
                      "to 128, work-groups of 128 and about 35 KB of local memory (K = %lld, "
                      "V = %lld)", op, (long long)p.K, (long long)p.V);
    goto done;
  }
  st = clmoe__kda_tile_fwd_run(ctx, &p, in, o, final_state, cfg ? cfg->warps : 0, cfg ? cfg->lookahead : 0,
                  cfg ? cfg->saved : NULL);
done:
  clmoe__kda_plan_release(ctx, &p);
  return st;
}
