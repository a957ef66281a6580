/* Kernel arguments and launches: clmoe__args and the clmoe__launch helpers, which name the
 * kernel in every error and hand each launch's event to the profiler while it is active. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static const char *kernel_name(cl_kernel k, char *buf, size_t len)
{
  if (clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, len, buf, NULL) != CL_SUCCESS)
    snprintf(buf, len, "?");
  return buf;
}

clmoe_status clmoe__args(cl_kernel kernel, int count, ...)
{
  va_list ap;
  va_start(ap, count);
  clmoe_status st = CLMOE_OK;
  for (int i = 0; i < count; i++) {
    size_t size = va_arg(ap, size_t);
    const void *ptr = va_arg(ap, const void *);
    cl_int err = clSetKernelArg(kernel, (cl_uint)i, size, ptr);
    if (err != CL_SUCCESS) {
      char name[64];
      st = clmoe__cl_error(err, "clSetKernelArg", __FILE__, __LINE__);
      clmoe__append_error(" (kernel %s, argument %d)", kernel_name(kernel, name, sizeof name), i);
      break;
    }
  }
  va_end(ap);
  return st;
}

clmoe_status clmoe__launch(clmoe_ctx *ctx, cl_kernel kernel, int dims, const size_t *global,
                           const size_t *local)
{
  size_t g[3];
  for (int d = 0; d < dims; d++) {
    g[d] = local ? clmoe__round_up(global[d], local[d]) : global[d];
    if (g[d] == 0) return CLMOE_OK; /* nothing to do */
  }
  cl_event ev = NULL;
  const int keep = ctx->prof_active && ctx->profiling;
  cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, (cl_uint)dims, NULL, g, local, 0, NULL,
                                      keep ? &ev : NULL);
  if (err == CL_SUCCESS) ctx->counters.launches++;
  if (err == CL_SUCCESS && keep) {
    char name[64];
    return clmoe__profile_record(ctx, ev, NULL, kernel_name(kernel, name, sizeof name));
  }
  if (err != CL_SUCCESS) {
    char name[64];
    clmoe__cl_error(err, "clEnqueueNDRangeKernel", __FILE__, __LINE__);
    clmoe__append_error(" (kernel %s)", kernel_name(kernel, name, sizeof name));
    return err;
  }
  return CLMOE_OK;
}

clmoe_status clmoe__launch1d(clmoe_ctx *ctx, cl_kernel kernel, size_t n)
{
  size_t local = ctx->caps.wg_size;
  return clmoe__launch(ctx, kernel, 1, &n, &local);
}

clmoe_status clmoe__row_local(clmoe_ctx *ctx, cl_kernel kernel, int64_t n, size_t *local)
{
  size_t kmax = 0;
  CLMOE_CL(clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax,
                                    &kmax, NULL));
  size_t l = 256;
  while (l > 1 && (l > ctx->caps.max_work_group_size || l > kmax || (int64_t)(l / 2) >= n)) l /= 2;
  *local = l;
  return CLMOE_OK;
}

clmoe_status clmoe__kernels_fit(clmoe_ctx *ctx, const char *op, const cl_kernel *k, int n, size_t need)
{
  for (int i = 0; i < n; i++) {
    size_t kmax = 0;
    CLMOE_CL(clGetKernelWorkGroupInfo(k[i], ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL));
    if (kmax < need)
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: the compiled kernels run at most %zu work-items per group; "
                          "they need %zu", op, kmax, need);
  }
  return CLMOE_OK;
}

clmoe_status clmoe__launch_groups(clmoe_ctx *ctx, cl_kernel kernel, int64_t groups, size_t local)
{
  size_t global = (size_t)groups * local;
  return clmoe__launch(ctx, kernel, 1, &global, &local);
}
