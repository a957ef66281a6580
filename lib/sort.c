/* Device sort (to be written). */
#include "internal.h"

clmoe_status clmoe__sort_u64(clmoe_ctx *ctx, cl_mem keys, size_t offset, size_t n)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe__sort_u64 is not written yet");
}
