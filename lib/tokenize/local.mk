# lib/tokenize/local.mk: tokenizers (Hugging Face tokenizer.json byte-level BPE, tiktoken rank
# files; regexes through PCRE2) and their suite. Above runtime and io,
# below the model: it calls no model code.
lib_libclmoe_impl_la_SOURCES += lib/tokenize/tokenize_internal.h lib/tokenize/tok_json.c \
	lib/tokenize/tok_regex.c lib/tokenize/tok_table.c lib/tokenize/tok_bpe.c lib/tokenize/tok_hf.c lib/tokenize/tok_post.c \
	lib/tokenize/tok_tiktoken.c lib/tokenize/tok_encode.c
clmoeinclude_HEADERS += include/clmoe/tokenizer.h
AM_CPPFLAGS += $(PCRE2_CFLAGS)
lib_libclmoe_impl_la_LIBADD += $(PCRE2_LIBS)
lib_libclmoe_la_LIBADD += $(PCRE2_LIBS)
TEST_SUITES += tests/unit/test_tokenizer
