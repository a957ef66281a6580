# mlatr call 1: MLA attention at the training shape before any change (main's binaries), SDPA, the training step.
set -u
. .device-mlatr/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc
D=.device-mlatr; B=$D/main-bin
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > $OUT/r/gpu.txt 2>&1
$B/clmoe-bench --version > $OUT/r/version.txt 2>&1
(timeout 100 python3 $D/sdpa_mla.py --shapes 8:8192,8:4096 --batch 2 > $OUT/r/sdpa.jsonl 2> $OUT/r/sdpa.err; echo "sdpa rc=$?" >> $OUT/r/summary.txt)
for dt in f32 bf16; do
  CLMOE_FASTPATH=1 timeout 150 $B/clmoe-bench mla --device nvidia --shapes 8:8192 --batch 2 --dtype $dt --no-decode \
    --naive-max 0 --reps 5 --max-seconds 3 --json $OUT/r/bench-$dt.json > $OUT/r/bench-$dt.txt 2>&1
  echo "bench $dt rc=$?" >> $OUT/r/summary.txt
done
CLMOE_FASTPATH=1 timeout 200 $B/clmoe-train --preset gpu --data $D/text.txt --steps 10 --seq-len 8192 --batch 2 \
  --precision bf16 --profile --sample 0 --out /tmp/r-main --device nvidia > $OUT/r/train-main.txt 2>&1
echo "train rc=$?" >> $OUT/r/summary.txt
cd $OUT && tar czf r.tgz r && cd - > /dev/null
cat $OUT/r/summary.txt $OUT/r/sdpa.jsonl; cat $OUT/r/bench-*.txt; grep -E "^mla|tok/s|step +10|total" $OUT/r/train-main.txt | tail -20
