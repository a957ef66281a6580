#!/bin/sh
# Every command a user would paste from README.md and docs/user-guide.md, run: the code
# blocks are taken from the files in order and run as shell scripts in one folder, with
# the apps (and mpirun, srun) behind tests/apps/docs/doc-wrap.sh, which keeps each command's
# flags but makes its sizes small (the tiny preset, 3 steps, short sequences, the default
# device). A recipe whose flag was renamed, whose file is not where it says, or whose exit
# status is not 0 fails here. Blocks of program output are recognised and left alone;
# commands CI runs elsewhere (the build, the quick start, the suites) or that need what CI
# does not have are skipped by the table below, each skip printed with its reason.
set -u
. "$(dirname "$0")/apps_common.sh"
srcdir=${CLMOE_SRCDIR:-$(dirname "$0")/../..}
skip_without_device

box="$tmp/box"
wrap="$tmp/wrap"
mkdir -p "$box" "$wrap"
for a in clmoe-info clmoe-train clmoe-generate clmoe-bench clmoe-xcheck clmoe-op clmoe-plan mpirun srun scontrol; do
  cp "$srcdir/tests/apps/docs/doc-wrap.sh" "$wrap/$a"
  chmod +x "$wrap/$a"
done
DOC_APPS=$(cd "$apps" && pwd)
DOC_MPIRUN=$(command -v mpirun || true) # the real one, for the wrapper of that name
export DOC_APPS DOC_MPIRUN

# The files the docs' commands read.
i=0
while [ $i -lt 400 ]; do
  echo "the quick brown fox $i jumps over the lazy dog; a stitch in time saves nine."
  i=$((i + 1))
done > "$box/corpus.txt"
printf 'What does the fox do?' > "$box/q1.txt"
# corpus.tok: a CLMOETOK shard (docs/user-guide.md, Data): 8192 uint16 tokens below 256
{
  printf 'CLMOETOK\001\000\000\000\002\000\000\000\000\040\000\000\000\000\000\000\000\001\000\000\000\000\000\000'
  i=0
  while [ $i -lt 8192 ]; do
    printf "\\$(printf %o $((97 + i % 26)))\\000"
    i=$((i + 1))
  done
} > "$box/corpus.tok"

# skip_reason LINE: why a command line is not run here ("" when it is run).
skip_reason() {
  set -f
  # shellcheck disable=SC2086 # the words of the line
  set -- $1
  set +f
  while [ $# -gt 0 ] && case $1 in [A-Z_]*=*) true ;; *) false ;; esac; do shift; done # VAR=value
  case ${1:-}${2:+ $2} in
  "sh scripts/install-intel-opencl.sh"* | ". "*) echo "installs or loads Intel's CPU runtime (CI: check-vendors)" ;;
  "sh scripts/"*) echo "CI runs the quick start, check.sh and check-vendors.sh themselves" ;;
  autoreconf* | ./configure* | make*) echo "the build: CI builds, checks and installs with these" ;;
  apt-get*) echo "installs packages (CI installs its own)" ;;
  clblast_tuner*) echo "CLBlast's tuners (clblast-utils) are not a dependency" ;;
  export*) echo "a site's own settings (files CI does not have)" ;;
  oclgrind*) echo "CI runs every check under Oclgrind (make check-oclgrind)" ;;
  *) echo "" ;;
  esac
}

# is_command LINE: whether a block's first line is a command (else: output or a listing).
is_command() {
  w=$(printf '%s\n' "$1" | sed 's/^\([A-Z_][A-Z_0-9]*=[^ ]* \)*//' | cut -d' ' -f1)
  case $w in
  *:) return 1 ;; # "clmoe-train: warning ...": a message
  clmoe-* | mpirun | srun | sbatch | sh | make | ./configure | autoreconf | apt-get | clblast_tuner* | export | . | oclgrind)
    return 0 ;;
  esac
  return 1
}

# blocks FILE: each indented code block as "@@ FILE LINE" then its lines (indent removed).
blocks() {
  awk -v f="$1" '
    /^    / && (prev_blank || inblock) { if (!inblock) print "@@ " f " " FNR; inblock = 1; print substr($0, 5); prev_blank = 0; next }
    /^$/ { prev_blank = 1; if (inblock) print ""; next }
    { inblock = 0; prev_blank = 0 }' "$1"
}

run_block() { # FILE LINE: runs $tmp/block (the block's lines)
  first=$(grep -v '^ *#' "$tmp/block" | grep -v '^ *$' | head -n 1)
  if ! is_command "$first"; then
    outputs=$((outputs + 1))
    return
  fi
  : > "$tmp/script"
  echo "set -e" >> "$tmp/script"
  skipping=0 ran=0
  while IFS= read -r cmd; do
    line=$cmd
    if [ $skipping -eq 1 ]; then # a continuation of a skipped command
      case $line in *\\) ;; *) skipping=0 ;; esac
      continue
    fi
    why=$(skip_reason "$line")
    case $line in "#"* | "") why="" ;; esac
    if [ -n "$why" ]; then
      echo "SKIP: $1:$2: $line -- $why"
      skips=$((skips + 1))
      case $line in *\\) skipping=1 ;; esac
      continue
    fi
    case $line in "#"* | "") ;; *) ran=$((ran + 1)) ;; esac
    # a scratch cache: the suite's (warm), "# exit N": the status the text documents
    line=$(printf '%s\n' "$line" | sed "s#CLMOE_CACHE_DIR=/scratch/[^ ]*#CLMOE_CACHE_DIR=${CLMOE_CACHE_DIR:-$box/cache}#g")
    want=$(printf '%s\n' "$line" | sed -n 's/.*# exit \([0-9][0-9]*\).*/\1/p')
    if [ -n "$want" ]; then
      printf 'rc=0; %s || rc=$?; [ $rc -eq %s ] || { echo "exit $rc, the docs say %s"; exit 1; }\n' \
        "${line%%#*}" "$want" "$want" >> "$tmp/script"
    else
      printf '%s\n' "$line" >> "$tmp/script"
    fi
  done < "$tmp/block"
  [ $ran -gt 0 ] || return
  t0=$(date +%s)
  if (cd "$box" && PATH="$wrap:$PATH" timeout 900 sh "$tmp/script") < /dev/null > "$tmp/block.out" 2>&1; then
    pass "$1:$2 ($(( $(date +%s) - t0 )) s): $(sed -n 2p "$tmp/script" | cut -c1-80)"
    runs=$((runs + 1))
  else
    fail "$1:$2: the block fails (exit $?):"
    sed 's/^/    | /' "$tmp/script" | tail -n +2
    tail -n 15 "$tmp/block.out" | sed 's/^/    /'
  fi
}

runs=0 skips=0 outputs=0
for doc in README.md docs/user-guide.md; do
  blocks "$srcdir/$doc" | sed "s#^@@ $srcdir/#@@ #" > "$tmp/blocks"
  where=""
  while IFS= read -r line; do
    case $line in
    "@@ "*)
      next=${line#@@ } # (run_block reads lines into $line too)
      [ -n "$where" ] && run_block $where
      where=$next
      : > "$tmp/block" ;;
    *) printf '%s\n' "$line" >> "$tmp/block" ;;
    esac
  done < "$tmp/blocks"
  [ -n "$where" ] && run_block $where
done
echo "$runs blocks run, $skips commands skipped (reasons above), $outputs output blocks left alone"
[ $runs -ge 10 ] || fail "only $runs blocks ran: the extraction is broken"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
