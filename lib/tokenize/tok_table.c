/* The tokenizer object and its tables: ids -> bytes, bytes -> id and (id, id) -> merge
 * (open addressing, grown at 1/2 load), the texts matched before pre-tokenization, the
 * GPT-2 byte-level alphabet and a UTF-8 decoder. */
#include "tokenize/tokenize_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

clmoe_status clmoe__tok_new(const char *path, const char *kind, clmoe_tokenizer **out)
{
  clmoe_tokenizer *t = calloc(1, sizeof *t);
  *out = t;
  if (!t) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
  snprintf(t->path, sizeof t->path, "%s", path);
  t->kind = kind;
  t->unk = -1;
  for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
  return CLMOE_OK;
}

clmoe_status clmoe__tok_keep(clmoe_tokenizer *t, void *p)
{
  if (p && t->narena == t->cap_arena) {
    size_t cap = t->cap_arena ? 2 * t->cap_arena : 64;
    char **a = realloc(t->arena, cap * sizeof *a);
    if (!a) p = (free(p), NULL);
    else t->arena = a, t->cap_arena = cap;
  }
  if (!p) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", t->path);
  t->arena[t->narena++] = p;
  return CLMOE_OK;
}

clmoe_status clmoe__tok_copy(clmoe_tokenizer *t, const char *bytes, size_t n, const char **out)
{
  char *p = malloc(n + 1);
  if (p) memcpy(p, bytes, n), p[n] = '\0';
  CLMOE_TRY(clmoe__tok_keep(t, p));
  *out = p;
  return CLMOE_OK;
}

clmoe_status clmoe__tok_reserve(clmoe_tokenizer *t, int64_t vocab)
{
  if (vocab <= t->vocab) return CLMOE_OK;
  if (vocab > INT32_MAX)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: an id of %lld is above 2^31 - 1", t->path, (long long)vocab - 1);
  tok_token *a = realloc(t->tok, (size_t)vocab * sizeof *a);
  if (!a) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", t->path);
  memset(a + t->vocab, 0, (size_t)(vocab - t->vocab) * sizeof *a);
  t->tok = a, t->vocab = vocab;
  return CLMOE_OK;
}

clmoe_status clmoe__tok_set(clmoe_tokenizer *t, int32_t id, const char *bytes, size_t len, int special,
                            const char *what)
{
  if (id < 0) return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s: negative id %d", t->path, what, id);
  if (len > UINT32_MAX) return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s: a token of %zu bytes", t->path, what, len);
  CLMOE_TRY(clmoe__tok_reserve(t, (int64_t)id + 1));
  tok_token *k = &t->tok[id];
  if (k->present && (k->len != len || memcmp(k->bytes, bytes, len)))
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s: id %d is given to two different tokens", t->path, what, id);
  k->bytes = bytes, k->len = (uint32_t)len, k->present = 1, k->special = (uint8_t)(special || k->special);
  return CLMOE_OK;
}

/* FNV-1a, then a final mix: short keys spread over the table. */
uint64_t clmoe__tok_hash(const char *s, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
  h ^= h >> 33, h *= 0xff51afd7ed558ccdULL, h ^= h >> 33;
  return h;
}

static uint64_t mix64(uint64_t h)
{
  h ^= h >> 33, h *= 0xff51afd7ed558ccdULL, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ULL, h ^= h >> 33;
  return h;
}

static clmoe_status bytes_grow(clmoe_tokenizer *t)
{
  tok_bytes_map *m = &t->by_bytes;
  const size_t cap = m->cap ? 2 * m->cap : 1024;
  uint32_t *slot = calloc(cap, sizeof *slot);
  if (!slot) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", t->path);
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->slot[i]) continue;
    const tok_token *k = &t->tok[m->slot[i] - 1];
    size_t j = clmoe__tok_hash(k->bytes, k->len) & (cap - 1);
    while (slot[j]) j = (j + 1) & (cap - 1);
    slot[j] = m->slot[i];
  }
  free(m->slot);
  m->slot = slot, m->cap = cap;
  return CLMOE_OK;
}

clmoe_status clmoe__tok_bytes_put(clmoe_tokenizer *t, int32_t id, const char *what)
{
  tok_bytes_map *m = &t->by_bytes;
  if (2 * (m->n + 1) > m->cap) CLMOE_TRY(bytes_grow(t));
  const tok_token *k = &t->tok[id];
  size_t j = clmoe__tok_hash(k->bytes, k->len) & (m->cap - 1);
  for (; m->slot[j]; j = (j + 1) & (m->cap - 1)) {
    const tok_token *o = &t->tok[m->slot[j] - 1];
    if (o->len == k->len && !memcmp(o->bytes, k->bytes, k->len)) {
      if ((int32_t)m->slot[j] - 1 == id) return CLMOE_OK;
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s: ids %d and %d are the same bytes", t->path, what,
                          (int)m->slot[j] - 1, (int)id);
    }
  }
  m->slot[j] = (uint32_t)id + 1;
  m->n++;
  return CLMOE_OK;
}

int32_t clmoe__tok_bytes_get(const clmoe_tokenizer *t, const char *s, size_t n)
{
  const tok_bytes_map *m = &t->by_bytes;
  if (!m->cap) return -1;
  for (size_t j = clmoe__tok_hash(s, n) & (m->cap - 1); m->slot[j]; j = (j + 1) & (m->cap - 1)) {
    const tok_token *o = &t->tok[m->slot[j] - 1];
    if (o->len == n && !memcmp(o->bytes, s, n)) return (int32_t)m->slot[j] - 1;
  }
  return -1;
}

static clmoe_status pairs_grow(clmoe_tokenizer *t)
{
  tok_pair_map *m = &t->pairs;
  const size_t cap = m->cap ? 2 * m->cap : 1024;
  uint64_t *key = calloc(cap, sizeof *key);
  int32_t *rank = malloc(cap * sizeof *rank), *merged = malloc(cap * sizeof *merged);
  if (!key || !rank || !merged) {
    free(key), free(rank), free(merged);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", t->path);
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->key[i]) continue;
    size_t j = mix64(m->key[i]) & (cap - 1);
    while (key[j]) j = (j + 1) & (cap - 1);
    key[j] = m->key[i], rank[j] = m->rank[i], merged[j] = m->merged[i];
  }
  free(m->key), free(m->rank), free(m->merged);
  m->key = key, m->rank = rank, m->merged = merged, m->cap = cap;
  return CLMOE_OK;
}

clmoe_status clmoe__tok_pair_put(clmoe_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
  tok_pair_map *m = &t->pairs;
  if (2 * (m->n + 1) > m->cap) CLMOE_TRY(pairs_grow(t));
  const uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  size_t j = mix64(key) & (m->cap - 1);
  for (; m->key[j]; j = (j + 1) & (m->cap - 1))
    if (m->key[j] == key) return CLMOE_OK; /* a repeated merge keeps its first (lowest) rank */
  m->key[j] = key, m->rank[j] = rank, m->merged[j] = merged;
  m->n++;
  return CLMOE_OK;
}

int32_t clmoe__tok_pair_get(const clmoe_tokenizer *t, int32_t a, int32_t b, int32_t *merged)
{
  const tok_pair_map *m = &t->pairs;
  if (!m->cap) return -1;
  const uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  for (size_t j = mix64(key) & (m->cap - 1); m->key[j]; j = (j + 1) & (m->cap - 1))
    if (m->key[j] == key) return *merged = m->merged[j], m->rank[j];
  return -1;
}

clmoe_status clmoe__tok_added_put(clmoe_tokenizer *t, const char *text, size_t len, int32_t id, int special,
                                  int lstrip, int rstrip, int single_word)
{
  if (!len) return clmoe__error(CLMOE_ERR_FORMAT, "%s: token %d: an added token with empty text", t->path, id);
  if (t->nadded % 64 == 0) {
    tok_added *a = realloc(t->added, ((size_t)t->nadded + 64) * sizeof *a);
    if (!a) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", t->path);
    t->added = a;
  }
  t->added[t->nadded++] = (tok_added){.text = text, .len = (uint32_t)len, .id = id, .special = (uint8_t)special,
                                      .lstrip = (uint8_t)lstrip, .rstrip = (uint8_t)rstrip,
                                      .single_word = (uint8_t)single_word};
  return CLMOE_OK;
}

/* First byte, then longest first (the longest match wins at a place), then the text. */
static int by_first_longest(const void *pa, const void *pb)
{
  const tok_added *a = pa, *b = pb;
  const unsigned char fa = (unsigned char)a->text[0], fb = (unsigned char)b->text[0];
  if (fa != fb) return fa < fb ? -1 : 1;
  if (a->len != b->len) return a->len > b->len ? -1 : 1;
  const int c = memcmp(a->text, b->text, a->len);
  return c ? c : (a->id > b->id) - (a->id < b->id);
}

void clmoe__tok_added_index(clmoe_tokenizer *t)
{
  if (t->nadded) qsort(t->added, (size_t)t->nadded, sizeof *t->added, by_first_longest);
  int k = 0;
  for (int b = 0; b <= 256; b++) {
    while (k < t->nadded && (unsigned char)t->added[k].text[0] < b) k++;
    t->first_added[b] = b == 256 ? t->nadded : k;
  }
}

void clmoe__tok_byte_ids(clmoe_tokenizer *t)
{
  for (int b = 0; b < 256; b++) {
    const char c = (char)b;
    t->byte_id[b] = clmoe__tok_bytes_get(t, &c, 1);
  }
}

/* GPT-2's byte-level alphabet: the printable bytes ! .. ~, ¡ .. ¬ and ® .. ÿ stand for
 * themselves; the other 68 bytes, in order, for U+0100 onwards. */
void clmoe__tok_byte_alphabet(int16_t byte_of[324])
{
  int next = 0;
  for (int c = 0; c < 324; c++) byte_of[c] = -1;
  for (int b = 0; b < 256; b++) {
    const int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_of[printable ? b : 256 + next++] = (int16_t)b;
  }
}

size_t clmoe__tok_utf8(const unsigned char *s, size_t n, uint32_t *cp)
{
  if (!n) return 0;
  const unsigned c = s[0];
  if (c < 0x80) return *cp = c, 1;
  size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!len || len > n) return 0;
  uint32_t v = c & (0x7F >> len);
  for (size_t k = 1; k < len; k++) {
    if ((s[k] & 0xC0) != 0x80) return 0;
    v = v << 6 | (s[k] & 0x3F);
  }
  if ((len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)))
    return 0;
  *cp = v;
  return len;
}
