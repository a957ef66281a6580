#!/bin/sh
# Kimi-Linear-48B-A3B's shapes (random bf16 weights, made on the device) in one device call:
# peak memory, prefill tokens/s with the decode step after each prompt, decode tokens/s by batch
# size, and a per-kernel profile of the batch-1 step.
#
#   sh docs/data/2026-12-05-k48-bench.sh 27     the whole model (98 GB of weights: an H200)
#   sh docs/data/2026-12-05-k48-bench.sh 8 16   the same layers cut to the first 8 and the
#       first 16 (MLA at 4, 8, ... as in the model): fits an H100; the difference of the two
#       is the cost of 8 layers, from which the 27-layer figures are extrapolated
#
# run with carry [".device"] (.device/prefix: HEAD's static binaries), writing under $OUT.
# PREFILL (default 4096,16384) and BATCHES (default "1 8 64") change what is measured.
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
$NB/clmoe-generate --version > $R/version.txt 2>&1

# the preset cut to its first L layers, MLA where the model has it (every 4th, and the last)
model() {
  if [ "$1" = 27 ]; then echo kimi-linear-48b; return; fi
  mla=; i=4; while [ $i -le "$1" ]; do mla="$mla${mla:+, }$i"; i=$((i + 4)); done
  sed -e "s/^layers = .*/layers = $1/" -e "s/^mla_layers = .*/mla_layers = $mla/" presets/kimi-linear-48b.conf \
    > /tmp/k48-l$1.conf
  echo /tmp/k48-l$1.conf
}

for L in "$@"; do
  m=$(model $L)
  timeout 240 $NB/clmoe-generate --random-weights $m --weights bf16 --device nvidia \
    --prefill-bench ${PREFILL:-4096,16384} --bench-steps 8 --json $R/l$L-prefill.json > /dev/null 2> $R/l$L-prefill.err
  say "L$L prefill rc=$?"
  pack
  for b in ${BATCHES:-1 8 64}; do
    args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
    # shellcheck disable=SC2086
    timeout 90 $NB/clmoe-generate --random-weights $m --weights bf16 --device nvidia $args -n 64 \
      --greedy --quiet --json $R/l$L-b$b.json > /dev/null 2> $R/l$L-b$b.err
    say "L$L b$b rc=$? $(grep -o '"decode_tokens_per_s": [0-9.]*' $R/l$L-b$b.json)"
    pack
  done
  timeout 80 $NB/clmoe-generate --random-weights $m --weights bf16 --device nvidia \
    --prompt-ids 1,2,3,4,5,6,7,8 -n 40 --greedy --profile --json $R/l$L-profile-b1.json > /dev/null 2> $R/l$L-profile-b1.err
  say "L$L profile b1 rc=$?"
  pack
done
cat $R/gpu.txt $R/summary.txt
for L in "$@"; do
  tail -4 $R/l$L-prefill.err; grep -h "memory" $R/l$L-b1.err | head -3
  grep -A12 "^profile" $R/l$L-profile-b1.err | head -14
done
