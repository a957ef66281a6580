#!/bin/sh
# The command-line conventions every app keeps:
#   1. --version on every app and sub-command: "APP VERSION" first, then the build's
#      "key: value" lines (clmoe_build_info), the same in every app; the commit is git's
#      for a git work tree, the tarball's record for a release;
#   2. the man pages made by help2man: each renders, and names every long option of its
#      --help; every sub-command has one (without help2man: exit 77 and say so, after the
#      other checks passed; the same for 3. without an OpenCL device);
#   3. --json -: stdout holds exactly one JSON document (tests/apps/json_check, a strict
#      validator) in every app and sub-command whose --help offers --json, the text goes
#      to stderr; JSON strings keep valid UTF-8 byte for byte and escape other bytes.
# Run by make check (CLMOE_APPS_DIR, CLMOE_SRCDIR, CLMOE_HAVE_MPI from it).
set -u
. "$(dirname "$0")/apps_common.sh"
src=${CLMOE_SRCDIR:?CLMOE_SRCDIR: the source tree}
jcheck="$apps/../tests/apps/json_check"
mandir="$apps/../man"
[ -x "$jcheck" ] || { fail "no $jcheck (built by make check)"; exit 1; }
# Without any OpenCL device the --json checks cannot run (the others can): exit 77 at the end.
no_device=
if ! "$info" --no-probe > /dev/null 2>&1 && "$info" --no-probe 2>&1 | grep -q "CLMOE_ERR_NO_DEVICE"; then no_device=1; fi
# the commit the reports record is the build's own unless this is set (clmoe-xcheck)
unset CLMOE_COMMIT

# Every app and sub-command: "clmoe-info", ..., "clmoe-bench gemm", ... (the sub-commands
# from their dispatcher's --help).
: > "$tmp/cmds"
for app in info xcheck train plan generate bench op; do
  echo "clmoe-$app" >> "$tmp/cmds"
done
for app in bench op; do
  subs=$("$apps/clmoe-$app" --help | sed -n -e '/^Benchmarks:/,/^$/p' -e '/^Commands:/,/^$/p' |
         sed -n 's/^  \([a-z][a-z0-9]*\)  .*/\1/p')
  [ -n "$subs" ] || fail "clmoe-$app --help lists no sub-command"
  for s in $subs; do echo "clmoe-$app $s" >> "$tmp/cmds"; done
done
# run "clmoe-bench gemm" ARGS...: the app of a command with its sub-command
run() { run_cmd=$1; shift; set -- $run_cmd "$@"; run_app=$1; shift; "$apps/$run_app" "$@"; }

# ---- 1. --version -------------------------------------------------------------------------
keys="commit configure compiler opencl-headers opencl-loader mpi clblast hwloc"
if [ -f "$src/.tarball-commit" ]; then want_commit=$(sed -n 1p "$src/.tarball-commit")
elif [ "$(cd "$src" && git rev-parse --show-toplevel 2> /dev/null)" = "$(cd "$src" && pwd -P)" ]; then
  want_commit=$(git -C "$src" describe --always --dirty)
else want_commit=unknown; fi
first=
while read -r c; do
  if ! run "$c" --version > "$tmp/v" 2> "$tmp/err"; then fail "$c --version: exit $?"; continue; fi
  if ! head -n 1 "$tmp/v" | grep -qx "$c [0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*"; then
    fail "$c --version: first line '$(head -n 1 "$tmp/v")' is not '$c VERSION'"; continue; fi
  tail -n +2 "$tmp/v" | sed 's/:.*//' | tr '\n' ' ' | sed 's/ $//' > "$tmp/k"
  if [ "$(cat "$tmp/k")" != "$keys" ]; then fail "$c --version: keys '$(cat "$tmp/k")', expected '$keys'"; continue; fi
  tail -n +2 "$tmp/v" > "$tmp/facts.$$"
  if [ -z "$first" ]; then first=$c; cp "$tmp/facts.$$" "$tmp/facts"
  elif ! cmp -s "$tmp/facts" "$tmp/facts.$$"; then fail "$c --version differs from $first's"; continue; fi
  pass "$c --version"
done < "$tmp/cmds"
if [ -f "$tmp/facts" ]; then
  got=$(sed -n 's/^commit: //p' "$tmp/facts")
  if [ "$got" = "$want_commit" ]; then pass "commit: $got"; else fail "commit: '$got', expected '$want_commit'"; fi
  if [ "${CLMOE_HAVE_MPI:-0}" = 1 ]; then
    grep -q '^mpi: built with .*; runs with [^ ]' "$tmp/facts" && pass "mpi: built with and runs with" ||
      fail "mpi line of an MPI build: $(grep '^mpi:' "$tmp/facts")"
  else
    grep -qx 'mpi: none (built without MPI)' "$tmp/facts" && pass "mpi: none" ||
      fail "mpi line of a build without MPI: $(grep '^mpi:' "$tmp/facts")"
  fi
  grep -q '^hwloc: built with .* (API [0-9.]*); runs with API [0-9][0-9.]*$' "$tmp/facts" && pass "hwloc versions" ||
    fail "hwloc line: $(grep '^hwloc:' "$tmp/facts")"
  # the JSON reports of clmoe-info and clmoe-xcheck carry the same facts ("build")
  [ -n "$no_device" ] || for c in "clmoe-info --no-probe" "clmoe-xcheck --op pointwise.add"; do
    if run "$c" --json "$tmp/b.json" > /dev/null 2>&1 && "$jcheck" --get configure "$tmp/b.json" > "$tmp/got" &&
       [ "$(cat "$tmp/got")" = "$(sed -n 's/^configure: //p' "$tmp/facts")" ] &&
       [ "$("$jcheck" --get commit "$tmp/b.json")" = "$want_commit" ]; then pass "$c --json: the build's facts"
    else fail "$c --json: no build facts equal to --version's"; grep -A3 '"build"' "$tmp/b.json" | head -5; fi
  done
fi

# ---- 2. man pages -----------------------------------------------------------------------------
# Rendered with groff (what man uses), else man -l; wide lines and no hyphenation so that
# every option stays whole; minus signs and hyphens read as '-'.
render() {
  if command -v groff > /dev/null 2>&1; then groff -man -Tutf8 -P-cbou -rHY=0 -rLL=250n -ww "$1"
  elif command -v man > /dev/null 2>&1; then MANWIDTH=250 MANPAGER=cat PAGER=cat man -l "$1"
  else return 3; fi
}
man_checked=no
if [ ! -f "$mandir/pages.stamp" ]; then
  if [ "${CI:-}" = true ]; then fail "no man pages were built, and CI installs help2man (.ci/run)"
  else echo "NOT CHECKED: the man pages: none were built (help2man was not found; Debian: help2man)"; fi
elif ! command -v groff > /dev/null 2>&1 && ! command -v man > /dev/null 2>&1; then
  fail "neither groff nor man is here to render the man pages (Debian: groff-base or man-db)"
else
  man_checked=yes
  while read -r c; do
    page="$mandir/$(echo "$c" | tr ' ' -).1"
    if [ ! -f "$page" ]; then fail "$c has no man page ($page)"; continue; fi
    if ! render "$page" > "$tmp/page" 2> "$tmp/err" || [ -s "$tmp/err" ] || [ ! -s "$tmp/page" ]; then
      fail "$(basename "$page") does not render cleanly"; head -5 "$tmp/err" | sed 's/^/    /'; continue; fi
    sed 's/\xe2\x88\x92/-/g; s/\xe2\x80\x90/-/g' "$tmp/page" > "$tmp/page.txt"
    grep -q "^NAME" "$tmp/page.txt" && grep -q "$(echo "$c" | tr ' ' -) - " "$tmp/page.txt" ||
      { fail "$(basename "$page"): no NAME line for $c"; continue; }
    missing=
    for opt in $(run "$c" --help | grep -o -- '--[a-zA-Z][a-zA-Z0-9-]*' | sort -u); do
      grep -q -- "$opt\([^a-zA-Z0-9-]\|$\)" "$tmp/page.txt" || missing="$missing $opt"
    done
    if [ -n "$missing" ]; then fail "$(basename "$page") lacks options of $c --help:$missing"
    else pass "$(basename "$page") renders and names the $(run "$c" --help | grep -o -- '--[a-zA-Z][a-zA-Z0-9-]*' | sort -u | wc -l) long options of $c --help"; fi
  done < "$tmp/cmds"
fi

# ---- 3. --json - ----------------------------------------------------------------------------
if [ -n "$no_device" ]; then
  echo "NOT CHECKED: --json - and UTF-8 in JSON: no OpenCL device"
else # (to the "fi" before the validator's checks)
# A tiny checkpoint for clmoe-generate (3 steps, seconds).
i=0; : > "$tmp/cycle.txt"
while [ $i -lt 100 ]; do echo "0123456789 grüße 日本" >> "$tmp/cycle.txt"; i=$((i + 1)); done
if ! "$apps/clmoe-train" --preset tiny --steps 3 --batch 2 --seq-len 32 --data "$tmp/cycle.txt" --out "$tmp/run" \
     --quiet --sample 0 > "$tmp/train.log" 2>&1; then
  fail "clmoe-train made no tiny checkpoint"; cat "$tmp/train.log"; exit 1
fi
ckpt="$tmp/run/checkpoint.safetensors"
printf 'Grüße, 日本語 ✓ 😀 ok' > "$tmp/utf8 prompt ✓.txt"
# the smallest run of each command that writes JSON: "command|arguments|text it prints"
cat > "$tmp/json_runs" <<EOF
clmoe-info|--no-probe|
clmoe-xcheck|--op pointwise.add|
clmoe-train|--preset tiny --count-params|
clmoe-plan|--preset tiny --gpus 2 --gpu-mem 80G|
clmoe-generate|--ckpt $ckpt --prompt ab --prompt-file $tmp/utf8?prompt?✓.txt -n 4 --seed 3|^--- \[2\] |
clmoe-bench gemm|--sizes 64 --backends naive --reps 1|m x n x k
clmoe-bench kda|--T 64 --H 1 --D 16 --dtype f32 --no-backward --no-tile --reps 1 --recurrent-max 0|tokens/s
clmoe-bench mla|--shapes 1:64 --Dn 16 --Dr 16 --Dv 16 --dtype f32 --no-backward --no-tiles --no-decode --reps 1|kernel ms
clmoe-bench moe|--preset tiny --tokens 64 --no-backward --reps 1 --gemm grouped|tokens/s
clmoe-bench sample|--vocab 300 --batch 2 --reps 1|kernel us
clmoe-bench gemv|--shapes 70x40 --tokens 1,3 --reps 1|gemv us
EOF
while read -r c; do
  run "$c" --help | grep -q -- '--json' || continue
  grep -q "^$c|" "$tmp/json_runs" && pass "$c takes --json: checked below" ||
    fail "$c takes --json (its --help says so) but this test has no run of it"
done < "$tmp/cmds"
while IFS='|' read -r c args text; do
  # (the file name has blanks: matched by ? above, left unquoted on purpose)
  if ! run "$c" $args --json - > "$tmp/out.json" 2> "$tmp/err"; then
    fail "$c $args --json -: exit $?"; tail -5 "$tmp/err" | sed 's/^/    /'; continue; fi
  if ! "$jcheck" "$tmp/out.json" 2> "$tmp/why"; then
    fail "$c --json -: stdout is not one JSON document: $(cat "$tmp/why")"
    head -c 600 "$tmp/out.json" | sed 's/^/    /'; echo; continue; fi
  if [ -n "$text" ] && ! grep -q -- "$text" "$tmp/err"; then
    fail "$c --json -: its text ('$text') is not on stderr"; continue; fi
  pass "$c --json -: one JSON document on stdout${text:+, the text on stderr}"
done < "$tmp/json_runs"

# UTF-8 kept byte for byte: the prompt's text and its file's name come back as they went in.
if ! "$apps/clmoe-generate" --ckpt "$ckpt" --prompt-file "$tmp/utf8 prompt ✓.txt" -n 2 --quiet --json "$tmp/gen.json" \
     > /dev/null 2> "$tmp/err"; then
  fail "clmoe-generate on a UTF-8 prompt: $(tail -3 "$tmp/err")"
else
  if "$jcheck" --get prompt_text "$tmp/gen.json" > "$tmp/back" && cmp -s "$tmp/back" "$tmp/utf8 prompt ✓.txt"; then
    pass "a UTF-8 prompt comes back byte-identical"
  else fail "the UTF-8 prompt changed in the JSON: $(grep prompt_text "$tmp/gen.json")"; fi
  if "$jcheck" --get prompt "$tmp/gen.json" > "$tmp/back" && [ "$(cat "$tmp/back")" = "$tmp/utf8 prompt ✓.txt" ]; then
    pass "a UTF-8 file name comes back byte-identical"
  else fail "the UTF-8 file name changed in the JSON: $(cat "$tmp/back")"; fi
  # (decoded, \u00fc would read as ü as well: the raw text must hold no escape at all)
  if grep -o '"prompt_text": "[^"]*"' "$tmp/gen.json" | grep -q '\\'; then
    fail "valid UTF-8 of the prompt was escaped: $(grep -o '"prompt_text": "[^"]*"' "$tmp/gen.json")"
  fi
fi
# Bytes that are not UTF-8 (a lone 0xff, a lead byte without its continuation, a lone
# continuation, an encoded surrogate, an overlong '/') are escaped one by one as \u00XX,
# the valid text around them kept, and the document stays valid.
printf 'a\377b\303(\200\355\240\200\300\257é' > "$tmp/bad.txt"
if "$apps/clmoe-generate" --ckpt "$ckpt" --prompt-file "$tmp/bad.txt" -n 2 --quiet --json "$tmp/bad.json" > /dev/null 2> "$tmp/err"; then
  want='"prompt_text": "a\u00ffb\u00c3(\u0080\u00ed\u00a0\u0080\u00c0\u00afé"'
  if ! "$jcheck" "$tmp/bad.json" 2> "$tmp/why"; then fail "JSON of a prompt with invalid UTF-8: $(cat "$tmp/why")"
  elif grep -qF -- "$want" "$tmp/bad.json"; then pass "bytes that are not UTF-8 are escaped, the rest kept"
  else fail "invalid UTF-8 escaped as $(grep -o '"prompt_text": "[^"]*"' "$tmp/bad.json"), expected $want"; fi
else
  fail "clmoe-generate on a prompt with invalid UTF-8: $(tail -3 "$tmp/err")"
fi

fi

# The validator itself refuses what it must (else every check above could pass on anything).
for doc in '{"a": 1} {}' '[1,]' '"\x"' '{"a" 1}' '[01]' '"\ud800"' '' "$(printf '"a\377"')" "$(printf '"a\001"')"; do
  printf '%s' "$doc" > "$tmp/bad.json"
  if "$jcheck" "$tmp/bad.json" 2> /dev/null; then fail "json_check accepts '$doc'"; fi
done
printf '{"a": [true, false, null, -0.5e+3, "\\u00e9\\ud83d\\ude00"], "b": {}}' > "$tmp/ok.json"
"$jcheck" "$tmp/ok.json" && pass "json_check accepts valid JSON and refuses 9 invalid documents" ||
  fail "json_check refuses valid JSON"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
if [ "$man_checked" = no ] || [ -n "$no_device" ]; then
  echo "SKIP: the checks above passed; NOT CHECKED:${no_device:+ --json (no OpenCL device)}$(
    [ "$man_checked" = no ] && printf ' the man pages (no help2man at build time)')"
  exit 77
fi
echo "all command-line checks passed"
