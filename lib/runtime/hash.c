/* 128-bit content hash for program-cache keys: two FNV-1a 64 lanes with different
 * offsets, the second lane also mixing in the byte position. Not cryptographic; the cache
 * also checks a payload checksum, so a collision can only cost a rebuild. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define FNV_PRIME 0x100000001b3ULL
#define FNV_OFFSET 0xcbf29ce484222325ULL

void clmoe__hash_init(clmoe_hash *h)
{
  h->a = FNV_OFFSET;
  h->b = FNV_OFFSET ^ 0x9e3779b97f4a7c15ULL;
}

void clmoe__hash_bytes(clmoe_hash *h, const void *data, size_t len)
{
  const unsigned char *p = data;
  uint64_t a = h->a, b = h->b;
  for (size_t i = 0; i < len; i++) {
    a = (a ^ p[i]) * FNV_PRIME;
    b = (b ^ (uint64_t)(p[i] + (i & 0xff) * 257u)) * FNV_PRIME;
    b ^= b >> 29;
  }
  h->a = a, h->b = b;
}

void clmoe__hash_str(clmoe_hash *h, const char *s) { clmoe__hash_bytes(h, s, strlen(s) + 1); }

void clmoe__hash_hex(const clmoe_hash *h, char out[33])
{
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)h->a, (unsigned long long)h->b);
}

uint64_t clmoe__fnv64(const void *data, size_t len)
{
  const unsigned char *p = data;
  uint64_t a = FNV_OFFSET;
  for (size_t i = 0; i < len; i++) a = (a ^ p[i]) * FNV_PRIME;
  return a;
}
