/* Inference: a model from a clmoe-train checkpoint (include/clmoe/generate.h), its weight
 * matrices fp32 or made bf16 from the start, the file's fp32 values rounded on the way in. */
#include "generate_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/safetensors.h"

/* The file's tensor for registry entry p, checked against the model's shape and dtype. */
static clmoe_status check_tensor(clmoe_st_file *f, const clmoe_config *cfg, const clmoe_param *p, char *name,
                                 size_t len)
{
  char want[96], got[160];
  snprintf(name, len, "%s/%s", p->trainable ? "param" : "buffer", p->name);
  if (!clmoe_st_has(f, name))
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: the checkpoint has no tensor '%s', which its config (%s) needs "
                        "(tensors of another model?)", clmoe_st_path(f), name, cfg->name);
  clmoe_st_info info;
  CLMOE_TRY(clmoe_st_info_of(f, name, &info));
  /* a bf16 matrix of an inference model is a training model's fp32 one in the file */
  const clmoe_st_dtype dtype = p->value->dtype == CLMOE_BF16 ? CLMOE_ST_F32 : clmoe__model_ckpt_dtype(p, p->value);
  if (info.dtype != dtype)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor '%s' is %s, but the model's is %s (a damaged or edited "
                        "checkpoint?)", clmoe_st_path(f), name, clmoe_st_dtype_name(info.dtype),
                        clmoe_st_dtype_name(dtype));
  int same = info.ndim == p->value->ndim;
  for (int d = 0; same && d < info.ndim; d++) /* a rank's experts: rows of the whole tensor */
    same = info.shape[d] == (d == 0 && p->rows ? p->global_rows : p->value->shape[d]);
  if (same) return CLMOE_OK;
  size_t o = (size_t)snprintf(got, sizeof got, "[");
  for (int d = 0; d < info.ndim && o < sizeof got - 24; d++)
    o += (size_t)snprintf(got + o, sizeof got - o, "%s%lld", d ? ", " : "", (long long)info.shape[d]);
  snprintf(got + o, sizeof got - o, "]");
  return clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor '%s' is %s, but its config (%s) needs %s (tensors of another "
                      "model?)", clmoe_st_path(f), name, got, cfg->name,
                      clmoe_tensor_describe(p->value, want, sizeof want));
}

/* Every "param/" and "buffer/" tensor of the file must belong to the model. */
static clmoe_status check_extra(clmoe_st_file *f, clmoe_params *ps)
{
  for (int i = 0; i < clmoe_st_count(f); i++) {
    clmoe_st_info info;
    clmoe_st_info_at(f, i, &info);
    const int is_param = !strncmp(info.name, "param/", 6), is_buffer = !strncmp(info.name, "buffer/", 7);
    if (!is_param && !is_buffer) continue; /* optimizer moments and anything else: not needed */
    const clmoe_param *p = clmoe_params_find(ps, info.name + (is_param ? 6 : 7));
    if (!p || p->trainable != is_param)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor '%s' belongs to no parameter of the model its config "
                          "describes", clmoe_st_path(f), info.name);
  }
  return CLMOE_OK;
}

/* The file's fp32 tensor `name` into the bf16 tensor t through one host buffer of it,
 * rounded to nearest even on the host (clmoe_tensor_write_f32: the rounding of
 * clmoe_gen_set_weights' device copy; a rank's rows, clmoe__model_params_load_rows, round
 * the same way). */
static clmoe_status load_bf16(clmoe_st_file *f, const char *name, clmoe_tensor *t)
{
  const int64_t n = clmoe_tensor_numel(t);
  float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
  if (!h) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (%lld values of '%s')", (long long)n, name);
  clmoe_status st = clmoe_st_read_f32(f, name, h, (size_t)n);
  if (st == CLMOE_OK && n) st = clmoe_tensor_write_f32(t, h);
  free(h);
  return st;
}

static clmoe_status load(clmoe_ctx *ctx, const char *path, clmoe_dist *dist, const clmoe_expert_map *map,
                         clmoe_dtype weights, clmoe_model **model, clmoe_ckpt_meta *meta)
{
  if (!model) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_load: model is NULL");
  *model = NULL;
  if (!ctx || !path) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_load: ctx and path are required");
  if (weights != CLMOE_F32 && weights != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_load_weights: weights must be fp32 or bf16");
  clmoe_st_file *f = NULL;
  CLMOE_TRY(clmoe_st_open(path, &f));
  clmoe_status st = CLMOE_OK;
  clmoe_model *m = NULL;
  clmoe_config cfg;
  char name[160];
  const char *text = clmoe_st_metadata(f, "config");
  CLMOE_TRY_GOTO(st, clmoe__model_ckpt_check_format(f), done);
  if (!text) {
    st = clmoe__error(CLMOE_ERR_FORMAT, "%s: no \"config\" metadata entry (not a clmoe-train checkpoint)", path);
    goto done;
  }
  st = clmoe_config_parse(text, path, &cfg);
  if (st != CLMOE_OK) {
    clmoe__append_error(" (the \"config\" metadata of checkpoint %s)", path);
    goto done;
  }
  clmoe_expert_map *even = NULL;
  if (dist && !map) CLMOE_TRY_GOTO(st, clmoe_expert_map_even((int)cfg.experts, clmoe_dist_size(dist), &even), done);
  st = clmoe__model_create_inference(ctx, &cfg, dist, map ? map : even, weights, &m);
  if (st != CLMOE_OK) {
    clmoe_expert_map_destroy(even);
    goto done;
  }
  m->owned_map = even;
  clmoe_params *ps = clmoe_model_params(m);
  /* Everything is checked before any data is read. */
  for (int i = 0; i < ps->n; i++) CLMOE_TRY_GOTO(st, check_tensor(f, &cfg, &ps->p[i], name, sizeof name), done);
  CLMOE_TRY_GOTO(st, check_extra(f, ps), done);
  for (int i = 0; i < ps->n; i++) {
    snprintf(name, sizeof name, "%s/%s", ps->p[i].trainable ? "param" : "buffer", ps->p[i].name);
    st = ps->p[i].rows                       ? clmoe__model_params_load_rows(f, name, &ps->p[i], ps->p[i].value)
         : ps->p[i].value->dtype == CLMOE_BF16 ? load_bf16(f, name, ps->p[i].value)
                                               : clmoe_st_load_into(f, name, ps->p[i].value);
    if (st != CLMOE_OK) {
      clmoe__append_error(" (loading '%s' from %s)", name, path);
      goto done;
    }
  }
  st = clmoe__model_ckpt_copy_meta(f, meta);
done:
  clmoe_st_close(f);
  if (st != CLMOE_OK) {
    clmoe_model_destroy(m);
    if (meta) clmoe_ckpt_meta_free(meta);
    return st;
  }
  *model = m;
  return CLMOE_OK;
}

clmoe_status clmoe_gen_load(clmoe_ctx *ctx, const char *path, clmoe_model **model, clmoe_ckpt_meta *meta)
{
  return load(ctx, path, NULL, NULL, CLMOE_F32, model, meta);
}

clmoe_status clmoe_gen_load_ep(clmoe_ctx *ctx, const char *path, clmoe_dist *dist, const clmoe_expert_map *map,
                               clmoe_model **model, clmoe_ckpt_meta *meta)
{
  if (!dist) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_load_ep: dist is NULL");
  return load(ctx, path, dist, map, CLMOE_F32, model, meta);
}

clmoe_status clmoe_gen_load_weights(clmoe_ctx *ctx, const char *path, clmoe_dist *dist, const clmoe_expert_map *map,
                                    clmoe_dtype weights, clmoe_model **model, clmoe_ckpt_meta *meta)
{
  return load(ctx, path, dist, dist ? map : NULL, weights, model, meta);
}
