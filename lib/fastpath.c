/* Fast-path selection (see fastpath.h). */
#include <stdlib.h>
#include <string.h>

#include "fastpath.h"
#include "internal.h"

const char *clmoe_tile_impl_name(clmoe_tile_impl impl)
{
  return impl == CLMOE_TILE_NV_MMA ? "nv-mma" : "portable";
}

/* TODO(issue 9): the mma.sync probe; until then every device gets the portable tiles. */
clmoe_tile_impl clmoe_ctx_tile_impl(clmoe_ctx *ctx)
{
  if (ctx->tile_impl < 0) ctx->tile_impl = CLMOE_TILE_PORTABLE;
  return (clmoe_tile_impl)ctx->tile_impl;
}

void clmoe_ctx_set_fastpath(clmoe_ctx *ctx, int mode) { ctx->fastpath_mode = mode < 0 ? -1 : mode ? 1 : 0; }

int clmoe_ctx_fastpath(clmoe_ctx *ctx)
{
  int mode = ctx->fastpath_mode;
  if (mode == -2) { /* not set by the caller: the environment */
    const char *e = getenv("CLMOE_FASTPATH");
    mode = (e && !strcmp(e, "1")) ? 1 : (e && !strcmp(e, "0")) ? 0 : -1;
  }
  if (mode >= 0) return mode;
  return clmoe_ctx_tile_impl(ctx) != CLMOE_TILE_PORTABLE;
}

const char *clmoe__tile_options(clmoe_ctx *ctx)
{
  return clmoe_ctx_tile_impl(ctx) == CLMOE_TILE_NV_MMA ? "-DCLMOE_TILE_PTX=1" : "";
}
