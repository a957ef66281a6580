# The device call that measures branch hostsync's step without host round trips (not run yet:
# no GPU was lent in the session that wrote it). From the project root with this branch's
# binaries installed in .device-hostsync/prefix (static, --disable-shared), main's clmoe-train
# (the commit the branch started from, 0d1a723, or the main it is compared with) in
# .device-hostsync/main-bin and a byte text in .device-hostsync/text.txt (the same 1.06 MB of
# docs and library sources as the bf16 sections of docs/benchmarks.md).
# What it measures: the `gpu` preset at T 8192, B 2, --precision bf16 --profile, 10 steps,
# main's binary before and this branch's after, alone on the GPU one after the other:
# tokens/s, the wall time and device time of the profiled steps (steps 3-10) and their
# difference per step (the time the GPU waits for the host; 12 ms per step before at b7bd38a),
# and the host waits per step (the branch's profile prints them; main's does not). The losses
# of the two runs must match step for step (the same kernels and order; only the reads moved).
# About 3 minutes.
set -u
. .device-hostsync/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
D=.device-hostsync; MB=$D/main-bin; NB=$D/prefix/bin
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/r/gpu.txt 2>&1
$NB/clmoe-train --version > $OUT/r/version-new.txt 2>&1
$MB/clmoe-train --version > $OUT/r/version-main.txt 2>&1
# the AdamW and clip kernels on NVIDIA against the double references first
timeout 60 $NB/clmoe-xcheck --device nvidia --op adamw --op xent --op embedding \
  --json $OUT/r/xcheck.json > $OUT/r/xcheck.txt 2>&1
echo "xcheck rc=$?" >> $OUT/r/summary.txt
for v in main new main new; do # twice each, alternating: the second pair shows the spread
  B=$MB; [ $v = new ] && B=$NB
  n=$(ls $OUT/r/train-$v-*.txt 2> /dev/null | wc -l)
  timeout 150 $B/clmoe-train --preset gpu --data $D/text.txt --steps 10 --seq-len 8192 --batch 2 \
    --precision bf16 --profile --sample 0 --eval-every 0 --checkpoint-every 0 --metrics $OUT/r/metrics-$v-$n.csv \
    --out /tmp/r-$v-$n --overwrite --device nvidia > $OUT/r/train-$v-$n.txt 2>&1
  echo "train $v $n rc=$?" >> $OUT/r/summary.txt
done
cd $OUT && tar czf r.tgz r && cd - > /dev/null
cat $OUT/r/gpu.txt $OUT/r/summary.txt; tail -6 $OUT/r/xcheck.txt
# wall - device per profiled step: "N tokens in W s of steps (...); device time K s"
for f in $OUT/r/train-*.txt; do
  awk -v f="$(basename $f)" '/^profile \(/ { for (i = 1; i <= NF; i++) { if ($i == "tokens") tok = $(i - 1);
    if ($i == "in") w = $(i + 1); if ($i == "time") k = $(i + 1) }
    st = tok / 16384; printf "%s: %.0f tok/s, wall %.1f ms, device %.1f ms, wall - device %.1f ms per step\n",
    f, tok / w, 1e3 * w / st, 1e3 * k / st, 1e3 * (w - k) / st }' $f
  grep "host waits" $f
done
for v in main new; do cut -d, -f1,2 $OUT/r/metrics-$v-0.csv | tr '\n' ' '; echo; done
