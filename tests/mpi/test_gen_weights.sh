#!/bin/sh
# Generation with bf16 weights under expert parallelism (tests/mpi/mpi_gen_weights.c): the
# tiny preset's checkpoint loaded with bf16 matrices on 1 (without mpirun), 2 and 3 ranks:
# each rank's expert stacks bf16, its peak device memory within its part's bf16 size, the
# part equal to fp32 loading then clmoe_gen_set_weights, and the greedy tokens and logits
# (1e-4) of one process with bf16 weights; the comparison fails against fp32 weights. The
# same for the Kimi Linear fixtures of tests/data/kimi_linear (the hub's bf16 shards,
# transformers 5's fp32 file) on 2 ranks. Skipped (77) without MPI.
set -u
. "$(dirname "$0")/../apps/apps_common.sh"
. "$(dirname "$0")/mpi_common.sh"

expect "bf16 weights, one rank without MPI" 0 "mpi_gen_weights: OK 1 rank" -- \
  "$tests/mpi_gen_weights" "$tmp/c1.safetensors"
for n in 2 3; do
  expect "bf16 weights, --ep over $n ranks" 0 "mpi_gen_weights: OK $n ranks" -- \
    run -np $n --bind-to none "$tests/mpi_gen_weights" "$tmp/c$n.safetensors"
done
# The comparison can fail: one process with fp32 weights is not the bf16 model.
expect "against fp32 weights the logits differ (2 ranks)" 1 "logits relative error" -- \
  run -np 2 --bind-to none "$tests/mpi_gen_weights" "$tmp/f2.safetensors" --fp32-reference
fx="$srcdir/tests/data/kimi_linear"
for m in tiny-hub tiny-tf5; do
  expect "$m: bf16 weights, --ep over 2 ranks" 0 "mpi_gen_weights: OK 2 ranks" -- \
    run -np 2 --bind-to none "$tests/mpi_gen_weights" --hf "$fx/$m"
done

[ "$fails" -eq 0 ]
