#!/bin/sh
# The decode GEMV's launch forms on the GPU (clmoe-bench gemv over Kimi-Linear-48B's decode
# products and the head, 1 to 16 tokens) under the CLMOE_GEMV_ROWS / _UNROLL / _TOK knobs,
# which change the loads and the work-groups but not the sums; then the 8-layer 48B cut's
# decode at batch 1 and 8 with the split argmax (profile by kernel).
#   run with carry [".device"] (.device/prefix: the binaries), writing under $OUT
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
b() { # tag, then the knobs as NAME=VALUE
  tag=$1; shift
  env "$@" timeout 60 $NB/clmoe-bench gemv --device nvidia --reps 20 ${TOKENS:+--tokens $TOKENS} \
    --json $R/gemv-$tag.json > $R/gemv-$tag.txt 2>&1
  echo "== $tag ($*) rc=$?"; tail -n +3 $R/gemv-$tag.txt
}
for rows in 0 8 16; do
  for u in 1 2 4 8; do TOKENS=1 b r$rows-u$u CLMOE_GEMV_ROWS=$rows CLMOE_GEMV_UNROLL=$u; done
done
for tok in 0 8 16; do
  for rows in 0 4; do
    for u in 1 4; do TOKENS=4,8,16 b t$tok-r$rows-u$u CLMOE_GEMV_TOK=$tok CLMOE_GEMV_ROWS=$rows CLMOE_GEMV_UNROLL=$u; done
  done
done
sed -e "s/^layers = .*/layers = 8/" -e "s/^mla_layers = .*/mla_layers = 4, 8/" presets/kimi-linear-48b.conf > /tmp/k48-l8.conf
for b in 1 8; do
  args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
  # shellcheck disable=SC2086
  timeout 100 $NB/clmoe-generate --random-weights /tmp/k48-l8.conf --weights bf16 --device nvidia $args -n 40 \
    --greedy --profile --json $R/l8-profile-b$b.json > /dev/null 2> $R/l8-profile-b$b.err
  echo "l8 b$b rc=$?"
  grep "^decode\|^profile" $R/l8-profile-b$b.err
  python3 -c "import json,sys; [print(' ', k) for k in json.load(open(sys.argv[1]))['profile']['kernels'][:8]]" \
    $R/l8-profile-b$b.json
done
