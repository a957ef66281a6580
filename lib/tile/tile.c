/* The tile implementation of a device (include/clmoe/tile.h; the contract in
 * kernels_cl/tile/tile.cl, one kernels_cl/tile/tile_<impl>.cl per implementation): the
 * table of the implementations' features, the probe that picks a device's row, and the
 * probes of what its kernels may use (opt-in local memory, warp-group builds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/tile.h"
#include "runtime/internal.h"
#include "tile/tile_internal.h"

/* ---- the implementations' features ------------------------------------------------------ */

/* One row per implementation and NVIDIA generation (stmatrix from sm_90, wgmma on sm_90a
 * alone: Blackwell has other matrix instructions). A row's options name its kernel file
 * (-DCLMOE_TILE_IMPL=<file>: lib/runtime/program.c puts that file in front of tile.cl),
 * and what the file needs to know of the device. A new implementation is one file in
 * kernels_cl/tile/ and one row here (plus its probe in clmoe__tile_features). */
static const clmoe_tile_features portable = {
    .impl = CLMOE_TILE_PORTABLE, .name = "portable",
    .options = "-DCLMOE_TILE_IMPL=tile_portable", .lanes = 32,
    .frag_m = 16, .frag_n = 8, .frag_k = 16,
    .summary = "16x8x16 bf16 products on 32 lanes in fp32 arithmetic; no lane shuffles, "
               "asynchronous copies or matrix loads"};
static const clmoe_tile_features nv_mma_sm80 = {
    .impl = CLMOE_TILE_NV_MMA, .name = "nv-mma",
    .options = "-DCLMOE_TILE_IMPL=tile_nv_mma", .lanes = 32,
    .frag_m = 16, .frag_n = 8, .frag_k = 16, .matrix_unit = 1, .lane_shuffle = 1,
    .async_copy = 1, .matrix_load = 1, .a_from_c = 1, .inline_ptx = 1,
    .summary = "16x8x16 bf16 products on a warp (mma.sync); lane shuffles, asynchronous "
               "copies, matrix loads"};
static const clmoe_tile_features nv_mma_sm90 = {
    .impl = CLMOE_TILE_NV_MMA, .name = "nv-mma",
    .options = "-DCLMOE_TILE_IMPL=tile_nv_mma -DTILE_NV_ARCH=90", .lanes = 32,
    .frag_m = 16, .frag_n = 8, .frag_k = 16, .matrix_unit = 1, .lane_shuffle = 1,
    .async_copy = 1, .matrix_load = 1, .a_from_c = 1, .matrix_store = 1, .warp_group = 1,
    .inline_ptx = 1,
    .summary = "16x8x16 bf16 products on a warp (mma.sync); lane shuffles, asynchronous "
               "copies, matrix loads and stores, warp-group products (wgmma)"};
static const clmoe_tile_features nv_mma_sm100 = {
    .impl = CLMOE_TILE_NV_MMA, .name = "nv-mma",
    .options = "-DCLMOE_TILE_IMPL=tile_nv_mma -DTILE_NV_ARCH=100", .lanes = 32,
    .frag_m = 16, .frag_n = 8, .frag_k = 16, .matrix_unit = 1, .lane_shuffle = 1,
    .async_copy = 1, .matrix_load = 1, .a_from_c = 1, .matrix_store = 1, .inline_ptx = 1,
    .summary = "16x8x16 bf16 products on a warp (mma.sync); lane shuffles, asynchronous "
               "copies, matrix loads and stores"};

const char *clmoe_tile_impl_name(clmoe_tile_impl impl)
{
  return impl == CLMOE_TILE_NV_MMA ? "nv-mma" : "portable";
}

/* ---- the probe -------------------------------------------------------------------------- */

/* Probe inputs: small integers (|a| <= 4, |b| <= 3), exact in bf16, whose 16-term dot
 * products (|d| <= 192) are exact in fp32 whatever the order of the sum. */
static float probe_a(int r, int k) { return (float)((r * 7 + k * 3 + 1) % 9 - 4); }
static float probe_b(int k, int n) { return (float)((k * 5 + n * 11 + 2) % 7 - 3); }

/* Builds "tile+probe" with the NVIDIA tiles (sm_80's row: what every generation has) and
 * checks D = A B (B row-major and transposed) exactly against the host. 1: the matrix unit
 * works; 0: anything failed. */
static int probe_nv_mma(clmoe_ctx *ctx)
{
  cl_kernel k = NULL;
  cl_mem buf[3] = {NULL, NULL, NULL};
  int ok = 0;
  cl_ushort a[16 * 16], b[16 * 8];
  float d[2 * 16 * 8];
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++) a[r * 16 + c] = clmoe_bf16_from_f32(probe_a(r, c));
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 8; c++) b[r * 8 + c] = clmoe_bf16_from_f32(probe_b(r, c));
  char opts[128];
  snprintf(opts, sizeof opts, "-DCLMOE_PROBE_TILE=1 %s", nv_mma_sm80.options);
  if (clmoe__kernel(ctx, "tile+probe", opts, "probe_tile", &k) != CLMOE_OK) goto done;
  cl_int err;
  const size_t sizes[3] = {sizeof a, sizeof b, sizeof d};
  const void *init[3] = {a, b, NULL};
  for (int i = 0; i < 3; i++) {
    cl_mem_flags fl = init[i] ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_WRITE_ONLY;
    buf[i] = clCreateBuffer(ctx->context, fl, sizes[i], (void *)init[i], &err);
    if (err != CL_SUCCESS) goto done;
    if (clSetKernelArg(k, (cl_uint)i, sizeof buf[i], &buf[i]) != CL_SUCCESS) goto done;
  }
  size_t global = 32, local = 32;
  if (clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &local, 0, NULL, NULL) != CL_SUCCESS)
    goto done;
  if (clEnqueueReadBuffer(ctx->queue, buf[2], CL_TRUE, 0, sizeof d, d, 0, NULL, NULL) != CL_SUCCESS)
    goto done;
  ok = 1;
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 8; c++) {
      float want = 0.0f;
      for (int q = 0; q < 16; q++) want += probe_a(r, q) * probe_b(q, c);
      if (d[r * 8 + c] != want || d[128 + r * 8 + c] != want) ok = 0;
    }
done:
  for (int i = 0; i < 3; i++)
    if (buf[i]) clReleaseMemObject(buf[i]);
  clmoe_clear_error(); /* a failed build just means "portable" */
  return ok;
}

const clmoe_tile_features *clmoe__tile_features(clmoe_ctx *ctx)
{
  if (!ctx->tile) {
    const clmoe_device_caps *c = &ctx->caps;
    int nv = c->vendor == CLMOE_VENDOR_NVIDIA && c->inline_ptx == 1 && c->nv_cc_major >= 8;
    if (nv && probe_nv_mma(ctx))
      ctx->tile = c->nv_cc_major == 8   ? &nv_mma_sm80
                  : c->nv_cc_major == 9 ? &nv_mma_sm90
                                        : &nv_mma_sm100;
    else
      ctx->tile = &portable;
  }
  return ctx->tile;
}

clmoe_tile_impl clmoe_ctx_tile_impl(clmoe_ctx *ctx) { return clmoe__tile_features(ctx)->impl; }

const char *clmoe_ctx_tile_summary(clmoe_ctx *ctx) { return clmoe__tile_features(ctx)->summary; }

const char *clmoe__tile_options(clmoe_ctx *ctx) { return clmoe__tile_features(ctx)->options; }

/* ---- what the kernels may use ----------------------------------------------------------- */

/* Runs probe_local (kernels_cl/runtime/probe.cl) with `bytes` of local memory: 1 when it built,
 * ran and every work-item read back what others wrote. */
static int probe_local_mem(clmoe_ctx *ctx, size_t bytes)
{
  char opts[64];
  snprintf(opts, sizeof opts, "-DCLMOE_PROBE_LMEM=%zu", bytes / 4);
  cl_kernel k = NULL;
  cl_mem out = NULL;
  cl_uint got[256];
  int ok = 0;
  cl_int err;
  if (clmoe__kernel(ctx, "probe", opts, "probe_local", &k) != CLMOE_OK) goto done;
  out = clCreateBuffer(ctx->context, CL_MEM_WRITE_ONLY, sizeof got, NULL, &err);
  if (err != CL_SUCCESS || clSetKernelArg(k, 0, sizeof out, &out) != CL_SUCCESS) goto done;
  size_t global = 256, local = 256;
  if (clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &local, 0, NULL, NULL) != CL_SUCCESS ||
      clEnqueueReadBuffer(ctx->queue, out, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL) != CL_SUCCESS)
    goto done;
  ok = 1;
  for (int i = 0; i < 256; i++)
    if (got[i] != 1) ok = 0;
done:
  if (out) clReleaseMemObject(out);
  clmoe_clear_error(); /* a failed probe just means "the reported size" */
  return ok;
}

size_t clmoe__local_mem_optin(clmoe_ctx *ctx)
{
  if (!ctx->local_optin) {
    /* sizes tried, largest first (the H200 grants 227 KB to CUDA programs) */
    static const size_t sizes[] = {128 * 1024, 96 * 1024};
    size_t n = (size_t)ctx->caps.local_mem_bytes;
    if (clmoe__tile_features(ctx)->warp_group)
      for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && n < sizes[i]; i++)
        if (probe_local_mem(ctx, sizes[i])) {
          n = sizes[i];
          break;
        }
    ctx->local_optin = n;
  }
  return ctx->local_optin;
}

clmoe_status clmoe__wgmma_kernel(clmoe_ctx *ctx, const char *family, const char *options, const char *name,
                                 const char *env, cl_kernel *kernel)
{
  clmoe_status st = clmoe__kernel(ctx, family, options, name, kernel);
  if (st != CLMOE_OK && ctx->wgmma_ok < 0 && !clmoe__knob_is_set(ctx, clmoe__knob_lookup(env))) {
    ctx->wgmma_ok = 0;
    clmoe_clear_error();
    return CLMOE_ERR_UNSUPPORTED;
  }
  if (st == CLMOE_OK && clmoe__tile_features(ctx)->inline_ptx) ctx->wgmma_ok = 1;
  return st;
}

int clmoe__wgmma_usable(const clmoe_ctx *ctx) { return ctx->wgmma_ok != 0; }
