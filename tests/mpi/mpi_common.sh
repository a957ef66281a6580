# Sourced by the MPI tests (test_mpi.sh, test_moe_ep.sh, test_dist_grads.sh) after
# apps_common.sh: skips (77) without MPI, a launcher or a device; sets $tests (the built
# test programs) and run (mpirun with the flags, under a time limit).
if [ "${CLMOE_HAVE_MPI:-0}" != 1 ]; then
  echo "SKIP: clmoe was built without MPI (configure --with-mpi=yes)"; exit 77
fi
mpirun=${MPIRUN:-mpirun}
if ! command -v "$mpirun" > /dev/null 2>&1; then
  echo "SKIP: no MPI launcher ($mpirun)"; exit 77
fi
skip_without_device
tests=${CLMOE_TESTS_DIR:-$(dirname "$apps")/tests/mpi}
# Open MPI refuses root and more ranks than cores unless told; these flags are harmless
# for an ordinary user. Other launchers: set MPIRUN_FLAGS.
flags=${MPIRUN_FLAGS:---oversubscribe --allow-run-as-root}
# A hang must fail the test, not the CI job. The limit (CLMOE_MPI_TIMEOUT seconds) leaves
# room for a loaded 2-core machine: a CPU-device training step of two ranks there has taken
# close to a minute.
mpi_timeout=${CLMOE_MPI_TIMEOUT:-300}
run() { timeout "$mpi_timeout" "$mpirun" $flags "$@"; }
