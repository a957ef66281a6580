# tests/fuzz/local.mk: the libFuzzer harnesses (tests/fuzz/fuzz_*.c, each with its README
# at the top) over the readers of untrusted input: safetensors, configs, training data,
# checkpoints, the kernel cache, tokenizer files and text, Hugging Face config.json files. Built only on request, with FUZZ_CC (clang, found by
# configure) and ASan + UBSan, by tests/fuzz/fuzz.mk; run by scripts/fuzz.sh on a copy of
# the seed corpora tests/fuzz/corpus/<harness>/.
#   make fuzz        builds tests/fuzz/fuzz_* in the build folder (without clang and libFuzzer:
#                    a note, and success)
#   make fuzz-short  builds and runs each harness FUZZ_SHORT_SECONDS (15 s): CI
#   make fuzz-long   builds and runs each harness FUZZ_SECONDS (3600 s)
FUZZ_FLAGS = -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -pthread \
	-fno-omit-frame-pointer
FUZZ_SHORT_SECONDS = 15
FUZZ_SECONDS = 3600
FUZZ_HARNESSES = fuzz_safetensors fuzz_config fuzz_data fuzz_ckpt fuzz_kernel_cache fuzz_tokenizer \
	fuzz_hf_config
EXTRA_DIST += tests/fuzz/fuzz.mk tests/fuzz/fuzz_common.h tests/fuzz/lsan.supp tests/fuzz/corpus \
	tests/fuzz/fuzz_safetensors.c tests/fuzz/fuzz_config.c tests/fuzz/fuzz_data.c \
	tests/fuzz/fuzz_ckpt.c tests/fuzz/fuzz_kernel_cache.c tests/fuzz/fuzz_tokenizer.c \
	tests/fuzz/fuzz_hf_config.c scripts/fuzz.sh

.PHONY: fuzz
if HAVE_LIBFUZZER
fuzz: lib/kernels_embedded.c lib/presets_embedded.c
	@$(MAKE) -r --no-print-directory -f $(srcdir)/tests/fuzz/fuzz.mk srcdir='$(srcdir)' \
	  FUZZ_CC='$(FUZZ_CC)' FUZZ_FLAGS='$(FUZZ_FLAGS)' \
	  CPPFLAGS_ALL='$(DEFS) $(AM_CPPFLAGS) $(CPPFLAGS) $(CLMOE_WARN_CFLAGS)' \
	  HARNESSES='$(FUZZ_HARNESSES)' LIB_SOURCES='$(lib_libclmoe_impl_la_SOURCES)' \
	  LIBS_ALL='$(lib_libclmoe_impl_la_LIBADD) $(LIBS)'
else
fuzz:
	@echo "make fuzz: no clang with libFuzzer was found by configure (FUZZ_CC='$(FUZZ_CC)'):"
	@echo "  the fuzz harnesses are not built (Debian: apt-get install clang libclang-rt-14-dev)"
endif

# scripts/fuzz.sh exits 77 without libFuzzer: a note, not a failure, as for make fuzz
.PHONY: fuzz-short fuzz-long
fuzz-short:
	@MAKE='$(MAKE)' $(SHELL) $(srcdir)/scripts/fuzz.sh $(FUZZ_SHORT_SECONDS) $(FUZZ_HARNESSES); \
	  rc=$$?; test $$rc -eq 77 || exit $$rc
fuzz-long:
	@MAKE='$(MAKE)' $(SHELL) $(srcdir)/scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_HARNESSES); \
	  rc=$$?; test $$rc -eq 77 || exit $$rc

clean-local: clean-fuzz
.PHONY: clean-fuzz
clean-fuzz:
	rm -rf tests/fuzz/obj tests/fuzz/run
	for h in $(FUZZ_HARNESSES); do rm -f tests/fuzz/$$h; done
