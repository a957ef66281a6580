#!/bin/sh
# The distributed layer under a real launcher: clmoe-info --mpi shows every rank, the
# ranks/local ranks agree with mpirun's, binding is kept when mpirun binds and done by
# clmoe when it does not, and a rank that fails ends the whole job at once. Skipped (77)
# when clmoe was built without MPI or no mpirun exists. Run by make check.
set -u
. "$(dirname "$0")/../apps/apps_common.sh"
. "$(dirname "$0")/mpi_common.sh"

# 1. clmoe-info --mpi: rank 0 prints both ranks in order, launcher binding kept.
expect "clmoe-info --mpi on 2 ranks" 0 "rank 1 of 2" -- run -np 2 --bind-to core "$info" --mpi
if grep -q "rank 0 of 2" "$tmp/out" && [ "$(grep -c '^rank ' "$tmp/out")" -eq 2 ] &&
   [ "$(grep -c 'binding     launcher' "$tmp/out")" -eq 2 ]; then
  pass "two reports in rank order, bound by the launcher"
else
  fail "clmoe-info --mpi output"; sed 's/^/    /' "$tmp/out"
fi

# 2. Unbound by mpirun: clmoe binds each rank to its share of the cores (CPU device).
expect "clmoe-info --mpi --json, unbound" 0 '"rank": 1' -- run -np 2 --bind-to none "$info" --mpi --json -
if [ "$(grep -c '"binding": "cpu-share"' "$tmp/out")" -eq 2 ]; then
  pass "clmoe binds unbound ranks to their share"
else
  fail "unbound ranks were not bound by clmoe"; sed 's/^/    /' "$tmp/out"
fi
expect "CLMOE_BIND=none" 0 '"binding": "none"' -- run -np 2 --bind-to none -x CLMOE_BIND=none "$info" --mpi --json -

# 3. Ranks and local ranks agree with the launcher's; the gathered reports are whole.
expect "world and local ranks (2)" 0 "mpi_ranks: OK 2 ranks" -- run -np 2 "$tests/mpi_ranks"
expect "world and local ranks (3)" 0 "mpi_ranks: OK 3 ranks" -- run -np 3 --bind-to none "$tests/mpi_ranks"

# 4. The expert-parallel exchange: every routed copy reaches a rank holding its expert and
#    comes back to its row, for 1 (no MPI), 2, 3 and 4 ranks.
expect "expert exchange, one rank without MPI" 0 "mpi_exchange: OK 1 rank" -- "$tests/mpi_exchange"
for n in 2 3 4; do
  expect "expert exchange on $n ranks" 0 "mpi_exchange: OK $n ranks" -- run -np $n --bind-to none "$tests/mpi_exchange"
done

# 5. A rank that fails ends the job, non-zero, naming the rank; never a hang.
expect "a failing rank ends the job" 3 "rank 1 of 3: failing on purpose" -- \
  run -np 3 --bind-to none "$tests/mpi_ranks" --fail-rank 1
expect "a bad --device on one rank ends the job" 1 "rank 1 of 2" -- \
  run -np 2 --bind-to none "$info" --mpi --device cpu,nosuch

# 6. Outside a launcher: one rank and a clear message.
expect "clmoe-info --mpi without mpirun" 0 "not started by an MPI launcher" -- "$info" --mpi

[ "$fails" -eq 0 ]
