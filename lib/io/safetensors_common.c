/* What every safetensors file (reader, JSON header parser, writer) shares and nothing
 * else: the dtype table, the UTF-8 checks of names and metadata, the host's byte order.
 * It calls nothing of the others, so they form no cycle. */
#include "safetensors_internal.h"

#include <string.h>
#include "clmoe/safetensors.h"

const st_dtype_info clmoe__io_st_dtypes[CLMOE_ST_DTYPE_COUNT] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2},  {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"I64", 8},  {"U64", 8},     {"F64", 8}};

const char *clmoe_st_dtype_name(clmoe_st_dtype d)
{
  return (unsigned)d < CLMOE_ST_DTYPE_COUNT ? clmoe__io_st_dtypes[d].name : "?";
}

size_t clmoe_st_dtype_size(clmoe_st_dtype d)
{
  return (unsigned)d < CLMOE_ST_DTYPE_COUNT ? clmoe__io_st_dtypes[d].size : 0;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when it is not one:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
size_t clmoe__io_st_utf8_len(const unsigned char *s, size_t n)
{
  unsigned c = s[0];
  size_t len;
  unsigned lo = 0x80, hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  return len;
}

int clmoe__io_st_utf8_valid(const char *s)
{
  size_t n = strlen(s);
  for (size_t i = 0, k; i < n; i += k)
    if (!(k = clmoe__io_st_utf8_len((const unsigned char *)s + i, n - i))) return 0;
  return 1;
}

int clmoe__io_st_host_little_endian(void)
{
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 1;
}
