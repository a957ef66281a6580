# Sourced by the tests of Hugging Face checkpoints (tests/apps/test_hf.sh,
# tests/mpi/test_hf_ep.sh): the fixtures' folder and the prompts and greedy tokens that
# transformers recorded in a fixture's expected.json ($m names the fixture: tiny-hub, ...).
srcdir=${CLMOE_SRCDIR:-$(dirname "$0")/../..}
fx="$srcdir/tests/data/kimi_linear"

# prompt K [LEN]: fixture prompt K (0-based), its first LEN ids, as a comma-separated list.
prompt() {
  sed -n '/"prompts"/,/]]*$/p' "$fx/$m/expected.json" | grep '^ *\[[0-9]' | sed -n "$(($1 + 1))p" |
    tr -d ' []' | sed 's/,$//' | cut -d, -f1-"${2:-1000}"
}
# greedy K: transformers' 8 greedy ids after prompt K, space-separated.
greedy() {
  sed -n '/"greedy"/,/]$/p' "$fx/$m/expected.json" | grep '^ *\[[0-9]' | sed -n "$(($1 + 1))p" |
    tr -d ' []' | sed 's/,$//' | tr ',' ' '
}
# ids_of FILE K: the generated ids of sequence K (0-based) in clmoe-generate's --json FILE.
ids_of() {
  tr -d '\n' < "$1" | grep -o '"ids": *\[[0-9, ]*\]' | sed -n "$(($2 + 1))p" |
    sed 's/.*\[//; s/\]//' | tr -d ' ' | tr ',' ' '
}
