# The device call that measures branch epbf16's expert-parallel MoE layers in bf16 (not run
# yet: the session that wrote it had no GPU). For a 2-GPU machine (nvidia-h100-x2), from the
# project root with this branch's binaries in .device-epbf16/prefix (static,
# --disable-shared, built --with-mpi=yes), an MPI launcher on the machine and a byte text in
# .device-epbf16/text.txt. What it measures: `clmoe-train --ep 2` on the `gpu` preset at
# T 4096, B 2 (one sequence a rank), 8 steps with --profile, --precision fp32 then bf16:
# tokens/s, the MoE share of the step, and the two loss curves (bf16 follows fp32 within
# bf16's drift; a NaN or a flat loss is a failure). About 4 minutes.
set -u
. .device-epbf16/env.sh > /dev/null 2>&1
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
D=.device-epbf16; B=$D/prefix/bin
mkdir -p $OUT/r
command -v mpirun > /dev/null || { echo "no mpirun on the device machine" | tee $OUT/r/summary.txt; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/r/gpu.txt 2>&1
for p in fp32 bf16; do
  timeout 240 mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none $B/clmoe-train --ep 2 \
    --preset gpu --data $D/text.txt --steps 8 --seq-len 4096 --batch 2 --precision $p --profile \
    --sample 0 --eval-every 0 --checkpoint-every 0 --out /tmp/ep-$p --overwrite --device nvidia \
    > $OUT/r/train-$p.txt 2>&1
  echo "train $p rc=$?" >> $OUT/r/summary.txt
  cp /tmp/ep-$p/metrics.csv $OUT/r/metrics-$p.csv 2> /dev/null
done
cat $OUT/r/gpu.txt $OUT/r/summary.txt
grep -h -E "tokens/s|^profile|moe" $OUT/r/train-*.txt | head -40
awk -F, 'NR == FNR { l[$1] = $2; next } FNR > 1 { print "step " $1 ": loss fp32 " l[$1] ", bf16 " $2 }' \
  $OUT/r/metrics-fp32.csv $OUT/r/metrics-bf16.csv
