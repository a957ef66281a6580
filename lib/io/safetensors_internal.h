/* Private to the safetensors sources (safetensors_common.c at the bottom, the header parser
 * safetensors_json.c above it, then the reader safetensors.c and the writer
 * safetensors_write.c): the parsed file and the helpers they share. */
#ifndef CLMOE_SAFETENSORS_INTERNAL_H
#define CLMOE_SAFETENSORS_INTERNAL_H

#include "runtime/internal.h"

/* Name and element size of every dtype, indexed by clmoe_st_dtype (safetensors_common.c). */
typedef struct st_dtype_info {
  const char *name;
  size_t size;
} st_dtype_info;
extern const st_dtype_info clmoe__io_st_dtypes[CLMOE_ST_DTYPE_COUNT];

/* ---- the file's entries --------------------------------------------------------------- */
typedef struct st_entry {
  char *name;
  clmoe_st_dtype dtype;
  int ndim;
  int64_t *shape; /* [ndim] */
  int64_t numel;
  uint64_t begin, end; /* data_offsets */
} st_entry;

struct clmoe_st_file {
  char *path;
  int fd;
  uint64_t data_start, data_bytes; /* the data region: file bytes [data_start, +data_bytes) */
  st_entry *t;
  int n, cap;
  st_entry **by_name; /* [n] sorted by name, for lookups */
  char **meta;        /* [2 nmeta]: key, value */
  int nmeta, cap_meta;
};

/* ---- safetensors_common.c ------------------------------------------------------------- */
/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 when there is none. */
size_t clmoe__io_st_utf8_len(const unsigned char *s, size_t n);
/* 1 when s is valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF). */
int clmoe__io_st_utf8_valid(const char *s);
int clmoe__io_st_host_little_endian(void);
/* ---- safetensors_json.c ---------------------------------------------------------------- */
/* qsort/bsearch order of st_entry pointers by name. */
int clmoe__io_st_by_name(const void *a, const void *b);
/* "[2, 3] F32" of an entry. */
void clmoe__io_st_describe_shape(const st_entry *e, char *buf, size_t len);
/* Parses the JSON header h [n] into f's entries and metadata, then validates every entry
 * (dtypes, shapes, offsets inside the data region and not overlapping). */
clmoe_status clmoe__io_st_parse_header(clmoe_st_file *f, const unsigned char *h, size_t n);
clmoe_status clmoe__io_st_check_entries(clmoe_st_file *f);

#endif
