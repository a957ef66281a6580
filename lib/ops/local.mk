# lib/ops/local.mk: pointwise ops, reductions, the linear layer, RMSNorm, softmax and
# cross-entropy, embedding, the device sort, AdamW; each with its backward.
lib_libclmoe_impl_la_SOURCES += lib/ops/ops_internal.h lib/ops/ops_elementwise.c \
	lib/ops/ops_reduce.c lib/ops/ops_linear.c lib/ops/ops_norm.c lib/ops/ops_softmax.c \
	lib/ops/ops_embedding.c lib/ops/ops_optim.c lib/ops/ops_gemv.c lib/ops/sort.c
clmoeinclude_HEADERS += include/clmoe/ops.h
CLMOE_KERNEL_FILES += kernels_cl/ops/elementwise.cl kernels_cl/ops/reduce.cl \
	kernels_cl/ops/norm.cl kernels_cl/ops/softmax.cl kernels_cl/ops/embedding.cl \
	kernels_cl/ops/optim.cl kernels_cl/ops/sort.cl kernels_cl/ops/gemv.cl
check_libclmoecheck_la_SOURCES += check/ref/ref_norm.c check/ref/ref_embed.c \
	check/check_pointwise.c check/check_reduce.c check/check_linear.c check/check_norm.c \
	check/check_embed.c
TEST_SUITES += tests/unit/test_ops tests/unit/test_norm tests/unit/test_embed
