/* Internal to libclmoe: what the hosts of the tile kernels (gemm, kda, mla) need from the
 * tile subsystem beyond include/clmoe/tile.h: the feature record of the device's tile
 * implementation, its build options, and the local-memory and warp-group probes. */
#ifndef CLMOE_TILE_INTERNAL_H
#define CLMOE_TILE_INTERNAL_H

#include <stddef.h>

#include "clmoe/runtime.h"
#include "clmoe/status.h"
#include "clmoe/tile.h"

/* What a tile implementation (kernels_cl/tile/tile_<impl>.cl) offers the kernels built on it: one
 * row of the table in lib/tile/tile.c, chosen for a device by the probe. Hosts choose
 * kernels and blocks by these features, not by the implementation's name. */
typedef struct clmoe_tile_features {
  clmoe_tile_impl impl;
  const char *name;           /* clmoe_tile_impl_name(impl) */
  const char *options;        /* build options selecting it: -DCLMOE_TILE_IMPL=<its file>
                               * (lib/runtime/program.c) and what the file needs */
  int lanes;                  /* work-items that compute one product together: 32 */
  int frag_m, frag_n, frag_k; /* one product D[m x n] += A[m x k] B[k x n]: 16, 8, 16 */
  int matrix_unit;            /* the products run on a matrix unit (else fp32 arithmetic) */
  int lane_shuffle;           /* lanes read each other's registers (tile_shfl_*) */
  int async_copy;             /* global-to-local copies that bypass registers (tile_cp16) */
  int matrix_load;            /* fragments loaded as whole 8 x 8 matrices (tile_ldsm_x4) */
  int matrix_store;           /* ... and stored likewise (tile_stsm_x4) */
  int a_from_c;               /* accumulators become A operands in registers (tile_a_from_c):
                               * the kernels need no per-warp scratch */
  int warp_group;             /* products over 4 warps, asynchronous (tile_wg_*: wgmma);
                               * a driver may still fail to build them (clmoe__wgmma_usable) */
  int inline_ptx;             /* written in NVIDIA inline PTX: a program with warp-group
                               * code is rebuilt for sm_90a (CLMOE_PTX_SM90A_OPTION) */
  const char *summary;        /* one line for clmoe-info (clmoe_ctx_tile_summary) */
} clmoe_tile_features;

/* The record of ctx's tile implementation (probed on first call, then remembered). */
const clmoe_tile_features *clmoe__tile_features(clmoe_ctx *ctx);

/* The build options selecting the tile implementation (the record's options:
 * -DCLMOE_TILE_IMPL=<file> ...), to pass to clmoe__kernel for families that start with
 * "tile+". */
const char *clmoe__tile_options(clmoe_ctx *ctx);

/* The local memory a kernel may declare statically: the reported size, or on
 * NVIDIA sm_90 with the PTX tiles 128 or 96 KB, the first for which a probe kernel with
 * that much built and ran correctly (the driver reports 48 KB but grants more; only the
 * warp-group kernels ask). */
size_t clmoe__local_mem_optin(clmoe_ctx *ctx);

/* Builds (or finds) a warp-group (sm_90a) kernel. When the caller chose it by
 * itself (the knob named `env` not set on the context) and the driver cannot build it, the context
 * remembers (no second try) and CLMOE_ERR_UNSUPPORTED comes back with the error cleared:
 * the caller falls back to its mma.sync kernel. */
clmoe_status clmoe__wgmma_kernel(clmoe_ctx *ctx, const char *family, const char *options, const char *name,
                                 const char *env, cl_kernel *kernel);
/* 1 when inference passes of many tokens on bf16 weights (generation's prefill passes and
 * steps past the GEMV, clmoe_moe_forward_infer on bf16 stacks) run their products on the tile
 * GEMM with the bf16 matrices as they are (activations rounded to bf16 as they are staged,
 * fp32 sums): CLMOE_INFER_TILE 1, or auto on a device whose tile implementation is not the
 * portable one; 0: fp32 weights times fp32 rows (fp32 copies, or kernels that widen). */
int clmoe__infer_tile(clmoe_ctx *ctx);
/* 0 once a warp-group build failed in this context (no more attempts), else 1. */
int clmoe__wgmma_usable(const clmoe_ctx *ctx);

#endif
