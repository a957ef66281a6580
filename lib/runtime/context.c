/* Contexts: one OpenCL context and in-order queue on one device, its knobs (read at creation,
 * overridden by clmoe_ctx_set_knob: include/clmoe/paths.h), plus build probes. */
#include "clmoe/paths.h"
#include "clmoe/runtime.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void base_options(clmoe_ctx *ctx)
{
  const clmoe_device_caps *c = &ctx->caps;
  char vendor[32];
  snprintf(vendor, sizeof vendor, "%s", clmoe_vendor_name(c->vendor));
  for (char *p = vendor; *p; p++) *p = (char)(*p - 'a' + 'A');
  snprintf(ctx->base_options, sizeof ctx->base_options,
           "-cl-std=CL1.2 -DCLMOE_WG=%u -DCLMOE_VENDOR_%s=1 -DCLMOE_IS_GPU=%d -DCLMOE_HAS_FP64=%d "
           "-DCLMOE_NV_CC=%d -DCLMOE_INLINE_PTX=%d",
           c->wg_size, vendor, c->is_gpu, c->has_fp64, c->nv_cc_major * 10 + c->nv_cc_minor,
           c->inline_ptx == 1);
}

/* Applies a knob that the context keeps elsewhere too (creation, clmoe_ctx_set_knob). */
static void knob_applied(clmoe_ctx *ctx, clmoe__knob_id id)
{
  if (id == CLMOE_K_LOCAL_MEM_BYTES) {
    /* CLMOE_LOCAL_MEM_BYTES: the local memory kernels may plan for, in place of the reported
     * size (tuning experiments: NVIDIA reports 48 KB, its compiler accepts a little more) */
    ctx->caps.local_mem_bytes = clmoe__knob_is_set(ctx, id) ? (uint64_t)clmoe__knob_int(ctx, id)
                                                            : ctx->reported_local_mem;
    ctx->local_optin = 0; /* probed again from the new size */
  } else if (id == CLMOE_K_POISON && clmoe__knob_int(ctx, id)) {
    ctx->poison = 1;
  }
}

clmoe_status clmoe_ctx_create_at(clmoe_ctx **out, const clmoe_device_caps *dev,
                                 const clmoe_ctx_options *opts)
{
  *out = NULL;
  clmoe_ctx_options none = {0};
  if (!opts) opts = &none;
  cl_uint nplat = 0;
  CLMOE_CL(clGetPlatformIDs(0, NULL, &nplat));
  if (dev->platform_index < 0 || (cl_uint)dev->platform_index >= nplat)
    return clmoe__error(CLMOE_ERR_NO_DEVICE, "platform %d no longer exists", dev->platform_index);
  cl_platform_id plats[32];
  if (nplat > 32) nplat = 32;
  CLMOE_CL(clGetPlatformIDs(nplat, plats, NULL));
  cl_platform_id plat = plats[dev->platform_index];
  cl_uint ndev = 0;
  CLMOE_CL(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 0, NULL, &ndev));
  if (dev->device_index < 0 || (cl_uint)dev->device_index >= ndev || ndev > 64)
    return clmoe__error(CLMOE_ERR_NO_DEVICE, "device %d:%d no longer exists",
                        dev->platform_index, dev->device_index);
  cl_device_id devs[64];
  CLMOE_CL(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, ndev, devs, NULL));

  clmoe_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory for a context");
  clmoe_status st = CLMOE_OK;
  ctx->platform = plat;
  ctx->device = devs[dev->device_index];
  ctx->profiling = opts->profiling;
  ctx->wgmma_ok = -1;
  ctx->fastpath_mode = -2;
  CLMOE_TRY_GOTO(st, clmoe__knobs_read(&ctx->knobs), fail);
  ctx->poison = opts->poison || clmoe__knob_int(ctx, CLMOE_K_POISON);
  CLMOE_TRY_GOTO(st, clmoe__device_caps(plat, ctx->device, dev->platform_index,
                                        dev->device_index, &ctx->caps), fail);
  ctx->reported_local_mem = ctx->caps.local_mem_bytes;
  knob_applied(ctx, CLMOE_K_LOCAL_MEM_BYTES);
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
  cl_int err = CL_SUCCESS;
  ctx->context = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
  CLMOE_CL_GOTO(st, err, fail);
  ctx->queue = clCreateCommandQueue(ctx->context, ctx->device,
                                    opts->profiling ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
  CLMOE_CL_GOTO(st, err, fail);
  base_options(ctx);
  if (!opts->no_probe) {
    clmoe__probe_caps(ctx);
    base_options(ctx); /* the probes may have changed what the kernels may use */
  }
  *out = ctx;
  return CLMOE_OK;
fail:
  clmoe_ctx_destroy(ctx);
  return st;
}

clmoe_status clmoe_ctx_create(clmoe_ctx **out, const clmoe_ctx_options *opts)
{
  *out = NULL;
  clmoe_device_caps *list = NULL;
  int n = 0, chosen = 0;
  char why[256];
  CLMOE_TRY(clmoe_devices_list(&list, &n));
  clmoe_status st = clmoe_device_choose(list, n, opts ? opts->device : NULL, &chosen, why,
                                        sizeof why);
  if (st == CLMOE_OK) st = clmoe_ctx_create_at(out, &list[chosen], opts);
  if (st == CLMOE_OK) snprintf((*out)->choice_reason, sizeof (*out)->choice_reason, "%s", why);
  free(list);
  return st;
}

void clmoe_ctx_destroy(clmoe_ctx *ctx)
{
  if (!ctx) return;
  if (ctx->queue) clFinish(ctx->queue);
  clmoe__staged_free(ctx);
  free(ctx->staged);
  if (ctx->gemm_release) ctx->gemm_release(ctx);
  clmoe__profile_destroy(ctx);
  clmoe__pool_destroy(ctx);
  for (int i = 0; i < ctx->nprograms; i++) {
    clmoe_program_entry *p = &ctx->programs[i];
    for (int k = 0; k < p->nkernels; k++) clReleaseKernel(p->kernels[k].kernel);
    free(p->kernels);
    if (p->program) clReleaseProgram(p->program);
    free(p->family);
    free(p->options);
  }
  free(ctx->programs);
  if (ctx->queue) clReleaseCommandQueue(ctx->queue);
  if (ctx->context) clReleaseContext(ctx->context);
  clmoe__knobs_free(&ctx->knobs);
  free(ctx);
}

clmoe_status clmoe_ctx_set_knob(clmoe_ctx *ctx, const char *name, const char *value)
{
  const int id = clmoe__knob_lookup(name);
  if (!ctx) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_ctx_set_knob: ctx is NULL");
  if (id < 0)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_ctx_set_knob: no knob named %s (clmoe-info --knobs "
                        "lists them)", name ? name : "(null)");
  if (clmoe__knob_process((clmoe__knob_id)id))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_ctx_set_knob: %s is read before any context "
                        "exists; set it in the environment", name);
  clmoe__knob_value v;
  if (!value) { /* back to the environment's value */
    clmoe__knob_value_free(&ctx->knobs.set[id]);
  } else {
    CLMOE_TRY(clmoe__knob_parse((clmoe__knob_id)id, value, &v));
    v.source = CLMOE__KNOB_SET;
    clmoe__knob_value_free(&ctx->knobs.set[id]);
    ctx->knobs.set[id] = v;
  }
  knob_applied(ctx, (clmoe__knob_id)id);
  return CLMOE_OK;
}

const clmoe_device_caps *clmoe_ctx_caps(const clmoe_ctx *ctx) { return &ctx->caps; }
const char *clmoe_ctx_choice_reason(const clmoe_ctx *ctx) { return ctx->choice_reason; }
cl_context clmoe_ctx_cl_context(const clmoe_ctx *ctx) { return ctx->context; }
cl_device_id clmoe_ctx_cl_device(const clmoe_ctx *ctx) { return ctx->device; }
cl_command_queue clmoe_ctx_queue(const clmoe_ctx *ctx) { return ctx->queue; }

clmoe_status clmoe_ctx_finish(clmoe_ctx *ctx)
{
  CLMOE_CL(clFinish(ctx->queue));
  clmoe__count_wait(ctx, CLMOE_WAIT_FINISH);
  return CLMOE_OK;
}


/* Inline PTX: build and run a kernel that reads %laneid through asm(). Only NVIDIA's
 * compiler can accept it; a failure anywhere just means "not usable". */
static int probe_inline_ptx(clmoe_ctx *ctx)
{
  cl_kernel k = NULL;
  cl_mem buf = NULL;
  int ok = 0;
  cl_uint lanes[64];
  if (clmoe__kernel(ctx, "probe", "-DCLMOE_PROBE_PTX=1", "probe_inline_ptx", &k) != CLMOE_OK)
    goto done;
  cl_int err;
  buf = clCreateBuffer(ctx->context, CL_MEM_WRITE_ONLY, sizeof lanes, NULL, &err);
  if (err != CL_SUCCESS) goto done;
  size_t global = 64, local = 64;
  if (clSetKernelArg(k, 0, sizeof buf, &buf) != CL_SUCCESS) goto done;
  if (clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &local, 0, NULL, NULL) != CL_SUCCESS)
    goto done;
  if (clEnqueueReadBuffer(ctx->queue, buf, CL_TRUE, 0, sizeof lanes, lanes, 0, NULL, NULL) !=
      CL_SUCCESS)
    goto done;
  ok = 1;
  for (int i = 0; i < 64; i++)
    if (lanes[i] != (cl_uint)(i % 32)) ok = 0;
done:
  if (buf) clReleaseMemObject(buf);
  clmoe_clear_error();
  return ok;
}

void clmoe__probe_caps(clmoe_ctx *ctx)
{
  ctx->caps.inline_ptx = ctx->caps.vendor == CLMOE_VENDOR_NVIDIA ? probe_inline_ptx(ctx) : 0;
}
