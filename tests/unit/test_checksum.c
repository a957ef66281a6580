/* CUnit suite: checksums of files. CRC-32C against its published test vectors and a plain
 * bit-by-bit reference, in one piece and in many. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checksum.h"
#include "test_common.h"

/* The definition, one bit at a time: reflected polynomial 0x82F63B78, ~0 in and out. */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

/* RFC 3720 (iSCSI) B.4 and the common "check" value. */
static void test_crc32c_vectors(void)
{
  unsigned char buf[32];
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, "123456789", 9), 0xE3069283u);
  memset(buf, 0, sizeof buf);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, buf, 32), 0x8A9136AAu);
  memset(buf, 0xFF, sizeof buf);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, buf, 32), 0x113FDB5Cu);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0, "", 0), 0u);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(0x12345678u, NULL, 0), 0x12345678u);
}

/* Random buffers at every length up to 300 (all alignments of the 8-byte steps) against
 * the bitwise reference, and each cut into random pieces. */
static void test_crc32c_pieces(void)
{
  enum { N = 4096 };
  unsigned char *buf = malloc(N + 8);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  uint64_t s = test_seed | 1;
  for (int i = 0; i < N + 8; i++) s ^= s << 13, s ^= s >> 7, s ^= s << 17, buf[i] = (unsigned char)s;
  int bad = 0;
  for (size_t len = 0; len <= 300; len++)
    for (size_t off = 0; off < 8; off += 3) {
      uint32_t want = crc32c_bitwise(buf + off, len);
      bad += clmoe__io_crc32c(0, buf + off, len) != want;
      uint32_t c = 0;
      for (size_t at = 0; at < len;) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t piece = (size_t)(s % 23);
        if (piece > len - at) piece = len - at;
        c = clmoe__io_crc32c(c, buf + off + at, piece);
        at += piece;
      }
      bad += c != want;
    }
  uint32_t whole = clmoe__io_crc32c(0, buf, N), a = clmoe__io_crc32c(0, buf, 1000);
  CU_ASSERT_EQUAL(clmoe__io_crc32c(a, buf + 1000, N - 1000), whole);
  CU_ASSERT_EQUAL(whole, crc32c_bitwise(buf, N));
  if (bad) fprintf(stderr, "\n  %d CRC-32C mismatches (seed %llu)\n", bad, (unsigned long long)test_seed);
  CU_ASSERT_EQUAL(bad, 0);
  /* one flipped bit anywhere changes the crc */
  int same = 0;
  for (int bit = 0; bit < 8 * 64; bit++) {
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    same += clmoe__io_crc32c(0, buf, N) == whole;
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
  }
  CU_ASSERT_EQUAL(same, 0);
  free(buf);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "crc32c_vectors", test_crc32c_vectors);
  CU_add_test(suite, "crc32c_pieces", test_crc32c_pieces);
}

int main(void) { return test_main("checksum", add_tests); }
