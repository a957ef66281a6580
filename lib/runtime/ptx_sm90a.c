/* PTX retargeting for sm_90a (see ptx_sm90a.h). The first build of such a program (source,
 * instructions hidden in comments) has already allocated every operand's register; here
 * the text is only edited, and the driver's assembler builds the result. */
#include "ptx_sm90a.h"

#include <stdlib.h>
#include <string.h>

/* Position of ".target sm_90" in text[0..n) whose architecture name ends there or with "a"
 * (sm_90a); -1 if none. *has_a says which. */
static long find_target(const char *text, size_t n, int *has_a)
{
  static const char key[] = ".target sm_90";
  const size_t klen = sizeof key - 1;
  for (size_t i = 0; i + klen <= n; i++) {
    if (memcmp(text + i, key, klen)) continue;
    char next = i + klen < n ? text[i + klen] : '\0';
    if (next == 'a') {
      char after = i + klen + 1 < n ? text[i + klen + 1] : '\0';
      if (after == ',' || after == ' ' || after == '\n' || after == '\r' || after == '\t' || after == '\0') {
        *has_a = 1;
        return (long)i;
      }
    } else if (next == ',' || next == ' ' || next == '\n' || next == '\r' || next == '\t' || next == '\0') {
      *has_a = 0;
      return (long)i;
    }
  }
  return -1;
}

clmoe_status clmoe__ptx_sm90a(const unsigned char *ptx, size_t n, unsigned char **out, size_t *out_n)
{
  *out = NULL, *out_n = 0;
  const char *text = (const char *)ptx;
  int has_a = 0;
  long target = find_target(text, n, &has_a);
  if (target < 0)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "PTX retargeting: the compiler's PTX does not target sm_90 "
                        "(the warp-group instructions exist on sm_90a only)");
  char *dst = malloc(n + 2);
  if (!dst) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory");
  static const char mark[] = CLMOE_PTX_SM90A_MARK, version[] = ".version ";
  const size_t mlen = sizeof mark - 1, vlen = sizeof version - 1;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    if ((long)i == target && !has_a) { /* ".target sm_90" -> ".target sm_90a" */
      memcpy(dst + o, ".target sm_90a", 14);
      o += 14, i += 13;
    } else if (i + mlen <= n && !memcmp(text + i, mark, mlen)) {
      i += mlen;
    } else if (i + vlen + 3 <= n && !memcmp(text + i, version, vlen) && text[i + vlen] >= '0' &&
               text[i + vlen] <= '7' && text[i + vlen + 1] == '.' && text[i + vlen + 2] >= '0' &&
               text[i + vlen + 2] <= '9') { /* ".version 7.x" -> ".version 8.0" */
      memcpy(dst + o, ".version 8.0", vlen + 3);
      o += vlen + 3, i += vlen + 3;
    } else
      dst[o++] = text[i++];
  }
  *out = (unsigned char *)dst, *out_n = o;
  return CLMOE_OK;
}
