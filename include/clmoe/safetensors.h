/* safetensors files: reading (validated, lazy) and writing (atomic), for op inputs and
 * outputs, weights and checkpoints.
 *
 * Format: an 8-byte little-endian uint64 N, N bytes of UTF-8 JSON (possibly padded with
 * trailing spaces), then the data region. The JSON object maps each tensor name to
 * {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (byte offsets into the
 * data region, end exclusive; row-major, little-endian) and may hold "__metadata__", an
 * object of string -> string.
 *
 * A file is never trusted: clmoe_st_open reads and checks the whole header (length against
 * the file size and a 100 MB cap, strict JSON, UTF-8, known dtypes, shapes without
 * overflow, offsets that match dtype and shape, lie inside the data region and do not
 * overlap, unique names) and fails with a message naming the file, the tensor and the
 * field. Tensor data is read only when loaded (a file that shrank since: CLMOE_ERR_IO).
 * Gaps between tensors are allowed.
 *
 * Checksums: the writer records CRC-32C checksums in two metadata entries (strings, so the
 * files stay valid for other readers): CLMOE_ST_CRC_TENSORS, "eeeeeeee:dddddddd,..." in
 * header order, each tensor's entry (name, dtype, shape, data_offsets: e) and data bytes
 * (d), and CLMOE_ST_CRC_METADATA, "mmmmmmmm", every other metadata entry in header order.
 * clmoe_st_open verifies the metadata and the entries, and every read of a tensor (load,
 * load_into, read, read_f32 read it whole) verifies its data as it streams, so a damaged
 * byte anywhere in the header or the data is CLMOE_ERR_FORMAT naming the file and the
 * tensor or "metadata". (A tensor loaded into a device tensor that then fails its checksum
 * has been written already: its contents are undefined.) Files without these entries (other
 * tools' files) load unchecked; a file with only one of them is refused.
 *
 *   clmoe_st_file *f;
 *   clmoe_tensor q;
 *   CLMOE_TRY(clmoe_st_open("in.safetensors", &f));
 *   st = clmoe_st_load(f, "q", ctx, CLMOE_ST_LOAD_NATIVE, &q);
 *   clmoe_st_close(f);
 *
 *   clmoe_st_writer *w;
 *   CLMOE_TRY(clmoe_st_writer_create("out.safetensors", &w));
 *   st = clmoe_st_writer_add(w, "o", &o);          (on failure: clmoe_st_writer_discard(w))
 *   st = clmoe_st_writer_metadata(w, "step", "100");
 *   st = clmoe_st_writer_finish(w);                (frees w) */
#ifndef CLMOE_SAFETENSORS_H
#define CLMOE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of the format (the byte-sized ones; sub-byte types are rejected). */
typedef enum clmoe_st_dtype {
  CLMOE_ST_BOOL = 0, CLMOE_ST_U8, CLMOE_ST_I8, CLMOE_ST_F8_E4M3, CLMOE_ST_F8_E5M2,
  CLMOE_ST_I16, CLMOE_ST_U16, CLMOE_ST_F16, CLMOE_ST_BF16,
  CLMOE_ST_I32, CLMOE_ST_U32, CLMOE_ST_F32,
  CLMOE_ST_I64, CLMOE_ST_U64, CLMOE_ST_F64,
  CLMOE_ST_DTYPE_COUNT
} clmoe_st_dtype;

/* The format's spelling ("F32", "BF16", ...) and the element size in bytes. */
CLMOE_API const char *clmoe_st_dtype_name(clmoe_st_dtype dtype);
CLMOE_API size_t clmoe_st_dtype_size(clmoe_st_dtype dtype);

/* Largest header accepted (as the reference implementation). */
#define CLMOE_ST_MAX_HEADER 100000000u
/* Most dimensions a tensor of a file may have (clmoe tensors themselves have 4). */
#define CLMOE_ST_MAX_DIMS 64

/* The metadata keys of the checksums (reserved: clmoe_st_writer_metadata refuses them). */
#define CLMOE_ST_CRC_TENSORS "clmoe.crc32c.tensors"
#define CLMOE_ST_CRC_METADATA "clmoe.crc32c.metadata"

/* ---- reading ------------------------------------------------------------------------ */
typedef struct clmoe_st_file clmoe_st_file;

typedef struct clmoe_st_info {
  const char *name;
  clmoe_st_dtype dtype;
  int ndim;             /* 0 .. CLMOE_ST_MAX_DIMS (0: a scalar of one element) */
  const int64_t *shape; /* ndim sizes; valid until clmoe_st_close */
  int64_t numel;
  uint64_t offset;      /* of the first byte within the data region */
  uint64_t bytes;       /* numel * element size */
} clmoe_st_info;

/* Opens and validates a file; the file stays open for clmoe_st_load/read until
 * clmoe_st_close. CLMOE_ERR_IO when it cannot be read, CLMOE_ERR_FORMAT when malformed. */
CLMOE_API clmoe_status clmoe_st_open(const char *path, clmoe_st_file **file);
CLMOE_API void clmoe_st_close(clmoe_st_file *file); /* NULL is fine */
CLMOE_API const char *clmoe_st_path(const clmoe_st_file *file);

/* Tensors in the order of the header; index in [0, count) (outside it, info.name is ""). */
CLMOE_API int clmoe_st_count(const clmoe_st_file *file);
CLMOE_API void clmoe_st_info_at(const clmoe_st_file *file, int index, clmoe_st_info *info);
/* 1 when the file has a tensor of that name. */
CLMOE_API int clmoe_st_has(const clmoe_st_file *file, const char *name);
/* Describes tensor `name`; CLMOE_ERR_FORMAT ("x.safetensors has no tensor 'q'") if absent. */
CLMOE_API clmoe_status clmoe_st_info_of(const clmoe_st_file *file, const char *name,
                                        clmoe_st_info *info);

/* clmoe_st_load stores F32 as f32, BF16 as bf16, F16, F8_E4M3, F8_E5M2 and F64 as f32 (the
 * small floats exactly, F64 rounded), and BOOL, U8, I8, I16, U16, I32, U32, I64, U64 as i32
 * (each element checked to fit: CLMOE_ERR_FORMAT names the first that does not). With
 * CLMOE_ST_LOAD_F32 every type becomes f32 (integers rounded to nearest). */
enum { CLMOE_ST_LOAD_NATIVE = 0, CLMOE_ST_LOAD_F32 = 1 };

/* Loads tensor `name` into a new contiguous tensor *t on ctx (destroy it with
 * clmoe_tensor_destroy). The file's shape must have at most CLMOE_MAX_DIMS dimensions. */
CLMOE_API clmoe_status clmoe_st_load(clmoe_st_file *file, const char *name, clmoe_ctx *ctx,
                                     int flags, clmoe_tensor *t);
/* Loads tensor `name` into an existing contiguous tensor of exactly the file's shape
 * (checkpoints: parameters that already exist), converting as above to dst's dtype; bf16
 * destinations accept the float types (BF16 exactly, the others rounded to nearest even).
 * A shape or a conversion that does not fit: CLMOE_ERR_SHAPE. */
CLMOE_API clmoe_status clmoe_st_load_into(clmoe_st_file *file, const char *name, clmoe_tensor *dst);

/* Host copies: the stored bytes (little-endian; `bytes` must equal info.bytes), or the
 * elements converted to f32 (`count` must equal info.numel). */
CLMOE_API clmoe_status clmoe_st_read(clmoe_st_file *file, const char *name, void *host,
                                     size_t bytes);
CLMOE_API clmoe_status clmoe_st_read_f32(clmoe_st_file *file, const char *name, float *host,
                                         size_t count);

/* "__metadata__": the value of key, or NULL when absent; entries in header order (index in
 * [0, count); outside it key and value are NULL). */
CLMOE_API const char *clmoe_st_metadata(const clmoe_st_file *file, const char *key);
CLMOE_API int clmoe_st_metadata_count(const clmoe_st_file *file);
CLMOE_API void clmoe_st_metadata_at(const clmoe_st_file *file, int index, const char **key,
                                    const char **value);

/* ---- writing ------------------------------------------------------------------------ */
/* A writer collects tensors (copied to host memory when added) and metadata, and
 * clmoe_st_writer_finish writes "<path>.tmp.<pid>", flushes and fsyncs it and renames it
 * over path: path is never left half-written, and the temporary file is removed on
 * failure. Temporary files of earlier saves of path that were killed before their rename
 * ("<path>.tmp.<pid>" of a pid that is not running, or unchanged for 6 hours) are removed
 * first; no other file is touched. It records the checksums described above. Names and metadata must be non-empty
 * (names) valid UTF-8; names are unique and not "__metadata__"; metadata keys are not the
 * checksums'. Data is laid out largest element size first, so that every tensor is
 * aligned to its element size (the header is padded to a multiple of 8 bytes). */
typedef struct clmoe_st_writer clmoe_st_writer;

CLMOE_API clmoe_status clmoe_st_writer_create(const char *path, clmoe_st_writer **writer);
/* Downloads a contiguous tensor now: f32 -> F32, bf16 -> BF16, i32 -> I32. An add that
 * fails (bad or duplicate name, ...) leaves the writer as it was. */
CLMOE_API clmoe_status clmoe_st_writer_add(clmoe_st_writer *writer, const char *name,
                                           const clmoe_tensor *t);
/* Copies numel(shape) elements of dtype from host memory (host byte order). */
CLMOE_API clmoe_status clmoe_st_writer_add_host(clmoe_st_writer *writer, const char *name,
                                                clmoe_st_dtype dtype, int ndim,
                                                const int64_t *shape, const void *data);
/* Sets a metadata entry (a later call with the same key replaces the value). */
CLMOE_API clmoe_status clmoe_st_writer_metadata(clmoe_st_writer *writer, const char *key,
                                                const char *value);
/* Writes the file and frees the writer, whether or not writing succeeded. */
CLMOE_API clmoe_status clmoe_st_writer_finish(clmoe_st_writer *writer);
/* Frees a writer without writing anything (NULL is fine). */
CLMOE_API void clmoe_st_writer_discard(clmoe_st_writer *writer);
/* Removes the leftovers of killed saves of path ("<path>.tmp.<pid>", regular files whose
 * process is gone or that have not changed for 6 hours; never anything else), as every
 * save of path does first; returns how many. For callers that save under new names (a
 * step-numbered checkpoint), so that a save killed under an old name is cleaned too. */
CLMOE_API int clmoe_st_remove_stale(const char *path);

#ifdef __cplusplus
}
#endif
#endif
