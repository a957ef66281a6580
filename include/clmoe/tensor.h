/* Tensors: typed, strided views of OpenCL buffers, with a per-context buffer pool.
 *
 * A tensor is a plain struct the caller owns (usually on the stack or inside a model
 * struct). clmoe_tensor_create takes a buffer from the context's pool and
 * clmoe_tensor_destroy gives it back, so a training step that creates and destroys the
 * same shapes every step allocates nothing after the first. A view (reshape, slice)
 * shares its source's buffer and must not outlive it; destroying a view does nothing. */
#ifndef CLMOE_TENSOR_H
#define CLMOE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum clmoe_dtype {
  CLMOE_F32 = 0,  /* IEEE binary32 */
  CLMOE_BF16 = 1, /* bfloat16 storage (upper half of binary32), computed in fp32 */
  CLMOE_I32 = 2   /* int32 (token ids, indices) */
} clmoe_dtype;

#define CLMOE_MAX_DIMS 4

typedef struct clmoe_tensor {
  clmoe_ctx *ctx;
  cl_mem buf;                     /* NULL when the tensor has no elements */
  clmoe_dtype dtype;
  int ndim;                       /* 0 .. CLMOE_MAX_DIMS (0: a scalar) */
  int64_t shape[CLMOE_MAX_DIMS];  /* unused dimensions are 1 */
  int64_t stride[CLMOE_MAX_DIMS]; /* in elements; row-major when contiguous */
  int64_t offset;                 /* in elements from the start of buf */
  size_t capacity;                /* bytes of buf */
  int is_view;                    /* 1: shares another tensor's buffer */
} clmoe_tensor;

CLMOE_API size_t clmoe_dtype_size(clmoe_dtype dtype);
CLMOE_API const char *clmoe_dtype_name(clmoe_dtype dtype);

/* A new contiguous tensor; its contents are undefined until written or filled.
 * Example: clmoe_tensor_create(ctx, &x, CLMOE_F32, 2, (int64_t[]){rows, cols}). */
CLMOE_API clmoe_status clmoe_tensor_create(clmoe_ctx *ctx, clmoe_tensor *t, clmoe_dtype dtype,
                                           int ndim, const int64_t *shape);
/* As clmoe_tensor_create, then every element set to zero. */
CLMOE_API clmoe_status clmoe_tensor_zeros(clmoe_ctx *ctx, clmoe_tensor *t, clmoe_dtype dtype,
                                          int ndim, const int64_t *shape);
/* Returns the buffer to the pool (no-op for views and for zeroed structs). */
CLMOE_API void clmoe_tensor_destroy(clmoe_tensor *t);

CLMOE_API int64_t clmoe_tensor_numel(const clmoe_tensor *t);
CLMOE_API size_t clmoe_tensor_bytes(const clmoe_tensor *t); /* numel * element size */
CLMOE_API int clmoe_tensor_is_contiguous(const clmoe_tensor *t);
/* Writes "[2, 3, 4] f32" into buf. */
CLMOE_API const char *clmoe_tensor_describe(const clmoe_tensor *t, char *buf, size_t len);

/* A contiguous view of numel(shape) elements of a contiguous src, starting `offset`
 * elements after src's first. */
CLMOE_API clmoe_status clmoe_tensor_view(const clmoe_tensor *src, clmoe_tensor *dst, int ndim,
                                         const int64_t *shape, int64_t offset);
/* Shorthands of clmoe_tensor_view from the first element: all of a contiguous src seen as
 * [rows, cols] or [d0, d1, d2] (the element counts must match). */
CLMOE_API clmoe_status clmoe_tensor_view2d(const clmoe_tensor *src, clmoe_tensor *dst,
                                           int64_t rows, int64_t cols);
CLMOE_API clmoe_status clmoe_tensor_view3d(const clmoe_tensor *src, clmoe_tensor *dst,
                                           int64_t d0, int64_t d1, int64_t d2);
/* Rows [r0, r0 + n) of a contiguous matrix src [rows, cols]: a contiguous [n, cols] view. */
CLMOE_API clmoe_status clmoe_tensor_rows(const clmoe_tensor *src, clmoe_tensor *dst, int64_t r0,
                                         int64_t n);
/* Elements [start, start + len) of dimension dim (the result may not be contiguous). */
CLMOE_API clmoe_status clmoe_tensor_slice(const clmoe_tensor *src, clmoe_tensor *dst, int dim,
                                          int64_t start, int64_t len);

/* Blocking copies between host memory and a contiguous tensor; `bytes` must equal
 * clmoe_tensor_bytes(t). */
CLMOE_API clmoe_status clmoe_tensor_write(clmoe_tensor *t, const void *host, size_t bytes);
CLMOE_API clmoe_status clmoe_tensor_read(const clmoe_tensor *t, void *host, size_t bytes);
/* As above from/to fp32 host arrays of numel elements, converting for bf16 tensors. */
CLMOE_API clmoe_status clmoe_tensor_write_f32(clmoe_tensor *t, const float *host);
CLMOE_API clmoe_status clmoe_tensor_read_f32(const clmoe_tensor *t, float *host);

/* dst = src for contiguous tensors with the same number of elements (shapes may differ,
 * as in a reshape); converts between fp32 and bf16. */
CLMOE_API clmoe_status clmoe_tensor_copy(clmoe_tensor *dst, const clmoe_tensor *src);
/* Every element = value (rounded for bf16, truncated toward zero for int32). */
CLMOE_API clmoe_status clmoe_tensor_fill(clmoe_tensor *t, double value);

/* Counter-based random fills: element i (in row-major order of t) depends only on seed
 * and i, and is the same bits on every device and on the host (clmoe_random_*).
 * Uniform on (lo, hi]; normal with the given mean and standard deviation. */
CLMOE_API clmoe_status clmoe_tensor_fill_uniform(clmoe_tensor *t, uint64_t seed, float lo,
                                                 float hi);
CLMOE_API clmoe_status clmoe_tensor_fill_normal(clmoe_tensor *t, uint64_t seed, float mean,
                                                float stddev);
/* The same with element i of t taking element first + i of the stream: a slice of a larger
 * tensor gets the values it would have inside it (one rank's rows of an expert tensor). */
CLMOE_API clmoe_status clmoe_tensor_fill_normal_at(clmoe_tensor *t, uint64_t seed, uint64_t first,
                                                   float mean, float stddev);
CLMOE_API float clmoe_random_uniform(uint64_t seed, uint64_t index, float lo, float hi);
CLMOE_API float clmoe_random_normal(uint64_t seed, uint64_t index, float mean, float stddev);

/* bf16 conversions on the host: exact widening; narrowing rounds to nearest even. */
CLMOE_API uint16_t clmoe_bf16_from_f32(float f);
CLMOE_API float clmoe_f32_from_bf16(uint16_t h);

/* The buffer pool of a context. */
typedef struct clmoe_pool_stats {
  uint64_t device_bytes; /* bytes of device buffers the pool holds (in use or free) */
  uint64_t in_use_bytes; /* bytes handed out and not yet returned */
  uint64_t peak_in_use_bytes;
  uint64_t allocations; /* clCreateBuffer calls */
  uint64_t reuses;      /* requests served from the free list */
} clmoe_pool_stats;
CLMOE_API void clmoe_ctx_pool_stats(const clmoe_ctx *ctx, clmoe_pool_stats *stats);
/* Releases every free buffer of the pool back to the device. */
CLMOE_API void clmoe_ctx_pool_trim(clmoe_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
