#!/bin/sh
# clmoe-tokenize end to end: the ids of the committed multilingual text equal the ones
# Hugging Face tokenizers and tiktoken gave (tests/data/tokenizer/cases), --decode gives the
# text back byte for byte, --json reports them, --shard writes a CLMOETOK shard that
# clmoe-train trains on for 2 steps (tiny preset with the tokenizer's vocabulary), and bad
# command lines, files and ids fail with a message naming them. Run by make check with
# CLMOE_APPS_DIR and CLMOE_SRCDIR set.
set -u
. "$(dirname "$0")/apps_common.sh"
srcdir=${CLMOE_SRCDIR:-$(dirname "$0")/../..}
tok="$apps/clmoe-tokenize"
train="$apps/clmoe-train"
fx="$srcdir/tests/data/tokenizer"

# 1. ids as the reference libraries gave them, for each file kind; decode gives the text back
for kind in llama3 deepseek tiktoken; do
  file="$fx/$kind.json"
  [ $kind = tiktoken ] && file="$fx/tiktoken.model" # its tokenizer_config.json is found beside it
  if "$tok" --tokenizer "$file" --print-ids "$fx/cases/all.txt" > "$tmp/ids.$kind" 2> "$tmp/err" &&
     cmp -s "$tmp/ids.$kind" "$fx/cases/all.$kind.ids"; then
    pass "$kind: --print-ids equals the reference ids ($(tr ',' '\n' < "$tmp/ids.$kind" | wc -l) ids)"
  else
    fail "$kind: --print-ids differs from $fx/cases/all.$kind.ids"; head -c 600 "$tmp/ids.$kind" "$tmp/err"
  fi
  if "$tok" --tokenizer "$file" --decode "$(cat "$fx/cases/all.$kind.ids")" > "$tmp/back.$kind" 2> "$tmp/err" &&
     cmp -s "$tmp/back.$kind" "$fx/cases/all.txt"; then
    pass "$kind: --decode gives the text back byte for byte"
  else
    fail "$kind: --decode does not give $fx/cases/all.txt back"; head -c 300 "$tmp/err"
  fi
done
# --no-special: the specials' text as plain text, as tiktoken's encode_ordinary
"$tok" --tokenizer "$fx/tiktoken.model" --no-special --print-ids "$fx/cases/specials.txt" > "$tmp/ord" 2>&1
if cmp -s "$tmp/ord" "$fx/cases/specials.tiktoken-ordinary.ids"; then pass "--no-special as encode_ordinary"
else fail "--no-special differs from the reference"; head -c 300 "$tmp/ord"; fi
# --add-special: the post-processor's BOS (Llama-3.1's template) and BOS + EOS (a template
# with both), as Hugging Face's add_special_tokens=True
for kind in llama3 deepseek; do
  "$tok" --tokenizer "$fx/$kind.json" --add-special --print-ids "$fx/cases/english.txt" > "$tmp/add.$kind" 2>&1
  if cmp -s "$tmp/add.$kind" "$fx/cases/english.$kind-special.ids"; then pass "$kind: --add-special as add_special_tokens=True"
  else fail "$kind: --add-special differs from the reference"; head -c 300 "$tmp/add.$kind"; fi
done
# stdin and --text: the same ids
printf 'Hello, world' | "$tok" --tokenizer "$fx/llama3.json" --print-ids > "$tmp/stdin" 2>&1
"$tok" --tokenizer "$fx/llama3.json" --print-ids --text 'Hello, world' > "$tmp/text" 2>&1
if [ -s "$tmp/stdin" ] && cmp -s "$tmp/stdin" "$tmp/text"; then pass "stdin and --text give the same ids"
else fail "stdin and --text differ"; cat "$tmp/stdin" "$tmp/text"; fi
expect "--json" 0 '"ids": \[' -- "$tok" --tokenizer "$fx/llama3.json" --json - --text 'a b c'
expect "--decode --skip-special" 0 "^Hello$" -- "$tok" --tokenizer "$fx/llama3.json" --skip-special \
  --decode "$(cut -d, -f1-4 "$fx/cases/specials.llama3.ids")"

# 2. a shard for clmoe-train: the text 8 times, an end-of-text token after each copy
for i in 1 2 3 4 5 6 7 8; do cp "$fx/cases/all.txt" "$tmp/doc$i.txt"; done
expect "--shard" 0 "tokens from 8 inputs" -- "$tok" --tokenizer "$fx/llama3.json" --shard "$tmp/data.tok" \
  --append '<|end_of_text|>' "$tmp"/doc*.txt
n=$(( ($(tr ',' '\n' < "$tmp/ids.llama3" | wc -l) + 1) * 8 ))
magic=$(head -c 8 "$tmp/data.tok")
count=$(od -An -tu8 -j16 -N8 "$tmp/data.tok" | tr -d ' ')
if [ "$magic" = CLMOETOK ] && [ "$count" = "$n" ] && [ "$(wc -c < "$tmp/data.tok")" -eq $((32 + 2 * n)) ]; then
  pass "the shard holds $n uint16 tokens after a CLMOETOK header"
else
  fail "the shard: magic '$magic', count '$count', expected $n tokens"
fi
ls "$tmp"/data.tok.tmp.* > /dev/null 2>&1 && fail "a temporary file was left beside the shard"
vocab=$("$tok" --tokenizer "$fx/llama3.json" --json - --text x | sed -n 's/.*"vocab": \([0-9]*\).*/\1/p')
"$train" --preset tiny --print-config | sed "s/^vocab = .*/vocab = $vocab/" > "$tmp/tiny-vocab.conf"
skip_train=0
"$apps/clmoe-info" --no-probe > /dev/null 2>&1 || skip_train=1
if [ $skip_train = 1 ]; then
  echo "SKIP: no OpenCL device: clmoe-train on the shard"
else
  expect "clmoe-train reads the shard (2 steps)" 0 "shard" -- "$train" --config "$tmp/tiny-vocab.conf" \
    --data "$tmp/data.tok" --steps 2 --batch 2 --seq-len 32 --eval-every 2 --sample 0 --out "$tmp/run"
  expect "a model with a smaller vocabulary refuses the shard" 1 "exceeds the model's" -- "$train" --preset tiny \
    --data "$tmp/data.tok" --steps 2 --batch 2 --seq-len 32 --sample 0 --quiet --out "$tmp/run2"
  # clmoe-generate through the tokenizer: the prompt's ids are clmoe-tokenize --add-special's
  # (the post-processor's BOS first, as transformers' tokenizer(text)), and the printed text is
  # the decoding of the ids it reports
  gen="$apps/clmoe-generate"
  expect "clmoe-generate --tokenizer" 0 "" -- sh -c "'$gen' --ckpt '$tmp/run/checkpoint.safetensors' --tokenizer \
    '$fx/llama3.json' --prompt 'Hello world' -n 6 --greedy --quiet --json '$tmp/gen.json' > '$tmp/gen.txt'"
  want=$("$tok" --tokenizer "$fx/llama3.json" --add-special --print-ids --text "Hello world" | sed 's/,/, /g')
  got=$(sed -n 's/.*"prompt_ids": \[\([0-9, ]*\)\].*/\1/p' "$tmp/gen.json")
  ids=$(sed -n 's/.*"ids": \[\([0-9, ]*\)\]}.*/\1/p' "$tmp/gen.json" | tr -d ' ')
  "$tok" --tokenizer "$fx/llama3.json" --decode "$ids" > "$tmp/dec.txt" 2> /dev/null
  printf '\n' >> "$tmp/dec.txt" # (clmoe-generate ends one prompt's text with a newline)
  if [ -n "$want" ] && [ "$got" = "$want" ] && [ -n "$ids" ] && cmp -s "$tmp/dec.txt" "$tmp/gen.txt"; then
    pass "clmoe-generate --tokenizer: prompt ids $got, output ids $ids decode to its text"
  else
    fail "clmoe-generate --tokenizer: prompt ids '$got' (want '$want'), ids '$ids'"; od -c "$tmp/gen.txt" | head -3; od -c "$tmp/dec.txt" | head -3
  fi
fi

# 3. bad command lines, files and ids
expect "no --tokenizer" 2 "--tokenizer is required" -- "$tok" --print-ids --text x
expect "nothing to do" 2 "nothing to do" -- "$tok" --tokenizer "$fx/llama3.json" --text x
expect "unknown flag" 2 "unknown argument '--bogus'" -- "$tok" --tokenizer "$fx/llama3.json" --bogus
expect "--decode with text" 2 "does not go with" -- "$tok" --tokenizer "$fx/llama3.json" --decode 1 --text x
expect "--decode not ids" 2 "not a comma-separated list of ids" -- "$tok" --tokenizer "$fx/llama3.json" --decode 1,x
expect "--decode an id outside" 1 "id 999999 (number 2 of the list)" -- "$tok" --tokenizer "$fx/llama3.json" \
  --decode 1,999999
expect "--append unknown" 2 "neither a special token" -- "$tok" --tokenizer "$fx/llama3.json" --append '<nope>' \
  --print-ids --text x
expect "missing tokenizer" 1 "$tmp/none.json: cannot open" -- "$tok" --tokenizer "$tmp/none.json" --print-ids --text x
printf '{"model": {"type": "WordPiece", "vocab": {}}, "pre_tokenizer": null}' > "$tmp/wp.json"
expect "WordPiece refused" 1 "wp.json: model.type is 'WordPiece'" -- "$tok" --tokenizer "$tmp/wp.json" --print-ids --text x
expect "missing input" 1 "$tmp/none.txt: cannot open" -- "$tok" --tokenizer "$fx/llama3.json" --print-ids "$tmp/none.txt"
expect "shard into a missing folder" 1 "cannot create" -- "$tok" --tokenizer "$fx/llama3.json" \
  --shard "$tmp/no/such/dir/x.tok" --text x
[ -e "$tmp/no" ] && fail "a failed --shard created something"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all clmoe-tokenize tests passed"
