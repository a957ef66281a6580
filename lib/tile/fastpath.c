/* The fast-path policy (include/clmoe/tile.h): whether the tile kernels are used, from the
 * program's setting, else CLMOE_FASTPATH, else whether the tiles are a matrix unit. */
#include <stdlib.h>
#include <string.h>

#include "clmoe/tile.h"
#include "runtime/internal.h"
#include "tile/tile_internal.h"

void clmoe_ctx_set_fastpath(clmoe_ctx *ctx, int mode)
{
  ctx->fastpath_mode = mode < -1 ? -2 : mode < 0 ? -1 : mode ? 1 : 0;
}

int clmoe_ctx_fastpath_setting(const clmoe_ctx *ctx) { return ctx->fastpath_mode; }

/* The mode in force: the caller's, else CLMOE_FASTPATH's, else -1 (auto). */
static int fastpath_mode(const clmoe_ctx *ctx)
{
  if (ctx->fastpath_mode != -2) return ctx->fastpath_mode;
  const char *e = clmoe__knob_text(ctx, CLMOE_K_FASTPATH); /* auto, 0 or 1 */
  return (e && !strcmp(e, "1")) ? 1 : (e && !strcmp(e, "0")) ? 0 : -1;
}

int clmoe_ctx_fastpath(clmoe_ctx *ctx)
{
  int mode = fastpath_mode(ctx);
  if (mode >= 0) return mode;
  return clmoe__tile_features(ctx)->matrix_unit;
}

int clmoe_ctx_fastpath_for(clmoe_ctx *ctx, int bf16_operands)
{
  int mode = fastpath_mode(ctx);
  if (mode >= 0) return mode;
  return bf16_operands && clmoe__tile_features(ctx)->matrix_unit;
}

const char *clmoe_ctx_fastpath_reason(clmoe_ctx *ctx)
{
  int mode = fastpath_mode(ctx);
  if (mode >= 0) {
    if (ctx->fastpath_mode != -2) return mode ? "on (set by the program)" : "off (set by the program)";
    return mode ? "on (CLMOE_FASTPATH=1)" : "off (CLMOE_FASTPATH=0)";
  }
  return clmoe__tile_features(ctx)->matrix_unit ? "on (auto: the device has a matrix unit)"
                                                : "off (auto: no matrix unit found)";
}

int clmoe__infer_tile(clmoe_ctx *ctx)
{
  const char *e = clmoe__knob_text(ctx, CLMOE_K_INFER_TILE); /* auto, 0 or 1 */
  if (e && !strcmp(e, "1")) return 1;
  if (e && !strcmp(e, "0")) return 0;
  return clmoe_ctx_tile_impl(ctx) != CLMOE_TILE_PORTABLE; /* the rule of generation's --weights auto */
}
