/* Softmax and cross-entropy (to be written). */
#include "internal.h"

clmoe_status clmoe_softmax(clmoe_ctx *ctx, const clmoe_tensor *x, clmoe_tensor *y)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_softmax is not written yet");
}

clmoe_status clmoe_softmax_backward(clmoe_ctx *ctx, const clmoe_tensor *y, const clmoe_tensor *dy,
                                    clmoe_tensor *dx)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_softmax_backward is not written yet");
}

clmoe_status clmoe_cross_entropy(clmoe_ctx *ctx, const clmoe_tensor *logits,
                                 const clmoe_tensor *targets, clmoe_tensor *loss, clmoe_tensor *lse)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_cross_entropy is not written yet");
}

clmoe_status clmoe_cross_entropy_backward(clmoe_ctx *ctx, const clmoe_tensor *logits,
                                          const clmoe_tensor *targets, const clmoe_tensor *lse,
                                          float scale, clmoe_tensor *dlogits)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_cross_entropy_backward is not written yet");
}
