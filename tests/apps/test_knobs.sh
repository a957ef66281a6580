#!/bin/sh
# The knob table against the documentation and clmoe-info: every knob of scope "user" is a
# row of README's table of environment variables, every CLMOE_ variable that table names is
# a knob, and so is every CLMOE_ variable docs/user-guide.md names, except the build's and
# the test scripts' own (CHECK_ENV, make check-oclgrind, clmoe-xcheck's CLMOE_COMMIT);
# clmoe-info --knobs (and --json) lists every knob, and a bad value is refused by name.
# Run by make check (CLMOE_SRCDIR and CLMOE_APPS_DIR come from it).
set -u
. "$(dirname "$0")/apps_common.sh"
src=${CLMOE_SRCDIR:?CLMOE_SRCDIR: the source tree}
skip_without_device

# the table, as clmoe-info --knobs --json gives it: "name scope" per line
if ! "$info" --knobs --no-probe --json - > "$tmp/knobs.json" 2> "$tmp/err"; then
  fail "clmoe-info --knobs --json"; sed 's/^/    /' "$tmp/err"; echo "$fails failure(s)"; exit 1
fi
sed -n 's/^ *{"name": "\(CLMOE_[A-Z0-9_]*\)".*"scope": "\([a-z]*\)".*/\1 \2/p' "$tmp/knobs.json" | sort > "$tmp/table"
if [ "$(wc -l < "$tmp/table")" -ge 20 ]; then pass "clmoe-info --knobs --json lists $(wc -l < "$tmp/table") knobs"
else fail "clmoe-info --knobs --json lists $(wc -l < "$tmp/table") knobs"; fi
cut -d' ' -f1 "$tmp/table" > "$tmp/names"
awk '$2 == "user" {print $1}' "$tmp/table" > "$tmp/user"

# README's table: the lines from "## Environment variables" to the next heading
awk '/^## Environment variables/ {on = 1; next} /^## / {on = 0} on && /^\|/' "$src/README.md" |
  grep -o 'CLMOE_[A-Z0-9_]*' | sort -u > "$tmp/readme"
missing=$(comm -23 "$tmp/user" "$tmp/readme")
if [ -z "$missing" ]; then pass "every user knob is in README's table"
else fail "user knobs missing from README's table: $missing"; fi
extra=$(comm -13 "$tmp/names" "$tmp/readme")
if [ -z "$extra" ]; then pass "every variable of README's table is a knob"
else fail "README's table names variables that are no knobs: $extra"; fi

# the user guide: every CLMOE_ variable is a knob, but for those of the build and scripts
grep -o 'CLMOE_[A-Z0-9_]*' "$src/docs/user-guide.md" | sort -u |
  grep -v -x -e CLMOE_COMMIT -e CLMOE_VENDOR_PLAIN -e CLMOE_REQUIRE_VENDORS -e 'CLMOE_OCLGRIND_[A-Z_]*' \
    > "$tmp/guide"
extra=$(comm -13 "$tmp/names" "$tmp/guide")
if [ -z "$extra" ]; then pass "every variable docs/user-guide.md names is a knob"
else fail "docs/user-guide.md names variables that are no knobs: $extra"; fi

# the text listing and a bad value
expect "clmoe-info --knobs lists CLMOE_KDA_TCB_PAIR from the environment" 0 "CLMOE_KDA_TCB_PAIR *2 *auto *environment" -- \
  env CLMOE_KDA_TCB_PAIR=2 "$info" --knobs --no-probe
# "auto" says what it comes to here: no matrix unit on a CPU device (off), no MPI launcher (off)
if "$info" --no-probe 2> /dev/null | grep -q "^Chosen.*CPU"; then
  expect "CLMOE_FASTPATH auto resolves on a CPU device" 0 "CLMOE_FASTPATH *auto (off)" -- "$info" --knobs --no-probe
fi
expect "CLMOE_MPI auto resolves without a launcher" 0 "CLMOE_MPI *auto (off)" -- "$info" --knobs --no-probe
expect "CLMOE_FASTPATH=1 is not resolved again" 0 "CLMOE_FASTPATH *1 " -- env CLMOE_FASTPATH=1 "$info" --knobs --no-probe
expect "a bad value names the variable and the accepted values" 1 "CLMOE_FASTPATH=sometimes.*auto, 0, 1" -- \
  env CLMOE_FASTPATH=sometimes "$info" --knobs --no-probe

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all knob checks passed"
