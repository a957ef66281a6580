/* KDA backward (to be written). */
#include "kda_internal.h"

clmoe_status clmoe_kda_backward(clmoe_ctx *ctx, const clmoe_kda_options *opts,
                                const clmoe_kda_inputs *in, const clmoe_tensor *dout,
                                const clmoe_tensor *dfinal_state, const clmoe_kda_grads *grads)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_kda_backward is not written yet");
}
