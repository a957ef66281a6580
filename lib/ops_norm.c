/* RMSNorm (to be written). */
#include "internal.h"

clmoe_status clmoe_rmsnorm(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *gain,
                           float eps, clmoe_tensor *y, clmoe_tensor *rstd)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_rmsnorm is not written yet");
}

clmoe_status clmoe_rmsnorm_backward(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *gain,
                                    const clmoe_tensor *rstd, const clmoe_tensor *dy,
                                    clmoe_tensor *dx, clmoe_tensor *dgain)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_rmsnorm_backward is not written yet");
}
