/* Pre-tokenizer regexes on PCRE2: compiled with UTF and UCP (so \p{L}, \p{N}, \s and
 * scripts such as \p{Han} are Unicode's) and MATCH_INVALID_UTF (bytes that are not UTF-8
 * match no character class instead of failing the match), JIT-compiled where the library
 * has a JIT. The patterns released tokenizers ship are written for Oniguruma (Hugging Face)
 * or Rust's regex crate (tiktoken); PCRE2 reads them alike except for the crate's class
 * intersection `[A&&[B]]` (Kimi's pattern), rewritten here as `(?:(?=[B])[A])`, and
 * Oniguruma's `\uHHHH`, rewritten as `\x{HHHH}`. A script such as `\p{Han}` means the
 * characters of that script in Oniguruma and the regex crate, but its script extensions
 * in PCRE2 from 10.40 on (there it would take U+3002 "。", used by Han, Hiragana and
 * Katakana, into `\p{Han}`): scripts are rewritten as `\p{sc:Han}` where PCRE2 knows
 * that form. */
#include "tokenize/tokenize_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tok_regex {
  pcre2_code *code;
  pcre2_match_data *md;
  pcre2_match_context *mc;
  pcre2_jit_stack *jit_stack;
  char what[300];
};

/* The end of the character class that starts at p[i] ('['): the index of its closing ']',
 * nested classes counted (the regex crate's syntax); n when it does not close. */
static size_t class_end(const char *p, size_t n, size_t i)
{
  int depth = 0;
  while (i < n) {
    if (p[i] == '\\') {
      i += 2;
      continue;
    }
    if (p[i] == '[') {
      depth++;
      i++;
      if (i < n && p[i] == '^') i++;
      if (i < n && p[i] == ']') i++; /* a ']' first in a class is a literal */
      continue;
    }
    if (p[i] == ']' && --depth == 0) return i;
    i++;
  }
  return n;
}

/* The "&&" at the top level of the class [i, end], or 0. */
static size_t class_and(const char *p, size_t i, size_t end)
{
  int depth = 0;
  for (size_t k = i; k < end; k++) {
    if (p[k] == '\\') {
      k++;
      continue;
    }
    if (p[k] == '[') depth++;
    else if (p[k] == ']') depth--;
    else if (depth == 1 && p[k] == '&' && k + 1 < end && p[k + 1] == '&') return k;
  }
  return 0;
}

static int is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* \uHHHH at p[i] (4 hex digits after it). */
static int is_bsu(const char *p, size_t n, size_t i)
{
  return i + 6 <= n && p[i] == '\\' && p[i + 1] == 'u' && is_hex(p[i + 2]) && is_hex(p[i + 3]) &&
         is_hex(p[i + 4]) && is_hex(p[i + 5]);
}

/* The length of \p{NAME} or \P{NAME} at p[i] when NAME is a script that PCRE2 can name
 * by sc:NAME (a compile of that alone tells), else 0. */
static size_t script_property(const char *p, size_t n, size_t i, size_t *name, size_t *nlen)
{
  if (i + 4 > n || p[i] != '\\' || (p[i + 1] != 'p' && p[i + 1] != 'P') || p[i + 2] != '{') return 0;
  const char *close = memchr(p + i + 3, '}', n - i - 3);
  if (!close) return 0;
  size_t b = i + 3;
  if (p[b] == '^') b++;
  const size_t len = (size_t)(close - p) - b;
  if (len <= 2 || len > 40) return 0; /* general categories: L, Lu, N, ... */
  for (size_t k = b; k < b + len; k++)
    if (!((p[k] >= 'a' && p[k] <= 'z') || (p[k] >= 'A' && p[k] <= 'Z'))) return 0;
  char probe[64];
  snprintf(probe, sizeof probe, "\\p{sc:%.*s}", (int)len, p + b);
  int err;
  PCRE2_SIZE at;
  pcre2_code *c = pcre2_compile((PCRE2_SPTR)probe, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
  if (!c) return 0;
  pcre2_code_free(c);
  *name = b, *nlen = len;
  return (size_t)(close - p) + 1 - i;
}

/* Copies p[i, stop) to o + *w with every \uHHHH as \x{HHHH} and every script as sc:. */
static void copy_bsu(char *o, size_t *w, const char *p, size_t n, size_t i, size_t stop)
{
  while (i < stop) {
    size_t name, nlen, k;
    if ((k = script_property(p, n, i, &name, &nlen)) && i + k <= stop) {
      *w += (size_t)sprintf(o + *w, "\\%c{%ssc:%.*s}", p[i + 1], p[i + 3] == '^' ? "^" : "", (int)nlen, p + name);
      i += k;
    } else if (is_bsu(p, n, i)) {
      *w += (size_t)sprintf(o + *w, "\\x{%.4s}", p + i + 2);
      i += 6;
    } else if (p[i] == '\\' && i + 1 < stop) {
      o[(*w)++] = p[i++], o[(*w)++] = p[i++];
    } else {
      o[(*w)++] = p[i++];
    }
  }
}

/* The pattern with every class intersection [A&&B] as (?:(?=B')[A]) (B' = B bracketed)
 * and every \uHHHH as \x{HHHH}; NULL when out of memory. */
static char *rewrite(const char *p, size_t n, size_t *outlen)
{
  char *o = malloc(4 * n + 16); /* a class of >= 6 characters grows by 10 at most */
  if (!o) return NULL;
  size_t w = 0;
  int has_and = 0;
  for (size_t k = 0; k + 1 < n; k++) has_and |= p[k] == '&' && p[k + 1] == '&';
  for (size_t i = 0; i < n;) {
    if (p[i] == '\\' && i + 1 < n) {
      size_t name, nlen, k = script_property(p, n, i, &name, &nlen);
      if (!k) k = is_bsu(p, n, i) ? 6 : 2;
      copy_bsu(o, &w, p, n, i, i + k);
      i += k;
      continue;
    }
    if (!has_and || p[i] != '[') {
      o[w++] = p[i++];
      continue;
    }
    const size_t end = class_end(p, n, i);
    const size_t amp = end < n ? class_and(p, i, end) : 0;
    if (!amp) {
      const size_t stop = end < n ? end + 1 : n;
      copy_bsu(o, &w, p, n, i, stop);
      i = stop;
      continue;
    }
    /* A = p[i+1, amp), B = p[amp+2, end) */
    const char *b = p + amp + 2;
    size_t blen = end - amp - 2;
    const int bracketed = blen >= 2 && b[0] == '[' && class_end(b, blen, 0) == blen - 1;
    w += (size_t)sprintf(o + w, "(?:(?=");
    if (!bracketed) o[w++] = '[';
    copy_bsu(o, &w, p, n, amp + 2, end);
    if (!bracketed) o[w++] = ']';
    w += (size_t)sprintf(o + w, ")[");
    copy_bsu(o, &w, p, n, i + 1, amp);
    w += (size_t)sprintf(o + w, "])");
    i = end + 1;
  }
  o[w] = '\0';
  *outlen = w;
  return o;
}

void clmoe__tok_regex_free(tok_regex *re)
{
  if (!re) return;
  pcre2_match_data_free(re->md);
  pcre2_match_context_free(re->mc);
  pcre2_jit_stack_free(re->jit_stack);
  pcre2_code_free(re->code);
  free(re);
}

clmoe_status clmoe__tok_regex_compile(const char *pattern, size_t len, const char *what, tok_regex **out)
{
  *out = NULL;
  tok_regex *re = calloc(1, sizeof *re);
  size_t plen = 0;
  char *p = re ? rewrite(pattern, len, &plen) : NULL;
  if (!p) {
    free(re);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  }
  snprintf(re->what, sizeof re->what, "%s", what);
  int err = 0;
  PCRE2_SIZE at = 0;
  re->code = pcre2_compile((PCRE2_SPTR)p, plen, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, NULL);
  free(p);
  if (!re->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    clmoe__tok_regex_free(re);
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: the regex does not compile (PCRE2, near character %zu): %s", what,
                        (size_t)at, (const char *)msg);
  }
  /* JIT when this PCRE2 has one (without it, or when it fails, the interpreter runs) */
  if (pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0) {
    re->mc = pcre2_match_context_create(NULL);
    re->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (re->mc && re->jit_stack) pcre2_jit_stack_assign(re->mc, NULL, re->jit_stack);
  }
  re->md = pcre2_match_data_create_from_pattern(re->code, NULL);
  if (!re->md) {
    clmoe__tok_regex_free(re);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  }
  *out = re;
  return CLMOE_OK;
}

clmoe_status clmoe__tok_regex_each(const tok_regex *re, const char *s, size_t n, tok_match_fn fn, void *arg)
{
  size_t at = 0;
  while (at < n) {
    const int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, at, 0, re->md, re->mc);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: matching failed at byte %zu: %s", re->what, at,
                          (const char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      CLMOE_TRY(fn(arg, b, e));
      at = e;
    } else { /* an empty match: step over one character (or one invalid byte) */
      uint32_t cp;
      const size_t k = clmoe__tok_utf8((const unsigned char *)s + b, n - b, &cp);
      at = b + (k ? k : 1);
    }
  }
  return CLMOE_OK;
}
