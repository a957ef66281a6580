#!/bin/sh
# Kimi-Linear-48B-A3B's shapes cut to 8 layers (MLA at 4 and 8; random bf16 weights; fits an
# H100) with the inference passes past the GEMV on the tile GEMM (CLMOE_INFER_TILE auto: on a
# matrix unit) and, for comparison in the same call, on the widened fp32 path of before
# (CLMOE_INFER_TILE=0): per-kernel decode profiles at batch 64 and 8, and the prefill bench at
# 4096 and 16384 tokens with each prefill's kernel table (--profile with --prefill-bench).
#   run with carry [".device"] (.device/prefix: the binaries of branch tilegen), writing under
#   $OUT. MODES (default "auto 0"), BATCHES (default "64 8") and PREFILL (default
#   4096,16384) change what is measured.
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
$NB/clmoe-generate --version > $R/version.txt 2>&1
cat $R/gpu.txt $R/version.txt
sed -e "s/^layers = .*/layers = 8/" -e "s/^mla_layers = .*/mla_layers = 4, 8/" presets/kimi-linear-48b.conf > /tmp/k48-l8.conf
# the costliest kernels of a --json profile, one per line
kernels() {
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); p=sys.argv[2]
rows=d['profile']['kernels'] if p == 'decode' else d['prefill_bench'][int(p)]['profile']['kernels']
[print('  %-36s %9.3f ms %8.1f launches' % (k['kernel'], k['ms_per_step'], k['launches_per_step'])) for k in rows[:24]]" "$@"
}
for mode in ${MODES:-auto 0}; do
  export CLMOE_INFER_TILE=$mode
  for b in ${BATCHES:-64 8}; do
    args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
    # shellcheck disable=SC2086
    timeout 150 $NB/clmoe-generate --random-weights /tmp/k48-l8.conf --weights bf16 --device nvidia $args -n 24 \
      --greedy --profile --json $R/tile-$mode-b$b.json > /dev/null 2> $R/tile-$mode-b$b.err
    echo "CLMOE_INFER_TILE=$mode b$b rc=$?"
    grep "^decode\|^prefill" $R/tile-$mode-b$b.err
    grep -A30 "^profile" $R/tile-$mode-b$b.err
    kernels $R/tile-$mode-b$b.json decode
  done
  timeout 300 $NB/clmoe-generate --random-weights /tmp/k48-l8.conf --weights bf16 --device nvidia \
    --prefill-bench ${PREFILL:-4096,16384} --bench-steps 8 --profile --json $R/tile-$mode-prefill.json \
    > /dev/null 2> $R/tile-$mode-prefill.err
  echo "CLMOE_INFER_TILE=$mode prefill rc=$?"
  cat $R/tile-$mode-prefill.err
done
(cd $OUT && tar czf r.tgz r)
