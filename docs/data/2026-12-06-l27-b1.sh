#!/bin/sh
# Batch-1 greedy decode of Kimi-Linear-48B-A3B's shapes (random bf16 weights), the whole
# model (27 layers) where the GPU has more than 100 GiB, else the 8- and 20-layer cuts:
# .device/new (the MLA decode kernels: 16-byte W_ukv loads, short contexts in splits of 8,
# the latent's norm in the cache append; the router's slots written by k lanes; the KDA
# output's gated head norm inside W_o's GEMV),
# .device/prefix (4c0e085) and .device/before (dba033f, only for the whole model). Each build's programs are made in a short run first (CLMOE_CACHE_DIR keeps them), then 64
# tokens are timed; then HEAD's profile and the batch 1..64 sweep. r.tgz is packed after each part.
#   run with carry [".device"], writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
.device/prefix/bin/clmoe-generate --version > $R/version.txt 2>&1
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
cuts="8 20"; [ "${mib:-0}" -gt 102400 ] && cuts=27
for L in $cuts; do
  mla=; i=4; while [ $i -le $L ]; do mla="$mla${mla:+, }$i"; i=$((i + 4)); done
  sed -e "s/^layers = .*/layers = $L/" -e "s/^mla_layers = .*/mla_layers = $mla/" presets/kimi-linear-48b.conf \
    > /tmp/k48-l$L.conf
done
[ -f /tmp/k48-l27.conf ] && cp presets/kimi-linear-48b.conf /tmp/k48-l27.conf
dec() { # tag build layers tokens [options]: decode tokens/s, and the profile's per-step ms
  tag=$1 bin=.device/$2/bin/clmoe-generate L=$3 n=$4; shift 4
  # shellcheck disable=SC2068
  timeout 150 $bin --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia --prompt-ids 1,2,3,4,5,6,7,8 \
    -n $n --greedy $@ --json $R/$tag.json > /dev/null 2> $R/$tag.err
  say "$(printf '%-20s rc=%s %s %s | %s' "$tag" "$?" "$(grep -o '"decode_tokens_per_s": [0-9.]*' $R/$tag.json)" \
    "$(grep -o 'wall [0-9.]* ms, device [0-9.]* ms' $R/$tag.err)" "$(grep '^  gemv ' $R/$tag.err | tr -s ' ' | cut -d' ' -f3-4)")"
  pack
}
for L in $cuts; do
  builds="new prefix"; [ $L = 27 ] && builds="$builds before"
  for b in $builds; do
    dec $b-l$L-warm $b $L 4
    dec $b-l$L $b $L 64
  done
  dec new-l$L-profile new $L 48 --profile
  dec prefix-l$L-profile prefix $L 48 --profile
done
for b in new prefix; do
  .device/$b/bin/clmoe-bench mla --device nvidia --no-prefill --decode-H 32 --d 2304 --q-rank 1536 --kv-rank 512 \
    --Dn 128 --Dr 64 --Dv 128 --decode-ctx 1,32,256,4096,65536 --decode-batch 1,8 --kernels > $R/bench-mla-$b.txt 2>&1
  say "bench mla $b rc=$?"
  pack
done
.device/new/bin/clmoe-xcheck --device nvidia --op mla.decode --op moe.decode --op moe.qb --op moe.forward.kimi > $R/xcheck-new.txt 2>&1
say "xcheck new rc=$? $(tail -1 $R/xcheck-new.txt)"
pack
L=${cuts##* }
for p in 8 64; do
  ids=; i=0; while [ $i -lt $p ]; do ids="$ids --prompt-ids $((i + 1)),$((i + 2)),$((i + 3))"; i=$((i + 1)); done
  # shellcheck disable=SC2086
  dec new-l$L-b$p new $L 32 $ids
done
cat $R/gpu.txt $R/summary.txt
