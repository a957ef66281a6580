/* The generation's own fused launches for few tokens: the KDA output gate of a decode step
 * and the greedy tokens of a step's logits (kernels_cl/generate/gen_step.cl), and Block
 * AttnRes with the sub-layer's RMSNorm (kernels_cl/generate/gen_attn_res.cl). The products are
 * lib/ops/ops_gemv.c's. */
#include "generate_internal.h"

#include <stdio.h>

#define GEMV_LANES 64 /* lanes of a row (gen_step.cl) */
clmoe_status clmoe__gen_kda_out_gate(clmoe_ctx *ctx, const clmoe_tensor *o, const clmoe_tensor *gs,
                                     const clmoe_tensor *gain, float eps, int64_t heads, clmoe_tensor *m)
{
  static const char op[] = "generate (KDA output gate)";
  const int64_t D = gain->shape[0], rows = clmoe_tensor_numel(o) / D;
  CLMOE_TRY(clmoe__want(o, CLMOE_F32, op, "o"));
  CLMOE_TRY(clmoe__want(gs, CLMOE_F32, op, "gate"));
  CLMOE_TRY(clmoe__want(m, CLMOE_F32, op, "output"));
  CLMOE_TRY(clmoe__want_shape(gain, op, "o_gain", 0, 1, D, 0, 0, 0));
  if (o->offset || gs->offset || m->offset || gain->offset || clmoe_tensor_numel(gs) != rows * D ||
      clmoe_tensor_numel(m) != rows * D || rows % heads)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: o, gate and output must be whole [N, H D] tensors", op);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "gen_step", NULL, "gen_kda_out_gate", &k));
  cl_int iD = (cl_int)D;
  cl_float feps = eps;
  CLMOE_TRY(clmoe__args(k, 6, KA(o->buf), KA(gs->buf), KA(gain->buf), KA(iD), KA(feps), KA(m->buf)));
  size_t local[2] = {GEMV_LANES, 1}, global[2] = {GEMV_LANES, (size_t)rows};
  return clmoe__launch(ctx, k, 2, global, local);
}

clmoe_status clmoe__gen_attn_res_norm(clmoe_ctx *ctx, const clmoe_tensor *src, const clmoe_tensor *w,
                                      const clmoe_tensor *gain, const clmoe_tensor *norm, float eps, clmoe_tensor *h,
                                      clmoe_tensor *hn)
{
  static const char op[] = "generate (AttnRes and RMSNorm)";
  const int64_t S = src->shape[0], T = src->shape[1], d = src->shape[2];
  if (src->ndim != 3 || src->dtype != CLMOE_F32 || !clmoe_tensor_is_contiguous(src) || S < 1 || S > 32)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: sources must be [S <= 32, T, d] f32", op);
  CLMOE_TRY(clmoe__want_shape(w, op, "w", 0, 1, d, 0, 0, 0));
  CLMOE_TRY(clmoe__want_shape(gain, op, "gain", 0, 1, d, 0, 0, 0));
  CLMOE_TRY(clmoe__want_shape(norm, op, "norm gain", 0, 1, d, 0, 0, 0));
  CLMOE_TRY(clmoe__want_shape(h, op, "h", 0, 2, T, d, 0, 0));
  CLMOE_TRY(clmoe__want_shape(hn, op, "hn", 0, 2, T, d, 0, 0));
  if (h->offset || hn->offset) return clmoe__error(CLMOE_ERR_SHAPE, "%s: h and hn must start their buffers", op);
  if (T == 0 || d == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "attn_res+gen_attn_res", NULL, "gen_attn_res_norm", &k));
  cl_ulong so = (cl_ulong)src->offset, uT = (cl_ulong)T, ud = (cl_ulong)d;
  cl_ulong wo = (cl_ulong)w->offset, go = (cl_ulong)gain->offset, no = (cl_ulong)norm->offset;
  cl_int iS = (cl_int)S;
  cl_float feps = eps;
  CLMOE_TRY(clmoe__args(k, 14, KA(src->buf), KA(so), KA(iS), KA(uT), KA(ud), KA(w->buf), KA(wo), KA(gain->buf),
                        KA(go), KA(norm->buf), KA(no), KA(feps), KA(h->buf), KA(hn->buf)));
  size_t local = 0;
  CLMOE_TRY(clmoe__row_local(ctx, k, d, &local));
  return clmoe__launch_groups(ctx, k, T, local);
}

clmoe_status clmoe_gen_attn_res_norm(clmoe_ctx *ctx, const clmoe_tensor *src, const clmoe_tensor *w,
                                     const clmoe_tensor *gain, const clmoe_tensor *norm, float eps, clmoe_tensor *h,
                                     clmoe_tensor *hn)
{
  if (!ctx || !src || !w || !gain || !norm || !h || !hn)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_attn_res_norm: every tensor is required");
  return clmoe__gen_attn_res_norm(ctx, src, w, gain, norm, eps, h, hn);
}

clmoe_status clmoe_gen_argmax(clmoe_ctx *ctx, const clmoe_tensor *logits, clmoe_tensor *ids)
{
  static const char op[] = "clmoe_gen_argmax";
  if (!ctx || !logits || !ids) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: ctx, logits and ids are required", op);
  CLMOE_TRY(clmoe__want(logits, CLMOE_F32, op, "logits"));
  CLMOE_TRY(clmoe__want(ids, CLMOE_I32, op, "ids"));
  const int64_t R = logits->ndim == 2 ? logits->shape[0] : -1, V = logits->ndim == 2 ? logits->shape[1] : 0;
  if (R < 1 || V < 1 || V > INT32_MAX || logits->offset || ids->offset || clmoe_tensor_numel(ids) != R)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: logits must be a whole [R, V] tensor and ids [R]", op);
  /* rows longer than a part (CLMOE_ARGMAX_PART logits, default 2048) are split: a
   * vocabulary of 163,840 is 80 work-groups a row, not one */
  const int64_t P = clmoe__knob_int(ctx, CLMOE_K_ARGMAX_PART), G = (V + P - 1) / P;
  const cl_uint uG = G > 1 ? (cl_uint)G : 0;
  clmoe_tensor pv = {0}, pi = {0}, pn = {0};
  const int64_t RG = R * G;
  clmoe_status st = CLMOE_OK;
  cl_kernel k;
  cl_ulong uV = (cl_ulong)V, uP = (cl_ulong)P;
  cl_mem pvb = logits->buf, pib = ids->buf, pnb = ids->buf; /* not read when the rows are not split */
  if (uG) { /* each part's best value, its index and its first NaN's */
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &pv, CLMOE_F32, 1, &RG), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &pi, CLMOE_I32, 1, &RG), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &pn, CLMOE_I32, 1, &RG), done);
    pvb = pv.buf, pib = pi.buf, pnb = pn.buf;
    CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "gen_step", NULL, "gen_argmax_part", &k), done);
    CLMOE_TRY_GOTO(st, clmoe__args(k, 7, KA(logits->buf), KA(uV), KA(uP), KA(uG), KA(pvb), KA(pib), KA(pnb)), done);
    size_t local[2] = {GEMV_LANES, 1}, global[2] = {GEMV_LANES, (size_t)RG};
    CLMOE_TRY_GOTO(st, clmoe__launch(ctx, k, 2, global, local), done);
  }
  CLMOE_TRY_GOTO(st, clmoe__kernel(ctx, "gen_step", NULL, "gen_argmax", &k), done);
  CLMOE_TRY_GOTO(st, clmoe__args(k, 7, KA(logits->buf), KA(uV), KA(uG), KA(pvb), KA(pib), KA(pnb), KA(ids->buf)),
                 done);
  size_t local[2] = {GEMV_LANES, 1}, global[2] = {GEMV_LANES, (size_t)R};
  st = clmoe__launch(ctx, k, 2, global, local);
done: /* the queue is in order: the parts go back to the pool once the launches are enqueued (destroying
       * a tensor never created is nothing) */
  clmoe_tensor_destroy(&pv);
  clmoe_tensor_destroy(&pi);
  clmoe_tensor_destroy(&pn);
  return st;
}
