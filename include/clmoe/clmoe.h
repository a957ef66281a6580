/* clmoe: hybrid linear-attention Mixture-of-Experts transformers on any OpenCL device.
 * The one header to include; the subsystem headers are installed beside it. */
#ifndef CLMOE_CLMOE_H
#define CLMOE_CLMOE_H

#include "status.h"
#include "runtime.h"
#include "program.h"
#include "tensor.h"
#include "gemm.h"
#include "ops.h"
#include "locality.h"
#include "kda.h"
#include "conv.h"
#include "safetensors.h"
#include "model_config.h"
#include "attn_res.h"
#include "kda_layer.h"
#include "data.h"
#include "tokenizer.h"
#include "params.h"
#include "model.h"
#include "mla.h"
#include "moe.h"
#include "generate.h"
#include "dist.h"
#include "expert_map.h"
#include "dist_exchange.h"
#include "moe_ep.h"
#include "dist_grads.h"
#include "tile.h"

#define CLMOE_VERSION_MAJOR 0
#define CLMOE_VERSION_MINOR 1
#define CLMOE_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif
/* The library's version string ("0.1.0"), for checking against the headers. */
CLMOE_API const char *clmoe_version(void);
#ifdef __cplusplus
}
#endif
#endif
