# The device call that measures branch mlatr's MLA changes (not run yet: no device was lent for the
# rest of the session). From the project root with the branch's binaries installed in
# .device-mlatr/prefix (static), main's clmoe-bench and clmoe-train in .device-mlatr/main-bin,
# tests/peers/sdpa_mla.py and a byte text in .device-mlatr: NVIDIA conformance of the tile attention
# (the double-buffered backward, the bf16 copies under the forward), clmoe-bench mla at the training
# shape before/after with each kernel's time, the bf16 training step before/after, SDPA. About 4 min.
# On main (658fb3d on) the new kernels run on NVIDIA only with CLMOE_MLA_TC_BWD=1, exported here
# for the new binaries (main's ignore it).
set -u
. .device-mlatr/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_MLA_TC_BWD=1
D=.device-mlatr; MB=$D/main-bin; NB=$D/prefix/bin
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/r/gpu.txt 2>&1
$NB/clmoe-bench --version > $OUT/r/version.txt 2>&1
timeout 120 $NB/clmoe-xcheck --device nvidia --op mla_tile --op mla.layer --json $OUT/r/xcheck.json > $OUT/r/xcheck.txt 2>&1
echo "xcheck rc=$?" >> $OUT/r/summary.txt
for dt in f32 bf16; do
  CLMOE_FASTPATH=1 timeout 60 $NB/clmoe-bench mla --device nvidia --shapes 8:8192 --batch 2 --dtype $dt --no-decode \
    --naive-max 0 --reps 10 --max-seconds 2 --kernels --json $OUT/r/bench-new-$dt.json > $OUT/r/bench-new-$dt.txt 2>&1
  echo "bench new $dt rc=$?" >> $OUT/r/summary.txt
  CLMOE_FASTPATH=1 timeout 60 $MB/clmoe-bench mla --device nvidia --shapes 8:8192 --batch 2 --dtype $dt --no-decode \
    --naive-max 0 --reps 10 --max-seconds 2 --json $OUT/r/bench-main-$dt.json > $OUT/r/bench-main-$dt.txt 2>&1
done
for v in new main; do
  B=$MB; [ $v = new ] && B=$NB
  CLMOE_FASTPATH=1 timeout 120 $B/clmoe-train --preset gpu --data $D/text.txt --steps 10 --seq-len 8192 --batch 2 \
    --precision bf16 --profile --sample 0 --out /tmp/r-$v --device nvidia > $OUT/r/train-$v.txt 2>&1
  echo "train $v rc=$?" >> $OUT/r/summary.txt
done
timeout 60 python3 $D/sdpa_mla.py --shapes 8:8192 --batch 2 > $OUT/r/sdpa.jsonl 2> $OUT/r/sdpa.err
cd $OUT && tar czf r.tgz r && cd - > /dev/null
cat $OUT/r/gpu.txt $OUT/r/summary.txt; tail -12 $OUT/r/xcheck.txt; cat $OUT/r/sdpa.jsonl
cat $OUT/r/bench-new-*.txt; grep tile $OUT/r/bench-main-*.txt
for v in new main; do grep -E "^mla|tok/s\)|step +10" $OUT/r/train-$v.txt; done
