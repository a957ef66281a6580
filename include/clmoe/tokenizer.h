/* Tokenizers: text to token ids and back, in C, for the byte-level BPE tokenizers that
 * released models ship.
 *
 * Two file formats:
 *   - Hugging Face `tokenizer.json` with model BPE over bytes: a ByteLevel pre-tokenizer,
 *     optionally after regex Split pre-tokenizers (a Sequence, as Llama-3, Qwen2 and
 *     DeepSeek-V3 ship them), the ByteLevel decoder, merges as "a b" strings or [a, b]
 *     pairs, ignore_merges, added tokens (special or not). Anything else (other models,
 *     normalizers that change the text, other pre-tokenizers) is refused with an error
 *     naming the file and the field. The NFC normalizer is accepted and the text taken as
 *     it is: text already in NFC (nearly all text) encodes as with Hugging Face.
 *   - tiktoken rank files (`tiktoken.model`: a base64 token and its rank per line, the rank
 *     being the id), with the split pattern and the special tokens from the caller
 *     (clmoe_tiktoken_options) or from a Kimi-style tokenizer_config.json.
 * Regexes run on PCRE2 with Unicode classes (\p{L}, \p{N}, scripts such as \p{Han}); a
 * character-class intersection `[A&&[B]]` (Kimi's pattern) is rewritten to a lookahead.
 *
 * Encoding: special and added tokens are matched first (longest at the leftmost place),
 * the text between them is split by the pre-tokenizer regexes, and each piece is merged by
 * ranks (lowest rank first, leftmost on ties) from its bytes; repeated pieces come from a
 * cache; on request the post-processor's special tokens (a BOS, ...) go around the ids
 * (TemplateProcessing, RobertaProcessing, BertProcessing). Text that is not valid UTF-8 is accepted: invalid bytes match no regex class
 * and are encoded byte by byte, so decode(encode(x)) == x for any bytes.
 *
 * A tokenizer is used by one thread at a time (the piece cache is not locked); open one per
 * thread to encode in parallel. */
#ifndef CLMOE_TOKENIZER_H
#define CLMOE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clmoe_tokenizer clmoe_tokenizer;

/* The split pattern of Kimi's tiktoken tokenizer (tokenization_kimi.py of
 * moonshotai/Kimi-Linear-48B-A3B): the default of clmoe_tiktoken_options.pattern. */
#define CLMOE_TOKENIZER_KIMI_PATTERN                                                             \
  "[\\p{Han}]+"                                                                                  \
  "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"                     \
  "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"                     \
  "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+"                     \
  "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"                     \
  "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* A special token of a tiktoken tokenizer: its text and its id. */
typedef struct clmoe_special_token {
  const char *text;
  int32_t id;
} clmoe_special_token;

typedef struct clmoe_tiktoken_options {
  const char *pattern;                 /* the split regex; NULL: CLMOE_TOKENIZER_KIMI_PATTERN */
  const clmoe_special_token *specials; /* [nspecials]; ids at or above the ranks' count */
  int nspecials;
  /* ids [ranks, ranks + reserved) not named in specials become the special tokens
   * "<|reserved_token_ID|>" (Kimi reserves 256); 0: none */
  int reserved;
} clmoe_tiktoken_options;

/* A Hugging Face tokenizer.json. */
CLMOE_API clmoe_status clmoe_tokenizer_load_json(const char *path, clmoe_tokenizer **tok);
/* A tiktoken rank file with the caller's pattern and special tokens (options may be NULL:
 * Kimi's pattern, no special tokens). */
CLMOE_API clmoe_status clmoe_tokenizer_load_tiktoken(const char *path, const clmoe_tiktoken_options *options,
                                                     clmoe_tokenizer **tok);
/* A tiktoken rank file with the special tokens of a Kimi-style tokenizer_config.json (its
 * added_tokens_decoder, plus 256 reserved ids) and Kimi's pattern. */
CLMOE_API clmoe_status clmoe_tokenizer_load_tiktoken_config(const char *path, const char *config_path,
                                                            clmoe_tokenizer **tok);
/* Any of the above: `path` a tokenizer.json, a tiktoken.model, or a directory holding one
 * (tokenizer.json first); `config` (a tokenizer_config.json or a directory holding one)
 * is read for tiktoken files only; NULL: the one beside the rank file, if any. */
CLMOE_API clmoe_status clmoe_tokenizer_open(const char *path, const char *config, clmoe_tokenizer **tok);
CLMOE_API void clmoe_tokenizer_free(clmoe_tokenizer *tok);

/* One more than the largest id (specials included). */
CLMOE_API int64_t clmoe_tokenizer_vocab(const clmoe_tokenizer *tok);
/* "tokenizer.json" or "tiktoken". */
CLMOE_API const char *clmoe_tokenizer_kind(const clmoe_tokenizer *tok);
/* The id of a special or added token's text, or -1. */
CLMOE_API int32_t clmoe_tokenizer_special_id(const clmoe_tokenizer *tok, const char *text);

/* A growing array of ids: start zeroed, free with clmoe_tokens_free. */
typedef struct clmoe_tokens {
  int32_t *ids; /* [n] */
  size_t n, cap;
} clmoe_tokens;
CLMOE_API void clmoe_tokens_free(clmoe_tokens *tokens);

enum {
  /* special tokens written in the text become their ids; without it their text is
   * encoded as ordinary text (added tokens that are not special are always matched) */
  CLMOE_TOKENIZE_SPECIAL = 1,
  /* decode: leave special tokens out */
  CLMOE_TOKENIZE_SKIP_SPECIAL = 2,
  /* encode: the special tokens a tokenizer.json's post-processor puts around a sequence
   * (a BOS, ...), as Hugging Face's add_special_tokens=True; tiktoken files have none */
  CLMOE_TOKENIZE_ADD_SPECIAL = 4,
};

/* Appends the ids of text [len bytes] to out (after a failure out may hold some of them:
 * free it as always). */
CLMOE_API clmoe_status clmoe_tokenizer_encode(clmoe_tokenizer *tok, const char *text, size_t len, unsigned flags,
                                              clmoe_tokens *out);
/* The bytes of ids [n] (not NUL-terminated; *len of them) in a new buffer for free();
 * an id outside the vocabulary is an error naming its place. */
CLMOE_API clmoe_status clmoe_tokenizer_decode(const clmoe_tokenizer *tok, const int32_t *ids, size_t n,
                                              unsigned flags, char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
