/* Private to lib/tokenize/. The file graph, bottom up (a file calls only those below it):
 *   tok_table.c     the tokenizer object: byte-string and pair hash tables, the id table,
 *                   the texts matched first, the byte-level alphabet, UTF-8, creation
 *   tok_json.c      a small JSON reader (a tree of nodes) for tokenizer.json and configs
 *   tok_regex.c     PCRE2 patterns: compile (with the rewrites PCRE2 needs), split
 *   tok_bpe.c       the merge loop over one piece, and the piece cache
 *   tok_post.c      tokenizer.json's post-processor: the ids around a sequence
 *   tok_hf.c        tokenizer.json -> a tokenizer
 *   tok_tiktoken.c  tiktoken rank files and tokenizer_config.json -> a tokenizer
 *   tok_encode.c    open, free, encode, decode (the public entry points; a loader that
 *                   fails leaves what it built to be freed here) */
#ifndef CLMOE_TOKENIZE_INTERNAL_H
#define CLMOE_TOKENIZE_INTERNAL_H

#include "runtime/internal.h"
#include "clmoe/tokenizer.h"

/* ---- tok_json.c ------------------------------------------------------------------------ */
typedef enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUMBER, TJ_STRING, TJ_ARRAY, TJ_OBJECT } tj_type;
typedef struct tj_node tj_node;
struct tj_node {
  tj_type type;
  const char *key;  /* member name inside an object (NUL-terminated), else NULL */
  const char *str;  /* TJ_STRING: [len] bytes, NUL-terminated (may hold NULs) */
  size_t len;       /* TJ_STRING: bytes; TJ_ARRAY / TJ_OBJECT: members */
  double num;       /* TJ_NUMBER */
  tj_node *kid;     /* TJ_ARRAY / TJ_OBJECT: [len] members */
};
typedef struct tj_doc tj_doc;
/* The whole file into a new buffer (NUL-terminated; *n bytes without the NUL). */
clmoe_status clmoe__tok_read_file(const char *path, char **text, size_t *n);
/* Parses a whole file; errors name the file, line and column. */
clmoe_status clmoe__tok_json_read(const char *path, tj_doc **doc, const tj_node **root);
void clmoe__tok_json_free(tj_doc *doc);
/* The member `key` of an object (NULL when absent or when o is not an object). */
const tj_node *clmoe__tok_json_get(const tj_node *o, const char *key);
/* 1 when n is a number holding an integer in [lo, hi]. */
int clmoe__tok_json_int(const tj_node *n, int64_t lo, int64_t hi, int64_t *v);

/* ---- tok_regex.c ----------------------------------------------------------------------- */
typedef struct tok_regex tok_regex;
/* Compiles pattern [len] with UTF and UCP (JIT when available); `what` names it in errors
 * ("FILE: pre_tokenizer.pretokenizers[0].pattern.Regex"). */
clmoe_status clmoe__tok_regex_compile(const char *pattern, size_t len, const char *what, tok_regex **re);
void clmoe__tok_regex_free(tok_regex *re);
/* The non-empty matches of re in s [n], in order: calls fn(arg, begin, end) for each;
 * stops at the first non-OK status fn returns. */
typedef clmoe_status (*tok_match_fn)(void *arg, size_t begin, size_t end);
clmoe_status clmoe__tok_regex_each(const tok_regex *re, const char *s, size_t n, tok_match_fn fn, void *arg);

/* ---- tok_table.c ----------------------------------------------------------------------- */
/* Byte strings -> id, open addressing. */
typedef struct tok_bytes_map {
  uint32_t *slot; /* [cap] id + 1, 0 empty */
  size_t cap, n;
} tok_bytes_map;
/* (left id, right id) -> (rank, merged id). */
typedef struct tok_pair_map {
  uint64_t *key;  /* [cap] (left << 32 | right) + 1, 0 empty */
  int32_t *rank, *merged;
  size_t cap, n;
} tok_pair_map;

typedef struct tok_token {
  const char *bytes; /* [len] (into the tokenizer's arena or the file image) */
  uint32_t len;
  uint8_t present;   /* the id exists */
  uint8_t special;   /* a special token (decode may skip it) */
} tok_token;

/* How the pre-tokenizer splits a piece: the regex matches become pieces (ISOLATED), are
 * dropped (REMOVED) or are joined to the piece before / after them. */
typedef enum { TOK_SPLIT_ISOLATED, TOK_SPLIT_REMOVED, TOK_SPLIT_MERGED_PREV, TOK_SPLIT_MERGED_NEXT } tok_split_kind;
typedef struct tok_step {
  tok_regex *re;      /* NULL: a ByteLevel step without its regex */
  tok_split_kind kind;
  int prefix_space;   /* ByteLevel add_prefix_space */
} tok_step;

/* A text matched before pre-tokenization (special or added token). */
typedef struct tok_added {
  const char *text;
  uint32_t len;
  int32_t id;
  uint8_t special, lstrip, rstrip, single_word;
} tok_added;

typedef struct tok_cache tok_cache;

struct clmoe_tokenizer {
  const char *kind;     /* "tokenizer.json" or "tiktoken" */
  char path[512];
  tok_token *tok;       /* [vocab] by id */
  int64_t vocab;
  tok_bytes_map by_bytes; /* the model's tokens (not the added ones) by their bytes */
  tok_pair_map pairs;     /* tokenizer.json merges; empty for tiktoken */
  int tiktoken;           /* ranks by concatenated bytes (tiktoken) or by pair (merges) */
  int ignore_merges;      /* a piece that is a token is that token */
  int32_t byte_id[256];   /* id of each single byte, -1 when none */
  int32_t unk;            /* the unknown token for bytes without an id; -1: an error */
  tok_step *steps;        /* [nsteps] the pre-tokenizer */
  int nsteps;
  tok_added *added;       /* [nadded] sorted by first byte, then longest first */
  int nadded;
  int first_added[257];   /* added[first_added[b] .. first_added[b + 1]) start with byte b */
  int32_t *post_before;   /* [npost_before] the post-processor's ids before a sequence */
  int32_t *post_after;    /* [npost_after] and after it (CLMOE_TOKENIZE_ADD_SPECIAL) */
  int npost_before, npost_after;
  char post_error[832];   /* non-empty: the post-processor is not supported, and why */
  char **arena;           /* allocations freed with the tokenizer */
  size_t narena, cap_arena;
  tok_cache *cache;
};

clmoe_status clmoe__tok_new(const char *path, const char *kind, clmoe_tokenizer **t);
/* Keeps p (malloc'd) until the tokenizer is freed; frees it and fails when out of memory. */
clmoe_status clmoe__tok_keep(clmoe_tokenizer *t, void *p);
/* Copies bytes [n] (plus a NUL) into memory the tokenizer owns. */
clmoe_status clmoe__tok_copy(clmoe_tokenizer *t, const char *bytes, size_t n, const char **out);
/* Makes room for ids [0, vocab). */
clmoe_status clmoe__tok_reserve(clmoe_tokenizer *t, int64_t vocab);
/* Sets id's bytes (kept, not copied); an id given twice is an error naming `what`. */
clmoe_status clmoe__tok_set(clmoe_tokenizer *t, int32_t id, const char *bytes, size_t len, int special,
                            const char *what);
uint64_t clmoe__tok_hash(const char *s, size_t n);
/* Adds bytes -> id (a second id for the same bytes is an error naming `what`). */
clmoe_status clmoe__tok_bytes_put(clmoe_tokenizer *t, int32_t id, const char *what);
int32_t clmoe__tok_bytes_get(const clmoe_tokenizer *t, const char *s, size_t n);
clmoe_status clmoe__tok_pair_put(clmoe_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged);
/* rank of (a, b) and the merged id, or -1 */
int32_t clmoe__tok_pair_get(const clmoe_tokenizer *t, int32_t a, int32_t b, int32_t *merged);
/* Adds a text matched before pre-tokenization; clmoe__tok_added_index sorts them (once,
 * after the last). */
clmoe_status clmoe__tok_added_put(clmoe_tokenizer *t, const char *text, size_t len, int32_t id, int special,
                                  int lstrip, int rstrip, int single_word);
void clmoe__tok_added_index(clmoe_tokenizer *t);
/* Fills byte_id[] from the model's tokens. */
void clmoe__tok_byte_ids(clmoe_tokenizer *t);
/* The GPT-2 byte-level alphabet: byte_of[code point] is the byte it stands for, or -1
 * (code points from 324 up stand for none). */
void clmoe__tok_byte_alphabet(int16_t byte_of[324]);
/* Decodes one UTF-8 sequence at s [n]: its length (0 when invalid) and code point. */
size_t clmoe__tok_utf8(const unsigned char *s, size_t n, uint32_t *cp);

/* ---- tok_bpe.c ------------------------------------------------------------------------- */
/* Appends the ids of one piece [n bytes] (merged by ranks) to out. */
clmoe_status clmoe__tok_bpe(clmoe_tokenizer *t, const char *piece, size_t n, clmoe_tokens *out);
void clmoe__tok_cache_free(tok_cache *c);
/* Appends id to out, growing it. */
clmoe_status clmoe__tok_push(clmoe_tokens *out, int32_t id);

/* ---- tok_post.c ---------------------------------------------------------------------- */
/* tokenizer.json's post_processor (may be NULL) -> t->post_before / post_after / post_error;
 * after the vocabulary and the added tokens are loaded (its ids must be tokens). */
clmoe_status clmoe__tok_load_post(clmoe_tokenizer *t, const tj_node *post);

/* ---- tok_hf.c / tok_tiktoken.c --------------------------------------------------------- */
clmoe_status clmoe__tok_load_hf(const char *path, clmoe_tokenizer **t);
clmoe_status clmoe__tok_load_tiktoken(const char *path, const clmoe_tiktoken_options *o, clmoe_tokenizer **t);
clmoe_status clmoe__tok_load_tiktoken_config(const char *path, const char *config, clmoe_tokenizer **t);

#endif
