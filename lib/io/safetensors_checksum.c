/* The checksums of safetensors files: what the writer (safetensors_write.c) records in
 * "__metadata__" and the reader (safetensors.c) verifies when it opens a file.
 *
 * Two metadata entries, both strings, so that other readers still load the file:
 *   CLMOE_ST_CRC_TENSORS  "eeeeeeee:dddddddd,..." one item per tensor in header order:
 *                         e the CRC-32C of its entry (name, dtype, shape, data_offsets),
 *                         d the CRC-32C of its data bytes (18 bytes a tensor);
 *   CLMOE_ST_CRC_METADATA "mmmmmmmm" the CRC-32C of every other metadata entry in header
 *                         order, the list above included.
 * So a changed byte of the header changes the metadata's crc or an entry's, and a changed
 * byte of the data its tensor's. A file with neither entry has no checksums (other tools'
 * files); a file with one of them only is refused (one of them was damaged). */
#include "safetensors_internal.h"

#include <stdio.h>
#include <string.h>

#include "checksum.h"
#include "clmoe/safetensors.h"

static uint32_t crc_u64(uint32_t crc, uint64_t v)
{
  unsigned char b[8];
  for (int k = 0; k < 8; k++) b[k] = (unsigned char)(v >> (8 * k));
  return clmoe__io_crc32c(crc, b, 8);
}

/* A string with its terminating NUL, so that ("ab", "c") and ("a", "bc") differ. */
static uint32_t crc_str(uint32_t crc, const char *s) { return clmoe__io_crc32c(crc, s, strlen(s) + 1); }

uint32_t clmoe__io_st_entry_crc(const char *name, clmoe_st_dtype dtype, int ndim, const int64_t *shape,
                                uint64_t begin, uint64_t end)
{
  uint32_t c = crc_str(0, name);
  c = crc_str(c, clmoe__io_st_dtypes[dtype].name);
  c = crc_u64(c, (uint64_t)ndim);
  for (int d = 0; d < ndim; d++) c = crc_u64(c, (uint64_t)shape[d]);
  c = crc_u64(c, begin);
  return crc_u64(c, end);
}

uint32_t clmoe__io_st_meta_crc(char *const *kv, int n)
{
  uint32_t c = 0;
  for (int i = 0; i < n; i++)
    if (strcmp(kv[2 * i], CLMOE_ST_CRC_METADATA)) c = crc_str(crc_str(c, kv[2 * i]), kv[2 * i + 1]);
  return c;
}

/* Exactly 8 lowercase hex digits at s. */
static int hex8(const char *s, uint32_t *v)
{
  *v = 0;
  for (int k = 0; k < 8; k++) {
    const char c = s[k];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return 0;
    *v = *v << 4 | (uint32_t)d;
  }
  return 1;
}

static const char *meta_value(const clmoe_st_file *f, const char *key)
{
  for (int i = 0; i < f->nmeta; i++)
    if (!strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
  return NULL;
}

clmoe_status clmoe__io_st_verify_header(clmoe_st_file *f)
{
  const char *mc = meta_value(f, CLMOE_ST_CRC_METADATA), *list = meta_value(f, CLMOE_ST_CRC_TENSORS);
  f->checksummed = 0;
  if (!mc && !list) return CLMOE_OK;
  if (!mc || !list)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: metadata: '%s' is there but '%s' is not: the header is damaged",
                        f->path, mc ? CLMOE_ST_CRC_METADATA : CLMOE_ST_CRC_TENSORS,
                        mc ? CLMOE_ST_CRC_TENSORS : CLMOE_ST_CRC_METADATA);
  uint32_t want, have = clmoe__io_st_meta_crc(f->meta, f->nmeta);
  if (strlen(mc) != 8 || !hex8(mc, &want))
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: metadata: '%s' is '%.40s', not 8 hex digits: the header is damaged",
                        f->path, CLMOE_ST_CRC_METADATA, mc);
  if (want != have)
    return clmoe__error(CLMOE_ERR_DAMAGED, "%s: metadata: the entries fail their CRC-32C checksum (stored %08x, "
                        "computed %08x): the header was damaged or edited", f->path, want, have);
  /* The list is covered by the metadata's crc: a malformed one was written so. */
  if (strlen(list) != (size_t)f->n * 18 - (f->n > 0))
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: metadata: '%s' holds %zu bytes, not the checksums of %d tensors",
                        f->path, CLMOE_ST_CRC_TENSORS, strlen(list), f->n);
  for (int i = 0; i < f->n; i++) {
    st_entry *e = &f->t[i];
    const char *item = list + 18 * (size_t)i;
    uint32_t entry;
    if (!hex8(item, &entry) || item[8] != ':' || !hex8(item + 9, &e->data_crc) ||
        (i + 1 < f->n && item[17] != ','))
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: metadata: item %d of '%s' is not 'xxxxxxxx:xxxxxxxx'", f->path, i,
                          CLMOE_ST_CRC_TENSORS);
    have = clmoe__io_st_entry_crc(e->name, e->dtype, e->ndim, e->shape, e->begin, e->end);
    if (entry != have) {
      char desc[200];
      clmoe__io_st_describe_shape(e, desc, sizeof desc);
      return clmoe__error(CLMOE_ERR_DAMAGED, "%s: tensor '%.200s': its name, dtype, shape or data_offsets (%s at "
                          "[%llu, %llu]) fail their CRC-32C checksum (stored %08x, computed %08x): the header "
                          "was damaged or edited", f->path, e->name, desc, (unsigned long long)e->begin,
                          (unsigned long long)e->end, entry, have);
    }
  }
  f->checksummed = 1;
  return CLMOE_OK;
}

clmoe_status clmoe__io_st_check_data_crc(const clmoe_st_file *f, const st_entry *e, uint32_t crc)
{
  if (!f->checksummed || crc == e->data_crc) return CLMOE_OK;
  return clmoe__error(CLMOE_ERR_DAMAGED, "%s: tensor '%.200s': its data fails its CRC-32C checksum (stored %08x, "
                      "computed %08x): the file is damaged", f->path, e->name, e->data_crc, crc);
}
