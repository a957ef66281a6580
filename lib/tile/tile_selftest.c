/* The tile interface's self-test kernel (probe_tile_test, kernels_cl/runtime/probe.cl) on
 * a context's tile implementation, for the conformance check tile.interface. */
#include <stdio.h>

#include "clmoe/paths.h"
#include "runtime/internal.h"
#include "tile/tile_internal.h"

clmoe_status clmoe_tile_selftest(clmoe_ctx *ctx, const clmoe_tensor *a, const clmoe_tensor *b,
                                 const clmoe_tensor *b2, clmoe_tensor *out)
{
  static const char op[] = "clmoe_tile_selftest";
  CLMOE_TRY(clmoe__want_shape(a, op, "a", 0, 1, 2 * 256, 0, 0, 0));
  CLMOE_TRY(clmoe__want_shape(b, op, "b", 0, 1, 2 * 128, 0, 0, 0));
  CLMOE_TRY(clmoe__want_shape(b2, op, "b2", 0, 1, 2 * 128, 0, 0, 0));
  CLMOE_TRY(clmoe__want_shape(out, op, "out", 0, 1, 2 * 7 * 128, 0, 0, 0));
  char opts[128];
  snprintf(opts, sizeof opts, "-DCLMOE_PROBE_TILE_TEST=1 %s", clmoe__tile_options(ctx));
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "tile+probe", opts, "probe_tile_test", &k));
  CLMOE_TRY(clmoe__args(k, 4, KA(a->buf), KA(b->buf), KA(b2->buf), KA(out->buf)));
  return clmoe__launch_groups(ctx, k, 1, 64);
}
