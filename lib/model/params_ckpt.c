/* Checkpoints of the parameter registry (include/clmoe/params.h): safetensors files written through a
 * temporary file with their checksums, loaded only when every name, shape, dtype and the
 * metadata the registry reads fit (the data's checksums are verified as it is read); on
 * several ranks, the row-sharded parameters (one rank's experts) gathered into whole tensors
 * on rank 0, and each rank's rows picked out of them when loading. */
#include "dist/dist_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/dist.h"
#include "params_internal.h"
#include "clmoe/clmoe.h" /* clmoe_version */
#include "clmoe/safetensors.h"

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

/* A decimal integer in [min, max]: an optional '-' (when min < 0) and 1 to 19 digits, the
 * whole string (no spaces, '+', hex or exponent). 1 when it is one. */
static int parse_int(const char *s, int64_t min, int64_t max, int64_t *v)
{
  const char *d = s + (s[0] == '-' && min < 0);
  size_t n = strspn(d, "0123456789");
  if (n == 0 || n > 19 || d[n] != '\0') return 0;
  errno = 0;
  long long x = strtoll(s, NULL, 10);
  if (errno || x < min || x > max) return 0;
  *v = x;
  return 1;
}

clmoe_status clmoe_ckpt_meta_int(const clmoe_ckpt_meta *m, const char *key, int64_t min, int64_t max,
                                 int64_t *value)
{
  const char *s = m && key ? clmoe_ckpt_meta_get(m, key) : NULL;
  if (!s) return clmoe__error(CLMOE_ERR_FORMAT, "metadata '%s' is missing", key ? key : "(null)");
  if (!parse_int(s, min, max, value))
    return clmoe__error(CLMOE_ERR_FORMAT, "metadata '%s' is '%.40s', not an integer in [%lld, %lld]", key, s,
                        (long long)min, (long long)max);
  return CLMOE_OK;
}

/* The format of the checkpoints written now: 2 carries checksums; 1 (no "clmoe_format"
 * entry, a "clmoe_version" one) was written before checkpoints had them. */
#define CKPT_FORMAT "2"

clmoe_status clmoe__model_ckpt_check_format(clmoe_st_file *f)
{
  const char *format = clmoe_st_metadata(f, "clmoe_format");
  const int summed = clmoe_st_metadata(f, CLMOE_ST_CRC_METADATA) != NULL;
  if (!format) return CLMOE_OK; /* format 1, or not clmoe's: loaded as before, unchecked */
  if (strcmp(format, CKPT_FORMAT))
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: metadata 'clmoe_format' is '%.40s': this clmoe (%s) reads "
                        "checkpoints of format " CKPT_FORMAT " (a newer clmoe's, or a damaged header)",
                        clmoe_st_path(f), format, clmoe_version());
  if (!summed)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: metadata: a clmoe checkpoint of format " CKPT_FORMAT " without "
                        "its checksums ('%s', '%s'): they were removed or the header is damaged",
                        clmoe_st_path(f), CLMOE_ST_CRC_TENSORS, CLMOE_ST_CRC_METADATA);
  return CLMOE_OK;
}

clmoe_status clmoe__model_ckpt_copy_meta(clmoe_st_file *f, clmoe_ckpt_meta *meta)
{
  for (int i = 0; meta && i < clmoe_st_metadata_count(f); i++) {
    const char *k, *v;
    clmoe_st_metadata_at(f, i, &k, &v);
    if (strcmp(k, CLMOE_ST_CRC_TENSORS) && strcmp(k, CLMOE_ST_CRC_METADATA)) CLMOE_TRY(clmoe_ckpt_meta_set(meta, k, v));
  }
  return CLMOE_OK;
}

static const char *const kinds[3] = {"param", "adam_m", "adam_v"};


/* Elements per row of a row-sharded parameter. */
static int64_t row_elems(const clmoe_param *p)
{
  int64_t n = 1;
  for (int d = 1; d < p->value->ndim; d++) n *= p->value->shape[d];
  return n;
}

/* One row-sharded tensor t (a parameter's value or moment, [n, ...]) made whole on rank 0:
 * *whole ([global_rows, ...], malloc'ed) on rank 0, NULL elsewhere. */
static clmoe_status gather_rows(clmoe_dist *dist, const clmoe_param *p, const clmoe_tensor *t, float **whole)
{
  const int64_t n = t->shape[0], re = row_elems(p), G = p->global_rows;
  const int root = clmoe_dist_rank(dist) == 0, R = clmoe_dist_size(dist);
  *whole = NULL;
  float *mine = malloc((size_t)(n * re > 0 ? n * re : 1) * sizeof *mine);
  int64_t *counts = calloc((size_t)R, sizeof *counts);
  int32_t *ids = NULL;
  float *data = NULL, *out = NULL;
  clmoe_status st = mine && counts ? CLMOE_OK : clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "checkpoint: host rows");
  if (st == CLMOE_OK && n) st = clmoe_tensor_read(t, mine, (size_t)(n * re) * sizeof *mine);
  if (st != CLMOE_OK) goto done;
  int64_t total = n;
  counts[clmoe_dist_rank(dist)] = n;
  if (R > 1) CLMOE_TRY_GOTO(st, clmoe_dist_allreduce_sum_i64(dist, counts, (size_t)R), done);
  total = 0;
  for (int r = 0; r < R; r++) total += counts[r];
  if (root) {
    ids = malloc((size_t)(total > 0 ? total : 1) * sizeof *ids);
    data = malloc((size_t)(total * re > 0 ? total * re : 1) * sizeof *data);
    out = malloc((size_t)(G * re > 0 ? G * re : 1) * sizeof *out);
    if (!ids || !data || !out) st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "checkpoint: %s whole", p->name);
  }
  if (st != CLMOE_OK) goto done; /* (rank 0 only; the app aborts the job) */
  CLMOE_TRY_GOTO(st, clmoe__dist_gather_rows(dist, p->rows, mine, n, re, counts, ids, data,
                                             "checkpoint"), done);
  if (root) {
    char *have = calloc((size_t)(G > 0 ? G : 1), 1);
    if (!have) st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "checkpoint: row flags");
    for (int64_t i = 0; st == CLMOE_OK && i < total; i++) /* rank order: the lowest rank's copy wins */
      if (!have[ids[i]]) have[ids[i]] = 1, memcpy(out + (int64_t)ids[i] * re, data + i * re, (size_t)re * sizeof *out);
    for (int64_t g = 0; st == CLMOE_OK && g < G; g++)
      if (!have[g])
        st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "checkpoint: row %lld of '%s' is held by no rank",
                          (long long)g, p->name);
    free(have);
    if (st == CLMOE_OK) *whole = out, out = NULL;
  }
done:
  free(mine), free(counts), free(ids), free(data), free(out);
  return st;
}

/* The same status on every rank: the worst code wins; a rank that failed keeps its message,
 * the others get one naming the rank. */
static clmoe_status agree(clmoe_dist *dist, clmoe_status st, const char *what)
{
  if (clmoe_dist_size(dist) <= 1) return st;
  int64_t v[2] = {st != CLMOE_OK, st != CLMOE_OK ? clmoe_dist_rank(dist) : 0};
  if (clmoe_dist_allreduce_sum_i64(dist, v, 2) != CLMOE_OK) return CLMOE_ERR_MPI;
  if (st != CLMOE_OK) return st;
  if (v[0]) return clmoe__error(CLMOE_ERR_IO, "%s failed on another rank (rank %lld)", what, (long long)v[1]);
  return CLMOE_OK;
}

clmoe_status clmoe_params_save_dist(clmoe_params *ps, clmoe_dist *dist, const char *path,
                                    const clmoe_ckpt_meta *meta)
{
  if (ps->inference) return clmoe__model_params_inference_error("clmoe_params_save");
  const int root = clmoe_dist_rank(dist) == 0;
  clmoe_st_writer *w = NULL;
  clmoe_status st = root ? clmoe_st_writer_create(path, &w) : CLMOE_OK;
  char name[160], step[32];
  for (int i = 0; st == CLMOE_OK && i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!p->trainable) {
      snprintf(name, sizeof name, "buffer/%s", p->name);
      if (root) st = clmoe_st_writer_add(w, name, p->value);
      continue;
    }
    const clmoe_tensor *t[3] = {p->value, &p->m, &p->v};
    for (int k = 0; st == CLMOE_OK && k < 3; k++) {
      snprintf(name, sizeof name, "%s/%s", kinds[k], p->name);
      if (!p->rows) {
        if (root) st = clmoe_st_writer_add(w, name, t[k]);
        continue;
      }
      float *whole = NULL;
      st = gather_rows(dist, p, t[k], &whole);
      if (st == CLMOE_OK && root) {
        int64_t shape[8];
        memcpy(shape, p->value->shape, (size_t)p->value->ndim * sizeof *shape);
        shape[0] = p->global_rows;
        st = clmoe_st_writer_add_host(w, name, CLMOE_ST_F32, p->value->ndim, shape, whole);
      }
      free(whole);
    }
  }
  snprintf(step, sizeof step, "%lld", (long long)ps->step);
  if (root) { /* the registry's own entries last: a meta read from a checkpoint does not replace them */
    for (int i = 0; meta && st == CLMOE_OK && i < meta->n; i++)
      st = clmoe_st_writer_metadata(w, meta->key[i], meta->value[i]);
    if (st == CLMOE_OK) st = clmoe_st_writer_metadata(w, "clmoe_version", clmoe_version());
    if (st == CLMOE_OK) st = clmoe_st_writer_metadata(w, "clmoe_format", CKPT_FORMAT);
    if (st == CLMOE_OK) st = clmoe_st_writer_metadata(w, "optimizer_step", step);
    if (st != CLMOE_OK) clmoe_st_writer_discard(w);
    else st = clmoe_st_writer_finish(w);
  }
  return agree(dist, st, "writing the checkpoint");
}

clmoe_status clmoe_params_save(clmoe_params *ps, const char *path, const clmoe_ckpt_meta *meta)
{
  return clmoe_params_save_dist(ps, NULL, path, meta);
}

/* The dtype a registry tensor is stored as: its own (row-sharded ones whole, as F32). */
clmoe_st_dtype clmoe__model_ckpt_dtype(const clmoe_param *p, const clmoe_tensor *t)
{
  if (p->rows || t->dtype == CLMOE_F32) return CLMOE_ST_F32;
  return t->dtype == CLMOE_BF16 ? CLMOE_ST_BF16 : CLMOE_ST_I32;
}

/* The file's tensor `name` must exist with exactly t's shape (rows: global_rows rows) and
 * the dtype it is written as. */
static clmoe_status want_tensor(clmoe_st_file *f, const char *name, const clmoe_param *p, const clmoe_tensor *t,
                                int64_t rows)
{
  clmoe_st_info info;
  char desc[96];
  if (!clmoe_st_has(f, name))
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: the checkpoint has no tensor '%s' (a different model or "
                        "config?)", clmoe_st_path(f), name);
  CLMOE_TRY(clmoe_st_info_of(f, name, &info));
  const clmoe_st_dtype dtype = clmoe__model_ckpt_dtype(p, t);
  if (info.dtype != dtype)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor '%s' is %s, but the model's is %s (a damaged or edited "
                        "checkpoint?)", clmoe_st_path(f), name, clmoe_st_dtype_name(info.dtype),
                        clmoe_st_dtype_name(dtype));
  int same = info.ndim == t->ndim;
  for (int d = 0; same && d < t->ndim; d++) same = info.shape[d] == (d == 0 && rows >= 0 ? rows : t->shape[d]);
  if (!same)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor '%s' has a different shape than the model's %s%s",
                        clmoe_st_path(f), name, clmoe_tensor_describe(t, desc, sizeof desc),
                        rows >= 0 ? " (a rank's rows of the whole)" : "");
  return CLMOE_OK;
}

/* This rank's rows of a whole [global_rows, ...] fp32 tensor of the file into t (fp32, or
 * bf16: rounded to nearest even on the way, clmoe_tensor_write_f32). */
clmoe_status clmoe__model_params_load_rows(clmoe_st_file *f, const char *name,
                                           const clmoe_param *p, clmoe_tensor *t)
{
  const int64_t re = row_elems(p), G = p->global_rows, n = t->shape[0];
  float *whole = malloc((size_t)(G * re > 0 ? G * re : 1) * sizeof *whole);
  float *mine = malloc((size_t)(n * re > 0 ? n * re : 1) * sizeof *mine);
  clmoe_status st = whole && mine ? CLMOE_OK : clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "checkpoint: %s", name);
  if (st == CLMOE_OK) st = clmoe_st_read_f32(f, name, whole, (size_t)(G * re));
  for (int64_t i = 0; st == CLMOE_OK && i < n; i++)
    memcpy(mine + i * re, whole + (int64_t)p->rows[i] * re, (size_t)re * sizeof *mine);
  if (st == CLMOE_OK && n) st = clmoe_tensor_write_f32(t, mine);
  free(whole), free(mine);
  return st;
}

/* 1 when `name` is one the registry writes: "buffer/" and a buffer's name, or "param/",
 * "adam_m/" or "adam_v/" and a parameter's. */
static int registry_name(clmoe_params *ps, const char *name)
{
  const char *slash = strchr(name, '/');
  const clmoe_param *p = slash ? clmoe_params_find(ps, slash + 1) : NULL;
  if (!p) return 0;
  const size_t n = (size_t)(slash - name);
  if (!p->trainable) return n == 6 && !strncmp(name, "buffer", 6);
  for (int k = 0; k < 3; k++)
    if (strlen(kinds[k]) == n && !strncmp(name, kinds[k], n)) return 1;
  return 0;
}

static clmoe_status load(clmoe_params *ps, const char *path, clmoe_ckpt_meta *meta)
{
  clmoe_st_file *f = NULL;
  CLMOE_TRY(clmoe_st_open(path, &f));
  clmoe_status st = clmoe__model_ckpt_check_format(f);
  char name[160];
  int expected = 0;
  /* Everything is checked before anything is changed. */
  for (int i = 0; st == CLMOE_OK && i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!p->trainable) {
      snprintf(name, sizeof name, "buffer/%s", p->name);
      st = want_tensor(f, name, p, p->value, -1);
      expected++;
      continue;
    }
    const clmoe_tensor *t[3] = {p->value, &p->m, &p->v};
    for (int k = 0; st == CLMOE_OK && k < 3; k++) {
      snprintf(name, sizeof name, "%s/%s", kinds[k], p->name);
      st = want_tensor(f, name, p, t[k], p->rows ? p->global_rows : -1);
      expected++;
    }
  }
  for (int i = 0; st == CLMOE_OK && clmoe_st_count(f) != expected && i < clmoe_st_count(f); i++) {
    clmoe_st_info info;
    clmoe_st_info_at(f, i, &info);
    if (!registry_name(ps, info.name))
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor '%s' belongs to no parameter of this model", path, info.name);
  }
  const char *step = clmoe_st_metadata(f, "optimizer_step");
  int64_t s = 0;
  if (st == CLMOE_OK && (!step || !parse_int(step, 0, CLMOE_CKPT_MAX_STEP, &s)))
    st = clmoe__error(CLMOE_ERR_FORMAT, "%s: metadata 'optimizer_step' is %s%.40s%s, not an integer in [0, %lld]",
                      path, step ? "'" : "missing", step ? step : "", step ? "'" : "",
                      (long long)CLMOE_CKPT_MAX_STEP);
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
      st = p->rows ? clmoe__model_params_load_rows(f, name, p, t[k])
                   : clmoe_st_load_into(f, name, t[k]);
    }
  }
  if (st == CLMOE_OK) ps->step = s;
  if (st == CLMOE_OK) st = clmoe_params_refresh_bf16(ps);
  if (st == CLMOE_OK) st = clmoe__model_ckpt_copy_meta(f, meta);
  clmoe_st_close(f);
  return st;
}

clmoe_status clmoe_params_load_dist(clmoe_params *ps, clmoe_dist *dist, const char *path, clmoe_ckpt_meta *meta)
{
  if (ps->inference) return clmoe__model_params_inference_error("clmoe_params_load");
  return agree(dist, load(ps, path, meta), "loading the checkpoint");
}

clmoe_status clmoe_params_load(clmoe_params *ps, const char *path, clmoe_ckpt_meta *meta)
{
  return clmoe_params_load_dist(ps, NULL, path, meta);
}
