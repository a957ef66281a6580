/* The matrix-unit fast path (issue 9): which implementation of the tile interface
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
#ifndef CLMOE_FASTPATH_H
#define CLMOE_FASTPATH_H

#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum clmoe_tile_impl {
  CLMOE_TILE_PORTABLE = 0, /* fp32 arithmetic on bf16-rounded operands */
  CLMOE_TILE_NV_MMA = 1    /* inline PTX mma.sync.m16n8k16 bf16 (NVIDIA sm_80+) */
} clmoe_tile_impl;

/* The tile implementation of ctx's device (probed on first call, then remembered). */
clmoe_tile_impl clmoe_ctx_tile_impl(clmoe_ctx *ctx);
/* Short name: "portable", "nv-mma". */
const char *clmoe_tile_impl_name(clmoe_tile_impl impl);
/* 1 when the tile kernels are used by default on ctx (CLMOE_FASTPATH, see above). */
int clmoe_ctx_fastpath(clmoe_ctx *ctx);
/* Overrides the environment for this context: -1 auto, 0 off, 1 on (tests, benchmarks);
 * -2 goes back to CLMOE_FASTPATH. */
void clmoe_ctx_set_fastpath(clmoe_ctx *ctx, int mode);
/* The setting as last made (-2: from CLMOE_FASTPATH), to restore it after a change. */
int clmoe_ctx_fastpath_setting(const clmoe_ctx *ctx);
/* For an op whose tile kernel rounds its operands to bf16: 1 when it should use the tile
 * kernel. Forced on (1): always; off (0): never; auto: only when the operands are bf16
 * already (bf16_operands != 0) and the tiles are a matrix unit, so that fp32 inputs keep
 * fp32 accuracy unless the fast path is asked for. */
int clmoe_ctx_fastpath_for(clmoe_ctx *ctx, int bf16_operands);
/* One line saying whether the fast path is on and why ("on (CLMOE_FASTPATH=1)",
 * "off (auto: no matrix unit found)", ...), for clmoe-info and benchmark headers. */
const char *clmoe_ctx_fastpath_reason(clmoe_ctx *ctx);

/* Internal: the build options selecting the tile implementation ("-DCLMOE_TILE_PTX=1" or
 * ""), to pass to clmoe__kernel for families that start with "tile+". */
const char *clmoe__tile_options(clmoe_ctx *ctx);

/* Internal: the local memory a kernel may declare statically: the reported size, or on
 * NVIDIA sm_90 with the PTX tiles 128 or 96 KB, the first for which a probe kernel with
 * that much built and ran correctly (the driver reports 48 KB but grants more; only the
 * warp-group kernels ask). */
size_t clmoe__local_mem_optin(clmoe_ctx *ctx);

/* Internal: builds (or finds) a warp-group (sm_90a) kernel. When the caller chose it by
 * itself (environment variable `env` unset) and the driver cannot build it, the context
 * remembers (no second try) and CLMOE_ERR_UNSUPPORTED comes back with the error cleared:
 * the caller falls back to its mma.sync kernel. */
clmoe_status clmoe__wgmma_kernel(clmoe_ctx *ctx, const char *family, const char *options, const char *name,
                                 const char *env, cl_kernel *kernel);
/* Internal: 0 once a warp-group build failed in this context (no more attempts), else 1. */
int clmoe__wgmma_usable(const clmoe_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
