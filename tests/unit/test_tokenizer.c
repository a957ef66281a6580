/* CUnit suite: the tokenizers (lib/tokenize). Exact ids against the ones Hugging Face
 * tokenizers and tiktoken gave for a multilingual text (tests/data/tokenizer, made by its
 * make_fixtures.py); decode(encode(x)) == x on fresh random text and random bytes; the
 * merge loop against a plain reference that rescans every pair after each merge; bad
 * files and ids give errors naming the file and the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"
#include "tokenize/tokenize_internal.h"

static char dir[64];
static char fixtures[1024];

static const char *fixture(const char *name)
{
  static char p[4][1200];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", fixtures, name);
  return p[k];
}

static char *slurp(const char *path, size_t *n)
{
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  const long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) buf = (free(buf), NULL);
  fclose(f);
  if (buf) buf[len] = '\0', *n = (size_t)len;
  return buf;
}

static void write_text(const char *name, const char *text)
{
  char p[256];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs(text, f);
  fclose(f);
}

static const char *const cases[] = {"english", "code", "cjk", "emoji", "digits", "spaces", "mixed", "unicode",
                                    "strip", "specials", "kimi", "all"};

/* decode(ids) must give text [n] back exactly. */
static void check_round_trip(const clmoe_tokenizer *t, const clmoe_tokens *ids, const char *text, size_t n,
                             const char *what)
{
  char *back;
  size_t len;
  TEST_OK(clmoe_tokenizer_decode(t, ids->ids, ids->n, 0, &back, &len));
  const int same = len == n && !memcmp(back, text, n);
  if (!same) fprintf(stderr, "\n  %s: decode(encode(x)) != x (seed %llu)\n", what, (unsigned long long)test_seed);
  CU_ASSERT(same);
  free(back);
}

/* ids against the committed list `expect` ("1,2,3\n"). */
static void expect_ids(const char *expect, const clmoe_tokens *ids, const char *kind, const char *name)
{
  size_t k = 0, bad = (size_t)-1;
  for (char *p = (char *)expect; *p && *p != '\n'; k++) {
    const long v = strtol(p, &p, 10);
    if (k >= ids->n || ids->ids[k] != v) {
      if (bad == (size_t)-1) bad = k;
    }
    if (*p == ',') p++;
  }
  if (k != ids->n && bad == (size_t)-1) bad = k < ids->n ? k : ids->n;
  if (bad != (size_t)-1)
    fprintf(stderr, "\n  %s %s: ids differ from number %zu on (%zu ids, %zu expected)\n", kind, name, bad + 1, ids->n, k);
  CU_ASSERT_EQUAL(bad, (size_t)-1);
}

/* Every case through one tokenizer against the committed ids; decoded back to the text
 * unless the tokenizer changes it (`exact` 0: a prefix space, stripped white space). */
static void check_fixtures(const char *tok_file, const char *config, const char *kind, unsigned flags, int exact)
{
  clmoe_tokenizer *t = NULL;
  if (config) TEST_OK(clmoe_tokenizer_load_tiktoken_config(fixture(tok_file), fixture(config), &t));
  else TEST_OK(clmoe_tokenizer_open(fixture(tok_file), NULL, &t));
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    char name[128];
    size_t n, ne;
    snprintf(name, sizeof name, "cases/%s.txt", cases[c]);
    char *text = slurp(fixture(name), &n);
    snprintf(name, sizeof name, "cases/%s.%s.ids", cases[c], kind);
    char *expect = slurp(fixture(name), &ne);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(expect);
    clmoe_tokens ids = {0};
    TEST_OK(clmoe_tokenizer_encode(t, text, n, flags, &ids));
    expect_ids(expect, &ids, kind, cases[c]);
    CU_ASSERT(ids.n > 0);
    if (exact) check_round_trip(t, &ids, text, n, cases[c]);
    /* the second time through comes from the piece cache: the same ids */
    clmoe_tokens again = {0};
    TEST_OK(clmoe_tokenizer_encode(t, text, n, flags, &again));
    CU_ASSERT(again.n == ids.n && !memcmp(again.ids, ids.ids, ids.n * sizeof *ids.ids));
    clmoe_tokens_free(&again);
    clmoe_tokens_free(&ids);
    free(text), free(expect);
  }
  clmoe_tokenizer_free(t);
}

/* With the post-processors' special tokens (add_special_tokens=True): Llama-3.1's
 * ByteLevel + TemplateProcessing (a BOS), a template with a BOS and an EOS, RobertaProcessing;
 * a tiktoken file has none (the ids do not change). */
static void test_post_processors(void)
{
  static const char *const kinds[] = {"llama3", "deepseek", "gpt2"}, *const names[] = {"english", "specials"};
  for (int f = 0; f < 3; f++) {
    char file[64];
    snprintf(file, sizeof file, "%s.json", kinds[f]);
    clmoe_tokenizer *t = NULL;
    TEST_OK(clmoe_tokenizer_open(fixture(file), NULL, &t));
    for (int c = 0; c < 2; c++) {
      char name[128], kind[64];
      size_t n, ne;
      snprintf(name, sizeof name, "cases/%s.txt", names[c]);
      char *text = slurp(fixture(name), &n);
      snprintf(name, sizeof name, "cases/%s.%s-special.ids", names[c], kinds[f]);
      char *expect = slurp(fixture(name), &ne);
      CU_ASSERT_PTR_NOT_NULL_FATAL(text);
      CU_ASSERT_PTR_NOT_NULL_FATAL(expect);
      clmoe_tokens ids = {0};
      TEST_OK(clmoe_tokenizer_encode(t, text, n, CLMOE_TOKENIZE_SPECIAL | CLMOE_TOKENIZE_ADD_SPECIAL, &ids));
      snprintf(kind, sizeof kind, "%s-special", kinds[f]);
      expect_ids(expect, &ids, kind, names[c]);
      clmoe_tokens_free(&ids);
      free(text), free(expect);
    }
    clmoe_tokenizer_free(t);
  }
  clmoe_tokenizer *t = NULL;
  clmoe_tokens a = {0}, b = {0};
  TEST_OK(clmoe_tokenizer_load_tiktoken_config(fixture("tiktoken.model"), fixture("tokenizer_config.json"), &t));
  TEST_OK(clmoe_tokenizer_encode(t, "Hello world", 11, CLMOE_TOKENIZE_ADD_SPECIAL, &a));
  TEST_OK(clmoe_tokenizer_encode(t, "Hello world", 11, 0, &b));
  CU_ASSERT(a.n == b.n && a.n > 0 && !memcmp(a.ids, b.ids, a.n * sizeof *a.ids));
  clmoe_tokens_free(&a), clmoe_tokens_free(&b);
  clmoe_tokenizer_free(t);
}

static void test_llama3(void) { check_fixtures("llama3.json", NULL, "llama3", CLMOE_TOKENIZE_SPECIAL, 1); }
static void test_deepseek(void) { check_fixtures("deepseek.json", NULL, "deepseek", CLMOE_TOKENIZE_SPECIAL, 1); }
static void test_gpt2(void) { check_fixtures("gpt2.json", NULL, "gpt2", CLMOE_TOKENIZE_SPECIAL, 0); }
static void test_splits(void) { check_fixtures("splits.json", NULL, "splits", CLMOE_TOKENIZE_SPECIAL, 0); }
static void test_tiktoken(void)
{
  check_fixtures("tiktoken.model", "tokenizer_config.json", "tiktoken", CLMOE_TOKENIZE_SPECIAL, 1);
  check_fixtures("tiktoken.model", "tokenizer_config.json", "tiktoken-ordinary", 0, 1);
}

#define HF_HEAD "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,"
#define HF_PRE "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
#define HF_MODEL(extra, merges) \
  "\"model\":{\"type\":\"BPE\"" extra ",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":" merges "}}"

/* Special tokens: found by text, skipped on request, and their ids. */
static void test_specials(void)
{
  clmoe_tokenizer *t = NULL;
  TEST_OK(clmoe_tokenizer_open(fixture("llama3.json"), NULL, &t));
  CU_ASSERT_STRING_EQUAL(clmoe_tokenizer_kind(t), "tokenizer.json");
  const int32_t eot = clmoe_tokenizer_special_id(t, "<|eot_id|>");
  CU_ASSERT(eot >= 3256 && eot < clmoe_tokenizer_vocab(t));
  CU_ASSERT_EQUAL(clmoe_tokenizer_special_id(t, "<|nothing|>"), -1);
  const char text[] = "hi<|eot_id|>";
  clmoe_tokens ids = {0};
  TEST_OK(clmoe_tokenizer_encode(t, text, strlen(text), CLMOE_TOKENIZE_SPECIAL, &ids));
  CU_ASSERT(ids.n >= 2 && ids.ids[ids.n - 1] == eot);
  char *out;
  size_t len;
  TEST_OK(clmoe_tokenizer_decode(t, ids.ids, ids.n, CLMOE_TOKENIZE_SKIP_SPECIAL, &out, &len));
  CU_ASSERT(len == 2 && !memcmp(out, "hi", 2));
  free(out);
  const int32_t outside[2] = {5, (int32_t)clmoe_tokenizer_vocab(t)};
  CU_ASSERT_EQUAL(clmoe_tokenizer_decode(t, outside, 2, 0, &out, &len), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "number 2 of the list"));
  clmoe_tokens_free(&ids);
  clmoe_tokenizer_free(t);
  /* a vocabulary key outside the byte-level alphabet (a raw space beside "Ġ", the space's
   * byte-level form) decodes but is never produced: a space encodes as "Ġ", as in Hugging Face */
  write_text("raw.json", HF_HEAD HF_PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\" \":0,\"\u0120\":1,\"a\":2},"
                         "\"merges\":[]}}");
  char p[256];
  snprintf(p, sizeof p, "%s/raw.json", dir);
  TEST_OK(clmoe_tokenizer_open(p, NULL, &t));
  TEST_OK(clmoe_tokenizer_encode(t, "a a", 3, 0, &ids));
  CU_ASSERT(ids.n == 3 && ids.ids[0] == 2 && ids.ids[1] == 1 && ids.ids[2] == 2);
  const int32_t raw = 0;
  TEST_OK(clmoe_tokenizer_decode(t, &raw, 1, 0, &out, &len));
  CU_ASSERT(len == 1 && out[0] == ' ');
  free(out);
  clmoe_tokens_free(&ids);
  clmoe_tokenizer_free(t);
}

/* ---- random inputs -------------------------------------------------------------------- */
static uint64_t rng_state;
static uint64_t rnd(void)
{
  rng_state += 0x9e3779b97f4a7c15ULL;
  uint64_t z = rng_state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Random text: fragments of every script, specials, runs of digits and white space, and
 * (when bytes) raw bytes that are not UTF-8. */
static size_t random_text(char *buf, size_t cap, int bytes)
{
  static const char *const frag[] = {"the ", "The", " quick", "'s", "'LL", "  ", "\t", "\n", "\r\n", "   \n ", "0",
                                     "12345", "3.14", "中文", "日本語", "。", "カタカナ", "한국어", "😀", "👨‍👩‍👧",
                                     "é", "e\xcc\x81", "Ελλη", "рус", "العربية", "<|eot_id|>", "<|begin_of_text|>",
                                     "[BOS]", "<|im_end|>", "<tool>", "{", "}", "();", "->", "__x", "  \n\n",
                                     "<|", "|>", "[EOS"};
  size_t n = 0;
  const int pieces = 1 + (int)(rnd() % 60);
  for (int p = 0; p < pieces && n + 64 < cap; p++) {
    if (bytes && rnd() % 4 == 0) {
      const int k = 1 + (int)(rnd() % 6);
      for (int b = 0; b < k; b++) buf[n++] = (char)(rnd() % 256);
    } else if (rnd() % 8 == 0) {
      const int k = 1 + (int)(rnd() % 40);
      const char c = " 7\n\t"[rnd() % 4];
      for (int b = 0; b < k; b++) buf[n++] = c;
    } else {
      const char *f = frag[rnd() % (sizeof frag / sizeof *frag)];
      memcpy(buf + n, f, strlen(f)), n += strlen(f);
    }
  }
  return n;
}

static void test_round_trip_random(void)
{
  static const char *const files[] = {"llama3.json", "deepseek.json", "tiktoken.model"};
  rng_state = test_seed;
  char buf[4096];
  for (int f = 0; f < 3; f++) {
    clmoe_tokenizer *t = NULL;
    TEST_OK(clmoe_tokenizer_open(fixture(files[f]), NULL, &t));
    for (int trial = 0; trial < 300; trial++) {
      const size_t n = random_text(buf, sizeof buf, trial % 2);
      for (unsigned flags = 0; flags < 2; flags++) {
        clmoe_tokens ids = {0};
        TEST_OK(clmoe_tokenizer_encode(t, buf, n, flags ? CLMOE_TOKENIZE_SPECIAL : 0, &ids));
        for (size_t k = 0; k < ids.n; k++) CU_ASSERT(ids.ids[k] >= 0 && ids.ids[k] < clmoe_tokenizer_vocab(t));
        check_round_trip(t, &ids, buf, n, files[f]);
        clmoe_tokens_free(&ids);
      }
    }
    clmoe_tokenizer_free(t);
  }
}

/* The reference merge: after every merge, rescan all neighbouring pairs for the lowest
 * rank (leftmost on ties). Quadratic, and plainly the definition. */
static size_t reference_bpe(const clmoe_tokenizer *t, const char *s, size_t n, int32_t *out)
{
  size_t start[512], len[512];
  int32_t id[512];
  size_t m = n;
  for (size_t i = 0; i < n; i++) start[i] = i, len[i] = 1, id[i] = t->byte_id[(unsigned char)s[i]];
  if (t->ignore_merges) {
    const int32_t whole = clmoe__tok_bytes_get(t, s, n);
    if (whole >= 0) return out[0] = whole, 1;
  }
  for (;;) {
    int32_t best = -1, best_id = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < m; i++) {
      int32_t r, merged;
      if (t->tiktoken) r = merged = clmoe__tok_bytes_get(t, s + start[i], len[i] + len[i + 1]);
      else r = clmoe__tok_pair_get(t, id[i], id[i + 1], &merged);
      if (r >= 0 && (best < 0 || r < best)) best = r, best_id = merged, at = i;
    }
    if (best < 0) break;
    len[at] += len[at + 1], id[at] = best_id;
    memmove(start + at + 1, start + at + 2, (m - at - 2) * sizeof *start);
    memmove(len + at + 1, len + at + 2, (m - at - 2) * sizeof *len);
    memmove(id + at + 1, id + at + 2, (m - at - 2) * sizeof *id);
    m--;
  }
  memcpy(out, id, m * sizeof *id);
  return m;
}

static void test_merge_reference(void)
{
  static const char *const files[] = {"llama3.json", "deepseek.json", "tiktoken.model"};
  static const char *const words[] = {"the", "tion", "ing", " a", "中", "文", "😀", "12", "  ", "e", "s", "re", "ab",
                                      "de", "f(", "x)", "é", "。"};
  rng_state = test_seed ^ 0x51ed;
  for (int f = 0; f < 3; f++) {
    clmoe_tokenizer *t = NULL;
    TEST_OK(clmoe_tokenizer_open(fixture(files[f]), NULL, &t));
    for (int trial = 0; trial < 400; trial++) {
      char piece[512];
      size_t n = 0;
      const size_t want = trial < 300 ? 1 + rnd() % 24 : 100 + rnd() % 380; /* short and past the cache's limit */
      while (n < want) {
        const char *w = words[rnd() % (sizeof words / sizeof *words)];
        if (n + strlen(w) > sizeof piece) break;
        memcpy(piece + n, w, strlen(w)), n += strlen(w);
      }
      int32_t ref[512];
      const size_t nref = reference_bpe(t, piece, n, ref);
      for (int twice = 0; twice < 2; twice++) { /* the second from the cache */
        clmoe_tokens got = {0};
        TEST_OK(clmoe__tok_bpe(t, piece, n, &got));
        const int same = got.n == nref && !memcmp(got.ids, ref, nref * sizeof *ref);
        if (!same)
          fprintf(stderr, "\n  %s: merge of a %zu-byte piece differs from the reference (seed %llu, trial %d)\n",
                  files[f], n, (unsigned long long)test_seed, trial);
        CU_ASSERT(same);
        clmoe_tokens_free(&got);
      }
    }
    clmoe_tokenizer_free(t);
  }
}

/* The matches of a regex, joined by '|'. */
typedef struct joined {
  const char *s;
  char out[256];
} joined;

static clmoe_status join_match(void *arg, size_t b, size_t e)
{
  joined *j = arg;
  if (j->out[0]) strcat(j->out, "|");
  strncat(j->out, j->s + b, e - b);
  return CLMOE_OK;
}

/* A class intersection and \uHHHH rewritten for PCRE2, scripts as scripts (not extensions). */
static void test_regex_forms(void)
{
  static const struct { const char *pattern, *text, *pieces; } rx[] = {
      {"[\\p{L}&&[^\\p{Han}]]+", "ab中cd", "ab|cd"},
      {"[a-z&&[^aeiou]]+", "strength", "str|ngth"},
      {"[\\u3040-\\u309F]+", "aひらがなb", "ひらがな"},
      {"[\\p{Han}]+", "大学。日本", "大学|日本"},
      {"\\P{Han}+", "大学。日本", "。"},
      {"\\p{L}+", "ab\xff\xfe" "cd", "ab|cd"}, /* bytes that are not UTF-8 match no class */
  };
  for (size_t k = 0; k < sizeof rx / sizeof *rx; k++) {
    tok_regex *re = NULL;
    TEST_OK(clmoe__tok_regex_compile(rx[k].pattern, strlen(rx[k].pattern), "test", &re));
    joined j = {.s = rx[k].text, .out = ""};
    TEST_OK(clmoe__tok_regex_each(re, j.s, strlen(j.s), join_match, &j));
    if (strcmp(j.out, rx[k].pieces)) fprintf(stderr, "\n  /%s/ on '%s': '%s'\n", rx[k].pattern, j.s, j.out);
    CU_ASSERT_STRING_EQUAL(j.out, rx[k].pieces);
    clmoe__tok_regex_free(re);
  }
}

/* ---- bad files ------------------------------------------------------------------------- */
static void test_bad_files(void)
{
  static const struct { const char *file, *text, *expect; } bad[] = {
      {"syntax.json", "{\"model\": {\"type\": \"BPE\",}\n}", "line 1, column 26"},
      {"unigram.json", HF_HEAD HF_PRE "\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", "model.type is 'Unigram'"},
      {"lower.json", "{\"normalizer\":{\"type\":\"Lowercase\"}," HF_PRE HF_MODEL("", "[\"a b\"]"),
       "normalizer.type is 'Lowercase'"},
      {"meta.json", HF_HEAD "\"pre_tokenizer\":{\"type\":\"Metaspace\"}," HF_MODEL("", "[\"a b\"]"),
       "pre_tokenizer.type is 'Metaspace'"},
      {"nobyte.json", HF_HEAD "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":"
                      "\"Isolated\",\"invert\":false}," HF_MODEL("", "[\"a b\"]"), "no ByteLevel step"},
      {"merge.json", HF_HEAD HF_PRE HF_MODEL("", "[\"a c\"]"), "model.merges[0]: 'c' is not in model.vocab"},
      {"merge2.json", HF_HEAD HF_PRE HF_MODEL("", "[\"a  b\"]"), "model.merges[0] is 'a  b'"},
      {"fallback.json", HF_HEAD HF_PRE HF_MODEL(",\"byte_fallback\":true", "[[\"a\",\"b\"]]"), "model.byte_fallback"},
      {"regex.json", HF_HEAD "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                     "\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":"
                     "\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}," HF_MODEL("", "[]"),
       "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex does not compile"},
      {"added.json", "{\"added_tokens\":[{\"id\":-1,\"content\":\"x\"}]," HF_PRE HF_MODEL("", "[]"),
       "added_tokens[0].id"},
      {"post1.json", HF_HEAD HF_PRE "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\""
                     ":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{}},"
                     HF_MODEL("", "[]"), "post_processor.single[0]: the special token '<s>' has no ids"},
      {"post2.json", HF_HEAD HF_PRE "\"post_processor\":{\"type\":\"RobertaProcessing\",\"cls\":[\"a\",0],"
                     "\"sep\":[\"z\",7]}," HF_MODEL("", "[]"), "post_processor: id 7 is not a token"},
      {"post3.json", HF_HEAD HF_PRE "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[{\"type\":"
                     "\"TemplateProcessing\",\"single\":[],\"special_tokens\":{}}]}," HF_MODEL("", "[]"),
       "post_processor.processors[0].single has no sequence A"},
      {"b64.model", "QQ== 0\n!!!! 1\n", "line 2: the token is not valid base64"},
      {"rank.model", "QQ== 0\nQg== 0\n", "line 2: rank 0 appears twice"},
      {"norank.model", "QQ==\n", "line 1: expected 'BASE64 RANK'"},
      {"bytes.model", "QQ== 0\nQg== 1\n", "byte 0x00 has no rank"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    write_text(bad[i].file, bad[i].text);
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, bad[i].file);
    clmoe_tokenizer *t = (clmoe_tokenizer *)&t; /* must come back NULL */
    const clmoe_status st = clmoe_tokenizer_open(p, NULL, &t);
    const int ok = st != CLMOE_OK && !t && strstr(clmoe_last_error(), p) && strstr(clmoe_last_error(), bad[i].expect);
    if (!ok) fprintf(stderr, "\n  %s: \"%s\"\n", bad[i].file, clmoe_last_error());
    CU_ASSERT(ok);
  }
  /* a post-processor of another type: ids without the special tokens, an error with them */
  write_text("post4.json", HF_HEAD HF_PRE "\"post_processor\":{\"type\":\"Foo\"}," HF_MODEL("", "[[\"a\",\"b\"]]"));
  char post[256];
  snprintf(post, sizeof post, "%s/post4.json", dir);
  clmoe_tokenizer *pt = NULL;
  clmoe_tokens ids = {0};
  TEST_OK(clmoe_tokenizer_open(post, NULL, &pt));
  TEST_OK(clmoe_tokenizer_encode(pt, "ab", 2, 0, &ids));
  CU_ASSERT(ids.n == 1 && ids.ids[0] == 2);
  CU_ASSERT_EQUAL(clmoe_tokenizer_encode(pt, "ab", 2, CLMOE_TOKENIZE_ADD_SPECIAL, &ids), CLMOE_ERR_UNSUPPORTED);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "post_processor.type is 'Foo'"));
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), post));
  clmoe_tokens_free(&ids);
  clmoe_tokenizer_free(pt);
  /* a tokenizer_config.json whose keys are not ids */
  write_text("config.json", "{\"added_tokens_decoder\": {\"x\": {\"content\": \"[BOS]\"}}}");
  char cfg[256];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  clmoe_tokenizer *t = NULL;
  CU_ASSERT_NOT_EQUAL(clmoe_tokenizer_load_tiktoken_config(fixture("tiktoken.model"), cfg, &t), CLMOE_OK);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "added_tokens_decoder['x']"));
  CU_ASSERT_PTR_NULL(t);
  CU_ASSERT_NOT_EQUAL(clmoe_tokenizer_open(dir, NULL, &t), CLMOE_OK); /* no tokenizer in it */
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "without tokenizer.json or tiktoken.model"));
}

static void add_tests(CU_pSuite suite)
{
  snprintf(dir, sizeof dir, "/tmp/clmoe-tok.XXXXXX");
  if (!mkdtemp(dir)) abort();
  const char *src = getenv("CLMOE_SRCDIR");
  snprintf(fixtures, sizeof fixtures, "%s/tests/data/tokenizer", src ? src : "..");
  CU_add_test(suite, "Llama-3-style tokenizer.json: ids as Hugging Face's", test_llama3);
  CU_add_test(suite, "DeepSeek-V3-style tokenizer.json: ids as Hugging Face's", test_deepseek);
  CU_add_test(suite, "GPT-2-style tokenizer.json (prefix space, stripping added tokens): ids as Hugging Face's",
              test_gpt2);
  CU_add_test(suite, "Split behaviours Removed, MergedWithPrevious, MergedWithNext: ids as Hugging Face's",
              test_splits);
  CU_add_test(suite, "tiktoken with Kimi's pattern: ids as tiktoken's", test_tiktoken);
  CU_add_test(suite, "special tokens", test_specials);
  CU_add_test(suite, "post-processors' special tokens: ids as Hugging Face's add_special_tokens=True",
              test_post_processors);
  CU_add_test(suite, "decode(encode(x)) == x on random text and bytes", test_round_trip_random);
  CU_add_test(suite, "merge loop against the rescanning reference", test_merge_reference);
  CU_add_test(suite, "regex rewrites for PCRE2", test_regex_forms);
  CU_add_test(suite, "bad tokenizer files", test_bad_files);
}

int main(void)
{
  int rc = test_main("tokenizer", add_tests);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (dir[0] && system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
