# tests/fuzz/fuzz.mk (GNU make; run by `make fuzz` from the build folder, see
# tests/fuzz/local.mk): libFuzzer harnesses with AddressSanitizer and UndefinedBehavior
# Sanitizer. libclmoe's objects of the main build come from $(CC) without instrumentation,
# so every library source is compiled again with FUZZ_CC and the harnesses' flags into
# tests/fuzz/obj/, with the kernel and preset tables the main build generated
# and the build's commit (lib/kernels_embedded.c, lib/presets_embedded.c, lib/build_commit.c
# in the build folder).
#
# Given by the caller: srcdir, FUZZ_CC, FUZZ_FLAGS, CPPFLAGS_ALL (the main build's include
# paths, defines and warnings), HARNESSES (tests/fuzz/NAME.c each), LIB_SOURCES (the
# library's source list, headers included), LIBS_ALL (what libclmoe links).
OBJ = tests/fuzz/obj
LIB_C = $(filter %.c,$(LIB_SOURCES)) lib/kernels_embedded.c lib/presets_embedded.c lib/build_commit.c
LIB_OBJ = $(patsubst %.c,$(OBJ)/%.o,$(LIB_C))
BINS = $(addprefix tests/fuzz/,$(HARNESSES))

# sources: the build folder first (the generated tables), then the source tree
vpath %.c $(srcdir)

all: $(BINS)

$(OBJ)/%.o: %.c
	@mkdir -p $(@D)
	@echo "  FUZZCC   $<"
	@$(FUZZ_CC) $(FUZZ_FLAGS) $(CPPFLAGS_ALL) -MMD -MP -c -o $@ $<

tests/fuzz/%: $(OBJ)/tests/fuzz/%.o $(LIB_OBJ)
	@echo "  FUZZLD   $@"
	@$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(LIB_OBJ) $(LIBS_ALL)

-include $(LIB_OBJ:.o=.d) $(patsubst %,$(OBJ)/tests/fuzz/%.d,$(HARNESSES))

.PHONY: all
.SECONDARY:
