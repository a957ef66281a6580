/* The matrix-unit tile interface and the fast path: which implementation of the interface
 * (kernels_cl/tile/tile.cl) a device gets, and whether the tile kernels (GEMM, KDA, MLA) are
 * used by default.
 *
 *   tile implementation  CLMOE_TILE_NV_MMA on NVIDIA sm_80+ when a test kernel with inline
 *                        PTX mma.sync (bf16) builds and computes a known product exactly;
 *                        CLMOE_TILE_PORTABLE everywhere else (ordinary arithmetic).
 *   fast path            CLMOE_FASTPATH=1: the tile kernels are used (on any device, with
 *                        the portable tile implementation where there is no matrix unit:
 *                        how CI checks their logic); CLMOE_FASTPATH=0: never (the portable
 *                        kernels, the reference); unset or "auto": used when the tile
 *                        implementation is a matrix unit and the operands are bf16 already
 *                        (clmoe_ctx_fastpath_for): fp32 inputs (the model trains in fp32)
 *                        keep fp32 products unless CLMOE_FASTPATH=1 asks for bf16 tiles.
 * Each op still checks its own shape limits and falls back to its portable kernel when
 * the tile kernel does not cover a call. */
#ifndef CLMOE_TILE_H
#define CLMOE_TILE_H

#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum clmoe_tile_impl {
  CLMOE_TILE_PORTABLE = 0, /* fp32 arithmetic on bf16-rounded operands */
  CLMOE_TILE_NV_MMA = 1    /* inline PTX mma.sync.m16n8k16 bf16 (NVIDIA sm_80+) */
} clmoe_tile_impl;

/* The tile implementation of ctx's device (probed on first call, then remembered). */
CLMOE_API clmoe_tile_impl clmoe_ctx_tile_impl(clmoe_ctx *ctx);
/* Short name: "portable", "nv-mma". */
CLMOE_API const char *clmoe_tile_impl_name(clmoe_tile_impl impl);
/* One line naming what ctx's tile implementation offers its kernels (the product's shape,
 * lane shuffles, asynchronous copies, matrix loads and stores, warp-group products), for
 * clmoe-info and benchmark headers. */
CLMOE_API const char *clmoe_ctx_tile_summary(clmoe_ctx *ctx);
/* 1 when the tile kernels are used by default on ctx (CLMOE_FASTPATH, see above). */
CLMOE_API int clmoe_ctx_fastpath(clmoe_ctx *ctx);
/* Overrides the environment for this context: -1 auto, 0 off, 1 on (tests, benchmarks);
 * -2 goes back to CLMOE_FASTPATH. */
CLMOE_API void clmoe_ctx_set_fastpath(clmoe_ctx *ctx, int mode);
/* The setting as last made (-2: from CLMOE_FASTPATH), to restore it after a change. */
CLMOE_API int clmoe_ctx_fastpath_setting(const clmoe_ctx *ctx);
/* For an op whose tile kernel rounds its operands to bf16: 1 when it should use the tile
 * kernel. Forced on (1): always; off (0): never; auto: only when the operands are bf16
 * already (bf16_operands != 0) and the tiles are a matrix unit, so that fp32 inputs keep
 * fp32 accuracy unless the fast path is asked for. */
CLMOE_API int clmoe_ctx_fastpath_for(clmoe_ctx *ctx, int bf16_operands);
/* One line saying whether the fast path is on and why ("on (CLMOE_FASTPATH=1)",
 * "off (auto: no matrix unit found)", ...), for clmoe-info and benchmark headers. */
CLMOE_API const char *clmoe_ctx_fastpath_reason(clmoe_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
