#!/bin/sh
# Tests of the apps' command lines: help, exit codes, clear errors, JSON, several devices.
# Run by make check with CLMOE_APPS_DIR set to the built apps.
set -u
. "$(dirname "$0")/apps_common.sh"
xcheck="$apps/clmoe-xcheck"
bench="$apps/clmoe-bench"
skip_without_device

# The standard flags, read the same way by every app (app_standard_flag): --help and -h,
# --version, --device and --json with a value; clmoe-plan opens no device and says so.
for app in info xcheck train plan generate bench op; do # (expect sets $name)
  expect "$app --help" 0 "Usage: clmoe-$app" -- "$apps/clmoe-$app" --help
  expect "$app -h" 0 "Usage: clmoe-$app" -- "$apps/clmoe-$app" -h
  expect "$app --version" 0 "clmoe-$app [0-9]" -- "$apps/clmoe-$app" --version
done
for app in info xcheck train generate; do
  expect "$app --device without value" 2 "--device needs a value" -- "$apps/clmoe-$app" --device
  expect "$app --json without value" 2 "--json needs a value" -- "$apps/clmoe-$app" --json
done
for cmd in kda mla; do
  expect "op $cmd --help" 0 "Usage: clmoe-op $cmd" -- "$apps/clmoe-op" "$cmd" --help
  expect "op $cmd --device without value" 2 "--device needs a value" -- "$apps/clmoe-op" "$cmd" --device
done
expect "plan --help: no --device" 0 "no --device" -- "$apps/clmoe-plan" --help
expect "plan takes no --device" 2 "unknown argument '--device'" -- "$apps/clmoe-plan" --device 0:0
expect "bench --help lists every benchmark" 0 "^  moe " -- "$bench" --help

expect "info lists and chooses" 0 "Chosen:" -- "$info"
expect "info bad flag" 2 "unknown argument '--frobnicate'" -- "$info" --frobnicate
expect "info unknown device" 1 "nonesuch-device matches no device" -- "$info" --device nonesuch-device
expect "info bad CLMOE_DEVICE" 1 "CLMOE_DEVICE=9:9" -- env CLMOE_DEVICE=9:9 "$info"
expect "info --json" 0 "" -- "$info" --json "$tmp/info.json"
for key in '"devices"' '"chosen"' '"locality"' '"kernel_cache"' '"compute_units"'; do
  if grep -q "$key" "$tmp/info.json"; then pass "info.json has $key"; else fail "info.json lacks $key"; fi
done
expect "info --json to an unwritable path" 1 "cannot write" -- "$info" --json /nonexistent-dir/x.json
expect "info CLMOE_CACHE=0" 0 "Kernel cache: off" -- env CLMOE_CACHE=0 "$info"

expect "xcheck --list" 0 "gemm.clblast.nn" -- "$xcheck" --list
expect "xcheck runs a check" 0 "1 passed, 0 failed" -- "$xcheck" --device "${CLMOE_DEVICE:-0:0}" --op reduce.sum.small
expect "xcheck unknown op" 2 "no check matches" -- "$xcheck" --op nonesuch
expect "xcheck bad seed" 2 "--seed: 'abc' is not an integer" -- "$xcheck" --seed abc
expect "xcheck --json" 0 "" -- "$xcheck" --op pointwise.add --json "$tmp/x.json"
if grep -q '"passed": true' "$tmp/x.json" && grep -q '"failed": 0' "$tmp/x.json"; then
  pass "xcheck.json records the result"
else
  fail "xcheck.json lacks the result"
fi
# Two PoCL CPU devices: the multi-device path (each device gets its own row).
if "$info" --no-probe 2>/dev/null | grep -q "Portable Computing Language"; then
  POCL_DEVICES="pthread pthread" "$xcheck" --op pointwise.add > "$tmp/two" 2>&1
  rows=$(grep -c "^pointwise.add " "$tmp/two")
  if [ "$rows" -ge 2 ] && grep -q "0 failed" "$tmp/two"; then pass "xcheck on two PoCL devices"
  else fail "xcheck on two PoCL devices ($rows rows)"; cat "$tmp/two"; fi
fi

expect "bench --help" 0 "Benchmarks:" -- "$bench" --help
expect "bench without a benchmark" 2 "" -- "$bench"
expect "bench unknown benchmark" 2 "unknown benchmark 'nope'" -- "$bench" nope
expect "bench gemm bad size" 2 "--sizes: '12q'" -- "$bench" gemm --sizes 12q
# --warm builds a model's training and generation kernels: a 2-step run of that model and
# a generation from its checkpoint afterwards add no entry to the cache; without a model
# it is a usage error
wcache="$tmp/warm-cache"
expect "info --warm needs a model" 2 "--warm needs the model" -- "$info" --warm
expect "info --preset without --warm" 2 "go with --warm" -- "$info" --preset tiny
expect "info --warm --preset tiny" 0 "Warm-up:" -- env CLMOE_CACHE_DIR="$wcache" "$info" --warm --preset tiny --seq-len 32
warmed=$(ls "$wcache" | wc -l)
printf 'the kernels of a short run, warmed before it starts. %.0s' $(seq 40) > "$tmp/warm.txt"
expect "train after --warm" 0 "" -- env CLMOE_CACHE_DIR="$wcache" "$apps/clmoe-train" --preset tiny \
  --data "$tmp/warm.txt" --batch 1 --seq-len 32 --steps 2 --sample 0 --quiet --out "$tmp/warm-run"
expect "generate after --warm" 0 "" -- env CLMOE_CACHE_DIR="$wcache" "$apps/clmoe-generate" \
  --ckpt "$tmp/warm-run/checkpoint.safetensors" --prompt "the kernels" -n 4 --quiet
if [ "$warmed" -gt 0 ] && [ "$(ls "$wcache" | wc -l)" -eq "$warmed" ]; then
  pass "--warm built every kernel of the training step and of generation ($warmed programs)"
else
  fail "--warm left kernels to build: $warmed programs after --warm, $(ls "$wcache" | wc -l) after training and generation"
fi
# integers are decimal: 064 is sixty-four (not octal 52), 0x40 is refused
expect "bench gemm decimal size" 0 '"m": 64,' -- "$bench" gemm --sizes 064 --backends naive --reps 1 --json -
expect "bench gemm hex size refused" 2 "--sizes: '0x40' is neither" -- "$bench" gemm --sizes 0x40
expect "train --steps hex refused" 2 "--steps: '0x8' is not an integer" -- "$apps/clmoe-train" --preset tiny --task mqar --steps 0x8
expect "bench gemm bad backend" 2 "unknown backend 'cublas'" -- "$bench" gemm --backends cublas
expect "bench gemm runs" 0 "33x17x9" -- "$bench" gemm --sizes 64,33x17x9 --reps 2 --json "$tmp/g.json"
if grep -q '"tflops"' "$tmp/g.json" && grep -q '"backend": "naive"' "$tmp/g.json"; then
  pass "bench gemm JSON"
else
  fail "bench gemm JSON"
fi

train="$apps/clmoe-train"
expect "train --count-params k3 (report: 2.78T, 104.2B)" 0 "2.779T *104.19B" -- "$train" --preset k3 --count-params
expect "train --count-params gpu (705M, 99M)" 0 "705.09M *99.28M" -- "$train" --preset gpu --count-params
expect "train unknown preset" 2 "unknown preset 'k4'" -- "$train" --preset k4 --count-params
expect "train both preset and config" 2 "exactly one of" -- "$train" --preset tiny --config x.conf
printf '[model]\nvocab = 256\nwidth = 3\n' > "$tmp/bad.conf"
expect "train bad config names file, line, key" 1 "bad.conf:3: \\[model\\] width: unknown key" -- "$train" --config "$tmp/bad.conf" --count-params
"$train" --preset demo --print-config > "$tmp/demo.conf" 2>&1
expect "train --print-config parses back" 0 "demo.conf" -- "$train" --config "$tmp/demo.conf" --count-params

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
