#!/bin/sh
# Per-kernel decode profiles of Kimi-Linear-48B-A3B's shapes cut to 8 layers (MLA at 4 and 8;
# fits an H100), at batch 8 and 64 (bf16 random weights), to find where a batch-64 step goes.
#   run with carry [".device"] (.device/prefix: the binaries), writing under $OUT
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
sed -e "s/^layers = .*/layers = 8/" -e "s/^mla_layers = .*/mla_layers = 4, 8/" presets/kimi-linear-48b.conf > /tmp/k48-l8.conf
for b in ${BATCHES:-64 8}; do
  args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
  # shellcheck disable=SC2086
  timeout 120 $NB/clmoe-generate --random-weights /tmp/k48-l8.conf --weights bf16 --device nvidia $args -n 24 \
    --greedy --profile --json $R/l8-profile-b$b.json > /dev/null 2> $R/l8-profile-b$b.err
  echo "b$b rc=$?"
  grep -A30 "^profile" $R/l8-profile-b$b.err
  python3 -c "import json,sys; [print(' ', k) for k in json.load(open(sys.argv[1]))['profile']['kernels'][:24]]" \
    $R/l8-profile-b$b.json
done
