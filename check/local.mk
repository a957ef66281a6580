# check/local.mk: the conformance harness (the registry of every subsystem's checks, the
# runner and its comparison measures) and the references and checks that span several
# subsystems (tensors, random fills, GEMM, pointwise ops and reductions). Each subsystem's
# own references and checks are listed in its lib/<subsystem>/local.mk.
check_libclmoecheck_la_SOURCES += check/conformance.h check/registry.c check/harness.c \
	check/ref/reference.h check/ref/ref_core.c check/check_core.c
