# tests/local.mk: what the tests share. The CUnit suites (tests/unit/NAME.c, listed in
# TEST_SUITES by each subsystem's local.mk) are one word each: their source is NAME.c and
# they link the scaffolding (tests/unit/test_common.c, and the fixtures that several suites
# of one subsystem share: gen_fixture.c, st_fixture.h), the checks and the library's objects
# with the internals (lib/libclmoe_impl.la).
AM_DEFAULT_SOURCE_EXT = .c
check_LTLIBRARIES = tests/unit/libtestcommon.la
tests_unit_libtestcommon_la_SOURCES = tests/unit/test_common.h tests/unit/test_common.c \
	tests/unit/gen_fixture.h tests/unit/gen_fixture.c tests/unit/st_fixture.h
check_PROGRAMS += $(TEST_SUITES)
TESTS += $(TEST_SUITES)
# every suite (and no app: apps have an LDADD of their own)
AM_CPPFLAGS += $(CUNIT_CFLAGS)
LDADD = tests/unit/libtestcommon.la check/libclmoecheck.la lib/libclmoe_impl.la $(CUNIT_LIBS) \
	$(OPENCL_LIBS) -lm

# the installed API: headers alone in C and C++, the exported symbols; the library's
# layers (calls between subsystems go down, no call cycle between files)
TESTS += tests/apps/test_api.sh tests/apps/test_layers.sh
EXTRA_DIST += tests/apps/test_api.sh tests/apps/test_layers.sh

# checkpoints that detect corruption, through clmoe-train and clmoe-generate
TESTS += tests/apps/test_ckpt_integrity.sh
EXTRA_DIST += tests/apps/test_ckpt_integrity.sh

# inputs of the tests: malformed configs and data files (tests/data/bad), valgrind's
# suppressions of the drivers' own noise, the Oclgrind runner
EXTRA_DIST += tests/data tests/valgrind.supp tests/oclgrind.sh tests/peers
AM_TESTS_ENVIRONMENT = \
	CLMOE_CACHE_DIR=$(abs_top_builddir)/tests/kernel-cache; export CLMOE_CACHE_DIR; \
	CLMOE_APPS_DIR=$(abs_top_builddir)/apps; export CLMOE_APPS_DIR; \
	CLMOE_SRCDIR=$(abs_top_srcdir); export CLMOE_SRCDIR; \
	MPIRUN='$(MPIRUN)'; export MPIRUN; \
	CLMOE_HAVE_MPI='$(HAVE_MPI_FLAG)'; export CLMOE_HAVE_MPI; \
	CLMOE_LIB_DIR=$(abs_top_builddir)/lib/.libs; export CLMOE_LIB_DIR; \
	CC='$(CC)'; CXX='$(CXX)'; export CC CXX; \
	OPENCL_CFLAGS='$(OPENCL_CFLAGS) -DCL_TARGET_OPENCL_VERSION=120'; export OPENCL_CFLAGS; \
	MPI_CFLAGS='$(MPI_CFLAGS)'; export MPI_CFLAGS;

if !HAVE_CUNIT
check-local:
	@echo "*** CUnit is missing: install libcunit1-dev and re-run configure to build the tests ***"
	@exit 1
endif

clean-local:
	rm -rf tests/kernel-cache tests/oclgrind

# The CUnit suites again on one device, CHECK_DEVICE (an implementation such as intel, or
# P:D), with CHECK_ENV set for each (e.g. CLMOE_POISON=1), CHECK_JOBS suites at a time;
# logs tests/unit/NAME.DEVICE.log. A suite that finds no such device fails (it was asked for).
CHECK_JOBS = 1
.PHONY: check-device
check-device: $(check_PROGRAMS)
	@test -n '$(CHECK_DEVICE)' || { echo "make check-device CHECK_DEVICE=SPEC [CHECK_ENV='VAR=VALUE ...']"; exit 1; }
	@echo "== the CUnit suites on CHECK_DEVICE=$(CHECK_DEVICE) $(CHECK_ENV)"; \
	start=$$(date +%s); \
	printf '%s\n' $(TEST_SUITES) | \
	  CLMOE_DEVICE='$(CHECK_DEVICE)' CLMOE_CACHE_DIR=$(abs_top_builddir)/tests/kernel-cache \
	  CLMOE_SRCDIR=$(abs_top_srcdir) xargs -P '$(CHECK_JOBS)' -I '{}' sh -c \
	  'log={}.$$(printf %s "$$CLMOE_DEVICE" | tr -c "A-Za-z0-9_\n" _).log; \
	   if env $(CHECK_ENV) ./{} > "$$log" 2>&1; then echo "PASS: {}"; \
	   else echo "FAIL: {} (exit $$?; $$log)"; grep -E "FAIL|SKIP|error" "$$log" | head -20; exit 1; fi' \
	  && echo "== all suites passed on $(CHECK_DEVICE) ($$(( $$(date +%s) - start )) s)" \
	  || { echo "== suites FAILED on $(CHECK_DEVICE)"; exit 1; }

# Every conformance check at its smallest sizes on Oclgrind with its race, API and
# uninitialised-value checks (tests/oclgrind.sh; Debian package oclgrind).
.PHONY: check-oclgrind
check-oclgrind: apps/clmoe-xcheck$(EXEEXT)
	LIBTOOL='$(LIBTOOL)' OCLGRIND='$(OCLGRIND)' sh $(srcdir)/tests/oclgrind.sh apps/clmoe-xcheck$(EXEEXT) tests/oclgrind

# Runs every test suite under valgrind's memcheck with the committed suppressions
# (only the OpenCL drivers' own noise is suppressed).
if HAVE_VALGRIND
check-valgrind: $(check_PROGRAMS)
	@fail=0; for t in $(TEST_SUITES); do \
	  echo "== valgrind $$t"; \
	  CLMOE_CACHE_DIR=$(abs_top_builddir)/tests/kernel-cache CLMOE_SRCDIR=$(abs_top_srcdir) \
	  $(LIBTOOL) --mode=execute $(VALGRIND) --error-exitcode=9 --leak-check=full \
	    --errors-for-leak-kinds=definite --suppressions=$(srcdir)/tests/valgrind.supp \
	    --gen-suppressions=all -q ./$$t > $$t.valgrind.log 2>&1 || { fail=1; tail -50 $$t.valgrind.log; }; \
	done; exit $$fail
endif
