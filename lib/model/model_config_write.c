/* Writing a config (clmoe_config_write, include/clmoe/model_config.h) from the parser's key
 * table (model_config.c), so that what is written is what the parser reads back:
 *  - every key of a written section is written, unless it holds its default and the
 *    parser would refuse that default (unset sizes of 0, warmup_steps = -1 for "1% of the
 *    steps", an empty list): the parser then keeps the same default;
 *  - an optional section (the sizes of a kind of layer the model may not have) is written
 *    only when one of its keys differs from its default, and then only its keys that are
 *    set: "[mla] heads = 2" in a model without MLA layers comes back as just that;
 *  - numbers in the shortest form that reads back as the same value; mla_layers as the
 *    list of MLA layers with runs of three or more as ranges a-b, which keeps any pattern
 *    of CLMOE_MAX_LAYERS layers well within the parser's lines (at most about 800
 *    characters: runs of two between gaps of one); mla_every is read only (folded into
 *    the list).
 * tests/unit/test_config.c checks write-parse round trips of the presets and of random
 * configs over the keys' ranges, and that the text is a fixed point. */
#include "model_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clmoe/model_config.h"

/* Room for any value's text: the longest is a layer list (see above) or a curriculum of 16
 * entries of two 64-bit numbers. */
enum { VALUE_MAX = 2 * CONFIG_LINE_MAX };

/* Appends to buf [len] at *used (the text stays terminated; what does not fit is cut, which
 * the caller sees as a line beyond CONFIG_LINE_MAX). */
static void put(char *buf, size_t len, size_t *used, const char *fmt, ...)
{
  if (*used >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *used, len - *used, fmt, ap);
  va_end(ap);
  *used = n < 0 ? len : *used + (size_t)n;
}

/* The shortest %g form that reads back as the same double (0.0003, not 0.00029999...). */
static void shortest(double v, char *buf, size_t len)
{
  for (int prec = 6; prec < 17; prec++) {
    snprintf(buf, len, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) return;
  }
  snprintf(buf, len, "%.17g", v);
}

/* The MLA layers, 1-based, runs of three or more as a-b ("4, 8-11, 20"). */
static void layer_list(const clmoe_config *c, char *buf, size_t len)
{
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < c->layers && i < CLMOE_MAX_LAYERS; i++) {
    if (!c->is_mla[i]) continue;
    int j = i;
    while (j + 1 < c->layers && j + 1 < CLMOE_MAX_LAYERS && c->is_mla[j + 1]) j++;
    if (j - i >= 2) put(buf, len, &used, "%s%d-%d", used ? ", " : "", i + 1, j + 1), i = j;
    else put(buf, len, &used, "%s%d", used ? ", " : "", i + 1);
  }
}

/* Key k's value in c as the parser reads it ("" for an empty list; mla_every has none). */
static void value_text(const config_key *k, const clmoe_config *c, char *buf, size_t len)
{
  const char *field = (const char *)c + k->offset;
  size_t used = 0;
  buf[0] = '\0';
  switch (k->kind) {
  case CFG_I64: snprintf(buf, len, "%lld", (long long)*(const int64_t *)field); return;
  case CFG_INT: snprintf(buf, len, "%d", *(const int *)field); return;
  case CFG_F64: shortest(*(const double *)field, buf, len); return;
  case CFG_U64: snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)field); return;
  case CFG_EVERY: return;
  case CFG_LAYERS: layer_list(c, buf, len); return;
  case CFG_BALANCE: snprintf(buf, len, "%s", c->balancing); return;
  case CFG_GATE: snprintf(buf, len, "%s", c->kda_unbounded_gate ? "unbounded" : "bounded"); return;
  case CFG_CHOICE: snprintf(buf, len, "%s", k->choices[*(const int *)field]); return;
  case CFG_PRECISION: {
    const char *name = clmoe_precision_name((clmoe_precision) * (const int *)field);
    snprintf(buf, len, "%s", name ? name : "?");
    return;
  }
  case CFG_CURRICULUM:
    for (int i = 0; i < c->train.ncurriculum && i < CLMOE_MAX_CURRICULUM; i++)
      put(buf, len, &used, "%s%lld@%lld", i ? ", " : "", (long long)c->train.curriculum_len[i],
          (long long)c->train.curriculum_step[i]);
    return;
  }
}

/* The parser refuses this default: a key holding it is left out. */
static int default_refused(const config_key *k, const clmoe_config *defaults)
{
  const char *field = (const char *)defaults + k->offset;
  double v;
  switch (k->kind) {
  case CFG_I64: v = (double)*(const int64_t *)field; break;
  case CFG_INT: v = *(const int *)field; break;
  case CFG_F64: v = *(const double *)field; break;
  case CFG_LAYERS:
  case CFG_CURRICULUM: return 1; /* empty: an empty list is not a value */
  default: return 0;
  }
  return v < k->lo || v > k->hi;
}

/* The name on the first line, with control characters (a newline would start a line the
 * parser reads) as '?'. */
static void name_line(const char *name, char *buf, size_t len)
{
  size_t i = 0;
  for (; name[i] && i + 1 < len; i++)
    buf[i] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
  buf[i] = '\0';
}

int clmoe_config_write(const clmoe_config *c, FILE *f)
{
  clmoe_config d;
  clmoe_config_defaults(&d);
  char *v = malloc(2 * (size_t)VALUE_MAX), *dv = v + VALUE_MAX, name[sizeof c->name];
  if (!v) {
    clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_config_write: out of host memory");
    return -1;
  }
  name_line(c->name, name, sizeof name);
  int ok = fprintf(f, "# %s\n", name) > 0, nsec = 0;
  for (const config_section *s = clmoe__model_config_sections; ok && s->name; s++) {
    const config_key *first = clmoe__model_config_keys;
    while (first->section && strcmp(first->section, s->name)) first++;
    int wanted = !s->optional;
    for (const config_key *k = first; !wanted && k->section && !strcmp(k->section, s->name); k++) {
      value_text(k, c, v, VALUE_MAX);
      value_text(k, &d, dv, VALUE_MAX);
      wanted = strcmp(v, dv) != 0;
    }
    if (!wanted) continue;
    ok &= fprintf(f, "%s[%s]\n", nsec++ ? "\n" : "", s->name) > 0;
    for (const config_key *k = first; ok && k->section && !strcmp(k->section, s->name); k++) {
      if (k->kind == CFG_EVERY) continue;
      value_text(k, c, v, VALUE_MAX);
      value_text(k, &d, dv, VALUE_MAX);
      if (!strcmp(v, dv) && default_refused(k, &d)) continue; /* unset */
      if (strlen(k->key) + 3 + strlen(v) > CONFIG_LINE_MAX) {
        clmoe__error(CLMOE_ERR_INTERNAL, "clmoe_config_write: [%s] %s does not fit a line of %d "
                     "characters", s->name, k->key, CONFIG_LINE_MAX);
        ok = 0;
        break;
      }
      ok &= fprintf(f, "%s = %s\n", k->key, v) > 0;
    }
  }
  free(v);
  return ok ? 0 : -1;
}
