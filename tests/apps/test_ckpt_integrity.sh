#!/bin/sh
# Checkpoints that detect corruption, through the apps: a tiny clmoe-train run, then one
# byte of its checkpoint's data and (separately) of its metadata flipped with dd; --resume
# and clmoe-generate must each exit non-zero naming the file and the tensor (or the
# metadata), and the untouched checkpoint must still resume. A copy in the format before
# checksums (made here by editing the header with sed) resumes with a warning, and its step
# entries are checked strictly. Stale temporary files of killed saves are removed at the
# next save, other files kept. Run by make check with CLMOE_APPS_DIR set.
set -u
. "$(dirname "$0")/apps_common.sh"
train="$apps/clmoe-train"
gen="$apps/clmoe-generate"
skip_without_device

i=0
while [ $i -lt 100 ]; do
  echo "the quick brown fox $i jumps over the lazy dog"
  i=$((i + 1))
done > "$tmp/text.txt"
tiny="--preset tiny --data $tmp/text.txt --batch 2 --seq-len 16 --eval-every 0 --sample 0 --quiet"
out="$tmp/run"
ck="$out/checkpoint.safetensors"

# Leftovers of a killed save of a run's checkpoint (of step 1; a pid that cannot be running)
# and files that only look like them: the first goes at the next save, the others stay.
mkdir -p "$out"
killed="$out/checkpoint-00000001.safetensors"
echo stale > "$killed.tmp.999999999"
echo keep > "$killed.tmp.12ab"
echo keep > "$out/other.safetensors.tmp.999999999"
echo keep > "$killed.tmp.$$" # this shell: a running process
expect "train 2 of 4 steps" 75 "at step 2 (--stop-at)" -- "$train" $tiny --steps 4 --stop-at 2 --out "$out"
if [ ! -e "$killed.tmp.999999999" ]; then pass "a stale temporary file of a killed save removed"
else fail "the stale $killed.tmp.999999999 is still there"; fi
for f in "$killed.tmp.12ab" "$out/other.safetensors.tmp.999999999" "$killed.tmp.$$"; do
  if [ -e "$f" ]; then pass "$(basename "$f") kept"; else fail "$f was removed"; fi
done

# The header's length (8 bytes, little-endian) and so where the data begins.
hlen=$(od -An -tu1 -N8 "$ck" | awk '{ n = 0; for (i = NF; i >= 1; i--) n = n * 256 + $i; print n }')
data=$((8 + hlen))
# The first tensor of the model (read by --resume and by clmoe-generate) and its offsets.
entry=$(tail -c +9 "$ck" | head -c "$hlen" | grep -o '"param/[^"]*":{[^}]*}' | head -n 1)
tname=$(echo "$entry" | sed 's/^"\([^"]*\)".*/\1/')
begin=$(echo "$entry" | sed 's/.*"data_offsets":\[\([0-9]*\),.*/\1/')

# flip FILE OFFSET: the byte at OFFSET with its lowest bit inverted
flip() {
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $((b ^ 1)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2> /dev/null
}

# 1. One byte of the data of tensor $tname.
cp "$ck" "$tmp/data.safetensors"
flip "$tmp/data.safetensors" $((data + begin + 1001))
expect "resume: a flipped data byte" 1 "data.safetensors: tensor '$tname': its data fails its CRC-32C checksum" -- \
  "$train" --resume "$tmp/data.safetensors" --out "$tmp/bad" --quiet --sample 0
expect "generate: a flipped data byte" 1 "data.safetensors: tensor '$tname': its data fails its CRC-32C checksum" -- \
  "$gen" --ckpt "$tmp/data.safetensors" --prompt "the" -n 2

# 2. One byte of the metadata: a digit of the config's lr, then of optimizer_step.
cp "$ck" "$tmp/meta.safetensors"
at=$(grep -boa 'lr = [0-9]' "$ck" | head -n 1 | cut -d: -f1)
flip "$tmp/meta.safetensors" $((at + 5))
expect "resume: a flipped metadata byte" 1 "meta.safetensors: metadata: the entries fail their CRC-32C checksum" -- \
  "$train" --resume "$tmp/meta.safetensors" --out "$tmp/bad" --quiet --sample 0
expect "generate: a flipped metadata byte" 1 "meta.safetensors: metadata: the entries fail their CRC-32C checksum" -- \
  "$gen" --ckpt "$tmp/meta.safetensors" --prompt "the" -n 2
cp "$ck" "$tmp/meta.safetensors"
at=$(grep -boa '"optimizer_step":"' "$ck" | head -n 1 | cut -d: -f1)
flip "$tmp/meta.safetensors" $((at + 18))
expect "resume: optimizer_step flipped" 1 "meta.safetensors: metadata: the entries fail" -- \
  "$train" --resume "$tmp/meta.safetensors" --out "$tmp/bad" --quiet --sample 0

# 3. The untouched checkpoint resumes to the end; clmoe-generate loads it.
expect "generate from the checkpoint" 0 "" -- "$gen" --ckpt "$ck" --prompt "the" -n 2
expect "resume the untouched checkpoint" 0 "at step 4 (end)" -- "$train" --resume "$ck" --out "$out" --quiet --sample 0

# 4. The format before checksums (a copy of the step-2 checkpoint without the checksum and
#    format entries, the header padded to its length): resumes with a warning; an edited
#    step is refused by name.
"$train" $tiny --steps 4 --stop-at 2 --out "$tmp/old" > /dev/null 2>&1
ck2="$tmp/old/checkpoint.safetensors"
# old SED-SCRIPT NAME: the copy with the header edited by SED-SCRIPT, padded with spaces
old() {
  tail -c +9 "$ck2" | head -c "$hlen" |
    sed -e 's/,"clmoe\.crc32c\.[a-z]*":"[^"]*"//g' -e 's/,"clmoe_format":"2"//' -e "$1" > "$tmp/hdr"
  pad=$((hlen - $(wc -c < "$tmp/hdr")))
  { head -c 8 "$ck2"; cat "$tmp/hdr"; printf "%${pad}s" ""; tail -c +$((data + 1)) "$ck2"; } > "$tmp/$2.safetensors"
}
old 's/^//' unsummed
expect "resume a checkpoint without checksums" 0 "written before checkpoints carried checksums" -- \
  "$train" --resume "$tmp/unsummed.safetensors" --out "$tmp/unsummed" --quiet --sample 0
old 's/"step":"2"/"step":"x"/' step_x
expect "step x" 1 "step_x.safetensors: metadata 'step' is 'x', not an integer" -- \
  "$train" --resume "$tmp/step_x.safetensors" --out "$tmp/bad" --quiet --sample 0
old 's/"step":"2"/"step":"999999"/' step_big
expect "step 999999" 1 "step_big.safetensors: metadata 'step' is 999999 but 'optimizer_step' is 2" -- \
  "$train" --resume "$tmp/step_big.safetensors" --out "$tmp/bad" --quiet --sample 0
old 's/"optimizer_step":"2"/"optimizer_step":"99999999999999999999"/' opt_big
expect "huge optimizer_step" 1 "opt_big.safetensors: metadata 'optimizer_step' is '99999999999999999999'" -- \
  "$train" --resume "$tmp/opt_big.safetensors" --out "$tmp/bad" --quiet --sample 0
old 's/"step":"2","data"/"step":"3","data"/; s/"optimizer_step":"2"/"optimizer_step":"3"/' step_skew
expect "step and next_batch disagree" 1 "step_skew.safetensors: metadata 'next_batch' is 2 but 'step' is 3" -- \
  "$train" --resume "$tmp/step_skew.safetensors" --out "$tmp/bad" --quiet --sample 0
# a checkpoint of format 2 whose checksums were removed
old 's/"optimizer_step"/"clmoe_format":"2","optimizer_step"/' stripped
expect "format 2 without checksums" 1 "stripped.safetensors: metadata: a clmoe checkpoint of format 2 without its checksums" -- \
  "$train" --resume "$tmp/stripped.safetensors" --out "$tmp/bad" --quiet --sample 0
expect "generate: format 2 without checksums" 1 "stripped.safetensors: metadata: a clmoe checkpoint of format 2" -- \
  "$gen" --ckpt "$tmp/stripped.safetensors" --prompt "the" -n 2

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
