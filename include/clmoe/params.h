/* The trainable parameters of a model in one registry: their gradients, AdamW moments,
 * global gradient-norm clipping, and checkpoints.
 *
 * A model registers each parameter tensor it owns under a unique name (with whether weight
 * decay applies) and each non-trainable state tensor that must survive a restart (e.g. the
 * MoE balancing biases) as a buffer. The registry creates a gradient and the two AdamW
 * moments per parameter.
 *
 * Checkpoints are safetensors files: "param/NAME", "adam_m/NAME", "adam_v/NAME",
 * "buffer/NAME", plus metadata (the config text, the step, the data position, ...) and the
 * registry's own: "clmoe_version", "clmoe_format" ("2") and "optimizer_step". They are
 * written to a temporary file, fsynced and renamed (never a half-written file), with the
 * CRC-32C checksums of every tensor and of the metadata (include/clmoe/safetensors.h).
 * Loading checks every name, shape and dtype against the registry, "optimizer_step" (an
 * integer in [0, CLMOE_CKPT_MAX_STEP]) and the checksums: a missing, extra, mis-shaped or
 * relabelled tensor, a truncated, damaged or edited file, is an error naming the file and
 * the tensor or metadata entry. Nothing is changed unless the header fits; a tensor whose
 * data fails its checksum is found as it is read, and leaves the registry partly loaded
 * (the call fails: do not use the registry then). A checksum failure is CLMOE_ERR_DAMAGED
 * (the file was damaged or edited: copy it again), the only failure that may leave the
 * registry changed; the other refusals are CLMOE_ERR_FORMAT (or _IO) and change nothing. A checkpoint of format 2 without its
 * checksums is refused; one of format 1 (no "clmoe_format": written by clmoe before
 * checkpoints had checksums) loads unchecked, and the next checkpoint saved has them. */
#ifndef CLMOE_PARAMS_H
#define CLMOE_PARAMS_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clmoe_param {
  char name[96];
  clmoe_tensor *value; /* owned by the model */
  clmoe_tensor grad, m, v;
  int decay;           /* 1: decoupled weight decay applies */
  int trainable;       /* 0: a buffer (no gradient, no moments) */
  /* Row-sharded (expert parallelism): value holds rows rows[0..shape[0]) of a [global_rows,
   * ...] tensor that the ranks share out; NULL for a whole tensor. */
  int32_t *rows;
  int64_t global_rows;
  /* bf16 training (clmoe_precision): value rounded to bf16, the weights the step's products
   * multiply with, rewritten by every AdamW step and by clmoe_params_refresh_bf16; buf NULL
   * when the parameter has none. Never saved: checkpoints hold the fp32 value. */
  clmoe_tensor bf16;
} clmoe_param;

typedef struct clmoe_params {
  clmoe_ctx *ctx;
  clmoe_param *p;
  int n, cap;
  int64_t step; /* optimizer steps taken (AdamW's t - 1) */
  int inference; /* 1: parameters get no gradient or moments (set before the first add) */
} clmoe_params;

CLMOE_API void clmoe_params_init(clmoe_params *ps, clmoe_ctx *ctx);
CLMOE_API void clmoe_params_destroy(clmoe_params *ps);
/* Registers a parameter (zeroed gradient and moments are created) or a buffer. Names are
 * unique; "prefix/name" by convention ("layer3/kda/w_q"). */
CLMOE_API clmoe_status clmoe_params_add(clmoe_params *ps, const char *name, clmoe_tensor *value,
                                        int decay);
CLMOE_API clmoe_status clmoe_params_add_buffer(clmoe_params *ps, const char *name,
                                               clmoe_tensor *value);
/* Registers a parameter that holds rows `rows` (value->shape[0] of them, copied) of a
 * [global_rows, ...] tensor: one rank's experts. Checkpoints store the whole tensor (see
 * clmoe_params_save_dist). */
CLMOE_API clmoe_status clmoe_params_add_rows(clmoe_params *ps, const char *name,
                                             clmoe_tensor *value, int decay, int64_t global_rows,
                                             const int32_t *rows);
/* Gives trainable parameter p a bf16 copy of its value (on = 1, filled now) or releases it
 * (on = 0). */
CLMOE_API clmoe_status clmoe_params_set_bf16_copy(clmoe_params *ps, clmoe_param *p, int on);
/* Rewrites every bf16 copy from its value: after the values were written other than by
 * clmoe_params_adamw (initialisation, a direct write; clmoe_params_load and the replica
 * synchronisation do it themselves). */
CLMOE_API clmoe_status clmoe_params_refresh_bf16(clmoe_params *ps);
/* Looks a parameter up by name (NULL when absent). */
CLMOE_API clmoe_param *clmoe_params_find(clmoe_params *ps, const char *name);
/* Number of trainable scalars. */
CLMOE_API int64_t clmoe_params_count(const clmoe_params *ps);

CLMOE_API clmoe_status clmoe_params_zero_grad(clmoe_params *ps);
/* sqrt(sum of every gradient's squares), summed in registration order (deterministic). */
CLMOE_API clmoe_status clmoe_params_grad_norm(clmoe_params *ps, double *norm);
/* One AdamW step over every parameter (hp->step is ignored: the registry counts steps;
 * a parameter's bf16 copy is written in the same kernel, clmoe_adamw_step_bf16);
 * with clip > 0, gradients are scaled by min(1, clip / norm) first. *norm (may be NULL)
 * receives the norm before clipping. */
CLMOE_API clmoe_status clmoe_params_adamw(clmoe_params *ps, const clmoe_adamw *hp, double clip,
                                          double *norm);
/* The same on the ranks of dist (NULL: one rank): whole gradients must already agree (the
 * data-parallel all-reduce); the norm adds every rank's row-sharded gradients (each row on
 * exactly one rank: no replicas in training). Collective. */
struct clmoe_dist;
CLMOE_API clmoe_status clmoe_params_adamw_dist(clmoe_params *ps, struct clmoe_dist *dist,
                                               const clmoe_adamw *hp, double clip, double *norm);

/* Checkpoint metadata: up to 32 key-value strings stored beside the tensors (owned copies;
 * zero-initialise, release with clmoe_ckpt_meta_free). */
typedef struct clmoe_ckpt_meta {
  int n;
  char *key[32], *value[32];
} clmoe_ckpt_meta;
CLMOE_API clmoe_status clmoe_ckpt_meta_set(clmoe_ckpt_meta *m, const char *key, const char *value);
CLMOE_API const char *clmoe_ckpt_meta_get(const clmoe_ckpt_meta *m, const char *key);
CLMOE_API void clmoe_ckpt_meta_free(clmoe_ckpt_meta *m);
/* The value of key as a decimal integer in [min, max], the whole string (no sign unless
 * min < 0, no spaces, hex or exponent): CLMOE_ERR_FORMAT naming the key when it is missing
 * or is not one. */
CLMOE_API clmoe_status clmoe_ckpt_meta_int(const clmoe_ckpt_meta *m, const char *key, int64_t min,
                                           int64_t max, int64_t *value);
/* The most optimizer (and training) steps a checkpoint may record: 2^40. */
#define CLMOE_CKPT_MAX_STEP ((int64_t)1 << 40)

CLMOE_API clmoe_status clmoe_params_save(clmoe_params *ps, const char *path,
                                         const clmoe_ckpt_meta *meta);
/* Loads into the registered tensors; meta (may be NULL) receives every metadata entry but
 * the checksums. */
CLMOE_API clmoe_status clmoe_params_load(clmoe_params *ps, const char *path, clmoe_ckpt_meta *meta);

/* The same over the ranks of dist (NULL: one rank), for a model whose ranks hold the same
 * whole parameters and each its own rows of the row-sharded ones. The file is the one a
 * single rank writes (whole tensors), so a checkpoint written by N ranks loads on M ranks
 * or on one: rank 0 gathers every sharded tensor's rows (MPI_Gatherv, one tensor at a time;
 * a row held by several ranks is taken from the lowest) and writes the file; every row must
 * be held somewhere. Loading: every rank reads the file (a shared file system) and keeps its
 * rows. Collective; the status is the same on every rank. */
CLMOE_API clmoe_status clmoe_params_save_dist(clmoe_params *ps, struct clmoe_dist *dist,
                                              const char *path, const clmoe_ckpt_meta *meta);
CLMOE_API clmoe_status clmoe_params_load_dist(clmoe_params *ps, struct clmoe_dist *dist,
                                              const char *path, clmoe_ckpt_meta *meta);

#ifdef __cplusplus
}
#endif
#endif
