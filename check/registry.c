/* The list of every conformance check. Each family file exports a table ending in
 * {NULL}; add a new family's table here. */
#include <stdlib.h>

#include "conformance.h"

extern const clmoe_check clmoe_checks_core[]; /* check_core.c: tensors, GEMM, pointwise, reductions */
extern const clmoe_check clmoe_checks_norm[]; /* check_norm.c: RMSNorm, softmax, cross-entropy */
extern const clmoe_check clmoe_checks_embed[]; /* check_embed.c: embedding, device sort, AdamW */
extern const clmoe_check clmoe_checks_kda[];   /* check_kda.c: KDA forward, backward, decode */
extern const clmoe_check clmoe_checks_conv[];  /* check_conv.c: causal short convolution */
extern const clmoe_check clmoe_checks_layers[]; /* check_layers.c: Block AttnRes */
extern const clmoe_check clmoe_checks_mla[];   /* check_mla.c: gated MLA */
extern const clmoe_check clmoe_checks_moe[];   /* check_moe.c: Stable LatentMoE */
extern const clmoe_check clmoe_checks_tile[];  /* check_tile.c: tile interface, tile GEMM */
extern const clmoe_check clmoe_checks_kda_tile[]; /* check_kda_tile.c: KDA on tiles */
extern const clmoe_check clmoe_checks_mla_tc[]; /* check_mla_tc.c: MLA attention on tiles */

static const clmoe_check *const families[] = {clmoe_checks_core, clmoe_checks_norm,
                                              clmoe_checks_embed, clmoe_checks_kda, clmoe_checks_conv,
                                              clmoe_checks_layers,
                                              clmoe_checks_mla, clmoe_checks_moe,
                                              clmoe_checks_tile, clmoe_checks_kda_tile,
                                              clmoe_checks_mla_tc};

#define MAX_CHECKS 512
static clmoe_check all[MAX_CHECKS];
static int nall = -1;

const clmoe_check *clmoe_checks(int *count)
{
  if (nall < 0) {
    nall = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
      for (const clmoe_check *c = families[f]; c->name && nall < MAX_CHECKS; c++) all[nall++] = *c;
  }
  *count = nall;
  return all;
}
