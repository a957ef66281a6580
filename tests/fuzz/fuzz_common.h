/* What the libFuzzer harnesses of tests/fuzz/ share: the input as a file, and the check
 * that stops a run when a property of the library does not hold.
 *
 * The readers under test take paths, so every input is written to a memory-backed file
 * (memfd_create, one per process, rewritten for each input) and handed over as
 * /proc/self/fd/N: no disk traffic, nothing left behind. */
#ifndef CLMOE_FUZZ_COMMON_H
#define CLMOE_FUZZ_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, open_memstream */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clmoe/clmoe.h"

/* The harnesses' entry points (libFuzzer calls them; declared for -Wmissing-prototypes). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A property of the library that does not hold: print it and abort, so that libFuzzer
 * keeps the input as a crash. */
#define FUZZ_REQUIRE(cond, ...)                                                            \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "%s:%d: property failed: %s\n  ", __FILE__, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                                        \
      fprintf(stderr, "\n  last error: %s\n", clmoe_last_error());                         \
      abort();                                                                             \
    }                                                                                      \
  } while (0)

/* The bytes as the content of this process's memory file; its path, or NULL (a failure
 * of the machine, not of the input: the harness then aborts). */
static inline const char *fuzz_file(const uint8_t *data, size_t size)
{
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("clmoe-fuzz", 0);
    if (fd < 0) {
      perror("memfd_create");
      abort();
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0) abort();
  size_t done = 0;
  while (done < size) {
    ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
    if (w <= 0) abort();
    done += (size_t)w;
  }
  return path;
}

#endif
