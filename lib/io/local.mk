# lib/io/local.mk: files (safetensors reading and writing with CRC-32C checksums, token shards
# and text data, the shard writer).
lib_libclmoe_impl_la_SOURCES += lib/io/checksum.h lib/io/checksum.c lib/io/safetensors_internal.h \
	lib/io/safetensors_common.c lib/io/safetensors_json.c lib/io/safetensors_checksum.c \
	lib/io/safetensors.c lib/io/safetensors_write.c lib/io/safetensors_stale.c \
	lib/io/data.c lib/io/shard_write.c
clmoeinclude_HEADERS += include/clmoe/safetensors.h include/clmoe/data.h
TEST_SUITES += tests/unit/test_checksum tests/unit/test_safetensors tests/unit/test_safetensors_corrupt \
	tests/unit/test_data
