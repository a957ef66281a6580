#!/bin/sh
# clmoe quick start, part 2 of 2 (README): the whole test suite (CUnit suites and app
# tests on the default OpenCL device), in ./build; configures and builds first if needed.
# Extra arguments go to make (for example VERBOSE=1).
set -eu
cd "$(dirname "$0")/.."
[ -x configure ] || autoreconf -fi
mkdir -p build
cd build
[ -f Makefile ] || ../configure
make -j"$(nproc)"
status=0
make -j"$(nproc)" check "$@" || status=$?
# Show each suite's CUnit summary and any failure in full.
for log in tests/*/*.log; do
  [ -f "$log" ] || continue
  echo "---- $log"
  grep -E "Run Summary|suites|tests |asserts|FAIL|SKIP|failure" "$log" || true
done
[ "$status" -eq 0 ] && echo "== all tests passed" || { cat test-suite.log; echo "== tests FAILED"; }
exit "$status"
