/* The parameter registry: gradients, AdamW, clipping, checkpoints (lib/params.h). */
#include "internal.h"

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
    clmoe_tensor_destroy(&ps->p[i].grad);
    clmoe_tensor_destroy(&ps->p[i].m);
    clmoe_tensor_destroy(&ps->p[i].v);
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
  if (!value || !value->ctx || (value->dtype != CLMOE_F32 && trainable) || !clmoe_tensor_is_contiguous(value))
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

int64_t clmoe_params_count(const clmoe_params *ps)
{
  int64_t n = 0;
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i].trainable) n += clmoe_tensor_numel(ps->p[i].value);
  return n;
}

/* Training calls on a registry made for inference (clmoe_model_create_inference). */
static clmoe_status inference_error(const char *call)
{
  return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT,
                      "%s: the parameters were created for inference: no gradients or AdamW moments", call);
}

clmoe_status clmoe_params_zero_grad(clmoe_params *ps)
{
  if (ps->inference) return inference_error("clmoe_params_zero_grad");
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i].trainable) CLMOE_TRY(clmoe_tensor_fill(&ps->p[i].grad, 0.0));
  return CLMOE_OK;
}

clmoe_status clmoe_params_grad_norm(clmoe_params *ps, double *norm)
{
  if (ps->inference) return inference_error("clmoe_params_grad_norm");
  *norm = 0.0;
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
  double s = 0.0;
  for (int i = 0; st == CLMOE_OK && i < ps->n; i++) s += host[i];
  *norm = sqrt(s);
  free(host);
  clmoe_tensor_destroy(&sums);
  return st;
}

clmoe_status clmoe_params_adamw(clmoe_params *ps, const clmoe_adamw *hp, double clip, double *norm_out)
{
  if (ps->inference) return inference_error("clmoe_params_adamw");
  double norm = 0.0;
  CLMOE_TRY(clmoe_params_grad_norm(ps, &norm));
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
    CLMOE_TRY(clmoe_adamw_step(ps->ctx, p->value, &p->grad, &p->m, &p->v, &h));
  }
  ps->step++;
  return CLMOE_OK;
}

/* ---- checkpoints ------------------------------------------------------------------------ */
clmoe_status clmoe_ckpt_meta_set(clmoe_ckpt_meta *m, const char *key, const char *value)
{
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->key[i], key)) {
      char *v = strdup(value);
      if (!v) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
      free(m->value[i]);
      m->value[i] = v;
      return CLMOE_OK;
    }
  if (m->n == 32) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "more than 32 checkpoint metadata entries");
  char *k = strdup(key), *v = strdup(value);
  if (!k || !v) {
    free(k), free(v);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  m->key[m->n] = k, m->value[m->n] = v;
  m->n++;
  return CLMOE_OK;
}

const char *clmoe_ckpt_meta_get(const clmoe_ckpt_meta *m, const char *key)
{
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->key[i], key)) return m->value[i];
  return NULL;
}

void clmoe_ckpt_meta_free(clmoe_ckpt_meta *m)
{
  for (int i = 0; i < m->n; i++) free(m->key[i]), free(m->value[i]);
  memset(m, 0, sizeof *m);
}

static const char *const kinds[3] = {"param", "adam_m", "adam_v"};

clmoe_status clmoe_params_save(clmoe_params *ps, const char *path, const clmoe_ckpt_meta *meta)
{
  if (ps->inference) return inference_error("clmoe_params_save");
  clmoe_st_writer *w = NULL;
  CLMOE_TRY(clmoe_st_writer_create(path, &w));
  clmoe_status st = CLMOE_OK;
  char name[160], step[32];
  for (int i = 0; st == CLMOE_OK && i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!p->trainable) {
      snprintf(name, sizeof name, "buffer/%s", p->name);
      st = clmoe_st_writer_add(w, name, p->value);
      continue;
    }
    const clmoe_tensor *t[3] = {p->value, &p->m, &p->v};
    for (int k = 0; st == CLMOE_OK && k < 3; k++) {
      snprintf(name, sizeof name, "%s/%s", kinds[k], p->name);
      st = clmoe_st_writer_add(w, name, t[k]);
    }
  }
  snprintf(step, sizeof step, "%lld", (long long)ps->step);
  if (st == CLMOE_OK) st = clmoe_st_writer_metadata(w, "clmoe_version", clmoe_version());
  if (st == CLMOE_OK) st = clmoe_st_writer_metadata(w, "optimizer_step", step);
  for (int i = 0; meta && st == CLMOE_OK && i < meta->n; i++)
    st = clmoe_st_writer_metadata(w, meta->key[i], meta->value[i]);
  if (st != CLMOE_OK) {
    clmoe_st_writer_discard(w);
    return st;
  }
  return clmoe_st_writer_finish(w);
}

/* The file's tensor `name` must exist with exactly t's shape. */
static clmoe_status want_tensor(clmoe_st_file *f, const char *name, const clmoe_tensor *t)
{
  clmoe_st_info info;
  char desc[96];
  if (!clmoe_st_has(f, name))
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: the checkpoint has no tensor '%s' (a different model or "
                        "config?)", clmoe_st_path(f), name);
  CLMOE_TRY(clmoe_st_info_of(f, name, &info));
  int same = info.ndim == t->ndim;
  for (int d = 0; same && d < t->ndim; d++) same = info.shape[d] == t->shape[d];
  if (!same)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor '%s' has a different shape than the model's %s",
                        clmoe_st_path(f), name, clmoe_tensor_describe(t, desc, sizeof desc));
  return CLMOE_OK;
}

clmoe_status clmoe_params_load(clmoe_params *ps, const char *path, clmoe_ckpt_meta *meta)
{
  if (ps->inference) return inference_error("clmoe_params_load");
  clmoe_st_file *f = NULL;
  CLMOE_TRY(clmoe_st_open(path, &f));
  clmoe_status st = CLMOE_OK;
  char name[160];
  int expected = 0;
  /* Everything is checked before anything is changed. */
  for (int i = 0; st == CLMOE_OK && i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!p->trainable) {
      snprintf(name, sizeof name, "buffer/%s", p->name);
      st = want_tensor(f, name, p->value);
      expected++;
      continue;
    }
    for (int k = 0; st == CLMOE_OK && k < 3; k++) {
      snprintf(name, sizeof name, "%s/%s", kinds[k], p->name);
      st = want_tensor(f, name, p->value);
      expected++;
    }
  }
  if (st == CLMOE_OK && clmoe_st_count(f) != expected) {
    for (int i = 0; i < clmoe_st_count(f); i++) {
      clmoe_st_info info;
      clmoe_st_info_at(f, i, &info);
      const char *slash = strchr(info.name, '/');
      if (!slash || !clmoe_params_find(ps, slash + 1)) {
        st = clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor '%s' belongs to no parameter of this model",
                          path, info.name);
        break;
      }
    }
  }
  const char *step = clmoe_st_metadata(f, "optimizer_step");
  char *end = NULL;
  long long s = step ? strtoll(step, &end, 10) : -1;
  if (st == CLMOE_OK && (!step || *end || s < 0))
    st = clmoe__error(CLMOE_ERR_FORMAT, "%s: metadata 'optimizer_step' is missing or malformed", path);
  for (int i = 0; st == CLMOE_OK && i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!p->trainable) {
      snprintf(name, sizeof name, "buffer/%s", p->name);
      st = clmoe_st_load_into(f, name, p->value);
      continue;
    }
    clmoe_tensor *t[3] = {p->value, &p->m, &p->v};
    for (int k = 0; st == CLMOE_OK && k < 3; k++) {
      snprintf(name, sizeof name, "%s/%s", kinds[k], p->name);
      st = clmoe_st_load_into(f, name, t[k]);
    }
  }
  if (st == CLMOE_OK) ps->step = s;
  for (int i = 0; meta && st == CLMOE_OK && i < clmoe_st_metadata_count(f); i++) {
    const char *k, *v;
    clmoe_st_metadata_at(f, i, &k, &v);
    st = clmoe_ckpt_meta_set(meta, k, v);
  }
  clmoe_st_close(f);
  return st;
}
