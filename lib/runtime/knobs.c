/* The knobs: every environment variable clmoe reads (CLMOE_...), in one table with its kind,
 * default, accepted values, one line of documentation and scope; one parser that reads and
 * validates a value; the per-context copy (read once at clmoe_ctx_create; its override,
 * clmoe_ctx_set_knob, is in context.c); and the per-device defaults of the tile
 * hosts' choices as data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/paths.h"
#include "internal.h"

/* Extra checks of one knob's value beyond its kind (the int lists' shapes). NULL: fine,
 * else what is wrong. */
typedef const char *(*knob_check)(const clmoe__knob_value *v);

typedef struct knob_def {
  const char *name;    /* the environment variable */
  clmoe__knob_kind kind;
  const char *def;     /* the default's spelling; NULL: unset (the doc says what that means) */
  long long lo, hi;    /* int, number: the range; int list: each element's */
  int min_n, max_n;    /* int list: how many elements */
  const char *values;  /* enum: the spellings, '|' between them; others: what is accepted, in
                        * words (bool: NULL) */
  knob_check check;
  const char *doc;
  const char *scope;   /* "user" (README), "tuning" (clmoe-info --knobs), "testing" */
  int process;         /* 1: read before any context exists, never set per context */
} knob_def;

static const char *gemm_async_shape(const clmoe__knob_value *v)
{
  if (v->n == 1) return v->list[0] == 0 ? NULL : "one value must be 0";
  return v->n >= 5 ? NULL : "give 0 or bm,bn,warps_m,warps_n,stages[,bk]";
}

static const char *gemm_wgmma_shape(const clmoe__knob_value *v)
{
  if (v->n == 1) return v->list[0] == 0 ? NULL : "one value must be 0";
  return v->n >= 4 ? NULL : "give 0 or bm,bn,bk,stages[,inflight]";
}

static const char *mla_wgmma_shape(const clmoe__knob_value *v)
{
  if (v->n == 1) return v->list[0] == 0 || v->list[0] == 1 ? NULL : "one value must be 0 or 1";
  if (v->list[0] != 32 && v->list[0] != 64) return "bk must be 32 or 64";
  if (v->list[1] < 1 || v->list[1] > 3) return "ahead must be 1, 2 or 3";
  if (v->n == 3 && v->list[2] != 0 && v->list[2] != 1) return "turns must be 0 or 1";
  return NULL;
}

_Static_assert(CLMOE__KNOB_DEFAULT == (int)CLMOE_KNOB_DEFAULT && CLMOE__KNOB_ENV == (int)CLMOE_KNOB_ENV &&
               CLMOE__KNOB_SET == (int)CLMOE_KNOB_SET, "knob sources");

#define BIG 1000000000000000LL

/* The table, in the order of the ids (clmoe__knob_id in internal.h). */
static const knob_def knobs[CLMOE_K_COUNT] = {
    [CLMOE_K_DEVICE] = {"CLMOE_DEVICE", CLMOE__KNOB_STRING, NULL, 0, 0, 0, 0,
                        "P:D, gpu, cpu, accelerator, an implementation or part of a name", NULL,
                        "device choice when no --device is given (unset: the first GPU, else the "
                        "first CPU device)", "user", 1},
    [CLMOE_K_CACHE_DIR] = {"CLMOE_CACHE_DIR", CLMOE__KNOB_STRING, NULL, 0, 0, 0, 0, "a folder", NULL,
                           "where built kernel binaries are cached (unset: $XDG_CACHE_HOME/clmoe, else "
                           "~/.cache/clmoe)", "user", 0},
    [CLMOE_K_CACHE] = {"CLMOE_CACHE", CLMOE__KNOB_BOOL, "1", 0, 1, 0, 0, NULL, NULL,
                       "0: no kernel cache", "user", 0},
    [CLMOE_K_CLBLAST_TUNING] = {"CLMOE_CLBLAST_TUNING", CLMOE__KNOB_STRING, NULL, 0, 0, 0, 0,
                                "FILE[:FILE...]", NULL,
                                "CLBlast tuner results applied to the matching device before its "
                                "first GEMM, after a check against the host", "user", 0},
    [CLMOE_K_POISON] = {"CLMOE_POISON", CLMOE__KNOB_BOOL, "0", 0, 1, 0, 0, NULL, NULL,
                        "1: fill every buffer the pool hands out with a quiet-NaN pattern first "
                        "(testing)", "user", 0},
    [CLMOE_K_KERNEL_DIR] = {"CLMOE_KERNEL_DIR", CLMOE__KNOB_STRING, NULL, 0, 0, 0, 0, "a folder", NULL,
                            "read kernel sources from this folder instead of the built-in copies",
                            "user", 0},
    [CLMOE_K_FASTPATH] = {"CLMOE_FASTPATH", CLMOE__KNOB_ENUM, "auto", 0, 0, 0, 0, "auto|0|1", NULL,
                          "the tile (matrix-unit) kernels: auto where the device has a matrix unit, "
                          "0 never, 1 wherever they cover the call", "user", 0},
    [CLMOE_K_MPI] = {"CLMOE_MPI", CLMOE__KNOB_ENUM, "auto", 0, 0, 0, 0, "auto|0|1", NULL,
                     "1: always start MPI, 0: never; auto: when an MPI launcher started the process",
                     "user", 1},
    [CLMOE_K_BIND] = {"CLMOE_BIND", CLMOE__KNOB_ENUM, "auto", 0, 0, 0, 0, "auto|none", NULL,
                      "binding of each rank's threads near its device (none: leave them)", "user", 1},
    [CLMOE_K_LOCAL_MEM_BYTES] = {"CLMOE_LOCAL_MEM_BYTES", CLMOE__KNOB_INT, NULL, 1, BIG, 0, 0, "an integer >= 1", NULL,
                                 "local memory the kernels may plan for, in place of the reported size "
                                 "(unset: the reported size)", "tuning", 0},
    [CLMOE_K_CL_OPTIONS] = {"CLMOE_CL_OPTIONS", CLMOE__KNOB_STRING, NULL, 0, 0, 0, 0, "compiler options",
                            NULL, "OpenCL compiler options added to every build (-cl-nv-verbose)",
                            "tuning", 0},
    [CLMOE_K_BUILD_LOG] = {"CLMOE_BUILD_LOG", CLMOE__KNOB_BOOL, "0", 0, 1, 0, 0, NULL, NULL,
                           "1: print each build's compiler log (registers, spills; with CLMOE_CACHE=0)",
                           "tuning", 0},
    [CLMOE_K_GEMM_ASYNC] = {"CLMOE_GEMM_ASYNC", CLMOE__KNOB_INT_LIST, NULL, 0, 4096, 1, 6,
                            "0 or bm,bn,warps_m,warps_n,stages[,bk]", gemm_async_shape,
                            "the tile GEMM's double-buffered block (unset: by shape and device; 0: "
                            "never)", "tuning", 0},
    [CLMOE_K_GEMM_WGMMA] = {"CLMOE_GEMM_WGMMA", CLMOE__KNOB_INT_LIST, NULL, 0, 4096, 1, 5,
                            "0 or bm,bn,bk,stages[,inflight]", gemm_wgmma_shape,
                            "the tile GEMM's warp-group (sm_90a) block (unset: by shape on sm_90; 0: "
                            "never; a block: on any device)", "tuning", 0},
    [CLMOE_K_KDA_TC_STEP] = {"CLMOE_KDA_TC_STEP", CLMOE__KNOB_ENUM, "64", 0, 0, 0, 0, "64|16", NULL,
                             "the KDA tile forward's state pass: 64-token ring or 16-token pass",
                             "tuning", 0},
    [CLMOE_K_KDA_TC_PRODUCER] = {"CLMOE_KDA_TC_PRODUCER", CLMOE__KNOB_BOOL, "1", 0, 1, 0, 0, NULL, NULL,
                                 "0: no producer warp issuing the KDA state ring's copies (PTX tiles)",
                                 "tuning", 0},
    [CLMOE_K_KDA_TC_STSM] = {"CLMOE_KDA_TC_STSM", CLMOE__KNOB_BOOL, "1", 0, 1, 0, 0, NULL, NULL,
                             "0: the KDA state passes store their saved rows without stmatrix (1: "
                             "with it where the tiles have it)", "tuning", 0},
    [CLMOE_K_KDA_KEEP] = {"CLMOE_KDA_KEEP", CLMOE__KNOB_BOOL, "1", 0, 1, 0, 0, NULL, NULL,
                          "0: the KDA layer's tile forward keeps no factors for the backward "
                          "(which recomputes them)", "tuning", 0},
    [CLMOE_K_KDA_KEEP_MAX_MB] = {"CLMOE_KDA_KEEP_MAX_MB", CLMOE__KNOB_NUMBER, NULL, 0, BIG, 0, 0,
                                 "a number >= 0", NULL, "MiB the KDA tile forward may keep for the backward per call "
                                 "(unset: no cap)", "tuning", 0},
    [CLMOE_K_KDA_TCB_FUSE] = {"CLMOE_KDA_TCB_FUSE", CLMOE__KNOB_ENUM, "auto", 0, 0, 0, 0, "auto|0|1",
                              NULL, "the KDA tile backward's two state passes in one launch (1) or two "
                              "(0); auto: one while they leave compute units free", "tuning", 0},
    [CLMOE_K_KDA_TCB_PAIR] = {"CLMOE_KDA_TCB_PAIR", CLMOE__KNOB_ENUM, "auto", 0, 0, 0, 0, "auto|1|2",
                              NULL, "(chunk, head) pairs per work-group of the KDA backward's chunk "
                              "kernel, where they fit (auto: by device)", "tuning", 0},
    [CLMOE_K_KDA_TCB_STAGES] = {"CLMOE_KDA_TCB_STAGES", CLMOE__KNOB_ENUM, "auto", 0, 0, 0, 0,
                                "auto|2|3", NULL, "stages of the KDA backward chunk kernel's copy "
                                "rings, where they fit (auto: by device)", "tuning", 0},
    [CLMOE_K_MLA_TC_ASYNC] = {"CLMOE_MLA_TC_ASYNC", CLMOE__KNOB_BOOL, "1", 0, 1, 0, 0, NULL, NULL,
                              "0: the MLA tile forward and backward never take their double-buffered kernels",
                              "tuning", 0},
    [CLMOE_K_MLA_TC_WGMMA] = {"CLMOE_MLA_TC_WGMMA", CLMOE__KNOB_INT_LIST, NULL, 0, 64, 1, 3,
                              "0, 1 or bk,ahead[,turns]", mla_wgmma_shape,
                              "the MLA tile forward's warp-group kernel (unset: on sm_90; 0: never; "
                              "1: on any device; a pipeline)", "tuning", 0},
    [CLMOE_K_MLA_TC_TILES_PER_LAUNCH] = {"CLMOE_MLA_TC_TILES_PER_LAUNCH", CLMOE__KNOB_INT, "0", 0, 65535,
                                         0, 0, "an integer in 0..65535", NULL, "query tiles per launch of the MLA tile "
                                         "forward (0: the most, by device)", "testing", 0},
    [CLMOE_K_MLA_TC_BWD] = {"CLMOE_MLA_TC_BWD", CLMOE__KNOB_ENUM, "auto", 0, 0, 0, 0, "auto|0|1", NULL,
                            "the MLA tile backward's double-buffered kernels and the bf16 copies of fp32 "
                            "operands (auto or 1: on; 0: the earlier kernels, fp32 operands rounded per "
                            "tile)", "tuning", 0},
    [CLMOE_K_GEMV_WIDE_ROWS] = {"CLMOE_GEMV_WIDE_ROWS", CLMOE__KNOB_INT, "32768", 1, 1073741824, 0, 0,
                                "an integer in 1..1073741824", NULL, "matrix rows of a few-token product "
                                "launch from which it takes 16 tokens per work-group instead of 4 (a large "
                                "vocabulary's head)", "testing", 0},
    [CLMOE_K_GEMV_ROWS] = {"CLMOE_GEMV_ROWS", CLMOE__KNOB_INT, "0", 0, 64, 0, 0, "an integer in 0..64", NULL,
                           "matrix rows per work-group of a few-token product launch (0: by device and "
                           "tokens; the sums do not depend on it)", "tuning", 0},
    [CLMOE_K_GEMV_TOK] = {"CLMOE_GEMV_TOK", CLMOE__KNOB_INT, "0", 0, 16, 0, 0, "an integer in 0..16", NULL,
                          "tokens per work-group of a few-token product launch at most (0: 4, or 16 from "
                          "CLMOE_GEMV_WIDE_ROWS rows; the sums do not depend on it)", "tuning", 0},
    [CLMOE_K_ARGMAX_PART] = {"CLMOE_ARGMAX_PART", CLMOE__KNOB_INT, "2048", 1, 1073741824, 0, 0,
                             "an integer in 1..1073741824", NULL, "logits per work-group of the device's greedy "
                             "pick: longer rows are split over several", "testing", 0},
    [CLMOE_K_SAMPLE_GROUPS] = {"CLMOE_SAMPLE_GROUPS", CLMOE__KNOB_INT, "0", 0, 65536, 0, 0, "an integer in 0..65536",
                               NULL, "work-groups per row of the device sampler (0: by the vocabulary and the "
                               "device's compute units; 1: one work-group per row)", "tuning", 0},
    [CLMOE_K_INFER_TILE] = {"CLMOE_INFER_TILE", CLMOE__KNOB_ENUM, "auto", 0, 0, 0, 0, "auto|0|1", NULL,
                            "inference passes of many tokens on bf16 weights (prefill, steps past the GEMV) "
                            "on the tile GEMM: auto where the device has a matrix unit, 0 never (fp32 "
                            "copies of the matrices), 1 on any device", "tuning", 0},
    [CLMOE_K_GEMV_VEC] = {"CLMOE_GEMV_VEC", CLMOE__KNOB_BOOL, "1", 0, 1, 0, 0, NULL, NULL,
                          "0: the few-token products and the MoE decode kernels read their weights element "
                          "by element even where rows start 16-byte aligned (the same sums)", "testing", 0},
    [CLMOE_K_GEMV_PASSES] = {"CLMOE_GEMV_PASSES", CLMOE__KNOB_INT, "1", 1, 4, 0, 0, "an integer in 1..4", NULL,
                             "passes of a few-token product's work-group over its rows whose weight loads are "
                             "issued together (the sums do not depend on it; 2 and 4 were slower on an H100)",
                             "tuning", 0},
};

static const char *const kind_names[] = {"bool", "int", "int list", "number", "string", "enum"};

const char *clmoe__knob_name(clmoe__knob_id id) { return knobs[id].name; }

int clmoe__knob_process(clmoe__knob_id id) { return knobs[id].process; }

int clmoe__knob_lookup(const char *name)
{
  for (int i = 0; name && i < CLMOE_K_COUNT; i++)
    if (!strcmp(knobs[i].name, name)) return i;
  return -1;
}

#define BOOL_WORDS "0 or 1 (also no/yes, off/on, false/true)"

/* Describes what a knob accepts into buf (for errors): an enum's spellings with ", "
 * between them, else the table's words. */
static void accepted(const knob_def *d, char *buf, size_t len)
{
  switch (d->kind) {
  case CLMOE__KNOB_BOOL: snprintf(buf, len, BOOL_WORDS); break;
  case CLMOE__KNOB_ENUM: {
    size_t used = 0;
    buf[0] = '\0';
    for (const char *p = d->values; *p && used + 1 < len; p++) {
      int w = snprintf(buf + used, len - used, *p == '|' ? ", " : "%c", *p);
      if (w > 0) used += (size_t)w;
    }
    break;
  }
  default: snprintf(buf, len, "%s", d->values ? d->values : "any text"); break;
  }
}

static clmoe_status bad(const knob_def *d, const char *text, const char *why)
{
  char acc[256];
  accepted(d, acc, sizeof acc);
  return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s=%s: %s; accepted: %s", d->name, text, why, acc);
}

static int parse_ll(const char *s, long long *out)
{
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (!end || end == s || *end) return 0;
  *out = v;
  return 1;
}

void clmoe__knob_value_free(clmoe__knob_value *v)
{
  free(v->text);
  memset(v, 0, sizeof *v);
}

/* Fills v from the spelling (already known to be valid for the default). */
clmoe_status clmoe__knob_parse(clmoe__knob_id id, const char *text, clmoe__knob_value *v)
{
  const knob_def *d = &knobs[id];
  memset(v, 0, sizeof *v);
  v->source = CLMOE__KNOB_DEFAULT;
  if (!text || !*text) text = d->def;
  if (!text) return CLMOE_OK; /* unset: the code's own default */
  switch (d->kind) {
  case CLMOE__KNOB_BOOL:
    if (!strcmp(text, "1") || !strcmp(text, "yes") || !strcmp(text, "on") || !strcmp(text, "true")) v->i = 1;
    else if (!strcmp(text, "0") || !strcmp(text, "no") || !strcmp(text, "off") || !strcmp(text, "false")) v->i = 0;
    else return bad(d, text, "not a switch");
    break;
  case CLMOE__KNOB_INT:
    if (!parse_ll(text, &v->i)) return bad(d, text, "not an integer");
    if (v->i < d->lo || v->i > d->hi) return bad(d, text, "out of range");
    break;
  case CLMOE__KNOB_NUMBER: {
    char *end = NULL;
    v->r = strtod(text, &end);
    if (!end || end == text || *end) return bad(d, text, "not a number");
    if (!(v->r >= (double)d->lo && v->r <= (double)d->hi)) return bad(d, text, "out of range");
    break;
  }
  case CLMOE__KNOB_INT_LIST: {
    const char *p = text;
    while (1) {
      if (v->n >= d->max_n || v->n >= CLMOE__KNOB_LIST_MAX) return bad(d, text, "too many values");
      char *end = NULL;
      long long x = strtoll(p, &end, 10);
      if (!end || end == p || (*end && *end != ',')) return bad(d, text, "not a list of integers");
      if (x < d->lo || x > d->hi) return bad(d, text, "a value out of range");
      v->list[v->n++] = x;
      if (!*end) break;
      p = end + 1;
    }
    if (v->n < d->min_n) return bad(d, text, "too few values");
    const char *why = d->check ? d->check(v) : NULL;
    if (why) return bad(d, text, why);
    break;
  }
  case CLMOE__KNOB_ENUM: {
    size_t n = strlen(text);
    int index = 0, found = -1;
    for (const char *p = d->values; *p; index++) {
      const char *bar = strchr(p, '|');
      size_t len = bar ? (size_t)(bar - p) : strlen(p);
      if (len == n && !strncmp(p, text, n)) found = index;
      p += len + (bar ? 1 : 0);
    }
    if (found < 0) return bad(d, text, "not one of the choices");
    v->i = found;
    break;
  }
  case CLMOE__KNOB_STRING: break;
  }
  v->text = strdup(text);
  if (!v->text) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", d->name);
  return CLMOE_OK;
}

clmoe_status clmoe__knob_env(clmoe__knob_id id, clmoe__knob_value *v)
{
  const char *e = getenv(knobs[id].name);
  clmoe_status st = clmoe__knob_parse(id, e, v);
  if (st == CLMOE_OK && e && *e) v->source = CLMOE__KNOB_ENV;
  return st;
}

const char *clmoe__knob_getenv(clmoe__knob_id id, clmoe_status *st)
{
  const char *e = getenv(knobs[id].name);
  clmoe__knob_value v;
  *st = clmoe__knob_parse(id, e, &v);
  clmoe__knob_value_free(&v);
  return *st == CLMOE_OK && e && *e ? e : NULL;
}

clmoe_status clmoe__knobs_read(clmoe__knobs *k)
{
  memset(k, 0, sizeof *k);
  for (int i = 0; i < CLMOE_K_COUNT; i++) {
    clmoe_status st = clmoe__knob_env((clmoe__knob_id)i, &k->env[i]);
    if (st != CLMOE_OK) {
      clmoe__knobs_free(k);
      return st;
    }
  }
  return CLMOE_OK;
}

void clmoe__knobs_free(clmoe__knobs *k)
{
  for (int i = 0; i < CLMOE_K_COUNT; i++) {
    clmoe__knob_value_free(&k->env[i]);
    clmoe__knob_value_free(&k->set[i]);
  }
}

const clmoe__knob_value *clmoe__knob(const clmoe_ctx *ctx, clmoe__knob_id id)
{
  const clmoe__knobs *k = &ctx->knobs;
  return k->set[id].source == CLMOE__KNOB_SET ? &k->set[id] : &k->env[id];
}

int clmoe__knob_is_set(const clmoe_ctx *ctx, clmoe__knob_id id)
{
  if ((int)id < 0 || id >= CLMOE_K_COUNT) return 0; /* (clmoe__knob_lookup of no knob) */
  const clmoe__knob_value *v = clmoe__knob(ctx, id);
  return v->source != CLMOE__KNOB_DEFAULT && v->text; /* (an override "" is the default) */
}

long long clmoe__knob_int(const clmoe_ctx *ctx, clmoe__knob_id id) { return clmoe__knob(ctx, id)->i; }

const char *clmoe__knob_text(const clmoe_ctx *ctx, clmoe__knob_id id) { return clmoe__knob(ctx, id)->text; }

/* ---- the override and the table for programs (include/clmoe/paths.h) ------------------- */

clmoe_status clmoe_ctx_knob(const clmoe_ctx *ctx, const char *name, char *buf, size_t len,
                            clmoe_knob_source *source)
{
  const int id = clmoe__knob_lookup(name);
  if (!ctx || id < 0)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_ctx_knob: %s", !ctx ? "ctx is NULL" : "no such knob");
  const clmoe__knob_value *v = clmoe__knob(ctx, (clmoe__knob_id)id);
  if (buf && len) snprintf(buf, len, "%s", v->text ? v->text : "");
  if (source) *source = (clmoe_knob_source)v->source;
  return CLMOE_OK;
}

int clmoe_knob_count(void) { return CLMOE_K_COUNT; }

clmoe_status clmoe_knob_describe(int index, clmoe_knob_info *info)
{
  if (index < 0 || index >= CLMOE_K_COUNT || !info)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_knob_describe: no knob %d (there are %d)", index,
                        CLMOE_K_COUNT);
  const knob_def *d = &knobs[index];
  *info = (clmoe_knob_info){d->name, kind_names[d->kind], d->def, d->kind == CLMOE__KNOB_BOOL ? BOOL_WORDS : d->values,
                            d->doc, d->scope, d->process};
  return CLMOE_OK;
}

clmoe_status clmoe_knob_check(const char *name, const char *value)
{
  const int id = clmoe__knob_lookup(name);
  if (id < 0) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "no knob named %s", name ? name : "(null)");
  clmoe__knob_value v;
  CLMOE_TRY(clmoe__knob_parse((clmoe__knob_id)id, value, &v));
  clmoe__knob_value_free(&v);
  return CLMOE_OK;
}
