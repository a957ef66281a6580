#!/bin/sh
# Tests of clmoe-generate: command-line and checkpoint errors (clear message, exit status,
# no crash), and an end-to-end run on a tiny checkpoint trained for 3 steps here (and on
# one of the plain residual stack); --profile's counts of a decode step.
# Run by make check with CLMOE_APPS_DIR set to the built apps.
set -u
. "$(dirname "$0")/apps_common.sh"
gen="$apps/clmoe-generate"
train="$apps/clmoe-train"
skip_without_device

expect "generate --help" 0 "Usage: clmoe-generate" -- "$gen" --help
expect "generate --version" 0 "clmoe-generate [0-9]" -- "$gen" --version
expect "generate without --ckpt, --model or --random-weights" 2 "--ckpt FILE, --model DIR or --random-weights PRESET|FILE is required" -- "$gen" --prompt hi
expect "generate without a prompt" 2 "at least one --prompt" -- "$gen" --ckpt x
expect "generate unknown flag" 2 "unknown argument '--frobnicate'" -- "$gen" --frobnicate
expect "generate bad --top-p" 2 "--top-p: '2' is not a number" -- "$gen" --ckpt x --prompt a --top-p 2
expect "generate bad -n" 2 "-n: 'ten' is not an integer" -- "$gen" --ckpt x --prompt a -n ten
expect "generate empty prompt" 2 "prompt 2 (--prompt #2) is empty" -- "$gen" --ckpt x --prompt a --prompt ""
: > "$tmp/empty.txt"
expect "generate empty prompt file" 2 "empty.txt) is empty" -- "$gen" --ckpt x --prompt-file "$tmp/empty.txt"
expect "generate missing prompt file" 1 "nonexistent.txt: cannot open" -- "$gen" --ckpt x --prompt-file "$tmp/nonexistent.txt"
expect "generate missing checkpoint" 1 "$tmp/none.safetensors" -- "$gen" --ckpt "$tmp/none.safetensors" --prompt a
printf 'not a checkpoint at all\n' > "$tmp/text.safetensors"
expect "generate on a text file" 1 "text.safetensors" -- "$gen" --ckpt "$tmp/text.safetensors" --prompt a

# A tiny checkpoint: 3 steps on a repeating text (seconds).
i=0; : > "$tmp/cycle.txt"
while [ $i -lt 200 ]; do echo "0123456789" >> "$tmp/cycle.txt"; i=$((i + 1)); done
if ! "$train" --preset tiny --steps 3 --batch 2 --seq-len 32 --data "$tmp/cycle.txt" --out "$tmp/run" --quiet --sample 0 > "$tmp/train.log" 2>&1; then
  fail "clmoe-train made no tiny checkpoint"; cat "$tmp/train.log"; exit 1
fi
ckpt="$tmp/run/checkpoint.safetensors"

head -c 100000 "$ckpt" > "$tmp/truncated.safetensors"
expect "generate on a truncated checkpoint" 1 "truncated.safetensors" -- "$gen" --ckpt "$tmp/truncated.safetensors" --prompt a
# The same tensors under another model's config (d_model 96 instead of 64): the checksum of
# the metadata refuses the edit; in the format before checksums (their entries removed, the
# header padded with spaces to its length), the first tensor that does not fit is named.
LC_ALL=C sed 's/d_model = 64/d_model = 96/' "$ckpt" > "$tmp/other.safetensors"
expect "generate on an edited config" 1 "other.safetensors: metadata: the entries fail their CRC-32C checksum" -- \
  "$gen" --ckpt "$tmp/other.safetensors" --prompt a
hlen=$(od -An -tu1 -N8 "$ckpt" | awk '{ n = 0; for (i = NF; i >= 1; i--) n = n * 256 + $i; print n }')
tail -c +9 "$ckpt" | head -c "$hlen" | LC_ALL=C sed -e 's/d_model = 64/d_model = 96/' \
  -e 's/,"clmoe\.crc32c\.[a-z]*":"[^"]*"//g' -e 's/,"clmoe_format":"2"//' > "$tmp/hdr"
{ head -c 8 "$ckpt"; cat "$tmp/hdr"; printf "%$((hlen - $(wc -c < "$tmp/hdr")))s" ""; tail -c +$((hlen + 9)) "$ckpt"; } > "$tmp/other.safetensors"
expect "generate on tensors of another config" 1 "tensor 'param/embed' is \[256, 64\]" -- "$gen" --ckpt "$tmp/other.safetensors" --prompt a

expect "generate streams one prompt" 0 "decode: 11 steps x 1 sequences" -- "$gen" --ckpt "$ckpt" --prompt "0123" -n 12 --seed 5
"$gen" --ckpt "$ckpt" --prompt "0123" -n 24 --seed 5 --quiet > "$tmp/a.txt" 2>&1
"$gen" --ckpt "$ckpt" --prompt "0123" -n 24 --seed 5 --quiet > "$tmp/b.txt" 2>&1
"$gen" --ckpt "$ckpt" --prompt "0123" -n 24 --seed 6 --quiet > "$tmp/c.txt" 2>&1
if cmp -s "$tmp/a.txt" "$tmp/b.txt" && [ "$(wc -c < "$tmp/a.txt")" -ge 25 ]; then pass "same seed, same text"
else fail "same seed, same text"; od -c "$tmp/a.txt" | head -3; od -c "$tmp/b.txt" | head -3; fi
if ! cmp -s "$tmp/a.txt" "$tmp/c.txt"; then pass "another seed, another text"; else fail "another seed, another text"; fi
# Sampled tokens drawn on the device (runs of 16 steps) = drawn on the host step by step.
for how in "" "--host-sample"; do
  "$gen" --ckpt "$ckpt" --prompt "0123" --prompt "xy" --prompt "5" -n 40 --seed 9 --temperature 1.5 --top-k 60 \
    --top-p 0.9 --quiet $how > "$tmp/dev$how.txt" 2>&1
done
if cmp -s "$tmp/dev.txt" "$tmp/dev--host-sample.txt" && [ "$(wc -c < "$tmp/dev.txt")" -ge 120 ]; then
  pass "sampled on the device = sampled on the host"
else fail "sampled on the device = sampled on the host"; od -c "$tmp/dev.txt" | head -4; od -c "$tmp/dev--host-sample.txt" | head -4; fi

printf 'hello\nworld' > "$tmp/p.txt"
expect "generate a batch of prompts" 0 "--- \[3\] $tmp/p.txt" -- "$gen" --ckpt "$ckpt" --prompt "0123" --prompt "9" \
  --prompt-file "$tmp/p.txt" -n 8 --prefill-chunk 3 --top-k 20 --json "$tmp/batch.json"
for key in '"prefill_tokens_per_s"' '"decode_tokens_per_s"' '"time_to_first_token_s"' '"kda_state"' '"mla_cache_used"'; do
  if grep -q "$key" "$tmp/batch.json"; then pass "batch JSON has $key"; else fail "batch JSON lacks $key"; fi
done
if [ "$(grep -c '"end": "length"' "$tmp/batch.json")" -eq 3 ]; then pass "batch JSON has 3 outputs"
else fail "batch JSON outputs"; cat "$tmp/batch.json"; fi
# Later prefill passes in the training form add up exactly as one pass: the same greedy text.
# (The absorbed form rounds differently: near-ties of a barely trained model may flip, so
# it is only run here; tests/unit/test_generate.c compares its logits within 1e-4.)
for form in training absorbed; do
  "$gen" --ckpt "$ckpt" --prompt "the quick brown fox jumps over the lazy dog, again and again" -n 24 --greedy \
    --prefill-chunk 7 --extend-form $form --quiet > "$tmp/form-$form.txt" 2>&1
done
"$gen" --ckpt "$ckpt" --prompt "the quick brown fox jumps over the lazy dog, again and again" -n 24 --greedy \
  --quiet > "$tmp/form-one.txt" 2>&1
if cmp -s "$tmp/form-training.txt" "$tmp/form-one.txt" && [ -s "$tmp/form-absorbed.txt" ]; then
  pass "--extend-form training continues exactly like one pass; absorbed runs"
else fail "--extend-form outputs differ"; head -3 "$tmp"/form-*.txt; fi
expect "bad --extend-form" 2 "not auto, training or absorbed" -- "$gen" --ckpt "$ckpt" --prompt x --extend-form fast
# A barely trained byte model emits every byte value: the JSON must still be valid UTF-8.
"$gen" --ckpt "$ckpt" --prompt "x" -n 400 --temperature 3 --top-p 1 --seed 7 --quiet --json "$tmp/raw.json" > /dev/null 2>&1
if iconv -f UTF-8 -t UTF-8 "$tmp/raw.json" > /dev/null 2>&1; then pass "JSON of arbitrary bytes is valid UTF-8"
else fail "JSON of arbitrary bytes is not valid UTF-8"; fi
# A nearly untrained model samples bytes almost uniformly: with this seed 'a' comes early.
expect "generate --stop" 0 "" -- "$gen" --ckpt "$ckpt" --prompt "0123" --prompt "xyz" -n 3000 --stop a --seed 7 \
  --json "$tmp/stop.json"
if [ "$(grep -c '"end": "stop"' "$tmp/stop.json")" -eq 2 ]; then pass "both sequences end at the stop string"
else fail "stop string"; cat "$tmp/stop.json"; fi

expect "generate --prefill-bench" 0 "all-MLA cache" -- "$gen" --ckpt "$ckpt" --prefill-bench 70,200 --prefill-chunk 64 \
  --bench-steps 2 --json "$tmp/bench.json"
if grep -q '"tokens": 200, "chunk": 64' "$tmp/bench.json" && grep -q '"mla_cache_used": 32000' "$tmp/bench.json"; then
  pass "prefill-bench JSON (200 tokens x 40 numbers x 4 bytes of MLA cache)"
else fail "prefill-bench JSON"; cat "$tmp/bench.json"; fi
# --profile: per decode step after 2 warm-up steps (-n 8: 7 steps, 5 profiled), the host waits
# the runtime counted: a step of the tiny model reads the device back once (the logits: the
# ids are checked on the host, not by a device read) and writes nothing blocking.
expect "generate --profile" 0 "profile: 5 decode steps after 2 warm-up" -- "$gen" --ckpt "$ckpt" --prompt 0123 -n 8 \
  --greedy --profile --json "$tmp/prof.json"
# ... and a step of one sequence makes every product with clmoe's own kernels (the GEMV; MLA's
# per-head products): no CLBlast call, so the device commands are clmoe's launches
cmds=$(sed -n 's/.*"commands_per_step": \([0-9.]*\), "launches_per_step": \([0-9.]*\),.*/\1 \2/p' "$tmp/prof.json")
if grep -q '"family": "gemv"' "$tmp/prof.json" && [ -n "$cmds" ] && [ "${cmds% *}" = "${cmds#* }" ] &&
   ! grep -qi '"family": "clblast' "$tmp/prof.json"; then
  pass "profile JSON: no CLBlast call in a decode step"
else fail "profile JSON: no CLBlast call in a decode step"; cat "$tmp/prof.json"; fi
if grep -q '"steps": 5, "warmup_steps": 2, ' "$tmp/prof.json" &&
   grep -q '"blocking_reads_per_step": 1, "blocking_writes_per_step": 0, "finishes_per_step": 0,' "$tmp/prof.json" &&
   grep -q '"family": "moe"' "$tmp/prof.json" &&
   grep -o '"launches_per_step": [0-9]*' "$tmp/prof.json" | awk '{ exit !($2 >= 10) }'; then
  pass "profile JSON: waits and launches per decode step"
else fail "profile JSON: waits and launches per decode step"; cat "$tmp/prof.json"; fi
# --profile with --prefill-bench: each prefill's kernels (a table, and "profile" in its JSON row)
expect "--profile with --prefill-bench" 0 "profile of the 10-token prefill: [0-9]* device commands" -- "$gen" \
  --ckpt "$ckpt" --prefill-bench 10 --bench-steps 1 --profile --json "$tmp/bench-prof.json"
if grep -q '"tokens": 10, .*"profile": {"steps": 1, .*"family": "kda"' "$tmp/bench-prof.json"; then
  pass "prefill-bench JSON with the prefill's profile"
else fail "prefill-bench JSON with the prefill's profile"; cat "$tmp/bench-prof.json"; fi
# --random-weights: a preset's model without a checkpoint, in the storage --weights asks
expect "--random-weights tiny --weights bf16" 0 "random weights (tiny): 4 layers (1 MLA), d 64, vocab 256, weights bf16" -- \
  "$gen" --random-weights tiny --weights bf16 --prompt abc -n 4 --greedy
expect "--random-weights with an unknown preset" 2 "--random-weights nope: unknown preset 'nope'" -- \
  "$gen" --random-weights nope --prompt abc
# a config file: the preset cut to 2 layers (what a benchmark of a model too large for the
# device does), and a config file the parser refuses, named in the error
"$train" --preset tiny --print-config | sed -e 's/^layers = .*/layers = 2/' -e '/^mla_/d' > "$tmp/tiny2.conf"
expect "--random-weights FILE" 0 "random weights ($tmp/tiny2.conf): 2 layers (0 MLA), d 64" -- \
  "$gen" --random-weights "$tmp/tiny2.conf" --weights bf16 --prompt abc -n 2 --greedy
printf '[model]\nvocab = ten\n' > "$tmp/bad.conf"
expect "--random-weights with a bad config file" 2 "--random-weights $tmp/bad.conf: $tmp/bad.conf" -- \
  "$gen" --random-weights "$tmp/bad.conf" --prompt abc
expect "--random-weights with --ckpt" 2 "give one of them" -- "$gen" --random-weights tiny --ckpt "$ckpt" --prompt abc
# A model with a vocabulary of 130 (the recall task's): bytes from 130 on are not tokens.
"$train" --preset tiny --print-config | sed 's/^vocab = 256/vocab = 130/' > "$tmp/v130.conf"
if "$train" --config "$tmp/v130.conf" --steps 1 --batch 2 --seq-len 32 --task mqar --out "$tmp/v130" --quiet \
    --sample 0 > "$tmp/train130.log" 2>&1; then
  printf 'ab\351c' > "$tmp/latin1.txt"
  expect "generate with bytes outside the vocabulary" 1 "byte 0xe9 at offset 2 is outside the model's vocabulary of 130" \
    -- "$gen" --ckpt "$tmp/v130/checkpoint.safetensors" --prompt-file "$tmp/latin1.txt"
  expect "generate with bytes inside the vocabulary" 0 "decode:" -- "$gen" --ckpt "$tmp/v130/checkpoint.safetensors" \
    --prompt "abc" -n 4
else
  fail "clmoe-train made no vocab-130 checkpoint"; cat "$tmp/train130.log"
fi
# The plain residual stack ([model] residual = plain): clmoe-train trains it, writes its
# config with the form and resumes it; clmoe-generate's prompt in chunks of 3 gives the
# logits of one pass (1e-4), and the same greedy text.
"$train" --preset tiny --print-config | sed 's/^residual = attn_res/residual = plain/' > "$tmp/plain.conf"
pck="$tmp/plain/checkpoint.safetensors"
if grep -q '^residual = plain$' "$tmp/plain.conf" &&
   "$train" --config "$tmp/plain.conf" --steps 3 --batch 2 --seq-len 32 --data "$tmp/cycle.txt" --out "$tmp/plain" \
     --quiet --sample 0 > "$tmp/trainplain.log" 2>&1 &&
   "$train" --resume "$tmp/plain" --steps 4 --quiet --sample 0 >> "$tmp/trainplain.log" 2>&1; then
  expect "plain: the checkpoint's config has the form" 0 "residual = plain" -- "$train" --resume "$pck" --print-config
  expect "plain: generate in chunks of 3" 0 "" -- sh -c "'$gen' --ckpt '$pck' --prompt '0123456789012' -n 6 --greedy \
    --quiet --prefill-chunk 3 --logits '$tmp/plain3.st' > '$tmp/plain3.txt'"
  expect "plain: generate in one pass" 0 "" -- sh -c "'$gen' --ckpt '$pck' --prompt '0123456789012' -n 6 --greedy \
    --quiet --logits '$tmp/plain1.st' > '$tmp/plain1.txt'"
  expect "  ... the same logits" 0 "logits .* ok" -- "$apps/clmoe-op" compare "$tmp/plain3.st" "$tmp/plain1.st" --tol 1e-4
  expect "  ... the same text" 0 "" -- cmp "$tmp/plain3.txt" "$tmp/plain1.txt"
else
  fail "clmoe-train made no plain-residual checkpoint"; cat "$tmp/trainplain.log"
fi
# Token ids in and out: a prompt given as ids gives the text and the logits (--logits) of
# the same prompt given as bytes; the JSON has the prompt's and the output's ids; bad ids.
op="$apps/clmoe-op"
expect "--prompt-ids" 0 "" -- sh -c "'$gen' --ckpt '$ckpt' --prompt-ids 84,104,101,32 -n 12 --greedy --quiet \
  --logits '$tmp/l_ids.st' > '$tmp/ids.txt'"
expect "--prompt with those bytes" 0 "" -- sh -c "'$gen' --ckpt '$ckpt' --prompt 'The ' -n 12 --greedy --quiet \
  --logits '$tmp/l_txt.st' > '$tmp/txt.txt'"
expect "  ... the same text" 0 "" -- cmp "$tmp/ids.txt" "$tmp/txt.txt"
expect "  ... the same logits" 0 "logits .* ok" -- "$op" compare "$tmp/l_ids.st" "$tmp/l_txt.st" --tol 0
expect "  ... logits [1, 256]" 0 "F32 \[1, 256\]" -- "$op" compare "$tmp/l_ids.st" "$tmp/l_ids.st"
"$gen" --ckpt "$ckpt" --prompt-ids 84,104,101,32 --prompt ab -n 5 --greedy --quiet --json "$tmp/ids.json" > /dev/null 2>&1
if grep -q '"prompt_ids": \[84, 104, 101, 32\]' "$tmp/ids.json" && grep -q '"prompt_text": "ab", "prompt_ids": \[97, 98\]' "$tmp/ids.json" &&
   [ "$(grep -o '"ids": \[[0-9, ]*\]' "$tmp/ids.json" | sed -n 1p | tr ',' '\n' | wc -l)" -eq 5 ]; then
  pass "JSON: the prompts' ids and 5 generated ids per sequence"
else fail "JSON ids"; cat "$tmp/ids.json"; fi
expect "--prompt-ids not ids" 2 "expected comma-separated token ids" -- "$gen" --ckpt "$ckpt" --prompt-ids 1,,2
expect "--prompt-ids outside the vocabulary" 1 "token 256 at position 1 is outside the model's vocabulary of 256" -- \
  "$gen" --ckpt "$ckpt" --prompt-ids 1,256
expect "--tokenizer missing" 1 "--tokenizer $tmp/none.json" -- "$gen" --ckpt "$ckpt" --tokenizer "$tmp/none.json" --prompt a
# a tokenizer.json whose post-processor puts a BOS (id 200, also the byte 0xc8's token) before
# a text: added by default, as transformers' tokenizer(text); --no-add-special leaves it out.
# Its vocabulary: the 256 bytes in the byte-level alphabet (GPT-2's: the printable ones as
# themselves, the others from U+0100 on), no merges
vocab=$(awk 'BEGIN { n = 0; for (b = 0; b < 256; b++) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) cp = b; else cp = 256 + n++
  s = cp == 34 ? "\\\"" : cp == 92 ? "\\\\" : sprintf("\\u%04x", cp)
  printf "%s\"%s\":%d", (b ? "," : ""), s, b } }')
cat > "$tmp/bos.json" << EOF
{"version":"1.0","added_tokens":[{"id":200,"content":"<s>","special":true}],"normalizer":null,
 "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
 "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},
  {"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[200],"tokens":["<s>"]}}},
 "decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{$vocab},"merges":[]}}
EOF
"$gen" --ckpt "$ckpt" --tokenizer "$tmp/bos.json" --prompt abc -n 2 --greedy --quiet --json "$tmp/bos1.json" > /dev/null 2>&1
"$gen" --ckpt "$ckpt" --tokenizer "$tmp/bos.json" --no-add-special --prompt abc -n 2 --greedy --quiet \
  --json "$tmp/bos2.json" > /dev/null 2>&1
if grep -q '"prompt_ids": \[200, 97, 98, 99\]' "$tmp/bos1.json" && grep -q '"prompt_ids": \[97, 98, 99\]' "$tmp/bos2.json"; then
  pass "--tokenizer: the post-processor's BOS before the prompt; --no-add-special: none"
else fail "the post-processor's BOS"; cat "$tmp/bos1.json" "$tmp/bos2.json"; fi
expect "generate --prefill-bench with a prompt" 2 "leave out --prompt" -- "$gen" --ckpt "$ckpt" --prefill-bench 10 --prompt a

echo "$fails failed"
[ "$fails" -eq 0 ]
