/* What the safetensors suites share (test_safetensors.c, test_safetensors_corrupt.c): files
 * in the suite's temporary directory, and files written byte by byte with plain stdio (not
 * the library's writer). */
#ifndef CLMOE_ST_FIXTURE_H
#define CLMOE_ST_FIXTURE_H

#include <stdio.h>
#include <string.h>

#include "test_common.h"

/* A file of the suite's temporary directory, test_tmpdir("st") (valid until the next call). */
static inline const char *path_of(const char *name)
{
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/%s", test_tmpdir("st"), name);
  return buf;
}

/* An 8-byte little-endian length n, then `len` bytes of body (plain stdio, not our writer). */
static inline void write_raw(const char *path, uint64_t n, const void *body, size_t len)
{
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  unsigned char len8[8];
  for (int k = 0; k < 8; k++) len8[k] = (unsigned char)(n >> (8 * k));
  CU_ASSERT_EQUAL(fwrite(len8, 1, 8, f), 8);
  if (len) CU_ASSERT_EQUAL(fwrite(body, 1, len, f), len);
  CU_ASSERT_EQUAL(fclose(f), 0);
}

#endif
