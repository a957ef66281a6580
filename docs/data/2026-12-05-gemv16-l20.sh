#!/bin/sh
# Batch-1 greedy decode of Kimi-Linear-48B-A3B's shapes cut to 8 and 20 layers (random bf16
# weights): .device/before (dba033f), .device/mid (f9cc032: 16-byte GEMV loads, the FFN and
# final norms fused) and .device/prefix (branch gemv-sum8, 934a1f7: the GEMV's lane sums in
# two steps of eight, the RMSNorm squares in its eight-column passes), each build's programs
# made in a short run first, then 64 tokens; the prefix build's profiles; the GEMV checks on the GPU; the GEMV
# benchmark at 1, 4 and 8 tokens. The two cuts give the per-layer and fixed parts of a step
# for the 27-layer extrapolation. r.tgz is packed after each part.
#   run with carry [".device"], writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin OB=.device/before/bin MB=.device/mid/bin
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
$NB/clmoe-generate --version > $R/version.txt 2>&1
for L in 8 20; do
  mla=; i=4; while [ $i -le $L ]; do mla="$mla${mla:+, }$i"; i=$((i + 4)); done
  sed -e "s/^layers = .*/layers = $L/" -e "s/^mla_layers = .*/mla_layers = $mla/" presets/kimi-linear-48b.conf \
    > /tmp/k48-l$L.conf
done
dec() { # tag bin layers tokens [--profile]: decode tokens/s, and the profile's per-step ms
  tag=$1 bin=$2 L=$3 n=$4; shift 4
  # shellcheck disable=SC2068
  timeout 100 $bin --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia --prompt-ids 1,2,3,4,5,6,7,8 \
    -n $n --greedy $@ --json $R/$tag.json > /dev/null 2> $R/$tag.err
  say "$(printf '%-18s rc=%s %s %s | %s' "$tag" "$?" "$(grep -o '"decode_tokens_per_s": [0-9.]*' $R/$tag.json)" \
    "$(grep -o 'wall [0-9.]* ms, device [0-9.]* ms' $R/$tag.err)" "$(grep '^  gemv ' $R/$tag.err | tr -s ' ' | cut -d' ' -f3-4)")"
}
for b in head:$NB mid:$MB before:$OB; do # the first run builds the programs (CLMOE_CACHE_DIR keeps them)
  dec ${b%%:*}-l8-warm ${b#*:}/clmoe-generate 8 4
  dec ${b%%:*}-l8 ${b#*:}/clmoe-generate 8 64
done
dec head-l8-profile $NB/clmoe-generate 8 48 --profile
pack
$NB/clmoe-xcheck --device nvidia --op gemv --op moe.decode.bf16 > $R/xcheck.txt 2>&1
say "xcheck rc=$? $(tail -1 $R/xcheck.txt)"
pack
dec head-l20 $NB/clmoe-generate 20 64
dec before-l20 $OB/clmoe-generate 20 64
dec head-l20-profile $NB/clmoe-generate 20 48 --profile
pack
$NB/clmoe-bench gemv --device nvidia --shapes 12288x2304,2304x4096,2048x2304,163840x2304 --tokens 1,4,8 \
  > $R/bench-head-cold.txt 2>&1
pack
cat $R/summary.txt; cat $R/bench-head-cold.txt
