#!/bin/sh
# The expert-parallel MoE layer (include/clmoe/moe_ep.h) under a real launcher: on 1 (without
# mpirun), 1, 2, 3 and 4 ranks every rank's rows of the output and the input gradient, and
# the weight gradients summed over the ranks, equal the single-rank layer's on the whole
# batch (tests/mpi/mpi_moe_ep.c, fp32 relative error <= 1e-5); a wrong expert offset and a
# corrupted saved expert output (seen only by the backward) fail. The same for the layer in
# the Kimi Linear form (--kimi: no latent projection, SwiGLU, grouped selection, p = 2 s).
# With --bf16 the layer as a bf16 training step runs it (the expert GEMMs on bf16 copies)
# against the single-rank bf16 layer and the fp32 one.
# Skipped (77) when clmoe was built without MPI or no mpirun exists. Run by make check.
set -u
. "$(dirname "$0")/../apps/apps_common.sh"
. "$(dirname "$0")/mpi_common.sh"

expect "expert-parallel MoE, one rank without MPI" 0 "mpi_moe_ep: OK 1 rank" -- "$tests/mpi_moe_ep"
for n in 1 2 3 4; do
  expect "expert-parallel MoE on $n ranks" 0 "mpi_moe_ep: OK $n rank" -- \
    run -np $n --bind-to none "$tests/mpi_moe_ep"
done
# The check can fail: experts taken from the wrong offset.
expect "a wrong expert offset is caught (1 rank)" 1 "relative error" -- "$tests/mpi_moe_ep" --mutate
expect "a wrong expert offset is caught (3 ranks)" 1 "relative error" -- \
  run -np 3 --bind-to none "$tests/mpi_moe_ep" --mutate
expect "a wrong saved expert output is caught by the backward (2 ranks)" 1 "dx relative error" -- \
  run -np 2 --bind-to none "$tests/mpi_moe_ep" --mutate-saved
expect "expert-parallel Kimi Linear MoE, one rank without MPI" 0 "mpi_moe_ep: OK 1 rank" -- \
  "$tests/mpi_moe_ep" --kimi
for n in 2 3; do
  expect "expert-parallel Kimi Linear MoE on $n ranks" 0 "mpi_moe_ep: OK $n rank" -- \
    run -np $n --bind-to none "$tests/mpi_moe_ep" --kimi
done
expect "a wrong expert offset is caught (Kimi Linear form, 2 ranks)" 1 "relative error" -- \
  run -np 2 --bind-to none "$tests/mpi_moe_ep" --kimi --mutate
# bf16 (a bf16 training step's weight copies): the expert GEMMs on the tile path with bf16
# operands, the same numbers as the single-rank bf16 layer (1e-4) and fp32's within 2e-2.
expect "expert-parallel MoE in bf16, one rank without MPI" 0 "mpi_moe_ep: OK 1 rank.* in bf16" -- \
  "$tests/mpi_moe_ep" --bf16
for n in 2 3; do
  expect "expert-parallel MoE in bf16 on $n ranks" 0 "mpi_moe_ep: OK $n ranks.* in bf16" -- \
    run -np $n --bind-to none "$tests/mpi_moe_ep" --bf16
done
expect "expert-parallel Kimi Linear MoE in bf16 on 2 ranks" 0 "mpi_moe_ep: OK 2 ranks.* in bf16" -- \
  run -np 2 --bind-to none "$tests/mpi_moe_ep" --bf16 --kimi
expect "a wrong expert offset is caught in bf16 (2 ranks)" 1 "relative error" -- \
  run -np 2 --bind-to none "$tests/mpi_moe_ep" --bf16 --mutate
expect "a wrong saved expert output is caught by the bf16 backward (2 ranks)" 1 "dx relative error" -- \
  run -np 2 --bind-to none "$tests/mpi_moe_ep" --bf16 --mutate-saved

[ "$fails" -eq 0 ]
