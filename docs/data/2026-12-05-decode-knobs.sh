#!/bin/sh
# The 48B model cut to 8 layers (Kimi-Linear-48B-A3B's shapes, random bf16 weights) decoding
# at batch 1 and 8 under the GEMV's launch knobs (the sums do not depend on them): device
# time per step and the GEMV's share, from --profile.
#   run with carry [".device"] (.device/prefix: the binaries), writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
sed -e "s/^layers = .*/layers = 8/" -e "s/^mla_layers = .*/mla_layers = 4, 8/" presets/kimi-linear-48b.conf > /tmp/k48-l8.conf
dec() { # tag batch knobs...
  tag=$1 b=$2; shift 2
  args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
  # shellcheck disable=SC2086
  env "$@" timeout 100 $NB/clmoe-generate --random-weights /tmp/k48-l8.conf --weights bf16 --device nvidia $args \
    -n 40 --greedy --profile --json $R/$tag.json > /dev/null 2> $R/$tag.err
  printf '%-28s rc=%s %s | %s\n' "$tag" "$?" "$(grep -o 'wall [0-9.]* ms, device [0-9.]* ms' $R/$tag.err)" \
    "$(grep '^  gemv ' $R/$tag.err | tr -s ' ')"
  pack
}
dec warm-b1 1; dec warm-b8 8
for rep in 1 2; do
  dec b1-default-$rep 1
  dec b1-vec0-$rep 1 CLMOE_GEMV_VEC=0
  dec b1-rows8-$rep 1 CLMOE_GEMV_ROWS=8
  dec b8-default-$rep 8
  dec b8-unroll1-$rep 8 CLMOE_GEMV_UNROLL=1
  dec b8-tok8-$rep 8 CLMOE_GEMV_TOK=8
done
timeout 60 $NB/clmoe-bench gemv --device nvidia --reps 30 --tokens 1 --shapes 163840x2304,12288x2304 > $R/bench.txt 2>&1
CLMOE_GEMV_VEC=0 timeout 60 $NB/clmoe-bench gemv --device nvidia --reps 30 --tokens 1 --shapes 163840x2304,12288x2304 \
  > $R/bench-vec0.txt 2>&1
tail -2 $R/bench.txt $R/bench-vec0.txt
pack
