/* clmoe-xcheck's parts: running the checks (clmoe_xcheck.c), comparing two devices' outputs
 * and writing them as JSON (xcheck_pairs.c), reading JSON (xcheck_json.c), and the report
 * files' commands --compare and --matrix (xcheck_report.c). */
#ifndef CLMOE_XCHECK_H
#define CLMOE_XCHECK_H

#include <stddef.h>
#include <stdio.h>

#include "check/conformance.h"

/* ---- comparing two devices' outputs of one check (xcheck_pairs.c) ----
 * The measure mirrors the check's own, with device b in the place of the reference:
 *     diff_i = |a_i - b_i| / den_i,   den_i = |ref_i| + rms(ref) for ck_compare
 * (the check's own denominators where it has another measure: ck_capture_scaled, _den)
 * (den_i is captured with the outputs; of two captures the smaller is used - they are the
 * same when both ran the reference on the same inputs). Equal values differ by 0. Where the
 * reference is finite, a NaN or Inf in a or b that the other does not share counts as an
 * infinite difference, and so does a NaN in both; where the reference is NaN, both NaN is
 * equal; where it is not finite, any other mismatch is infinite. */
typedef struct xc_diff {
  int compared;    /* 1: the outputs matched up and were compared; 0: `where` says why not */
  double max;      /* the largest diff_i over every output (0 when identical) */
  char where[200]; /* "name[i]: a vs b" of the largest, or why nothing was compared */
} xc_diff;

/* Compares the outputs of one check on two devices (na and nb outputs, matched in order:
 * the names and counts must agree). */
void xc_pair_diff(const clmoe_check_output *a, int na, const clmoe_check_output *b, int nb,
                  xc_diff *d);
/* A pair of devices that both passed a check of tolerance 0 whose outputs are not captured
 * (integers, e.g. sorted keys): each equals the reference, so they equal each other. */
void xc_pair_exact(xc_diff *d);
/* The verdict of a pair: the difference against factor x the check's tolerance. */
int xc_pair_within(const xc_diff *d, double tolerance, double factor);
/* "same" (difference 0), "ok" (within), "DIFFER" (beyond), "-" (not compared). */
const char *xc_pair_verdict(const xc_diff *d, double tolerance, double factor);

/* ---- outputs in JSON (xcheck_pairs.c) ----
 * `"outputs": [{"name": N, "n": COUNT, "got": B64, "den": B64}, ...]` (B64: base64 of the
 * COUNT little-endian float32 values), plus `"outputs_dropped": K` when the capture's
 * bound left K out. Written after a preceding field (starts with ", "). */
void xc_write_outputs(FILE *f, const clmoe_check_capture *cap);
/* Decodes base64 text of len characters into exactly `bytes` bytes at out. 0 when the
 * text is not base64 or decodes to another length. */
int xc_base64_decode(const char *text, size_t len, unsigned char *out, size_t bytes);

/* ---- a JSON document as a tree (xcheck_json.c) ---- */
typedef enum { XJ_NULL, XJ_BOOL, XJ_NUMBER, XJ_STRING, XJ_ARRAY, XJ_OBJECT } xj_type;
typedef struct xj_value {
  xj_type type;
  int line;              /* where the value starts in the text, for messages */
  int boolean;           /* XJ_BOOL */
  double number;         /* XJ_NUMBER */
  char *string;          /* XJ_STRING: NUL-terminated (len bytes before the NUL) */
  size_t len;
  struct xj_value *items; /* XJ_ARRAY: the elements; XJ_OBJECT: the values */
  char **keys;            /* XJ_OBJECT: the keys, [count] */
  size_t count;
} xj_value;
/* Parses len bytes of text into *out (free with xj_free). 0 on bad JSON, with err
 * holding "line L: what (near 'text')". */
int xj_parse(const char *text, size_t len, xj_value *out, char *err, size_t errlen);
void xj_free(xj_value *v);
/* The member key of an object (NULL when absent or obj is not an object). */
const xj_value *xj_get(const xj_value *obj, const char *key);
/* The member key when it is a string, else NULL. */
const char *xj_string(const xj_value *obj, const char *key);

/* ---- report files (xcheck_report.c) ---- */
/* --compare: the pairwise differences between the devices of two files; exit status. */
int xc_compare_files(const char *a, const char *b, double factor, int quiet);
/* --matrix: a Markdown conformance matrix of the files on stdout; exit status. */
int xc_matrix_files(int nfiles, const char *const *files);

#endif
