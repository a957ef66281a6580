/* json_check: a strict JSON validator for the app tests (tests/apps/test_cli.sh), so that
 * they need no Python or jq. Usage:
 *   json_check FILE              exit 0 when FILE (- for stdin) holds exactly one JSON
 *                                document (RFC 8259: one value, whitespace around it,
 *                                strings of valid UTF-8 without raw control characters,
 *                                numbers by the grammar, nesting below 512 levels);
 *                                else exit 1 with the byte offset and the cause on stderr
 *   json_check --get NAME FILE   the same, and writes the decoded value of the first
 *                                string member called NAME (at any depth) to stdout as
 *                                raw bytes (\uXXXX escapes as UTF-8); exit 1 when none */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
  const unsigned char *s;
  size_t n, i;
  int depth;
  const char *want;         /* --get NAME, or NULL */
  int found;                /* the member was found and its value written */
  unsigned char *buf;       /* a decoded string [cap] */
  size_t len, cap;
} parser;

static void fail(const parser *p, const char *why)
{
  fprintf(stderr, "json_check: byte %zu: %s\n", p->i, why);
  exit(1);
}

static void put(parser *p, unsigned c)
{
  if (p->len == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 256;
    if (!(p->buf = realloc(p->buf, p->cap))) fail(p, "out of memory");
  }
  p->buf[p->len++] = (unsigned char)c;
}

static void put_utf8(parser *p, unsigned cp)
{
  if (cp < 0x80) put(p, cp);
  else if (cp < 0x800) put(p, 0xc0 | cp >> 6), put(p, 0x80 | (cp & 0x3f));
  else if (cp < 0x10000) put(p, 0xe0 | cp >> 12), put(p, 0x80 | ((cp >> 6) & 0x3f)), put(p, 0x80 | (cp & 0x3f));
  else
    put(p, 0xf0 | cp >> 18), put(p, 0x80 | ((cp >> 12) & 0x3f)), put(p, 0x80 | ((cp >> 6) & 0x3f)),
        put(p, 0x80 | (cp & 0x3f));
}

static void skip_ws(parser *p)
{
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
    p->i++;
}

static unsigned hex4(parser *p)
{
  unsigned v = 0;
  for (int k = 0; k < 4; k++, p->i++) {
    if (p->i >= p->n) fail(p, "\\u escape cut short");
    const unsigned c = p->s[p->i];
    const unsigned d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 16;
    if (d > 15) fail(p, "\\u escape with a non-hex digit");
    v = v * 16 + d;
  }
  return v;
}

/* The length of the valid UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF), or 0. */
static int utf8_len(const unsigned char *s, size_t n, size_t i)
{
  const unsigned c = s[i];
  int len = c >= 0xc2 && c <= 0xdf ? 2 : (c >> 4) == 0xe ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  for (int k = 1; k < len; k++)
    if (i + (size_t)k >= n || (s[i + (size_t)k] & 0xc0) != 0x80) return 0;
  if (len > 2) {
    const unsigned c1 = s[i + 1];
    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f))
      return 0;
  }
  return len;
}

/* A string at p->i (the opening quote), decoded into p->buf[0, p->len). */
static void string(parser *p)
{
  p->i++;
  p->len = 0;
  for (;;) {
    if (p->i >= p->n) fail(p, "string not closed");
    const unsigned c = p->s[p->i];
    if (c == '"') {
      p->i++;
      return;
    }
    if (c < 0x20) fail(p, "raw control character in a string");
    if (c >= 0x80) {
      const int len = utf8_len(p->s, p->n, p->i);
      if (!len) fail(p, "invalid UTF-8 in a string");
      for (int k = 0; k < len; k++) put(p, p->s[p->i++]);
      continue;
    }
    p->i++;
    if (c != '\\') {
      put(p, c);
      continue;
    }
    if (p->i >= p->n) fail(p, "escape cut short");
    const unsigned e = p->s[p->i++];
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *at = e ? strchr(from, (int)e) : NULL;
    if (at) {
      put(p, (unsigned char)to[at - from]);
      continue;
    }
    if (e != 'u') fail(p, "unknown escape");
    unsigned cp = hex4(p);
    if (cp >= 0xd800 && cp <= 0xdbff) { /* a high surrogate: its low half must follow */
      if (p->i + 1 >= p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') fail(p, "lone high surrogate");
      p->i += 2;
      const unsigned lo = hex4(p);
      if (lo < 0xdc00 || lo > 0xdfff) fail(p, "high surrogate without its low half");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    } else if (cp >= 0xdc00 && cp <= 0xdfff) {
      fail(p, "lone low surrogate");
    }
    put_utf8(p, cp);
  }
}

static void digits(parser *p)
{
  if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') fail(p, "digit expected in a number");
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
}

static void number(parser *p)
{
  if (p->s[p->i] == '-') p->i++;
  if (p->i < p->n && p->s[p->i] == '0') p->i++; /* no leading zeros */
  else digits(p);
  if (p->i < p->n && p->s[p->i] == '.') p->i++, digits(p);
  if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
    p->i++;
    if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
    digits(p);
  }
}

static void literal(parser *p, const char *word)
{
  const size_t len = strlen(word);
  if (p->n - p->i < len || memcmp(p->s + p->i, word, len)) fail(p, "unexpected character");
  p->i += len;
}

static void value(parser *p);

static void object(parser *p)
{
  p->i++;
  skip_ws(p);
  if (p->i < p->n && p->s[p->i] == '}') {
    p->i++;
    return;
  }
  for (;;) {
    skip_ws(p);
    if (p->i >= p->n || p->s[p->i] != '"') fail(p, "member name expected");
    string(p);
    const int wanted = p->want && !p->found && p->len == strlen(p->want) && !memcmp(p->buf, p->want, p->len);
    skip_ws(p);
    if (p->i >= p->n || p->s[p->i] != ':') fail(p, "':' expected");
    p->i++;
    skip_ws(p);
    if (wanted && p->i < p->n && p->s[p->i] == '"') {
      string(p);
      if (fwrite(p->buf, 1, p->len, stdout) != p->len) fail(p, "cannot write the value");
      p->found = 1;
    } else {
      value(p);
    }
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == '}') {
      p->i++;
      return;
    }
    fail(p, "',' or '}' expected");
  }
}

static void array(parser *p)
{
  p->i++;
  skip_ws(p);
  if (p->i < p->n && p->s[p->i] == ']') {
    p->i++;
    return;
  }
  for (;;) {
    value(p);
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == ']') {
      p->i++;
      return;
    }
    fail(p, "',' or ']' expected");
  }
}

static void value(parser *p)
{
  skip_ws(p);
  if (p->i >= p->n) fail(p, "value expected, end of input found");
  if (++p->depth > 512) fail(p, "nested too deeply");
  const unsigned c = p->s[p->i];
  if (c == '{') object(p);
  else if (c == '[') array(p);
  else if (c == '"') string(p);
  else if (c == '-' || (c >= '0' && c <= '9')) number(p);
  else if (c == 't') literal(p, "true");
  else if (c == 'f') literal(p, "false");
  else if (c == 'n') literal(p, "null");
  else fail(p, "unexpected character");
  p->depth--;
}

int main(int argc, char **argv)
{
  parser p = {0};
  int a = 1;
  if (argc == 4 && !strcmp(argv[1], "--get")) p.want = argv[2], a = 3;
  if (a != argc - 1) {
    fprintf(stderr, "usage: json_check [--get NAME] FILE (- for stdin)\n");
    return 2;
  }
  FILE *f = strcmp(argv[a], "-") ? fopen(argv[a], "rb") : stdin;
  if (!f) {
    fprintf(stderr, "json_check: cannot open %s\n", argv[a]);
    return 1;
  }
  unsigned char *data = NULL;
  size_t n = 0, cap = 0, got;
  do {
    if (n == cap && !(data = realloc(data, cap = cap ? 2 * cap : 65536))) return 1;
    got = fread(data + n, 1, cap - n, f);
    n += got;
  } while (got > 0);
  if (ferror(f)) {
    fprintf(stderr, "json_check: cannot read %s\n", argv[a]);
    return 1;
  }
  p.s = data, p.n = n;
  value(&p);
  skip_ws(&p);
  if (p.i != p.n) fail(&p, "text after the JSON document");
  if (p.want && !p.found) {
    fprintf(stderr, "json_check: no string member \"%s\"\n", p.want);
    return 1;
  }
  free(data), free(p.buf);
  return 0;
}
