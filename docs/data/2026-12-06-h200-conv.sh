# The device call that measures branch conv (bf16 operands made once where they are produced: the
# RMSNorm / AttnRes-and-norm output, the KDA and MLA attention outputs before W_o, the KDA
# low-rank codes; not run yet: no device was lent in the session that wrote it). From the
# project root with the branch's binaries installed in .device-conv/prefix (static, DEVICE.md's
# recipe) and main's clmoe-train and clmoe-xcheck (the commit the branch started from, 0d1a723)
# in .device-conv/main-bin, and a byte text of about 1 MB in .device-conv/text.txt (the first
# 1.06 MB of the docs and library sources, as in the 2026-12-05 experts run). About 6 min:
# NVIDIA conformance of the new bf16 outputs (rmsnorm, pointwise mul), then the gpu preset at
# T 8192, B 2, --precision bf16 --profile, 10 steps, main before and the branch after, with
# CLMOE_FASTPATH=1; the table at the end: tokens/s, the `convert` family's device time and
# launches (over the 8 profiled steps), the dense products, peak device memory, loss at step 10.
set -u
. .device-conv/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc
D=.device-conv; MB=$D/main-bin; NB=$D/prefix/bin
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/r/gpu.txt 2>&1
$NB/clmoe-train --version > $OUT/r/version.txt 2>&1
timeout 90 $NB/clmoe-xcheck --device nvidia --op rmsnorm --op pointwise --op linear --json $OUT/r/xcheck.json \
  > $OUT/r/xcheck.txt 2>&1
echo "xcheck rc=$?" >> $OUT/r/summary.txt
for v in main new; do
  B=$MB; [ $v = new ] && B=$NB
  CLMOE_FASTPATH=1 timeout 150 $B/clmoe-train --preset gpu --data $D/text.txt --steps 10 --seq-len 8192 --batch 2 \
    --precision bf16 --profile --sample 0 --checkpoint-every 0 --out /tmp/r-$v --overwrite --device nvidia \
    > $OUT/r/train-$v.txt 2>&1
  echo "train $v rc=$?" >> $OUT/r/summary.txt
done
cd $OUT && tar czf r.tgz r && cd - > /dev/null
cat $OUT/r/gpu.txt $OUT/r/summary.txt; tail -6 $OUT/r/xcheck.txt
printf '%-5s %-60s\n' run 'tok/s | convert (s, launches) | gemm | peak memory | step 10'
for v in main new; do
  f=$OUT/r/train-$v.txt
  printf '%-5s %s | %s | %s | %s | %s\n' $v "$(grep -o '([0-9]* tok/s)' $f | tail -1)" \
    "$(awk '$1 == "convert" {print $2 " s, " $4}' $f | head -1)" "$(awk '$1 == "gemm" {print $2 " s, " $4}' $f | head -1)" \
    "$(grep -o 'peak in use [0-9.]* [GM]iB' $f | tail -1)" "$(grep -E '^step +10/' $f | grep -o 'loss [0-9.]*')"
done
