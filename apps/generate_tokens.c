/* clmoe-generate's prompts and outputs as tokens (generate_app.h): bytes for the byte-level
 * models clmoe-train makes, ids given with --prompt-ids, or text through a tokenizer
 * (--tokenizer: Hugging Face tokenizer.json or tiktoken, lib/tokenize); the generated ids
 * decoded back to text; the prompts' last-position logits written for comparisons. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "generate_app.h"

int32_t *gen_parse_ids(const char *flag, const char *list, int64_t *n)
{
  int64_t cap = 16;
  int32_t *ids = malloc((size_t)cap * sizeof *ids);
  if (!ids) app_die(CLMOE_ERR_OUT_OF_MEMORY, "prompt ids");
  *n = 0;
  for (const char *p = list;;) {
    const size_t len = strcspn(p, ",");
    if (len == 0 || len > 10 || strspn(p, "0123456789") != len)
      app_usage_error("%s: '%s': expected comma-separated token ids (decimal, >= 0)", flag, list);
    const long long v = strtoll(p, NULL, 10);
    if (v > INT32_MAX) app_usage_error("%s: id %lld is too large", flag, v);
    if (*n == cap) {
      int32_t *grown = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
      if (!grown) app_die(CLMOE_ERR_OUT_OF_MEMORY, "prompt ids");
      ids = grown;
    }
    ids[(*n)++] = (int32_t)v;
    if (!p[len]) break;
    p += len + 1;
  }
  return ids;
}

/* The ids of text prompt p through tok, in a malloc'ed array: with the special tokens the
 * tokenizer's post-processor puts around a text (a BOS), as transformers' tokenizer(text). */
static int32_t *encode(const gen_opts *o, int p, clmoe_tokenizer *tok, int64_t *n)
{
  clmoe_tokens t = {0};
  const unsigned flags = CLMOE_TOKENIZE_SPECIAL | (o->no_add_special ? 0 : CLMOE_TOKENIZE_ADD_SPECIAL);
  if (clmoe_tokenizer_encode(tok, o->prompt[p], (size_t)o->prompt_len[p], flags, &t) != CLMOE_OK)
    app_fail(APP_EXIT_FAILED, "prompt %d (%s): %s%s", p + 1, o->prompt_from[p], clmoe_last_error(),
             o->no_add_special ? "" : " (--no-add-special encodes without them)");
  if (t.n == 0) app_fail(APP_EXIT_USAGE, "prompt %d (%s) encodes to no token", p + 1, o->prompt_from[p]);
  *n = (int64_t)t.n;
  return t.ids; /* (clmoe_tokens_free frees ids with free()) */
}

int32_t **gen_prompt_tokens(const gen_opts *o, clmoe_tokenizer *tok, int64_t V, int64_t *lens)
{
  int32_t **t = calloc((size_t)o->nprompts, sizeof *t);
  if (!t) app_die(CLMOE_ERR_OUT_OF_MEMORY, "prompts");
  for (int p = 0; p < o->nprompts; p++) {
    if (o->prompt_ids[p]) { /* ids as given */
      lens[p] = o->prompt_len[p];
      if (!(t[p] = malloc((size_t)lens[p] * sizeof **t))) app_die(CLMOE_ERR_OUT_OF_MEMORY, "prompts");
      memcpy(t[p], o->prompt_ids[p], (size_t)lens[p] * sizeof **t);
    } else if (tok) {
      t[p] = encode(o, p, tok, &lens[p]);
    } else { /* bytes are the tokens */
      lens[p] = o->prompt_len[p];
      if (!(t[p] = malloc((size_t)lens[p] * sizeof **t))) app_die(CLMOE_ERR_OUT_OF_MEMORY, "prompts");
      for (int64_t i = 0; i < lens[p]; i++) t[p][i] = (unsigned char)o->prompt[p][i];
    }
    for (int64_t i = 0; i < lens[p]; i++) {
      if (t[p][i] < V) continue;
      if (o->prompt_ids[p] || tok)
        app_fail(APP_EXIT_FAILED, "prompt %d (%s): token %d at position %lld is outside the model's vocabulary of "
                 "%lld tokens", p + 1, o->prompt_from[p], t[p][i], (long long)i, (long long)V);
      app_fail(APP_EXIT_FAILED, "prompt %d (%s): byte 0x%02x at offset %lld is outside the model's vocabulary of "
               "%lld tokens", p + 1, o->prompt_from[p], (unsigned)t[p][i], (long long)i, (long long)V);
    }
  }
  return t;
}

void gen_append(gen_result *r, int64_t s, int32_t id, clmoe_tokenizer *tok, const char **piece, size_t *plen)
{
  static char buf[32];
  static char *decoded;
  free(decoded);
  decoded = NULL;
  if (tok) {
    if (clmoe_tokenizer_decode(tok, &id, 1, 0, &decoded, plen) != CLMOE_OK)
      app_fail(APP_EXIT_FAILED, "decoding the generated id %d: %s", id, clmoe_last_error());
    *piece = decoded;
  } else if (id < 256) {
    buf[0] = (char)id, *plen = 1, *piece = buf;
  } else {
    *plen = (size_t)snprintf(buf, sizeof buf, "<%d>", id), *piece = buf;
  }
  if (r->text_len[s] + (int64_t)*plen + 1 > r->text_cap[s]) {
    const int64_t cap = 2 * (r->text_len[s] + (int64_t)*plen + 1);
    char *grown = realloc(r->text[s], (size_t)cap);
    if (!grown) app_die(CLMOE_ERR_OUT_OF_MEMORY, "texts");
    r->text[s] = grown, r->text_cap[s] = cap;
  }
  memcpy(r->text[s] + r->text_len[s], *piece, *plen);
  r->text_len[s] += (int64_t)*plen;
}

void gen_write_logits(const char *path, const float *logits, int64_t n, int64_t V)
{
  clmoe_st_writer *w;
  const int64_t shape[2] = {n, V};
  clmoe_status st = clmoe_st_writer_create(path, &w);
  if (st == CLMOE_OK && (st = clmoe_st_writer_add_host(w, "logits", CLMOE_ST_F32, 2, shape, logits)) != CLMOE_OK)
    clmoe_st_writer_discard(w);
  else if (st == CLMOE_OK)
    st = clmoe_st_writer_finish(w);
  if (st != CLMOE_OK) app_fail(APP_EXIT_FAILED, "--logits %s: %s", path, clmoe_last_error());
}
