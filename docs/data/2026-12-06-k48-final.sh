#!/bin/sh
# Kimi-Linear-48B-A3B's shapes (random bf16 weights), greedy decode at batch 1, 8 and 64: the
# whole model (27 layers) where the GPU has more than 100 GiB, else all 27 layers with 128
# experts a MoE layer (every per-token read the same but the router's): .device/next2 (main at
# 51e66ef), .device/next3 (the same with kda_step's state loops unrolled) and .device/prefix
# (4c0e085). Every build's programs are made in a short run of each batch first
# (CLMOE_CACHE_DIR keeps them); 64 tokens timed twice in turn; profiles; batch 8 and 64 of
# next2 and prefix; prefill 4K and 16K (QUICK=1: batch 1 only; BUILDS: the builds to time).
#   run with carry [".device"], writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
B="${BUILDS:-next2 next3 prefix}"
for b in $B; do .device/$b/bin/clmoe-generate --version > $R/version-$b.txt 2>&1; done
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
cp presets/kimi-linear-48b.conf /tmp/k48.conf
[ "${mib:-0}" -gt 102400 ] || sed -i 's/^experts = .*/experts = 128/' /tmp/k48.conf
dec() { # tag build tokens [options]
  tag=$1 bin=.device/$2/bin/clmoe-generate n=$3; shift 3
  # shellcheck disable=SC2068
  timeout 150 $bin --random-weights /tmp/k48.conf --weights bf16 --device nvidia -n $n --greedy $@ \
    --json $R/$tag.json > /dev/null 2> $R/$tag.err
  say "$(printf '%-18s rc=%s %s %s %s' "$tag" "$?" "$(grep -o '"decode_tokens_per_s": [0-9.]*' $R/$tag.json)" \
    "$(grep -o '"peak_in_use": [0-9]*' $R/$tag.json)" "$(grep -o 'wall [0-9.]* ms, device [0-9.]* ms' $R/$tag.err)")"
  pack
}
ids() { i=0; while [ $i -lt $1 ]; do printf ' --prompt-ids %d,%d,%d' $((i + 1)) $((i + 2)) $((i + 3)); i=$((i + 1)); done; }
for b in $B; do dec $b-warm $b 4 --prompt-ids 1,2,3,4,5,6,7,8; done
for rep in 1 2; do for b in $B; do dec $b-b1-r$rep $b 64 --prompt-ids 1,2,3,4,5,6,7,8; done; done
for b in $B; do [ $b = prefix ] || dec $b-b1-profile $b 48 --prompt-ids 1,2,3,4,5,6,7,8 --profile; done
[ "${QUICK:-0}" = 1 ] && { cat $R/gpu.txt $R/summary.txt; exit 0; } # batch 1 only
for p in 8 64; do
  # shellcheck disable=SC2046
  for b in next2 prefix; do dec $b-b$p-warm $b 4 $(ids $p); done
  # shellcheck disable=SC2046
  for b in next2 prefix; do dec $b-b$p $b 32 $(ids $p); done
done
timeout 150 .device/next2/bin/clmoe-generate --random-weights /tmp/k48.conf --weights bf16 --device nvidia \
  --prefill-bench 4096,4096,16384 --bench-steps 8 --json $R/next2-prefill.json > /dev/null 2> $R/next2-prefill.err
say "next2-prefill rc=$? $(grep -o '"prefill_tokens_per_s": [0-9.]*' $R/next2-prefill.json | tr '\n' ' ')"
pack
cat $R/gpu.txt $R/summary.txt
