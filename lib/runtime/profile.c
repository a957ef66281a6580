/* Profiling: the kernels launched between clmoe_ctx_profile_begin and _end, timed by their
 * OpenCL events and summed by kernel name into the context's table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/runtime.h"
#include "internal.h"

struct clmoe__prof_event {
  cl_event ev, start;
  char name[64];
};

static void profile_release(clmoe_ctx *ctx)
{
  for (int i = 0; i < ctx->prof_count; i++) {
    clReleaseEvent(ctx->prof_events[i].ev);
    if (ctx->prof_events[i].start) clReleaseEvent(ctx->prof_events[i].start);
  }
  ctx->prof_count = 0;
}

clmoe_status clmoe__profile_record(clmoe_ctx *ctx, cl_event ev, cl_event start, const char *name)
{
  if (!(ctx->prof_active && ctx->profiling) || !ev) {
    if (ev) clReleaseEvent(ev);
    if (start) clReleaseEvent(start);
    return CLMOE_OK;
  }
  if (ctx->prof_count == ctx->prof_cap) {
    int cap = ctx->prof_cap ? 2 * ctx->prof_cap : 256;
    struct clmoe__prof_event *grown = realloc(ctx->prof_events, (size_t)cap * sizeof *grown);
    if (!grown) {
      clReleaseEvent(ev);
      if (start) clReleaseEvent(start);
      return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (profiling)");
    }
    ctx->prof_events = grown;
    ctx->prof_cap = cap;
  }
  struct clmoe__prof_event *e = &ctx->prof_events[ctx->prof_count++];
  e->ev = ev, e->start = start;
  snprintf(e->name, sizeof e->name, "%s", name);
  return CLMOE_OK;
}

clmoe_status clmoe_ctx_profile_begin(clmoe_ctx *ctx)
{
  if (!ctx->profiling)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT,
                        "clmoe_ctx_profile_begin: the context was created without profiling");
  profile_release(ctx);
  ctx->prof_active = 1;
  return CLMOE_OK;
}

/* Adds `seconds` to the table row of `name` (a linear search: a model has ~100 kernels). */
static clmoe_status table_add(clmoe_ctx *ctx, const char *name, double seconds)
{
  int i = 0;
  while (i < ctx->prof_rows && strcmp(ctx->prof_table[i].name, name)) i++;
  if (i == ctx->prof_rows) {
    if (ctx->prof_rows == ctx->prof_table_cap) {
      int cap = ctx->prof_table_cap ? 2 * ctx->prof_table_cap : 64;
      clmoe_kernel_time *grown = realloc(ctx->prof_table, (size_t)cap * sizeof *grown);
      if (!grown) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (profiling)");
      ctx->prof_table = grown;
      ctx->prof_table_cap = cap;
    }
    memset(&ctx->prof_table[i], 0, sizeof ctx->prof_table[i]);
    snprintf(ctx->prof_table[i].name, sizeof ctx->prof_table[i].name, "%s", name);
    ctx->prof_rows++;
  }
  ctx->prof_table[i].seconds += seconds;
  ctx->prof_table[i].launches++;
  return CLMOE_OK;
}

clmoe_status clmoe_ctx_profile_end(clmoe_ctx *ctx, double *kernel_seconds, int *kernels)
{
  ctx->prof_active = 0;
  *kernel_seconds = 0.0;
  if (kernels) *kernels = ctx->prof_count;
  clmoe_status st = CLMOE_OK;
  cl_int err = clFinish(ctx->queue);
  clmoe__count_wait(ctx, CLMOE_WAIT_FINISH);
  for (int i = 0; i < ctx->prof_count && err == CL_SUCCESS && st == CLMOE_OK; i++) {
    const struct clmoe__prof_event *e = &ctx->prof_events[i];
    cl_ulong t0 = 0, t1 = 0;
    err = e->start ? clGetEventProfilingInfo(e->start, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL)
                   : clGetEventProfilingInfo(e->ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    if (err == CL_SUCCESS)
      err = clGetEventProfilingInfo(e->ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    if (err != CL_SUCCESS) break;
    const double s = t1 > t0 ? 1e-9 * (double)(t1 - t0) : 0.0;
    *kernel_seconds += s;
    st = table_add(ctx, e->name, s);
  }
  if (err != CL_SUCCESS) st = clmoe__cl_error(err, "clGetEventProfilingInfo", __FILE__, __LINE__);
  profile_release(ctx);
  return st;
}

int clmoe_ctx_profile_kernels(const clmoe_ctx *ctx, const clmoe_kernel_time **rows)
{
  *rows = ctx->prof_table;
  return ctx->prof_rows;
}

void clmoe_ctx_profile_clear(clmoe_ctx *ctx) { ctx->prof_rows = 0; }

void clmoe__profile_destroy(clmoe_ctx *ctx)
{
  profile_release(ctx);
  free(ctx->prof_events);
  ctx->prof_events = NULL;
  free(ctx->prof_table);
  ctx->prof_table = NULL;
  ctx->prof_rows = ctx->prof_table_cap = 0;
}
