#!/bin/sh
# The device sampler on a GPU (docs/generate.md, "Sampled steps on the device"): first that it
# draws the host sampler's tokens there (test_sample, from a build tree), then its time per
# launch against the host sampler at Kimi-Linear's vocabulary, batch 1 and 16 (clmoe-bench
# sample, from the build tree or, without one, the installed clmoe-bench), JSON into OUT.
# usage: sh docs/data/sample_gpu.sh [BUILD_DIR] [OUT.json]   (device: CLMOE_DEVICE, default gpu)
set -eu
build=${1:-}
out=${2:-sample-gpu.json}
export CLMOE_DEVICE="${CLMOE_DEVICE:-gpu}"
bench=clmoe-bench
if [ -n "$build" ]; then
  "$build/tests/unit/test_sample"
  bench="$build/apps/clmoe-bench"
fi
"$bench" sample --vocab 163840 --batch 1,16 --reps 50 --json "$out"
"$bench" sample --vocab 163840 --batch 64 --reps 20 --no-host
