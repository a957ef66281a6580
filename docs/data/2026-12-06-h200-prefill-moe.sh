# Device calls for branch prefill (a one-process prefill reads a MoE layer's bf16 expert stacks
# as they are, clmoe_moe_forward_infer, instead of widening the layer to fp32): not run yet, no
# device was lent to the session that wrote it. One call per argument, each under 10 minutes:
#
#   sh docs/data/2026-12-06-h200-prefill-moe.sh gpu   a few minutes: the moe.infer, moe.forward
#       and moe.decode checks on the H200; then the gpu preset with random bf16
#       weights, one prompt of 4096 and of 16384 tokens in one prefill pass, main (before) against
#       the branch (after): prefill tokens/s and the pool's peak / held bytes (the summary's
#       "device memory" line; --json "device_memory")
#   sh docs/data/2026-12-06-h200-prefill-moe.sh k48   about 9 min, needs_h200: the same at
#       kimi-linear-48b's shapes, a 4096-token prompt (before: ~98 GB weights + 6.75 GiB of
#       fp32 expert copies a MoE layer, kept by the pool; after: no expert copy)
#
# Set up here first (../shared/guide/DEVICE.md): ../shared/tools/device-prep, then
#   after:  ./configure --prefix=$PWD/.device-prefill/prefix --disable-shared && make -j2 install
#   before: the same from `git archive main`, into .device-prefill/main-prefix
# keep only bin/clmoe-generate and bin/clmoe-xcheck of each (stripped), and run with
# carry [".device-prefill"], writing under $OUT.
set -u
D=.device-prefill
. $D/env.sh > /dev/null 2>&1 || . .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1

bench() { # preset tokens tag prefix: one prompt of that many bytes in one prefill pass, 1 new token
  yes "the quick brown fox jumps over the lazy dog" | head -c $2 > /tmp/p$2.txt
  timeout 280 $4/bin/clmoe-generate --random-weights $1 --weights bf16 --device nvidia --prompt-file /tmp/p$2.txt \
    --prefill-chunk $2 -n 1 --greedy --json $R/$1-$2-$3.json > $R/$1-$2-$3.txt 2>&1
  echo "$1 $2 $3 rc=$?" >> $R/summary.txt
  grep -E "^prefill|device memory" $R/$1-$2-$3.txt >> $R/summary.txt
}

case ${1:-} in
  gpu)
    $D/prefix/bin/clmoe-xcheck --device nvidia --op moe.infer --op moe.forward --op moe.decode > $R/xcheck.txt 2>&1
    echo "xcheck rc=$?" >> $R/summary.txt
    for t in 4096 16384; do bench gpu $t before $D/main-prefix; bench gpu $t after $D/prefix; done ;;
  k48)
    bench kimi-linear-48b 4096 after $D/prefix
    bench kimi-linear-48b 4096 before $D/main-prefix ;;
  *) echo "usage: sh $0 gpu|k48" >&2; exit 2 ;;
esac
cat $R/summary.txt
