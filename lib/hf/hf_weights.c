/* The weight files of a checkpoint directory: model.safetensors.index.json and the shards
 * it names, or one model.safetensors. Every tensor of every file goes into one table sorted
 * by name, so the loader finds a tensor by name and can tell at the end which ones no
 * parameter used. The index must agree with the shards: a shard it names must exist, hold
 * every tensor the index gives it, and no two files may hold the same name. */
#include "hf_internal.h"
#include "tokenize/tokenize_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int by_name(const void *a, const void *b)
{
  return strcmp(((const hf_tensor *)a)->name, ((const hf_tensor *)b)->name);
}

static clmoe_status add_file(hf_weights *w, const char *file)
{
  clmoe_st_file **files = realloc(w->files, (size_t)(w->nfiles + 1) * sizeof *files);
  if (!files) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", file);
  w->files = files;
  CLMOE_TRY(clmoe_st_open(file, &w->files[w->nfiles]));
  const int f = w->nfiles++;
  const int count = clmoe_st_count(w->files[f]);
  hf_tensor *t = realloc(w->t, (size_t)(w->n + count + 1) * sizeof *t);
  if (!t) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", file);
  w->t = t;
  for (int i = 0; i < count; i++) {
    clmoe_st_info info;
    clmoe_st_info_at(w->files[f], i, &info);
    w->t[w->n++] = (hf_tensor){info.name, f, 0};
  }
  return CLMOE_OK;
}

/* The index's weight_map: each distinct shard opened once, then every name it maps checked
 * to be in the shard it names. */
static clmoe_status open_index(hf_weights *w, const char *index)
{
  tj_doc *doc;
  const tj_node *root;
  CLMOE_TRY(clmoe__tok_json_read(index, &doc, &root));
  clmoe_status st = CLMOE_OK;
  const tj_node *map = clmoe__tok_json_get(root, "weight_map");
  if (!map || map->type != TJ_OBJECT || map->len == 0) {
    st = clmoe__error(CLMOE_ERR_FORMAT, "%s: weight_map: absent, empty or not an object", index);
    goto done;
  }
  char path[8300];
  for (size_t i = 0; i < map->len && st == CLMOE_OK; i++) {
    const tj_node *shard = &map->kid[i];
    if (shard->type != TJ_STRING || !shard->len || strchr(shard->str, '/')) {
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: weight_map.%s: not the name of a file in the directory", index,
                        map->kid[i].key);
      break;
    }
    int seen = 0; /* shards are few: compare with the files opened so far */
    snprintf(path, sizeof path, "%s/%s", w->dir, shard->str);
    for (int f = 0; f < w->nfiles && !seen; f++) seen = !strcmp(clmoe_st_path(w->files[f]), path);
    if (seen) continue;
    struct stat sb;
    if (stat(path, &sb) != 0) {
      st = clmoe__error(CLMOE_ERR_IO, "%s: shard %s (of tensor %s) is missing: %s", index, shard->str,
                        map->kid[i].key, path);
      break;
    }
    st = add_file(w, path);
  }
  if (st != CLMOE_OK) goto done;
  qsort(w->t, (size_t)w->n, sizeof *w->t, by_name);
  for (int i = 1; i < w->n && st == CLMOE_OK; i++)
    if (!strcmp(w->t[i].name, w->t[i - 1].name))
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor %s is in two shards (%s and %s)", index, w->t[i].name,
                        clmoe_st_path(w->files[w->t[i - 1].file]), clmoe_st_path(w->files[w->t[i].file]));
  for (size_t i = 0; i < map->len && st == CLMOE_OK; i++) {
    const hf_tensor *t = clmoe__hf_weights_find(w, map->kid[i].key);
    snprintf(path, sizeof path, "%s/%s", w->dir, map->kid[i].str);
    if (!t || strcmp(clmoe_st_path(w->files[t->file]), path))
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor %s is not in shard %s, where weight_map puts it", index,
                        map->kid[i].key, map->kid[i].str);
  }
done:
  clmoe__tok_json_free(doc);
  return st;
}

clmoe_status clmoe__hf_weights_open(const char *dir, hf_weights *w)
{
  memset(w, 0, sizeof *w);
  if (strlen(dir) >= sizeof w->dir) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: path too long", dir);
  snprintf(w->dir, sizeof w->dir, "%s", dir);
  char index[4200], single[4200];
  snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
  snprintf(single, sizeof single, "%s/model.safetensors", dir);
  struct stat sb;
  clmoe_status st;
  if (stat(index, &sb) == 0) st = open_index(w, index);
  else if (stat(single, &sb) == 0) {
    st = add_file(w, single);
    if (st == CLMOE_OK) qsort(w->t, (size_t)w->n, sizeof *w->t, by_name);
  } else
    st = clmoe__error(CLMOE_ERR_IO, "%s: no weights: neither model.safetensors.index.json nor model.safetensors",
                      dir);
  if (st != CLMOE_OK) clmoe__hf_weights_close(w);
  return st;
}

void clmoe__hf_weights_close(hf_weights *w)
{
  for (int i = 0; i < w->nfiles; i++) clmoe_st_close(w->files[i]);
  free(w->files);
  free(w->t);
  w->files = NULL, w->t = NULL, w->nfiles = w->n = 0;
}

hf_tensor *clmoe__hf_weights_find(hf_weights *w, const char *name)
{
  hf_tensor key = {name, 0, 0};
  return w->n ? bsearch(&key, w->t, (size_t)w->n, sizeof *w->t, by_name) : NULL;
}

clmoe_st_file *clmoe__hf_weights_file(const hf_weights *w, const hf_tensor *t) { return w->files[t->file]; }

const hf_tensor *clmoe__hf_weights_unused(const hf_weights *w)
{
  for (int i = 0; i < w->n; i++)
    if (!w->t[i].used) return &w->t[i];
  return NULL;
}
