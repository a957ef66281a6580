/* The helpers shared by the MoE files (lib/moe/moe_*.c): the grouped GEMM's tiles, the
 * program families' kernels, 2-D launches over rows, views and new tensors, argument checks
 * and per-phase timing. They call only the runtime. */
#include "moe_internal.h"
#include "tile/tile_internal.h"

#include <stdio.h>
#include <time.h>

void clmoe__moe_tiles(const clmoe_ctx *ctx, moe_tiles *t)
{
  /* GPUs: 32 x 64 tiles of 128 work-items (4 x 4 each), the usual shape for fp32 on SIMT.
   * CPUs (PoCL): 16 x 128 tiles of 64 work-items (4 x 8 each) were the fastest of the shapes
   * tried on the tiny and gpu presets' widths (docs/architecture.md, "Stable LatentMoE"). */
  static const moe_tiles gpu = {32, 64, 16, 4, 4}, cpu = {16, 128, 16, 4, 8};
  *t = ctx->caps.is_gpu ? gpu : cpu;
}

clmoe_status clmoe__moe_kernel(clmoe_ctx *ctx, enum moe_family family, const char *name,
                               cl_kernel *k)
{
  switch (family) {
  case MOE_ROUTE: return clmoe__kernel(ctx, "moe_common+moe_route", NULL, name, k);
  case MOE_DISPATCH: return clmoe__kernel(ctx, "moe_common+moe_dispatch", NULL, name, k);
  case MOE_GEMM:
  case MOE_GEMM_W16: {
    moe_tiles t;
    char opts[160];
    clmoe__moe_tiles(ctx, &t);
    snprintf(opts, sizeof opts, "-DMG_TM=%d -DMG_TN=%d -DMG_TK=%d -DMG_WM=%d -DMG_WN=%d -DMG_WBF16=%d", t.tm,
             t.tn, t.tk, t.wm, t.wn, family == MOE_GEMM_W16);
    return clmoe__kernel(ctx, "moe_common+moe_gemm", opts, name, k);
  }
  case MOE_GEMM_TILE: {
    moe_tiles t;
    char opts[320];
    clmoe__moe_tiles(ctx, &t);
    snprintf(opts, sizeof opts, "-DMT_BM=%d -DMT_BN=%d %s", t.tm, MOE_TILE_BN, clmoe__tile_options(ctx));
    return clmoe__kernel(ctx, "tile+moe_common+moe_gemm_tile", opts, name, k);
  }
  }
  return clmoe__error(CLMOE_ERR_INTERNAL, "clmoe__moe_kernel: unknown family %d", (int)family);
}

/* Work-groups to launch over `items` row tiles or experts: enough to keep every compute unit
 * busy, no more (each group walks several; a group's start costs more than a small tile). */
size_t clmoe__moe_group_count(const clmoe_ctx *ctx, int64_t items)
{
  const int64_t cap = (int64_t)(ctx->caps.compute_units ? ctx->caps.compute_units : 1) * MOE_GROUPS_PER_CU;
  return (size_t)(items < cap ? (items > 0 ? items : 1) : cap);
}

clmoe_status clmoe__moe_launch_rows(clmoe_ctx *ctx, cl_kernel k, int64_t cols, int64_t rows)
{
  /* Narrow rows share a work-group so that small widths do not leave work-items idle. */
  size_t wg = ctx->caps.wg_size, l0 = 1;
  while (l0 < (size_t)cols && l0 < wg) l0 <<= 1;
  size_t local[2] = {l0, wg / l0 ? wg / l0 : 1}, global[2] = {(size_t)cols, (size_t)rows};
  return clmoe__launch(ctx, k, 2, global, local);
}

clmoe_status clmoe__moe_new2(clmoe_ctx *ctx, clmoe_tensor *t, clmoe_dtype dt, int64_t a, int64_t b)
{
  const int64_t shape[2] = {a, b};
  return clmoe_tensor_create(ctx, t, dt, 2, shape);
}

clmoe_status clmoe__moe_new3(clmoe_ctx *ctx, clmoe_tensor *t, int64_t a, int64_t b, int64_t c)
{
  const int64_t shape[3] = {a, b, c};
  return clmoe_tensor_create(ctx, t, CLMOE_F32, 3, shape);
}

clmoe_status clmoe__moe_want_buf(const clmoe_tensor *t, const char *op, const char *name, int rank,
                                 int64_t a, int64_t b, int64_t c)
{
  char desc[96];
  CLMOE_TRY(clmoe__want_shape(t, op, name, 0, rank, a, b, c, 0));
  if (t->offset != 0)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s %s must not be a view at an offset", op, name,
                        clmoe_tensor_describe(t, desc, sizeof desc));
  return CLMOE_OK;
}

clmoe_status clmoe__moe_want_rows(const clmoe_tensor *x, const char *op, const char *name,
                                  int64_t d, int64_t *rows)
{
  char desc[96];
  if (!x) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  CLMOE_TRY(clmoe__want(x, CLMOE_F32, op, name));
  if (x->ndim < 1 || x->shape[x->ndim - 1] != d)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %s %s must have a last dimension of %lld", op, name,
                        clmoe_tensor_describe(x, desc, sizeof desc), (long long)d);
  *rows = clmoe_tensor_numel(x) / d;
  return CLMOE_OK;
}

double clmoe__moe_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

clmoe_status clmoe__moe_phase(clmoe_ctx *ctx, double *slot, double *t0)
{
  if (!slot) return CLMOE_OK;
  CLMOE_CL(clFinish(ctx->queue));
  clmoe__count_wait(ctx, CLMOE_WAIT_FINISH);
  const double now = clmoe__moe_now();
  *slot += now - *t0;
  *t0 = now;
  return CLMOE_OK;
}

clmoe_status clmoe__moe_want_stacks(const clmoe_moe_layer *L, clmoe_dtype dt, const char *op)
{
  const int64_t E = L->cfg.n_experts, l = clmoe__moe_width(&L->cfg), f = L->cfg.expert_ff;
  const clmoe_tensor *t[3] = {&L->w_gate, &L->w_upp, &L->w_dn};
  const char *names[3] = {"w_gate", "w_upp", "w_dn"};
  const int64_t rows[3] = {f, f, l}, cols[3] = {l, l, f};
  for (int i = 0; i < 3; i++) {
    CLMOE_TRY(clmoe__want(t[i], dt, op, names[i]));
    CLMOE_TRY(clmoe__want_shape(t[i], op, names[i], 1, 3, E, rows[i], cols[i], 0));
    if (t[i]->offset != 0)
      return clmoe__error(CLMOE_ERR_SHAPE, "%s: the %s expert weight %s must not be a view at an offset", op,
                          clmoe_dtype_name(dt), names[i]);
  }
  return CLMOE_OK;
}
