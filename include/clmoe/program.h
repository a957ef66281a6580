/* Building OpenCL programs, and the on-disk cache of built program binaries.
 *
 * Kernel sources (kernels_cl/<family>.cl) are compiled into the library. When the
 * environment variable CLMOE_KERNEL_DIR names a directory, the library reads
 * <dir>/<family>.cl from there instead (for kernel development without rebuilding).
 *
 * Built binaries are cached on disk, keyed by a hash of the sources, the build options,
 * the device name, the driver version, the platform name and version and a format version:
 * directory $CLMOE_CACHE_DIR, else $XDG_CACHE_HOME/clmoe, else ~/.cache/clmoe. Entries
 * are written to a temporary file and renamed; a corrupt or stale entry is rebuilt
 * silently. CLMOE_CACHE=0 turns the cache off. */
#ifndef CLMOE_PROGRAM_H
#define CLMOE_PROGRAM_H

#include <stddef.h>

#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the cache file format and key; bump to invalidate every entry. */
#define CLMOE_CACHE_FORMAT 1

/* Writes the cache directory into out; returns 0 when the cache is off (CLMOE_CACHE=0)
 * or no directory could be named, 1 otherwise. */
CLMOE_API int clmoe_cache_dir(char *out, size_t len);

typedef struct clmoe_program_stats {
  unsigned long cache_hits;   /* programs loaded from the disk cache */
  unsigned long builds;       /* programs compiled from source */
  unsigned long cache_writes; /* entries written */
  unsigned long cache_rejects;/* entries found but unusable (corrupt, stale): rebuilt */
} clmoe_program_stats;

/* Counts for one context since it was created. */
CLMOE_API void clmoe_ctx_program_stats(const clmoe_ctx *ctx, clmoe_program_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
