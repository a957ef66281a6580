#!/bin/sh
# Kimi-Linear-48B-A3B's shapes (random bf16 weights) cut to 8 and 16 layers, on an H100 (the
# 27-layer model's 98 GB need an H200: docs/data/2026-12-05-k48-cuts.sh 27), the binaries
# of .device/before (c4c3fbf, with the --random-weights FILE commit picked onto it) against
# .device/prefix (HEAD) in the same call:
#   1. HEAD's NVIDIA checks of the changed kernels (moe.infer with the tile path, gemv with
#      the split argmax, gen.sample with the split sampler)
#   2. decode tokens/s at batch 1, 8 and 64 (-n 64, greedy) and prefill tokens/s at 4K and
#      16K, both builds, both cuts
#   3. HEAD's per-kernel profiles: batch-1 and batch-64 decode, the 4K prefill (16 layers)
#   4. HEAD's prefill of 64K and 128K tokens (8 layers)
# run with carry [".device"], writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin BB=.device/before/bin
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
$NB/clmoe-generate --version > $R/version.txt 2>&1
timeout 120 $NB/clmoe-xcheck --device nvidia --op moe.infer --op gemv --op gen.sample --json $R/xcheck.json \
  > $R/xcheck.txt 2>&1
say "xcheck rc=$? $(tail -1 $R/xcheck.txt)"
for L in 8 16; do
  mla="4, 8"; [ $L = 16 ] && mla="4, 8, 12, 16"
  sed -e "s/^layers = .*/layers = $L/" -e "s/^mla_layers = .*/mla_layers = $mla/" presets/kimi-linear-48b.conf \
    > /tmp/k48-l$L.conf
done
dec() { # tag bin L batch [args...]
  tag=$1 bin=$2 L=$3 b=$4; shift 4
  args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
  # shellcheck disable=SC2086
  timeout 100 $bin --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia $args -n 64 --greedy --quiet \
    --json $R/$tag.json "$@" > /dev/null 2> $R/$tag.err
  say "$tag rc=$? $(grep -o '"decode_tokens_per_s": [0-9.]*' $R/$tag.json)"
}
pre() { # tag bin L lengths [args...]
  tag=$1 bin=$2 L=$3 len=$4; shift 4
  timeout 150 $bin --random-weights /tmp/k48-l$L.conf --weights bf16 --device nvidia --prefill-bench $len \
    --bench-steps 8 --json $R/$tag.json "$@" > /dev/null 2> $R/$tag.err
  say "$tag rc=$? $(grep -o '"prefill_tokens_per_s": [0-9.]*' $R/$tag.json | tr '\n' ' ')"
}
for L in 8 16; do
  for b in 1 8 64; do
    dec after-l$L-b$b $NB/clmoe-generate $L $b
    dec before-l$L-b$b $BB/clmoe-generate $L $b
  done
  pre after-l$L-prefill $NB/clmoe-generate $L 4096,16384
  pre before-l$L-prefill $BB/clmoe-generate $L 4096,16384
  pack
done
for b in 1 64; do
  dec profile-l16-b$b $NB/clmoe-generate 16 $b --profile
  grep -A10 "^profile" $R/profile-l16-b$b.err | head -11
done
pre profile-l16-prefill $NB/clmoe-generate 16 4096 --profile
pack
pre after-l8-long $NB/clmoe-generate 8 65536,131072
pack
cat $R/gpu.txt; tail -3 $R/xcheck.txt; for f in $R/*prefill*.err $R/after-l8-long.err; do echo "== $f"; grep -A3 "tokens  *chunk" $f; done
for f in $R/after-l16-b1 $R/after-l16-b64; do grep -h "memory" $f.err | head -2; done
