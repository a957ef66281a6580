/* clmoe-xcheck's report files: reading a --json file (any clmoe-xcheck version: the header
 * fields and outputs are optional), --compare of two files and --matrix of several. A file
 * that cannot be read, is not JSON or lacks a required field ends the program with a
 * message naming the file (exit 1). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "app_common.h"
#include "xcheck.h"

/* One device of a file. */
typedef struct xr_device {
  const char *index; /* "P:D" on the node that wrote the file */
  const char *device, *platform, *platform_version, *driver_version;
} xr_device;

/* One (check, device) result of a file. */
typedef struct xr_entry {
  const char *check, *index, *detail;
  double max_err, tolerance; /* null (not finite) reads as Inf */
  int passed, ran;           /* ran: 0 when the check could not run (the op failed) */
  clmoe_check_output *outputs; /* [noutputs], decoded; NULL without "outputs" */
  int noutputs, has_outputs;
  int dropped; /* "outputs_dropped": outputs past the writer's capture bound are missing */
} xr_entry;

typedef struct xr_file {
  const char *path;
  xj_value root;
  const char *version, *commit, *date, *host; /* NULL when the file does not say */
  double seed;
  int has_seed, with_outputs; /* with_outputs: every entry carries its outputs */
  int small;                  /* the checks ran at their smallest sizes (--small) */
  xr_device *devices;
  int ndevices;
  xr_entry *entries;
  int nentries;
} xr_file;

static char *read_all(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  if (!f) app_fail(1, "cannot read %s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf) app_fail(1, "%s: out of host memory reading it", path);
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    cap *= 2;
    char *grown = realloc(buf, cap);
    if (!grown) free(buf);
    buf = grown;
  }
  if (ferror(f)) app_fail(1, "cannot read %s: %s", path, strerror(errno));
  fclose(f);
  *len = n;
  return buf;
}

/* A number member, or null read as Inf; exits naming the file when absent or another type. */
static double number_or_null(const xr_file *r, size_t i, const xj_value *e, const char *key)
{
  const xj_value *v = xj_get(e, key);
  if (v && v->type == XJ_NUMBER) return v->number;
  if (v && v->type == XJ_NULL) return INFINITY; /* json_double writes NaN and Inf as null */
  app_fail(1, "%s: results[%zu] (line %d): \"%s\" is missing or not a number", r->path, i, e->line, key);
}

static const char *required_string(const xr_file *r, size_t i, const xj_value *e, const char *key)
{
  const char *s = xj_string(e, key);
  if (!s) app_fail(1, "%s: results[%zu] (line %d): \"%s\" is missing or not a string", r->path, i, e->line, key);
  return s;
}

static void read_outputs(const xr_file *r, size_t i, const xj_value *arr, xr_entry *en)
{
  if (arr->type != XJ_ARRAY) app_fail(1, "%s: results[%zu]: \"outputs\" is not an array", r->path, i);
  en->has_outputs = 1;
  en->noutputs = (int)arr->count;
  en->outputs = calloc(arr->count + 1, sizeof *en->outputs);
  if (!en->outputs) app_fail(1, "%s: out of host memory", r->path);
  for (size_t k = 0; k < arr->count; k++) {
    const xj_value *o = &arr->items[k], *n = xj_get(o, "n");
    const xj_value *got = xj_get(o, "got"), *den = xj_get(o, "den");
    const char *name = xj_string(o, "name");
    if (!name || !n || n->type != XJ_NUMBER || !(n->number >= 0 && n->number < 1e15) ||
        n->number != floor(n->number) || !got || got->type != XJ_STRING || !den || den->type != XJ_STRING)
      app_fail(1, "%s: results[%zu] outputs[%zu] (line %d): needs \"name\", \"n\", \"got\" and \"den\"",
               r->path, i, k, o->line);
    clmoe_check_output *out = &en->outputs[k];
    snprintf(out->name, sizeof out->name, "%s", name);
    out->n = (size_t)n->number;
    const size_t chars = (out->n * sizeof(float) + 2) / 3 * 4; /* base64 of n floats */
    if (got->len != chars || den->len != chars)
      app_fail(1, "%s: results[%zu] outputs[%zu] \"%s\" (line %d): \"got\" and \"den\" must be %zu base64 "
               "characters (n = %zu floats)", r->path, i, k, name, o->line, chars, out->n);
    out->got = malloc(out->n * sizeof(float) + 1);
    out->den = malloc(out->n * sizeof(float) + 1);
    if (!out->got || !out->den) app_fail(1, "%s: out of host memory", r->path);
    if (!xc_base64_decode(got->string, got->len, (unsigned char *)out->got, out->n * sizeof(float)) ||
        !xc_base64_decode(den->string, den->len, (unsigned char *)out->den, out->n * sizeof(float)))
      app_fail(1, "%s: results[%zu] outputs[%zu] \"%s\" (line %d): \"got\" or \"den\" is not base64 of %zu floats",
               r->path, i, k, name, o->line, out->n);
  }
}

/* Adds a device to the file's list unless its index is there already. */
static void add_device(xr_file *r, const xr_device *d)
{
  for (int k = 0; k < r->ndevices; k++)
    if (!strcmp(r->devices[k].index, d->index)) return;
  r->devices[r->ndevices++] = *d;
}

static void load(const char *path, xr_file *r)
{
  memset(r, 0, sizeof *r);
  r->path = path;
  size_t len = 0;
  char *text = read_all(path, &len), err[256];
  if (!xj_parse(text, len, &r->root, err, sizeof err)) app_fail(1, "%s: not JSON: %s", path, err);
  free(text);
  const xj_value *root = &r->root, *results = xj_get(root, "results"), *seed = xj_get(root, "seed");
  if (root->type != XJ_OBJECT || !results || results->type != XJ_ARRAY)
    app_fail(1, "%s: not a clmoe-xcheck report (no \"results\" array; write one with clmoe-xcheck --json)", path);
  r->version = xj_string(root, "clmoe_version");
  r->commit = xj_string(root, "commit");
  r->date = xj_string(root, "date");
  r->host = xj_string(root, "host");
  if (seed && seed->type == XJ_NUMBER) r->seed = seed->number, r->has_seed = 1;
  const xj_value *small = xj_get(root, "small");
  r->small = small && small->type == XJ_BOOL && small->boolean;
  const xj_value *devs = xj_get(root, "devices");
  size_t ndev = devs && devs->type == XJ_ARRAY ? devs->count : 0;
  r->devices = calloc(ndev + results->count + 1, sizeof *r->devices);
  r->entries = calloc(results->count + 1, sizeof *r->entries);
  if (!r->devices || !r->entries) app_fail(1, "%s: out of host memory", path);
  for (size_t k = 0; k < ndev; k++) {
    const xj_value *d = &devs->items[k];
    xr_device dv = {xj_string(d, "device_index"), xj_string(d, "device"), xj_string(d, "platform"),
                    xj_string(d, "platform_version"), xj_string(d, "driver_version")};
    if (!dv.index) app_fail(1, "%s: devices[%zu] (line %d): \"device_index\" is missing", path, k, d->line);
    add_device(r, &dv);
  }
  r->with_outputs = results->count > 0;
  for (size_t i = 0; i < results->count; i++) {
    const xj_value *e = &results->items[i];
    if (e->type != XJ_OBJECT) app_fail(1, "%s: results[%zu] (line %d) is not an object", path, i, e->line);
    xr_entry *en = &r->entries[r->nentries++];
    en->check = required_string(r, i, e, "check");
    en->index = required_string(r, i, e, "device_index");
    en->detail = xj_string(e, "detail");
    const xj_value *passed = xj_get(e, "passed"), *outs = xj_get(e, "outputs");
    if (!passed || passed->type != XJ_BOOL)
      app_fail(1, "%s: results[%zu] (line %d): \"passed\" is missing or not true/false", path, i, e->line);
    en->passed = passed->boolean;
    const xj_value *ran = xj_get(e, "ran"); /* absent in older files: it ran unless it says not */
    en->ran = ran && ran->type == XJ_BOOL ? ran->boolean : !(en->detail && !strncmp(en->detail, "did not run", 11));
    en->max_err = number_or_null(r, i, e, "max_error");
    en->tolerance = number_or_null(r, i, e, "tolerance");
    if (outs) read_outputs(r, i, outs, en);
    const xj_value *dropped = xj_get(e, "outputs_dropped");
    en->dropped = dropped && dropped->type == XJ_NUMBER && dropped->number > 0;
    if (!outs) r->with_outputs = 0;
    xr_device dv = {en->index, xj_string(e, "device"), xj_string(e, "platform"), NULL, NULL};
    add_device(r, &dv);
  }
}

static void unload(xr_file *r)
{
  for (int i = 0; i < r->nentries; i++) {
    for (int k = 0; k < r->entries[i].noutputs; k++) {
      free(r->entries[i].outputs[k].got);
      free(r->entries[i].outputs[k].den);
    }
    free(r->entries[i].outputs);
  }
  free(r->entries);
  free(r->devices);
  xj_free(&r->root);
}

static const char *or_unknown(const char *s) { return s && *s ? s : "unknown"; }

/* Whether entry i is the first of its check in the file. */
static int first_of_check(const xr_file *r, int i)
{
  for (int k = 0; k < i; k++)
    if (!strcmp(r->entries[k].check, r->entries[i].check)) return 0;
  return 1;
}

static int has_check(const xr_file *r, const char *check)
{
  for (int k = 0; k < r->nentries; k++)
    if (!strcmp(r->entries[k].check, check)) return 1;
  return 0;
}

static void describe(const char *label, const xr_file *r)
{
  printf("%s: %s: clmoe %s%s%s, %s, host %s, ", label, r->path, or_unknown(r->version),
         r->commit ? " commit " : "", r->commit ? r->commit : "", or_unknown(r->date), or_unknown(r->host));
  if (r->has_seed) printf("seed %.0f, ", r->seed);
  if (r->small) printf("smallest sizes, ");
  printf("%d results%s\n", r->nentries, r->with_outputs ? " with outputs" : " without outputs");
  for (int k = 0; k < r->ndevices; k++) {
    const xr_device *d = &r->devices[k];
    printf("    [%s] %s: %s, %s, driver %s\n", d->index, or_unknown(d->device), or_unknown(d->platform),
           or_unknown(d->platform_version), or_unknown(d->driver_version));
  }
}

/* Prints the names of a's checks that b lacks; returns how many. */
static int only_in(const xr_file *a, const xr_file *b)
{
  int n = 0;
  for (int i = 0; i < a->nentries; i++) {
    if (!first_of_check(a, i) || has_check(b, a->entries[i].check)) continue;
    if (n == 0) printf("\nOnly in %s:", a->path);
    if (n < 20) printf(" %s", a->entries[i].check);
    else if (n == 20) printf(" ...");
    n++;
  }
  if (n) printf(" (%d checks)\n", n);
  return n;
}

int xc_compare_files(const char *pa, const char *pb, double factor, int quiet)
{
  xr_file A, B;
  load(pa, &A);
  load(pb, &B);
  describe("A", &A);
  describe("B", &B);
  int outputs = A.with_outputs && B.with_outputs;
  if (!A.with_outputs || !B.with_outputs)
    printf("%s has no outputs (written without --outputs): comparing max errors and pass/fail only\n",
           !A.with_outputs ? pa : pb);
  else if (A.has_seed && B.has_seed && A.seed != B.seed) {
    printf("the files used different seeds (%.0f and %.0f), so different inputs: comparing max errors"
           " and pass/fail only\n", A.seed, B.seed);
    outputs = 0;
  } else if (A.small != B.small) {
    printf("%s ran the checks at their smallest sizes (--small) and %s at full size: comparing max"
           " errors and pass/fail only\n", A.small ? pa : pb, A.small ? pb : pa);
    outputs = 0;
  }
  printf("\n%-30s %-5s %-5s %10s %10s %11s %9s  %-6s  %s\n", "check", "A", "B", "A error", "B error",
         outputs ? "max diff" : "", "tolerance", "result", outputs ? "where" : "");
  int checks = 0, pairs = 0, same = 0, within = 0, beyond = 0, skipped = 0, fail_a = 0, fail_b = 0;
  double worst = 0.0;
  for (int i = 0; i < A.nentries; i++) {
    const xr_entry *ea = &A.entries[i];
    if (!ea->passed) fail_a++;
    if (!first_of_check(&A, i) || !has_check(&B, ea->check)) continue;
    checks++;
    for (int ia = i; ia < A.nentries; ia++) {
      const xr_entry *a = &A.entries[ia];
      if (strcmp(a->check, ea->check) != 0) continue;
      for (int ib = 0; ib < B.nentries; ib++) {
        const xr_entry *b = &B.entries[ib];
        if (strcmp(b->check, ea->check) != 0) continue;
        const double tol = a->tolerance > b->tolerance ? a->tolerance : b->tolerance;
        xc_diff d;
        memset(&d, 0, sizeof d);
        const char *v;
        pairs++;
        if (outputs && (!a->ran || !b->ran)) {
          snprintf(d.where, sizeof d.where, "did not run in %s", !a->ran ? pa : pb);
          v = "-";
          skipped++;
        } else if (outputs && (a->dropped || b->dropped)) {
          snprintf(d.where, sizeof d.where, "%s lacks outputs past its capture bound", a->dropped ? pa : pb);
          v = "-";
          skipped++;
        } else if (outputs) {
          xc_pair_diff(a->outputs, a->noutputs, b->outputs, b->noutputs, &d);
          v = xc_pair_verdict(&d, tol, factor);
          if (!d.compared) skipped++;
          else if (d.max == 0.0) same++;
          else if (xc_pair_within(&d, tol, factor)) within++;
          else beyond++;
          if (d.compared && !(d.max <= worst)) worst = d.max;
        } else {
          v = "pass"; /* no outputs: pass/fail only */
        }
        const char *result = !a->passed || !b->passed ? "FAIL" : v;
        if (quiet && strcmp(result, "FAIL") != 0 && strcmp(result, "DIFFER") != 0) continue;
        char diff[16] = "";
        if (outputs && d.compared) snprintf(diff, sizeof diff, "%.3e", d.max);
        else if (outputs) snprintf(diff, sizeof diff, "-");
        printf("%-30s %-5s %-5s %10.3e %10.3e %11s %9.1e  %-6s  %s\n", ea->check, a->index, b->index,
               a->max_err, b->max_err, diff, tol, result, outputs ? d.where : "");
      }
    }
  }
  for (int i = 0; i < B.nentries; i++) fail_b += !B.entries[i].passed;
  int only_a = only_in(&A, &B), only_b = only_in(&B, &A);
  printf("\n%d checks in both files, %d device pairs", checks, pairs);
  if (outputs)
    printf(": %d identical, %d within %g x the tolerance, %d beyond it, %d not compared", same, within,
           factor, beyond, skipped);
  printf("; failed checks: %d in A, %d in B\n", fail_a, fail_b);
  if (outputs && pairs > skipped && same == pairs - skipped)
    printf("All compared outputs are identical (difference 0); %d pairs not compared.\n", skipped);
  else if (outputs && pairs > skipped)
    printf("Largest difference between the files' outputs: %.3e\n", worst);
  if (only_a || only_b) printf("(checks in only one file are not compared)\n");
  unload(&A);
  unload(&B);
  return beyond || fail_a || fail_b ? 1 : 0;
}

/* A Markdown table cell's text: '|' escaped. */
static void md_text(const char *s)
{
  for (; s && *s; s++) {
    if (*s == '|') fputs("\\|", stdout);
    else if (*s == '\n') fputc(' ', stdout);
    else fputc(*s, stdout);
  }
}

/* One device of one file, in the matrix's column col: the same device (name, platform,
 * platform version, driver) at the same sizes and seed in several files - the shards of one
 * run (--shard) - shares a column. */
typedef struct xr_column {
  const xr_file *file;
  const xr_device *dev;
  int col;
} xr_column;

static int same_text(const char *a, const char *b) { return !strcmp(or_unknown(a), or_unknown(b)); }

static int same_column(const xr_column *m, const xr_file *f, const xr_device *d)
{
  return same_text(m->dev->device, d->device) && same_text(m->dev->platform, d->platform) &&
         same_text(m->dev->platform_version, d->platform_version) &&
         same_text(m->dev->driver_version, d->driver_version) && m->file->small == f->small &&
         m->file->has_seed == f->has_seed && (!f->has_seed || m->file->seed == f->seed);
}

/* The first member of column c. */
static const xr_column *column_member(const xr_column *cols, int nmem, int c)
{
  for (int j = 0; j < nmem; j++)
    if (cols[j].col == c) return &cols[j];
  return &cols[0]; /* (every column has a member) */
}

int xc_matrix_files(int nfiles, const char *const *paths)
{
  xr_file *files = calloc((size_t)nfiles, sizeof *files);
  if (!files) app_fail(1, "out of host memory");
  int ncol = 0;
  for (int f = 0; f < nfiles; f++) {
    load(paths[f], &files[f]);
    ncol += files[f].ndevices;
  }
  xr_column *cols = calloc((size_t)ncol + 1, sizeof *cols);
  if (!cols) app_fail(1, "out of host memory");
  int nmem = 0;
  ncol = 0;
  for (int f = 0; f < nfiles; f++)
    for (int k = 0; k < files[f].ndevices; k++) {
      xr_column m = {&files[f], &files[f].devices[k], -1};
      for (int j = 0; j < nmem && m.col < 0; j++)
        if (cols[j].file != m.file && same_column(&cols[j], m.file, m.dev)) m.col = cols[j].col;
      if (m.col < 0) m.col = ncol++;
      cols[nmem++] = m;
    }

  printf("## Conformance matrix\n\n"
         "Written by `clmoe-xcheck --matrix` from %d report%s of `clmoe-xcheck --json`. A cell is\n"
         "pass or **FAIL** with the check's worst error (by its measure, mostly |got - ref| /\n"
         "(|ref| + rms(ref)), against the double-precision reference); - where the check did not\n"
         "run on that device. One device's reports from several files (shards) share a column.\n\n",
         nfiles, nfiles == 1 ? "" : "s");
  for (int f = 0; f < nfiles; f++) {
    const xr_file *r = &files[f];
    printf("- `");
    md_text(r->path);
    printf("`: %s, clmoe %s%s%s, host %s", or_unknown(r->date), or_unknown(r->version),
           r->commit ? " commit " : "", r->commit ? r->commit : "", or_unknown(r->host));
    if (r->has_seed) printf(", seed %.0f", r->seed);
    if (r->small) printf(", smallest sizes (--small)");
    printf("\n");
  }
  printf("\n| column | device | platform | platform version | driver | file, index |\n"
         "|---|---|---|---|---|---|\n");
  for (int c = 0; c < ncol; c++) {
    const xr_column *first = column_member(cols, nmem, c);
    const xr_device *d = first->dev;
    printf("| %d | ", c + 1);
    md_text(or_unknown(d->device));
    printf(" | ");
    md_text(or_unknown(d->platform));
    printf(" | ");
    md_text(or_unknown(d->platform_version));
    printf(" | ");
    md_text(or_unknown(d->driver_version));
    printf(" |");
    for (int j = 0, n = 0; j < nmem; j++) {
      if (cols[j].col != c) continue;
      printf("%s ", n++ ? "," : "");
      md_text(cols[j].file->path);
      printf(" %s", cols[j].dev->index);
    }
    printf(" |\n");
  }
  printf("\n| check | tolerance |");
  for (int c = 0; c < ncol; c++) {
    const xr_device *d = column_member(cols, nmem, c)->dev;
    printf(" %d: ", c + 1);
    md_text(or_unknown(d->device));
    printf(" (");
    md_text(or_unknown(d->platform));
    printf(") |");
  }
  printf("\n|---|---|");
  for (int c = 0; c < ncol; c++) printf("---|");
  printf("\n");
  int *npass = calloc((size_t)ncol + 1, sizeof *npass), *nrun = calloc((size_t)ncol + 1, sizeof *nrun);
  if (!npass || !nrun) app_fail(1, "out of host memory");
  for (int f = 0; f < nfiles; f++)
    for (int i = 0; i < files[f].nentries; i++) {
      const char *check = files[f].entries[i].check;
      /* a row per check, at its first appearance over the files */
      int seen = !first_of_check(&files[f], i);
      for (int g = 0; g < f && !seen; g++) seen = has_check(&files[g], check);
      if (seen) continue;
      printf("| ");
      md_text(check);
      printf(" | %.1e |", files[f].entries[i].tolerance);
      for (int c = 0; c < ncol; c++) {
        const xr_entry *e = NULL; /* the first member file that ran the check */
        for (int j = 0; j < nmem && !e; j++) {
          if (cols[j].col != c) continue;
          for (int k = 0; k < cols[j].file->nentries && !e; k++) {
            const xr_entry *x = &cols[j].file->entries[k];
            if (!strcmp(x->check, check) && !strcmp(x->index, cols[j].dev->index)) e = x;
          }
        }
        if (!e) printf(" - |");
        else if (e->passed) printf(" pass %.1e |", e->max_err);
        else if (!e->ran) printf(" **FAIL** (did not run) |");
        else printf(" **FAIL** %.1e |", e->max_err);
        if (e) nrun[c]++, npass[c] += e->passed;
      }
      printf("\n");
    }
  printf("| **passed** | |");
  for (int c = 0; c < ncol; c++) printf(" %d of %d |", npass[c], nrun[c]);
  printf("\n");
  for (int f = 0; f < nfiles; f++) unload(&files[f]);
  free(npass);
  free(nrun);
  free(cols);
  free(files);
  return 0;
}
