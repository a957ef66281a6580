# lib/generate/local.mk: generation (checkpoint loading, KDA states and the MLA cache,
# prefill and decoding of a batch, sampling) and clmoe-generate.
lib_libclmoe_impl_la_SOURCES += lib/generate/generate_internal.h lib/generate/generate_load.c \
	lib/generate/generate_state.c lib/generate/generate_run.c lib/generate/generate_decode.c lib/generate/generate_sample.c \
	lib/generate/generate_fused.c lib/generate/generate_kda.c lib/generate/generate_weights.c
clmoeinclude_HEADERS += include/clmoe/generate.h
CLMOE_KERNEL_FILES += kernels_cl/generate/gen_step.cl kernels_cl/generate/gen_attn_res.cl \
	kernels_cl/generate/gen_sample_math.cl kernels_cl/generate/gen_sample_select.cl \
	kernels_cl/generate/gen_sample.cl kernels_cl/generate/gen_sample_split.cl
# the sampler's double-precision rule and the device sampler's check
check_libclmoecheck_la_SOURCES += check/ref/ref_sample.h check/ref/ref_sample.c check/check_sample.c
TEST_SUITES += tests/unit/test_generate tests/unit/test_generate_weights tests/unit/test_sample \
	tests/unit/test_generate_prefill tests/unit/test_generate_plain
TESTS += tests/apps/test_generate.sh
EXTRA_DIST += tests/apps/test_generate.sh
# bf16 weights under expert parallelism, under mpirun (tests/mpi/)
check_PROGRAMS += tests/mpi/mpi_gen_weights
tests_mpi_mpi_gen_weights_SOURCES = tests/mpi/mpi_gen_weights.c tests/mpi/mpi_common.h
tests_mpi_mpi_gen_weights_LDADD = lib/libclmoe.la $(OPENCL_LIBS) -lm
TESTS += tests/mpi/test_gen_weights.sh
EXTRA_DIST += tests/mpi/test_gen_weights.sh
