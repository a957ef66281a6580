#!/bin/sh
# clmoe's portability checks, after the test suite (scripts/check.sh), on every OpenCL
# implementation this machine has (PoCL, Intel's CPU runtime from
# scripts/install-intel-opencl.sh, a GPU driver):
#   1. clmoe-xcheck on every device: each check against its reference, then every pair of
#      devices against each other (build/conformance/xcheck.json);
#   2. the CUnit suites on each implementation with CLMOE_POISON=1 (every pooled buffer
#      handed out full of NaN, so a kernel that reads what it never wrote fails on every
#      device); CLMOE_VENDOR_PLAIN=1 runs them unpoisoned too (to tell a driver's failure
#      from a read of unwritten memory; check.sh ran them unpoisoned on its device);
#   3. make check-oclgrind: every check at its smallest sizes on the Oclgrind simulator,
#      with its race, API and uninitialised-value checks (when oclgrind is installed).
# CLMOE_REQUIRE_VENDORS=1 (CI) fails when PoCL, Intel's runtime or Oclgrind is missing
# instead of leaving it out. Extra arguments go to make. Exit status 0 when all passed.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
[ -f build/Makefile ] || { echo "check-vendors: no build/ (run sh scripts/quickstart.sh or sh scripts/check.sh first)" >&2; exit 1; }
cd build
require=${CLMOE_REQUIRE_VENDORS:-0}
jobs=$(nproc 2> /dev/null || echo 2)
make -j"$jobs" "$@" > /dev/null
start=$(date +%s)
status=0
export CLMOE_CACHE_DIR="$root/build/tests/kernel-cache"
# the commit into the reports, when this is a git checkout
CLMOE_COMMIT=${CLMOE_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2> /dev/null || true)}
export CLMOE_COMMIT

impls=$(./apps/clmoe-info --no-probe 2> /dev/null | sed -n 's/^ *impl  *\([A-Za-z0-9_-]*\) .*/\1/p' | sort -u | tr '\n' ' ')
echo "== OpenCL implementations here: ${impls:-none}"
for want in pocl intel; do
  case " $impls " in
    *" $want "*) ;;
    *) if [ "$require" = 1 ]; then
         echo "check-vendors: no '$want' implementation and CLMOE_REQUIRE_VENDORS=1 (Intel's: sh scripts/install-intel-opencl.sh, then . /opt/intel-opencl/env.sh)" >&2
         exit 1
       fi
       echo "== no '$want' implementation: left out" ;;
  esac
done

echo "== 1. clmoe-xcheck on every device, and every pair of devices"
mkdir -p conformance
if ./apps/clmoe-xcheck --json conformance/xcheck.json --quiet; then :; else status=1; fi

for impl in $impls; do
  echo "== 2. the suites on $impl, buffers poisoned"
  make check-device CHECK_DEVICE="$impl" CHECK_JOBS="$jobs" CHECK_ENV=CLMOE_POISON=1 || status=1
  if [ "${CLMOE_VENDOR_PLAIN:-0}" = 1 ]; then
    make check-device CHECK_DEVICE="$impl" CHECK_JOBS="$jobs" || status=1
  fi
done

if command -v "${OCLGRIND:-oclgrind}" > /dev/null 2>&1; then
  echo "== 3. every check at its smallest sizes on Oclgrind"
  make check-oclgrind || status=1
elif [ "$require" = 1 ]; then
  echo "check-vendors: no Oclgrind (Debian: apt-get install oclgrind) and CLMOE_REQUIRE_VENDORS=1" >&2
  status=1
else
  echo "== 3. no Oclgrind (Debian: oclgrind): left out"
fi

echo "== check-vendors took $(( $(date +%s) - start )) s"
[ "$status" -eq 0 ] && echo "== all portability checks passed" || echo "== portability checks FAILED"
exit "$status"
