/* safetensors writer: tensors and metadata gathered on the host, their checksums recorded
 * (safetensors_checksum.c), then written to a temporary file, flushed, fsynced and renamed
 * over the destination (stale temporary files of killed saves removed first,
 * safetensors_stale.c). */
#include "safetensors_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "clmoe/safetensors.h"

typedef struct st_item {
  char *name;
  clmoe_st_dtype dtype;
  int ndim;
  int64_t shape[CLMOE_ST_MAX_DIMS];
  unsigned char *data; /* little-endian */
  uint64_t bytes, offset;
  uint32_t data_crc;   /* of data, taken when added */
} st_item;

struct clmoe_st_writer {
  char *path;
  st_item *t;
  int n, cap;
  char **meta; /* [2 nmeta]: key, value */
  int nmeta, cap_meta;
};

clmoe_status clmoe_st_writer_create(const char *path, clmoe_st_writer **writer)
{
  if (!writer || !path || !path[0])
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_st_writer_create: no path given");
  clmoe_st_writer *w = calloc(1, sizeof *w);
  if (!w || !(w->path = strdup(path))) {
    free(w);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
  }
  *writer = w;
  return CLMOE_OK;
}

void clmoe_st_writer_discard(clmoe_st_writer *w)
{
  if (!w) return;
  for (int i = 0; i < w->n; i++) free(w->t[i].name), free(w->t[i].data);
  for (int i = 0; i < 2 * w->nmeta; i++) free(w->meta[i]);
  free(w->t);
  free(w->meta);
  free(w->path);
  free(w);
}

/* Checks a new entry and reserves its slot (not yet counted). */
static clmoe_status writer_slot(clmoe_st_writer *w, const char *name, clmoe_st_dtype dtype, int ndim,
                                const int64_t *shape, st_item **slot)
{
  if (!name || !name[0] || !clmoe__io_st_utf8_valid(name) || !strcmp(name, "__metadata__"))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: tensor name '%.200s' is empty, not UTF-8 or reserved",
                        w->path, name ? name : "(null)");
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->t[i].name, name))
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: tensor '%.200s' was already added", w->path, name);
  if ((unsigned)dtype >= CLMOE_ST_DTYPE_COUNT || ndim < 0 || ndim > CLMOE_ST_MAX_DIMS || (ndim && !shape))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: tensor '%.200s': bad dtype %d or %d dimensions",
                        w->path, name, (int)dtype, ndim);
  uint64_t bytes = clmoe_st_dtype_size(dtype);
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0 || (shape[d] && bytes > (uint64_t)INT64_MAX / (uint64_t)shape[d]))
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: tensor '%.200s': dimension %d is %lld",
                          w->path, name, d, (long long)shape[d]);
    bytes *= (uint64_t)shape[d];
  }
  if (bytes > SIZE_MAX)
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: tensor '%.200s' is too large", w->path, name);
  if (w->n == w->cap) {
    int cap = w->cap ? 2 * w->cap : 16;
    st_item *t = realloc(w->t, (size_t)cap * sizeof *t);
    if (!t) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", w->path);
    w->t = t, w->cap = cap;
  }
  st_item *it = &w->t[w->n];
  memset(it, 0, sizeof *it);
  it->dtype = dtype, it->ndim = ndim, it->bytes = bytes;
  if (ndim) memcpy(it->shape, shape, (size_t)ndim * sizeof *shape);
  it->name = strdup(name);
  it->data = malloc(bytes ? (size_t)bytes : 1);
  if (!it->name || !it->data) {
    free(it->name), free(it->data);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory for tensor '%.200s'", w->path, name);
  }
  *slot = it;
  return CLMOE_OK;
}

/* Puts the slot's host-order data into little-endian order. */
static void to_little_endian(st_item *it)
{
  size_t es = clmoe_st_dtype_size(it->dtype);
  if (clmoe__io_st_host_little_endian() || es == 1) return;
  for (size_t i = 0; i < it->bytes; i += es)
    for (size_t k = 0; k < es / 2; k++) {
      unsigned char c = it->data[i + k];
      it->data[i + k] = it->data[i + es - 1 - k], it->data[i + es - 1 - k] = c;
    }
}

clmoe_status clmoe_st_writer_add_host(clmoe_st_writer *w, const char *name, clmoe_st_dtype dtype, int ndim,
                                      const int64_t *shape, const void *data)
{
  st_item *it;
  CLMOE_TRY(writer_slot(w, name, dtype, ndim, shape, &it));
  if (it->bytes && !data) {
    free(it->name), free(it->data);
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: tensor '%.200s': no data", w->path, name);
  }
  if (it->bytes) memcpy(it->data, data, (size_t)it->bytes);
  to_little_endian(it);
  it->data_crc = clmoe__io_crc32c(0, it->data, (size_t)it->bytes);
  w->n++;
  return CLMOE_OK;
}

clmoe_status clmoe_st_writer_add(clmoe_st_writer *w, const char *name, const clmoe_tensor *t)
{
  if (!t || (t->dtype != CLMOE_F32 && t->dtype != CLMOE_BF16 && t->dtype != CLMOE_I32) ||
      (clmoe_tensor_numel(t) > 0 && (!t->ctx || !t->buf)))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: tensor '%.200s' is NULL, has no buffer or an unknown dtype",
                        w->path, name ? name : "");
  clmoe_st_dtype dtype = t->dtype == CLMOE_F32 ? CLMOE_ST_F32 : t->dtype == CLMOE_BF16 ? CLMOE_ST_BF16 : CLMOE_ST_I32;
  st_item *it;
  CLMOE_TRY(writer_slot(w, name, dtype, t->ndim, t->shape, &it));
  clmoe_status st = clmoe_tensor_read(t, it->data, (size_t)it->bytes);
  if (st != CLMOE_OK) {
    clmoe__append_error(" (writing tensor '%.200s' to %s)", name, w->path);
    free(it->name), free(it->data);
    return st;
  }
  to_little_endian(it);
  it->data_crc = clmoe__io_crc32c(0, it->data, (size_t)it->bytes);
  w->n++;
  return CLMOE_OK;
}

/* Sets key (any, the checksums' too) to value. */
static clmoe_status set_metadata(clmoe_st_writer *w, const char *key, const char *value)
{
  char *v = strdup(value);
  if (!v) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", w->path);
  for (int i = 0; i < w->nmeta; i++)
    if (!strcmp(w->meta[2 * i], key)) {
      free(w->meta[2 * i + 1]);
      w->meta[2 * i + 1] = v;
      return CLMOE_OK;
    }
  char *k = strdup(key);
  if (k && w->nmeta == w->cap_meta) {
    int cap = w->cap_meta ? 2 * w->cap_meta : 8;
    char **m = realloc(w->meta, 2 * (size_t)cap * sizeof *m);
    if (m) w->meta = m, w->cap_meta = cap;
  }
  if (!k || w->nmeta == w->cap_meta) {
    free(k), free(v);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", w->path);
  }
  w->meta[2 * w->nmeta] = k, w->meta[2 * w->nmeta + 1] = v;
  w->nmeta++;
  return CLMOE_OK;
}

clmoe_status clmoe_st_writer_metadata(clmoe_st_writer *w, const char *key, const char *value)
{
  if (!key || !value || !clmoe__io_st_utf8_valid(key) || !clmoe__io_st_utf8_valid(value))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: metadata '%.200s' is missing or not UTF-8", w->path,
                        key ? key : "(null)");
  if (!strcmp(key, CLMOE_ST_CRC_TENSORS) || !strcmp(key, CLMOE_ST_CRC_METADATA))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: metadata '%s' is reserved for the file's checksums",
                        w->path, key);
  return set_metadata(w, key, value);
}

/* A growing string for the header; `failed` is set when an allocation failed. */
typedef struct sbuf {
  char *p;
  size_t n, cap;
  int failed;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
  if (b->failed) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->failed = 1;
      return;
    }
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_json(sbuf *b, const char *s)
{
  sb_add(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') snprintf(esc, sizeof esc, "\\%c", c), sb_str(b, esc);
    else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c), sb_str(b, esc);
    else sb_add(b, s, 1);
  }
  sb_add(b, "\"", 1);
}

/* Data layout: largest element size first (stable), so each tensor is aligned to its
 * element size. */
static void lay_out(clmoe_st_writer *w)
{
  uint64_t off = 0;
  for (size_t size = 8; size >= 1; size /= 2)
    for (int i = 0; i < w->n; i++)
      if (clmoe_st_dtype_size(w->t[i].dtype) == size) w->t[i].offset = off, off += w->t[i].bytes;
}

/* The checksum entries (safetensors_checksum.c), after the layout: each tensor's entry and
 * data in header order, then the metadata's (the list included), last. */
static clmoe_status record_checksums(clmoe_st_writer *w)
{
  char *list = malloc((size_t)w->n * 18 + 1), hex[16];
  if (!list) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory for the checksums", w->path);
  list[0] = '\0';
  for (int i = 0; i < w->n; i++) {
    const st_item *it = &w->t[i];
    uint32_t e = clmoe__io_st_entry_crc(it->name, it->dtype, it->ndim, it->shape, it->offset, it->offset + it->bytes);
    snprintf(list + 18 * (size_t)i, 18, "%08x:%08x", e, it->data_crc);
    if (i + 1 < w->n) list[18 * (size_t)i + 17] = ',';
  }
  clmoe_status st = set_metadata(w, CLMOE_ST_CRC_TENSORS, list);
  free(list);
  CLMOE_TRY(st);
  snprintf(hex, sizeof hex, "%08x", clmoe__io_st_meta_crc(w->meta, w->nmeta));
  return set_metadata(w, CLMOE_ST_CRC_METADATA, hex);
}

/* The JSON header of the laid-out tensors, padded to 8 bytes. */
static void build_header(clmoe_st_writer *w, sbuf *b)
{
  sb_str(b, "{");
  if (w->nmeta) {
    sb_str(b, "\"__metadata__\":{");
    for (int i = 0; i < w->nmeta; i++) {
      if (i) sb_str(b, ",");
      sb_json(b, w->meta[2 * i]);
      sb_str(b, ":");
      sb_json(b, w->meta[2 * i + 1]);
    }
    sb_str(b, "}");
  }
  for (int i = 0; i < w->n; i++) {
    const st_item *it = &w->t[i];
    char num[64];
    if (i || w->nmeta) sb_str(b, ",");
    sb_json(b, it->name);
    sb_str(b, ":{\"dtype\":\"");
    sb_str(b, clmoe_st_dtype_name(it->dtype));
    sb_str(b, "\",\"shape\":[");
    for (int d = 0; d < it->ndim; d++)
      snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)it->shape[d]), sb_str(b, num);
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)it->offset,
             (unsigned long long)(it->offset + it->bytes));
    sb_str(b, num);
  }
  sb_str(b, "}");
  while (!b->failed && b->n % 8) sb_str(b, " ");
}

/* Makes the rename itself durable (the directory entry); best effort: some file systems
 * refuse fsync on directories, and the data is already safe. */
static void sync_directory(const char *path)
{
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
  if (!dir) return;
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

static clmoe_status write_all(clmoe_st_writer *w, FILE *fp, const char *tmp, const sbuf *hdr)
{
  unsigned char len8[8];
  errno = 0;
  for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)hdr->n >> (8 * k));
  int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(hdr->p, 1, hdr->n, fp) == hdr->n;
  for (size_t size = 8; ok && size >= 1; size /= 2)
    for (int i = 0; ok && i < w->n; i++)
      if (clmoe_st_dtype_size(w->t[i].dtype) == size)
        ok = fwrite(w->t[i].data, 1, (size_t)w->t[i].bytes, fp) == (size_t)w->t[i].bytes;
  /* fsync before the rename: after a crash the destination is the old file or the
   * complete new one, never a truncated one. */
  ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
  int err = errno;
  ok = fclose(fp) == 0 && ok;
  if (!ok) return clmoe__error(CLMOE_ERR_IO, "%s: writing %s failed: %s", w->path, tmp, strerror(err ? err : errno));
  return CLMOE_OK;
}

clmoe_status clmoe_st_writer_finish(clmoe_st_writer *w)
{
  if (!w) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_st_writer_finish: NULL writer");
  sbuf hdr = {0};
  char *tmp = NULL;
  lay_out(w);
  clmoe_status st = record_checksums(w);
  if (st != CLMOE_OK) goto done;
  build_header(w, &hdr);
  tmp = malloc(strlen(w->path) + 32);
  if (hdr.failed || !tmp) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", w->path);
    goto done;
  }
  (void)clmoe__io_st_remove_stale(w->path); /* earlier saves' leftovers, killed before their rename */
  sprintf(tmp, "%s.tmp.%ld", w->path, (long)getpid());
  errno = 0;
  FILE *fp = fopen(tmp, "wb");
  if (!fp) {
    st = clmoe__error(CLMOE_ERR_IO, "%s: cannot create %s: %s", w->path, tmp, strerror(errno));
    goto done;
  }
  st = write_all(w, fp, tmp, &hdr);
  if (st == CLMOE_OK && rename(tmp, w->path) != 0)
    st = clmoe__error(CLMOE_ERR_IO, "%s: cannot rename %s over it: %s", w->path, tmp, strerror(errno));
  if (st != CLMOE_OK) unlink(tmp);
  else sync_directory(w->path);
done:
  free(tmp);
  free(hdr.p);
  clmoe_st_writer_discard(w);
  return st;
}

