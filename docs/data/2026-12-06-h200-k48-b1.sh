#!/bin/sh
# Kimi-Linear-48B-A3B's shapes (random bf16 weights), greedy decode: the whole model (27
# layers) where the GPU has more than 100 GiB, else all 27 layers with 128 experts a MoE layer
# instead of 256 (every per-token read the same but the router's 256 x 2304): .device/new
# (main), .device/next (main with moe_dec_down's loads of four (slot, row) items interleaved
# and moe_route's top-k by ranks: adb4d1c), .device/next2 (next with the KDA step's
# convolutions and recurrent update in one launch) and .device/prefix (4c0e085). Each build's programs are
# made in a short run first (CLMOE_CACHE_DIR keeps them), then 64 tokens are timed twice in
# turn, then profiles, batch 8 and 64, prefill at 4K and 16K, and the GPU checks of the decode
# kernels. r.tgz is packed after each part.
#   run with carry [".device"], writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
for b in new next next2 prefix; do .device/$b/bin/clmoe-generate --version > $R/version-$b.txt 2>&1; done
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
cuts=27; cp presets/kimi-linear-48b.conf /tmp/k48-l27.conf
[ "${mib:-0}" -gt 102400 ] || sed -i 's/^experts = .*/experts = 128/' /tmp/k48-l27.conf # 48 GiB: fits 80
dec() { # tag build layers tokens [options]: decode tokens/s, and the profile's per-step ms
  tag=$1 bin=.device/$2/bin/clmoe-generate L=$3 n=$4; shift 4
  # shellcheck disable=SC2068
  timeout 150 $bin --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia --prompt-ids 1,2,3,4,5,6,7,8 \
    -n $n --greedy $@ --json $R/$tag.json > /dev/null 2> $R/$tag.err
  say "$(printf '%-20s rc=%s %s %s %s' "$tag" "$?" "$(grep -o '"decode_tokens_per_s": [0-9.]*' $R/$tag.json)" \
    "$(grep -o '"peak_in_use": [0-9]*' $R/$tag.json)" "$(grep -o 'wall [0-9.]* ms, device [0-9.]* ms' $R/$tag.err)")"
  pack
}
for L in $cuts; do
  for b in new next next2 prefix; do dec $b-l$L-warm $b $L 4; done
  for rep in 1 2; do for b in new next next2 prefix; do dec $b-l$L-r$rep $b $L 64; done; done
done
L=${cuts##* }
dec new-l$L-profile new $L 48 --profile
dec next-l$L-profile next $L 48 --profile
dec next2-l$L-profile next2 $L 48 --profile
dec prefix-l$L-profile prefix $L 48 --profile
for p in 8 64; do
  ids=; i=0; while [ $i -lt $p ]; do ids="$ids --prompt-ids $((i + 1)),$((i + 2)),$((i + 3))"; i=$((i + 1)); done
  # shellcheck disable=SC2086
  dec new-l$L-b$p new $L 32 $ids
  # shellcheck disable=SC2086
  dec next-l$L-b$p next $L 32 $ids
  # shellcheck disable=SC2086
  dec next2-l$L-b$p next2 $L 32 $ids
  # shellcheck disable=SC2086
  dec prefix-l$L-b$p prefix $L 32 $ids
done
timeout 150 .device/next2/bin/clmoe-generate --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia \
  --prefill-bench 4096,4096,16384 --bench-steps 8 --json $R/new-l$L-prefill.json > /dev/null 2> $R/new-l$L-prefill.err
say "next2-l$L-prefill rc=$? $(grep -o '"prefill_tokens_per_s": [0-9.]*' $R/new-l$L-prefill.json | tr '\n' ' ')"
pack
.device/next2/bin/clmoe-xcheck --device nvidia --op gemv --op mla.decode --op moe.decode --op moe.qb --op moe.forward \
  --op kda_layer --op kda.decode > $R/xcheck-new.txt 2>&1
say "xcheck next2 rc=$? $(tail -1 $R/xcheck-new.txt)"
pack
cat $R/gpu.txt $R/summary.txt
