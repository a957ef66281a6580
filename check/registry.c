/* The list of every conformance check. Each family file exports a table ending in
 * {NULL}; add a new family's table here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

extern const clmoe_check clmoe_checks_random[];    /* check_random.c: random fills, bf16 copies */
extern const clmoe_check clmoe_checks_gemm[];      /* check_gemm.c: GEMM, every backend */
extern const clmoe_check clmoe_checks_pointwise[]; /* check_pointwise.c: pointwise ops */
extern const clmoe_check clmoe_checks_reduce[];    /* check_reduce.c: reductions */
extern const clmoe_check clmoe_checks_linear[];    /* check_linear.c: the linear layer */
extern const clmoe_check clmoe_checks_norm[];   /* check_norm.c: RMSNorm, softmax, cross-entropy */
extern const clmoe_check clmoe_checks_embed[];  /* check_embed.c: embedding, device sort, AdamW */
extern const clmoe_check clmoe_checks_kda[];    /* check_kda.c: KDA forward, backward, decode */
extern const clmoe_check clmoe_checks_conv[];   /* check_conv.c: causal short convolution */
extern const clmoe_check clmoe_checks_layers[]; /* check_layers.c: Block AttnRes */
extern const clmoe_check clmoe_checks_mla[];    /* check_mla.c: gated MLA */
extern const clmoe_check clmoe_checks_moe[];    /* check_moe.c: Stable LatentMoE */
extern const clmoe_check clmoe_checks_moe_decode[]; /* check_moe_decode.c: the few-token forward */
extern const clmoe_check clmoe_checks_moe_infer[]; /* check_moe_infer.c: the forward on bf16 expert stacks */
extern const clmoe_check clmoe_checks_gemv[];   /* check_gemv.c: the few-token GEMV, fp32 and bf16 weights */
extern const clmoe_check clmoe_checks_sample[]; /* check_sample.c: the device sampler */
extern const clmoe_check clmoe_checks_tile[];   /* check_tile.c: tile interface, tile GEMM */
extern const clmoe_check clmoe_checks_kda_tile[]; /* check_kda_tile.c: KDA on tiles */
extern const clmoe_check clmoe_checks_mla_tile[]; /* check_mla_tile.c: MLA attention on tiles */

static const clmoe_check *const families[] = {
    clmoe_checks_random, clmoe_checks_gemm,   clmoe_checks_pointwise, clmoe_checks_reduce,
    clmoe_checks_linear, clmoe_checks_norm,   clmoe_checks_embed,     clmoe_checks_kda,
    clmoe_checks_conv,   clmoe_checks_layers, clmoe_checks_mla,       clmoe_checks_moe, clmoe_checks_moe_decode,
    clmoe_checks_moe_infer,
    clmoe_checks_gemv,   clmoe_checks_sample, clmoe_checks_tile,   clmoe_checks_kda_tile, clmoe_checks_mla_tile};

/* Room for the checks; the registry refuses more rather than drop any. */
#define MAX_CHECKS 512
static clmoe_check all[MAX_CHECKS];
static int nall = -1; /* -1: not built yet */
static clmoe_status built;
static char built_why[256];

/* Copies every family's checks into all[]: CLMOE_ERR_INTERNAL (why set) when they do not fit
 * or two share a name (clmoe-xcheck's reports and --op select checks by name). */
static clmoe_status build(char *why, size_t len)
{
  int n = 0;
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    for (const clmoe_check *c = families[f]; c->name; c++) {
      if (n == MAX_CHECKS) {
        snprintf(why, len, "check/registry.c: more than %d conformance checks (the next is %s): "
                 "raise MAX_CHECKS", MAX_CHECKS, c->name);
        return CLMOE_ERR_INTERNAL;
      }
      for (int i = 0; i < n; i++)
        if (!strcmp(all[i].name, c->name)) {
          snprintf(why, len, "check/registry.c: two conformance checks are named %s", c->name);
          return CLMOE_ERR_INTERNAL;
        }
      all[n++] = *c;
    }
  nall = n;
  return CLMOE_OK;
}

clmoe_status clmoe_checks_list(const clmoe_check **list, int *count, char *why, size_t len)
{
  if (nall < 0) {
    built = build(built_why, sizeof built_why);
    if (built != CLMOE_OK) nall = 0;
  }
  if (why && len) snprintf(why, len, "%s", built == CLMOE_OK ? "" : built_why);
  *list = all;
  *count = built == CLMOE_OK ? nall : 0;
  return built;
}

const clmoe_check *clmoe_checks(int *count)
{
  const clmoe_check *list = NULL;
  char why[256];
  if (clmoe_checks_list(&list, count, why, sizeof why) != CLMOE_OK) {
    fprintf(stderr, "clmoe: %s\n", why);
    abort();
  }
  return list;
}
