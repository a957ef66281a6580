#!/bin/sh
# The device sampler's time per launch (clmoe_gen_sample_rows) against the host sampler at
# V = 163,840, batch 1 and 16 (docs/generate.md, "Sampled steps on the device").
# usage: sh docs/data/sample_bench.sh BUILD_DIR [V]   (e.g. on the H200: CLMOE_DEVICE=gpu)
set -eu
build=${1:?usage: sh docs/data/sample_bench.sh BUILD_DIR [V]}
src=$(cd "$(dirname "$0")/../.." && pwd)
cc -O2 -std=c11 -I"$src/include" -I"$build" "$src/docs/data/sample_bench.c" -o "$build/sample_bench" \
  -L"$build/lib/.libs" -lclmoe -Wl,-rpath,"$build/lib/.libs"
"$build/sample_bench" "${2:-163840}"
