#!/bin/sh
# Tests of clmoe-xcheck's reports: --json --outputs, --compare of two files (the same device
# twice, a corrupted copy, files written by hand with known differences), --matrix, the
# in-process device pairs, and clear errors for bad files. Runs on the default device
# (CLMOE_DEVICE, else 0:0); works with one device or several. Also --shard and --small.
# Run by make check with CLMOE_APPS_DIR set to the built apps.
set -u
. "$(dirname "$0")/apps_common.sh"
xcheck="$apps/clmoe-xcheck"
matrix_sh="$(dirname "$0")/../../scripts/conformance-matrix.sh"
skip_without_device
dev=${CLMOE_DEVICE:-0:0}
ops="--op pointwise.add --op rmsnorm.forward.small --op softmax.forward.small"

# ---- the same device twice: outputs identical --------------------------------------------
expect "xcheck --json --outputs (run 1)" 0 "3 passed, 0 failed" -- "$xcheck" --device "$dev" $ops --json "$tmp/a.json" --outputs
expect "xcheck --json --outputs (run 2)" 0 "3 passed, 0 failed" -- "$xcheck" --device "$dev" $ops --json "$tmp/b.json" --outputs
for key in '"date": "20[0-9-]*T[0-9:]*Z"' '"clmoe_version": "[0-9]' '"platform_version": "' \
    '"driver_version": "' '"outputs": \[$' '"name": "out", "n": [0-9]*, "got": "[A-Za-z0-9+/]' '"den": "'; do
  if grep -q "$key" "$tmp/a.json"; then pass "a.json has $key"; else fail "a.json lacks $key"; fi
done
expect "CLMOE_COMMIT is recorded" 0 "" -- env CLMOE_COMMIT=abc1234 "$xcheck" --device "$dev" --op pointwise.add --json "$tmp/commit.json"
if grep -q '"commit": "abc1234"' "$tmp/commit.json"; then pass "commit in JSON"; else fail "commit not in JSON"; fi
expect "compare the same device twice" 0 "All compared outputs are identical (difference 0)" -- "$xcheck" --compare "$tmp/a.json" "$tmp/b.json"
if grep -q "3 device pairs: 3 identical, 0 within" "$tmp/out"; then pass "compare counts 3 identical pairs"
else fail "compare does not count 3 identical pairs"; sed 's/^/    /' "$tmp/out"; fi

# ---- one output value corrupted: base64 character 4 of the first "got" holds the sign and
# the top exponent bits of value 0; '/' there makes it -2^121 or beyond (or NaN) ----------
line=$(grep -n '"got": "' "$tmp/a.json" | head -1 | cut -d: -f1)
c=$(sed -n "${line}s/.*\"got\": \"....\\(.\\).*/\\1/p" "$tmp/a.json")
if [ "$c" = "/" ]; then r=A; else r=/; fi
sed "${line}s|\\(\"got\": \"....\\).|\\1$r|" "$tmp/a.json" > "$tmp/bad.json"
if cmp -s "$tmp/a.json" "$tmp/bad.json"; then fail "the corruption changed nothing"; fi
expect "compare finds the corrupted value" 1 "DIFFER *out\\[0\\]:" -- "$xcheck" --compare "$tmp/a.json" "$tmp/bad.json"
if grep -q "2 identical, 0 within 1 x the tolerance, 1 beyond it" "$tmp/out"; then pass "compare counts 1 pair beyond"
else fail "compare does not count 1 pair beyond"; sed 's/^/    /' "$tmp/out"; fi

# ---- files written by hand: known values (1.0f = AACAPw==, 2.0f = AAAAQA==, NaN = AADAfw==)
hand() { # hand FILE GOT_OF_t.one: four checks on one device
  cat > "$1" <<EOF
{"clmoe_version": "hand", "date": "2000-01-01T00:00:00Z", "seed": 1,
 "devices": [{"device_index": "0:0", "device": "Hand Device", "platform": "Hand Platform", "platform_version": "HP 1.0", "driver_version": "hd-7"}],
 "results": [
  {"check": "t.one", "device_index": "0:0", "max_error": 0, "tolerance": 0.5, "passed": true,
   "outputs": [{"name": "y", "n": 1, "got": "$2", "den": "AACAPw=="}]},
  {"check": "t.nan", "device_index": "0:0", "max_error": 0, "tolerance": 0.5, "passed": true,
   "outputs": [{"name": "y", "n": 1, "got": "AADAfw==", "den": "AADAfw=="}]},
  {"check": "t.nanfinite", "device_index": "0:0", "max_error": null, "tolerance": 0.5, "passed": false,
   "outputs": [{"name": "y", "n": 1, "got": "AADAfw==", "den": "AACAPw=="}]},
  {"check": "t.norun", "device_index": "0:0", "max_error": null, "tolerance": 0.5, "passed": false,
   "ran": false, "detail": "the op failed", "outputs": []}]}
EOF
}
hand "$tmp/h1.json" AACAPw==
hand "$tmp/h2.json" AAAAQA==
# |1 - 2| / 1 = 1 > 0.5; NaN = NaN where the reference is NaN; NaN vs NaN where it is 1: Inf
expect "hand: 1 vs 2 over den 1 differs by 1" 1 "t.one .* 1.000e+00 .* DIFFER *y\\[0\\]: 1 vs 2" -- "$xcheck" --compare "$tmp/h1.json" "$tmp/h2.json"
if grep -q "^t.nan .* 0.000e+00 .* same" "$tmp/out"; then pass "hand: NaN = NaN where the reference is NaN"
else fail "hand: NaN where the reference is NaN"; sed 's/^/    /' "$tmp/out"; fi
# (the max diff column: "inf" right before the tolerance)
if grep -q "^t.nanfinite .* inf *5.0e-01  FAIL *y\\[0\\]: nan vs nan" "$tmp/out"; then pass "hand: NaN vs NaN where the reference is finite is infinite"
else fail "hand: NaN vs NaN where the reference is finite"; sed 's/^/    /' "$tmp/out"; fi
if grep -q "^t.norun .* FAIL *did not run in" "$tmp/out"; then pass "hand: a check that did not run is not compared"
else fail "hand: a check that did not run"; sed 's/^/    /' "$tmp/out"; fi
if grep -q "4 device pairs: 1 identical, 0 within 1 x the tolerance, 2 beyond it, 1 not compared" "$tmp/out"; then pass "hand: 1 identical, 2 beyond, 1 not compared"
else fail "hand: counts"; sed 's/^/    /' "$tmp/out"; fi
expect "hand: --pair-factor 2 lets 1 <= 2 x 0.5 pass" 1 "t.one .* 1.000e+00 .* ok " -- "$xcheck" --compare "$tmp/h1.json" "$tmp/h2.json" --pair-factor 2
expect "hand: a failed check fails the comparison" 1 "failed checks: 2 in A, 2 in B" -- "$xcheck" --compare "$tmp/h1.json" "$tmp/h1.json"

# ---- without outputs: max errors and pass/fail only ---------------------------------------
expect "xcheck --json without outputs" 0 "" -- "$xcheck" --device "$dev" $ops --json "$tmp/c.json"
if grep -q '"outputs": false' "$tmp/c.json" && ! grep -q '"got"' "$tmp/c.json"; then pass "c.json has no outputs"
else fail "c.json has outputs"; fi
expect "compare without outputs says so" 0 "has no outputs (written without --outputs): comparing max errors and pass/fail only" -- "$xcheck" --compare "$tmp/a.json" "$tmp/c.json"

# ---- the matrix: a row per check, a column per device -------------------------------------
expect "matrix" 0 "^| \\*\\*passed\\*\\* | | 3 of 3 | 2 of 4 |$" -- "$xcheck" --matrix "$tmp/a.json" "$tmp/h1.json"
cp "$tmp/out" "$tmp/matrix.md"
for row in "^|---|---|---|---|$" "^| pointwise.add | 1.0e-05 | pass [0-9.e+-]* | - |$" \
    "^| t.one | 5.0e-01 | - | pass 0.0e+00 |$" "^| t.nanfinite | 5.0e-01 | - | \\*\\*FAIL\\*\\* inf |$" \
    "^| t.norun | 5.0e-01 | - | \\*\\*FAIL\\*\\* (did not run) |$" \
    "^| 2 | Hand Device | Hand Platform | HP 1.0 | hd-7 | .*h1.json 0:0 |$" "2000-01-01T00:00:00Z, clmoe hand"; do
  if grep -q -- "$row" "$tmp/matrix.md"; then pass "matrix has $row"; else fail "matrix lacks $row"; cat "$tmp/matrix.md"; fi
done
rows=$(grep -c "^| [a-z]" "$tmp/matrix.md")
if [ "$rows" -eq 9 ]; then pass "matrix: 7 check rows + 2 header rows"; else fail "matrix has $rows rows, expected 9"; fi
# shards of one run (the same device, sizes and seed in two files) share a column
sed 's/"t\.\([a-z]*\)"/"u.\1"/' "$tmp/h1.json" > "$tmp/h3.json"
expect "matrix of two shards" 0 "^| 1 | Hand Device | .*h1.json 0:0, .*h3.json 0:0 |$" -- "$xcheck" --matrix "$tmp/h1.json" "$tmp/h3.json"
if grep -q "^| 2 |" "$tmp/out"; then fail "matrix of two shards has a second column"; else pass "two shards, one column"; fi
if grep -q "^| u.one | 5.0e-01 | pass 0.0e+00 |$" "$tmp/out" && grep -q "^| \*\*passed\*\* | | 4 of 8 |$" "$tmp/out"; then
  pass "the shared column holds both files' checks"
else fail "the shared column"; sed 's/^/    /' "$tmp/out"; fi
expect "conformance-matrix.sh" 0 "" -- env CLMOE_XCHECK="$xcheck" sh "$matrix_sh" -o "$tmp/m2.md" "$tmp/a.json" "$tmp/h1.json"
if cmp -s "$tmp/matrix.md" "$tmp/m2.md"; then pass "conformance-matrix.sh writes the matrix"; else fail "conformance-matrix.sh output differs"; fi

# ---- --shard: the shards of a selection partition it, in order ----------------------------
"$xcheck" --list > "$tmp/all.txt" 2>&1
: > "$tmp/shards.txt"
for i in 0 1 2; do "$xcheck" --list --shard "$i/3" >> "$tmp/shards.txt" 2>&1; done
if [ "$(sort "$tmp/all.txt")" = "$(sort "$tmp/shards.txt")" ] && [ "$(wc -l < "$tmp/all.txt")" -gt 100 ]; then
  pass "--shard I/3 for I = 0, 1, 2 lists every check once"
else
  fail "--shard does not partition the checks"
fi
second=$(sed -n 2p "$tmp/all.txt")
if [ "$("$xcheck" --list --shard 1/3 | head -1)" = "$second" ]; then pass "--shard 1/3 starts at the second check"
else fail "--shard 1/3 does not start at the second check"; fi
expect "bad --shard" 2 "--shard: '3' is not I/N" -- "$xcheck" --shard 3
expect "--shard past N" 2 "outside \[0, 1\]" -- "$xcheck" --shard 2/2

# ---- --small: recorded, and a small run is not compared output by output with a full one --
ksel="--op kda.forward.t100 --op sort.u64"
expect "xcheck --small" 0 "3 passed, 0 failed" -- "$xcheck" --device "$dev" --small $ksel --json "$tmp/s.json" --outputs
expect "xcheck full size" 0 "3 passed, 0 failed" -- "$xcheck" --device "$dev" $ksel --json "$tmp/f.json" --outputs
if grep -q '"small": true' "$tmp/s.json" && grep -q '"small": false' "$tmp/f.json"; then pass "the sizes are in the JSON"
else fail "the sizes are not in the JSON"; fi
n_small=$(grep -A3 '"check": "kda.forward.t100"' "$tmp/s.json" | grep -o '"name": "o", "n": [0-9]*' | head -1)
n_full=$(grep -A3 '"check": "kda.forward.t100"' "$tmp/f.json" | grep -o '"name": "o", "n": [0-9]*' | head -1)
if [ -n "$n_small" ] && [ -n "$n_full" ] && [ "$n_small" != "$n_full" ]; then pass "--small runs smaller ($n_small, $n_full)"
else fail "--small did not change the shapes ($n_small, $n_full)"; fi
expect "compare small with full" 0 "at their smallest sizes (--small) and .* at full size: comparing max errors" -- \
  "$xcheck" --compare "$tmp/s.json" "$tmp/f.json"
if grep -q '"check": "sort.u64", .*"passed": true' "$tmp/s.json"; then pass "sort.u64 at its smallest sizes passes"
else fail "sort.u64 at its smallest sizes"; fi

# ---- --claim: processes sharing a directory run each check once -------------------------
mkdir "$tmp/claims"
expect "xcheck --claim (first)" 0 "3 passed, 0 failed" -- "$xcheck" --device "$dev" $ops --claim "$tmp/claims"
expect "xcheck --claim (all taken)" 0 "0 passed, 0 failed" -- "$xcheck" --device "$dev" $ops --claim "$tmp/claims"
expect "xcheck --claim (no such directory)" 1 "cannot make $tmp/none/" -- "$xcheck" --device "$dev" $ops --claim "$tmp/none"

# ---- --kernel-times: after each check its kernels, longest first, with launch counts --------
expect "xcheck --kernel-times" 0 "rmsnorm.forward.small: [0-9.]* s of device time in [1-9][0-9]* kernels" -- \
  "$xcheck" --device "$dev" --op rmsnorm.forward.small --kernel-times
if grep -q "^ *[0-9.]* s *1 x rmsnorm_fwd$" "$tmp/out"; then pass "--kernel-times lists rmsnorm_fwd, launched once"
else fail "--kernel-times does not list rmsnorm_fwd"; sed 's/^/    /' "$tmp/out"; fi

# ---- bad files and command lines ----------------------------------------------------------
printf 'hello\n' > "$tmp/notjson.json"
printf '{"results": [{"check": "x", "passed": true}]}\n' > "$tmp/fields.json"
printf '{"seed": 1}\n' > "$tmp/noresults.json"
sed 's/"got": "AACAPw=="/"got": "AA*APw=="/' "$tmp/h1.json" > "$tmp/b64.json"
printf '{"results": [1, 2\n' > "$tmp/cut.json"
expect "compare: missing file" 1 "cannot read $tmp/missing.json" -- "$xcheck" --compare "$tmp/a.json" "$tmp/missing.json"
expect "compare: not JSON" 1 "notjson.json: not JSON: line 1" -- "$xcheck" --compare "$tmp/notjson.json" "$tmp/a.json"
expect "compare: cut short" 1 "cut.json: not JSON: line 2" -- "$xcheck" --compare "$tmp/a.json" "$tmp/cut.json"
expect "compare: wrong fields" 1 "fields.json: results\\[0\\] (line 1): \"device_index\" is missing" -- "$xcheck" --compare "$tmp/a.json" "$tmp/fields.json"
expect "compare: no results" 1 "noresults.json: not a clmoe-xcheck report" -- "$xcheck" --compare "$tmp/noresults.json" "$tmp/a.json"
expect "compare: bad base64" 1 "b64.json: results\\[0\\] outputs\\[0\\] \"y\" (line 5): \"got\" or \"den\" is not base64" -- "$xcheck" --compare "$tmp/h1.json" "$tmp/b64.json"
expect "matrix: missing file" 1 "cannot read $tmp/missing.json" -- "$xcheck" --matrix "$tmp/a.json" "$tmp/missing.json"
expect "matrix: not JSON" 1 "notjson.json: not JSON" -- "$xcheck" --matrix "$tmp/notjson.json"
expect "compare needs two files" 2 "--compare needs two JSON files" -- "$xcheck" --compare "$tmp/a.json"
expect "matrix needs a file" 2 "--matrix needs at least one JSON file" -- "$xcheck" --matrix
expect "--outputs needs --json" 2 "give --json too" -- "$xcheck" --outputs --op pointwise.add
expect "bad --pair-factor" 2 "--pair-factor: 'x' is not a number" -- "$xcheck" --pair-factor x
expect "conformance-matrix.sh without files" 2 "Usage" -- env CLMOE_XCHECK="$xcheck" sh "$matrix_sh"

# ---- two devices in one run: the pair table (two PoCL devices when PoCL is there) ----------
pocl=$("$info" --no-probe 2>/dev/null | awk '/\[[0-9]+:[0-9]+\]/ { match($0, /\[[0-9]+:/); p = substr($0, RSTART + 1, RLENGTH - 2) }
  /platform +Portable Computing Language/ { print p; exit }')
if [ -n "$pocl" ]; then
  expect "pairs of two PoCL devices" 0 "4 device pairs: 4 identical" -- env POCL_DEVICES="pthread pthread" \
    "$xcheck" --device "$pocl:0" --device "$pocl:1" --op pointwise.add --op sort.u64 --op tile.interface \
    --json "$tmp/p.json"
  if grep -q "^pointwise.add *$pocl:0 *$pocl:1 *0.000e+00 .* same" "$tmp/out"; then pass "pair row"
  else fail "no pair row"; sed 's/^/    /' "$tmp/out"; fi
  # integer outputs that are not captured: the same when both equal the reference exactly
  if grep -q "^sort.u64 .* same *both equal the reference exactly" "$tmp/out"; then pass "sort.u64 pair by exactness"
  else fail "sort.u64 pair"; sed 's/^/    /' "$tmp/out"; fi
  # a check with its own measure is compared through its captured outputs
  if grep -q "^tile.interface .* same *a.b\[0\]" "$tmp/out"; then pass "tile.interface pair by its outputs"
  else fail "tile.interface pair"; sed 's/^/    /' "$tmp/out"; fi
  if grep -q '"pairs": \[' "$tmp/p.json" && grep -q '"max_difference": 0, "tolerance": 1e-05, "within": true' "$tmp/p.json"; then
    pass "pairs in JSON"
  else
    fail "pairs not in JSON"
  fi
else
  echo "SKIP: no PoCL: the in-process pair table is not tested"
fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
