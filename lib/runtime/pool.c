/* The per-context buffer pool: freed buffers are kept by size class and handed out again,
 * so steady-state training steps never call clCreateBuffer. */
#include "clmoe/tensor.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Size classes: multiples of 256 bytes up to 4 KiB, then 8 steps per power of two, so a
 * request wastes at most 12.5% and similar shapes share buffers. */
static size_t size_class(size_t bytes)
{
  if (bytes <= 4096) return clmoe__round_up(bytes ? bytes : 1, 256);
  size_t pow2 = 4096;
  while (pow2 < bytes) pow2 <<= 1;
  return clmoe__round_up(bytes, pow2 / 8);
}

static clmoe_status grow_free_list(clmoe_pool *pool)
{
  if (pool->nfree < pool->cap_free) return CLMOE_OK;
  int cap = pool->cap_free ? 2 * pool->cap_free : 32;
  clmoe_pool_block *grown = realloc(pool->free_blocks, (size_t)cap * sizeof *grown);
  if (!grown) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory (buffer pool)");
  pool->free_blocks = grown;
  pool->cap_free = cap;
  return CLMOE_OK;
}

/* Takes a buffer of at least `bytes` bytes; *capacity receives its size class. */
static clmoe_status pool_get(clmoe_ctx *ctx, size_t bytes, cl_mem *mem, size_t *capacity)
{
  clmoe_pool *pool = &ctx->pool;
  size_t cls = size_class(bytes);
  if (cls > ctx->caps.max_alloc_bytes)
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY,
                        "a buffer of %zu bytes exceeds the largest allocation %s allows (%llu bytes)",
                        bytes, ctx->caps.device_name, (unsigned long long)ctx->caps.max_alloc_bytes);
  /* Most recently freed first: likely still in caches. */
  for (int i = pool->nfree - 1; i >= 0; i--) {
    if (pool->free_blocks[i].bytes != cls) continue;
    *mem = pool->free_blocks[i].mem;
    pool->free_blocks[i] = pool->free_blocks[--pool->nfree];
    *capacity = cls;
    pool->stats.reuses++;
    goto handed_out;
  }
  cl_int err = CL_SUCCESS;
  *mem = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, cls, NULL, &err);
  if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
      err == CL_OUT_OF_HOST_MEMORY) {
    clmoe_ctx_pool_trim(ctx); /* give cached buffers back and try once more */
    *mem = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, cls, NULL, &err);
  }
  if (err != CL_SUCCESS) {
    clmoe__cl_error(err, "clCreateBuffer", __FILE__, __LINE__);
    clmoe__append_error(" (%zu bytes; %llu bytes already held by clmoe on %s)", cls,
                        (unsigned long long)pool->stats.device_bytes, ctx->caps.device_name);
    return err;
  }
  *capacity = cls;
  pool->stats.allocations++;
  pool->stats.device_bytes += cls;
handed_out:
  if (ctx->poison) {
    const cl_uint word = CLMOE_POISON_WORD;
    cl_int e = clEnqueueFillBuffer(ctx->queue, *mem, &word, sizeof word, 0, cls, 0, NULL, NULL);
    if (e != CL_SUCCESS) {
      clReleaseMemObject(*mem); /* not counted as in use yet: give it back to the driver */
      pool->stats.device_bytes -= cls;
      *mem = NULL;
      clmoe__cl_error(e, "clEnqueueFillBuffer (CLMOE_POISON)", __FILE__, __LINE__);
      return e;
    }
  }
  pool->stats.in_use_bytes += cls;
  if (pool->stats.in_use_bytes > pool->stats.peak_in_use_bytes)
    pool->stats.peak_in_use_bytes = pool->stats.in_use_bytes;
  return CLMOE_OK;
}

static void pool_put(clmoe_ctx *ctx, cl_mem mem, size_t capacity)
{
  clmoe_pool *pool = &ctx->pool;
  pool->stats.in_use_bytes -= capacity;
  if (grow_free_list(pool) != CLMOE_OK) {
    /* Cannot remember it: release it instead of leaking it. */
    clReleaseMemObject(mem);
    pool->stats.device_bytes -= capacity;
    clmoe_clear_error();
    return;
  }
  pool->free_blocks[pool->nfree].mem = mem;
  pool->free_blocks[pool->nfree].bytes = capacity;
  pool->nfree++;
}

clmoe_status clmoe__pool_get(clmoe_ctx *ctx, size_t bytes, cl_mem *mem, size_t *capacity)
{
  return pool_get(ctx, bytes, mem, capacity);
}

void clmoe__pool_put(clmoe_ctx *ctx, cl_mem mem, size_t capacity)
{
  if (mem) pool_put(ctx, mem, capacity);
}

clmoe_status clmoe__scratch(clmoe_ctx *ctx, size_t bytes, cl_mem *mem)
{
  size_t capacity;
  return pool_get(ctx, bytes, mem, &capacity);
}

void clmoe__scratch_release(clmoe_ctx *ctx, cl_mem mem, size_t bytes)
{
  if (mem) pool_put(ctx, mem, size_class(bytes));
}

void clmoe__scratch_release_set(clmoe_ctx *ctx, int n, cl_mem *mem, const size_t *bytes)
{
  for (int i = 0; i < n; i++) {
    clmoe__scratch_release(ctx, mem[i], bytes[i]);
    mem[i] = NULL;
  }
}

clmoe_status clmoe__scratch_set(clmoe_ctx *ctx, int n, cl_mem *mem, const size_t *bytes)
{
  for (int i = 0; i < n; i++) mem[i] = NULL;
  for (int i = 0; i < n; i++) {
    clmoe_status st = clmoe__scratch(ctx, bytes[i], &mem[i]);
    if (st != CLMOE_OK) {
      clmoe__scratch_release_set(ctx, i, mem, bytes);
      return st;
    }
  }
  return CLMOE_OK;
}

void clmoe_ctx_pool_trim(clmoe_ctx *ctx)
{
  clmoe_pool *pool = &ctx->pool;
  for (int i = 0; i < pool->nfree; i++) {
    clReleaseMemObject(pool->free_blocks[i].mem);
    pool->stats.device_bytes -= pool->free_blocks[i].bytes;
  }
  pool->nfree = 0;
}

void clmoe_ctx_pool_stats(const clmoe_ctx *ctx, clmoe_pool_stats *stats) { *stats = ctx->pool.stats; }

void clmoe__pool_destroy(clmoe_ctx *ctx)
{
  clmoe_ctx_pool_trim(ctx);
  free(ctx->pool.free_blocks);
  ctx->pool.free_blocks = NULL;
  ctx->pool.cap_free = 0;
}
