/* Random fills. The generator itself is kernels_cl/runtime/random.cl, included here so that the
 * host and every device run the same text and produce the same bits. */
#include "clmoe/tensor.h"
#include "internal.h"

#include <stdint.h>
#include <string.h>

#include "kernels_cl/runtime/random.cl"

float clmoe_random_uniform(uint64_t seed, uint64_t index, float lo, float hi)
{
  return rng_uniform(seed, index, lo, hi);
}

float clmoe_random_normal(uint64_t seed, uint64_t index, float mean, float stddev)
{
  return rng_normal(seed, index, mean, stddev);
}

static clmoe_status fill_random(clmoe_tensor *t, uint64_t seed, uint64_t first, int normal, float a, float b)
{
  char desc[96];
  if (!clmoe_tensor_is_contiguous(t) || (t->dtype != CLMOE_F32 && t->dtype != CLMOE_BF16))
    return clmoe__error(CLMOE_ERR_SHAPE, "random fill needs a contiguous f32 or bf16 tensor, not %s",
                        clmoe_tensor_describe(t, desc, sizeof desc));
  cl_ulong n = (cl_ulong)clmoe_tensor_numel(t);
  if (n == 0) return CLMOE_OK;
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(t->ctx, "random", t->dtype == CLMOE_BF16 ? "-DSTORE_BF16=1" : NULL,
                          "random_fill", &k));
  cl_ulong off = (cl_ulong)t->offset, s = seed;
  cl_int is_normal = normal;
  cl_ulong f = first;
  CLMOE_TRY(clmoe__args(k, 8, KA(t->buf), KA(off), KA(n), KA(s), KA(is_normal), KA(a), KA(b), KA(f)));
  return clmoe__launch1d(t->ctx, k, (size_t)n);
}

clmoe_status clmoe_tensor_fill_uniform(clmoe_tensor *t, uint64_t seed, float lo, float hi)
{
  return fill_random(t, seed, 0, 0, lo, hi);
}

clmoe_status clmoe_tensor_fill_normal(clmoe_tensor *t, uint64_t seed, float mean, float stddev)
{
  return fill_random(t, seed, 0, 1, mean, stddev);
}

clmoe_status clmoe_tensor_fill_normal_at(clmoe_tensor *t, uint64_t seed, uint64_t first, float mean,
                                         float stddev)
{
  return fill_random(t, seed, first, 1, mean, stddev);
}
