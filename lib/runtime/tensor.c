/* Tensors: creation from the pool, views, host transfers, copies and fills. */
#include "clmoe/tensor.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t clmoe_dtype_size(clmoe_dtype dtype) { return dtype == CLMOE_BF16 ? 2 : 4; }

const char *clmoe_dtype_name(clmoe_dtype dtype)
{
  switch (dtype) {
  case CLMOE_F32: return "f32";
  case CLMOE_BF16: return "bf16";
  case CLMOE_I32: return "i32";
  }
  return "?";
}

int64_t clmoe_tensor_numel(const clmoe_tensor *t)
{
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

size_t clmoe_tensor_bytes(const clmoe_tensor *t)
{
  return (size_t)clmoe_tensor_numel(t) * clmoe_dtype_size(t->dtype);
}

int clmoe_tensor_is_contiguous(const clmoe_tensor *t)
{
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] != 1 && t->stride[d] != expect) return 0;
    expect *= t->shape[d];
  }
  return 1;
}

const char *clmoe_tensor_describe(const clmoe_tensor *t, char *buf, size_t len)
{
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < t->ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "",
                             (long long)t->shape[d]);
  if (used < len) snprintf(buf + used, len - used, "] %s", clmoe_dtype_name(t->dtype));
  return buf;
}

static clmoe_status check_shape(int ndim, const int64_t *shape)
{
  if (ndim < 0 || ndim > CLMOE_MAX_DIMS)
    return clmoe__error(CLMOE_ERR_SHAPE, "a tensor has 0 to %d dimensions, not %d",
                        CLMOE_MAX_DIMS, ndim);
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0)
      return clmoe__error(CLMOE_ERR_SHAPE, "dimension %d has negative size %lld", d,
                          (long long)shape[d]);
  return CLMOE_OK;
}

static void set_contiguous(clmoe_tensor *t, int ndim, const int64_t *shape)
{
  t->ndim = ndim;
  int64_t stride = 1;
  for (int d = CLMOE_MAX_DIMS - 1; d >= 0; d--) {
    t->shape[d] = d < ndim ? shape[d] : 1;
    t->stride[d] = d < ndim ? stride : 1;
    if (d < ndim) stride *= shape[d];
  }
}

clmoe_status clmoe_tensor_create(clmoe_ctx *ctx, clmoe_tensor *t, clmoe_dtype dtype, int ndim,
                                 const int64_t *shape)
{
  memset(t, 0, sizeof *t);
  CLMOE_TRY(check_shape(ndim, shape));
  if (dtype != CLMOE_F32 && dtype != CLMOE_BF16 && dtype != CLMOE_I32)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "unknown dtype %d", (int)dtype);
  t->ctx = ctx;
  t->dtype = dtype;
  set_contiguous(t, ndim, shape);
  size_t bytes = clmoe_tensor_bytes(t);
  if (bytes == 0) return CLMOE_OK;
  clmoe_status st = clmoe__pool_get(ctx, bytes, &t->buf, &t->capacity);
  if (st != CLMOE_OK) {
    char desc[96];
    clmoe__append_error(" creating tensor %s", clmoe_tensor_describe(t, desc, sizeof desc));
    memset(t, 0, sizeof *t);
  }
  return st;
}

clmoe_status clmoe_tensor_zeros(clmoe_ctx *ctx, clmoe_tensor *t, clmoe_dtype dtype, int ndim,
                                const int64_t *shape)
{
  CLMOE_TRY(clmoe_tensor_create(ctx, t, dtype, ndim, shape));
  clmoe_status st = clmoe_tensor_fill(t, 0.0);
  if (st != CLMOE_OK) clmoe_tensor_destroy(t);
  return st;
}

void clmoe_tensor_destroy(clmoe_tensor *t)
{
  if (!t) return;
  if (!t->is_view && t->buf && t->ctx) clmoe__pool_put(t->ctx, t->buf, t->capacity);
  memset(t, 0, sizeof *t);
}

clmoe_status clmoe_tensor_view(const clmoe_tensor *src, clmoe_tensor *dst, int ndim,
                               const int64_t *shape, int64_t offset)
{
  if (!clmoe_tensor_is_contiguous(src))
    return clmoe__error(CLMOE_ERR_SHAPE, "clmoe_tensor_view needs a contiguous source");
  CLMOE_TRY(check_shape(ndim, shape));
  clmoe_tensor v = *src;
  set_contiguous(&v, ndim, shape);
  int64_t n = clmoe_tensor_numel(&v), have = clmoe_tensor_numel(src);
  if (offset < 0 || offset + n > have) {
    char desc[96];
    return clmoe__error(CLMOE_ERR_SHAPE, "view of %lld elements at offset %lld does not fit in %s",
                        (long long)n, (long long)offset, clmoe_tensor_describe(src, desc, sizeof desc));
  }
  v.offset = src->offset + offset;
  v.is_view = 1;
  *dst = v;
  return CLMOE_OK;
}

/* A shorthand view must cover all of src: a wrong size is a caller's bug, named here. */
static clmoe_status view_all(const clmoe_tensor *src, clmoe_tensor *dst, int ndim,
                             const int64_t *shape, const char *fn)
{
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  if (n != clmoe_tensor_numel(src)) {
    char desc[96];
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %lld elements asked of %s", fn, (long long)n,
                        clmoe_tensor_describe(src, desc, sizeof desc));
  }
  return clmoe_tensor_view(src, dst, ndim, shape, 0);
}

clmoe_status clmoe_tensor_view2d(const clmoe_tensor *src, clmoe_tensor *dst, int64_t rows,
                                 int64_t cols)
{
  return view_all(src, dst, 2, (const int64_t[]){rows, cols}, "clmoe_tensor_view2d");
}

clmoe_status clmoe_tensor_view3d(const clmoe_tensor *src, clmoe_tensor *dst, int64_t d0,
                                 int64_t d1, int64_t d2)
{
  return view_all(src, dst, 3, (const int64_t[]){d0, d1, d2}, "clmoe_tensor_view3d");
}

clmoe_status clmoe_tensor_rows(const clmoe_tensor *src, clmoe_tensor *dst, int64_t r0, int64_t n)
{
  if (src->ndim != 2 || r0 < 0 || n < 0 || r0 + n > src->shape[0]) {
    char desc[96];
    return clmoe__error(CLMOE_ERR_SHAPE, "clmoe_tensor_rows: rows [%lld, %lld) of %s",
                        (long long)r0, (long long)(r0 + n),
                        clmoe_tensor_describe(src, desc, sizeof desc));
  }
  return clmoe_tensor_view(src, dst, 2, (const int64_t[]){n, src->shape[1]}, r0 * src->shape[1]);
}

clmoe_status clmoe_tensor_slice(const clmoe_tensor *src, clmoe_tensor *dst, int dim, int64_t start,
                                int64_t len)
{
  if (dim < 0 || dim >= src->ndim)
    return clmoe__error(CLMOE_ERR_SHAPE, "slice of dimension %d of a %d-D tensor", dim, src->ndim);
  if (start < 0 || len < 0 || start + len > src->shape[dim])
    return clmoe__error(CLMOE_ERR_SHAPE, "slice [%lld, %lld) of dimension %d (size %lld)",
                        (long long)start, (long long)(start + len), dim, (long long)src->shape[dim]);
  clmoe_tensor v = *src;
  v.offset += start * src->stride[dim];
  v.shape[dim] = len;
  v.is_view = 1;
  *dst = v;
  return CLMOE_OK;
}

static clmoe_status check_transfer(const clmoe_tensor *t, size_t bytes, const char *what)
{
  char desc[96];
  if (clmoe_tensor_numel(t) > 0 && (!t->ctx || !t->buf))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the tensor was never created", what);
  if (!clmoe_tensor_is_contiguous(t))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: tensor %s is not contiguous", what,
                        clmoe_tensor_describe(t, desc, sizeof desc));
  if (bytes != clmoe_tensor_bytes(t))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: %zu bytes given for tensor %s of %zu bytes", what,
                        bytes, clmoe_tensor_describe(t, desc, sizeof desc), clmoe_tensor_bytes(t));
  return CLMOE_OK;
}

clmoe_status clmoe_tensor_write(clmoe_tensor *t, const void *host, size_t bytes)
{
  CLMOE_TRY(check_transfer(t, bytes, "clmoe_tensor_write"));
  if (bytes == 0) return CLMOE_OK;
  size_t off = (size_t)t->offset * clmoe_dtype_size(t->dtype);
  CLMOE_CL(clEnqueueWriteBuffer(t->ctx->queue, t->buf, CL_TRUE, off, bytes, host, 0, NULL, NULL));
  clmoe__count_wait(t->ctx, CLMOE_WAIT_WRITE);
  return CLMOE_OK;
}

clmoe_status clmoe_tensor_read(const clmoe_tensor *t, void *host, size_t bytes)
{
  CLMOE_TRY(check_transfer(t, bytes, "clmoe_tensor_read"));
  if (bytes == 0) return CLMOE_OK;
  size_t off = (size_t)t->offset * clmoe_dtype_size(t->dtype);
  CLMOE_CL(clEnqueueReadBuffer(t->ctx->queue, t->buf, CL_TRUE, off, bytes, host, 0, NULL, NULL));
  clmoe__count_wait(t->ctx, CLMOE_WAIT_READ);
  return CLMOE_OK;
}

uint16_t clmoe_bf16_from_f32(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* keep NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float clmoe_f32_from_bf16(uint16_t h)
{
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

clmoe_status clmoe_tensor_write_f32(clmoe_tensor *t, const float *host)
{
  if (t->dtype == CLMOE_F32) return clmoe_tensor_write(t, host, clmoe_tensor_bytes(t));
  if (t->dtype != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_tensor_write_f32 on an %s tensor",
                        clmoe_dtype_name(t->dtype));
  size_t n = (size_t)clmoe_tensor_numel(t);
  uint16_t *tmp = malloc(n * 2 + 2);
  if (!tmp) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  for (size_t i = 0; i < n; i++) tmp[i] = clmoe_bf16_from_f32(host[i]);
  clmoe_status st = clmoe_tensor_write(t, tmp, n * 2);
  free(tmp);
  return st;
}

clmoe_status clmoe_tensor_read_f32(const clmoe_tensor *t, float *host)
{
  if (t->dtype == CLMOE_F32) return clmoe_tensor_read(t, host, clmoe_tensor_bytes(t));
  if (t->dtype != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_tensor_read_f32 on an %s tensor",
                        clmoe_dtype_name(t->dtype));
  size_t n = (size_t)clmoe_tensor_numel(t);
  uint16_t *tmp = malloc(n * 2 + 2);
  if (!tmp) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  clmoe_status st = clmoe_tensor_read(t, tmp, n * 2);
  if (st == CLMOE_OK)
    for (size_t i = 0; i < n; i++) host[i] = clmoe_f32_from_bf16(tmp[i]);
  free(tmp);
  return st;
}

clmoe_status clmoe_tensor_copy(clmoe_tensor *dst, const clmoe_tensor *src)
{
  char d1[96], d2[96];
  if (clmoe_tensor_numel(dst) != clmoe_tensor_numel(src) || !clmoe_tensor_is_contiguous(dst) ||
      !clmoe_tensor_is_contiguous(src))
    return clmoe__error(CLMOE_ERR_SHAPE,
                        "clmoe_tensor_copy: %s <- %s (needs contiguous tensors of equal size)",
                        clmoe_tensor_describe(dst, d1, sizeof d1),
                        clmoe_tensor_describe(src, d2, sizeof d2));
  cl_ulong n = (cl_ulong)clmoe_tensor_numel(src);
  if (n == 0) return CLMOE_OK;
  if (dst->dtype == src->dtype) {
    size_t es = clmoe_dtype_size(src->dtype);
    CLMOE_CL(clEnqueueCopyBuffer(dst->ctx->queue, src->buf, dst->buf, (size_t)src->offset * es,
                                 (size_t)dst->offset * es, (size_t)n * es, 0, NULL, NULL));
    return CLMOE_OK;
  }
  const char *name = src->dtype == CLMOE_F32 && dst->dtype == CLMOE_BF16   ? "convert_f32_to_bf16"
                     : src->dtype == CLMOE_BF16 && dst->dtype == CLMOE_F32 ? "convert_bf16_to_f32"
                                                                           : NULL;
  if (!name)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_tensor_copy: no conversion %s -> %s",
                        clmoe_dtype_name(src->dtype), clmoe_dtype_name(dst->dtype));
  cl_kernel k;
  CLMOE_TRY(clmoe__kernel(dst->ctx, "tensor", NULL, name, &k));
  cl_ulong soff = (cl_ulong)src->offset, doff = (cl_ulong)dst->offset;
  CLMOE_TRY(clmoe__args(k, 5, KA(src->buf), KA(soff), KA(dst->buf), KA(doff), KA(n)));
  return clmoe__launch1d(dst->ctx, k, (size_t)n);
}

clmoe_status clmoe_tensor_fill(clmoe_tensor *t, double value)
{
  char desc[96];
  if (!clmoe_tensor_is_contiguous(t))
    return clmoe__error(CLMOE_ERR_SHAPE, "clmoe_tensor_fill: tensor %s is not contiguous",
                        clmoe_tensor_describe(t, desc, sizeof desc));
  size_t n = (size_t)clmoe_tensor_numel(t);
  if (n == 0) return CLMOE_OK;
  size_t es = clmoe_dtype_size(t->dtype);
  union { float f; int32_t i; uint16_t h; } pattern;
  if (t->dtype == CLMOE_F32) pattern.f = (float)value;
  else if (t->dtype == CLMOE_I32) pattern.i = (int32_t)value;
  else pattern.h = clmoe_bf16_from_f32((float)value);
  CLMOE_CL(clEnqueueFillBuffer(t->ctx->queue, t->buf, &pattern, es, (size_t)t->offset * es, n * es,
                               0, NULL, NULL));
  return CLMOE_OK;
}
