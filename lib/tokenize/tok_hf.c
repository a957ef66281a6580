/* Hugging Face tokenizer.json -> a tokenizer: model BPE over the byte-level alphabet
 * (vocab, merges as "a b" strings or [a, b] pairs, ignore_merges, unk_token), the
 * pre-tokenizer (ByteLevel, alone or last in a Sequence after regex or string Splits), the
 * ByteLevel decoder, the added tokens and the post-processor (tok_post.c). Every field that would make the ids differ from
 * Hugging Face's and is not supported is refused with its place in the file. */
#include "tokenize/tokenize_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's split, the one a ByteLevel pre-tokenizer with use_regex applies. */
#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct hf_loader {
  clmoe_tokenizer *t;
  const char *path;
  int16_t byte_of[324];
  char *buf; /* scratch for converted strings */
  size_t cap;
} hf_loader;

static const char *type_of(const tj_node *o)
{
  const tj_node *ty = clmoe__tok_json_get(o, "type");
  return ty && ty->type == TJ_STRING ? ty->str : NULL;
}

/* A boolean field: absent or null gives dflt; anything else than true/false is an error. */
static clmoe_status get_bool(hf_loader *L, const tj_node *o, const char *key, const char *where, int dflt, int *v)
{
  const tj_node *n = clmoe__tok_json_get(o, key);
  if (!n || n->type == TJ_NULL) return *v = dflt, CLMOE_OK;
  if (n->type != TJ_TRUE && n->type != TJ_FALSE)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s.%s must be true or false", L->path, where, key);
  *v = n->type == TJ_TRUE;
  return CLMOE_OK;
}

/* A vocabulary string in the byte-level alphabet -> its bytes (in L->buf); characters
 * outside the alphabet stand for their own UTF-8 bytes (*outside set when there are any). */
static clmoe_status to_bytes_outside(hf_loader *L, const char *s, size_t n, size_t *out, int *outside)
{
  *outside = 0;
  if (n + 1 > L->cap) {
    size_t cap = 2 * n + 64;
    char *b = realloc(L->buf, cap);
    if (!b) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", L->path);
    L->buf = b, L->cap = cap;
  }
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t k = clmoe__tok_utf8((const unsigned char *)s + i, n - i, &cp);
    if (!k) k = 1, cp = 0xFFFFFFFFu;
    if (cp < 324 && L->byte_of[cp] >= 0) L->buf[o++] = (char)L->byte_of[cp];
    else memcpy(L->buf + o, s + i, k), o += k, *outside = 1;
    i += k;
  }
  *out = o;
  return CLMOE_OK;
}

static clmoe_status to_bytes(hf_loader *L, const char *s, size_t n, size_t *out)
{
  int outside;
  return to_bytes_outside(L, s, n, out, &outside);
}

static clmoe_status load_vocab(hf_loader *L, const tj_node *vocab)
{
  clmoe_tokenizer *t = L->t;
  if (!vocab || vocab->type != TJ_OBJECT || !vocab->len)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: model.vocab must be a non-empty object of token -> id", L->path);
  int64_t top = 0, id;
  for (size_t k = 0; k < vocab->len; k++) {
    if (!clmoe__tok_json_int(&vocab->kid[k], 0, INT32_MAX - 1, &id))
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: model.vocab['%.100s']: the id must be an integer in [0, 2^31 - 1)",
                          L->path, vocab->kid[k].key);
    top = id + 1 > top ? id + 1 : top;
  }
  CLMOE_TRY(clmoe__tok_reserve(t, top));
  for (size_t k = 0; k < vocab->len; k++) {
    const char *key = vocab->kid[k].key;
    char what[160];
    snprintf(what, sizeof what, "model.vocab['%.100s']", key);
    size_t n;
    const char *bytes;
    clmoe__tok_json_int(&vocab->kid[k], 0, INT32_MAX - 1, &id);
    int outside;
    CLMOE_TRY(to_bytes_outside(L, key, strlen(key), &n, &outside));
    CLMOE_TRY(clmoe__tok_copy(t, L->buf, n, &bytes));
    CLMOE_TRY(clmoe__tok_set(t, (int32_t)id, bytes, n, 0, what));
    /* a key with characters outside the byte-level alphabet (kept as their UTF-8) decodes,
     * but byte-level text never reaches it, as with Hugging Face: encoding does not see it */
    if (!outside) CLMOE_TRY(clmoe__tok_bytes_put(t, (int32_t)id, what));
  }
  return CLMOE_OK;
}

/* The id of a vocabulary string, or an error naming where it was used. */
static clmoe_status vocab_id(hf_loader *L, const char *s, size_t n, const char *where, int32_t *id)
{
  size_t len;
  CLMOE_TRY(to_bytes(L, s, n, &len));
  *id = clmoe__tok_bytes_get(L->t, L->buf, len);
  if (*id < 0)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s: '%.100s' is not in model.vocab", L->path, where, s);
  return CLMOE_OK;
}

static clmoe_status load_merges(hf_loader *L, const tj_node *merges)
{
  if (!merges || merges->type != TJ_ARRAY)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: model.merges must be an array", L->path);
  if (merges->len > INT32_MAX) return clmoe__error(CLMOE_ERR_FORMAT, "%s: model.merges: too many", L->path);
  for (size_t r = 0; r < merges->len; r++) {
    const tj_node *m = &merges->kid[r];
    char where[64];
    snprintf(where, sizeof where, "model.merges[%zu]", r);
    const char *a, *b;
    size_t na, nb;
    if (m->type == TJ_STRING) { /* "a b" */
      const char *sp = memchr(m->str, ' ', m->len);
      if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str)))
        return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s is '%.100s': expected two tokens separated by one space",
                            L->path, where, m->str);
      a = m->str, na = (size_t)(sp - m->str), b = sp + 1, nb = m->len - na - 1;
    } else if (m->type == TJ_ARRAY && m->len == 2 && m->kid[0].type == TJ_STRING && m->kid[1].type == TJ_STRING) {
      a = m->kid[0].str, na = m->kid[0].len, b = m->kid[1].str, nb = m->kid[1].len;
    } else {
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s: expected \"a b\" or [\"a\", \"b\"]", L->path, where);
    }
    int32_t ia, ib, im;
    CLMOE_TRY(vocab_id(L, a, na, where, &ia));
    CLMOE_TRY(vocab_id(L, b, nb, where, &ib));
    /* the merged token: the two tokens' bytes together */
    const tok_token *ta = &L->t->tok[ia], *tb = &L->t->tok[ib];
    char *joined = malloc((size_t)ta->len + tb->len + 1);
    if (!joined) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", L->path);
    memcpy(joined, ta->bytes, ta->len), memcpy(joined + ta->len, tb->bytes, tb->len);
    im = clmoe__tok_bytes_get(L->t, joined, (size_t)ta->len + tb->len);
    free(joined);
    if (im < 0)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s: the merge of '%.60s' and '%.60s' is not in model.vocab",
                          L->path, where, a, b);
    CLMOE_TRY(clmoe__tok_pair_put(L->t, ia, ib, (int32_t)r, im));
  }
  return CLMOE_OK;
}

static clmoe_status load_model(hf_loader *L, const tj_node *model)
{
  clmoe_tokenizer *t = L->t;
  if (!model || model->type != TJ_OBJECT) return clmoe__error(CLMOE_ERR_FORMAT, "%s: no \"model\" object", L->path);
  const char *type = type_of(model);
  if (type && strcmp(type, "BPE"))
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: model.type is '%.40s': only BPE models are supported", L->path, type);
  const tj_node *n = clmoe__tok_json_get(model, "dropout");
  if (n && n->type != TJ_NULL && !(n->type == TJ_NUMBER && n->num == 0.0))
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: model.dropout is set: BPE dropout is not supported", L->path);
  int flag = 0;
  CLMOE_TRY(get_bool(L, model, "byte_fallback", "model", 0, &flag));
  if (flag)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: model.byte_fallback is true: only byte-level BPE (ByteLevel "
                        "pre-tokenizer, no byte fallback) is supported", L->path);
  for (const char *const *f = (const char *const[]){"continuing_subword_prefix", "end_of_word_suffix", NULL}; *f; f++) {
    n = clmoe__tok_json_get(model, *f);
    if (n && n->type != TJ_NULL && !(n->type == TJ_STRING && n->len == 0))
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: model.%s is set: not supported for byte-level BPE", L->path, *f);
  }
  CLMOE_TRY(get_bool(L, model, "ignore_merges", "model", 0, &t->ignore_merges));
  CLMOE_TRY(load_vocab(L, clmoe__tok_json_get(model, "vocab")));
  CLMOE_TRY(load_merges(L, clmoe__tok_json_get(model, "merges")));
  n = clmoe__tok_json_get(model, "unk_token");
  if (n && n->type == TJ_STRING) CLMOE_TRY(vocab_id(L, n->str, n->len, "model.unk_token", &t->unk));
  else if (n && n->type != TJ_NULL)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: model.unk_token must be a string or null", L->path);
  return CLMOE_OK;
}

/* A regex for a Split's pattern: {"Regex": "..."} as it is, {"String": "..."} quoted. */
static clmoe_status split_regex(hf_loader *L, const tj_node *pat, const char *where, tok_regex **re)
{
  char what[600];
  const tj_node *rx = clmoe__tok_json_get(pat, "Regex"), *str = clmoe__tok_json_get(pat, "String");
  snprintf(what, sizeof what, "%s: %s.pattern.%s", L->path, where, rx ? "Regex" : "String");
  if (rx && rx->type == TJ_STRING) return clmoe__tok_regex_compile(rx->str, rx->len, what, re);
  if (!str || str->type != TJ_STRING || !str->len)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s.pattern must be {\"Regex\": ...} or {\"String\": ...}", L->path, where);
  char *q = malloc(2 * str->len + 1);
  if (!q) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", L->path);
  size_t o = 0;
  for (size_t i = 0; i < str->len; i++) {
    const unsigned char c = (unsigned char)str->str[i];
    if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == 0))
      q[o++] = '\\';
    q[o++] = (char)c;
  }
  const clmoe_status st = clmoe__tok_regex_compile(q, o, what, re);
  free(q);
  return st;
}

static clmoe_status add_step(hf_loader *L, const tj_node *p, const char *where, int last)
{
  clmoe_tokenizer *t = L->t;
  const char *type = type_of(p);
  tok_step s = {.kind = TOK_SPLIT_ISOLATED};
  if (!type) return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s has no \"type\"", L->path, where);
  if (!strcmp(type, "ByteLevel")) {
    if (!last)
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %s: a ByteLevel step before other pre-tokenizers is not "
                          "supported (ByteLevel must come last)", L->path, where);
    int use_regex = 1;
    CLMOE_TRY(get_bool(L, p, "add_prefix_space", where, 1, &s.prefix_space));
    CLMOE_TRY(get_bool(L, p, "use_regex", where, 1, &use_regex));
    if (use_regex) {
      char what[300];
      snprintf(what, sizeof what, "%s: %s (GPT-2's split)", L->path, where);
      CLMOE_TRY(clmoe__tok_regex_compile(GPT2_PATTERN, strlen(GPT2_PATTERN), what, &s.re));
    }
  } else if (!strcmp(type, "Split")) {
    if (last)
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %s: no ByteLevel step after the Split: only byte-level BPE "
                          "is supported", L->path, where);
    int invert = 0;
    CLMOE_TRY(get_bool(L, p, "invert", where, 0, &invert));
    if (invert) return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %s.invert is true: not supported", L->path, where);
    const tj_node *b = clmoe__tok_json_get(p, "behavior");
    const char *beh = b && b->type == TJ_STRING ? b->str : "";
    static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext"};
    int k = 0;
    while (k < 4 && strcmp(beh, names[k])) k++;
    if (k == 4)
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %s.behavior is '%.40s': supported are Isolated, Removed, "
                          "MergedWithPrevious and MergedWithNext", L->path, where, beh);
    s.kind = (tok_split_kind)k;
    CLMOE_TRY(split_regex(L, clmoe__tok_json_get(p, "pattern"), where, &s.re));
  } else {
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: %s.type is '%.40s': supported pre-tokenizers are ByteLevel and "
                        "Split (alone or in a Sequence, ByteLevel last)", L->path, where, type);
  }
  tok_step *steps = realloc(t->steps, ((size_t)t->nsteps + 1) * sizeof *steps);
  if (!steps) {
    clmoe__tok_regex_free(s.re);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", L->path);
  }
  t->steps = steps;
  t->steps[t->nsteps++] = s;
  return CLMOE_OK;
}

static clmoe_status load_pre(hf_loader *L, const tj_node *pre)
{
  if (!pre || pre->type != TJ_OBJECT)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: pre_tokenizer is missing: only byte-level BPE (a ByteLevel "
                        "pre-tokenizer) is supported", L->path);
  const char *type = type_of(pre);
  if (!type || strcmp(type, "Sequence")) return add_step(L, pre, "pre_tokenizer", 1);
  const tj_node *list = clmoe__tok_json_get(pre, "pretokenizers");
  if (!list || list->type != TJ_ARRAY || !list->len)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: pre_tokenizer.pretokenizers must be a non-empty array", L->path);
  for (size_t k = 0; k < list->len; k++) {
    char where[64];
    snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", k);
    CLMOE_TRY(add_step(L, &list->kid[k], where, k + 1 == list->len));
  }
  return CLMOE_OK;
}

static clmoe_status check_normalizer_decoder(hf_loader *L, const tj_node *root)
{
  const tj_node *norm = clmoe__tok_json_get(root, "normalizer");
  if (norm && norm->type != TJ_NULL) {
    const char *type = type_of(norm);
    const tj_node *list = clmoe__tok_json_get(norm, "normalizers");
    const int empty_seq = type && !strcmp(type, "Sequence") && list && list->type == TJ_ARRAY && !list->len;
    if (!empty_seq && !(type && !strcmp(type, "NFC")))
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: normalizer.type is '%.40s': normalizers that change the text "
                          "are not supported (none and NFC are)", L->path, type ? type : "?");
  }
  const tj_node *dec = clmoe__tok_json_get(root, "decoder");
  if (dec && dec->type != TJ_NULL) {
    const char *type = type_of(dec);
    if (!type || strcmp(type, "ByteLevel"))
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: decoder.type is '%.40s': only the ByteLevel decoder is "
                          "supported", L->path, type ? type : "?");
  }
  return CLMOE_OK;
}

static clmoe_status load_added(hf_loader *L, const tj_node *list)
{
  clmoe_tokenizer *t = L->t;
  if (!list || list->type == TJ_NULL) return CLMOE_OK;
  if (list->type != TJ_ARRAY) return clmoe__error(CLMOE_ERR_FORMAT, "%s: added_tokens must be an array", L->path);
  for (size_t k = 0; k < list->len; k++) {
    const tj_node *a = &list->kid[k];
    char where[64];
    snprintf(where, sizeof where, "added_tokens[%zu]", k);
    const tj_node *content = clmoe__tok_json_get(a, "content");
    int64_t id;
    if (!clmoe__tok_json_int(clmoe__tok_json_get(a, "id"), 0, INT32_MAX - 1, &id))
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s.id must be an integer in [0, 2^31 - 1)", L->path, where);
    if (!content || content->type != TJ_STRING || !content->len)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s.content must be a non-empty string", L->path, where);
    int special = 0, lstrip = 0, rstrip = 0, single = 0;
    CLMOE_TRY(get_bool(L, a, "special", where, 0, &special));
    CLMOE_TRY(get_bool(L, a, "lstrip", where, 0, &lstrip));
    CLMOE_TRY(get_bool(L, a, "rstrip", where, 0, &rstrip));
    CLMOE_TRY(get_bool(L, a, "single_word", where, 0, &single));
    const char *text;
    CLMOE_TRY(clmoe__tok_copy(t, content->str, content->len, &text));
    CLMOE_TRY(clmoe__tok_reserve(t, id + 1));
    if (t->tok[id].present) { /* also a model token: it keeps the model's bytes */
      t->tok[id].special = (uint8_t)(t->tok[id].special || special);
    } else {
      CLMOE_TRY(clmoe__tok_set(t, (int32_t)id, text, content->len, special, where));
    }
    CLMOE_TRY(clmoe__tok_added_put(t, text, content->len, (int32_t)id, special, lstrip, rstrip, single));
  }
  return CLMOE_OK;
}

clmoe_status clmoe__tok_load_hf(const char *path, clmoe_tokenizer **out)
{
  tj_doc *doc = NULL;
  const tj_node *root;
  CLMOE_TRY(clmoe__tok_new(path, "tokenizer.json", out));
  CLMOE_TRY(clmoe__tok_json_read(path, &doc, &root));
  hf_loader L = {.t = *out, .path = path};
  clmoe__tok_byte_alphabet(L.byte_of);
  clmoe_status st = root->type == TJ_OBJECT ? CLMOE_OK
                    : clmoe__error(CLMOE_ERR_FORMAT, "%s: not a tokenizer.json (the file is not a JSON object)", path);
  if (st == CLMOE_OK) st = check_normalizer_decoder(&L, root);
  if (st == CLMOE_OK) st = load_model(&L, clmoe__tok_json_get(root, "model"));
  if (st == CLMOE_OK) st = load_pre(&L, clmoe__tok_json_get(root, "pre_tokenizer"));
  if (st == CLMOE_OK) st = load_added(&L, clmoe__tok_json_get(root, "added_tokens"));
  if (st == CLMOE_OK) st = clmoe__tok_load_post(*out, clmoe__tok_json_get(root, "post_processor"));
  free(L.buf);
  clmoe__tok_json_free(doc);
  if (st == CLMOE_OK) {
    clmoe__tok_added_index(*out);
    clmoe__tok_byte_ids(*out);
  }
  return st;
}
