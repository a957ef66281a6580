/* Per-device defaults of the tile hosts' choices (internal.h's clmoe__device_defaults): the
 * values the KDA and MLA tile hosts take where their knob is unset, as rows of a table picked
 * by the device's features, the first that matches. The numbers of the NVIDIA row were
 * measured on the H200 (sm_90, the PTX tiles); the other devices keep the portable choices. */
#include "internal.h"
#include "tile/tile_internal.h" /* the feature record (its fields only: no calls up) */

typedef struct device_row {
  int matrix_unit, inline_ptx; /* what the row needs (-1: either) */
  unsigned min_units;          /* compute units at least */
  clmoe__device_defaults d;
} device_row;

static const device_row rows[] = {
    /* NVIDIA's mma.sync tiles (the H200): the KDA forward's state pass with 2 warps (16% less
     * time than 1 at H 16 and 32) copying 2 chunks ahead; the backward's chunk kernel with 2
     * (chunk, head) pairs per work-group (512 work-items hold the compiler to 128 registers:
     * 16 warps per SM instead of 8) and 3-stage rings where they fit; its two state passes in
     * one launch while at most 2 work-groups per compute unit (1.31 ms against 0.84 + 0.96 at
     * H 16, T 16384); at most 65535 MLA query tiles per launch (a launch's second dimension). */
    {1, 1, 0, {"nvidia-mma", 2, 2, 2, 3, 2, 65535}},
    /* every other device: the same, with one (chunk, head) pair per work-group */
    {-1, -1, 0, {"portable", 2, 2, 1, 3, 2, 65535}},
};

const clmoe__device_defaults *clmoe__device_defaults_for(const clmoe_ctx *ctx,
                                                         const struct clmoe_tile_features *tile)
{
  const int matrix_unit = tile->matrix_unit, inline_ptx = tile->inline_ptx;
  const size_t n = sizeof rows / sizeof rows[0];
  for (size_t i = 0; i < n; i++) {
    const device_row *r = &rows[i];
    if ((r->matrix_unit < 0 || r->matrix_unit == !!matrix_unit) &&
        (r->inline_ptx < 0 || r->inline_ptx == !!inline_ptx) && ctx->caps.compute_units >= r->min_units)
      return &r->d;
  }
  return &rows[n - 1].d;
}
