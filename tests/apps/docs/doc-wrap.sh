#!/bin/sh
# The apps as tests/apps/test_docs.sh runs the docs' commands: installed under each app's
# name (and mpirun's, srun's) in a folder first in PATH, this runs the built app with the
# command's own flags, only made small enough for a CI machine: the big presets become
# tiny (except where a command only counts or plans), long runs, sequences and shapes short,
# GPUs the default device, launchers one or two local ranks. Every rewrite is listed here.
name=$(basename "$0")
[ -n "${DOC_APPS:-}" ] || { echo "doc-wrap: DOC_APPS is not set" >&2; exit 99; }

# Arguments are rotated through "$@": each taken from the front, put back (rewritten) at
# the end; `keep` marks commands that only plan or count (the big presets stay).
keep=0
for a in "$@"; do
  case $a in --count-params | --print-config) keep=1 ;; esac
done
case $name in clmoe-plan) keep=1 ;; esac
small() { # NAME VALUE: the value this wrapper gives the flag
  case $1 in
  --preset) case $2 in gpu | demo | k3 | kimi-linear-48b) [ $keep -eq 1 ] && echo "$2" || echo tiny ;; *) echo "$2" ;; esac ;;
  --seq-len) echo 32 ;;
  --batch) [ "$name" = clmoe-bench ] && echo 1 || echo 4 ;;
  --steps) echo 3 ;;
  -n) echo 8 ;;
  --prefill-bench) echo 64 ;;
  --prefill-chunk) echo 32 ;;
  --sizes) echo 64,96 ;;
  --T) echo 64 ;;
  --H) echo 2 ;;
  --ep) echo "${DOC_NP:-1}" ;;
  --shape) echo 1,37,2,16,16 ;;
  *) echo "$2" ;;
  esac
}
n=$#
i=0
while [ $i -lt $n ]; do
  a=$1
  shift
  i=$((i + 1))
  case $a in
  --preset | --seq-len | --batch | --steps | -n | --prefill-bench | --prefill-chunk | --sizes | --T | --H | --ep | --shape)
    v=$1
    shift
    i=$((i + 1))
    set -- "$@" "$a" "$(small "$a" "$v")" ;;
  --device) # no GPU in CI: the default device
    v=$1
    shift
    i=$((i + 1))
    case $v in gpu | nvidia | cuda | amd | rocm) ;; *) set -- "$@" --device "$v" ;; esac ;;
  *) set -- "$@" "$a" ;;
  esac
done

case $name in
mpirun) # one or two local ranks; the placement flags of big jobs dropped
  n=$#
  i=0
  np=2
  while [ $i -lt $n ]; do
    a=$1
    shift
    i=$((i + 1))
    case $a in
    -np | -n) np=$(($1 < 2 ? $1 : 2)); shift; i=$((i + 1)) ;;
    --map-by | --bind-to) shift; i=$((i + 1)) ;;
    *) set -- "$@" "$a" ;;
    esac
  done
  export DOC_NP=$np
  [ -n "${DOC_MPIRUN:-}" ] || { echo "doc-wrap: no mpirun (DOC_MPIRUN)" >&2; exit 99; }
  exec "$DOC_MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$@" ;;
srun) # one task; its options dropped
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
  export SLURM_STEP_NUM_TASKS=1 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_JOB_ID=1
  exec "$@" ;;
scontrol)
  echo "doc-wrap: scontrol $* (the docs' job asked for it: the run did not complete)" >&2
  exit 1 ;;
clmoe-train) # a short run, no sample
  case " $* " in *" --count-params "* | *" --print-config "*) ;; *) set -- "$@" --steps 3 --eval-every 0 --sample 0 ;; esac ;;
clmoe-bench) # one small shape each, one repetition
  case $1 in
  gemm) set -- "$@" --sizes 64,96 --reps 1 ;;
  kda) set -- "$@" --T 64 --H 2 --recurrent-max 64 --reps 1 ;;
  mla) set -- "$@" --T 64 --H 2 --decode-ctx 64 --decode-batch 1 --naive-max 64 --reps 1 ;;
  moe) set -- "$@" --preset tiny --tokens 64 --reps 1 ;;
  sample) set -- "$@" --vocab 300 --reps 1 ;;
  esac ;;
clmoe-xcheck) # the checks of one family, small, unless the command names its own
  case " $* " in *" --op "* | *" --list "* | *" --compare "*) ;; *) set -- "$@" --op random --small ;; esac ;;
esac
exec "$DOC_APPS/$name" "$@"
