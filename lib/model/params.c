/* The parameter registry: gradients, AdamW, clipping, checkpoints (include/clmoe/params.h). */
#include "params_internal.h"

#include "clmoe/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void clmoe_params_init(clmoe_params *ps, clmoe_ctx *ctx)
{
  memset(ps, 0, sizeof *ps);
  ps->ctx = ctx;
}

void clmoe_params_destroy(clmoe_params *ps)
{
  for (int i = 0; i < ps->n; i++) {
    free(ps->p[i].rows);
    clmoe_tensor_destroy(&ps->p[i].grad);
    clmoe_tensor_destroy(&ps->p[i].m);
    clmoe_tensor_destroy(&ps->p[i].v);
    clmoe_tensor_destroy(&ps->p[i].bf16);
  }
  free(ps->p);
  memset(ps, 0, sizeof *ps);
}

clmoe_param *clmoe_params_find(clmoe_params *ps, const char *name)
{
  for (int i = 0; i < ps->n; i++)
    if (!strcmp(ps->p[i].name, name)) return &ps->p[i];
  return NULL;
}

static clmoe_status add(clmoe_params *ps, const char *name, clmoe_tensor *value, int decay, int trainable)
{
  char desc[96];
  if (!name || !*name || strlen(name) >= sizeof ps->p[0].name)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "parameter name '%s' is empty or longer than 95 characters",
                        name ? name : "");
  if (clmoe_params_find(ps, name))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "parameter '%s' is registered twice", name);
  /* an inference registry may hold bf16 weight matrices (nothing updates them) */
  const int bf16_ok = ps->inference && value && value->dtype == CLMOE_BF16;
  if (!value || !value->ctx || (value->dtype != CLMOE_F32 && trainable && !bf16_ok) ||
      !clmoe_tensor_is_contiguous(value))
    return clmoe__error(CLMOE_ERR_SHAPE, "parameter '%s': %s must be a created, contiguous %stensor", name,
                        value ? clmoe_tensor_describe(value, desc, sizeof desc) : "NULL",
                        trainable ? "f32 " : "");
  if (ps->n == ps->cap) {
    int cap = ps->cap ? 2 * ps->cap : 64;
    clmoe_param *grown = realloc(ps->p, (size_t)cap * sizeof *grown);
    if (!grown) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (parameters)");
    ps->p = grown;
    ps->cap = cap;
  }
  clmoe_param *p = &ps->p[ps->n];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->value = value;
  p->decay = decay;
  p->trainable = trainable;
  if (trainable && !ps->inference) {
    clmoe_tensor *t[3] = {&p->grad, &p->m, &p->v};
    for (int i = 0; i < 3; i++) {
      clmoe_status st = clmoe_tensor_zeros(ps->ctx, t[i], CLMOE_F32, value->ndim, value->shape);
      if (st != CLMOE_OK) {
        for (int j = 0; j < i; j++) clmoe_tensor_destroy(t[j]);
        return st;
      }
    }
  }
  ps->n++;
  return CLMOE_OK;
}

clmoe_status clmoe_params_add(clmoe_params *ps, const char *name, clmoe_tensor *value, int decay)
{
  return add(ps, name, value, decay, 1);
}

clmoe_status clmoe_params_add_buffer(clmoe_params *ps, const char *name, clmoe_tensor *value)
{
  return add(ps, name, value, 0, 0);
}

clmoe_status clmoe_params_add_rows(clmoe_params *ps, const char *name, clmoe_tensor *value, int decay,
                                   int64_t global_rows, const int32_t *rows)
{
  const int64_t n = value && value->ndim > 0 ? value->shape[0] : 0;
  if (!value || value->ndim < 1 || global_rows < n || (n > 0 && !rows))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "parameter '%s': rows of a [%lld, ...] tensor need a "
                        "tensor of at most that many rows and their indices", name ? name : "", (long long)global_rows);
  for (int64_t i = 0; i < n; i++)
    if (rows[i] < 0 || rows[i] >= global_rows)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "parameter '%s': row %lld is %d, outside [0, %lld)", name,
                          (long long)i, (int)rows[i], (long long)global_rows);
  int32_t *copy = malloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
  if (!copy) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (parameters)");
  if (n) memcpy(copy, rows, (size_t)n * sizeof *copy);
  clmoe_status st = add(ps, name, value, decay, 1);
  if (st != CLMOE_OK) {
    free(copy);
    return st;
  }
  clmoe_param *p = &ps->p[ps->n - 1];
  p->rows = copy;
  p->global_rows = global_rows;
  return CLMOE_OK;
}

clmoe_status clmoe_params_set_bf16_copy(clmoe_params *ps, clmoe_param *p, int on)
{
  return clmoe__params_set_bf16_copy(ps, p, on, 1);
}

clmoe_status clmoe__params_set_bf16_copy(clmoe_params *ps, clmoe_param *p, int on, int copy)
{
  if (!ps || !p || p < ps->p || p >= ps->p + ps->n)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_params_set_bf16_copy: not a parameter of this registry");
  if (!on) {
    clmoe_tensor_destroy(&p->bf16);
    memset(&p->bf16, 0, sizeof p->bf16);
    return CLMOE_OK;
  }
  if (!p->trainable)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_params_set_bf16_copy: '%s' is a buffer, not a parameter",
                        p->name);
  if (!p->bf16.buf && clmoe_tensor_numel(p->value) > 0)
    CLMOE_TRY(clmoe_tensor_create(ps->ctx, &p->bf16, CLMOE_BF16, p->value->ndim, p->value->shape));
  return p->bf16.buf && copy ? clmoe_tensor_copy(&p->bf16, p->value) : CLMOE_OK;
}

clmoe_status clmoe_params_refresh_bf16(clmoe_params *ps)
{
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i].bf16.buf) CLMOE_TRY(clmoe_tensor_copy(&ps->p[i].bf16, ps->p[i].value));
  return CLMOE_OK;
}

int64_t clmoe_params_count(const clmoe_params *ps)
{
  int64_t n = 0;
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i].trainable) n += clmoe_tensor_numel(ps->p[i].value);
  return n;
}

/* Training calls on a registry made for inference (clmoe_model_create_inference). */
clmoe_status clmoe__model_params_inference_error(const char *call)
{
  return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT,
                      "%s: the parameters were created for inference: no gradients or AdamW moments", call);
}

clmoe_status clmoe_params_zero_grad(clmoe_params *ps)
{
  if (ps->inference) return clmoe__model_params_inference_error("clmoe_params_zero_grad");
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i].trainable) CLMOE_TRY(clmoe_tensor_fill(&ps->p[i].grad, 0.0));
  return CLMOE_OK;
}

/* Sums of squares of the gradients, of whole and of row-sharded parameters apart. */
static clmoe_status grad_sumsq(clmoe_params *ps, double *whole, double *sharded)
{
  if (ps->inference) return clmoe__model_params_inference_error("clmoe_params_grad_norm");
  *whole = *sharded = 0.0;
  if (ps->n == 0) return CLMOE_OK;
  /* Each gradient's sum of squares into its own slot, one read, then an ordered sum. */
  clmoe_tensor sums;
  CLMOE_TRY(clmoe_tensor_zeros(ps->ctx, &sums, CLMOE_F32, 1, (int64_t[]){ps->n}));
  float *host = malloc((size_t)ps->n * sizeof *host);
  clmoe_status st = host ? CLMOE_OK : clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int i = 0; st == CLMOE_OK && i < ps->n; i++) {
    if (!ps->p[i].trainable || clmoe_tensor_numel(&ps->p[i].grad) == 0) continue;
    clmoe_tensor slot;
    st = clmoe_tensor_view(&sums, &slot, 1, (int64_t[]){1}, i);
    if (st == CLMOE_OK) st = clmoe_sum_squares(ps->ctx, &ps->p[i].grad, &slot);
  }
  if (st == CLMOE_OK) st = clmoe_tensor_read(&sums, host, (size_t)ps->n * sizeof *host);
  for (int i = 0; st == CLMOE_OK && i < ps->n; i++) {
    if (!ps->p[i].trainable || clmoe_tensor_numel(&ps->p[i].grad) == 0) continue;
    if (ps->p[i].rows) *sharded += host[i];
    else *whole += host[i];
  }
  free(host);
  clmoe_tensor_destroy(&sums);
  return st;
}

clmoe_status clmoe_params_grad_norm(clmoe_params *ps, double *norm)
{
  double w, r;
  *norm = 0.0;
  CLMOE_TRY(grad_sumsq(ps, &w, &r));
  *norm = sqrt(w + r);
  return CLMOE_OK;
}

clmoe_status clmoe_params_adamw_dist(clmoe_params *ps, clmoe_dist *dist, const clmoe_adamw *hp, double clip,
                                     double *norm_out)
{
  if (ps->inference) return clmoe__model_params_inference_error("clmoe_params_adamw");
  double sums[2];
  CLMOE_TRY(grad_sumsq(ps, &sums[0], &sums[1]));
  /* Whole gradients are the same on every rank (reduced already), but each rank's device
   * sums their squares with its own rounding: rank 0's sum counts, so that every rank clips
   * by the same factor. The shards add up. */
  if (clmoe_dist_size(dist) > 1) {
    if (clmoe_dist_rank(dist) != 0) sums[0] = 0.0;
    CLMOE_TRY(clmoe_dist_allreduce_sum_f64(dist, sums, 2));
  }
  const double norm = sqrt(sums[0] + sums[1]);
  if (norm_out) *norm_out = norm;
  if (!isfinite(norm))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "the gradient norm is %g: the step was not taken", norm);
  clmoe_adamw h = *hp;
  h.step = ps->step + 1;
  h.grad_scale = clip > 0.0 && norm > clip ? (float)(clip / norm) : 1.0f;
  const float wd = hp->weight_decay;
  for (int i = 0; i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!p->trainable) continue;
    h.weight_decay = p->decay ? wd : 0.0f;
    if (p->bf16.buf) CLMOE_TRY(clmoe_adamw_step_bf16(ps->ctx, p->value, &p->grad, &p->m, &p->v, &h, &p->bf16));
    else CLMOE_TRY(clmoe_adamw_step(ps->ctx, p->value, &p->grad, &p->m, &p->v, &h));
  }
  ps->step++;
  return CLMOE_OK;
}

clmoe_status clmoe__params_adamw_nowait(clmoe_params *ps, const clmoe_adamw *hp, double clip, clmoe_tensor *norm)
{
  if (ps->inference) return clmoe__model_params_inference_error("clmoe_params_adamw");
  if (!ps->ctx->caps.has_fp64)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "the device clip needs fp64 (its norm sums in double as the host's)");
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i].trainable && ps->p[i].rows)
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "the device clip sums no row-sharded gradient ('%s')", ps->p[i].name);
  if (ps->n == 0) return clmoe__error(CLMOE_ERR_UNSUPPORTED, "no parameters");
  /* sums [n] as grad_sumsq's (zero where nothing is summed: adding 0 keeps the double sum),
   * then the norm and scale [1] on the device, and the steps reading the scale there. */
  clmoe_tensor sums = {0}, scale = {0};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe_tensor_zeros(ps->ctx, &sums, CLMOE_F32, 1, (int64_t[]){ps->n}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ps->ctx, &scale, CLMOE_F32, 1, (int64_t[]){1}), done);
  for (int i = 0; i < ps->n; i++) {
    if (!ps->p[i].trainable || clmoe_tensor_numel(&ps->p[i].grad) == 0) continue;
    clmoe_tensor slot;
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&sums, &slot, 1, (int64_t[]){1}, i), done);
    CLMOE_TRY_GOTO(st, clmoe_sum_squares(ps->ctx, &ps->p[i].grad, &slot), done);
  }
  CLMOE_TRY_GOTO(st, clmoe_grad_clip_scale(ps->ctx, &sums, clip > 0.0 ? clip : 0.0, norm, &scale), done);
  clmoe_adamw h = *hp;
  h.step = ps->step + 1;
  h.grad_scale = 1.0f; /* unused: the kernels read scale */
  for (int i = 0; i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!p->trainable) continue;
    h.weight_decay = p->decay ? hp->weight_decay : 0.0f;
    CLMOE_TRY_GOTO(st, clmoe_adamw_step_scaled(ps->ctx, p->value, &p->grad, &p->m, &p->v, &h, &scale,
                                               p->bf16.buf ? &p->bf16 : NULL), done);
  }
  ps->step++; /* taken back by the reader of the norm when it is not finite */
done:
  clmoe_tensor_destroy(&sums);
  clmoe_tensor_destroy(&scale);
  return st;
}

clmoe_status clmoe_params_adamw(clmoe_params *ps, const clmoe_adamw *hp, double clip, double *norm_out)
{
  return clmoe_params_adamw_dist(ps, NULL, hp, clip, norm_out);
}

int clmoe__param_is_weight_matrix(const clmoe_param *p)
{
  if (!p->trainable || !p->value->buf || p->value->dtype != CLMOE_F32) return 0;
  const char *base = strrchr(p->name, '/');
  base = base ? base + 1 : p->name;
  if (!strcmp(p->name, "head")) return p->value->ndim == 2;
  if (strncmp(base, "w_", 2)) return 0;
  return p->value->ndim == 2 || (p->value->ndim == 3 && strstr(p->name, "/ffn/") != NULL);
}
