#!/bin/sh
# clmoe-generate --model --ep N under mpirun: the tiny Kimi Linear checkpoints of
# tests/data/kimi_linear (the hub's bf16 shards with grouped routing, transformers 5's fp32
# file) with their routed experts spread over 2 and 3 ranks, each rank reading only its own
# experts' tensors, give the logits of one process (1e-5 of the largest logit) and
# transformers' greedy tokens; with --weights bf16 each rank's matrices are bf16 and 2 ranks give
# one bf16 process's logits and tokens (and not the fp32 ones). Skipped (77) without MPI.
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
# bf16 weight storage under --ep: each rank's matrices bf16 (made so when loaded), the same
# logits and greedy tokens as one process with bf16 weights; not the fp32 logits
m=tiny-tf5
args="--model $fx/$m --prompt-ids $(prompt 0) --prompt-ids $(prompt 2) -n 8 --greedy --quiet --weights bf16"
# shellcheck disable=SC2086
"$gen" $args --logits "$tmp/bf16-1.safetensors" --json "$tmp/bf16-1.json" > /dev/null 2>&1 || fail "$m: bf16, one process"
# shellcheck disable=SC2086
"$gen" $args --weights fp32 --logits "$tmp/fp32-1.safetensors" > /dev/null 2>&1 || fail "$m: fp32, one process"
# shellcheck disable=SC2086
if run -np 2 "$gen" $args --ep 2 --logits "$tmp/bf16-2.safetensors" --json "$tmp/bf16-2.json" > "$tmp/out" 2>&1; then
  pass "$m: --ep 2 --weights bf16 runs"
  expect "$m: --ep 2 --weights bf16 logits = one process's" 0 "" -- "$op" compare "$tmp/bf16-2.safetensors" \
    "$tmp/bf16-1.safetensors" --tol 1e-5
  for k in 0 1; do
    [ "$(ids_of "$tmp/bf16-2.json" $k)" = "$(ids_of "$tmp/bf16-1.json" $k)" ] &&
      pass "$m: --ep 2 --weights bf16 sequence $k greedy = one process's" ||
      fail "$m: --ep 2 --weights bf16 sequence $k greedy differs from one process's"
  done
  if grep -q '"weights_dtype": "bf16"' "$tmp/bf16-2.json"; then pass "$m: --ep 2 names bf16 weights"
  else fail "$m: --ep 2 --json lacks \"weights_dtype\": \"bf16\""; fi
  # the same tensors within 100% (so comparable), but not within 1e-5
  if ! "$op" compare "$tmp/bf16-2.safetensors" "$tmp/fp32-1.safetensors" --tol 1 > "$tmp/cmp" 2>&1 ||
    "$op" compare "$tmp/bf16-2.safetensors" "$tmp/fp32-1.safetensors" --tol 1e-5 > "$tmp/cmp" 2>&1; then
    fail "$m: --ep 2 --weights bf16 logits not beyond 1e-5 of the fp32 ones (were the matrices rounded?)"; cat "$tmp/cmp"
  else
    pass "$m: --ep 2 --weights bf16 logits differ from the fp32 ones"
  fi
else
  fail "$m: --ep 2 --weights bf16"; tail -5 "$tmp/out"
fi
exit $((fails > 0))
