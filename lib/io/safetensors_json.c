/* safetensors headers: a strict JSON reader and the checks of every entry. */
#include "safetensors_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clmoe/safetensors.h"

/* ---- a strict JSON reader for the header ----------------------------------------------- */
typedef struct jp {
  const char *path;
  const unsigned char *s;
  size_t n, i;
  char ctx[300]; /* "tensor 'q': " while inside a tensor's entry */
  char near[40];
} jp;

static clmoe_status jp_fail(jp *p, const char *fmt, ...) CLMOE_PRINTF(2, 3);
static clmoe_status jp_fail(jp *p, const char *fmt, ...)
{
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return clmoe__error(CLMOE_ERR_FORMAT, "%s: %s%s (header byte %zu)", p->path, p->ctx, what, p->i);
}

static void jp_ws(jp *p)
{
  while (p->i < p->n && strchr(" \t\r\n", p->s[p->i]) && p->s[p->i]) p->i++;
}

/* Skips white space and consumes c when it comes next. */
static int jp_eat(jp *p, char c)
{
  jp_ws(p);
  if (p->i < p->n && p->s[p->i] == (unsigned char)c) return p->i++, 1;
  return 0;
}

/* What comes next, for messages: "'}'", "the end of the header". */
static const char *jp_near(jp *p)
{
  jp_ws(p);
  if (p->i >= p->n) return "the end of the header";
  unsigned c = p->s[p->i];
  if (c >= 0x20 && c < 0x7f) snprintf(p->near, sizeof p->near, "'%c'%s", c, c == '}' || c == ']' ? " (a trailing comma?)" : "");
  else snprintf(p->near, sizeof p->near, "byte 0x%02x", c);
  return p->near;
}

/* Steps through the members of an object whose '{' was consumed: 1 when a member follows,
 * 0 after the closing '}' or on a syntax error (then *st is set). */
static int jp_next(jp *p, int *first, clmoe_status *st)
{
  int was_first = *first;
  *first = 0;
  if (jp_eat(p, '}')) return 0;
  if (was_first || jp_eat(p, ',')) return 1;
  *st = jp_fail(p, "expected ',' or '}', found %s", jp_near(p));
  return 0;
}

static int hex4(const unsigned char *s, unsigned *v)
{
  *v = 0;
  for (int k = 0; k < 4; k++) {
    int c = s[k], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return 0;
    *v = *v << 4 | (unsigned)d;
  }
  return 1;
}

/* Parses a string into a new NUL-terminated UTF-8 buffer. Rejects raw control characters,
 * invalid UTF-8, lone surrogates and NUL (names are C strings). */
static clmoe_status jp_string(jp *p, const char *what, char **out)
{
  *out = NULL;
  jp_ws(p);
  if (p->i >= p->n || p->s[p->i] != '"')
    return jp_fail(p, "expected a string (%s), found %s", what, jp_near(p));
  size_t end = ++p->i;
  while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
  if (end >= p->n) return jp_fail(p, "unterminated string (%s)", what);
  char *buf = malloc(end - p->i + 1);
  if (!buf) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->path);
  size_t o = 0;
  while (p->i < end) {
    unsigned c = p->s[p->i];
    if (c < 0x20) {
      free(buf);
      return jp_fail(p, "control character 0x%02x inside a string (%s)", c, what);
    }
    if (c != '\\') {
      size_t k = clmoe__io_st_utf8_len(p->s + p->i, end - p->i);
      if (!k) {
        free(buf);
        return jp_fail(p, "invalid UTF-8 byte 0x%02x inside a string (%s)", c, what);
      }
      memcpy(buf + o, p->s + p->i, k), o += k, p->i += k;
      continue;
    }
    const char *simple = strchr("\"\\/bfnrt", p->s[p->i + 1]);
    if (simple && p->s[p->i + 1]) {
      buf[o++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
      p->i += 2;
      continue;
    }
    unsigned u, lo;
    if (p->s[p->i + 1] != 'u' || end - p->i < 6 || !hex4(p->s + p->i + 2, &u)) {
      free(buf);
      return jp_fail(p, "bad escape sequence inside a string (%s)", what);
    }
    p->i += 6;
    if (u >= 0xD800 && u <= 0xDBFF && end - p->i >= 6 && p->s[p->i] == '\\' &&
        p->s[p->i + 1] == 'u' && hex4(p->s + p->i + 2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
      u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
      p->i += 6;
    } else if (u >= 0xD800 && u <= 0xDFFF) {
      free(buf);
      return jp_fail(p, "unpaired UTF-16 surrogate \\u%04X inside a string (%s)", u, what);
    }
    if (u == 0) {
      free(buf);
      return jp_fail(p, "NUL character (\\u0000) inside a string (%s)", what);
    }
    if (u < 0x80) buf[o++] = (char)u;
    else if (u < 0x800) buf[o++] = (char)(0xC0 | u >> 6), buf[o++] = (char)(0x80 | (u & 63));
    else if (u < 0x10000)
      buf[o++] = (char)(0xE0 | u >> 12), buf[o++] = (char)(0x80 | (u >> 6 & 63)),
      buf[o++] = (char)(0x80 | (u & 63));
    else
      buf[o++] = (char)(0xF0 | u >> 18), buf[o++] = (char)(0x80 | (u >> 12 & 63)),
      buf[o++] = (char)(0x80 | (u >> 6 & 63)), buf[o++] = (char)(0x80 | (u & 63));
  }
  buf[o] = '\0';
  p->i = end + 1;
  *out = buf;
  return CLMOE_OK;
}

/* A non-negative integer no larger than INT64_MAX, written as JSON allows (no leading
 * zeros, no fraction or exponent). */
static clmoe_status jp_uint(jp *p, const char *what, int64_t *v)
{
  jp_ws(p);
  size_t t = p->i;
  while (t < p->n && t - p->i < 24 && strchr("+-.0123456789eE", p->s[t]) && p->s[t]) t++;
  int len = (int)(t - p->i);
  const char *tok = (const char *)p->s + p->i;
  if (len == 0) return jp_fail(p, "%s: expected a non-negative integer, found %s", what, jp_near(p));
  if (tok[0] == '-') return jp_fail(p, "%s is %.*s, a negative number", what, len, tok);
  uint64_t x = 0;
  int k = 0;
  for (; k < len && tok[k] >= '0' && tok[k] <= '9'; k++) {
    if (x > (uint64_t)(INT64_MAX - (tok[k] - '0')) / 10)
      return jp_fail(p, "%s is %.*s, too large", what, len, tok);
    x = x * 10 + (uint64_t)(tok[k] - '0');
  }
  if (k == 0 || k < len || (tok[0] == '0' && k > 1))
    return jp_fail(p, "%s is %.*s, not a non-negative integer", what, len, tok);
  p->i = t;
  *v = (int64_t)x;
  return CLMOE_OK;
}

/* Skips any JSON value (fields this reader does not know), checking its syntax. */
static clmoe_status jp_skip(jp *p, int depth)
{
  jp_ws(p);
  if (depth > 32) return jp_fail(p, "values nested more than 32 deep");
  if (p->i >= p->n) return jp_fail(p, "expected a value, found the end of the header");
  unsigned char c = p->s[p->i];
  if (c == '"') {
    char *s;
    clmoe_status st = jp_string(p, "a value", &s);
    free(s);
    return st;
  }
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    p->i++;
    if (jp_eat(p, close)) return CLMOE_OK;
    do {
      if (c == '{') {
        char *key;
        CLMOE_TRY(jp_string(p, "a key", &key));
        free(key);
        if (!jp_eat(p, ':')) return jp_fail(p, "expected ':' after a key, found %s", jp_near(p));
      }
      CLMOE_TRY(jp_skip(p, depth + 1));
    } while (jp_eat(p, ','));
    if (!jp_eat(p, close)) return jp_fail(p, "expected ',' or '%c', found %s", close, jp_near(p));
    return CLMOE_OK;
  }
  for (const char *const *w = (const char *const[]){"true", "false", "null", NULL}; *w; w++)
    if (p->n - p->i >= strlen(*w) && !memcmp(p->s + p->i, *w, strlen(*w)))
      return p->i += strlen(*w), CLMOE_OK;
  size_t t = p->i + (c == '-');
  size_t digits = t;
  while (t < p->n && p->s[t] >= '0' && p->s[t] <= '9') t++;
  if (t == digits || (p->s[digits] == '0' && t - digits > 1)) return jp_fail(p, "invalid value");
  if (t < p->n && p->s[t] == '.') {
    size_t f = ++t;
    while (t < p->n && p->s[t] >= '0' && p->s[t] <= '9') t++;
    if (t == f) return jp_fail(p, "invalid number");
  }
  if (t < p->n && (p->s[t] == 'e' || p->s[t] == 'E')) {
    t += t + 1 < p->n && (p->s[t + 1] == '+' || p->s[t + 1] == '-') ? 2 : 1;
    size_t e = t;
    while (t < p->n && p->s[t] >= '0' && p->s[t] <= '9') t++;
    if (t == e) return jp_fail(p, "invalid number");
  }
  p->i = t;
  return CLMOE_OK;
}

/* ---- the header's structure ------------------------------------------------------------- */
static clmoe_status parse_metadata(jp *p, clmoe_st_file *f)
{
  snprintf(p->ctx, sizeof p->ctx, "__metadata__: ");
  if (!jp_eat(p, '{')) return jp_fail(p, "expected an object of strings, found %s", jp_near(p));
  clmoe_status st = CLMOE_OK;
  for (int first = 1; jp_next(p, &first, &st);) {
    if (f->nmeta == f->cap_meta) {
      int cap = f->cap_meta ? 2 * f->cap_meta : 8;
      char **m = realloc(f->meta, 2 * (size_t)cap * sizeof *m);
      if (!m) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->path);
      f->meta = m, f->cap_meta = cap;
    }
    char **kv = f->meta + 2 * f->nmeta;
    kv[0] = kv[1] = NULL;
    f->nmeta++; /* counted now so that close frees a half-read entry */
    CLMOE_TRY(jp_string(p, "a metadata key", &kv[0]));
    if (!jp_eat(p, ':')) return jp_fail(p, "expected ':' after key '%.200s', found %s", kv[0], jp_near(p));
    CLMOE_TRY(jp_string(p, "a metadata value; values must be strings", &kv[1]));
  }
  CLMOE_TRY(st);
  p->ctx[0] = '\0';
  return CLMOE_OK;
}

static clmoe_status parse_shape(jp *p, st_entry *e)
{
  if (!jp_eat(p, '[')) return jp_fail(p, "shape: expected an array of integers, found %s", jp_near(p));
  if (jp_eat(p, ']')) return CLMOE_OK;
  e->shape = malloc(CLMOE_ST_MAX_DIMS * sizeof *e->shape);
  if (!e->shape) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->path);
  do {
    char what[32];
    if (e->ndim == CLMOE_ST_MAX_DIMS) return jp_fail(p, "shape has more than %d dimensions", CLMOE_ST_MAX_DIMS);
    snprintf(what, sizeof what, "shape[%d]", e->ndim);
    CLMOE_TRY(jp_uint(p, what, &e->shape[e->ndim]));
    e->ndim++;
  } while (jp_eat(p, ','));
  if (!jp_eat(p, ']')) return jp_fail(p, "shape: expected ',' or ']', found %s", jp_near(p));
  return CLMOE_OK;
}

/* One field of a tensor's entry; unknown fields are skipped (later versions may add some). */
static clmoe_status parse_field(jp *p, st_entry *e, int seen[3])
{
  char *key;
  clmoe_status st = CLMOE_OK;
  CLMOE_TRY(jp_string(p, "a field name", &key));
  int which = !strcmp(key, "dtype") ? 0 : !strcmp(key, "shape") ? 1 : !strcmp(key, "data_offsets") ? 2 : -1;
  if (which >= 0 && seen[which]) st = jp_fail(p, "field '%s' appears twice", key);
  else if (!jp_eat(p, ':')) st = jp_fail(p, "expected ':' after '%.100s', found %s", key, jp_near(p));
  free(key);
  CLMOE_TRY(st);
  if (which < 0) return jp_skip(p, 0);
  seen[which] = 1;
  if (which == 1) return parse_shape(p, e);
  if (which == 0) {
    char *name;
    CLMOE_TRY(jp_string(p, "dtype", &name));
    int d = 0;
    while (d < CLMOE_ST_DTYPE_COUNT && strcmp(name, clmoe__io_st_dtypes[d].name)) d++;
    if (d == CLMOE_ST_DTYPE_COUNT)
      st = jp_fail(p, "dtype '%.40s' is not supported (BOOL, U8, I8, F8_E4M3, F8_E5M2, I16, U16, "
                      "F16, BF16, I32, U32, F32, I64, U64, F64)", name);
    free(name);
    e->dtype = (clmoe_st_dtype)d;
    return st;
  }
  int64_t b, en;
  if (!jp_eat(p, '[')) return jp_fail(p, "data_offsets: expected an array [begin, end], found %s", jp_near(p));
  CLMOE_TRY(jp_uint(p, "data_offsets[0]", &b));
  if (!jp_eat(p, ',')) return jp_fail(p, "data_offsets: expected two integers [begin, end], found %s", jp_near(p));
  CLMOE_TRY(jp_uint(p, "data_offsets[1]", &en));
  if (!jp_eat(p, ']'))
    return jp_fail(p, "data_offsets: expected exactly two integers [begin, end], found %s", jp_near(p));
  e->begin = (uint64_t)b, e->end = (uint64_t)en;
  return CLMOE_OK;
}

static clmoe_status parse_tensor(jp *p, st_entry *e)
{
  static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
  int seen[3] = {0, 0, 0};
  clmoe_status st = CLMOE_OK;
  snprintf(p->ctx, sizeof p->ctx, "tensor '%.200s': ", e->name);
  if (!jp_eat(p, '{')) return jp_fail(p, "expected an object with dtype, shape and data_offsets, found %s", jp_near(p));
  for (int first = 1; jp_next(p, &first, &st);) CLMOE_TRY(parse_field(p, e, seen));
  CLMOE_TRY(st);
  for (int k = 0; k < 3; k++)
    if (!seen[k]) return jp_fail(p, "the field '%s' is missing", fields[k]);
  p->ctx[0] = '\0';
  return CLMOE_OK;
}

/* Adds an entry named `name` (taken over) to the file's list. */
static clmoe_status add_entry(clmoe_st_file *f, char *name, st_entry **e)
{
  if (f->n == f->cap) {
    int cap = f->cap ? 2 * f->cap : 16;
    st_entry *t = realloc(f->t, (size_t)cap * sizeof *t);
    if (!t) {
      free(name);
      return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->path);
    }
    f->t = t, f->cap = cap;
  }
  *e = &f->t[f->n++];
  memset(*e, 0, sizeof **e);
  (*e)->name = name;
  return CLMOE_OK;
}

clmoe_status clmoe__io_st_parse_header(clmoe_st_file *f, const unsigned char *h, size_t n)
{
  jp p = {.path = f->path, .s = h, .n = n, .i = 0, .ctx = "", .near = ""};
  int have_meta = 0;
  clmoe_status st = CLMOE_OK;
  if (!jp_eat(&p, '{'))
    return jp_fail(&p, "the header is not a JSON object: found %s (not a safetensors file?)", jp_near(&p));
  for (int first = 1; jp_next(&p, &first, &st);) {
    char *name;
    st_entry *e = NULL;
    CLMOE_TRY(jp_string(&p, "a tensor name", &name));
    if (!jp_eat(&p, ':')) {
      free(name);
      return jp_fail(&p, "expected ':' after a tensor name, found %s", jp_near(&p));
    }
    if (!strcmp(name, "__metadata__")) {
      free(name);
      if (have_meta) return jp_fail(&p, "__metadata__ appears twice");
      have_meta = 1;
      CLMOE_TRY(parse_metadata(&p, f));
      continue;
    }
    CLMOE_TRY(add_entry(f, name, &e));
    if (!name[0]) return jp_fail(&p, "a tensor has an empty name");
    CLMOE_TRY(parse_tensor(&p, e));
  }
  CLMOE_TRY(st);
  jp_ws(&p);
  if (p.i != n) return jp_fail(&p, "unexpected data after the header's JSON object");
  return CLMOE_OK;
}

/* ---- validation ---------------------------------------------------------------------- */
int clmoe__io_st_by_name(const void *a, const void *b)
{
  return strcmp((*(st_entry *const *)a)->name, (*(st_entry *const *)b)->name);
}

static int by_string(const void *a, const void *b) { return strcmp(**(char **const *)a, **(char **const *)b); }

static int by_begin(const void *a, const void *b)
{
  const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

void clmoe__io_st_describe_shape(const st_entry *e, char *buf, size_t len)
{
  size_t used = (size_t)snprintf(buf, len, "%s [", clmoe__io_st_dtypes[e->dtype].name);
  for (int d = 0; d < e->ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

static clmoe_status check_entry(const clmoe_st_file *f, st_entry *e)
{
  char desc[200];
  clmoe__io_st_describe_shape(e, desc, sizeof desc);
  int64_t numel = 1, size = (int64_t)clmoe__io_st_dtypes[e->dtype].size;
  for (int d = 0; d < e->ndim; d++)
    if (e->shape[d] == 0) numel = 0;
  for (int d = 0; d < e->ndim && numel; d++) {
    if (numel > INT64_MAX / size / e->shape[d])
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor '%.200s': shape %s has too many elements",
                          f->path, e->name, desc);
    numel *= e->shape[d];
  }
  e->numel = numel;
  uint64_t bytes = (uint64_t)(numel * size);
  if (e->end < e->begin || e->end - e->begin != bytes)
    return clmoe__error(CLMOE_ERR_FORMAT,
                        "%s: tensor '%.200s': data_offsets [%llu, %llu] do not match %s (%llu bytes)",
                        f->path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                        desc, (unsigned long long)bytes);
  if (e->end > f->data_bytes)
    return clmoe__error(CLMOE_ERR_FORMAT,
                        "%s: tensor '%.200s': data_offsets [%llu, %llu] extend past the end of the "
                        "data region (%llu bytes): the file is truncated or the offsets are wrong",
                        f->path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                        (unsigned long long)f->data_bytes);
  return CLMOE_OK;
}

clmoe_status clmoe__io_st_check_entries(clmoe_st_file *f)
{
  for (int i = 0; i < f->n; i++) CLMOE_TRY(check_entry(f, &f->t[i]));
  f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name);
  st_entry **order = malloc(((size_t)f->n + 1) * sizeof *order);
  if (!f->by_name || !order) {
    free(order);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->path);
  }
  int nonempty = 0;
  for (int i = 0; i < f->n; i++) {
    f->by_name[i] = &f->t[i];
    if (f->t[i].end > f->t[i].begin) order[nonempty++] = &f->t[i];
  }
  qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, clmoe__io_st_by_name);
  qsort(order, (size_t)nonempty, sizeof *order, by_begin);
  clmoe_status st = CLMOE_OK;
  for (int i = 1; i < f->n && st == CLMOE_OK; i++)
    if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name))
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor name '%.200s' appears more than once", f->path,
                        f->by_name[i]->name);
  for (int i = 1; i < nonempty && st == CLMOE_OK; i++)
    if (order[i]->begin < order[i - 1]->end)
      st = clmoe__error(CLMOE_ERR_FORMAT,
                        "%s: tensors '%.200s' [%llu, %llu] and '%.200s' [%llu, %llu] overlap", f->path,
                        order[i - 1]->name, (unsigned long long)order[i - 1]->begin,
                        (unsigned long long)order[i - 1]->end, order[i]->name,
                        (unsigned long long)order[i]->begin, (unsigned long long)order[i]->end);
  free(order);
  /* Duplicate metadata keys: sorted, so that a huge header cannot make this quadratic. */
  char ***keys = st == CLMOE_OK ? malloc(((size_t)f->nmeta + 1) * sizeof *keys) : NULL;
  if (st == CLMOE_OK && !keys) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->path);
  for (int i = 0; keys && i < f->nmeta; i++) keys[i] = &f->meta[2 * i];
  if (keys) qsort(keys, (size_t)f->nmeta, sizeof *keys, by_string);
  for (int i = 1; keys && i < f->nmeta && st == CLMOE_OK; i++)
    if (!strcmp(*keys[i - 1], *keys[i]))
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: __metadata__: key '%.200s' appears twice", f->path, *keys[i]);
  free(keys);
  return st;
}

