# apps/local.mk: the command-line apps and their tests (tests/apps/). The benchmark and
# clmoe-op parts of a subsystem are listed in its lib/<subsystem>/local.mk.
bin_PROGRAMS += apps/clmoe-info apps/clmoe-xcheck apps/clmoe-bench apps/clmoe-op \
	apps/clmoe-train apps/clmoe-plan apps/clmoe-generate apps/clmoe-tokenize
APP_COMMON = apps/app_common.h apps/app_common.c apps/app_dist.c
APP_LIBS = lib/libclmoe.la $(OPENCL_LIBS) -lm
apps_clmoe_info_SOURCES = apps/clmoe_info.c $(APP_COMMON)
apps_clmoe_info_LDADD = $(APP_LIBS)
apps_clmoe_xcheck_SOURCES = apps/clmoe_xcheck.c apps/xcheck.h apps/xcheck_pairs.c \
	apps/xcheck_json.c apps/xcheck_report.c $(APP_COMMON)
apps_clmoe_xcheck_LDADD = check/libclmoecheck.la $(APP_LIBS)
apps_clmoe_bench_SOURCES += apps/clmoe_bench.c apps/bench.h apps/bench_common.c $(APP_COMMON)
apps_clmoe_bench_LDADD = $(APP_LIBS)
# (the generate subsystem's benchmarks: the device sampler, the decode step's GEMV)
apps_clmoe_bench_SOURCES += apps/bench_sample.c apps/bench_gemv.c
apps_clmoe_train_SOURCES = apps/clmoe_train.c apps/train_run.h apps/train_run.c apps/train_ckpt.c \
	apps/train_report.c apps/train_dir.c $(APP_COMMON)
apps_clmoe_train_LDADD = $(APP_LIBS)
apps_clmoe_op_SOURCES += apps/clmoe_op.c apps/clmoe_op.h apps/op_common.c $(APP_COMMON)
apps_clmoe_op_LDADD = $(APP_LIBS)
apps_clmoe_plan_SOURCES = apps/clmoe_plan.c apps/plan_model.c apps/plan_model.h $(APP_COMMON)
apps_clmoe_plan_LDADD = $(APP_LIBS)
apps_clmoe_generate_SOURCES = apps/clmoe_generate.c apps/generate_options.c apps/generate_report.c \
	apps/generate_tokens.c apps/generate_app.h $(APP_COMMON)
apps_clmoe_generate_LDADD = $(APP_LIBS)
apps_clmoe_tokenize_SOURCES = apps/clmoe_tokenize.c $(APP_COMMON)
apps_clmoe_tokenize_LDADD = $(APP_LIBS)

TESTS += tests/apps/test_apps.sh tests/apps/test_op.sh tests/apps/test_train.sh \
	tests/apps/test_xcheck.sh tests/apps/test_plan.sh tests/apps/test_tokenize.sh
EXTRA_DIST += tests/apps/apps_common.sh tests/apps/test_apps.sh tests/apps/test_op.sh \
	tests/apps/test_train.sh tests/apps/test_xcheck.sh tests/apps/test_plan.sh tests/apps/test_tokenize.sh
# the user guide's Slurm chain under an emulated Slurm; every command of README.md and the
# user guide, run small
TESTS += tests/apps/test_slurm.sh tests/apps/test_docs.sh
EXTRA_DIST += tests/apps/test_slurm.sh tests/apps/test_docs.sh tests/apps/docs/doc-wrap.sh

# the command-line conventions of every app (--version, man pages, --json -), with a strict
# JSON validator of the tests' own
TESTS += tests/apps/test_cli.sh
EXTRA_DIST += tests/apps/test_cli.sh
check_PROGRAMS += tests/apps/json_check
tests_apps_json_check_SOURCES = tests/apps/json_check.c
tests_apps_json_check_LDADD =

