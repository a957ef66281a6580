/* Comparing two devices' captured outputs of one check (the measure is in xcheck.h), and the
 * outputs' JSON form: base64 of little-endian float32 (configure refuses big-endian hosts,
 * so memory order is the file's order). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "app_common.h"
#include "xcheck.h"

/* The difference of one element (den_a, den_b: the two captures' denominators). */
static double element_diff(float a, float b, float den_a, float den_b)
{
  if (!isfinite(den_a) || !isfinite(den_b)) {
    /* the reference is NaN or Inf here: only the same value (or NaN vs NaN where the
     * reference is NaN) agrees */
    if (a == b) return 0.0;
    if (isnan(a) && isnan(b) && (isnan(den_a) || isnan(den_b))) return 0.0;
    return INFINITY;
  }
  if (a == b) return 0.0; /* also the same Inf */
  if (!isfinite(a) || !isfinite(b)) return INFINITY;
  const double den = fmin((double)den_a, (double)den_b);
  return fabs((double)a - (double)b) / den;
}

void xc_pair_diff(const clmoe_check_output *a, int na, const clmoe_check_output *b, int nb,
                  xc_diff *d)
{
  memset(d, 0, sizeof *d);
  if (na == 0 || nb == 0) {
    snprintf(d->where, sizeof d->where, "no outputs captured on %s%s",
             na == 0 && nb == 0 ? "either device" : na == 0 ? "the first device" : "the second device",
             na == 0 && nb == 0 ? " (the check compares without ck_compare)" : "");
    return;
  }
  if (na != nb) {
    snprintf(d->where, sizeof d->where, "the devices compared different outputs (%d and %d)", na, nb);
    return;
  }
  for (int k = 0; k < na; k++)
    if (strcmp(a[k].name, b[k].name) != 0 || a[k].n != b[k].n) {
      snprintf(d->where, sizeof d->where, "output %d differs: %s of %zu values vs %s of %zu", k,
               a[k].name, a[k].n, b[k].name, b[k].n);
      return;
    }
  d->compared = 1;
  int first = 1;
  for (int k = 0; k < na; k++)
    for (size_t i = 0; i < a[k].n; i++) {
      const double e = element_diff(a[k].got[i], b[k].got[i], a[k].den[i], b[k].den[i]);
      if (e > d->max || first) {
        if (e > d->max) d->max = e;
        snprintf(d->where, sizeof d->where, "%s[%zu]: %.9g vs %.9g", a[k].name, i,
                 (double)a[k].got[i], (double)b[k].got[i]);
        first = 0;
      }
    }
}

void xc_pair_exact(xc_diff *d)
{
  memset(d, 0, sizeof *d);
  d->compared = 1;
  snprintf(d->where, sizeof d->where, "both equal the reference exactly");
}

int xc_pair_within(const xc_diff *d, double tolerance, double factor)
{
  return d->compared && d->max <= factor * tolerance; /* NaN never within */
}

const char *xc_pair_verdict(const xc_diff *d, double tolerance, double factor)
{
  if (!d->compared) return "-";
  if (d->max == 0.0) return "same";
  return xc_pair_within(d, tolerance, factor) ? "ok" : "DIFFER";
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Writes the bytes as base64 (with '=' padding) inside a JSON string. */
static void write_base64(FILE *f, const unsigned char *p, size_t bytes)
{
  char line[4 * 1024 + 4];
  size_t k = 0;
  fputc('"', f);
  for (size_t i = 0; i < bytes; i += 3) {
    const size_t left = bytes - i;
    const uint32_t v = (uint32_t)p[i] << 16 | (left > 1 ? (uint32_t)p[i + 1] << 8 : 0) |
                       (left > 2 ? (uint32_t)p[i + 2] : 0);
    line[k++] = b64[v >> 18 & 63];
    line[k++] = b64[v >> 12 & 63];
    line[k++] = left > 1 ? b64[v >> 6 & 63] : '=';
    line[k++] = left > 2 ? b64[v & 63] : '=';
    if (k >= sizeof line - 4) {
      fwrite(line, 1, k, f);
      k = 0;
    }
  }
  fwrite(line, 1, k, f);
  fputc('"', f);
}

void xc_write_outputs(FILE *f, const clmoe_check_capture *cap)
{
  fputs(", \"outputs\": [", f);
  for (int k = 0; cap && k < cap->count; k++) {
    const clmoe_check_output *o = &cap->outputs[k];
    fprintf(f, "%s\n      {\"name\": ", k ? "," : "");
    json_string(f, o->name);
    fprintf(f, ", \"n\": %zu, \"got\": ", o->n);
    write_base64(f, (const unsigned char *)o->got, o->n * sizeof *o->got);
    fputs(", \"den\": ", f);
    write_base64(f, (const unsigned char *)o->den, o->n * sizeof *o->den);
    fputc('}', f);
  }
  fputc(']', f);
  if (cap && cap->dropped) fprintf(f, ", \"outputs_dropped\": %d", cap->dropped);
}

/* The value of a base64 character, -1 for any other. */
static int b64_value(char c)
{
  static signed char table[256];
  static int ready = 0;
  if (!ready) {
    memset(table, -1, sizeof table);
    for (int i = 0; i < 64; i++) table[(unsigned char)b64[i]] = (signed char)i;
    ready = 1;
  }
  return table[(unsigned char)c];
}

int xc_base64_decode(const char *text, size_t len, unsigned char *out, size_t bytes)
{
  if (len % 4 != 0 || len / 4 * 3 < bytes || len / 4 * 3 >= bytes + 3) return 0;
  size_t o = 0;
  for (size_t i = 0; i < len; i += 4) {
    int v[4], pad = 0;
    for (int j = 0; j < 4; j++) {
      const char c = text[i + j];
      if (c == '=' && i + 4 == len && j >= 2) {
        v[j] = 0;
        pad++;
      } else if (pad || (v[j] = b64_value(c)) < 0) {
        return 0; /* not base64, or a character after the padding */
      }
    }
    const uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    const unsigned char t[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w};
    for (int j = 0; j < 3 - pad; j++) {
      if (o == bytes) return 0;
      out[o++] = t[j];
    }
  }
  return o == bytes;
}
