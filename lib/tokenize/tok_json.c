/* A small strict JSON reader for tokenizer.json and tokenizer_config.json: the whole file
 * becomes a tree of nodes (objects keep their members in file order). Strings are decoded
 * to UTF-8 with their length (\u0000 allowed); invalid UTF-8, lone surrogates, raw control
 * characters, trailing commas and nesting deeper than 64 are errors naming the file, line
 * and column. (lib/io's safetensors reader is a streaming parser of one fixed layout, not a
 * tree: it does not fit a document of arbitrary structure.) */
#include "tokenize/tokenize_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TJ_MAX_DEPTH 64
#define TJ_MAX_BYTES ((size_t)1 << 31) /* 2 GB: far above any tokenizer file */

/* Nodes are allocated in blocks: a tree of a million nodes is a few mallocs. */
typedef struct tj_block {
  struct tj_block *next;
  size_t used, cap;
  unsigned char data[];
} tj_block;

struct tj_doc {
  char *text; /* the file, NUL-terminated */
  size_t n;
  tj_block *blocks;
  tj_node root;
};

typedef struct tj_parser {
  const char *path;
  const unsigned char *s;
  size_t n, i;
  tj_doc *doc;
  tj_node *stack; /* scratch for the members of open containers */
  size_t nstack, cap_stack;
} tj_parser;

static void *tj_alloc(tj_doc *d, size_t bytes)
{
  bytes = (bytes + 15) & ~(size_t)15;
  tj_block *b = d->blocks;
  if (!b || b->cap - b->used < bytes) {
    size_t cap = bytes > ((size_t)1 << 20) ? bytes : (size_t)1 << 20;
    b = malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->next = d->blocks, b->used = 0, b->cap = cap;
    d->blocks = b;
  }
  void *p = b->data + b->used;
  b->used += bytes;
  return p;
}

static clmoe_status tj_fail(const tj_parser *p, const char *fmt, ...) CLMOE_PRINTF(2, 3);
static clmoe_status tj_fail(const tj_parser *p, const char *fmt, ...)
{
  char what[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  size_t line = 1, col = 1;
  for (size_t k = 0; k < p->i && k < p->n; k++) {
    if (p->s[k] == '\n') line++, col = 1;
    else if ((p->s[k] & 0xC0) != 0x80) col++;
  }
  return clmoe__error(CLMOE_ERR_FORMAT, "%s: not valid JSON at line %zu, column %zu: %s", p->path, line, col, what);
}

static void tj_ws(tj_parser *p)
{
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}

static const char *tj_found(const tj_parser *p, char *buf, size_t len)
{
  if (p->i >= p->n) return "the end of the file";
  unsigned c = p->s[p->i];
  if (c >= 0x20 && c < 0x7f) snprintf(buf, len, "'%c'", c);
  else snprintf(buf, len, "byte 0x%02x", c);
  return buf;
}

static int hexval(int c)
{
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int hex4(const unsigned char *s, size_t avail, unsigned *v)
{
  *v = 0;
  if (avail < 4) return 0;
  for (int k = 0; k < 4; k++) {
    int d = hexval(s[k]);
    if (d < 0) return 0;
    *v = *v << 4 | (unsigned)d;
  }
  return 1;
}

static size_t put_utf8(char *o, unsigned u)
{
  if (u < 0x80) return o[0] = (char)u, 1;
  if (u < 0x800) return o[0] = (char)(0xC0 | u >> 6), o[1] = (char)(0x80 | (u & 63)), 2;
  if (u < 0x10000)
    return o[0] = (char)(0xE0 | u >> 12), o[1] = (char)(0x80 | (u >> 6 & 63)), o[2] = (char)(0x80 | (u & 63)), 3;
  o[0] = (char)(0xF0 | u >> 18), o[1] = (char)(0x80 | (u >> 12 & 63));
  o[2] = (char)(0x80 | (u >> 6 & 63)), o[3] = (char)(0x80 | (u & 63));
  return 4;
}

/* A string at p->i (its opening quote) into memory of the document. */
static clmoe_status tj_string(tj_parser *p, const char **out, size_t *outlen)
{
  size_t end = ++p->i;
  while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
  if (end >= p->n) return tj_fail(p, "a string is not closed");
  char *buf = tj_alloc(p->doc, end - p->i + 1);
  if (!buf) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->path);
  size_t o = 0;
  while (p->i < end) {
    unsigned c = p->s[p->i];
    if (c < 0x20) return tj_fail(p, "control character 0x%02x inside a string", c);
    if (c != '\\') {
      uint32_t cp;
      size_t k = clmoe__tok_utf8(p->s + p->i, end - p->i, &cp);
      if (!k) return tj_fail(p, "invalid UTF-8 byte 0x%02x inside a string", c);
      memcpy(buf + o, p->s + p->i, k), o += k, p->i += k;
      continue;
    }
    const unsigned char e = p->s[p->i + 1];
    const char *simple = strchr("\"\\/bfnrt", e);
    if (simple && e) {
      buf[o++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
      p->i += 2;
      continue;
    }
    unsigned u, lo;
    if (e != 'u' || !hex4(p->s + p->i + 2, end - p->i - 2, &u)) return tj_fail(p, "bad escape sequence in a string");
    p->i += 6;
    if (u >= 0xD800 && u <= 0xDBFF && end - p->i >= 6 && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u' &&
        hex4(p->s + p->i + 2, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
      u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
      p->i += 6;
    } else if (u >= 0xD800 && u <= 0xDFFF) {
      return tj_fail(p, "unpaired UTF-16 surrogate \\u%04X in a string", u);
    }
    o += put_utf8(buf + o, u);
  }
  buf[o] = '\0';
  p->i = end + 1;
  *out = buf, *outlen = o;
  return CLMOE_OK;
}

static clmoe_status tj_number(tj_parser *p, tj_node *v)
{
  size_t t = p->i + (p->s[p->i] == '-');
  const size_t digits = t;
  while (t < p->n && p->s[t] >= '0' && p->s[t] <= '9') t++;
  if (t == digits || (p->s[digits] == '0' && t - digits > 1)) return tj_fail(p, "invalid number");
  if (t < p->n && p->s[t] == '.') {
    const size_t f = ++t;
    while (t < p->n && p->s[t] >= '0' && p->s[t] <= '9') t++;
    if (t == f) return tj_fail(p, "invalid number");
  }
  if (t < p->n && (p->s[t] == 'e' || p->s[t] == 'E')) {
    t += t + 1 < p->n && (p->s[t + 1] == '+' || p->s[t + 1] == '-') ? 2 : 1;
    const size_t e = t;
    while (t < p->n && p->s[t] >= '0' && p->s[t] <= '9') t++;
    if (t == e) return tj_fail(p, "invalid number");
  }
  char buf[64];
  if (t - p->i >= sizeof buf) return tj_fail(p, "a number of more than 63 characters");
  memcpy(buf, p->s + p->i, t - p->i);
  buf[t - p->i] = '\0';
  v->type = TJ_NUMBER;
  v->num = strtod(buf, NULL);
  p->i = t;
  return CLMOE_OK;
}

static clmoe_status tj_push(tj_parser *p, const tj_node *v)
{
  if (p->nstack == p->cap_stack) {
    size_t cap = p->cap_stack ? 2 * p->cap_stack : 1024;
    tj_node *s = realloc(p->stack, cap * sizeof *s);
    if (!s) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->path);
    p->stack = s, p->cap_stack = cap;
  }
  p->stack[p->nstack++] = *v;
  return CLMOE_OK;
}

static clmoe_status tj_value(tj_parser *p, tj_node *v, int depth);

/* An array or object at p->i: members are gathered on the scratch stack, then copied. */
static clmoe_status tj_container(tj_parser *p, tj_node *v, int depth)
{
  const int object = p->s[p->i] == '{';
  const char close = object ? '}' : ']';
  char buf[32];
  if (depth >= TJ_MAX_DEPTH) return tj_fail(p, "values nested more than %d deep", TJ_MAX_DEPTH);
  p->i++;
  const size_t base = p->nstack;
  tj_ws(p);
  if (p->i < p->n && p->s[p->i] == close) {
    p->i++;
  } else {
    for (;;) {
      tj_node m = {.type = TJ_NULL};
      tj_ws(p);
      if (object) {
        size_t klen;
        if (p->i >= p->n || p->s[p->i] != '"') return tj_fail(p, "expected a member name, found %s", tj_found(p, buf, sizeof buf));
        CLMOE_TRY(tj_string(p, &m.key, &klen));
        tj_ws(p);
        if (p->i >= p->n || p->s[p->i] != ':') return tj_fail(p, "expected ':', found %s", tj_found(p, buf, sizeof buf));
        p->i++;
      }
      const char *key = m.key;
      CLMOE_TRY(tj_value(p, &m, depth + 1));
      m.key = key;
      CLMOE_TRY(tj_push(p, &m));
      tj_ws(p);
      if (p->i < p->n && p->s[p->i] == ',') {
        p->i++;
        continue;
      }
      if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        break;
      }
      return tj_fail(p, "expected ',' or '%c', found %s", close, tj_found(p, buf, sizeof buf));
    }
  }
  v->type = object ? TJ_OBJECT : TJ_ARRAY;
  v->len = p->nstack - base;
  v->kid = NULL;
  if (v->len) {
    v->kid = tj_alloc(p->doc, v->len * sizeof *v->kid);
    if (!v->kid) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->path);
    memcpy(v->kid, p->stack + base, v->len * sizeof *v->kid);
  }
  p->nstack = base;
  return CLMOE_OK;
}

static clmoe_status tj_value(tj_parser *p, tj_node *v, int depth)
{
  char buf[32];
  tj_ws(p);
  memset(v, 0, sizeof *v);
  if (p->i >= p->n) return tj_fail(p, "expected a value, found the end of the file");
  const unsigned char c = p->s[p->i];
  if (c == '{' || c == '[') return tj_container(p, v, depth);
  if (c == '"') {
    v->type = TJ_STRING;
    return tj_string(p, &v->str, &v->len);
  }
  if (c == '-' || (c >= '0' && c <= '9')) return tj_number(p, v);
  static const struct { const char *w; tj_type t; } words[] = {{"null", TJ_NULL}, {"true", TJ_TRUE}, {"false", TJ_FALSE}};
  for (size_t k = 0; k < sizeof words / sizeof *words; k++) {
    const size_t len = strlen(words[k].w);
    if (p->n - p->i >= len && !memcmp(p->s + p->i, words[k].w, len)) {
      p->i += len;
      v->type = words[k].t;
      return CLMOE_OK;
    }
  }
  return tj_fail(p, "expected a value, found %s", tj_found(p, buf, sizeof buf));
}

void clmoe__tok_json_free(tj_doc *d)
{
  if (!d) return;
  for (tj_block *b = d->blocks, *next; b; b = next) next = b->next, free(b);
  free(d->text);
  free(d);
}

clmoe_status clmoe__tok_read_file(const char *path, char **out, size_t *n)
{
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return clmoe__error(CLMOE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap + 1);
  clmoe_status st = CLMOE_OK;
  while (buf) {
    if (len == cap) {
      if (cap >= TJ_MAX_BYTES) {
        st = clmoe__error(CLMOE_ERR_FORMAT, "%s: larger than %zu bytes: not a tokenizer file", path, TJ_MAX_BYTES);
        break;
      }
      char *b = realloc(buf, 2 * cap + 1);
      if (!b) break;
      buf = b, cap *= 2;
    }
    const size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) {
      if (ferror(f)) st = clmoe__error(CLMOE_ERR_IO, "%s: read failed", path);
      break;
    }
  }
  fclose(f);
  if (!buf) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
  if (st != CLMOE_OK) {
    free(buf);
    return st;
  }
  buf[len] = '\0';
  *out = buf, *n = len;
  return CLMOE_OK;
}

clmoe_status clmoe__tok_json_read(const char *path, tj_doc **out, const tj_node **root)
{
  *out = NULL, *root = NULL;
  tj_doc *d = calloc(1, sizeof *d);
  if (!d) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
  clmoe_status st = clmoe__tok_read_file(path, &d->text, &d->n);
  tj_parser p = {.path = path, .s = (const unsigned char *)d->text, .n = d->n, .doc = d};
  if (st == CLMOE_OK) st = tj_value(&p, &d->root, 0);
  if (st == CLMOE_OK) {
    tj_ws(&p);
    if (p.i != p.n) st = tj_fail(&p, "more data after the JSON value");
  }
  free(p.stack);
  if (st != CLMOE_OK) {
    clmoe__tok_json_free(d);
    return st;
  }
  *out = d, *root = &d->root;
  return CLMOE_OK;
}

const tj_node *clmoe__tok_json_get(const tj_node *o, const char *key)
{
  if (!o || o->type != TJ_OBJECT) return NULL;
  for (size_t k = 0; k < o->len; k++)
    if (!strcmp(o->kid[k].key, key)) return &o->kid[k];
  return NULL;
}

int clmoe__tok_json_int(const tj_node *n, int64_t lo, int64_t hi, int64_t *v)
{
  if (!n || n->type != TJ_NUMBER || !(n->num >= (double)lo && n->num <= (double)hi)) return 0;
  const int64_t x = (int64_t)n->num;
  if ((double)x != n->num) return 0;
  *v = x;
  return 1;
}
