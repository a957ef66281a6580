/* Byte-pair merging of one pre-tokenized piece, and a cache of the pieces seen.
 *
 * The piece starts as one symbol per byte (a doubly linked list over the byte positions);
 * a min-heap holds the candidate merges of neighbouring symbols keyed by (rank, position
 * of the left symbol). The lowest, leftmost candidate is merged, stale candidates (a
 * symbol merged away or grown since) are dropped when popped, and the merged symbol's two
 * new pairs are pushed: O(n log n) for a piece of n bytes, where rescanning every pair
 * after each merge is O(n^2). This is the order of both Hugging Face's BPE (lowest merge
 * rank, then leftmost) and tiktoken's (lowest rank of the concatenated bytes, leftmost).
 * A piece that is itself a token is that token when ignore_merges holds (tiktoken always). */
#include "tokenize/tokenize_internal.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_SLOTS 32768       /* entries of the piece cache (a power of two) */
#define CACHE_MAX_PIECE 128     /* longer pieces are merged every time */
#define CACHE_BYTES (8u << 20)  /* bytes and ids held before the cache starts again */

typedef struct cache_entry {
  uint64_t hash; /* 0: empty */
  const char *bytes;
  const int32_t *ids;
  uint32_t len, nids;
} cache_entry;

struct tok_cache {
  cache_entry *slot; /* [CACHE_SLOTS] */
  size_t used;       /* entries */
  char *store;       /* [CACHE_BYTES]: the entries' bytes and ids */
  size_t store_used;
};

void clmoe__tok_cache_free(tok_cache *c)
{
  if (!c) return;
  free(c->slot);
  free(c->store);
  free(c);
}

clmoe_status clmoe__tok_push(clmoe_tokens *out, int32_t id)
{
  if (out->n == out->cap) {
    const size_t cap = out->cap ? 2 * out->cap : 256;
    int32_t *ids = realloc(out->ids, cap * sizeof *ids);
    if (!ids) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "tokenizer: out of host memory for %zu ids", cap);
    out->ids = ids, out->cap = cap;
  }
  out->ids[out->n++] = id;
  return CLMOE_OK;
}

/* ---- the merge loop ---------------------------------------------------------------------- */
typedef struct cand {
  int32_t rank;
  uint32_t left, llen, rlen; /* left symbol's position, both symbols' lengths when pushed */
} cand;

typedef struct work {
  const clmoe_tokenizer *t;
  const char *s;
  uint32_t *len, *next, *prev; /* [n] per symbol start; len 0: merged away */
  int32_t *id;                 /* [n] */
  cand *heap;                  /* [n] at most n - 1 live pairs + n pushes: grows */
  size_t nheap, cap;
} work;

static int before(const cand *a, const cand *b)
{
  return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

/* The rank of merging the symbols at a and b (b follows a), and the merged id; -1: none. */
static int32_t pair_rank(const work *w, uint32_t a, uint32_t b, int32_t *merged)
{
  if (w->t->tiktoken) {
    const int32_t id = clmoe__tok_bytes_get(w->t, w->s + a, w->len[a] + w->len[b]);
    return *merged = id, id;
  }
  return clmoe__tok_pair_get(w->t, w->id[a], w->id[b], merged);
}

static clmoe_status push(work *w, uint32_t a, uint32_t n)
{
  const uint32_t b = w->next[a];
  if (b >= n) return CLMOE_OK;
  int32_t merged;
  const int32_t rank = pair_rank(w, a, b, &merged);
  if (rank < 0) return CLMOE_OK;
  if (w->nheap == w->cap) {
    const size_t cap = 2 * w->cap + 16;
    cand *h = realloc(w->heap, cap * sizeof *h);
    if (!h) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "tokenizer: out of host memory");
    w->heap = h, w->cap = cap;
  }
  size_t i = w->nheap++;
  const cand c = {rank, a, w->len[a], w->len[b]};
  while (i > 0 && before(&c, &w->heap[(i - 1) / 2])) w->heap[i] = w->heap[(i - 1) / 2], i = (i - 1) / 2;
  w->heap[i] = c;
  return CLMOE_OK;
}

static cand pop(work *w)
{
  const cand top = w->heap[0], last = w->heap[--w->nheap];
  size_t i = 0;
  for (;;) {
    size_t k = 2 * i + 1;
    if (k >= w->nheap) break;
    if (k + 1 < w->nheap && before(&w->heap[k + 1], &w->heap[k])) k++;
    if (!before(&w->heap[k], &last)) break;
    w->heap[i] = w->heap[k], i = k;
  }
  if (w->nheap) w->heap[i] = last;
  return top;
}

static clmoe_status merge_piece(clmoe_tokenizer *t, const char *s, size_t n, clmoe_tokens *out)
{
  work w = {.t = t, .s = s};
  clmoe_status st = CLMOE_OK;
  w.len = malloc(n * sizeof *w.len), w.next = malloc(n * sizeof *w.next), w.prev = malloc(n * sizeof *w.prev);
  w.id = malloc(n * sizeof *w.id);
  if (!w.len || !w.next || !w.prev || !w.id) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "tokenizer: out of host memory");
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) {
    const int32_t id = t->byte_id[(unsigned char)s[i]];
    if (id < 0 && t->unk < 0) {
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: byte 0x%02x has no token and the model has no unk_token", t->path,
                        (unsigned char)s[i]);
      goto done;
    }
    w.len[i] = 1, w.next[i] = i + 1, w.prev[i] = i - 1, w.id[i] = id;
  }
  for (uint32_t i = 0; i + 1 < n && st == CLMOE_OK; i++)
    if (w.id[i] >= 0 && w.id[i + 1] >= 0) st = push(&w, i, (uint32_t)n);
  while (st == CLMOE_OK && w.nheap) {
    const cand c = pop(&w);
    const uint32_t a = c.left, b = a + c.llen;
    if (w.len[a] != c.llen || b >= n || w.len[b] != c.rlen) continue; /* stale */
    int32_t merged;
    if (pair_rank(&w, a, b, &merged) != c.rank) continue;
    w.len[a] += w.len[b], w.len[b] = 0, w.id[a] = merged;
    w.next[a] = w.next[b];
    if (w.next[a] < n) w.prev[w.next[a]] = a;
    if (a > 0) st = push(&w, w.prev[a], (uint32_t)n);
    if (st == CLMOE_OK) st = push(&w, a, (uint32_t)n);
  }
  for (uint32_t i = 0; i < n && st == CLMOE_OK; i = w.next[i]) st = clmoe__tok_push(out, w.id[i] >= 0 ? w.id[i] : t->unk);
done:
  free(w.len), free(w.next), free(w.prev), free(w.id), free(w.heap);
  return st;
}

/* ---- the cache --------------------------------------------------------------------------- */
static void cache_clear(tok_cache *c)
{
  memset(c->slot, 0, CACHE_SLOTS * sizeof *c->slot);
  c->used = c->store_used = 0;
}

/* The cached ids of a piece, or NULL (then *slot is where it goes, or -1 when it cannot). */
static const cache_entry *cache_find(tok_cache *c, const char *s, size_t n, uint64_t h, long *slot)
{
  *slot = -1;
  for (size_t j = h & (CACHE_SLOTS - 1), probes = 0; probes < 16; j = (j + 1) & (CACHE_SLOTS - 1), probes++) {
    const cache_entry *e = &c->slot[j];
    if (!e->hash) return *slot = (long)j, NULL;
    if (e->hash == h && e->len == n && !memcmp(e->bytes, s, n)) return e;
  }
  return NULL;
}

static void cache_add(tok_cache *c, long slot, const char *s, size_t n, uint64_t h, const int32_t *ids, size_t nids)
{
  const size_t need = ((n + 3) & ~(size_t)3) + nids * sizeof *ids;
  if (c->used >= CACHE_SLOTS / 2 || c->store_used + need > CACHE_BYTES) {
    cache_clear(c);
    long again;
    cache_find(c, s, n, h, &again);
    slot = again;
  }
  if (slot < 0) return;
  char *bytes = c->store + c->store_used;
  memcpy(bytes, s, n);
  int32_t *copy = (int32_t *)(void *)(bytes + ((n + 3) & ~(size_t)3));
  memcpy(copy, ids, nids * sizeof *ids);
  c->store_used += need;
  c->slot[slot] = (cache_entry){.hash = h, .bytes = bytes, .ids = copy, .len = (uint32_t)n, .nids = (uint32_t)nids};
  c->used++;
}

clmoe_status clmoe__tok_bpe(clmoe_tokenizer *t, const char *piece, size_t n, clmoe_tokens *out)
{
  if (!n) return CLMOE_OK;
  if (n > UINT32_MAX / 2) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "tokenizer: a piece of %zu bytes", n);
  if (t->ignore_merges) {
    const int32_t id = clmoe__tok_bytes_get(t, piece, n);
    if (id >= 0) return clmoe__tok_push(out, id);
  }
  if (n == 1 && t->byte_id[(unsigned char)piece[0]] >= 0) return clmoe__tok_push(out, t->byte_id[(unsigned char)piece[0]]);
  if (n > CACHE_MAX_PIECE) return merge_piece(t, piece, n, out);
  if (!t->cache) {
    tok_cache *c = calloc(1, sizeof *c);
    if (c) c->slot = calloc(CACHE_SLOTS, sizeof *c->slot), c->store = malloc(CACHE_BYTES);
    if (!c || !c->slot || !c->store) {
      clmoe__tok_cache_free(c);
      return merge_piece(t, piece, n, out); /* no cache: slower, the same ids */
    }
    t->cache = c;
  }
  const uint64_t h = clmoe__tok_hash(piece, n) | 1;
  long slot;
  const cache_entry *e = cache_find(t->cache, piece, n, h, &slot);
  if (e) {
    for (uint32_t k = 0; k < e->nids; k++) CLMOE_TRY(clmoe__tok_push(out, e->ids[k]));
    return CLMOE_OK;
  }
  const size_t first = out->n;
  CLMOE_TRY(merge_piece(t, piece, n, out));
  cache_add(t->cache, slot, piece, n, h, out->ids + first, out->n - first);
  return CLMOE_OK;
}
