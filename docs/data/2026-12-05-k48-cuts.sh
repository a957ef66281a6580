#!/bin/sh
# HEAD alone on Kimi-Linear-48B-A3B's shapes (random bf16 weights) cut to the first L layers
# (MLA at 4, 8, ...), each argument one L: every shape's programs built in a warm-up run
# first, then decode tokens/s at batch 1, 8 and 64 (-n 64, greedy), prefill at 4K and 16K,
# and the peak device memory. On an H100 up to 20 layers fit (3.46 GiB of weights a layer);
# 27 is the whole model (92 GiB of weights: an H200).
#   sh docs/data/2026-12-05-k48-cuts.sh 8 20     (run with carry [".device"]; r.tgz under $OUT)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
$NB/clmoe-generate --version > $R/version.txt 2>&1
for L in "$@"; do
  mla=; i=4; while [ $i -le $L ]; do mla="$mla${mla:+, }$i"; i=$((i + 4)); done
  sed -e "s/^layers = .*/layers = $L/" -e "s/^mla_layers = .*/mla_layers = $mla/" presets/kimi-linear-48b.conf \
    > /tmp/k48-l$L.conf
  [ $L = 27 ] && cp presets/kimi-linear-48b.conf /tmp/k48-l27.conf # the whole model (MLA at 27 too): an H200
  for b in 1 8 64; do
    args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
    for n in 4 64; do # the first builds the programs
      # shellcheck disable=SC2086
      timeout 100 $NB/clmoe-generate --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia $args -n $n \
        --greedy --quiet --json $R/l$L-b$b-n$n.json > /dev/null 2> $R/l$L-b$b-n$n.err
    done
    say "L$L b$b rc=$? $(grep -o '"decode_tokens_per_s": [0-9.]*' $R/l$L-b$b-n64.json) $(grep -o '"peak_in_use": [0-9]*' $R/l$L-b$b-n64.json)"
  done
  timeout 150 $NB/clmoe-generate --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia \
    --prefill-bench 4096,4096,16384 --bench-steps 8 --json $R/l$L-prefill.json > /dev/null 2> $R/l$L-prefill.err
  say "L$L prefill rc=$? $(grep -o '"prefill_tokens_per_s": [0-9.]*' $R/l$L-prefill.json | tr '\n' ' ')"
  pack
done
cat $R/gpu.txt; for L in "$@"; do grep -A4 "tokens  *chunk" $R/l$L-prefill.err; done
