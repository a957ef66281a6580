/* A small JSON reader for clmoe-xcheck's report files (--compare, --matrix): the whole
 * document into a tree of xj_value. The library's JSON parser is internal to the
 * safetensors reader, so the app carries its own. Strict RFC 8259 except that numbers are
 * read with strtod; depth is limited to XJ_MAX_DEPTH. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xcheck.h"

#define XJ_MAX_DEPTH 64

typedef struct xj_parser {
  const char *s, *end, *p;
  char *err;
  size_t errlen;
  int failed;
  int line;            /* line number at `counted` */
  const char *counted; /* newlines before this point are in `line` (p only moves forward) */
} xj_parser;

static int line_of(xj_parser *ps)
{
  for (; ps->counted < ps->p && ps->counted < ps->end; ps->counted++) ps->line += *ps->counted == '\n';
  return ps->line;
}

static int xj_fail(xj_parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int xj_fail(xj_parser *ps, const char *fmt, ...)
{
  if (ps->failed) return 0;
  ps->failed = 1;
  char msg[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char near[24] = "end of file";
  if (ps->p < ps->end) {
    size_t k = 0;
    for (const char *q = ps->p; q < ps->end && k < 16 && *q != '\n'; q++) near[k++] = *q;
    near[k] = '\0';
  }
  snprintf(ps->err, ps->errlen, "line %d: %s (near '%s')", line_of(ps), msg, near);
  return 0;
}

static void skip_ws(xj_parser *ps)
{
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static int literal(xj_parser *ps, const char *word)
{
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return 0;
  ps->p += n;
  return 1;
}

static int hex4(const char *q, unsigned *v)
{
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = q[i];
    unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                        : 16u;
    if (d > 15) return 0;
    *v = *v * 16 + d;
  }
  return 1;
}

/* Appends code point cp as UTF-8 at *o. */
static void put_utf8(char **o, unsigned cp)
{
  char *q = *o;
  if (cp < 0x80) {
    *q++ = (char)cp;
  } else if (cp < 0x800) {
    *q++ = (char)(0xC0 | (cp >> 6));
    *q++ = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *q++ = (char)(0xE0 | (cp >> 12));
    *q++ = (char)(0x80 | ((cp >> 6) & 0x3F));
    *q++ = (char)(0x80 | (cp & 0x3F));
  } else {
    *q++ = (char)(0xF0 | (cp >> 18));
    *q++ = (char)(0x80 | ((cp >> 12) & 0x3F));
    *q++ = (char)(0x80 | ((cp >> 6) & 0x3F));
    *q++ = (char)(0x80 | (cp & 0x3F));
  }
  *o = q;
}

/* A string at ps->p (on the opening quote) into a malloc'ed, NUL-terminated copy. */
static int parse_string(xj_parser *ps, char **out, size_t *len)
{
  ps->p++; /* the quote */
  const char *q = ps->p;
  while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
  if (q >= ps->end) return xj_fail(ps, "unterminated string");
  /* escapes only shrink the text (\uXXXX: 6 characters to at most 4 bytes) */
  char *buf = malloc((size_t)(q - ps->p) + 1), *o = buf;
  if (!buf) return xj_fail(ps, "out of host memory");
  while (ps->p < q) {
    unsigned char c = (unsigned char)*ps->p;
    if (c < 0x20) {
      free(buf);
      return xj_fail(ps, "control character in a string");
    }
    if (c != '\\') {
      *o++ = (char)c;
      ps->p++;
      continue;
    }
    char e = ps->p[1];
    ps->p += 2;
    switch (e) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '/': *o++ = '/'; break;
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u': {
      unsigned cp, lo;
      if (q - ps->p < 4 || !hex4(ps->p, &cp)) {
        free(buf);
        return xj_fail(ps, "bad \\u escape");
      }
      ps->p += 4;
      if (cp >= 0xD800 && cp < 0xDC00 && q - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u' &&
          hex4(ps->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        ps->p += 6;
      }
      put_utf8(&o, cp);
      break;
    }
    default: free(buf); return xj_fail(ps, "bad escape '\\%c'", e);
    }
  }
  *o = '\0';
  ps->p = q + 1;
  *out = buf;
  *len = (size_t)(o - buf);
  return 1;
}

static int parse_value(xj_parser *ps, xj_value *v, int depth);

/* Grows an array of n items of size bytes each to hold n + 1. */
static int grow(void **items, size_t n, size_t *cap, size_t size)
{
  if (n < *cap) return 1;
  size_t c = *cap ? 2 * *cap : 8;
  void *p = realloc(*items, c * size);
  if (!p) return 0;
  *items = p;
  *cap = c;
  return 1;
}

static int parse_container(xj_parser *ps, xj_value *v, int depth)
{
  const int object = *ps->p == '{';
  const char close = object ? '}' : ']';
  v->type = object ? XJ_OBJECT : XJ_ARRAY;
  ps->p++;
  size_t cap = 0, kcap = 0;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    return 1;
  }
  for (;;) {
    skip_ws(ps);
    if (object) {
      if (ps->p >= ps->end || *ps->p != '"') return xj_fail(ps, "expected a \"key\"");
      if (!grow((void **)&v->keys, v->count, &kcap, sizeof *v->keys))
        return xj_fail(ps, "out of host memory");
      size_t klen;
      if (!parse_string(ps, &v->keys[v->count], &klen)) return 0;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') {
        free(v->keys[v->count]);
        return xj_fail(ps, "expected ':' after a key");
      }
      ps->p++;
    }
    if (!grow((void **)&v->items, v->count, &cap, sizeof *v->items)) {
      if (object) free(v->keys[v->count]);
      return xj_fail(ps, "out of host memory");
    }
    memset(&v->items[v->count], 0, sizeof *v->items);
    int ok = parse_value(ps, &v->items[v->count], depth + 1);
    v->count++; /* freed by xj_free whether or not it parsed */
    if (!ok) return 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      continue;
    }
    if (ps->p < ps->end && *ps->p == close) {
      ps->p++;
      return 1;
    }
    return xj_fail(ps, "expected ',' or '%c'", close);
  }
}

static int parse_value(xj_parser *ps, xj_value *v, int depth)
{
  if (depth > XJ_MAX_DEPTH) return xj_fail(ps, "nested deeper than %d", XJ_MAX_DEPTH);
  skip_ws(ps);
  v->line = line_of(ps);
  if (ps->p >= ps->end) return xj_fail(ps, "expected a value");
  char c = *ps->p;
  if (c == '{' || c == '[') return parse_container(ps, v, depth);
  if (c == '"') {
    v->type = XJ_STRING;
    return parse_string(ps, &v->string, &v->len);
  }
  if (literal(ps, "true")) {
    v->type = XJ_BOOL;
    v->boolean = 1;
    return 1;
  }
  if (literal(ps, "false")) {
    v->type = XJ_BOOL;
    return 1;
  }
  if (literal(ps, "null")) {
    v->type = XJ_NULL;
    return 1;
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    char num[64];
    size_t k = 0;
    while (ps->p + k < ps->end && k < sizeof num - 1 && strchr("+-0123456789.eE", ps->p[k])) {
      num[k] = ps->p[k];
      k++;
    }
    num[k] = '\0';
    char *endp = NULL;
    errno = 0;
    v->number = strtod(num, &endp);
    if (endp != num + k || k == 0) return xj_fail(ps, "bad number");
    v->type = XJ_NUMBER;
    ps->p += k;
    return 1;
  }
  return xj_fail(ps, "expected a value");
}

int xj_parse(const char *text, size_t len, xj_value *out, char *err, size_t errlen)
{
  xj_parser ps = {text, text + len, text, err, errlen, 0, 1, text};
  memset(out, 0, sizeof *out);
  if (!parse_value(&ps, out, 0)) {
    xj_free(out);
    return 0;
  }
  skip_ws(&ps);
  if (ps.p != ps.end) {
    xj_fail(&ps, "text after the end of the document");
    xj_free(out);
    return 0;
  }
  return 1;
}

void xj_free(xj_value *v)
{
  if (!v) return;
  for (size_t i = 0; i < v->count; i++) {
    xj_free(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->string);
  memset(v, 0, sizeof *v);
}

const xj_value *xj_get(const xj_value *obj, const char *key)
{
  if (!obj || obj->type != XJ_OBJECT) return NULL;
  for (size_t i = 0; i < obj->count; i++)
    if (!strcmp(obj->keys[i], key)) return &obj->items[i];
  return NULL;
}

const char *xj_string(const xj_value *obj, const char *key)
{
  const xj_value *v = xj_get(obj, key);
  return v && v->type == XJ_STRING ? v->string : NULL;
}
