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
#include "hf.h"
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
/* What two sites compare to tell whether they run the same build: "key: value" lines,
 * each ending in a newline, in this order:
 *   commit          `git describe --always --dirty` of the sources at build time (from a
 *                   release tarball, the commit it was made from), else "unknown"
 *   configure       configure's arguments
 *   compiler        the compiler, its version and the command and flags configure used
 *   opencl-headers  the OpenCL headers' version and CL_TARGET_OPENCL_VERSION
 *   opencl-loader   the ICD loader this process runs with, where it says
 *   mpi             the MPI built with and the one this process runs with, or "none"
 *   clblast         CLBlast's version (pkg-config's, at configure time)
 *   hwloc           hwloc's version and API built with, and the API this process runs with
 * The run-time versions are asked on the first call (before MPI_Init too); the text is
 * the library's, valid for the life of the process. */
CLMOE_API const char *clmoe_build_info(void);
#ifdef __cplusplus
}
#endif
#endif
