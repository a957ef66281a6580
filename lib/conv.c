/* Short convolution (to be written). */
#include "internal.h"

clmoe_status clmoe_short_conv(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *w,
                              const clmoe_tensor *cu_seqlens, const clmoe_tensor *state_in,
                              clmoe_tensor *y, clmoe_tensor *state_out)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_short_conv is not written yet");
}

clmoe_status clmoe_short_conv_backward(clmoe_ctx *ctx, const clmoe_tensor *x,
                                       const clmoe_tensor *w, const clmoe_tensor *cu_seqlens,
                                       const clmoe_tensor *state_in, const clmoe_tensor *dy,
                                       clmoe_tensor *dx, clmoe_tensor *dw, clmoe_tensor *dstate_in)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_short_conv_backward is not written yet");
}

clmoe_status clmoe_short_conv_step(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *w,
                                   clmoe_tensor *state, clmoe_tensor *y)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_short_conv_step is not written yet");
}
