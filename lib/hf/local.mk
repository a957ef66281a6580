# lib/hf/local.mk: Hugging Face Kimi Linear checkpoints (config.json in both forms, sharded
# safetensors with the hub's tensor names) -> an inference model. Above the model, beside
# generate: it calls model, io and tokenize's JSON reader, and nothing calls it but apps.
lib_libclmoe_impl_la_SOURCES += lib/hf/hf_internal.h lib/hf/hf_config.c lib/hf/hf_weights.c \
	lib/hf/hf_load.c
clmoeinclude_HEADERS += include/clmoe/hf.h
TEST_SUITES += tests/unit/test_hf
