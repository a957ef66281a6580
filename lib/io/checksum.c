/* CRC-32C (Castagnoli): the reflected polynomial 0x82F63B78, initial value and final XOR
 * 0xFFFFFFFF, as iSCSI, ext4 and SSE4.2's crc32 instruction use it. Eight bytes a step
 * through eight 256-entry tables ("slice by 8", about 2 GB/s on one core), built from the
 * polynomial on first use; bit by bit while another thread builds them. */
#include "checksum.h"

#include <stdatomic.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t tables[8][256]; /* tables[k][b]: b followed by k zero bytes */
static atomic_int tables_state; /* 0: not built, 1: being built, 2: ready */

static uint32_t shift_bit(uint32_t c) { return (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u))); }

/* 1 when the tables can be used: built now by this call or earlier by any thread. */
static int tables_ready(void)
{
  if (atomic_load_explicit(&tables_state, memory_order_acquire) == 2) return 1;
  int expect = 0;
  if (!atomic_compare_exchange_strong(&tables_state, &expect, 1)) return 0;
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t c = b;
    for (int k = 0; k < 8; k++) c = shift_bit(c);
    tables[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; b++)
    for (int k = 1; k < 8; k++) tables[k][b] = (tables[k - 1][b] >> 8) ^ tables[0][tables[k - 1][b] & 0xFFu];
  atomic_store_explicit(&tables_state, 2, memory_order_release);
  return 1;
}

uint32_t clmoe__io_crc32c(uint32_t crc, const void *data, size_t n)
{
  const unsigned char *p = data;
  uint32_t c = ~crc;
  if (!tables_ready()) {
    while (n--) {
      c ^= *p++;
      for (int k = 0; k < 8; k++) c = shift_bit(c);
    }
    return ~c;
  }
  for (; n >= 8; p += 8, n -= 8) { /* bytes in file order: the same on every host */
    uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    c = tables[7][lo & 0xFFu] ^ tables[6][(lo >> 8) & 0xFFu] ^ tables[5][(lo >> 16) & 0xFFu] ^ tables[4][lo >> 24] ^
        tables[3][p[4]] ^ tables[2][p[5]] ^ tables[1][p[6]] ^ tables[0][p[7]];
  }
  while (n--) c = (c >> 8) ^ tables[0][(c ^ *p++) & 0xFFu];
  return ~c;
}
