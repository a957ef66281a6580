/* CRC-32C (Castagnoli), the checksum of safetensors files' tensors and metadata
 * (checksum.c); not installed. */
#ifndef CLMOE_IO_CHECKSUM_H
#define CLMOE_IO_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of n bytes at data, continuing from crc (0 to start): the crc of a buffer
 * given in pieces, each call passing the previous result, equals the crc of the whole.
 * "123456789" gives 0xE3069283. Thread-safe. */
uint32_t clmoe__io_crc32c(uint32_t crc, const void *data, size_t n);

#endif
