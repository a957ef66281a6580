#!/bin/sh
# Batch-1 greedy decode tokens/s of Kimi-Linear-48B-A3B's shapes (random bf16 weights):
# .device/before (dba033f) against .device/prefix (HEAD), each build's programs made in a
# short run first. On a GPU with more than 100 GiB the whole model (27 layers), else the
# 8- and 20-layer cuts (MLA at 4, 8, ...) for the linear extrapolation to 27.
#   run with carry [".device"], writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
cuts="8 20"; [ "${mib:-0}" -gt 102400 ] && cuts=27
for L in $cuts; do
  mla=; i=4; while [ $i -le $L ]; do mla="$mla${mla:+, }$i"; i=$((i + 4)); done
  sed -e "s/^layers = .*/layers = $L/" -e "s/^mla_layers = .*/mla_layers = $mla/" presets/kimi-linear-48b.conf \
    > /tmp/k48-l$L.conf
  [ $L = 27 ] && cp presets/kimi-linear-48b.conf /tmp/k48-l27.conf
  for b in head:.device/prefix/bin before:.device/before/bin; do
    for n in 4 64; do
      timeout 100 ${b#*:}/clmoe-generate --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia \
        --prompt-ids 1,2,3,4,5,6,7,8 -n $n --greedy --quiet --json $R/${b%%:*}-l$L-n$n.json > /dev/null 2>&1
    done
    say "${b%%:*} L$L rc=$? $(grep -o '"decode_tokens_per_s": [0-9.]*' $R/${b%%:*}-l$L-n64.json)"
    pack
  done
done
cat $R/gpu.txt $R/summary.txt
