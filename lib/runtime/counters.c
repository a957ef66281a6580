/* The context's counters of launches and host waits (clmoe_ctx_counters_get), and the
 * uploads that need none (clmoe__write_staged): a leaf that every path which enqueues or
 * waits may call (clmoe__launch bumps its field directly). */
#include <stdlib.h>
#include <string.h>
#include "clmoe/runtime.h"
#include "internal.h"

void clmoe__staged_free(clmoe_ctx *ctx)
{
  for (int i = 0; i < ctx->nstaged; i++) free(ctx->staged[i]);
  ctx->nstaged = 0;
}

void clmoe__count_wait(clmoe_ctx *ctx, enum clmoe__wait kind)
{
  if (kind == CLMOE_WAIT_READ) ctx->counters.blocking_reads++;
  else if (kind == CLMOE_WAIT_WRITE) ctx->counters.blocking_writes++;
  else ctx->counters.finishes++;
  /* After a blocking read or a finish the in-order queue has run everything enqueued before.
   * Not after a blocking write: it may return once the runtime has copied its bytes, before
   * the commands ahead of it have run (Intel's CPU runtime does). */
  if (kind != CLMOE_WAIT_WRITE) clmoe__staged_free(ctx);
}

clmoe_status clmoe__write_staged(clmoe_ctx *ctx, cl_mem mem, size_t offset, size_t bytes, const void *host)
{
  if (!bytes) return CLMOE_OK;
  void *copy = NULL;
  if (ctx->nstaged == ctx->cap_staged) {
    const int cap = ctx->cap_staged ? 2 * ctx->cap_staged : 64;
    void **grown = realloc(ctx->staged, (size_t)cap * sizeof *grown);
    if (grown) ctx->staged = grown, ctx->cap_staged = cap;
  }
  if (ctx->nstaged < ctx->cap_staged) copy = malloc(bytes);
  if (!copy) { /* no room to keep a copy: write and wait */
    cl_int err = clEnqueueWriteBuffer(ctx->queue, mem, CL_TRUE, offset, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) return clmoe__cl_error(err, "clEnqueueWriteBuffer", __FILE__, __LINE__);
    clmoe__count_wait(ctx, CLMOE_WAIT_WRITE);
    return CLMOE_OK;
  }
  memcpy(copy, host, bytes);
  cl_int err = clEnqueueWriteBuffer(ctx->queue, mem, CL_FALSE, offset, bytes, copy, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    free(copy);
    return clmoe__cl_error(err, "clEnqueueWriteBuffer", __FILE__, __LINE__);
  }
  ctx->staged[ctx->nstaged++] = copy;
  return CLMOE_OK;
}

void clmoe_ctx_counters_get(const clmoe_ctx *ctx, clmoe_ctx_counters *counters) { *counters = ctx->counters; }
