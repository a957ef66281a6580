#!/bin/sh
# Greedy decode, the binaries of .device/before (a baseline build: c4c3fbf with the
# --random-weights FILE commit picked onto it, or an earlier HEAD) against .device/prefix
# (HEAD) in the same call, alternated three times:
# Kimi-Linear-48B-A3B's shapes cut to 8 layers at batch 1 and 8, and the `gpu` preset at
# batch 1 and 16, each with --profile (device time per step, the GEMV's share). Extra knobs
# for HEAD's runs: AFTER_ENV (e.g. "CLMOE_GEMV_VEC=0").
#   run with carry [".device"], writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
sed -e "s/^layers = .*/layers = 8/" -e "s/^mla_layers = .*/mla_layers = 4, 8/" presets/kimi-linear-48b.conf > /tmp/k48-l8.conf
dec() { # tag bin model batch [env...]
  tag=$1 bin=$2 model=$3 b=$4; shift 4
  args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
  # shellcheck disable=SC2086
  env "$@" timeout 100 $bin --random-weights $model --weights bf16 --device nvidia $args -n 40 --greedy --profile \
    --json $R/$tag.json > /dev/null 2> $R/$tag.err
  printf '%-22s rc=%s %s | %s | %s\n' "$tag" "$?" "$(grep -o 'wall [0-9.]* ms, device [0-9.]* ms' $R/$tag.err)" \
    "$(grep '^  gemv ' $R/$tag.err | tr -s ' ' | cut -d' ' -f3-4)" "$(grep '^  moe ' $R/$tag.err | tr -s ' ' | cut -d' ' -f3-4)"
}
for rep in 0 1 2; do
  for m in /tmp/k48-l8.conf:1 /tmp/k48-l8.conf:8 gpu:1 gpu:16; do
    model=${m%%:*} b=${m#*:} name=$(basename ${m%%:*} .conf)
    dec before-$name-b$b-$rep .device/before/bin/clmoe-generate $model $b
    # shellcheck disable=SC2086
    dec after-$name-b$b-$rep .device/prefix/bin/clmoe-generate $model $b ${AFTER_ENV:-}
  done
  pack
done
