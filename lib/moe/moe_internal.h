/* Declarations shared by the MoE files (lib/moe/moe_*.c); not installed. The helpers of
 * moe_util.c are at the bottom of the subsystem: every other MoE file may call them, they
 * call only the runtime. */
#ifndef CLMOE_MOE_INTERNAL_H
#define CLMOE_MOE_INTERNAL_H

#include "runtime/internal.h"
#include "clmoe/gemm.h"
#include "clmoe/moe.h"
#include "clmoe/ops.h"

/* Grouped GEMM tiles (kernels_cl/moe/moe_gemm.cl, passed as -D options so both sides agree):
 * tm x tn outputs per work-group of (tn / wn) x (tm / wm) work-items, the inner dimension tk
 * at a time. Chosen per device type (moe_util.c; measured on PoCL, see docs). */
typedef struct moe_tiles {
  int tm, tn, tk, wm, wn;
} moe_tiles;
void clmoe__moe_tiles(const clmoe_ctx *ctx, moe_tiles *t);
/* Work-groups per compute unit of the grouped GEMM (each walks several tiles or experts). */
#define MOE_GROUPS_PER_CU 8
/* Columns per work-group of the bf16 tile kernels (rows: the table's tile height tm). */
#define MOE_TILE_BN 64

/* MOE_GEMM_W16: the grouped kernels (moe_gemm.cl) with the forward's expert weights read as
 * bf16 (-DMG_WBF16=1). MOE_GEMM_TILE: the bf16 kernels on the tile interface
 * (kernels_cl/moe/moe_gemm_tile.cl), built with the device's tile implementation and the
 * table's tile height. */
enum moe_family { MOE_ROUTE, MOE_DISPATCH, MOE_GEMM, MOE_GEMM_W16, MOE_GEMM_TILE };

/* Kernel `name` of one of the MoE program families. */
clmoe_status clmoe__moe_kernel(clmoe_ctx *ctx, enum moe_family family, const char *name,
                               cl_kernel *k);
/* 2-D launch: dimension 0 over `cols` columns, dimension 1 over `rows` rows. */
clmoe_status clmoe__moe_launch_rows(clmoe_ctx *ctx, cl_kernel k, int64_t cols, int64_t rows);
/* A new f32 (or i32) tensor of two (or three) dimensions. */
clmoe_status clmoe__moe_new2(clmoe_ctx *ctx, clmoe_tensor *t, clmoe_dtype dt, int64_t a, int64_t b);
clmoe_status clmoe__moe_new3(clmoe_ctx *ctx, clmoe_tensor *t, int64_t a, int64_t b, int64_t c);
/* t must be a contiguous f32 tensor of exactly the given shape (rank 1..3) that starts at
 * its buffer's start: the MoE kernels take buffers whole, without an offset argument.
 * (Tensors that only reach clmoe_gemm and the ops, which honour offsets, are checked with
 * the runtime's clmoe__want_shape.) */
clmoe_status clmoe__moe_want_buf(const clmoe_tensor *t, const char *op, const char *name, int rank,
                                 int64_t a, int64_t b, int64_t c);
/* The routed expert stacks of L are dt, [E, f, l], [E, f, l], [E, l, f], each a whole
 * buffer from its start (the grouped kernels take them so). */
clmoe_status clmoe__moe_want_stacks(const clmoe_moe_layer *L, clmoe_dtype dt, const char *op);
/* x: contiguous f32 with last dimension d; *rows = numel / d. */
clmoe_status clmoe__moe_want_rows(const clmoe_tensor *x, const char *op, const char *name,
                                  int64_t d, int64_t *rows);

/* Per-phase timing (clmoe_moe_layer.timing): waits for the device when slot is not NULL. */
double clmoe__moe_now(void);
clmoe_status clmoe__moe_phase(clmoe_ctx *ctx, double *slot, double *t0);

/* The width the routed experts work at: the latent width, or d without a latent projection. */
static inline int64_t clmoe__moe_width(const clmoe_moe_config *c) { return c->latent > 0 ? c->latent : c->d; }

/* clmoe_moe_decode_forward on RMSNorm(x) gain [d] (eps) where gain is not NULL: x is then
 * the residual stream itself, and the norm is applied in the layer's first launch
 * (moe_decode.c; a decode step's pre-norm with no launch of its own). */
clmoe_status clmoe__moe_decode_forward_norm(clmoe_ctx *ctx, const clmoe_moe_layer *L, const clmoe_tensor *x,
                                            const clmoe_tensor *gain, float eps, int accumulate, clmoe_tensor *y,
                                            clmoe_tensor *topk);

/* Fills the defaults of *in into *out and checks every field (moe.c); op names the caller. */
clmoe_status clmoe__moe_config_check(const char *op, const clmoe_moe_config *in, clmoe_moe_config *out);

/* The constructors with the weight matrices (every tensor but the latent norm's gain and
 * the bias) created as `matrices`, CLMOE_F32 or CLMOE_BF16, for an inference model
 * (lib/model/model.c): clmoe_situ_ffn_create, clmoe_moe_layer_create (moe.c) and
 * clmoe_moe_ep_layer_create (moe_ep.c). */
clmoe_status clmoe__situ_ffn_create_dtype(clmoe_ctx *ctx, clmoe_situ_ffn *f, int64_t d, int64_t ff,
                                         clmoe_dtype matrices);
clmoe_status clmoe__moe_layer_create_dtype(clmoe_ctx *ctx, clmoe_moe_layer *L, const clmoe_moe_config *cfg,
                                          clmoe_dtype matrices);
struct clmoe_expert_map;
struct clmoe_moe_ep_layer;
clmoe_status clmoe__moe_ep_layer_create_dtype(clmoe_ctx *ctx, const clmoe_moe_config *cfg,
                                             const struct clmoe_expert_map *map, int rank, clmoe_dtype matrices,
                                             struct clmoe_moe_ep_layer *ep);

/* Elementwise gated unit `glu` (moe_dispatch.c; the padded and dense paths). */
clmoe_status clmoe__moe_situ_forward(clmoe_ctx *ctx, clmoe_glu glu, const clmoe_tensor *u,
                                     const clmoe_tensor *w, clmoe_tensor *act);
clmoe_status clmoe__moe_situ_backward(clmoe_ctx *ctx, clmoe_glu glu, const clmoe_tensor *dact,
                                      const clmoe_tensor *u, const clmoe_tensor *w,
                                      clmoe_tensor *du, clmoe_tensor *dw);

/* Combine backward (moe_dispatch.c): dp [m k] = dz . ys[pos]; dys [R, l] = p dz (padded rows 0). */
clmoe_status clmoe__moe_combine_backward(clmoe_ctx *ctx, const clmoe_moe_dispatch *disp,
                                         const clmoe_tensor *probs, const clmoe_tensor *ys,
                                         const clmoe_tensor *dz, clmoe_tensor *dp,
                                         clmoe_tensor *dys);
/* Gather backward: dx [m, l] = sum over slots of dxs[pos]. */
clmoe_status clmoe__moe_gather_backward(clmoe_ctx *ctx, const clmoe_moe_dispatch *disp,
                                        const clmoe_tensor *dxs, clmoe_tensor *dx);
/* Router backward (moe_route.c): dlogit [m, E] from dp [m k]; then dW_r and dx += . */
clmoe_status clmoe__moe_router_backward(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                        const clmoe_tensor *x2, const clmoe_moe_saved *s,
                                        const clmoe_tensor *dp, clmoe_tensor *dw_router,
                                        clmoe_tensor *dx2);

/* Experts (moe_experts.c), on the dispatch's expert buffers of R rows.
 * Forward: act (and, when u and w are not NULL, the products u, w) [R, f], ys [R, l]. */
clmoe_status clmoe__moe_experts_forward(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                        const clmoe_moe_dispatch *disp, const clmoe_tensor *xs,
                                        clmoe_tensor *u, clmoe_tensor *w, clmoe_tensor *act,
                                        clmoe_tensor *ys);
/* The experts of clmoe_moe_forward_infer, on a grouped dispatch: act [R, f] and ys [R, l]
 * by the grouped kernels, which read bf16 stacks as they are (MOE_GEMM_W16: no fp32 copy of
 * the weights) with fp32 rows and sums, or fp32 stacks; the same bits either way for the
 * same weight values. tile (bf16 stacks only): the tile kernels of a bf16 training step
 * instead (clmoe__moe_experts_forward_bf16: rows rounded to bf16 as they are staged). */
clmoe_status clmoe__moe_experts_forward_infer(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                              const clmoe_moe_dispatch *disp, const clmoe_tensor *xs,
                                              clmoe_tensor *act, clmoe_tensor *ys, int tile);
/* Backward from dys [R, l]: dW_gate, dW_upp, dW_dn (overwritten) and dxs [R, l]. */
clmoe_status clmoe__moe_experts_backward(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                         const clmoe_moe_saved *s, const clmoe_tensor *dys,
                                         clmoe_moe_grads *g, clmoe_tensor *dxs);

/* The grouped experts of a bf16 training step (moe_experts_bf16.c): the layer's w_gate,
 * w_upp, w_dn are bf16 copies; the activations, products and gradients fp32 as above, every
 * product on the tile interface with bf16 operands and fp32 accumulation. du, dw: [R, f]
 * scratch of the backward. */
clmoe_status clmoe__moe_experts_forward_bf16(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                             const clmoe_moe_dispatch *disp, const clmoe_tensor *xs,
                                             clmoe_tensor *u, clmoe_tensor *w, clmoe_tensor *act,
                                             clmoe_tensor *ys);
clmoe_status clmoe__moe_experts_backward_bf16(clmoe_ctx *ctx, const clmoe_moe_layer *L,
                                              const clmoe_moe_saved *s, const clmoe_tensor *dys,
                                              clmoe_moe_grads *g, clmoe_tensor *dxs, clmoe_tensor *du,
                                              clmoe_tensor *dw);
/* Work-groups to launch over `items` row tiles or experts: enough to keep every compute unit
 * busy, no more. */
size_t clmoe__moe_group_count(const clmoe_ctx *ctx, int64_t items);

/* The expert-parallel layer is built and belongs to this rank of dist (moe_ep.c). */
struct clmoe_dist;
struct clmoe_moe_ep_layer;
clmoe_status clmoe__moe_ep_check_layer(const char *op, struct clmoe_dist *dist,
                                       const struct clmoe_moe_ep_layer *ep);

/* clmoe_moe_ep_forward (moe_ep.c) with `tile`: bf16 expert stacks (a bf16 training step's
 * copies) run on the tile path of moe_experts_bf16.c in inference mode too, as in train
 * mode, instead of widened to fp32 (an inference model's bf16 stacks). */
struct clmoe_moe_ep_saved;
clmoe_status clmoe__moe_ep_forward(clmoe_ctx *ctx, struct clmoe_dist *dist, const struct clmoe_moe_ep_layer *ep,
                                   const clmoe_tensor *x, clmoe_tensor *y, struct clmoe_moe_ep_saved *saved,
                                   int tile);

#endif
