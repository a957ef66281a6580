#!/bin/sh
# The user guide's Slurm chain (docs/examples/clmoe-train.sbatch) under an emulated Slurm:
# srun and scontrol are stand-ins (srun runs the step with Slurm's step variables and notes
# its pid; `scontrol requeue` notes the request), each "job" runs the sbatch script as Slurm
# would, and the emulated `--signal=TERM@...` sends SIGTERM to the step: mid-run, during
# start-up, and again mid-run, until a job finishes the run. The chained run's final
# checkpoint must equal an uninterrupted run's byte for byte, and its metrics row for row
# (tokens/s aside). Also: srun with several tasks but no MPI launch is refused.
set -u
. "$(dirname "$0")/apps_common.sh"
srcdir=${CLMOE_SRCDIR:-$(dirname "$0")/../..}
script="$srcdir/docs/examples/clmoe-train.sbatch"
skip_without_device

emu="$tmp/slurm"
mkdir -p "$emu/bin"
cat > "$emu/bin/srun" << 'SRUN'
#!/bin/sh
# srun of one task: Slurm's step variables, the pid noted for the emulated signal
export SLURM_STEP_NUM_TASKS=${SLURM_NTASKS:-1} SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_STEP_ID=0
export SLURM_STEP_NODELIST=${SLURM_JOB_NODELIST:-localhost}
echo $$ > "$SLURM_EMU/step.pid"
exec "$@"
SRUN
cat > "$emu/bin/scontrol" << 'SCONTROL'
#!/bin/sh
[ "$1" = requeue ] && [ "$2" = "$SLURM_JOB_ID" ] && { echo "$2" > "$SLURM_EMU/requeued"; exit 0; }
echo "scontrol (emulated): unexpected arguments: $*" >&2; exit 1
SCONTROL
chmod +x "$emu/bin/srun" "$emu/bin/scontrol"
# clmoe-train as the script calls it: the built one, first in PATH
ln -s "$(cd "$apps" && pwd)/clmoe-train" "$emu/bin/clmoe-train"

i=0
while [ $i -lt 200 ]; do
  echo "the quick brown fox $i jumps over the lazy dog; a stitch in time saves nine."
  i=$((i + 1))
done > "$tmp/text.txt"
args="--preset tiny --data $tmp/text.txt --batch 2 --seq-len 32 --steps 24 --eval-every 8 --checkpoint-every 5 --sample 0"
rows_of() { n=$(grep -c '^[0-9]' "$1" 2> /dev/null); echo "${n:-0}"; }

# One job of the chain: the script in the background; TERM to the step when `when` says
# ("rows N": after N metrics rows; "start": at once; "none": never). Sets job_rc, requeued.
job() {
  when=$1 n=0
  rm -f "$emu/requeued" "$emu/step.pid"
  env PATH="$emu/bin:$PATH" SLURM_EMU="$emu" SLURM_JOB_ID=4242 SLURM_NTASKS=1 SLURM_JOB_NODELIST=localhost \
    SLURM_SUBMIT_DIR="$tmp" SLURM_RESTART_COUNT="$jobs" RUN="$tmp/chain" TRAIN="$args" \
    bash "$script" >> "$tmp/chain.log" 2>&1 &
  spid=$!
  case $when in
  rows*)
    want=${when#rows }
    while [ "$(rows_of "$tmp/chain/metrics.csv")" -lt "$want" ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n + 1)); done
    kill -TERM "$(cat "$emu/step.pid")" ;;
  start)
    while [ ! -s "$emu/step.pid" ] && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
    sleep 0.3
    kill -TERM "$(cat "$emu/step.pid")" ;;
  esac
  wait $spid
  job_rc=$?
  requeued=0
  [ -f "$emu/requeued" ] && requeued=1
  jobs=$((jobs + 1))
}

jobs=0
for when in "rows 3" "start" "rows 14" "none"; do
  job "$when"
  if [ $requeued -eq 1 ] && [ "$when" != none ]; then pass "job $jobs (TERM at $when): checkpoint, requeued"
  elif [ $requeued -eq 0 ] && [ "$when" = none ] && [ $job_rc -eq 0 ]; then pass "job $jobs: the run completes, no requeue"
  else fail "job $jobs (TERM at $when): exit $job_rc, requeued $requeued"; tail -n 8 "$tmp/chain.log"; fi
done
job none
if [ $job_rc -eq 0 ] && [ $requeued -eq 0 ] && grep -q "complete at step 24; nothing to do" "$tmp/chain.log"; then
  pass "a job after the end (Slurm requeued it anyway) does nothing and exits 0"
else
  fail "a job after the end: exit $job_rc, requeued $requeued"; tail -n 5 "$tmp/chain.log"
fi

expect "the same run uninterrupted" 0 "" -- "$apps/clmoe-train" $args --out "$tmp/whole" --quiet
if cmp -s "$tmp/chain/checkpoint.safetensors" "$tmp/whole/checkpoint.safetensors"; then
  pass "the chain's final checkpoint equals the uninterrupted run's, byte for byte"
else
  fail "the chain's final checkpoint differs"
fi
if [ "$(cut -d, -f1-6,8- "$tmp/chain/metrics.csv")" = "$(cut -d, -f1-6,8- "$tmp/whole/metrics.csv")" ]; then
  pass "the chain's metrics equal the uninterrupted run's ($(rows_of "$tmp/whole/metrics.csv") rows)"
else
  fail "the chain's metrics differ"; paste -d'|' "$tmp/chain/metrics.csv" "$tmp/whole/metrics.csv" | head -30
fi
kept=$(cd "$tmp/chain" && ls checkpoint-*.safetensors | tr '\n' ' ')
if [ "$(readlink "$tmp/chain/checkpoint.safetensors")" = checkpoint-00000024.safetensors ] &&
   [ "$(echo $kept | wc -w)" -le 3 ]; then pass "the run's directory keeps the newest checkpoints: $kept"
else fail "the run's directory: $kept"; fi

expect "srun of 2 tasks without PMI" 2 "srun started 2 tasks" -- env PATH="$emu/bin:$PATH" SLURM_EMU="$emu" \
  SLURM_NTASKS=2 SLURM_JOB_ID=4243 "$emu/bin/srun" clmoe-train $args --out "$tmp/two"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
