# lib/runtime/local.mk: the runtime (status codes, devices and their choice, contexts,
# programs and their cache, kernel launches, profiling, the buffer pool, tensors and the
# operators' argument checks, random fills, hwloc locality).
lib_libclmoe_impl_la_SOURCES += lib/runtime/internal.h lib/runtime/runtime_internal.h \
	lib/runtime/status.c lib/runtime/hash.c lib/runtime/device.c lib/runtime/device_choose.c \
	lib/runtime/context.c lib/runtime/program.c lib/runtime/program_cache.c \
	lib/runtime/launch.c lib/runtime/profile.c lib/runtime/counters.c lib/runtime/version.c lib/runtime/pool.c \
	lib/runtime/tensor.c lib/runtime/tensor_check.c lib/runtime/random.c \
	lib/runtime/locality.c lib/runtime/ptx_sm90a.h lib/runtime/ptx_sm90a.c \
	lib/runtime/knobs.c lib/runtime/knobs_device.c
clmoeinclude_HEADERS += include/clmoe/clmoe.h include/clmoe/api.h include/clmoe/status.h \
	include/clmoe/runtime.h \
	include/clmoe/program.h include/clmoe/tensor.h include/clmoe/locality.h
CLMOE_KERNEL_FILES += kernels_cl/runtime/common.cl kernels_cl/runtime/probe.cl \
	kernels_cl/runtime/tensor.cl kernels_cl/runtime/random.cl
check_libclmoecheck_la_SOURCES += check/check_random.c
TEST_SUITES += tests/unit/test_runtime tests/unit/test_device tests/unit/test_tensor
TESTS += tests/apps/test_knobs.sh
EXTRA_DIST += tests/apps/test_knobs.sh
