/* The context's counters of launches and host waits (clmoe_ctx_counters_get): a leaf that
 * every path which enqueues or waits may call (clmoe__launch bumps its field directly). */
#include "clmoe/runtime.h"
#include "internal.h"

void clmoe__count_wait(clmoe_ctx *ctx, enum clmoe__wait kind)
{
  if (kind == CLMOE_WAIT_READ) ctx->counters.blocking_reads++;
  else if (kind == CLMOE_WAIT_WRITE) ctx->counters.blocking_writes++;
  else ctx->counters.finishes++;
}

void clmoe_ctx_counters_get(const clmoe_ctx *ctx, clmoe_ctx_counters *counters) { *counters = ctx->counters; }
