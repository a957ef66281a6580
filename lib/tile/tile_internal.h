/* Internal to libclmoe: what the hosts of the tile kernels (gemm, kda, mla) need from the
 * tile subsystem beyond include/clmoe/tile.h. */
#ifndef CLMOE_TILE_INTERNAL_H
#define CLMOE_TILE_INTERNAL_H

#include <stddef.h>

#include "clmoe/tile.h"
#include "runtime/internal.h"

/* The build options selecting the tile implementation ("-DCLMOE_TILE_PTX=1" or
 * ""), to pass to clmoe__kernel for families that start with "tile+". */
const char *clmoe__tile_options(clmoe_ctx *ctx);

/* The local memory a kernel may declare statically: the reported size, or on
 * NVIDIA sm_90 with the PTX tiles 128 or 96 KB, the first for which a probe kernel with
 * that much built and ran correctly (the driver reports 48 KB but grants more; only the
 * warp-group kernels ask). */
size_t clmoe__local_mem_optin(clmoe_ctx *ctx);

/* Builds (or finds) a warp-group (sm_90a) kernel. When the caller chose it by
 * itself (environment variable `env` unset) and the driver cannot build it, the context
 * remembers (no second try) and CLMOE_ERR_UNSUPPORTED comes back with the error cleared:
 * the caller falls back to its mma.sync kernel. */
clmoe_status clmoe__wgmma_kernel(clmoe_ctx *ctx, const char *family, const char *options, const char *name,
                                 const char *env, cl_kernel *kernel);
/* 0 once a warp-group build failed in this context (no more attempts), else 1. */
int clmoe__wgmma_usable(const clmoe_ctx *ctx);

#endif
