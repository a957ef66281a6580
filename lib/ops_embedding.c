/* Embedding lookup (to be written). */
#include "internal.h"

clmoe_status clmoe_embedding(clmoe_ctx *ctx, const clmoe_tensor *table, const clmoe_tensor *ids,
                             clmoe_tensor *out)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_embedding is not written yet");
}

clmoe_status clmoe_embedding_backward(clmoe_ctx *ctx, const clmoe_tensor *ids,
                                      const clmoe_tensor *dout, clmoe_tensor *dtable)
{
  return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_embedding_backward is not written yet");
}
