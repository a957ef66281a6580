/* Private to the safetensors sources (safetensors_common.c at the bottom, the header parser
 * safetensors_json.c and the checksums safetensors_checksum.c above it, then the reader
 * safetensors.c and the writer safetensors_write.c with safetensors_stale.c): the parsed file and the helpers they
 * share. */
#ifndef CLMOE_SAFETENSORS_INTERNAL_H
#define CLMOE_SAFETENSORS_INTERNAL_H

#include "runtime/internal.h"
#include "clmoe/safetensors.h"

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
  uint32_t data_crc;   /* CRC-32C of the data bytes, as recorded (file->checksummed) */
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
  int checksummed;    /* 1: the header's checksums held; each tensor's data is checked as read */
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
/* ---- safetensors_checksum.c ------------------------------------------------------------ */
/* CRC-32C of a tensor's entry (name, dtype, shape, data_offsets) and of the metadata entries
 * kv [2 n] (key, value) in order, all but CLMOE_ST_CRC_METADATA. */
uint32_t clmoe__io_st_entry_crc(const char *name, clmoe_st_dtype dtype, int ndim, const int64_t *shape,
                                uint64_t begin, uint64_t end);
uint32_t clmoe__io_st_meta_crc(char *const *kv, int n);
/* After the entries are checked: verifies the metadata's and every entry's checksum when
 * the file has them (sets f->checksummed and each data_crc); a file without is fine. */
clmoe_status clmoe__io_st_verify_header(clmoe_st_file *f);
/* The data of e, read whole, had CRC-32C crc: an error naming the tensor when it is not the
 * recorded one (nothing to check in a file without checksums). */
clmoe_status clmoe__io_st_check_data_crc(const clmoe_st_file *f, const st_entry *e, uint32_t crc);

/* ---- safetensors_stale.c ---------------------------------------------------------------- */
/* Removes the temporary files "<path>.tmp.<pid>" of earlier saves of path that were killed
 * (pid not running, or the file unchanged for hours); best effort, returns how many. */
int clmoe__io_st_remove_stale(const char *path);

#endif
