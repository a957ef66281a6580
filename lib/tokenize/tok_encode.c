/* The tokenizer's public entry points: opening (the file format found from the content),
 * encoding (added and special tokens first, then the pre-tokenizer's splits, then BPE per
 * piece), decoding, and freeing. */
#include "tokenize/tokenize_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- open and free ----------------------------------------------------------------------- */
void clmoe_tokenizer_free(clmoe_tokenizer *t)
{
  if (!t) return;
  for (int k = 0; k < t->nsteps; k++) clmoe__tok_regex_free(t->steps[k].re);
  free(t->steps);
  for (size_t k = 0; k < t->narena; k++) free(t->arena[k]);
  free(t->arena);
  free(t->tok);
  free(t->by_bytes.slot);
  free(t->pairs.key), free(t->pairs.rank), free(t->pairs.merged);
  free(t->added);
  clmoe__tok_cache_free(t->cache);
  free(t);
}

/* Runs a loader; on failure frees what it built. */
static clmoe_status finish(clmoe_status st, clmoe_tokenizer *t, clmoe_tokenizer **out)
{
  if (st != CLMOE_OK) {
    clmoe_tokenizer_free(t);
    *out = NULL;
    return st;
  }
  *out = t;
  return CLMOE_OK;
}

clmoe_status clmoe_tokenizer_load_json(const char *path, clmoe_tokenizer **out)
{
  clmoe_tokenizer *t = NULL;
  if (!path || !out) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_tokenizer_load_json: NULL argument");
  const clmoe_status st = clmoe__tok_load_hf(path, &t);
  return finish(st, t, out);
}

clmoe_status clmoe_tokenizer_load_tiktoken(const char *path, const clmoe_tiktoken_options *o, clmoe_tokenizer **out)
{
  clmoe_tokenizer *t = NULL;
  if (!path || !out) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_tokenizer_load_tiktoken: NULL argument");
  const clmoe_status st = clmoe__tok_load_tiktoken(path, o, &t);
  return finish(st, t, out);
}

clmoe_status clmoe_tokenizer_load_tiktoken_config(const char *path, const char *config, clmoe_tokenizer **out)
{
  clmoe_tokenizer *t = NULL;
  if (!path || !config || !out)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_tokenizer_load_tiktoken_config: NULL argument");
  const clmoe_status st = clmoe__tok_load_tiktoken_config(path, config, &t);
  return finish(st, t, out);
}

static int is_dir(const char *p)
{
  struct stat s;
  return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

static int is_file(const char *p)
{
  struct stat s;
  return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

/* dir/name into buf when that file exists. */
static int found_in(const char *dir, const char *name, char *buf, size_t len)
{
  const size_t nd = strlen(dir), nn = strlen(name);
  if (nd + nn + 2 > len) return 0;
  memcpy(buf, dir, nd), buf[nd] = '/', memcpy(buf + nd + 1, name, nn + 1);
  return is_file(buf);
}

/* The first byte of the file that is not white space (0 when none or unreadable). */
static int first_byte(const char *path)
{
  FILE *f = fopen(path, "rb");
  int c = 0;
  if (f) {
    while ((c = fgetc(f)) != EOF && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) {}
    fclose(f);
  }
  return c == EOF ? 0 : c;
}

clmoe_status clmoe_tokenizer_open(const char *path, const char *config, clmoe_tokenizer **out)
{
  char file[4096], cfg[4096], dir[4096];
  if (!path || !out) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_tokenizer_open: NULL argument");
  *out = NULL;
  if (is_dir(path)) {
    if (!found_in(path, "tokenizer.json", file, sizeof file) && !found_in(path, "tiktoken.model", file, sizeof file))
      return clmoe__error(CLMOE_ERR_IO, "%s: a directory without tokenizer.json or tiktoken.model", path);
  } else if (is_file(path)) {
    snprintf(file, sizeof file, "%s", path);
  } else {
    return clmoe__error(CLMOE_ERR_IO, "%s: cannot open: %s", path, errno ? strerror(errno) : "not a file");
  }
  if (first_byte(file) == '{') return clmoe_tokenizer_load_json(file, out);
  /* a rank file: the config given, or the one beside it */
  if (config && is_dir(config)) {
    if (!found_in(config, "tokenizer_config.json", cfg, sizeof cfg))
      return clmoe__error(CLMOE_ERR_IO, "%s: a directory without tokenizer_config.json", config);
  } else if (config) {
    snprintf(cfg, sizeof cfg, "%s", config);
  } else {
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    if (!found_in(dir, "tokenizer_config.json", cfg, sizeof cfg)) return clmoe_tokenizer_load_tiktoken(file, NULL, out);
  }
  return clmoe_tokenizer_load_tiktoken_config(file, cfg, out);
}

int64_t clmoe_tokenizer_vocab(const clmoe_tokenizer *t) { return t->vocab; }
const char *clmoe_tokenizer_kind(const clmoe_tokenizer *t) { return t->kind; }

int32_t clmoe_tokenizer_special_id(const clmoe_tokenizer *t, const char *text)
{
  const size_t n = strlen(text);
  for (int k = 0; k < t->nadded; k++)
    if (t->added[k].len == n && !memcmp(t->added[k].text, text, n)) return t->added[k].id;
  return -1;
}

void clmoe_tokens_free(clmoe_tokens *tokens)
{
  if (!tokens) return;
  free(tokens->ids);
  tokens->ids = NULL, tokens->n = tokens->cap = 0;
}

/* ---- encoding ---------------------------------------------------------------------------- */
typedef struct span {
  size_t b, e;
} span;

typedef struct enc {
  clmoe_tokenizer *t;
  clmoe_tokens *out;
  span *spans; /* the matches of every open level, each level above the one before */
  size_t nspans, cap;
  char *prefixed; /* scratch for a piece with a space put in front */
  size_t cap_prefixed;
} enc;

static clmoe_status add_span(void *arg, size_t b, size_t e)
{
  enc *x = arg;
  if (x->nspans == x->cap) {
    const size_t cap = 2 * x->cap + 64;
    span *s = realloc(x->spans, cap * sizeof *s);
    if (!s) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "tokenizer: out of host memory");
    x->spans = s, x->cap = cap;
  }
  x->spans[x->nspans++] = (span){b, e};
  return CLMOE_OK;
}

static clmoe_status split(enc *x, int step, const char *s, size_t n);

/* The pieces of s [n] by step `step`'s matches [base, top) of the span stack. */
static clmoe_status pieces(enc *x, int step, const char *s, size_t n, size_t base, size_t top)
{
  const tok_split_kind kind = x->t->steps[step].kind;
  size_t at = 0; /* the end of what was passed on */
  for (size_t k = base; k < top; k++) {
    const span m = x->spans[k];
    switch (kind) {
    case TOK_SPLIT_ISOLATED:
      if (m.b > at) CLMOE_TRY(split(x, step + 1, s + at, m.b - at));
      CLMOE_TRY(split(x, step + 1, s + m.b, m.e - m.b));
      at = m.e;
      break;
    case TOK_SPLIT_REMOVED:
      if (m.b > at) CLMOE_TRY(split(x, step + 1, s + at, m.b - at));
      at = m.e;
      break;
    case TOK_SPLIT_MERGED_PREV:
      CLMOE_TRY(split(x, step + 1, s + at, m.e - at));
      at = m.e;
      break;
    case TOK_SPLIT_MERGED_NEXT: {
      if (m.b > at && k == base) CLMOE_TRY(split(x, step + 1, s + at, m.b - at));
      const size_t end = k + 1 < top ? x->spans[k + 1].b : n;
      CLMOE_TRY(split(x, step + 1, s + m.b, end - m.b));
      at = end;
      break;
    }
    }
  }
  if (at < n) CLMOE_TRY(split(x, step + 1, s + at, n - at));
  return CLMOE_OK;
}

static clmoe_status split(enc *x, int step, const char *s, size_t n)
{
  if (!n) return CLMOE_OK;
  if (step == x->t->nsteps) return clmoe__tok_bpe(x->t, s, n, x->out);
  const tok_step *st = &x->t->steps[step];
  if (st->prefix_space && s[0] != ' ') { /* ByteLevel's add_prefix_space (the last step) */
    if (n + 1 > x->cap_prefixed) {
      char *p = realloc(x->prefixed, n + 1);
      if (!p) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "tokenizer: out of host memory");
      x->prefixed = p, x->cap_prefixed = n + 1;
    }
    x->prefixed[0] = ' ';
    memcpy(x->prefixed + 1, s, n);
    s = x->prefixed, n++;
  }
  if (!st->re) return split(x, step + 1, s, n);
  const size_t base = x->nspans;
  clmoe_status r = clmoe__tok_regex_each(st->re, s, n, add_span, x);
  if (r == CLMOE_OK) r = pieces(x, step, s, n, base, x->nspans);
  x->nspans = base;
  return r;
}

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static int is_word(unsigned char c)
{
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

/* The added token matched at text[i] (the longest; lstrip/rstrip widen [*b, *e)), or NULL. */
static const tok_added *match_added(const clmoe_tokenizer *t, const char *s, size_t n, size_t i, size_t from,
                                    unsigned flags, size_t *b, size_t *e)
{
  const unsigned char c = (unsigned char)s[i];
  for (int k = t->first_added[c]; k < t->first_added[c + 1]; k++) {
    const tok_added *a = &t->added[k];
    if ((a->special && !(flags & CLMOE_TOKENIZE_SPECIAL)) || a->len > n - i || memcmp(s + i, a->text, a->len)) continue;
    if (a->single_word && ((i > 0 && is_word((unsigned char)s[i - 1])) ||
                           (i + a->len < n && is_word((unsigned char)s[i + a->len]))))
      continue;
    *b = i, *e = i + a->len;
    if (a->lstrip)
      while (*b > from && is_space((unsigned char)s[*b - 1])) --*b;
    if (a->rstrip)
      while (*e < n && is_space((unsigned char)s[*e])) ++*e;
    return a;
  }
  return NULL;
}

clmoe_status clmoe_tokenizer_encode(clmoe_tokenizer *t, const char *text, size_t len, unsigned flags, clmoe_tokens *out)
{
  if (!t || (!text && len) || !out) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_tokenizer_encode: NULL argument");
  if ((flags & CLMOE_TOKENIZE_ADD_SPECIAL) && t->post_error[0])
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s", t->post_error);
  enc x = {.t = t, .out = out};
  clmoe_status st = CLMOE_OK;
  for (int k = 0; (flags & CLMOE_TOKENIZE_ADD_SPECIAL) && k < t->npost_before && st == CLMOE_OK; k++)
    st = clmoe__tok_push(out, t->post_before[k]);
  size_t from = 0; /* the start of the text not yet encoded */
  for (size_t i = 0; i < len && st == CLMOE_OK; i++) {
    size_t b, e;
    const tok_added *a = t->nadded ? match_added(t, text, len, i, from, flags, &b, &e) : NULL;
    if (!a) continue;
    st = split(&x, 0, text + from, b - from);
    if (st == CLMOE_OK) st = clmoe__tok_push(out, a->id);
    from = e;
    i = e - 1;
  }
  if (st == CLMOE_OK) st = split(&x, 0, text + from, len - from);
  for (int k = 0; (flags & CLMOE_TOKENIZE_ADD_SPECIAL) && k < t->npost_after && st == CLMOE_OK; k++)
    st = clmoe__tok_push(out, t->post_after[k]);
  free(x.spans);
  free(x.prefixed);
  return st;
}

/* ---- decoding ---------------------------------------------------------------------------- */
clmoe_status clmoe_tokenizer_decode(const clmoe_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char **text,
                                    size_t *len)
{
  if (!t || (!ids && n) || !text || !len)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_tokenizer_decode: NULL argument");
  *text = NULL, *len = 0;
  size_t total = 0;
  for (size_t k = 0; k < n; k++) {
    if (ids[k] < 0 || ids[k] >= t->vocab || !t->tok[ids[k]].present)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: id %lld (number %zu of the list) is not a token of this "
                          "tokenizer (vocabulary %lld)", t->path, (long long)ids[k], k + 1, (long long)t->vocab);
    if (!(t->tok[ids[k]].special && (flags & CLMOE_TOKENIZE_SKIP_SPECIAL))) total += t->tok[ids[k]].len;
  }
  char *buf = malloc(total + 1);
  if (!buf) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "tokenizer: out of host memory for %zu bytes", total);
  size_t o = 0;
  for (size_t k = 0; k < n; k++) {
    const tok_token *tk = &t->tok[ids[k]];
    if (tk->special && (flags & CLMOE_TOKENIZE_SKIP_SPECIAL)) continue;
    memcpy(buf + o, tk->bytes, tk->len), o += tk->len;
  }
  buf[o] = '\0';
  *text = buf, *len = o;
  return CLMOE_OK;
}
