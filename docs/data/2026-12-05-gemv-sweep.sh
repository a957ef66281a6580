#!/bin/sh
# The decode GEMV's launch forms on the GPU (clmoe-bench gemv over Kimi-Linear-48B's decode
# products and the head) under the CLMOE_GEMV_ROWS / _UNROLL / _TOK / _VEC knobs, which
# change the loads and the work-groups but not the sums; then the 48B cut to 8 and 16 layers
# decoding at batch 1 and 8 (profile by kernel).
#   run with carry [".device"] (.device/prefix: the binaries), writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
b() { # tag, then the knobs as NAME=VALUE
  tag=$1; shift
  env "$@" timeout 60 $NB/clmoe-bench gemv --device nvidia --reps 20 ${TOKENS:+--tokens $TOKENS} \
    --json $R/gemv-$tag.json > $R/gemv-$tag.txt 2>&1
  echo "== $tag ($*) rc=$?"; tail -n +3 $R/gemv-$tag.txt
}
TOKENS=1 b vec-auto
TOKENS=1 b vec0 CLMOE_GEMV_VEC=0
TOKENS=1 b vec0-r8 CLMOE_GEMV_VEC=0 CLMOE_GEMV_ROWS=8
TOKENS=1 b vec0-r16 CLMOE_GEMV_VEC=0 CLMOE_GEMV_ROWS=16
TOKENS=1 b vec1-r16 CLMOE_GEMV_VEC=1 CLMOE_GEMV_ROWS=16
TOKENS=1 b vec1-r32 CLMOE_GEMV_VEC=1 CLMOE_GEMV_ROWS=32
TOKENS=2,4,8,16 b auto
TOKENS=2,4,8 b vec1 CLMOE_GEMV_VEC=1
pack
for L in 8 16; do
  mla=4; [ $L = 16 ] && mla="4, 8, 12, 16"; [ $L = 8 ] && mla="4, 8"
  sed -e "s/^layers = .*/layers = $L/" -e "s/^mla_layers = .*/mla_layers = $mla/" presets/kimi-linear-48b.conf \
    > /tmp/k48-l$L.conf
  for b in 1 8; do
    args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
    # shellcheck disable=SC2086
    timeout 100 $NB/clmoe-generate --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia $args -n 40 \
      --greedy --profile --json $R/l$L-profile-b$b.json > /dev/null 2> $R/l$L-profile-b$b.err
    echo "l$L b$b rc=$?"
    grep "^profile" $R/l$L-profile-b$b.err
    python3 -c "import json,sys; [print(' ', k) for k in json.load(open(sys.argv[1]))['profile']['kernels'][:6]]" \
      $R/l$L-profile-b$b.json
    pack
  done
done
