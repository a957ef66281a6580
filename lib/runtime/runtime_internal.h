/* Internal to the runtime: what its files share beyond lib/runtime/internal.h, the program
 * build (program.c) and the on-disk cache of built programs below it (program_cache.c).
 * Not installed, and not for the other subsystems. */
#ifndef CLMOE_RUNTIME_INTERNAL_H
#define CLMOE_RUNTIME_INTERNAL_H

#include <stddef.h>

#include "internal.h"

/* ---- program_cache.c: programs as binaries, and their cache on disk ------------------- */

/* Where one program's binary is cached: its key (a hash of the format version, the
 * platform, device and driver, the build options and every source text) and the file
 * <dir>/<key in hex>.clbin. */
typedef struct clmoe__runtime_cache_slot {
  int enabled;     /* 0: no cache (CLMOE_CACHE=0, or no folder could be named) */
  char dir[4096];  /* the cache folder (clmoe_cache_dir) */
  char path[4200]; /* the entry's file */
  clmoe_hash key;
} clmoe__runtime_cache_slot;

/* Fills *slot for a program of `count` source texts built with `options`. */
void clmoe__runtime_cache_locate(const clmoe_ctx *ctx, int count, const char *const *texts,
                                 const char *options, clmoe__runtime_cache_slot *slot);
/* The cached program built from its binary, or NULL when there is no usable entry (none,
 * corrupt, stale or refused by the driver: the caller builds from source). Counts hits and
 * rejects in ctx->prog_stats. */
cl_program clmoe__runtime_cache_load(clmoe_ctx *ctx, const clmoe__runtime_cache_slot *slot,
                                     const char *options);
/* Writes prog's binary to the slot's file (a temporary file renamed into place) when the
 * slot is enabled, counting the write in ctx->prog_stats. A cache that cannot be written
 * is not an error: the thread's message is cleared in every case. */
void clmoe__runtime_cache_store(clmoe_ctx *ctx, const clmoe__runtime_cache_slot *slot,
                                cl_program prog);

/* The binary of a program built for ctx's device: *data (malloc'ed; free it) and *size.
 * *data is NULL when the driver offers no binary. */
clmoe_status clmoe__runtime_program_binary(clmoe_ctx *ctx, cl_program prog, unsigned char **data,
                                           size_t *size);

#endif
