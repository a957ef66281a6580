/* Causal depthwise short convolution with SiLU (KDA's ShortConv4): argument checks and the
 * launches of kernels_cl/kda/kda_conv.cl.
 *
 * The tap order is torch's conv1d with padding W - 1 cut to the sequence, as transformers'
 * Kimi Linear runs its conv1d (causal_conv1d_fn): y[t] = silu(sum_j w[c, j] x[t - W + 1 + j]),
 * the newest input on the last tap (checked against torch on random inputs to 4e-16 in
 * double). Its weight [3 H D, 1, W] is ours [C, W] for q, k and v in turn (channels
 * [0, HD), [HD, 2 HD), [2 HD, 3 HD)): a depthwise convolution splits by channel.
 *
 * dw is a sum over every token. It is made deterministic without atomics: the backward
 * splits the tokens into chunks whose size depends only on the shapes (B T, C, W), each
 * work-item sums its chunk's tokens in order into its own partial [chunk, C, W], and a
 * second pass sums the partials in chunk order. The bits therefore depend on the inputs
 * and shapes, never on the device's work-group size or scheduling. */
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include "clmoe/conv.h"

#define CONV_MAX_W 64          /* windows live in registers: W floats per work-item, 3 times */
#define FWD_TOKENS 32          /* tokens per forward work-item */
#define BWD_MIN_TOKENS 64      /* tokens per backward chunk, at least */
#define BWD_MAX_CHUNKS 4096    /* bounds the second pass's serial loop */
#define BWD_MAX_PARTIALS (1 << 24) /* floats of dw partials (64 MiB of scratch) */

/* The sequence layout shared by the forward and the backward. */
typedef struct conv_plan {
  int64_t B, T, C, W, N;
  int in_bf16;
  int vec; /* channels per work-item of the token-range kernels: 1, 2, 4, 8 or 16 */
  const clmoe_tensor *cu; /* NULL: B rows of T tokens */
} conv_plan;

/* w [C, W] f32 with 1 <= W <= CONV_MAX_W; sets *W. */
static clmoe_status conv_want_w(const clmoe_tensor *w, const char *op, int64_t C, int64_t *W)
{
  char desc[96];
  if (!w) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: w is NULL", op);
  if (w->ndim != 2 || w->shape[0] != C || w->shape[1] < 1 || w->dtype != CLMOE_F32 ||
      !clmoe_tensor_is_contiguous(w))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: w is %s, expected [%lld, W] f32 with W >= 1 (contiguous)",
                        op, clmoe_tensor_describe(w, desc, sizeof desc), (long long)C);
  if (w->shape[1] > CONV_MAX_W)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: width W = %lld: at most %d taps are supported",
                        op, (long long)w->shape[1], CONV_MAX_W);
  *W = w->shape[1];
  return CLMOE_OK;
}

/* x [B, T, C] f32 or bf16, w [C, W], cu_seqlens, state_in [N, W - 1, C] (may be NULL). */
static clmoe_status conv_plan_make(const char *op, const clmoe_tensor *x, const clmoe_tensor *w,
                                   const clmoe_tensor *cu, const clmoe_tensor *state_in, conv_plan *p)
{
  char desc[96];
  if (!x) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: x is NULL", op);
  if (x->ndim != 3 || (x->dtype != CLMOE_F32 && x->dtype != CLMOE_BF16) || !clmoe_tensor_is_contiguous(x))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: x is %s, expected [B, T, C] f32 or bf16 (contiguous)",
                        op, clmoe_tensor_describe(x, desc, sizeof desc));
  p->B = x->shape[0], p->T = x->shape[1], p->C = x->shape[2];
  p->in_bf16 = x->dtype == CLMOE_BF16;
  /* Token indices are int on the device, with room for a window past the end. */
  if (p->B * p->T > INT32_MAX - CONV_MAX_W || p->C > INT32_MAX / CONV_MAX_W)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: x %s: B T and C W must stay below 2^31", op,
                        clmoe_tensor_describe(x, desc, sizeof desc));
  CLMOE_TRY(conv_want_w(w, op, p->C, &p->W));
  p->cu = cu;
  CLMOE_TRY(clmoe__seq_bounds(op, cu, p->B, p->T, &p->N, NULL));
  if (state_in) CLMOE_TRY(clmoe__want_shape(state_in, op, "state_in", 0, 3, p->N, p->W - 1, p->C, 0));
  return CLMOE_OK;
}

/* Build options. p->vec: the device's preferred float vector width (1 on GPUs, the SIMD
 * width on CPUs), halved until it divides C. CONV_SYNC on CPUs: see kda_conv.cl. */
static void conv_build_options(clmoe_ctx *ctx, conv_plan *p, int out_bf16, char *buf, size_t len)
{
  const unsigned pref = ctx->caps.float_vector_width;
  p->vec = 16;
  while (p->vec > 1 && ((unsigned)p->vec > pref || p->C % p->vec != 0)) p->vec /= 2;
  snprintf(buf, len, "-DCONV_W=%d -DCONV_VEC=%d -DCONV_SYNC=%d -DSTORE_BF16=%d -DOUT_BF16=%d",
           (int)p->W, p->vec, ctx->caps.is_cpu, p->in_bf16, out_bf16);
}

/* 2-D launch: dimension 0 over `cols` (channels, or groups of vec channels) in groups no
 * wider than needed, dimension 1 over `rows`. */
static clmoe_status conv_launch(clmoe_ctx *ctx, cl_kernel k, int64_t cols, int64_t rows)
{
  size_t l0 = ctx->caps.wg_size;
  while (l0 > 1 && (int64_t)(l0 / 2) >= cols) l0 /= 2;
  size_t local[2] = {l0, 1}, global[2] = {(size_t)cols, (size_t)rows};
  return clmoe__launch(ctx, k, 2, global, local);
}

/* What a kernel needs to find sequences: the cu_seqlens buffer, or B rows of T. */
typedef struct conv_seq_args {
  cl_mem bounds;
  cl_ulong bo;
  cl_int has_cu, T, N, ntok, C;
} conv_seq_args;

static conv_seq_args conv_seq(const conv_plan *p)
{
  conv_seq_args a = {NULL, 0, p->cu != NULL, (cl_int)p->T, (cl_int)p->N, (cl_int)(p->B * p->T), (cl_int)p->C};
  if (p->cu) a.bounds = p->cu->buf, a.bo = (cl_ulong)p->cu->offset;
  return a;
}

clmoe_status clmoe_short_conv(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *w,
                              const clmoe_tensor *cu_seqlens, const clmoe_tensor *state_in,
                              clmoe_tensor *y, clmoe_tensor *state_out)
{
  const char *op = "clmoe_short_conv";
  conv_plan p;
  CLMOE_TRY(conv_plan_make(op, x, w, cu_seqlens, state_in, &p));
  CLMOE_TRY(clmoe__want_shape(y, op, "y", 1, 3, p.B, p.T, p.C, 0));
  if (state_out) CLMOE_TRY(clmoe__want_shape(state_out, op, "state_out", 0, 3, p.N, p.W - 1, p.C, 0));
  if (p.C == 0) return CLMOE_OK;
  char opts[96];
  conv_build_options(ctx, &p, y->dtype == CLMOE_BF16, opts, sizeof opts);
  conv_seq_args a = conv_seq(&p);
  cl_mem sin = state_in ? state_in->buf : NULL;
  cl_ulong so = state_in ? (cl_ulong)state_in->offset : 0, xo = (cl_ulong)x->offset;
  cl_ulong wo = (cl_ulong)w->offset, yo = (cl_ulong)y->offset;
  cl_int has_state = state_in != NULL && p.W > 1, per = FWD_TOKENS;
  cl_kernel k;
  if (a.ntok > 0) {
    CLMOE_TRY(clmoe__kernel(ctx, "kda_conv", opts, "conv_forward", &k));
    CLMOE_TRY(clmoe__args(k, 17, KA(x->buf), KA(xo), KA(w->buf), KA(wo), KA(a.bounds), KA(a.bo),
                          KA(a.has_cu), KA(a.T), KA(a.N), KA(a.ntok), KA(a.C), KA(per), KA(sin),
                          KA(so), KA(has_state), KA(y->buf), KA(yo)));
    CLMOE_TRY(conv_launch(ctx, k, p.C / p.vec, (a.ntok + per - 1) / per));
  }
  /* Launched after the forward (the queue is in order), so state_out may alias state_in. */
  if (state_out && p.W > 1 && p.N > 0) {
    cl_ulong oo = (cl_ulong)state_out->offset;
    CLMOE_TRY(clmoe__kernel(ctx, "kda_conv", opts, "conv_state_out", &k));
    CLMOE_TRY(clmoe__args(k, 12, KA(x->buf), KA(xo), KA(a.bounds), KA(a.bo), KA(a.has_cu), KA(a.T),
                          KA(a.C), KA(sin), KA(so), KA(has_state), KA(state_out->buf), KA(oo)));
    CLMOE_TRY(conv_launch(ctx, k, p.C, p.N));
  }
  return CLMOE_OK;
}

/* dw through partials [chunks, C, W] summed in chunk order (see the top of the file). */
static clmoe_status conv_backward_dx_dw(clmoe_ctx *ctx, const conv_plan *p, const char *opts,
                                        const clmoe_tensor *x, const clmoe_tensor *w,
                                        const clmoe_tensor *state_in, const clmoe_tensor *dy,
                                        clmoe_tensor *dx, clmoe_tensor *dw)
{
  conv_seq_args a = conv_seq(p);
  if (a.ntok == 0) return clmoe_tensor_fill(dw, 0.0);
  const int64_t cw = p->C * p->W;
  int64_t maxchunks = BWD_MAX_PARTIALS / cw;
  if (maxchunks > BWD_MAX_CHUNKS) maxchunks = BWD_MAX_CHUNKS;
  if (maxchunks < 1) maxchunks = 1;
  int64_t per64 = (a.ntok + maxchunks - 1) / maxchunks;
  if (per64 < BWD_MIN_TOKENS) per64 = BWD_MIN_TOKENS;
  cl_int per = (cl_int)per64, chunks = (cl_int)((a.ntok + per64 - 1) / per64), n = (cl_int)cw;
  /* One chunk: its partial is dw itself. */
  cl_mem part = dw->buf, scratch = NULL;
  cl_ulong po = (cl_ulong)dw->offset;
  size_t scratch_bytes = (size_t)chunks * (size_t)cw * sizeof(float);
  if (chunks > 1) {
    CLMOE_TRY(clmoe__scratch(ctx, scratch_bytes, &scratch));
    part = scratch, po = 0;
  }
  clmoe_status st;
  cl_kernel k;
  cl_mem sin = state_in ? state_in->buf : NULL;
  cl_ulong so = state_in ? (cl_ulong)state_in->offset : 0, xo = (cl_ulong)x->offset;
  cl_ulong wo = (cl_ulong)w->offset, dyo = (cl_ulong)dy->offset, dxo = (cl_ulong)dx->offset;
  cl_ulong dwo = (cl_ulong)dw->offset;
  cl_int has_state = state_in != NULL && p->W > 1;
  CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "kda_conv", opts, "conv_backward_chunks", &k), done);
  CLMOE_TRY_GOTO(st, clmoe__args(k, 21, KA(x->buf), KA(xo), KA(w->buf), KA(wo), KA(a.bounds), KA(a.bo),
                                 KA(a.has_cu), KA(a.T), KA(a.N), KA(a.ntok), KA(a.C), KA(per), KA(sin),
                                 KA(so), KA(has_state), KA(dy->buf), KA(dyo), KA(dx->buf), KA(dxo),
                                 KA(part), KA(po)), done);
  CLMOE_TRY_GOTO(st, conv_launch(ctx, k, p->C / p->vec, chunks), done);
  if (chunks > 1) {
    CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "kda_conv", opts, "conv_dw_final", &k), done);
    CLMOE_TRY_GOTO(st, clmoe__args(k, 5, KA(part), KA(chunks), KA(n), KA(dw->buf), KA(dwo)), done);
    CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, k, (size_t)cw), done);
  }
done:
  /* The queue is in order: the scratch can go back to the pool at once. */
  if (scratch) clmoe__scratch_release(ctx, scratch, scratch_bytes);
  return st;
}

clmoe_status clmoe_short_conv_backward(clmoe_ctx *ctx, const clmoe_tensor *x,
                                       const clmoe_tensor *w, const clmoe_tensor *cu_seqlens,
                                       const clmoe_tensor *state_in, const clmoe_tensor *dy,
                                       clmoe_tensor *dx, clmoe_tensor *dw, clmoe_tensor *dstate_in)
{
  const char *op = "clmoe_short_conv_backward";
  conv_plan p;
  CLMOE_TRY(conv_plan_make(op, x, w, cu_seqlens, state_in, &p));
  CLMOE_TRY(clmoe__want_shape(dy, op, "dy", 0, 3, p.B, p.T, p.C, 0));
  CLMOE_TRY(clmoe__want_shape(dx, op, "dx", 0, 3, p.B, p.T, p.C, 0));
  CLMOE_TRY(clmoe__want_shape(dw, op, "dw", 0, 2, p.C, p.W, 0, 0));
  if (dstate_in) CLMOE_TRY(clmoe__want_shape(dstate_in, op, "dstate_in", 0, 3, p.N, p.W - 1, p.C, 0));
  if (p.C == 0) return CLMOE_OK;
  char opts[96];
  conv_build_options(ctx, &p, 0, opts, sizeof opts);
  CLMOE_TRY(conv_backward_dx_dw(ctx, &p, opts, x, w, state_in, dy, dx, dw));
  if (dstate_in && p.W > 1 && p.N > 0) {
    conv_seq_args a = conv_seq(&p);
    cl_mem sin = state_in ? state_in->buf : NULL;
    cl_ulong so = state_in ? (cl_ulong)state_in->offset : 0, xo = (cl_ulong)x->offset;
    cl_ulong wo = (cl_ulong)w->offset, dyo = (cl_ulong)dy->offset, dso = (cl_ulong)dstate_in->offset;
    cl_int has_state = state_in != NULL;
    cl_kernel k;
    CLMOE_TRY(clmoe__kernel(ctx, "kda_conv", opts, "conv_dstate", &k));
    CLMOE_TRY(clmoe__args(k, 16, KA(x->buf), KA(xo), KA(w->buf), KA(wo), KA(a.bounds), KA(a.bo),
                          KA(a.has_cu), KA(a.T), KA(a.C), KA(sin), KA(so), KA(has_state),
                          KA(dy->buf), KA(dyo), KA(dstate_in->buf), KA(dso)));
    CLMOE_TRY(conv_launch(ctx, k, p.C, p.N));
  }
  return CLMOE_OK;
}

clmoe_status clmoe_short_conv_step(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *w,
                                   clmoe_tensor *state, clmoe_tensor *y)
{
  const char *op = "clmoe_short_conv_step";
  char desc[96];
  if (!x) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: x is NULL", op);
  if (x->ndim != 2 || (x->dtype != CLMOE_F32 && x->dtype != CLMOE_BF16) || !clmoe_tensor_is_contiguous(x))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: x is %s, expected [N, C] f32 or bf16 (contiguous)", op,
                        clmoe_tensor_describe(x, desc, sizeof desc));
  conv_plan p = {0};
  p.N = x->shape[0], p.C = x->shape[1], p.in_bf16 = x->dtype == CLMOE_BF16;
  if (p.N > INT32_MAX || p.C > INT32_MAX / CONV_MAX_W)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: x %s: N and C W must stay below 2^31", op,
                        clmoe_tensor_describe(x, desc, sizeof desc));
  CLMOE_TRY(conv_want_w(w, op, p.C, &p.W));
  CLMOE_TRY(clmoe__want_shape(state, op, "state", 0, 3, p.N, p.W - 1, p.C, 0));
  CLMOE_TRY(clmoe__want_shape(y, op, "y", 1, 2, p.N, p.C, 0, 0));
  if (p.N == 0 || p.C == 0) return CLMOE_OK;
  char opts[96];
  conv_build_options(ctx, &p, y->dtype == CLMOE_BF16, opts, sizeof opts);
  cl_ulong xo = (cl_ulong)x->offset, wo = (cl_ulong)w->offset, so = (cl_ulong)state->offset;
  cl_ulong yo = (cl_ulong)y->offset;
  cl_int C = (cl_int)p.C;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "kda_conv", opts, "conv_step", &k));
  CLMOE_TRY(clmoe__args(k, 9, KA(x->buf), KA(xo), KA(w->buf), KA(wo), KA(C), KA(state->buf), KA(so),
                        KA(y->buf), KA(yo)));
  return conv_launch(ctx, k, p.C, p.N);
}
