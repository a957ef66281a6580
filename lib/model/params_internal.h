/* Declarations shared by the parameter registry's files (params.c, params_ckpt.c) and the
 * code that loads checkpoints into a registry (generate_load.c); not installed. */
#ifndef CLMOE_PARAMS_INTERNAL_H
#define CLMOE_PARAMS_INTERNAL_H

#include "runtime/internal.h"

#include "clmoe/params.h"
#include "clmoe/safetensors.h"

/* 1 for an fp32 parameter whose value only feeds products as a weight matrix, the ones an
 * inference model may store in bf16 (clmoe_gen_set_weights, clmoe_hf_load_weights): the
 * output head, a layer's 2-D "w_*" (KDA, MLA, dense FFN, router, latent projections, shared
 * experts) and the routed expert stacks [E, ...]. Not the embedding (a row lookup), gains,
 * biases, A_log, dt_bias or the short convolutions' taps (params.c). */
int clmoe__param_is_weight_matrix(const clmoe_param *p);

/* The error of a training call on a registry made for inference (params.c, params_ckpt.c). */
clmoe_status clmoe__model_params_inference_error(const char *call);

/* Checkpoint files (params_ckpt.c, also read by generate_load.c). The "clmoe_format"
 * metadata: absent (format 1, before checksums, or not clmoe's: fine), "2" with the file's
 * checksums, anything else refused. */
clmoe_status clmoe__model_ckpt_check_format(clmoe_st_file *f);
/* The dtype p's tensor t (value or moment) is written as. */
clmoe_st_dtype clmoe__model_ckpt_dtype(const clmoe_param *p, const clmoe_tensor *t);
/* Every metadata entry of f but the checksums into meta (NULL: nothing). */
clmoe_status clmoe__model_ckpt_copy_meta(clmoe_st_file *f, clmoe_ckpt_meta *meta);

/* A row-sharded parameter's rows (p->rows) of the file's whole [global_rows, ...] tensor
 * `name` into t, this rank's part of it [n, ...] (params_ckpt.c). */
clmoe_status clmoe__model_params_load_rows(clmoe_st_file *f, const char *name,
                                           const clmoe_param *p, clmoe_tensor *t);

/* params.c: the optimizer step with the clip's scale computed and applied on the device;
 * the norm's bits go to norm (i32 [2]). CLMOE_ERR_UNSUPPORTED (nothing enqueued) where the
 * device has no fp64 or a parameter is row-sharded: the caller takes clmoe_params_adamw. */
clmoe_status clmoe__params_adamw_nowait(clmoe_params *ps, const clmoe_adamw *hp, double clip, clmoe_tensor *norm);

/* clmoe_params_set_bf16_copy; copy 0: the copy is made but not filled (the values are
 * not written yet: whatever writes them refreshes the copies, clmoe_params_refresh_bf16). */
clmoe_status clmoe__params_set_bf16_copy(clmoe_params *ps, clmoe_param *p, int on, int copy);

#endif
