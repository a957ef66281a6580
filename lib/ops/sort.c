/* Device sort of 64-bit keys: an in-place bitonic network (kernels_cl/ops/sort.cl). A sorting
 * network's result depends only on the keys, so the sort is deterministic on any device. */
#include "clmoe/paths.h"
#include "runtime/internal.h"

#define SORT_MAX_BLOCK 2048 /* keys per local-memory block: 16 KiB of local memory */
#define SORT_MAX_LOCAL 256  /* work-items per local-memory block */

static size_t next_pow2(size_t n)
{
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

/* Work-group size for sort_local: at most half the block (one pair per work-item), the
 * device's limit and what the compiled kernel allows. */
static clmoe_status local_size(clmoe_ctx *ctx, cl_kernel k, size_t block, size_t *local)
{
  size_t kmax = 0;
  CLMOE_CL(clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax,
                                    &kmax, NULL));
  size_t l = SORT_MAX_LOCAL;
  while (l > 1 && (l > block / 2 || l > kmax || l > ctx->caps.max_work_group_size)) l >>= 1;
  *local = l;
  return CLMOE_OK;
}

/* Runs sort_local over every block: full = 1 sorts the blocks, full = 0 finishes a stage. */
static clmoe_status run_local(clmoe_ctx *ctx, cl_kernel k, cl_mem keys, cl_ulong off, cl_ulong n,
                              size_t pow2, size_t block, size_t local, int full)
{
  cl_uint b = (cl_uint)block;
  cl_int f = full;
  CLMOE_TRY(clmoe__args(k, 6, KA(keys), KA(off), KA(n), KA(b), KA(f),
                        KA_LOCAL(block * sizeof(cl_ulong))));
  size_t global = pow2 / block * local;
  return clmoe__launch(ctx, k, 1, &global, &local);
}

/* One global pass: levels j (and j/2 when two) of stage `stage`. */
static clmoe_status run_global(clmoe_ctx *ctx, cl_kernel k2, cl_kernel k4, cl_mem keys,
                               cl_ulong off, cl_ulong n, size_t pow2, cl_ulong stage, cl_ulong j,
                               int two)
{
  cl_int flip = j == stage / 2;
  cl_kernel k = two ? k4 : k2;
  CLMOE_TRY(clmoe__args(k, 6, KA(keys), KA(off), KA(n), KA(stage), KA(j), KA(flip)));
  return clmoe__launch1d(ctx, k, pow2 / (two ? 4 : 2));
}

clmoe_status clmoe_sort_u64(clmoe_ctx *ctx, cl_mem keys, size_t offset, size_t n)
{
  if (n <= 1) return CLMOE_OK;
  if (!keys) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_sort_u64: keys is NULL");
  if (n > SIZE_MAX / 16) /* keeps next_pow2 and the work-item counts from overflowing */
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_sort_u64: %zu keys is too many", n);
  size_t pow2 = next_pow2(n);
  cl_kernel kl, k2, k4;
  CLMOE_TRY(clmoe__kernel(ctx, "sort", NULL, "sort_local", &kl));
  CLMOE_TRY(clmoe__kernel(ctx, "sort", NULL, "sort_global2", &k2));
  CLMOE_TRY(clmoe__kernel(ctx, "sort", NULL, "sort_global4", &k4));
  /* The block: as large as the padded size allows, using at most half the local memory. */
  size_t block = SORT_MAX_BLOCK;
  while (block > 2 && (block > pow2 || block * sizeof(cl_ulong) > ctx->caps.local_mem_bytes / 2))
    block >>= 1;
  size_t local = 1;
  CLMOE_TRY(local_size(ctx, kl, block, &local));
  cl_ulong off = (cl_ulong)offset, un = (cl_ulong)n;
  CLMOE_TRY(run_local(ctx, kl, keys, off, un, pow2, block, local, 1));
  for (size_t stage = 2 * block; stage <= pow2; stage <<= 1) {
    /* Strides stage/2 .. block go through global memory, two levels per pass when two
     * remain; the strides below the block finish in local memory. */
    size_t j = stage / 2;
    while (j >= block) {
      int two = j / 2 >= block;
      CLMOE_TRY(run_global(ctx, k2, k4, keys, off, un, pow2, (cl_ulong)stage, (cl_ulong)j, two));
      j >>= two ? 2 : 1;
    }
    CLMOE_TRY(run_local(ctx, kl, keys, off, un, pow2, block, local, 0));
  }
  return CLMOE_OK;
}
