/* tiktoken rank files -> a tokenizer. Each non-empty line is a token's bytes in base64, a
 * space and its rank; the rank is the token's id and the order of merging (the pair whose
 * concatenation has the lowest rank merges first). The split pattern and the special
 * tokens are not in the file: they come from the caller, or from a Kimi-style
 * tokenizer_config.json (added_tokens_decoder: id -> {"content": ...}; the 256 ids after
 * the ranks are special, "<|reserved_token_ID|>" where the config names none). */
#include "tokenize/tokenize_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIMI_RESERVED 256

static int b64_value(unsigned char c)
{
  return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
         : c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Strict base64 (padding required to a multiple of 4) of s [n] into out; the byte count, or
 * -1 when malformed. */
static long b64_decode(const char *s, size_t n, char *out)
{
  if (n == 0 || n % 4) return -1;
  long o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; k++) {
      const unsigned char c = (unsigned char)s[i + k];
      if (c == '=' && i + 4 == n && k >= 2) {
        v[k] = 0, pad++;
      } else {
        if (pad || (v[k] = b64_value(c)) < 0) return -1;
      }
    }
    const uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    out[o++] = (char)(w >> 16);
    if (pad < 2) out[o++] = (char)(w >> 8);
    if (pad < 1) out[o++] = (char)w;
  }
  return o;
}

static clmoe_status load_ranks(clmoe_tokenizer *t, const char *path, const char *text, size_t n, int64_t *nranks)
{
  *nranks = 0;
  size_t line = 0;
  for (size_t i = 0; i < n;) {
    const char *end = memchr(text + i, '\n', n - i);
    const size_t e = end ? (size_t)(end - text) : n, len = e - i;
    const char *l = text + i;
    line++;
    i = e + 1;
    size_t ll = len;
    if (ll && l[ll - 1] == '\r') ll--;
    if (!ll) continue;
    const char *sp = memchr(l, ' ', ll);
    if (!sp)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: line %zu: expected 'BASE64 RANK' (not a tiktoken rank file?)", path, line);
    const size_t nb = (size_t)(sp - l);
    char *bytes = malloc(nb / 4 * 3 + 4);
    if (!bytes) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    const long nbytes = b64_decode(l, nb, bytes);
    CLMOE_TRY(clmoe__tok_keep(t, bytes));
    if (nbytes <= 0) return clmoe__error(CLMOE_ERR_FORMAT, "%s: line %zu: the token is not valid base64", path, line);
    int64_t rank = 0;
    size_t k = nb + 1;
    if (k >= ll) return clmoe__error(CLMOE_ERR_FORMAT, "%s: line %zu: the rank is missing", path, line);
    for (; k < ll; k++) {
      if (l[k] < '0' || l[k] > '9' || rank > (INT32_MAX - 10) / 10)
        return clmoe__error(CLMOE_ERR_FORMAT, "%s: line %zu: the rank '%.*s' is not an integer in [0, 2^31 - 10)",
                            path, line, (int)(ll - nb - 1 > 20 ? 20 : ll - nb - 1), sp + 1);
      rank = rank * 10 + (l[k] - '0');
    }
    char what[64];
    snprintf(what, sizeof what, "line %zu", line);
    CLMOE_TRY(clmoe__tok_reserve(t, rank + 1));
    if (t->tok[rank].present)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: line %zu: rank %lld appears twice", path, line, (long long)rank);
    CLMOE_TRY(clmoe__tok_set(t, (int32_t)rank, bytes, (size_t)nbytes, 0, what));
    CLMOE_TRY(clmoe__tok_bytes_put(t, (int32_t)rank, what));
    ++*nranks;
  }
  if (!*nranks) return clmoe__error(CLMOE_ERR_FORMAT, "%s: no tokens (an empty tiktoken rank file)", path);
  return CLMOE_OK;
}

static clmoe_status add_special(clmoe_tokenizer *t, const char *text, int32_t id, const char *what)
{
  const char *copy;
  if (id < 0) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: special token '%.60s' has a negative id", what, text);
  if (id < t->vocab && t->tok[id].present)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: special token '%.60s' has id %d, already a token of %s", what,
                        text, (int)id, t->path);
  if (!text[0]) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: special token %d has empty text", what, (int)id);
  CLMOE_TRY(clmoe__tok_copy(t, text, strlen(text), &copy));
  CLMOE_TRY(clmoe__tok_set(t, id, copy, strlen(copy), 1, what));
  return clmoe__tok_added_put(t, copy, strlen(copy), id, 1, 0, 0, 0);
}

clmoe_status clmoe__tok_load_tiktoken(const char *path, const clmoe_tiktoken_options *o, clmoe_tokenizer **out)
{
  static const clmoe_tiktoken_options none = {0};
  if (!o) o = &none;
  CLMOE_TRY(clmoe__tok_new(path, "tiktoken", out));
  clmoe_tokenizer *t = *out;
  t->tiktoken = t->ignore_merges = 1;
  char *text;
  size_t n;
  CLMOE_TRY(clmoe__tok_read_file(path, &text, &n));
  int64_t nranks;
  clmoe_status st = load_ranks(t, path, text, n, &nranks);
  free(text);
  CLMOE_TRY(st);
  const int64_t base = t->vocab;
  char what[600];
  snprintf(what, sizeof what, "%s: the split pattern", path);
  const char *pattern = o->pattern ? o->pattern : CLMOE_TOKENIZER_KIMI_PATTERN;
  t->steps = calloc(1, sizeof *t->steps);
  if (!t->steps) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
  t->nsteps = 1;
  t->steps[0].kind = TOK_SPLIT_ISOLATED;
  CLMOE_TRY(clmoe__tok_regex_compile(pattern, strlen(pattern), what, &t->steps[0].re));
  if (o->nspecials < 0 || (o->nspecials && !o->specials) || o->reserved < 0)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: bad special token options", path);
  snprintf(what, sizeof what, "%s: special tokens", path);
  for (int k = 0; k < o->nspecials; k++) {
    if (!o->specials[k].text) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: special token %d has no text", path, k);
    CLMOE_TRY(add_special(t, o->specials[k].text, o->specials[k].id, what));
  }
  for (int64_t id = base; id < base + o->reserved; id++) {
    if (id < t->vocab && t->tok[id].present) continue;
    char name[48];
    snprintf(name, sizeof name, "<|reserved_token_%lld|>", (long long)id);
    CLMOE_TRY(add_special(t, name, (int32_t)id, what));
  }
  clmoe__tok_added_index(t);
  clmoe__tok_byte_ids(t);
  for (int b = 0; b < 256; b++)
    if (t->byte_id[b] < 0)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: byte 0x%02x has no rank: every single byte needs one", path, b);
  return CLMOE_OK;
}

clmoe_status clmoe__tok_load_tiktoken_config(const char *path, const char *config, clmoe_tokenizer **out)
{
  tj_doc *doc = NULL;
  const tj_node *root;
  *out = NULL;
  CLMOE_TRY(clmoe__tok_json_read(config, &doc, &root));
  const tj_node *dec = clmoe__tok_json_get(root, "added_tokens_decoder");
  clmoe_status st = CLMOE_OK;
  if (root->type != TJ_OBJECT) st = clmoe__error(CLMOE_ERR_FORMAT, "%s: not a JSON object", config);
  else if (dec && dec->type != TJ_OBJECT && dec->type != TJ_NULL)
    st = clmoe__error(CLMOE_ERR_FORMAT, "%s: added_tokens_decoder must be an object of id -> token", config);
  const size_t n = st == CLMOE_OK && dec && dec->type == TJ_OBJECT ? dec->len : 0;
  clmoe_special_token *sp = calloc(n + 1, sizeof *sp);
  if (!sp && st == CLMOE_OK) st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", config);
  for (size_t k = 0; k < n && st == CLMOE_OK; k++) {
    const tj_node *e = &dec->kid[k];
    const tj_node *content = clmoe__tok_json_get(e, "content");
    char *endp;
    const long long id = strtoll(e->key, &endp, 10);
    if (!e->key[0] || *endp || id < 0 || id > INT32_MAX - 1)
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: added_tokens_decoder['%.40s']: the key must be an id (an integer "
                        "in [0, 2^31 - 1))", config, e->key);
    else if (!content || content->type != TJ_STRING || !content->len || strlen(content->str) != content->len)
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: added_tokens_decoder['%s'].content must be a non-empty string",
                        config, e->key);
    else
      sp[k] = (clmoe_special_token){.text = content->str, .id = (int32_t)id};
  }
  const clmoe_tiktoken_options o = {.pattern = NULL, .specials = sp, .nspecials = (int)n, .reserved = KIMI_RESERVED};
  if (st == CLMOE_OK) st = clmoe__tok_load_tiktoken(path, &o, out);
  free(sp);
  clmoe__tok_json_free(doc);
  return st;
}
