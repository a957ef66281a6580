#!/bin/sh
# Batch-1 greedy decode of Kimi-Linear-48B-A3B's shapes (random bf16 weights), the whole
# model (27 layers) on a GPU of more than 100 GiB, else the 8- and 20-layer cuts (MLA at 4,
# 8, ...) for the extrapolation to 27: .device/new (the working tree) against .device/prefix
# (4c0e085, the last session's end), and new with CLMOE_GEMV_PASSES 1 and 4 (default 2);
# each build's programs are made in a short run first (CLMOE_CACHE_DIR keeps them), then 64
# tokens are timed, then profiles; the GPU checks of the changed kernels; clmoe-bench gemv
# at 1, 2 and 4 passes; batch 8 and 64. r.tgz is packed after each part.
#   run with carry [".device"], writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
.device/new/bin/clmoe-generate --version > $R/version.txt 2>&1
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
cuts="8 20"; [ "${mib:-0}" -gt 102400 ] && cuts=27
for L in $cuts; do
  mla=; i=4; while [ $i -le $L ]; do mla="$mla${mla:+, }$i"; i=$((i + 4)); done
  sed -e "s/^layers = .*/layers = $L/" -e "s/^mla_layers = .*/mla_layers = $mla/" presets/kimi-linear-48b.conf \
    > /tmp/k48-l$L.conf
done
[ -f /tmp/k48-l27.conf ] && cp presets/kimi-linear-48b.conf /tmp/k48-l27.conf
dec() { # tag build layers tokens [options]; $P: CLMOE_GEMV_PASSES (default 2)
  tag=$1 bin=.device/$2/bin/clmoe-generate L=$3 n=$4; shift 4
  # shellcheck disable=SC2068
  CLMOE_GEMV_PASSES=${P:-2} timeout 150 $bin --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia \
    --prompt-ids 1,2,3,4,5,6,7,8 -n $n --greedy $@ --json $R/$tag.json > /dev/null 2> $R/$tag.err
  say "$(printf '%-22s rc=%s %s %s | %s' "$tag" "$?" "$(grep -o '"decode_tokens_per_s": [0-9.]*' $R/$tag.json)" \
    "$(grep -o 'wall [0-9.]* ms, device [0-9.]* ms' $R/$tag.err)" "$(grep '^  gemv ' $R/$tag.err | tr -s ' ' | cut -d' ' -f3-4)")"
  pack
}
for L in $cuts; do
  if [ $L = 27 ]; then # the whole model: the most wanted first, each run once
    P=2; dec new-l$L-warm new $L 4; dec new-l$L-r1 new $L 64
    dec prefix-l$L-warm prefix $L 4; dec prefix-l$L-r1 prefix $L 64
    dec new-l$L-profile new $L 48 --profile
    P=1; dec new-p1-l$L-warm new $L 4; dec new-p1-l$L-r1 new $L 64
    continue
  fi
  P=2; dec new-l$L-warm new $L 4; dec prefix-l$L-warm prefix $L 4
  P=1; dec new-p1-l$L-warm new $L 4; P=4; dec new-p4-l$L-warm new $L 4
  for rep in 1 2; do
    P=2; dec new-l$L-r$rep new $L 64; dec prefix-l$L-r$rep prefix $L 64
    P=1; dec new-p1-l$L-r$rep new $L 64; P=4; dec new-p4-l$L-r$rep new $L 64
  done
  P=2; dec new-l$L-profile new $L 48 --profile
  P=1; dec new-p1-l$L-profile new $L 48 --profile
done
P=2
.device/new/bin/clmoe-xcheck --device nvidia --op gemv --op mla.decode --op moe.decode --op moe.qb > $R/xcheck-new.txt 2>&1
say "xcheck new rc=$? $(tail -1 $R/xcheck-new.txt)"
pack
for p in 1 2 4; do
  CLMOE_GEMV_PASSES=$p .device/new/bin/clmoe-bench gemv --device nvidia \
    --shapes 12288x2304,2304x4096,4096x128,2048x2304,256x2304,163840x2304 --tokens 1,4 > $R/bench-gemv-p$p.txt 2>&1
  say "bench gemv passes $p rc=$?"
  pack
done
L=${cuts##* }
for b in 8 64; do
  ids=; i=0; while [ $i -lt $b ]; do ids="$ids --prompt-ids $((i + 1)),$((i + 2)),$((i + 3))"; i=$((i + 1)); done
  # shellcheck disable=SC2086
  dec new-l$L-b$b new $L 32 $ids
  # shellcheck disable=SC2086
  dec prefix-l$L-b$b prefix $L 32 $ids
done
cat $R/gpu.txt $R/summary.txt; for p in 1 2 4; do cat $R/bench-gemv-p$p.txt; done
