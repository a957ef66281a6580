/* Fast-path selection (see include/clmoe/tile.h): the probe that decides whether a device's tiles are
 * its matrix unit, and the CLMOE_FASTPATH switch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tile/tile_internal.h"
#include "runtime/internal.h"

const char *clmoe_tile_impl_name(clmoe_tile_impl impl)
{
  return impl == CLMOE_TILE_NV_MMA ? "nv-mma" : "portable";
}

/* Probe inputs: small integers (|a| <= 4, |b| <= 3), exact in bf16, whose 16-term dot
 * products (|d| <= 192) are exact in fp32 whatever the order of the sum. */
static float probe_a(int r, int k) { return (float)((r * 7 + k * 3 + 1) % 9 - 4); }
static float probe_b(int k, int n) { return (float)((k * 5 + n * 11 + 2) % 7 - 3); }

/* Builds "tile+probe" with the PTX tiles and checks D = A B (B row-major and transposed)
 * exactly against the host. 1: the matrix unit works; 0: anything failed. */
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
  if (clmoe__kernel(ctx, "tile+probe", "-DCLMOE_PROBE_TILE=1 -DCLMOE_TILE_PTX=1", "probe_tile", &k) !=
      CLMOE_OK)
    goto done;
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

clmoe_tile_impl clmoe_ctx_tile_impl(clmoe_ctx *ctx)
{
  if (ctx->tile_impl < 0) {
    const clmoe_device_caps *c = &ctx->caps;
    int nv = c->vendor == CLMOE_VENDOR_NVIDIA && c->inline_ptx == 1 && c->nv_cc_major >= 8;
    ctx->tile_impl = nv && probe_nv_mma(ctx) ? CLMOE_TILE_NV_MMA : CLMOE_TILE_PORTABLE;
  }
  return (clmoe_tile_impl)ctx->tile_impl;
}

void clmoe_ctx_set_fastpath(clmoe_ctx *ctx, int mode)
{
  ctx->fastpath_mode = mode < -1 ? -2 : mode < 0 ? -1 : mode ? 1 : 0;
}

int clmoe_ctx_fastpath_setting(const clmoe_ctx *ctx) { return ctx->fastpath_mode; }

/* The mode in force: the caller's, else CLMOE_FASTPATH's, else -1 (auto). */
static int fastpath_mode(const clmoe_ctx *ctx)
{
  if (ctx->fastpath_mode != -2) return ctx->fastpath_mode;
  const char *e = getenv("CLMOE_FASTPATH");
  return (e && !strcmp(e, "1")) ? 1 : (e && !strcmp(e, "0")) ? 0 : -1;
}

int clmoe_ctx_fastpath(clmoe_ctx *ctx)
{
  int mode = fastpath_mode(ctx);
  if (mode >= 0) return mode;
  return clmoe_ctx_tile_impl(ctx) != CLMOE_TILE_PORTABLE;
}

int clmoe_ctx_fastpath_for(clmoe_ctx *ctx, int bf16_operands)
{
  int mode = fastpath_mode(ctx);
  if (mode >= 0) return mode;
  return bf16_operands && clmoe_ctx_tile_impl(ctx) != CLMOE_TILE_PORTABLE;
}

const char *clmoe_ctx_fastpath_reason(clmoe_ctx *ctx)
{
  int mode = fastpath_mode(ctx);
  if (mode >= 0) {
    if (ctx->fastpath_mode != -2) return mode ? "on (set by the program)" : "off (set by the program)";
    return mode ? "on (CLMOE_FASTPATH=1)" : "off (CLMOE_FASTPATH=0)";
  }
  return clmoe_ctx_tile_impl(ctx) != CLMOE_TILE_PORTABLE ? "on (auto: the device has a matrix unit)"
                                                         : "off (auto: no matrix unit found)";
}

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
    if (clmoe_ctx_tile_impl(ctx) == CLMOE_TILE_NV_MMA && ctx->caps.nv_cc_major == 9)
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
  if (st != CLMOE_OK && ctx->wgmma_ok < 0 && !getenv(env)) {
    ctx->wgmma_ok = 0;
    clmoe_clear_error();
    return CLMOE_ERR_UNSUPPORTED;
  }
  if (st == CLMOE_OK && clmoe_ctx_tile_impl(ctx) == CLMOE_TILE_NV_MMA) ctx->wgmma_ok = 1;
  return st;
}

int clmoe__wgmma_usable(const clmoe_ctx *ctx) { return ctx->wgmma_ok != 0; }

const char *clmoe__tile_options(clmoe_ctx *ctx)
{
  return clmoe_ctx_tile_impl(ctx) == CLMOE_TILE_NV_MMA ? "-DCLMOE_TILE_PTX=1" : "";
}
