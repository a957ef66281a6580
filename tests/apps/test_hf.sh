#!/bin/sh
# clmoe-generate --model on the tiny Kimi Linear checkpoints of tests/data/kimi_linear
# (made and checked by transformers 5.25: README.md there): the hub's form (bf16, two shards,
# a tiktoken tokenizer, grouped routing) and transformers 5's (fp32, one file, no
# renormalisation; and fp16 weights). For every fixture prompt and several of its prefixes, the logits at the
# last position equal transformers' within 2e-5 of the largest logit (fp32 compute; the
# bf16 weights are converted exactly), through the chunked prefill with chunks that cut the
# prompts (and the unbounded decay's extremes: g down to -48.7); the 8 greedy tokens equal
# transformers' cached greedy continuation; the tokenizer found beside the weights decodes
# them. With --weights bf16 (matrices stored in bf16): the hub's bf16 checkpoint gives the
# same logits at 2e-5 (its weights are bf16 values already) and the same greedy tokens; the
# fp32 and fp16 checkpoints, whose matrices are then rounded, give transformers' logits with
# the same matrices rounded (expected-bf16w.safetensors) at 2e-5. Broken checkpoint folders are refused naming the file and the tensor.
# Needs CLMOE_APPS_DIR and CLMOE_SRCDIR (make check sets them).
set -u
. "$(dirname "$0")/apps_common.sh"
skip_without_device
. "$(dirname "$0")/hf_fixture.sh"
gen="$apps/clmoe-generate"
check="$apps/../tests/apps/hf_logits_check"

for m in tiny-hub tiny-tf5 tiny-f16; do
  # fp32 weights (auto would store them in bf16 on a matrix unit): logits after each prompt
  # and prefixes that end inside and at the edges of 16-token tiles
  args="" specs=""
  for kl in 0:5 1:1 1:16 1:17 1:37 2:33 2:64 2:65 2:70; do
    k=${kl%%:*} len=${kl#*:}
    args="$args --prompt-ids $(prompt "$k" "$len")"
    specs="$specs $kl"
  done
  for chunk in 2048 7; do
    # shellcheck disable=SC2086
    expect "$m: logits (prefill chunk $chunk)" 0 "" -- "$gen" --model "$fx/$m" $args -n 1 --greedy --quiet \
      --weights fp32 --prefill-chunk $chunk --logits "$tmp/$m-$chunk.safetensors"
    # shellcheck disable=SC2086
    if "$check" "$tmp/$m-$chunk.safetensors" "$fx/$m/expected.safetensors" 2e-5 $specs > "$tmp/cmp" 2>&1; then
      pass "$m: logits equal transformers' at 2e-5 (chunk $chunk)"
    else
      fail "$m: logits differ from transformers' (chunk $chunk)"
    fi
    sed 's/^/    /' "$tmp/cmp"
  done
  # greedy continuations, all three prompts decoded together
  "$gen" --model "$fx/$m" --prompt-ids "$(prompt 0)" --prompt-ids "$(prompt 1)" --prompt-ids "$(prompt 2)" \
    -n 8 --greedy --quiet --weights fp32 --json "$tmp/$m.json" > "$tmp/out" 2>&1 || { fail "$m: greedy run"; cat "$tmp/out"; }
  for k in 0 1 2; do
    got=$(ids_of "$tmp/$m.json" $k)
    want=$(greedy $k)
    if [ "$got" = "$want" ]; then pass "$m: prompt $k greedy = transformers' ($want)"
    else fail "$m: prompt $k greedy '$got', transformers '$want'"; fi
  done
done

# bf16 weight storage. The hub's bf16 weights are stored unchanged: transformers' logits at
# 2e-5. The fp32 and fp16 checkpoints' matrices are rounded to bf16: the logits of
# expected-bf16w.safetensors (transformers with the same matrices rounded, make_bf16w.py) at
# 2e-5; and they must differ from the unrounded model's by more than that, or the weights
# were not stored in bf16.
for m in tiny-hub tiny-tf5 tiny-f16; do
  ref=expected.safetensors
  [ "$m" = tiny-hub ] || ref=expected-bf16w.safetensors
  args="" specs=""
  for kl in 0:5 1:1 1:16 1:17 1:37 2:33 2:64 2:65 2:70; do
    k=${kl%%:*} len=${kl#*:}
    args="$args --prompt-ids $(prompt "$k" "$len")"
    specs="$specs $kl"
  done
  for chunk in 2048 7; do
    # shellcheck disable=SC2086
    expect "$m: --weights bf16 logits (prefill chunk $chunk)" 0 "" -- "$gen" --model "$fx/$m" $args -n 1 \
      --greedy --quiet --weights bf16 --prefill-chunk $chunk --logits "$tmp/$m-bf16-$chunk.safetensors"
    # shellcheck disable=SC2086
    if "$check" "$tmp/$m-bf16-$chunk.safetensors" "$fx/$m/$ref" 2e-5 $specs > "$tmp/cmp" 2>&1; then
      pass "$m: --weights bf16 logits equal transformers' ($ref) at 2e-5 (chunk $chunk)"
    else
      fail "$m: --weights bf16 logits differ from transformers' ($ref) (chunk $chunk)"
    fi
    sed 's/^/    /' "$tmp/cmp"
  done
  [ "$m" = tiny-hub ] && continue
  # shellcheck disable=SC2086
  if "$check" "$tmp/$m-bf16-2048.safetensors" "$fx/$m/expected.safetensors" 2e-5 $specs > "$tmp/cmp" 2>&1; then
    fail "$m: --weights bf16 logits equal the unrounded model's at 2e-5: were the matrices stored in bf16?"
  else
    pass "$m: --weights bf16 logits differ from the unrounded model's (the matrices are rounded)"
  fi
done
m=tiny-hub # (greedy reads the fixture named by m)
"$gen" --model "$fx/$m" --prompt-ids "$(prompt 0)" --prompt-ids "$(prompt 1)" --prompt-ids "$(prompt 2)" \
  -n 8 --greedy --weights bf16 --json "$tmp/hub-bf16.json" > "$tmp/out" 2> "$tmp/err" ||
  { fail "tiny-hub: --weights bf16 greedy run"; cat "$tmp/err"; }
if grep -q "weights bf16 (--weights)" "$tmp/err"; then pass "the banner names the weights' storage"
else fail "the banner does not say 'weights bf16 (--weights)'"; cat "$tmp/err"; fi
if grep -q '"weights_dtype": "bf16"' "$tmp/hub-bf16.json"; then pass "--json names the weights' storage"
else fail "--json lacks \"weights_dtype\": \"bf16\""; fi
for k in 0 1 2; do
  got=$(ids_of "$tmp/hub-bf16.json" $k)
  want=$(greedy $k)
  if [ "$got" = "$want" ]; then pass "tiny-hub --weights bf16: prompt $k greedy = transformers' ($want)"
  else fail "tiny-hub --weights bf16: prompt $k greedy '$got', transformers '$want'"; fi
done
expect "--weights takes auto, bf16 or fp32" 2 "--weights: 'f16' is not auto, bf16 or fp32" -- \
  "$gen" --model "$fx/tiny-hub" --prompt-ids 1 -n 1 --weights f16

# the hub folder's tokenizer: text in, text out
expect "tiny-hub: tokenizer found beside the weights" 0 "" -- "$gen" --model "$fx/tiny-hub" --prompt "Hello" \
  -n 4 --greedy --quiet

# broken folders: each names the file and what is wrong
bad() { rm -rf "$tmp/bad"; cp -r "$fx/$1" "$tmp/bad"; }
bad tiny-hub
rm "$tmp/bad/model-00002-of-00002.safetensors"
expect "missing shard" 1 "model-00002-of-00002.safetensors" -- "$gen" --model "$tmp/bad" --prompt-ids 1 -n 1
bad tiny-hub
sed 's/"first_k_dense_replace": 1/"first_k_dense_replace": 2/' "$fx/tiny-hub/config.json" > "$tmp/bad/config.json"
expect "a tensor the config needs is missing" 1 "no tensor model.layers.1.mlp.gate_proj.weight" -- \
  "$gen" --model "$tmp/bad" --prompt-ids 1 -n 1
bad tiny-hub
sed 's/"model.layers.0.input_layernorm.weight": "model-00001-of-00002.safetensors"/"model.layers.0.input_layernorm.weight": "model-00002-of-00002.safetensors"/' \
  "$fx/tiny-hub/model.safetensors.index.json" > "$tmp/bad/model.safetensors.index.json"
expect "an index that disagrees with its shards" 1 \
  "tensor model.layers.0.input_layernorm.weight is not in shard model-00002-of-00002.safetensors" -- \
  "$gen" --model "$tmp/bad" --prompt-ids 1 -n 1
bad tiny-hub
sed 's/"kv_lora_rank": 32/"kv_lora_rank": 24/' "$fx/tiny-hub/config.json" > "$tmp/bad/config.json"
expect "shape that does not match the config" 1 "kv_a_proj_with_mqa.weight is \[40, 64\], but" -- \
  "$gen" --model "$tmp/bad" --prompt-ids 1 -n 1
bad tiny-hub
sed 's/"num_hidden_layers": 5/"num_hidden_layers": 4/; s/"full_attn_layers": \[2, 5\]/"full_attn_layers": [2]/' \
  "$fx/tiny-hub/config.json" > "$tmp/bad/config.json"
expect "unknown tensor" 1 "tensor model.layers.4.* belongs to no parameter" -- \
  "$gen" --model "$tmp/bad" --prompt-ids 1 -n 1
bad tiny-hub
printf '{"model_type": "kimi_linear",' > "$tmp/bad/config.json"
expect "malformed config.json" 1 "config.json" -- "$gen" --model "$tmp/bad" --prompt-ids 1 -n 1
expect "not a checkpoint folder" 2 "not a directory holding a config.json" -- \
  "$gen" --model "$tmp/nothing" --prompt-ids 1 -n 1
exit $((fails > 0))
