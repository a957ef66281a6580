/* fuzz_tokenizer: the tokenizers (include/clmoe/tokenizer.h) on any tokenizer file and any
 * text.
 *
 * The first byte of an input picks what the rest is:
 *   - even: a tokenizer file (clmoe_tokenizer_open decides: tokenizer.json when it starts
 *     with '{', else a tiktoken rank file). A refusal must be a status code with a message;
 *     a tokenizer that loads must encode a fixed multilingual text and the input itself
 *     (specials allowed and not) to ids inside its vocabulary, and decode them;
 *   - odd: text, encoded by two tokenizers made at start-up (a byte-level tokenizer.json
 *     with a Llama-3-style Split and merges as pairs, and the same ranks as a tiktoken
 *     file with Kimi's pattern): every id inside the vocabulary and decode(encode(x)) == x
 *     byte for byte, with and without special tokens.
 *
 * Seeds: tests/fuzz/corpus/fuzz_tokenizer/ (small tokenizer.json and tiktoken files, and
 * texts). Build and run: `make fuzz`, then tests/fuzz/fuzz_tokenizer CORPUS_DIR. */
#include "fuzz_common.h" /* first: it sets _GNU_SOURCE */

#include <string.h>

static clmoe_tokenizer *made[2];
static char made_path[2][64];

/* The byte each code point of GPT-2's byte-level alphabet stands for, inverted: the code
 * point of byte b. */
static unsigned char_of(int b)
{
  static unsigned cp[256];
  static int ready;
  if (!ready) {
    int next = 0;
    for (int x = 0; x < 256; x++) {
      const int printable = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
      cp[x] = printable ? (unsigned)x : 256u + (unsigned)next++;
    }
    ready = 1;
  }
  return cp[b];
}

/* A token's bytes as a JSON string of byte-level characters. */
static void json_token(FILE *f, const unsigned char *s, size_t n)
{
  fputc('"', f);
  for (size_t i = 0; i < n; i++) fprintf(f, "\\u%04X", char_of(s[i]));
  fputc('"', f);
}

static void b64(FILE *f, const unsigned char *s, size_t n)
{
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < n; i += 3) {
    const unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
    fputc(a[v >> 18 & 63], f), fputc(a[v >> 12 & 63], f);
    fputc(i + 1 < n ? a[v >> 6 & 63] : '=', f), fputc(i + 2 < n ? a[v & 63] : '=', f);
  }
}

/* Merges: every prefix of these words, left to right. */
static const char *const words[] = {"the", " the", "ing", " and", "tion", "中文", "日本", "😀", "  ", "\n\n", "123", "er",
                                    "<|", "|>"};

static void make_tokenizers(void)
{
  unsigned char tok[64][16];
  size_t len[64], n = 0;
  int left[64], right[64]; /* ids: bytes are 0..255, new tokens 256 + k */
  for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
    const unsigned char *s = (const unsigned char *)words[w];
    int prev = s[0];
    for (size_t k = 2; k <= strlen(words[w]); k++) {
      int found = -1;
      for (size_t t = 0; t < n; t++)
        if (len[t] == k && !memcmp(tok[t], s, k)) found = 256 + (int)t;
      if (found < 0) {
        memcpy(tok[n], s, k), len[n] = k, left[n] = prev, right[n] = s[k - 1];
        found = 256 + (int)n++;
      }
      prev = found;
    }
  }
  snprintf(made_path[0], sizeof made_path[0], "/tmp/fuzz_tokenizer.%ld.json", (long)getpid());
  snprintf(made_path[1], sizeof made_path[1], "/tmp/fuzz_tokenizer.%ld.model", (long)getpid());
  FILE *f = fopen(made_path[0], "w");
  if (!f) abort();
  fprintf(f, "{\"added_tokens\": [{\"id\": %zu, \"content\": \"<|eot|>\", \"special\": true}],\n"
             "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
             "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?"
             "\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, "
             "\"behavior\": \"Isolated\", \"invert\": false},\n"
             "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]},\n"
             "\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {",
          256 + n);
  for (int b = 0; b < 256; b++) {
    const unsigned char c = (unsigned char)b;
    json_token(f, &c, 1), fprintf(f, ": %d, ", b);
  }
  for (size_t t = 0; t < n; t++) json_token(f, tok[t], len[t]), fprintf(f, ": %zu%s", 256 + t, t + 1 < n ? ", " : "");
  fprintf(f, "}, \"merges\": [");
  for (size_t t = 0; t < n; t++) {
    fprintf(f, "%s[", t ? ", " : "");
    const unsigned char lb = (unsigned char)left[t], rb = (unsigned char)right[t];
    if (left[t] < 256) json_token(f, &lb, 1);
    else json_token(f, tok[left[t] - 256], len[left[t] - 256]);
    fputs(", ", f);
    json_token(f, &rb, 1);
    fputc(']', f);
  }
  fprintf(f, "]}}\n");
  if (fclose(f) != 0) abort();
  f = fopen(made_path[1], "w");
  if (!f) abort();
  for (int b = 0; b < 256; b++) {
    const unsigned char c = (unsigned char)b;
    b64(f, &c, 1), fprintf(f, " %d\n", b);
  }
  for (size_t t = 0; t < n; t++) b64(f, tok[t], len[t]), fprintf(f, " %zu\n", 256 + t);
  if (fclose(f) != 0) abort();
  const clmoe_special_token eot = {"<|eot|>", (int32_t)(256 + n)};
  const clmoe_tiktoken_options o = {.pattern = NULL, .specials = &eot, .nspecials = 1, .reserved = 4};
  clmoe_status st = clmoe_tokenizer_load_json(made_path[0], &made[0]);
  FUZZ_REQUIRE(st == CLMOE_OK, "the start-up tokenizer.json does not load");
  st = clmoe_tokenizer_load_tiktoken(made_path[1], &o, &made[1]);
  FUZZ_REQUIRE(st == CLMOE_OK, "the start-up tiktoken file does not load");
  unlink(made_path[0]), unlink(made_path[1]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  make_tokenizers();
  return 0;
}

/* Encodes text [n]; every id inside the vocabulary; decodes; exact when `exact`. */
static void encode_decode(clmoe_tokenizer *t, const char *text, size_t n, unsigned flags, int exact)
{
  clmoe_tokens ids = {0};
  const clmoe_status st = clmoe_tokenizer_encode(t, text, n, flags, &ids);
  FUZZ_REQUIRE(st == CLMOE_OK || (!exact && st != CLMOE_OK && clmoe_last_error()[0]), "encode failed (%s)",
               clmoe_strerror(st));
  if (st != CLMOE_OK) { /* part of the ids may have been appended: freed as ever */
    clmoe_tokens_free(&ids);
    return;
  }
  for (size_t k = 0; k < ids.n; k++)
    FUZZ_REQUIRE(ids.ids[k] >= 0 && ids.ids[k] < clmoe_tokenizer_vocab(t), "id %d outside the vocabulary %lld",
                 (int)ids.ids[k], (long long)clmoe_tokenizer_vocab(t));
  char *back = NULL;
  size_t len = 0;
  FUZZ_REQUIRE(clmoe_tokenizer_decode(t, ids.ids, ids.n, 0, &back, &len) == CLMOE_OK, "decode of encoded ids failed");
  if (exact) FUZZ_REQUIRE(len == n && !memcmp(back, text, n), "decode(encode(x)) != x (%zu bytes, %zu back)", n, len);
  free(back);
  clmoe_tokens_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1) return 0;
  const char *rest = (const char *)data + 1;
  const size_t n = size - 1;
  if (data[0] % 2) {
    for (int k = 0; k < 2; k++) {
      encode_decode(made[k], rest, n, CLMOE_TOKENIZE_SPECIAL, 1);
      encode_decode(made[k], rest, n, 0, 1);
    }
    return 0;
  }
  clmoe_tokenizer *t = NULL;
  const clmoe_status st = clmoe_tokenizer_open(fuzz_file(data + 1, n), NULL, &t);
  if (st != CLMOE_OK) {
    FUZZ_REQUIRE(t == NULL, "a refused tokenizer was returned");
    FUZZ_REQUIRE(st == CLMOE_ERR_FORMAT || st == CLMOE_ERR_IO || st == CLMOE_ERR_UNSUPPORTED ||
                     st == CLMOE_ERR_INVALID_ARGUMENT || st == CLMOE_ERR_OUT_OF_MEMORY,
                 "a refusal gave %s", clmoe_strerror(st));
    FUZZ_REQUIRE(clmoe_last_error()[0] != '\0', "a refusal without a message");
    return 0;
  }
  static const char sample[] = "The quick fox's 12345 中文 日本語。 😀👍🏽  \n\n\t<|eot|> x";
  encode_decode(t, sample, sizeof sample - 1, CLMOE_TOKENIZE_SPECIAL, 0);
  encode_decode(t, sample, sizeof sample - 1, 0, 0);
  encode_decode(t, rest, n < 4096 ? n : 4096, CLMOE_TOKENIZE_SPECIAL, 0);
  clmoe_tokenizer_free(t);
  return 0;
}
