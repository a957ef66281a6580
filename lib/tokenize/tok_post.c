/* A tokenizer.json's post-processor, as the ids it puts around one sequence when Hugging
 * Face encodes with add_special_tokens=True: TemplateProcessing (its `single` template:
 * special tokens before and after $A), RobertaProcessing and BertProcessing (cls before,
 * sep after), ByteLevel (offsets only: no ids) and a Sequence of them (each wrapping what
 * the one before made). Another type is kept as a reason, given when a caller asks for the
 * special tokens (CLMOE_TOKENIZE_ADD_SPECIAL); encoding without them does not need it. */
#include "tokenize/tokenize_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct post_ids {
  int32_t *before, *after; /* malloc'd [nbefore], [nafter] */
  int nbefore, nafter;
} post_ids;

static clmoe_status push(int32_t **v, int *n, int32_t id)
{
  int32_t *p = realloc(*v, (size_t)(*n + 1) * sizeof *p);
  if (!p) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "tokenizer: out of host memory");
  p[(*n)++] = id, *v = p;
  return CLMOE_OK;
}

/* p's ids around what `inner` already puts around a sequence: p.before + inner.before, ...,
 * inner.after + p.after. */
static clmoe_status wrap(post_ids *inner, const post_ids *p)
{
  int32_t *b = malloc((size_t)(p->nbefore + inner->nbefore + 1) * sizeof *b);
  if (!b) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "tokenizer: out of host memory");
  if (p->nbefore) memcpy(b, p->before, (size_t)p->nbefore * sizeof *b);
  if (inner->nbefore) memcpy(b + p->nbefore, inner->before, (size_t)inner->nbefore * sizeof *b);
  free(inner->before);
  inner->before = b, inner->nbefore += p->nbefore;
  for (int k = 0; k < p->nafter; k++) CLMOE_TRY(push(&inner->after, &inner->nafter, p->after[k]));
  return CLMOE_OK;
}

static clmoe_status bad(const char *path, const char *where, const char *what)
{
  return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s %s", path, where, what);
}

/* ["text", id] of RobertaProcessing / BertProcessing. */
static clmoe_status pair_id(const char *path, const tj_node *p, const char *key, const char *where, int32_t *id)
{
  const tj_node *n = clmoe__tok_json_get(p, key);
  int64_t v;
  char at[96];
  snprintf(at, sizeof at, "%s.%s", where, key);
  if (!n || n->type != TJ_ARRAY || n->len != 2 || n->kid[0].type != TJ_STRING ||
      !clmoe__tok_json_int(&n->kid[1], 0, INT32_MAX - 1, &v))
    return bad(path, at, "must be [\"token\", id]");
  *id = (int32_t)v;
  return CLMOE_OK;
}

/* TemplateProcessing's `single`: special tokens (their ids from `special_tokens`) before
 * and after the one sequence $A. */
static clmoe_status template_ids(const char *path, const tj_node *p, const char *where, post_ids *out)
{
  const tj_node *single = clmoe__tok_json_get(p, "single"), *map = clmoe__tok_json_get(p, "special_tokens");
  char at[128];
  snprintf(at, sizeof at, "%s.single", where);
  if (!single || single->type != TJ_ARRAY) return bad(path, at, "must be an array of pieces");
  int seen_a = 0;
  for (size_t k = 0; k < single->len; k++) {
    const tj_node *piece = &single->kid[k], *seq = clmoe__tok_json_get(piece, "Sequence");
    const tj_node *sp = clmoe__tok_json_get(piece, "SpecialToken");
    snprintf(at, sizeof at, "%s.single[%zu]", where, k);
    if (seq) {
      const tj_node *id = clmoe__tok_json_get(seq, "id");
      if (!id || id->type != TJ_STRING || strcmp(id->str, "A") || seen_a)
        return bad(path, at, "must be the one sequence A of a single-sequence template");
      seen_a = 1;
      continue;
    }
    const tj_node *name = sp ? clmoe__tok_json_get(sp, "id") : NULL;
    if (!name || name->type != TJ_STRING) return bad(path, at, "is neither {\"Sequence\": ...} nor {\"SpecialToken\": ...}");
    const tj_node *tok = clmoe__tok_json_get(map, name->str), *ids = tok ? clmoe__tok_json_get(tok, "ids") : NULL;
    if (!ids || ids->type != TJ_ARRAY || !ids->len)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s: the special token '%.60s' has no ids in %s.special_tokens", path,
                          at, name->str, where);
    for (size_t j = 0; j < ids->len; j++) {
      int64_t v;
      if (!clmoe__tok_json_int(&ids->kid[j], 0, INT32_MAX - 1, &v))
        return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s.special_tokens['%.60s'].ids[%zu] must be an id", path, where,
                            name->str, j);
      CLMOE_TRY(seen_a ? push(&out->after, &out->nafter, (int32_t)v) : push(&out->before, &out->nbefore, (int32_t)v));
    }
  }
  snprintf(at, sizeof at, "%s.single", where);
  if (!seen_a) return bad(path, at, "has no sequence A");
  return CLMOE_OK;
}

/* One processor into *out (wrapping it); an unsupported type sets t->post_error. */
static clmoe_status processor(clmoe_tokenizer *t, const tj_node *p, const char *where, int depth, post_ids *out)
{
  const tj_node *ty = clmoe__tok_json_get(p, "type");
  char at[96];
  snprintf(at, sizeof at, "%s.type", where);
  if (!ty || ty->type != TJ_STRING) return bad(t->path, at, "must be a string");
  post_ids mine = {0};
  clmoe_status st = CLMOE_OK;
  if (!strcmp(ty->str, "ByteLevel")) return CLMOE_OK;
  if (!strcmp(ty->str, "Sequence") && depth == 0) {
    const tj_node *list = clmoe__tok_json_get(p, "processors");
    snprintf(at, sizeof at, "%s.processors", where);
    if (!list || list->type != TJ_ARRAY) return bad(t->path, at, "must be an array");
    for (size_t k = 0; k < list->len && st == CLMOE_OK; k++) {
      snprintf(at, sizeof at, "%s.processors[%zu]", where, k);
      st = processor(t, &list->kid[k], at, depth + 1, out);
    }
    return st;
  }
  if (!strcmp(ty->str, "TemplateProcessing")) {
    st = template_ids(t->path, p, where, &mine);
  } else if (!strcmp(ty->str, "RobertaProcessing") || !strcmp(ty->str, "BertProcessing")) {
    int32_t cls = 0, sep = 0;
    st = pair_id(t->path, p, "cls", where, &cls);
    if (st == CLMOE_OK) st = pair_id(t->path, p, "sep", where, &sep);
    if (st == CLMOE_OK) st = push(&mine.before, &mine.nbefore, cls);
    if (st == CLMOE_OK) st = push(&mine.after, &mine.nafter, sep);
  } else if (!t->post_error[0]) {
    snprintf(t->post_error, sizeof t->post_error, "%s: %s is '%.40s': the special tokens it adds are not "
             "supported (TemplateProcessing, RobertaProcessing, BertProcessing and ByteLevel are)", t->path, at, ty->str);
  }
  if (st == CLMOE_OK) st = wrap(out, &mine);
  free(mine.before), free(mine.after);
  return st;
}

clmoe_status clmoe__tok_load_post(clmoe_tokenizer *t, const tj_node *post)
{
  if (!post || post->type == TJ_NULL) return CLMOE_OK;
  if (post->type != TJ_OBJECT) return bad(t->path, "post_processor", "must be an object or null");
  post_ids ids = {0};
  clmoe_status st = processor(t, post, "post_processor", 0, &ids);
  for (int k = 0; st == CLMOE_OK && k < ids.nbefore + ids.nafter; k++) {
    const int32_t id = k < ids.nbefore ? ids.before[k] : ids.after[k - ids.nbefore];
    if (id >= t->vocab || !t->tok[id].present)
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: post_processor: id %d is not a token of the vocabulary", t->path, (int)id);
  }
  if (st == CLMOE_OK && ids.nbefore) { /* kept by the tokenizer (freed by keep on failure) */
    st = clmoe__tok_keep(t, ids.before);
    if (st == CLMOE_OK) t->post_before = ids.before, t->npost_before = ids.nbefore;
    ids.before = NULL;
  }
  if (st == CLMOE_OK && ids.nafter) {
    st = clmoe__tok_keep(t, ids.after);
    if (st == CLMOE_OK) t->post_after = ids.after, t->npost_after = ids.nafter;
    ids.after = NULL;
  }
  free(ids.before), free(ids.after);
  return st;
}
