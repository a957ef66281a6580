#!/bin/sh
# clmoe-train end to end on the tiny preset: the loss falls on text, stop-and-resume equals
# an uninterrupted run bit for bit (also after SIGTERM), and every bad input of the corpus
# (tests/data/bad/data, damaged checkpoints made here) gives a clear error and a non-zero exit.
# Run by make check with CLMOE_APPS_DIR set; CLMOE_TEST_WRAPPER (e.g. "valgrind -q
# --error-exitcode=99") runs the error cases under a checker.
set -u
. "$(dirname "$0")/apps_common.sh"
srcdir=${CLMOE_SRCDIR:-$(dirname "$0")/../..}
train="$apps/clmoe-train"
wrap=${CLMOE_TEST_WRAPPER:-}
skip_without_device

# A small text with structure to learn: a few sentences repeated with variations.
i=0
while [ $i -lt 300 ]; do
  echo "the quick brown fox $i jumps over the lazy dog; a stitch in time saves nine."
  i=$((i + 1))
done > "$tmp/text.txt"
# The metrics rows a running job has written so far (0 before the file exists).
rows_of() { n=$(grep -c '^[0-9]' "$1" 2> /dev/null); echo "${n:-0}"; }
tiny="--preset tiny --data $tmp/text.txt --batch 4 --seq-len 64 --sample 0 --quiet"

if [ -z "$wrap" ]; then # under a checker only the error cases (4, 5) run
# 1. The loss falls well below its start (ln 256 = 5.55) within 150 steps.
expect "train tiny on text" 0 "checkpoint" -- "$train" $tiny --steps 150 --lr 3e-3 --eval-every 50 --out "$tmp/run"
first=$(sed -n 2p "$tmp/run/metrics.csv" | cut -d, -f2)
last_val=$(tail -n 1 "$tmp/run/metrics.csv" | cut -d, -f3)
if awk -v a="$first" -v b="$last_val" 'BEGIN { exit !(a > 5.0 && b < 3.0) }'; then
  pass "loss falls: first step $first, validation after 150 steps $last_val"
else
  fail "loss does not fall enough: first step $first, validation after 150 steps $last_val"
fi
rows=$(grep -c '^[0-9]' "$tmp/run/metrics.csv")
if [ "$rows" -eq 150 ]; then pass "metrics has a row per step"; else fail "metrics has $rows rows, expected 150"; fi

# 2. Stop at step 7 and resume to 12 = 12 steps without a stop: the same losses and the
#    same checkpoint bytes (weights, moments, QB biases, metadata).
common="$tiny --steps 12 --lr 3e-3 --eval-every 6"
expect "uninterrupted 12 steps" 0 "" -- "$train" $common --out "$tmp/a"
expect "--stop-at 7 (exit 75: resumable)" 75 "at step 7 (--stop-at)" -- "$train" $common --stop-at 7 --out "$tmp/b"
expect "--resume to 12" 0 "at step 12 (end)" -- "$train" --resume "$tmp/b/checkpoint.safetensors" --out "$tmp/b" --sample 0 --quiet
if [ "$(cut -d, -f1-5 "$tmp/a/metrics.csv")" = "$(cut -d, -f1-5 "$tmp/b/metrics.csv")" ]; then
  pass "resumed losses equal the uninterrupted run's"
else
  fail "resumed losses differ"; paste -d'|' "$tmp/a/metrics.csv" "$tmp/b/metrics.csv" | head -14
fi
if cmp -s "$tmp/a/checkpoint.safetensors" "$tmp/b/checkpoint.safetensors"; then
  pass "resumed checkpoint is bit-identical"
else
  fail "resumed checkpoint differs from the uninterrupted run's"
fi

# 3. SIGTERM mid-run: exit 143 with a checkpoint; resuming finishes with the same losses.
"$train" $tiny --steps 400 --lr 3e-3 --eval-every 100 --out "$tmp/c" > "$tmp/c.out" 2>&1 &
pid=$!
n=0
while [ "$(rows_of "$tmp/c/metrics.csv")" -lt 3 ] && [ $n -lt 600 ]; do
  sleep 0.1; n=$((n + 1))
done
kill -TERM $pid
wait $pid
rc=$?
if [ $rc -eq 143 ] && grep -q "(SIGTERM)" "$tmp/c.out"; then pass "SIGTERM: checkpoint and exit 143"
else fail "SIGTERM: exit $rc"; cat "$tmp/c.out"; fi
cstep=$(grep -o 'at step [0-9]*' "$tmp/c.out" | tail -n 1 | cut -d' ' -f3)
expect "resume after SIGTERM" 75 "" -- "$train" --resume "$tmp/c/checkpoint.safetensors" --out "$tmp/c" --steps 400 --stop-at $((cstep + 3)) --quiet --sample 0
"$train" $tiny --steps 400 --lr 3e-3 --eval-every 100 --stop-at $((cstep + 3)) --out "$tmp/d" > /dev/null 2>&1
if [ "$(cut -d, -f1-2 "$tmp/c/metrics.csv")" = "$(cut -d, -f1-2 "$tmp/d/metrics.csv")" ] &&
   cmp -s "$tmp/c/checkpoint.safetensors" "$tmp/d/checkpoint.safetensors"; then
  pass "resume after SIGTERM at step $cstep equals an uninterrupted run"
else
  fail "resume after SIGTERM at step $cstep differs"
fi

# 3b. kill -9 mid-run (no handler runs): the metrics file holds its header and every row up
#     to the last checkpoint, as whole lines; a resume cuts it at the checkpoint's step (also
#     a line cut short) and continues it, one row per step.
"$train" $tiny --steps 400 --lr 3e-3 --eval-every 100 --checkpoint-every 4 --out "$tmp/k" > "$tmp/k.out" 2>&1 &
pid=$!
n=0
while { [ ! -f "$tmp/k/checkpoint.safetensors" ] ||
        [ "$(rows_of "$tmp/k/metrics.csv")" -lt 10 ]; } && [ $n -lt 1200 ]; do
  sleep 0.1; n=$((n + 1))
done
kill -KILL $pid
wait $pid 2> /dev/null
kstep=$(head -c 65536 "$tmp/k/checkpoint.safetensors" | tr -d '\000' | grep -ao '"step": *"[0-9]*"' | grep -o '[0-9][0-9]*')
krows=$(grep '^[0-9]' "$tmp/k/metrics.csv" | cut -d, -f1 | awk -v k="${kstep:-0}" '$1 <= k' | tr '\n' ' ')
if [ -n "$kstep" ] && [ "$kstep" -ge 4 ] && head -n 1 "$tmp/k/metrics.csv" | grep -q '^step,loss,' &&
   [ "$krows" = "$(seq 1 "$kstep" | tr '\n' ' ')" ] && [ "$(tail -c 1 "$tmp/k/metrics.csv" | od -An -c | tr -d ' ')" = '\n' ]; then
  pass "kill -9: metrics has its header and rows 1..$kstep of the checkpoint, whole lines"
else
  fail "kill -9: checkpoint step '${kstep:-none}', metrics rows up to it: $krows"; head -n 3 "$tmp/k/metrics.csv"
fi
printf '%s' "$((${kstep:-0} + 1)),0.5" >> "$tmp/k/metrics.csv" # a row cut short
expect "resume after kill -9" 75 "" -- "$train" --resume "$tmp/k/checkpoint.safetensors" --out "$tmp/k" --steps 400 --stop-at $((${kstep:-0} + 3)) --quiet --sample 0
if [ "$(grep -c '^step,' "$tmp/k/metrics.csv")" -eq 1 ] &&
   [ "$(grep '^[0-9]' "$tmp/k/metrics.csv" | cut -d, -f1 | tr '\n' ' ')" = "$(seq 1 $((${kstep:-0} + 3)) | tr '\n' ' ')" ] &&
   [ "$(awk -F, 'NR > 1 && NF != 10' "$tmp/k/metrics.csv" | wc -l)" -eq 0 ]; then
  pass "resumed metrics: one header, one 10-field row per step 1..$((${kstep:-0} + 3))"
else
  fail "resumed metrics after kill -9 are not one row per step"; cat "$tmp/k/metrics.csv" | head -30
fi

# 3c. The data file truncated under the running job: a clear error naming it, a plain exit
#     status (not a signal).
cp "$tmp/text.txt" "$tmp/shrinking.txt"
"$train" --preset tiny --data "$tmp/shrinking.txt" --batch 4 --seq-len 64 --sample 0 --quiet \
  --steps 400 --out "$tmp/t" > "$tmp/t.out" 2>&1 &
pid=$!
n=0
while [ "$(rows_of "$tmp/t/metrics.csv")" -lt 2 ] && [ $n -lt 1200 ]; do
  sleep 0.1; n=$((n + 1))
done
: > "$tmp/shrinking.txt"
wait $pid
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "shrinking.txt: the file changed while in use" "$tmp/t.out"; then
  pass "data truncated under the job: exit $rc with the file named"
else
  fail "data truncated under the job: exit $rc"; tail -n 5 "$tmp/t.out"
fi

# 3d. SIGTERM during start-up (kernels compiling: no kernel cache): the handler is already
#     in place, so the run still stops with a checkpoint and exit 143.
CLMOE_CACHE=0 "$train" $tiny --steps 50 --out "$tmp/e" > "$tmp/e.out" 2>&1 &
pid=$!
sleep 1
kill -TERM $pid
wait $pid
rc=$?
if [ $rc -eq 143 ] && grep -q "(SIGTERM)" "$tmp/e.out" && [ -f "$tmp/e/checkpoint.safetensors" ]; then
  pass "SIGTERM during start-up: checkpoint and exit 143"
else
  fail "SIGTERM during start-up: exit $rc"; tail -n 5 "$tmp/e.out"
fi

# 3e. The run directory: step-numbered checkpoints (the newest --keep-checkpoints kept) with
#     checkpoint.safetensors linking the newest; a fresh run refuses a directory holding a
#     run (exit 2) unless --overwrite; --resume DIR goes on in DIR; --resume auto starts or
#     goes on; a finished run resumed again does nothing (exit 0); a resume from an older
#     checkpoint refuses to rewrite later ones; a resume into another --out carries the
#     metrics rows; a second process on one directory is refused; moved data names --data.
rd="$tmp/rd"
short="--preset tiny --data $tmp/text.txt --batch 2 --seq-len 32 --eval-every 0 --sample 0 --quiet"
expect "checkpoint every 2, keep 2" 0 "" -- "$train" $short --steps 6 --checkpoint-every 2 --keep-checkpoints 2 --out "$rd"
if [ "$(cd "$rd" && ls checkpoint-*.safetensors | tr '\n' ' ')" = "checkpoint-00000004.safetensors checkpoint-00000006.safetensors " ] &&
   [ "$(readlink "$rd/checkpoint.safetensors")" = "checkpoint-00000006.safetensors" ]; then
  pass "run directory: the newest 2 checkpoints kept, the link at step 6"
else
  fail "run directory holds: $(ls -l "$rd")"
fi
expect "fresh run into a run's directory" 2 "already holds a run (checkpoints up to step 6)" -- "$train" $short --steps 6 --out "$rd"
expect "--resume DIR extends the run" 0 "$rd/checkpoint-00000008.safetensors at step 8" -- "$train" --resume "$rd" --steps 8 --quiet
if [ "$(grep -c '^[0-9]' "$rd/metrics.csv")" -eq 8 ]; then pass "--resume DIR: metrics continue in DIR (8 rows)"
else fail "--resume DIR: metrics rows $(grep -c '^[0-9]' "$rd/metrics.csv")"; fi
expect "a complete run resumed again" 0 "complete at step 8; nothing to do" -- "$train" --resume "$rd" --quiet
expect "resume from an older checkpoint in place" 2 "holds checkpoints up to step 8, after the step 6" -- \
  "$train" --resume "$rd/checkpoint-00000006.safetensors" --quiet
expect "resume into another --out" 0 "" -- "$train" --resume "$rd/checkpoint-00000006.safetensors" --out "$rd.branch" --steps 8 --quiet --sample 0
if [ "$(grep '^[0-9]' "$rd.branch/metrics.csv" | cut -d, -f1-2)" = "$(grep '^[0-9]' "$rd/metrics.csv" | head -n 8 | cut -d, -f1-2)" ]; then
  pass "resume into another --out: the metrics carry the rows before its step, then equal the original's"
else
  fail "branched metrics differ"; paste -d'|' "$rd/metrics.csv" "$rd.branch/metrics.csv"
fi
expect "--overwrite discards a run" 0 "" -- "$train" $short --steps 2 --out "$rd.branch" --overwrite
if [ "$(cd "$rd.branch" && ls checkpoint-*.safetensors | tr '\n' ' ')" = "checkpoint-00000002.safetensors " ] &&
   [ "$(grep -c '^[0-9]' "$rd.branch/metrics.csv")" -eq 2 ]; then pass "--overwrite: only the new run's checkpoint and rows"
else fail "--overwrite left: $(ls "$rd.branch")"; fi
mkdir -p "$rd.auto" && printf 'step,loss\n1,5.5\n' > "$rd.auto/metrics.csv" # a first job killed before its first checkpoint
expect "--resume auto starts a run (over a leftover without checkpoints)" 75 "at step 3 (--stop-at)" -- "$train" $short --steps 5 --stop-at 3 --out "$rd.auto" --resume auto
if [ "$(grep -c '^[0-9]' "$rd.auto/metrics.csv")" -eq 3 ]; then pass "--resume auto: the leftover rows replaced"
else fail "--resume auto: metrics $(cat "$rd.auto/metrics.csv")"; fi
expect "--resume auto goes on" 0 "at step 5 (end)" -- "$train" $short --steps 5 --out "$rd.auto" --resume auto
expect "--resume auto with another model" 2 "a run of another model" -- "$train" --preset demo --data "$tmp/text.txt" --out "$rd.auto" --resume auto
expect "--resume auto with nothing to start from" 2 "holds no checkpoint" -- "$train" --out "$tmp/none" --resume auto
cp "$tmp/text.txt" "$tmp/moving.txt"
expect "run on data that moves" 75 "" -- "$train" --preset tiny --data "$tmp/moving.txt" --batch 2 --seq-len 32 --eval-every 0 --sample 0 --quiet --steps 4 --stop-at 2 --out "$rd.moved"
mv "$tmp/moving.txt" "$tmp/moved.txt"
expect "resume with the data moved" 2 "moving.txt (metadata 'data') cannot be read" -- "$train" --resume "$rd.moved" --quiet
expect "resume with --data at its new place" 0 "" -- "$train" --resume "$rd.moved" --data "$tmp/moved.txt" --quiet --sample 0
expect "srun tasks without an MPI launch" 2 "srun started 2 tasks" -- env SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 SLURM_JOB_ID=1 "$train" $short --steps 1 --out "$tmp/srun"
"$train" $short --steps 400 --out "$rd.lock" > "$tmp/lock.out" 2>&1 &
pid=$!
n=0
while [ "$(rows_of "$rd.lock/metrics.csv")" -lt 1 ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
expect "a second process on a directory in use" 1 "in use by another clmoe-train (pid $pid" -- "$train" --resume auto --out "$rd.lock" $short --steps 400
kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 130 ] && grep -q "(SIGINT)" "$tmp/lock.out"; then pass "SIGINT: checkpoint and exit 130"
else fail "SIGINT: exit $rc"; tail -n 3 "$tmp/lock.out"; fi

# 3a. The hybrid recalls: on MQAR (16 keys and values, 4 pairs, 4 queries; chance 1/16) the
#     validation recall rate is well above chance after 75 steps (of a 300-step schedule).
expect "train tiny on the recall task" 75 "" -- "$train" --preset tiny --task mqar:keys=16,values=16,pairs=4,queries=4 \
  --steps 300 --stop-at 75 --batch 16 --seq-len 64 --lr 1e-3 --eval-every 75 --sample 0 --quiet --out "$tmp/mqar"
recall=$(tail -n 1 "$tmp/mqar/metrics.csv" | cut -d, -f4)
if awk -v r="$recall" 'BEGIN { exit !(r > 0.15) }'; then pass "recall $recall after 75 steps (chance 0.0625)"
else fail "recall $recall after 75 steps is not clearly above chance 0.0625"; fi

# 3b. A context curriculum: the loader changes the sequence length on schedule.
"$train" --preset tiny --print-config > "$tmp/curr.conf"
sed -i 's/^seq_len = .*/curriculum = 16@0, 32@2, 48@4/' "$tmp/curr.conf"
expect "curriculum run" 0 "" -- "$train" --config "$tmp/curr.conf" --data "$tmp/text.txt" --steps 5 --batch 2 --eval-every 0 --sample 0 --quiet --out "$tmp/curr"
lens=$(cut -d, -f10 "$tmp/curr/metrics.csv" | tail -n +2 | tr '\n' ' ')
if [ "$lens" = "16 16 32 32 48 " ]; then pass "curriculum lengths by step: $lens"; else fail "curriculum lengths by step: '$lens'"; fi

# 3c. No round trip to the host inside a training step of one process: --profile counts the
#     host's waits over the profiled steps. Each step waits once (the read of what it left on
#     the device, at its end), writes without waiting and never finishes the queue; a new
#     wait inside the step fails here. fp32 and bf16.
for p in fp32 bf16; do
  expect "host waits, $p" 0 "host waits per step" -- "$train" $tiny --steps 5 --precision $p --profile --eval-every 0 --out "$tmp/waits-$p"
  waits=$(sed -n 's/^host waits per step (mean of \([0-9]*\) steps): \([0-9.]*\) blocking reads, \([0-9.]*\) blocking writes, \([0-9.]*\) finishes.*/\1 \2 \3 \4/p' "$tmp/out")
  if [ -n "$waits" ] && echo "$waits" | awk '{ exit !($1 == 3 && $2 <= 1 && $3 == 0 && $4 == 0) }'; then
    pass "$p: per step of 3 profiled steps (reads writes finishes): ${waits#* }"
  else
    fail "$p: host waits per step (steps reads writes finishes) '$waits', expected 3 steps, <= 1 read, no write or finish"
  fi
done

fi

# 4. Bad data files (the corpus in tests/data/bad/data) and bad flags.
for f in "$srcdir"/tests/data/bad/data/*; do
  want=$(sed -n 's/^# expect: //p' "$f.expect" 2>/dev/null)
  [ -n "$want" ] || continue
  expect "bad data $(basename "$f")" 1 "$want" -- $wrap "$train" --preset tiny --data "$f" --steps 1 --sample 0 --quiet --out "$tmp/bad"
done
: > "$tmp/empty.txt"
expect "empty data file" 1 "empty.txt" -- $wrap "$train" --preset tiny --data "$tmp/empty.txt" --steps 1 --out "$tmp/bad"
expect "missing data file" 1 "nonexistent.txt" -- $wrap "$train" --preset tiny --data "$tmp/nonexistent.txt" --steps 1 --out "$tmp/bad"
head -c 100 "$tmp/text.txt" > "$tmp/short.txt"
expect "data shorter than a sequence" 1 "short.txt: the validation (last 5%) split has 5 tokens" -- $wrap "$train" --preset tiny --data "$tmp/short.txt" --seq-len 64 --steps 1 --out "$tmp/bad"
expect "unknown task" 2 "unknown task 'copy'" -- "$train" --preset tiny --task copy
expect "bad task field" 2 "unknown field 'vals'" -- "$train" --preset tiny --task mqar:vals=3
expect "task vocabulary too big" 1 "exceeds the model" -- "$train" --preset tiny --task mqar:keys=200,values=200 --steps 1 --out "$tmp/bad"
expect "bad --steps" 2 "--steps" -- "$train" --preset tiny --data "$tmp/text.txt" --steps 0
expect "unwritable --out" 1 "cannot create" -- "$train" --preset tiny --data "$tmp/text.txt" --steps 1 --out /proc/nonexistent/run

# 4b. Every malformed config of tests/data/bad/config through the app: its line and key, exit 1.
for f in "$srcdir"/tests/data/bad/config/*.conf; do
  expect "bad config $(basename "$f")" 1 "$(basename "$f")" -- $wrap "$train" --config "$f" --data "$tmp/text.txt" --steps 1 --out "$tmp/bad"
done

# 5. Damaged checkpoints: every one is refused with the file named, nothing is overwritten.
ck="$tmp/a/checkpoint.safetensors"
[ -f "$ck" ] || "$train" $tiny --steps 2 --out "$tmp/a" > /dev/null 2>&1
size=$(wc -c < "$ck")
head -c $((size / 2)) "$ck" > "$tmp/truncated.safetensors"
head -c 7 "$ck" > "$tmp/stub.safetensors"
printf 'not a checkpoint at all, just text\n' > "$tmp/text.safetensors"
# a byte flipped inside the JSON header's first tensor name
cp "$ck" "$tmp/flipped.safetensors"
printf 'Z' | dd of="$tmp/flipped.safetensors" bs=1 seek=12 conv=notrunc 2> /dev/null
for f in truncated stub text flipped; do
  cp "$tmp/$f.safetensors" "$tmp/$f.before"
  expect "resume from a $f checkpoint" 1 "$f.safetensors" -- $wrap "$train" --resume "$tmp/$f.safetensors" --steps 1 --out "$tmp/bad"
  if cmp -s "$tmp/$f.safetensors" "$tmp/$f.before"; then pass "$f checkpoint left untouched"; else fail "$f checkpoint was modified"; fi
done
expect "resume from a missing file" 1 "nonexistent.safetensors" -- $wrap "$train" --resume "$tmp/nonexistent.safetensors" --out "$tmp/bad"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
