/* Our own GEMM kernels (kernels_cl/gemm/gemm.cl): the tiled kernel (a 64 x 64 block of C per
 * work-group of 16 x 16, 4 x 4 outputs per work-item) and the naive kernel (one work-item
 * per element of C: the on-device reference and benchmark baseline). Both read fp32 or bf16
 * operands directly and write an fp32 or bf16 C. */
#include <stdio.h>

#include "gemm/gemm_internal.h"
#include "runtime/internal.h"

clmoe_status clmoe__gemm_own(clmoe_ctx *ctx, int tiled, int ta, int tb, float alpha,
                            const clmoe_tensor *A, const clmoe_tensor *B, float beta,
                            clmoe_tensor *C, const clmoe__gemm_shape *s)
{
  char opts[96];
  snprintf(opts, sizeof opts, "-DA_BF16=%d -DB_BF16=%d -DC_BF16=%d", A->dtype == CLMOE_BF16,
           B->dtype == CLMOE_BF16, C->dtype == CLMOE_BF16);
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(ctx, "gemm", opts, tiled ? "gemm_tiled" : "gemm_naive", &k));
  cl_int m = (cl_int)s->m, n = (cl_int)s->n, kk = (cl_int)s->k;
  cl_int lda = (cl_int)s->lda, ldb = (cl_int)s->ldb, ldc = (cl_int)s->ldc;
  cl_int ita = ta, itb = tb;
  cl_ulong aoff = (cl_ulong)A->offset, boff = (cl_ulong)B->offset, coff = (cl_ulong)C->offset;
  cl_ulong as = (cl_ulong)s->astride, bs = (cl_ulong)s->bstride, cs = (cl_ulong)s->cstride;
  CLMOE_TRY(clmoe__args(k, 19, KA(m), KA(n), KA(kk), KA(alpha), KA(beta), KA(A->buf), KA(aoff),
                        KA(lda), KA(as), KA(ita), KA(B->buf), KA(boff), KA(ldb), KA(bs), KA(itb),
                        KA(C->buf), KA(coff), KA(ldc), KA(cs)));
  if (tiled) {
    size_t global[3] = {(size_t)n, (size_t)m, (size_t)s->batch};
    size_t local[3] = {16, 16, 1};
    global[0] = clmoe__round_up(global[0], 64) / 4;
    global[1] = clmoe__round_up(global[1], 64) / 4;
    return clmoe__launch(ctx, k, 3, global, local);
  }
  size_t global[3] = {(size_t)n, (size_t)m, (size_t)s->batch};
  size_t local[3] = {16, 16, 1};
  if (ctx->caps.max_work_group_size < 256) local[0] = local[1] = 8;
  return clmoe__launch(ctx, k, 3, global, local);
}
