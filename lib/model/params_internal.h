/* Declarations shared by the parameter registry's files (params.c, params_ckpt.c) and the
 * code that loads checkpoints into a registry (generate_load.c); not installed. */
#ifndef CLMOE_PARAMS_INTERNAL_H
#define CLMOE_PARAMS_INTERNAL_H

#include "runtime/internal.h"

#include "clmoe/params.h"
#include "clmoe/safetensors.h"

/* The error of a training call on a registry made for inference (params.c, params_ckpt.c). */
clmoe_status clmoe__model_params_inference_error(const char *call);

/* A row-sharded parameter's rows (p->rows) of the file's whole [global_rows, ...] tensor
 * `name` into t, this rank's part of it [n, ...] (params_ckpt.c). */
clmoe_status clmoe__model_params_load_rows(clmoe_st_file *f, const char *name,
                                           const clmoe_param *p, clmoe_tensor *t);

#endif
