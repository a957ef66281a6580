/* KDA forward on the tile interface (issue 9): host side of kernels_cl/kda/kda_tc.cl and
 * kda_tc_state.cl. The plan (argument checks, chunk and sequence tables) is kda.c's; this
 * file sizes the per-chunk intermediates, picks the state pass (16- or 64-token steps) and
 * launches the two kernels. */
#include "clmoe/paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tile/tile_internal.h"
#include "kda_internal.h"

#define TC_PREP_WG 128 /* kernels_cl/kda/kda_tc.cl */

/* ushorts of one (chunk, head) block: bf16 W, Qg, Kd [3][16][K], Aqk [16][16], gl f32 [K]. */
static size_t block_ushorts(int64_t K) { return (size_t)(48 * K + 256 + 2 * K); }

/* Local memory of the two kernels (bytes, as declared in kernels_cl/kda/kda_tc.cl). */
size_t kda_tc_prep_local_bytes(size_t K, size_t V)
{
  return 16 * (K + 8) * 4 + 2 * K * 4 + 4 * 16 * (K + 8) * 2 + 16 * (V + 8) * 2 + 2 * 16 * 17 * 4 +
         2 * 16 * 8 * 4 + 3 * 16 * 4;
}
static size_t state_local_bytes(size_t K, size_t warps)
{
  return (32 * ((K + 8) / 8) + 3 * K + 48 + K / 4) * 16 + warps * 8 * (K + 8) * 2 + warps * 8 * 24 * 2;
}
/* The register-state pass (kernels_cl/kda/kda_tc_state.cl): a ring of `stages` blocks and
 * U^T rows, plus a per-warp scratch with the portable tiles. */
static size_t state64_local_bytes(size_t K, size_t warps, size_t stages, int ptx, int stsm)
{
  return stages * (block_ushorts((int64_t)K) * 2 + warps * 16 * KDA_CHUNK * 4) +
         (ptx ? 0 : warps * (16 * (K + 4) + 16 * 16) * 4) + kda_tc_stsm_bytes(K, warps, stsm);
}

int kda_tc_covers(clmoe_ctx *ctx, const kda_plan *p)
{
  if (p->unbounded || p->K % 16 || p->V % 16 || p->K > 128 || p->V > 128) return 0;
  const clmoe_device_caps *c = clmoe_ctx_caps(ctx);
  size_t need = kda_tc_prep_local_bytes((size_t)p->K, (size_t)p->V);
  if (state_local_bytes((size_t)p->K, 4) > need) need = state_local_bytes((size_t)p->K, 4);
  return c->max_work_group_size >= TC_PREP_WG && c->local_mem_bytes >= need + 256;
}

int kda_tc_stsm(clmoe_ctx *ctx)
{
  const char *env = getenv("CLMOE_KDA_TC_STSM");
  if (env && !strcmp(env, "0")) return 0;
  return clmoe_ctx_tile_impl(ctx) == CLMOE_TILE_NV_MMA && clmoe_ctx_caps(ctx)->nv_cc_major >= 9;
}

size_t kda_tc_stsm_bytes(size_t K, size_t warps, int stsm) { return stsm ? warps * 16 * (K + 8) * 2 : 0; }

int kda_tc_spread_warps(clmoe_ctx *ctx, const kda_plan *p, int most)
{
  const size_t units = clmoe_ctx_caps(ctx)->compute_units, cols = (size_t)(p->V / 16) * (size_t)p->H * (size_t)p->N;
  int warps = 1;
  while (warps < most && cols / (size_t)warps > units) warps *= 2;
  return warps;
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
  if (save && warps != 1 && warps != 2 && warps != 4 && warps != most) warps = kda_tc_spread_warps(ctx, p, most);
  if (warps != 1 && warps != 2 && warps != 4 && warps != most) warps = 2;
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
 * (kda_tc_state.cl, "step 64" for history: it first ran 4 chunks per step), unless
 * CLMOE_KDA_TC_STEP=16 (read at every call, so one process can time both) selects the
 * 16-token pass with S staged through local memory (kda_tc.cl). On the H200 at H 16,
 * T 16384 the state pass takes 0.57 ms (with the producer warp) against 1.49
 * (docs/benchmarks-kda-ring.md). With step 64 the config's warps are warps of 16 columns
 * of V and its lookahead the chunks copied ahead (1, 2 or 3; default 2). */
static int pick_step(void)
{
  const char *env = getenv("CLMOE_KDA_TC_STEP");
  if (env && !strcmp(env, "16")) return 16;
  return 64;
}

/* A producer warp issuing the ring's copies (PTX tiles; CLMOE_KDA_TC_PRODUCER=0 drops it):
 * on the H200 the state pass took 0.57 ms against 0.87 at H 16, T 16384 with it, the
 * computing warps' chains no longer interleaved with the copies' issue. The portable tiles
 * never take it (their chunk holds barriers that every work-item must reach). */
static int pick_producer(void)
{
  const char *env = getenv("CLMOE_KDA_TC_PRODUCER");
  return !(env && !strcmp(env, "0"));
}

/* kda_tc_prep (kernel kp, from a kda_tc.cl build) on every (chunk, head) of the plan:
 * the blocks into blk and U into U (their layouts: the build's). */
clmoe_status kda_tc_prep_launch(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                                cl_kernel kp, cl_mem blk, cl_mem U, cl_mem bb)
{
  if (p->nchunks == 0) return CLMOE_OK;
  cl_ulong qo = (cl_ulong)in->q->offset, ko = (cl_ulong)in->k->offset, vo = (cl_ulong)in->v->offset;
  cl_ulong zo = (cl_ulong)in->g->offset, bo = (cl_ulong)in->beta->offset;
  cl_ulong ao = (cl_ulong)in->A_log->offset, dto = (cl_ulong)in->dt_bias->offset;
  cl_int H = (cl_int)p->H;
  float scale = p->scale, lb = p->lb;
  CLMOE_TRY(clmoe__args(kp, 21, KA(in->q->buf), KA(qo), KA(in->k->buf), KA(ko), KA(in->v->buf), KA(vo),
                        KA(in->g->buf), KA(zo), KA(in->beta->buf), KA(bo), KA(in->A_log->buf), KA(ao),
                        KA(in->dt_bias->buf), KA(dto), KA(p->chunks), KA(H), KA(scale), KA(lb), KA(blk),
                        KA(U), KA(bb)));
  size_t global[2] = {(size_t)p->nchunks * TC_PREP_WG, (size_t)p->H}, local[2] = {TC_PREP_WG, 1};
  return clmoe__launch(ctx, kp, 2, global, local);
}

void clmoe_kda_tc_saved_release(clmoe_ctx *ctx, clmoe_kda_tc_saved *s)
{
  if (!s) return;
  clmoe__scratch_release(ctx, s->blocks, s->blocks_bytes);
  clmoe__scratch_release(ctx, s->ut, s->ut_bytes);
  clmoe__scratch_release(ctx, s->states, s->states_bytes);
  clmoe__scratch_release(ctx, s->vnew, s->vnew_bytes);
  memset(s, 0, sizeof *s);
}

/* The KDA layer's holder of kept factors (kda_internal.h). */
typedef struct kda_kept {
  clmoe_ctx *ctx;
  clmoe_kda_tc_saved s;
} kda_kept;

void *kda_kept_new(clmoe_ctx *ctx)
{
  const char *env = getenv("CLMOE_KDA_KEEP");
  if (env && !strcmp(env, "0")) return NULL;
  kda_kept *k = calloc(1, sizeof *k);
  if (k) k->ctx = ctx;
  return k;
}

clmoe_kda_tc_saved *kda_kept_saved(void *kept) { return kept ? &((kda_kept *)kept)->s : NULL; }

void kda_kept_free(void *kept)
{
  if (!kept) return;
  kda_kept *k = kept;
  clmoe_kda_tc_saved_release(k->ctx, &k->s);
  free(k);
}

/* saved's buffers at the plan's sizes (kept when they already are), marked empty. */
static clmoe_status saved_fit(clmoe_ctx *ctx, const kda_plan *p, clmoe_kda_tc_saved *s)
{
  size_t sz[4];
  kda_tc_kept_sizes((size_t)p->nchunks * (size_t)p->H, p->K, p->V, sz);
  if (s->blocks_bytes != sz[0] || s->ut_bytes != sz[1] || s->states_bytes != sz[2] || s->vnew_bytes != sz[3]) {
    clmoe_kda_tc_saved_release(ctx, s);
    cl_mem *mem[4] = {&s->blocks, &s->ut, &s->states, &s->vnew};
    size_t *bytes[4] = {&s->blocks_bytes, &s->ut_bytes, &s->states_bytes, &s->vnew_bytes};
    for (int i = 0; i < 4; i++) {
      CLMOE_TRY(clmoe__scratch(ctx, sz[i], mem[i]));
      *bytes[i] = sz[i];
    }
  }
  s->nchunks = 0;
  return CLMOE_OK;
}

/* Whether the forward keeps the factors for the backward (*save): only within
 * CLMOE_KDA_KEEP_MAX_MB (MiB, read at every call; unset: no cap) and where their buffers can
 * be had; otherwise saved is emptied and the backward recomputes them (keeping is only a
 * shortcut, never a reason for the forward to fail). */
static clmoe_status keep_or_not(clmoe_ctx *ctx, const kda_plan *p, clmoe_kda_tc_saved *s, int *save)
{
  const char *env = getenv("CLMOE_KDA_KEEP_MAX_MB");
  *save = 0;
  if (env && *env) {
    char *end = NULL;
    const double mb = strtod(env, &end);
    if (!end || *end || !(mb >= 0.0 && mb < 1e15))
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "CLMOE_KDA_KEEP_MAX_MB: '%s' is not a number of MiB", env);
    const double need = (double)p->nchunks * (double)p->H * (double)clmoe_kda_tc_kept_bytes(p->K, p->V);
    if (need > mb * 1048576.0) {
      clmoe_kda_tc_saved_release(ctx, s);
      return CLMOE_OK;
    }
  }
  if (saved_fit(ctx, p, s) != CLMOE_OK) {
    clmoe_kda_tc_saved_release(ctx, s);
    return CLMOE_OK;
  }
  *save = 1;
  return CLMOE_OK;
}

static clmoe_status run_step(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                             clmoe_tensor *o, clmoe_tensor *ht, int step, int warps, int lookahead,
                             clmoe_kda_tc_saved *saved)
{
  const int ptx = clmoe_ctx_tile_impl(ctx) == CLMOE_TILE_NV_MMA;
  if (saved && step != 64) saved->nchunks = 0; /* (the 16-token pass's U is not U^T) */
  /* Intermediates: the blocks [chunks, H, block] and U [chunks, H, 16, V] f32 (step 64: the
   * same sizes, fragment order and U^T [chunks, H, V, 16]: kernels_cl/kda/kda_tc.cl). */
  const size_t nch = (size_t)(p->nchunks ? p->nchunks : 1) * (size_t)p->H;
  const size_t blk_bytes = nch * block_ushorts(p->K) * sizeof(cl_ushort);
  const size_t u_bytes = nch * KDA_CHUNK * (size_t)p->V * sizeof(float);
  int save = 0;
  if (saved && step == 64 && p->nchunks > 0) CLMOE_TRY(keep_or_not(ctx, p, saved, &save));
  const int stsm = save && kda_tc_stsm(ctx);
  warps = pick_warps(ctx, p, warps, step, save);
  int stages = 0;
  if (step == 64) {
    stages = lookahead >= 1 && lookahead <= 3 ? lookahead + 1 : 3;
    lookahead = 0; /* (TC_PF: the 16-token pass's; one build per ring) */
    fit_ring(ctx, p, ptx, stsm, &warps, &stages);
    if (state64_local_bytes((size_t)p->K, (size_t)warps, (size_t)stages, ptx, stsm) + 256 > clmoe__local_mem_optin(ctx)) {
      if (save) clmoe_kda_tc_saved_release(ctx, saved);
      return run_step(ctx, p, in, o, ht, 16, 0, 0, saved); /* too little local memory */
    }
  } else if (lookahead != 1 && lookahead != 2) {
    /* Two register sets of look-ahead cost 2 x 26 uint4 per work-item with one warp. */
    lookahead = warps >= 2 ? 2 : 1;
  }
  const int prod = step == 64 && ptx && pick_producer();
  char opts[288], base[128];
  kda_options(p, o->dtype == CLMOE_BF16, base, sizeof base);
  snprintf(opts, sizeof opts, "%s -DTC_STEP=%d -DTC_NW=%d -DTC_PF=%d -DTC_NS=%d -DTC_PROD=%d -DTC_SAVE=%d -DTC_STSM=%d %s",
           base, step, warps, lookahead, stages, prod, save, stsm, clmoe__tile_options(ctx));
  const char *family = "tile+kda_common+kda_tile+kda_tile_state";
  cl_kernel kp, ks;
  CLMOE_TRY(clmoe__kernel(ctx, family, opts, "kda_tc_prep", &kp));
  CLMOE_TRY(clmoe__kernel(ctx, family, opts, "kda_tc_state", &ks));

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
  CLMOE_TRY_GOTO(st, kda_tc_prep_launch(ctx, p, in, kp, blk, Uk, bb), done);
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

clmoe_status kda_tc_run(clmoe_ctx *ctx, const kda_plan *p, const clmoe_kda_inputs *in,
                        clmoe_tensor *o, clmoe_tensor *ht, int warps, int lookahead,
                        clmoe_kda_tc_saved *saved)
{
  if (saved) saved->nchunks = 0;
  if (p->N == 0) return CLMOE_OK;
  return run_step(ctx, p, in, o, ht, pick_step(), warps, lookahead, saved);
}

clmoe_status clmoe_kda_forward_tc(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                  const clmoe_kda_inputs *in, clmoe_tensor *o,
                                  clmoe_tensor *final_state, const clmoe_kda_tc_config *cfg)
{
  const char *op = "clmoe_kda_forward_tc";
  kda_plan p;
  CLMOE_TRY(kda_plan_make(ctx, op, opts, in, &p));
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY_GOTO(st, clmoe__want_shape(o, op, "o", 1, 4, p.B, p.T, p.H, p.V), done);
  if (final_state)
    CLMOE_TRY_GOTO(st, clmoe__want_shape(final_state, op, "final_state", 0, 4, p.N, p.H, p.K, p.V), done);
  if (!kda_tc_covers(ctx, &p)) {
    st = clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: the tile path needs the bounded gate, K, V "
                      "multiples of 16 up to 128, work-groups of 128 and about 35 KB of local "
                      "memory (K = %lld, V = %lld, %s gate)", op, (long long)p.K, (long long)p.V,
                      p.unbounded ? "unbounded" : "bounded");
    goto done;
  }
  st = kda_tc_run(ctx, &p, in, o, final_state, cfg ? cfg->warps : 0, cfg ? cfg->lookahead : 0,
                  cfg ? cfg->saved : NULL);
done:
  kda_plan_release(ctx, &p);
  return st;
}
