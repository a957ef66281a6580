/* safetensors files: opening and validating (the header parser is safetensors_json.c, the
 * checksums safetensors_checksum.c), lazy loading with dtype conversion and each tensor's
 * checksum verified as it is read; the writer is safetensors_write.c, the dtype table and
 * UTF-8 checks safetensors_common.c. Every message names the file. */
#include "safetensors_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "clmoe/safetensors.h"

static int st_is_float(clmoe_st_dtype d)
{
  return d == CLMOE_ST_F8_E4M3 || d == CLMOE_ST_F8_E5M2 || d == CLMOE_ST_F16 ||
         d == CLMOE_ST_BF16 || d == CLMOE_ST_F32 || d == CLMOE_ST_F64;
}

/* ---- opening ------------------------------------------------------------------------- */
/* Reads exactly len bytes at file offset off; a short read means the file shrank. */
static clmoe_status read_at(const clmoe_st_file *f, uint64_t off, void *buf, size_t len)
{
  unsigned char *b = buf;
  while (len > 0) {
    ssize_t got = pread(f->fd, b, len, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return clmoe__error(CLMOE_ERR_IO, "%s: read failed: %s", f->path, strerror(errno));
    if (got == 0)
      return clmoe__error(CLMOE_ERR_IO, "%s: the file ends at byte %llu, before the data it lists",
                          f->path, (unsigned long long)off);
    b += got, off += (uint64_t)got, len -= (size_t)got;
  }
  return CLMOE_OK;
}

clmoe_status clmoe_st_open(const char *path, clmoe_st_file **file)
{
  if (!file || !path) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_st_open: NULL argument");
  *file = NULL;
  clmoe_st_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
  }
  struct stat sb;
  f->fd = open(path, O_RDONLY);
  if (f->fd < 0 || fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    clmoe_status st = clmoe__error(CLMOE_ERR_IO, "%s: cannot open: %s", path,
                                   f->fd < 0 ? strerror(errno) : "not a regular file");
    clmoe_st_close(f);
    return st;
  }
  uint64_t size = (uint64_t)sb.st_size, n = 0;
  unsigned char len8[8], *header = NULL;
  clmoe_status st = CLMOE_OK;
  if (size < 8) {
    st = clmoe__error(CLMOE_ERR_FORMAT, "%s: the file has %llu bytes, too few for the 8-byte header "
                                        "length (not a safetensors file?)", path, (unsigned long long)size);
    goto fail;
  }
  CLMOE_TRY_GOTO(st, read_at(f, 0, len8, 8), fail);
  for (int k = 7; k >= 0; k--) n = n << 8 | len8[k];
  if (n > CLMOE_ST_MAX_HEADER || n > size - 8 || n < 2) {
    st = clmoe__error(CLMOE_ERR_FORMAT, "%s: header length %llu is %s (not a safetensors file, or "
                                        "a truncated one?)", path, (unsigned long long)n,
                      n < 2 ? "too small" : n > size - 8 ? "larger than the rest of the file"
                                                         : "above the 100 MB limit");
    goto fail;
  }
  if (!(header = malloc((size_t)n))) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory for the header", path);
    goto fail;
  }
  CLMOE_TRY_GOTO(st, read_at(f, 8, header, (size_t)n), fail);
  f->data_start = 8 + n;
  f->data_bytes = size - 8 - n;
  CLMOE_TRY_GOTO(st, clmoe__io_st_parse_header(f, header, (size_t)n), fail);
  CLMOE_TRY_GOTO(st, clmoe__io_st_check_entries(f), fail);
  CLMOE_TRY_GOTO(st, clmoe__io_st_verify_header(f), fail);
  free(header);
  *file = f;
  return CLMOE_OK;
fail:
  free(header);
  clmoe_st_close(f);
  return st;
}

void clmoe_st_close(clmoe_st_file *f)
{
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  for (int i = 0; i < f->n; i++) free(f->t[i].name), free(f->t[i].shape);
  for (int i = 0; i < 2 * f->nmeta; i++) free(f->meta[i]);
  free(f->t);
  free(f->by_name);
  free(f->meta);
  free(f->path);
  free(f);
}

const char *clmoe_st_path(const clmoe_st_file *f) { return f->path; }
int clmoe_st_count(const clmoe_st_file *f) { return f->n; }

static void fill_info(const st_entry *e, clmoe_st_info *info)
{
  info->name = e->name;
  info->dtype = e->dtype;
  info->ndim = e->ndim;
  info->shape = e->shape;
  info->numel = e->numel;
  info->offset = e->begin;
  info->bytes = e->end - e->begin;
}

void clmoe_st_info_at(const clmoe_st_file *f, int index, clmoe_st_info *info)
{
  static const st_entry none = {.name = ""};
  fill_info(index >= 0 && index < f->n ? &f->t[index] : &none, info);
}

static st_entry *find(const clmoe_st_file *f, const char *name)
{
  st_entry key = {.name = (char *)name}, *pk = &key;
  st_entry **hit =
      f->n ? bsearch(&pk, f->by_name, (size_t)f->n, sizeof pk, clmoe__io_st_by_name) : NULL;
  return hit ? *hit : NULL;
}

static clmoe_status find_or_fail(const clmoe_st_file *f, const char *name, st_entry **e)
{
  if (!name || !(*e = find(f, name)))
    return clmoe__error(CLMOE_ERR_FORMAT, "%s has no tensor '%.200s'", f->path, name ? name : "(null)");
  return CLMOE_OK;
}

int clmoe_st_has(const clmoe_st_file *f, const char *name) { return name && find(f, name) != NULL; }

clmoe_status clmoe_st_info_of(const clmoe_st_file *f, const char *name, clmoe_st_info *info)
{
  st_entry *e;
  CLMOE_TRY(find_or_fail(f, name, &e));
  fill_info(e, info);
  return CLMOE_OK;
}

const char *clmoe_st_metadata(const clmoe_st_file *f, const char *key)
{
  for (int i = 0; key && i < f->nmeta; i++)
    if (!strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
  return NULL;
}

int clmoe_st_metadata_count(const clmoe_st_file *f) { return f->nmeta; }

void clmoe_st_metadata_at(const clmoe_st_file *f, int index, const char **key, const char **value)
{
  int ok = index >= 0 && index < f->nmeta;
  *key = ok ? f->meta[2 * index] : NULL;
  *value = ok ? f->meta[2 * index + 1] : NULL;
}

/* The next len bytes of tensor e's data, at off within it, into buf; *crc continues the
 * checksum of the bytes read before (they come in order). */
static clmoe_status read_data(const clmoe_st_file *f, const st_entry *e, uint64_t off, void *buf, size_t len,
                              uint32_t *crc)
{
  CLMOE_TRY(read_at(f, f->data_start + e->begin + off, buf, len));
  if (f->checksummed) *crc = clmoe__io_crc32c(*crc, buf, len);
  return CLMOE_OK;
}

/* ---- element conversion ---------------------------------------------------------------- */
static uint64_t le(const unsigned char *p, size_t size)
{
  uint64_t v = 0;
  for (size_t k = size; k-- > 0;) v = v << 8 | p[k];
  return v;
}

static float f16_to_f32(unsigned h)
{
  int e = (int)(h >> 10 & 31);
  unsigned m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
  return h & 0x8000 ? -v : v;
}

static float f8e4m3_to_f32(unsigned b)
{
  int e = (int)(b >> 3 & 15);
  unsigned m = b & 7;
  float v = e == 15 && m == 7 ? NAN : e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(m | 8), e - 10);
  return b & 0x80 ? -v : v;
}

/* An element as a double, and for integer types also exactly in *iv (*fits is 0 for a
 * U64 above INT64_MAX). */
static double elem(const unsigned char *p, clmoe_st_dtype d, int64_t *iv, int *fits)
{
  uint64_t u = le(p, clmoe__io_st_dtypes[d].size);
  union { uint32_t u; float f; } w32;
  union { uint64_t u; double f; } w64;
  *fits = 1;
  switch (d) {
  case CLMOE_ST_F8_E4M3: return f8e4m3_to_f32((unsigned)u);
  case CLMOE_ST_F8_E5M2: return f16_to_f32((unsigned)u << 8);
  case CLMOE_ST_F16: return f16_to_f32((unsigned)u);
  case CLMOE_ST_BF16: w32.u = (uint32_t)u << 16; return w32.f;
  case CLMOE_ST_F32: w32.u = (uint32_t)u; return w32.f;
  case CLMOE_ST_F64: w64.u = u; return w64.f;
  case CLMOE_ST_I8: *iv = (int8_t)u; break;
  case CLMOE_ST_I16: *iv = (int16_t)u; break;
  case CLMOE_ST_I32: *iv = (int32_t)u; break;
  case CLMOE_ST_I64: *iv = (int64_t)u; break;
  case CLMOE_ST_U64: *iv = (int64_t)u, *fits = u <= INT64_MAX; return (double)u;
  default: *iv = (int64_t)u; break; /* BOOL, U8, U16, U32 */
  }
  return (double)*iv;
}

/* Converts n elements at src (file dtype sd, little-endian) into dst (dtype dd). Returns
 * the index of the first integer that does not fit in i32, or -1. */
static int64_t convert(const unsigned char *src, clmoe_st_dtype sd, size_t n, clmoe_dtype dd, void *dst,
                       int64_t *bad_value)
{
  size_t es = clmoe__io_st_dtypes[sd].size;
  for (size_t i = 0; i < n; i++) {
    int64_t iv = 0;
    int fits;
    double v = elem(src + i * es, sd, &iv, &fits);
    if (dd == CLMOE_F32) ((float *)dst)[i] = (float)v;
    else if (dd == CLMOE_BF16) ((uint16_t *)dst)[i] = clmoe_bf16_from_f32((float)v);
    else if (!fits || iv < INT32_MIN || iv > INT32_MAX) return *bad_value = iv, (int64_t)i;
    else ((int32_t *)dst)[i] = (int32_t)iv;
  }
  return -1;
}


static int convertible(clmoe_st_dtype sd, clmoe_dtype dd)
{
  return dd == CLMOE_F32 || (dd == CLMOE_BF16) == st_is_float(sd);
}

/* Streams tensor e into a device tensor (dst_t) or host memory (dst_h) of dtype dd, a few
 * MB at a time so that large tensors need no host copy of their own size. */
static clmoe_status stream(clmoe_st_file *f, const st_entry *e, clmoe_dtype dd, clmoe_tensor *dst_t,
                           void *dst_h)
{
  if (!convertible(e->dtype, dd))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: tensor '%.200s' is %s and cannot be converted to %s",
                        f->path, e->name, clmoe__io_st_dtypes[e->dtype].name, clmoe_dtype_name(dd));
  size_t es = clmoe__io_st_dtypes[e->dtype].size, os = clmoe_dtype_size(dd);
  int same = clmoe__io_st_host_little_endian() && ((e->dtype == CLMOE_ST_F32 && dd == CLMOE_F32) ||
                                      (e->dtype == CLMOE_ST_BF16 && dd == CLMOE_BF16) ||
                                      (e->dtype == CLMOE_ST_I32 && dd == CLMOE_I32));
  size_t chunk = ((size_t)4 << 20) / es, total = (size_t)e->numel;
  if (chunk > total) chunk = total ? total : 1;
  unsigned char *in = malloc(chunk * es), *out = dst_t && !same ? malloc(chunk * os) : NULL;
  clmoe_status st = CLMOE_OK;
  uint32_t crc = 0;
  if (!in || (dst_t && !same && !out))
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", f->path);
  for (size_t start = 0; start < total && st == CLMOE_OK; start += chunk) {
    size_t cnt = total - start < chunk ? total - start : chunk;
    unsigned char *host = dst_h ? (unsigned char *)dst_h + start * os : out;
    CLMOE_TRY_GOTO(st, read_data(f, e, start * es, same && !dst_t ? host : in, cnt * es, &crc), done);
    if (same && !dst_t) continue;
    if (same) host = in;
    int64_t bad = 0, at = same ? -1 : convert(in, e->dtype, cnt, dd, host, &bad);
    if (at >= 0) {
      st = clmoe__error(CLMOE_ERR_FORMAT, "%s: tensor '%.200s': element %llu = %lld does not fit in i32",
                        f->path, e->name, (unsigned long long)(start + (size_t)at), (long long)bad);
    } else if (dst_t) {
      clmoe_tensor v;
      int64_t n1 = (int64_t)cnt;
      CLMOE_TRY_GOTO(st, clmoe_tensor_view(dst_t, &v, 1, &n1, (int64_t)start), done);
      CLMOE_TRY_GOTO(st, clmoe_tensor_write(&v, host, cnt * os), done);
    }
  }
  if (st == CLMOE_OK) st = clmoe__io_st_check_data_crc(f, e, crc);
done:
  if (st != CLMOE_OK && st != CLMOE_ERR_FORMAT) clmoe__append_error(" (loading tensor '%.200s' of %s)", e->name, f->path);
  free(in);
  free(out);
  return st;
}

clmoe_status clmoe_st_load_into(clmoe_st_file *f, const char *name, clmoe_tensor *dst)
{
  st_entry *e;
  CLMOE_TRY(find_or_fail(f, name, &e));
  char want[200], have[96];
  int ok = dst && dst->ndim == e->ndim && clmoe_tensor_is_contiguous(dst);
  for (int d = 0; ok && d < e->ndim; d++) ok = dst->shape[d] == e->shape[d];
  if (!ok) {
    clmoe__io_st_describe_shape(e, want, sizeof want);
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: tensor '%.200s' is %s but the destination is %s", f->path,
                        name, want, dst ? clmoe_tensor_describe(dst, have, sizeof have) : "NULL");
  }
  return stream(f, e, dst->dtype, dst, NULL);
}

clmoe_status clmoe_st_load(clmoe_st_file *f, const char *name, clmoe_ctx *ctx, int flags, clmoe_tensor *t)
{
  st_entry *e;
  memset(t, 0, sizeof *t);
  CLMOE_TRY(find_or_fail(f, name, &e));
  if (e->ndim > CLMOE_MAX_DIMS)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "%s: tensor '%.200s' has %d dimensions; clmoe tensors have at most %d",
                        f->path, name, e->ndim, CLMOE_MAX_DIMS);
  clmoe_dtype dd = (flags & CLMOE_ST_LOAD_F32) || (st_is_float(e->dtype) && e->dtype != CLMOE_ST_BF16) ? CLMOE_F32
                   : e->dtype == CLMOE_ST_BF16 ? CLMOE_BF16 : CLMOE_I32;
  CLMOE_TRY(clmoe_tensor_create(ctx, t, dd, e->ndim, e->shape));
  clmoe_status st = stream(f, e, dd, t, NULL);
  if (st != CLMOE_OK) clmoe_tensor_destroy(t);
  return st;
}

clmoe_status clmoe_st_read(clmoe_st_file *f, const char *name, void *host, size_t bytes)
{
  st_entry *e;
  CLMOE_TRY(find_or_fail(f, name, &e));
  if (bytes != e->end - e->begin)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: tensor '%.200s' has %llu bytes, not %zu", f->path, name,
                        (unsigned long long)(e->end - e->begin), bytes);
  uint32_t crc = 0;
  CLMOE_TRY(read_data(f, e, 0, host, bytes, &crc));
  return clmoe__io_st_check_data_crc(f, e, crc);
}

clmoe_status clmoe_st_read_f32(clmoe_st_file *f, const char *name, float *host, size_t count)
{
  st_entry *e;
  CLMOE_TRY(find_or_fail(f, name, &e));
  if (count != (size_t)e->numel)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: tensor '%.200s' has %lld elements, not %zu", f->path, name,
                        (long long)e->numel, count);
  return stream(f, e, CLMOE_F32, NULL, host);
}

