# tests/fuzz/local.mk: the libFuzzer harnesses (tests/fuzz/fuzz_*.c, each with its README
# at the top) over the readers of untrusted input: safetensors, configs, training data,
# checkpoints, the kernel cache. Built only on request, with FUZZ_CC (clang, found by
# configure) and ASan + UBSan, by tests/fuzz/fuzz.mk; run by scripts/fuzz.sh on a copy of
# the seed corpora tests/fuzz/corpus/<harness>/.
#   make fuzz      builds tests/fuzz/fuzz_* in the build folder (without clang and libFuzzer:
#                  a note, and success)
FUZZ_FLAGS = -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -pthread \
	-fno-omit-frame-pointer
FUZZ_HARNESSES = fuzz_safetensors fuzz_config fuzz_data fuzz_ckpt fuzz_kernel_cache
EXTRA_DIST += tests/fuzz/fuzz.mk tests/fuzz/fuzz_common.h tests/fuzz/lsan.supp tests/fuzz/corpus \
	tests/fuzz/fuzz_safetensors.c tests/fuzz/fuzz_config.c tests/fuzz/fuzz_data.c \
	tests/fuzz/fuzz_ckpt.c tests/fuzz/fuzz_kernel_cache.c

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

clean-local: clean-fuzz
.PHONY: clean-fuzz
clean-fuzz:
	rm -rf tests/fuzz/obj tests/fuzz/run
	for h in $(FUZZ_HARNESSES); do rm -f tests/fuzz/$$h; done
