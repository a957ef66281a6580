# lib/hf/local.mk: Hugging Face Kimi Linear checkpoints (config.json in both forms, sharded
# safetensors with the hub's tensor names) -> an inference model. Above the model, beside
# generate: it calls model, io and tokenize's JSON reader, and nothing calls it but apps.
lib_libclmoe_impl_la_SOURCES += lib/hf/hf_internal.h lib/hf/hf_config.c lib/hf/hf_weights.c \
	lib/hf/hf_load.c
clmoeinclude_HEADERS += include/clmoe/hf.h
TEST_SUITES += tests/unit/test_hf
# clmoe-generate --model on the tiny checkpoints of tests/data/kimi_linear against the logits
# and greedy tokens transformers computed (hf_logits_check compares the rows), and under
# mpirun with the experts spread over ranks
TESTS += tests/apps/test_hf.sh tests/mpi/test_hf_ep.sh
EXTRA_DIST += tests/apps/test_hf.sh tests/mpi/test_hf_ep.sh tests/apps/hf_fixture.sh
check_PROGRAMS += tests/apps/hf_logits_check
tests_apps_hf_logits_check_SOURCES = tests/apps/hf_logits_check.c
tests_apps_hf_logits_check_LDADD = lib/libclmoe.la -lm
