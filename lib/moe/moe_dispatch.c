/* MoE dispatch: the (token, slot) pairs grouped by expert on the device
 * (kernels_cl/moe/moe_dispatch.cl), rows moved between token order and expert order, the
 * combine, and the elementwise SiTU-GLU of the padded and dense paths. */
#include "clmoe/paths.h"
#include "moe_internal.h"

#include <stdlib.h>
#include <string.h>

void clmoe_moe_dispatch_destroy(clmoe_moe_dispatch *d)
{
  if (!d) return;
  clmoe_tensor_destroy(&d->perm);
  clmoe_tensor_destroy(&d->offsets);
  clmoe_tensor_destroy(&d->pos);
  clmoe_tensor_destroy(&d->tiles);
  memset(d, 0, sizeof *d);
}

/* cap = the largest count: one blocking read of the offsets (the padded path only). */
static clmoe_status largest_count(const clmoe_tensor *offsets, int64_t E, int64_t *cap)
{
  cl_int *off = malloc((size_t)(E + 1) * sizeof *off);
  if (!off) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_moe_dispatch_create: out of host memory");
  clmoe_status st = clmoe_tensor_read(offsets, off, (size_t)(E + 1) * sizeof *off);
  *cap = 0;
  for (int64_t e = 0; st == CLMOE_OK && e < E; e++)
    if (off[e + 1] - off[e] > *cap) *cap = off[e + 1] - off[e];
  free(off);
  return st;
}

clmoe_status clmoe_moe_dispatch_create(clmoe_ctx *ctx, const clmoe_tensor *topk, int64_t n_experts,
                                       int padded, clmoe_moe_dispatch *d)
{
  static const char op[] = "clmoe_moe_dispatch_create";
  char desc[96];
  memset(d, 0, sizeof *d);
  CLMOE_TRY(clmoe__want(topk, CLMOE_I32, op, "topk"));
  if (topk->ndim != 2 || topk->offset != 0)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: topk %s must be [tokens, k] (not a view at an offset)", op,
                        clmoe_tensor_describe(topk, desc, sizeof desc));
  const int64_t m = topk->shape[0], k = topk->shape[1], E = n_experts, mk = m * k;
  if (E < 1 || E >= INT32_MAX || mk >= INT32_MAX)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %lld pairs over %lld experts: both must be below 2^31 "
                        "(and E >= 1)", op, (long long)mk, (long long)E);
  d->tokens = m, d->top_k = k, d->n_experts = E;
  clmoe_status st = CLMOE_OK;
  cl_mem keys = NULL;
  const size_t keys_bytes = (size_t)(mk ? mk : 1) * sizeof(cl_ulong);
  cl_kernel kk, ko, kp, kt;
  CLMOE_TRY_GOTO(st, clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_keys", &kk), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_offsets", &ko), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_positions", &kp), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_tiles", &kt), fail);
  const int64_t one = 1;
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &d->offsets, CLMOE_I32, E + 1, 1), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &d->perm, CLMOE_I32, mk ? mk : one, 1), fail);
  CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &d->pos, CLMOE_I32, mk ? mk : one, 1), fail);
  CLMOE_TRY_GOTO(st, clmoe__scratch(ctx, keys_bytes, &keys), fail);
  cl_int imk = (cl_int)mk, iE = (cl_int)E;
  if (mk) {
    CLMOE_TRY_GOTO(st, clmoe__args(kk, 4, KA(topk->buf), KA(imk), KA(iE), KA(keys)), fail);
    CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, kk, (size_t)mk), fail);
    CLMOE_TRY_GOTO(st, clmoe_sort_u64(ctx, keys, 0, (size_t)mk), fail);
  }
  CLMOE_TRY_GOTO(st, clmoe__args(ko, 4, KA(keys), KA(imk), KA(iE), KA(d->offsets.buf)), fail);
  CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, ko, (size_t)E + 1), fail);
  if (padded) {
    CLMOE_TRY_GOTO(st, largest_count(&d->offsets, E, &d->cap), fail);
    if (E * d->cap >= INT32_MAX) {
      st = clmoe__error(CLMOE_ERR_SHAPE, "%s: padded buffers of %lld experts x %lld rows exceed 2^31 rows",
                        op, (long long)E, (long long)d->cap);
      goto fail;
    }
    d->rows = E * d->cap;
  } else {
    d->rows = mk;
  }
  cl_int icap = (cl_int)d->cap;
  if (mk) {
    CLMOE_TRY_GOTO(st, clmoe__args(kp, 7, KA(keys), KA(imk), KA(iE), KA(d->offsets.buf), KA(icap),
                                   KA(d->perm.buf), KA(d->pos.buf)), fail);
    CLMOE_TRY_GOTO(st, clmoe__launch1d(ctx, kp, (size_t)mk), fail);
  }
  if (!padded && mk) {
    /* sum over experts of ceil(count / tm) <= (m k + E (tm - 1)) / tm, and <= m k */
    moe_tiles t;
    clmoe__moe_tiles(ctx, &t);
    int64_t bound = (mk + E * (t.tm - 1)) / t.tm;
    d->max_tiles = bound < mk ? bound : mk;
    d->tile_rows = t.tm;
    CLMOE_TRY_GOTO(st, clmoe__moe_new2(ctx, &d->tiles, CLMOE_I32, d->max_tiles, 2), fail);
    cl_int tm = t.tm, mt = (cl_int)d->max_tiles;
    size_t local;
    CLMOE_TRY_GOTO(st, clmoe__row_local(ctx, kt, E, &local), fail);
    CLMOE_TRY_GOTO(st, clmoe__args(kt, 6, KA(d->offsets.buf), KA(iE), KA(tm), KA(mt), KA(d->tiles.buf),
                                   KA_LOCAL((local + 1) * sizeof(cl_int))), fail);
    CLMOE_TRY_GOTO(st, clmoe__launch_groups(ctx, kt, 1, local), fail);
  }
  clmoe__scratch_release(ctx, keys, keys_bytes);
  return CLMOE_OK;
fail:
  clmoe__scratch_release(ctx, keys, keys_bytes);
  clmoe_moe_dispatch_destroy(d);
  return st;
}

/* rows of x [m, l] (or [R, l]) against the dispatch: l from x's last dimension. */
static clmoe_status want_rows(const clmoe_tensor *t, const char *op, const char *name, int64_t rows,
                              int64_t *l)
{
  char desc[96];
  CLMOE_TRY(clmoe__want(t, CLMOE_F32, op, name));
  *l = t->ndim ? t->shape[t->ndim - 1] : 1;
  if (t->ndim < 1 || clmoe_tensor_numel(t) != rows * *l || *l >= INT32_MAX || t->offset != 0)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s %s must have %lld rows (and not be a view at an offset)", op, name,
                        clmoe_tensor_describe(t, desc, sizeof desc), (long long)rows);
  return CLMOE_OK;
}

clmoe_status clmoe_moe_gather(clmoe_ctx *ctx, const clmoe_moe_dispatch *d, const clmoe_tensor *x,
                              clmoe_tensor *xs)
{
  static const char op[] = "clmoe_moe_gather";
  int64_t l, l2;
  CLMOE_TRY(want_rows(x, op, "x", d->tokens, &l));
  CLMOE_TRY(want_rows(xs, op, "xs", d->rows, &l2));
  if (l != l2) return clmoe__error(CLMOE_ERR_SHAPE, "%s: x and xs differ in width", op);
  const int64_t mk = d->tokens * d->top_k;
  if (mk == 0 || l == 0) return CLMOE_OK;
  if (d->cap) CLMOE_TRY(clmoe_tensor_fill(xs, 0.0)); /* padding rows must be zero */
  cl_kernel k;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_gather", &k));
  cl_int il = (cl_int)l, ik = (cl_int)d->top_k, imk = (cl_int)mk;
  CLMOE_TRY(clmoe__args(k, 6, KA(x->buf), KA(il), KA(ik), KA(imk), KA(d->pos.buf), KA(xs->buf)));
  return clmoe__moe_launch_rows(ctx, k, l, mk);
}

clmoe_status clmoe_moe_combine(clmoe_ctx *ctx, const clmoe_moe_dispatch *d, const clmoe_tensor *probs,
                               const clmoe_tensor *ys, clmoe_tensor *z)
{
  static const char op[] = "clmoe_moe_combine";
  int64_t l, l2;
  CLMOE_TRY(clmoe__moe_want_buf(probs, op, "probs", 2, d->tokens, d->top_k, 0));
  CLMOE_TRY(want_rows(ys, op, "ys", d->rows, &l));
  CLMOE_TRY(want_rows(z, op, "z", d->tokens, &l2));
  if (l != l2) return clmoe__error(CLMOE_ERR_SHAPE, "%s: ys and z differ in width", op);
  if (d->tokens == 0 || l == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_combine", &k));
  cl_int il = (cl_int)l, ik = (cl_int)d->top_k, im = (cl_int)d->tokens;
  CLMOE_TRY(clmoe__args(k, 7, KA(ys->buf), KA(il), KA(ik), KA(im), KA(d->pos.buf), KA(probs->buf),
                        KA(z->buf)));
  return clmoe__moe_launch_rows(ctx, k, l, d->tokens);
}

clmoe_status clmoe__moe_combine_backward(clmoe_ctx *ctx, const clmoe_moe_dispatch *d,
                                         const clmoe_tensor *probs, const clmoe_tensor *ys,
                                         const clmoe_tensor *dz, clmoe_tensor *dp,
                                         clmoe_tensor *dys)
{
  const int64_t mk = d->tokens * d->top_k, l = dz->shape[dz->ndim - 1];
  if (mk == 0) return CLMOE_OK;
  if (d->cap) CLMOE_TRY(clmoe_tensor_fill(dys, 0.0));
  cl_kernel kd, ks;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_dprob", &kd));
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_scatter_grad", &ks));
  cl_int il = (cl_int)l, ik = (cl_int)d->top_k, imk = (cl_int)mk;
  CLMOE_TRY(clmoe__args(kd, 7, KA(dz->buf), KA(ys->buf), KA(il), KA(ik), KA(imk), KA(d->pos.buf),
                        KA(dp->buf)));
  CLMOE_TRY(clmoe__launch1d(ctx, kd, (size_t)mk));
  CLMOE_TRY(clmoe__args(ks, 7, KA(dz->buf), KA(il), KA(ik), KA(imk), KA(d->pos.buf), KA(probs->buf),
                        KA(dys->buf)));
  return clmoe__moe_launch_rows(ctx, ks, l, mk);
}

clmoe_status clmoe__moe_gather_backward(clmoe_ctx *ctx, const clmoe_moe_dispatch *d,
                                        const clmoe_tensor *dxs, clmoe_tensor *dx)
{
  const int64_t l = dx->shape[dx->ndim - 1];
  if (d->tokens == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_gather_sum", &k));
  cl_int il = (cl_int)l, ik = (cl_int)d->top_k, im = (cl_int)d->tokens;
  CLMOE_TRY(clmoe__args(k, 6, KA(dxs->buf), KA(il), KA(ik), KA(im), KA(d->pos.buf), KA(dx->buf)));
  return clmoe__moe_launch_rows(ctx, k, l, d->tokens);
}

clmoe_status clmoe__moe_situ_forward(clmoe_ctx *ctx, clmoe_glu glu, const clmoe_tensor *u,
                                     const clmoe_tensor *w, clmoe_tensor *act)
{
  cl_ulong n = (cl_ulong)clmoe_tensor_numel(act);
  if (n == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_situ_fwd", &k));
  cl_int g = (cl_int)glu;
  CLMOE_TRY(clmoe__args(k, 5, KA(u->buf), KA(w->buf), KA(n), KA(act->buf), KA(g)));
  return clmoe__launch1d(ctx, k, (size_t)n);
}

clmoe_status clmoe__moe_situ_backward(clmoe_ctx *ctx, clmoe_glu glu, const clmoe_tensor *dact,
                                      const clmoe_tensor *u, const clmoe_tensor *w,
                                      clmoe_tensor *du, clmoe_tensor *dw)
{
  cl_ulong n = (cl_ulong)clmoe_tensor_numel(dact);
  if (n == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__moe_kernel(ctx, MOE_DISPATCH, "moe_situ_bwd", &k));
  cl_int g = (cl_int)glu;
  CLMOE_TRY(clmoe__args(k, 7, KA(dact->buf), KA(u->buf), KA(w->buf), KA(n), KA(du->buf), KA(dw->buf),
                        KA(g)));
  return clmoe__launch1d(ctx, k, (size_t)n);
}
