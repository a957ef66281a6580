#!/bin/sh
# The decode GEMV with 16-byte weight loads (3fc6a72, .device/mid: eight adjacent columns a
# lane; the MoE decode kernels' aligned loads) and the FFN and final pre-norms inside their
# GEMV launches (f9cc032, .device/prefix) against the element-wise loads before them
# (.device/before: dba033f's binaries) on an NVIDIA GPU, in one call, the most wanted first
# (r.tgz is packed after each part, so a call cut short still returns what ran):
#  1. greedy decode with --profile of Kimi-Linear-48B-A3B's shapes cut to 8 layers at batch 1,
#     before and HEAD;
#  2. the GEMV and MoE decode checks on the GPU (HEAD), the PTX of their programs kept (r/ptx);
#  3. decode: the 8-layer cut at batch 1 with mid and with HEAD at 2 and 8 rows per
#     work-group (CLMOE_GEMV_ROWS), at batch 8, and the gpu preset at batch 1 and 16, before
#     and HEAD;
#  4. clmoe-bench gemv on the 48B products at 1 and 4 tokens: before (one copy of each matrix,
#     its only mode), HEAD warm (the same), HEAD cold (cycling through 256 MiB of copies),
#     HEAD cold at 2 and 8 rows per work-group.
#   run with carry [".device"], writing under $OUT (r.tgz)
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin OB=.device/before/bin MB=.device/mid/bin
R=$OUT/r; mkdir -p $R/ptx
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
$NB/clmoe-generate --version > $R/version.txt 2>&1
sed -e "s/^layers = .*/layers = 8/" -e "s/^mla_layers = .*/mla_layers = 4, 8/" presets/kimi-linear-48b.conf > /tmp/k48-l8.conf
dec() { # tag bin model batch (the environment's CLMOE_ knobs apply)
  tag=$1 bin=$2 model=$3 b=$4
  args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
  # shellcheck disable=SC2086
  timeout 100 $bin --random-weights $model --weights bf16 --device nvidia $args -n 40 --greedy --profile \
    --json $R/$tag.json > /dev/null 2> $R/$tag.err
  say "$(printf '%-24s rc=%s %s | %s | %s | %s' "$tag" "$?" "$(grep -o '"decode_tokens_per_s": [0-9.]*' $R/$tag.json)" \
    "$(grep -o 'wall [0-9.]* ms, device [0-9.]* ms' $R/$tag.err)" "$(grep '^  gemv ' $R/$tag.err | tr -s ' ' | cut -d' ' -f3-4)" \
    "$(grep '^  moe ' $R/$tag.err | tr -s ' ' | cut -d' ' -f3-4)")"
}
dec before-k48-l8-b1 $OB/clmoe-generate /tmp/k48-l8.conf 1
dec head-k48-l8-b1 $NB/clmoe-generate /tmp/k48-l8.conf 1
pack
$NB/clmoe-xcheck --device nvidia --op gemv --op moe.decode --op moe.infer.bf16.kimi > $R/xcheck.txt 2>&1
say "xcheck rc=$? $(tail -1 $R/xcheck.txt)"
for f in /tmp/kc/*; do grep -q -a -e "gemv_multi" -e "moe_dec_up" "$f" && cp "$f" $R/ptx/; done
pack
dec mid-k48-l8-b1 $MB/clmoe-generate /tmp/k48-l8.conf 1
for rows in 2 8; do
  export CLMOE_GEMV_ROWS=$rows
  dec head-rows$rows-k48-l8-b1 $NB/clmoe-generate /tmp/k48-l8.conf 1
done
unset CLMOE_GEMV_ROWS
for m in gpu:1 gpu:16 /tmp/k48-l8.conf:8; do
  model=${m%%:*} b=${m#*:} name=$(basename ${m%%:*} .conf)
  dec before-$name-b$b $OB/clmoe-generate $model $b
  dec head-$name-b$b $NB/clmoe-generate $model $b
  pack
done
SH=12288x2304,2304x4096,2048x2304,256x2304,163840x2304
$OB/clmoe-bench gemv --device nvidia --shapes $SH --tokens 1,4 > $R/bench-before.txt 2>&1
$NB/clmoe-bench gemv --device nvidia --shapes $SH --tokens 1,4 --warm > $R/bench-head-warm.txt 2>&1
$NB/clmoe-bench gemv --device nvidia --shapes $SH --tokens 1,4 > $R/bench-head-cold.txt 2>&1
for rows in 2 8; do # rows per work-group at one token (default 4 on GPUs)
  CLMOE_GEMV_ROWS=$rows $NB/clmoe-bench gemv --device nvidia --shapes $SH --tokens 1 > $R/bench-head-cold-rows$rows.txt 2>&1
done
pack
cat $R/summary.txt; grep -h -A11 "gemv us" $R/bench-*.txt
