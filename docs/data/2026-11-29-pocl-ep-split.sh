#!/bin/sh
# CPU (PoCL) expert-parallel step split for N = 1..4 ranks: demo preset, quantile-hist, 12 x 128 tokens.
B=/tmp/b-stg2/apps
export CLMOE_DEVICE=cpu OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd /tmp/epb 2>/dev/null || { mkdir -p /tmp/epb && cd /tmp/epb; }
cat /usr/share/common-licenses/* > corpus.txt
$B/clmoe-train --preset demo --print-config | sed 's/^balancing = .*/balancing = quantile-hist/' > demo-hist.conf
for n in 1 2 3 4; do
  echo "== N=$n"
  timeout 600 mpirun --oversubscribe --bind-to none -np $n $B/clmoe-train --config demo-hist.conf --data corpus.txt \
    --steps 12 --stop-at 7 --batch 12 --seq-len 128 --eval-every 0 --sample 0 --out r$n --ep $n 2>&1 | grep -E "ep split|step +7/"
  $B/clmoe-plan --preset demo --gpus $n --gpu-mem 16G --batch-tokens $((1536 / n)) --dtype fp32 --json - 2>/dev/null | grep step_bytes
done
