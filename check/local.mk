# check/local.mk: the conformance harness (the registry of every subsystem's checks, the
# runner and its comparison measures) and the references the subsystems share (GEMM,
# pointwise functions, reductions, the linear layer). Each subsystem's checks and its own
# references are listed in its lib/<subsystem>/local.mk.
check_libclmoecheck_la_SOURCES += check/conformance.h check/registry.c check/harness.c \
	check/ref/reference.h check/ref/ref_core.c
# the few-token GEMV of the decode step (lib/ops/ops_gemv.c, through clmoe_gen_gemv)
check_libclmoecheck_la_SOURCES += check/check_gemv.c
