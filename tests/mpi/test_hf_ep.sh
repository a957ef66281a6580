#!/bin/sh
# clmoe-generate --model --ep N under mpirun: the tiny Kimi Linear checkpoints of
# tests/data/kimi_linear (the hub's bf16 shards with grouped routing, transformers 5's fp32
# file) with their routed experts spread over 2 and 3 ranks, each rank reading only its own
# experts' tensors, give the logits of one process (1e-5 of the largest logit) and
# transformers' greedy tokens. Skipped (77) without MPI.
set -u
. "$(dirname "$0")/../apps/apps_common.sh"
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/../apps/hf_fixture.sh"
gen="$apps/clmoe-generate"
op="$apps/clmoe-op"

for m in tiny-hub tiny-tf5; do
  args="--model $fx/$m --prompt-ids $(prompt 0) --prompt-ids $(prompt 1) --prompt-ids $(prompt 2) -n 8 --greedy --quiet"
  # shellcheck disable=SC2086
  "$gen" $args --logits "$tmp/$m-1.safetensors" --json "$tmp/$m-1.json" > /dev/null 2>&1 ||
    fail "$m: one process"
  for n in 2 3; do
    # shellcheck disable=SC2086
    if run -np $n "$gen" $args --ep $n --logits "$tmp/$m-$n.safetensors" --json "$tmp/$m-$n.json" > "$tmp/out" 2>&1; then
      pass "$m: --ep $n runs"
    else
      fail "$m: --ep $n"; tail -5 "$tmp/out"; continue
    fi
    expect "$m: --ep $n logits = one process's" 0 "" -- "$op" compare "$tmp/$m-$n.safetensors" \
      "$tmp/$m-1.safetensors" --tol 1e-5
    for k in 0 1 2; do
      got=$(ids_of "$tmp/$m-$n.json" $k)
      [ "$got" = "$(greedy $k)" ] && pass "$m: --ep $n prompt $k greedy = transformers'" ||
        fail "$m: --ep $n prompt $k greedy '$got', transformers '$(greedy $k)'"
    done
  done
done
exit $((fails > 0))
