/* Shared by the MLA tile-path checks (check_mla_tile.c) and their CUnit suite
 * (tests/unit/test_mla_tile.c): one forward or backward case of the attention through a
 * named path against the double reference and, optionally, against the portable kernels. */
#ifndef CLMOE_CHECK_MLA_TILE_H
#define CLMOE_CHECK_MLA_TILE_H

#include "conformance.h"
#include "clmoe/paths.h"

typedef struct ck_mla_tile_case {
  int64_t B, T, H, Dn, Dr, Dv;
  const int32_t *lens;      /* packed sequence lengths (then B = 1, T = their sum) */
  int nlens;
  clmoe_dtype dtype;        /* storage of q, k, v */
  clmoe_dtype odtype;       /* storage of o */
  clmoe_mla_attn_path path; /* the kernel under test */
  int vs_portable;          /* also compare with the portable kernel's o and lse */
} ck_mla_tile_case;

/* The forward of c->path on random inputs (fp32 ones rounded to bf16, as the tile kernel
 * sees them): o and lse against the reference, to 1e-2. */
clmoe_status ck_mla_tile_forward(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                 const ck_mla_tile_case *c);
/* The tile backward after the forward of c->path: dq, dk_nope, dk_rope, dv against the
 * reference, to tol. */
clmoe_status ck_mla_tile_backward(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                  const ck_mla_tile_case *c, double tol);

#endif
