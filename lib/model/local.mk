# lib/model/local.mk: the model (config and presets, parameters and checkpoints, Block
# AttnRes, the stack's forward and backward, the data-parallel gradient reduction and the
# synchronisation of replicated parameters).
lib_libclmoe_impl_la_SOURCES += lib/model/model_internal.h lib/model/params_internal.h \
	lib/model/model_config.c lib/model/model_config_rules.c lib/model/model_config_write.c lib/model/attn_res.c \
	lib/model/params.c lib/model/params_ckpt.c lib/model/model.c lib/model/model_stack.c \
	lib/model/model_run.c lib/model/model_step.c lib/model/model_precision.c lib/model/dist_grads.c lib/model/dist_replicas.c
clmoeinclude_HEADERS += include/clmoe/model_config.h include/clmoe/attn_res.h \
	include/clmoe/params.h include/clmoe/model.h include/clmoe/dist_grads.h
CLMOE_KERNEL_FILES += kernels_cl/model/attn_res.cl
check_libclmoecheck_la_SOURCES += check/ref/ref_layers.h check/ref/ref_layers.c \
	check/check_layers.c
TEST_SUITES += tests/unit/test_config tests/unit/test_layers tests/unit/test_params \
	tests/unit/test_model tests/unit/test_model_plain
# the bucketed gradient all-reduce and the QB histogram sum, under mpirun; training with
# experts over ranks, and with ranks on two vendors' OpenCL
check_PROGRAMS += tests/mpi/mpi_grads
tests_mpi_mpi_grads_SOURCES = tests/mpi/mpi_grads.c tests/mpi/mpi_common.h
tests_mpi_mpi_grads_LDADD = lib/libclmoe.la $(OPENCL_LIBS) -lm
TESTS += tests/mpi/test_dist_grads.sh tests/mpi/test_ep_train.sh tests/mpi/test_ep_train_bf16.sh tests/mpi/test_vendors.sh
# bf16 training ([train] precision) against fp32 on the tiny preset, and its resume
TESTS += tests/apps/test_train_bf16.sh
EXTRA_DIST += tests/apps/test_train_bf16.sh
EXTRA_DIST += tests/mpi/test_dist_grads.sh tests/mpi/test_ep_train.sh tests/mpi/test_ep_train_bf16.sh \
	tests/mpi/test_vendors.sh
