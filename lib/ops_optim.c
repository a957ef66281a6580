/* AdamW (to be written). */
#include "internal.h"

clmoe_status clmoe_adamw_step(clmoe_ctx *ctx, clmoe_tensor *param, const clmoe_tensor *grad,
                              clmoe_tensor *m, clmoe_tensor *v, const clmoe_adamw *hp)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_adamw_step is not written yet");
}
