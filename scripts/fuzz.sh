#!/bin/sh
# scripts/fuzz.sh SECONDS [HARNESS...]: builds the libFuzzer harnesses (make fuzz) and runs
# each (all of tests/fuzz/fuzz_*, or those named) for SECONDS on a fresh copy of its seed
# corpus, with AddressSanitizer (leak checker on) and UndefinedBehaviorSanitizer; prints the
# executions of each and "N passed, M failed". Run it from the build folder (make fuzz-short
# and make fuzz-long do). A crash, leak, sanitizer report, timeout (-timeout per input) or
# out-of-memory stops that harness; its input is kept as tests/fuzz/run/HARNESS/crash-*
# (leak-*, timeout-*, oom-*) and its log as tests/fuzz/run/HARNESS/log. Reproduce with
# tests/fuzz/HARNESS FILE.
# Exit: 0 clean, 1 a finding, 2 bad usage or build failure, 77 no clang with libFuzzer.
# Environment: MAKE (make), FUZZ_TIMEOUT (per input, 60 s), FUZZ_RSS_MB (3072),
# FUZZ_MALLOC_MB (largest single allocation, 1024).
set -u
secs=${1:-}
case $secs in ''|*[!0-9]*) echo "usage: scripts/fuzz.sh SECONDS [HARNESS...]" >&2; exit 2 ;; esac
shift
srcdir=$(cd "$(dirname "$0")/.." && pwd)
build=$(pwd)
[ -f Makefile ] || { echo "fuzz.sh: run it from the build folder (no Makefile in $build)" >&2; exit 2; }
harnesses=${*:-fuzz_safetensors fuzz_config fuzz_data fuzz_ckpt fuzz_kernel_cache fuzz_tokenizer fuzz_hf_config}

start=$(date +%s)
${MAKE:-make} --no-print-directory fuzz || { echo "fuzz.sh: make fuzz failed" >&2; exit 2; }
built=$(( $(date +%s) - start ))
for h in $harnesses; do
  if [ ! -x "tests/fuzz/$h" ]; then
    echo "fuzz.sh: tests/fuzz/$h was not built (no clang with libFuzzer: see make fuzz above): skipped"
    exit 77
  fi
done
echo "== fuzz: built in $built s; $secs s per harness"

# extra seeds from the test data: the malformed inputs of the suites
extra_seeds() {
  case $1 in
    fuzz_config) echo "$srcdir"/tests/data/bad/config/*.conf ;;
    fuzz_data) echo "$srcdir"/tests/data/bad/data/*.tok ;;
  esac
}

passed=0 failed=0
for h in $harnesses; do
  run=$build/tests/fuzz/run/$h
  rm -rf "$run"
  mkdir -p "$run/corpus"
  [ -d "$srcdir/tests/fuzz/corpus/$h" ] && cp "$srcdir/tests/fuzz/corpus/$h"/* "$run/corpus/"
  for f in $(extra_seeds $h); do cp "$f" "$run/corpus/"; done
  seeds=$(ls "$run/corpus" | wc -l)
  t0=$(date +%s)
  # the harnesses that need a device write their valid seed (a checkpoint, a cache entry of
  # this device) into CLMOE_FUZZ_SEED_DIR; the kernels come from the suites' cache
  (cd "$run" && env CLMOE_FUZZ_SEED_DIR="$run/corpus" \
     CLMOE_CACHE_DIR="${CLMOE_CACHE_DIR:-$build/tests/kernel-cache}" \
     ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=1" \
     LSAN_OPTIONS="suppressions=$srcdir/tests/fuzz/lsan.supp:print_suppressions=0" \
     UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
     "$build/tests/fuzz/$h" -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-60}" \
     -rss_limit_mb="${FUZZ_RSS_MB:-3072}" -malloc_limit_mb="${FUZZ_MALLOC_MB:-1024}" \
     -print_final_stats=1 -artifact_prefix="$run/" "$run/corpus" > "$run/log" 2>&1)
  rc=$?
  took=$(( $(date +%s) - t0 ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log" | tail -1)
  per_s=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$run/log" | tail -1)
  found=$(ls "$run" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' | head -5 | tr '\n' ' ')
  printf '%-20s %10s executions in %4d s (%s/s), corpus %d -> %d files' "$h" "${execs:-?}" \
    "$took" "${per_s:-?}" "$seeds" "$(ls "$run/corpus" | wc -l)"
  if [ $rc -eq 0 ]; then
    echo ", clean"
    passed=$((passed + 1))
  else
    echo ", FAILED (exit $rc) ${found:+: $found}"
    grep -E 'ERROR|property failed|runtime error|SUMMARY|last error|#[0-9]+ 0x' "$run/log" | head -40 | sed 's/^/    /'
    echo "    log: $run/log"
    failed=$((failed + 1))
  fi
done
echo "== fuzz: $(( $(date +%s) - start )) s in all (build $built s)"
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
