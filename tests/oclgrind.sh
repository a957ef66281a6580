#!/bin/sh
# make check-oclgrind: every conformance check at its smallest sizes (clmoe-xcheck --small)
# on Oclgrind, the OpenCL simulator, with its checks on: data races between work-items
# (global and local memory), out-of-bounds accesses, API misuse, and with
# CLMOE_OCLGRIND_UNINIT=1 uninitialised values. Any report from Oclgrind fails, as does any
# failed check. The checks are shared by CLMOE_OCLGRIND_JOBS processes (default: the number
# of cores), each taking the next one nobody has claimed as it becomes free (--claim), so
# the processes end within about one check of each other.
#
# usage: sh tests/oclgrind.sh XCHECK [OUTDIR]
#   XCHECK  the built clmoe-xcheck (a libtool wrapper is run through $LIBTOOL)
#   OUTDIR  logs, tables and the kernel cache (default ./oclgrind)
# Environment: OCLGRIND (the simulator, default oclgrind), LIBTOOL, CLMOE_OCLGRIND_JOBS,
# CLMOE_OCLGRIND_UNINIT,
# CLMOE_OCLGRIND_OPS (space-separated --op prefixes, default all), CLMOE_OCLGRIND_SKIP
# (space-separated --skip prefixes, default below), CLMOE_OCLGRIND_FLAGS
# (replaces the simulator options below). Each process's report goes to OUTDIR/shard-I.json
# (`clmoe-xcheck --matrix OUTDIR/shard-*.json`: one column).
set -u
xcheck=${1:?usage: sh tests/oclgrind.sh XCHECK [OUTDIR]}
out=${2:-oclgrind}
sim=${OCLGRIND:-oclgrind}
if ! command -v "$sim" > /dev/null 2>&1; then
  echo "check-oclgrind: no Oclgrind ('$sim'; Debian: apt-get install oclgrind)" >&2
  exit 1
fi
# The tile kernels need 48 KB of local memory, Oclgrind's device offers 32 KB unless told;
# GPUs have 48-228 KB. CLMOE_OCLGRIND_UNINIT=1 adds the uninitialised-value plugin, which
# needs unoptimised kernels: at -O1 and -O2 LLVM emits `freeze` instructions, which
# Oclgrind 21.10's plugin does not handle (it stops at the first one); unoptimised, the
# simulation takes about 2.5 times as long.
flags="--data-races --check-api --local-mem-size 65536 --num-threads 1"
[ "${CLMOE_OCLGRIND_UNINIT:-0}" = 1 ] && flags="$flags --uninitialized --build-options -cl-opt-disable"
flags=${CLMOE_OCLGRIND_FLAGS:-$flags}
jobs=${CLMOE_OCLGRIND_JOBS:-$(nproc 2> /dev/null || echo 2)}
case $jobs in '' | *[!0-9]* | 0) echo "check-oclgrind: CLMOE_OCLGRIND_JOBS='$jobs' is not a count" >&2; exit 1 ;; esac
mkdir -p "$out" || exit 1
# The simulator builds with options of its own (above), which clmoe's cache key does not
# see: a cache of its own, never shared with a real device's.
CLMOE_CACHE_DIR=$(cd "$out" && pwd)/kernel-cache$([ "${CLMOE_OCLGRIND_UNINIT:-0}" = 1 ] && echo -O0)
export CLMOE_CACHE_DIR
# Left out by default: the MoE layer's forward checks. Each has a backward twin (moe.backward.X
# for moe.forward.X) that runs the same forward on the same inputs and compares the same
# outputs before its backward, so the simulator sees every forward kernel there; the forward
# checks still run on every real device (clmoe-xcheck, check-vendors). Also the bf16 expert
# GEMMs' top-8 case: its five tile kernels run here in moe.bf16.backward.few (several row
# and column tiles, ragged ones, odd widths) and .swiglu, at a third of the simulation time.
# And the padded backward of the few-expert case: the padded path's own kernels (gather into
# and scatter from the padded groups) run here in moe.backward.padded, .no_latent_padded and
# .swiglu_padded; what the few-expert widths add there is CLBlast's batched GEMM, at 130 s.
# And the inference forward's cases but the few-expert one: the grouped kernels built to read
# bf16 weights (their only kernels not run elsewhere) run in moe.infer.bf16.few at ragged
# widths; the others differ in routing and the host's choices, about 50 s of simulation each.
# Of the inference forward's tile path, the Kimi Linear form (12 s); top-8 runs the same kernels.
skip=${CLMOE_OCLGRIND_SKIP-moe.forward moe.bf16.forward moe.bf16.backward.top8 moe.backward.few_padded \
  moe.infer.bf16.top8 moe.infer.bf16.kimi moe.infer.bf16.padded moe.infer.bf16.tile.top8}
ops=
for p in ${CLMOE_OCLGRIND_OPS:-}; do ops="$ops --op $p"; done
for p in $skip; do ops="$ops --skip $p"; done
run=
case $(sed -n '1,3p' "$xcheck" 2> /dev/null) in
  *libtool*) run="${LIBTOOL:-libtool} --mode=execute" ;; # the wrapper: oclgrind must see the program
esac

rm -rf "$out/claims" && mkdir "$out/claims" || exit 1
start=$(date +%s)
echo "check-oclgrind: $jobs processes, $sim $flags"
i=0
pids=
while [ "$i" -lt "$jobs" ]; do
  rm -f "$out/shard-$i.log" "$out/shard-$i.json"
  # shellcheck disable=SC2086
  $run "$sim" $flags --log "$out/shard-$i.log" "$xcheck" --small --claim "$out/claims" --quiet $ops \
    --json "$out/shard-$i.json" \
    > "$out/shard-$i.txt" 2>&1 &
  pids="$pids $!"
  i=$((i + 1))
done
status=0
i=0
for pid in $pids; do
  wait "$pid" || { echo "check-oclgrind: shard $i/$jobs: clmoe-xcheck exited $?"; status=1; }
  i=$((i + 1))
done

i=0
checks=0
while [ "$i" -lt "$jobs" ]; do
  txt=$out/shard-$i.txt log=$out/shard-$i.log
  summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$txt")
  echo "  shard $i/$jobs: ${summary:-no summary}"
  n=${summary%% passed*}
  case $n in '' | *[!0-9]*) n=0; status=1 ;; esac
  checks=$((checks + n))
  if grep -q 'FAIL' "$txt" || [ -z "$summary" ]; then
    sed 's/^/    /' "$txt" | tail -40
    status=1
  fi
  if [ -s "$log" ]; then
    echo "  Oclgrind reported (shard $i, $log):"
    sed 's/^/    /' "$log" | head -60
    status=1
  fi
  i=$((i + 1))
done
echo "check-oclgrind: $checks checks passed in $(($(date +%s) - start)) s$([ "$status" -eq 0 ] && echo ', no report from Oclgrind' || echo '; FAILED')"
exit "$status"
