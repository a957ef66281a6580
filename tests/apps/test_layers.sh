#!/bin/sh
# The library's layers point down. From the symbols each object of libclmoe defines and
# uses (nm on the convenience archive), with each object's subsystem from the folder of
# its source (lib/<subsystem>/<name>.c):
#   1. across subsystems, calls go only down the order of docs/architecture.md:
#        runtime < tile < gemm < ops < {dist, io} < tokenize < {kda, mla, moe} < model < {generate, hf}
#      (dist and io sit beside the lower floors: dist needs the runtime only, io too;
#      tokenize just above them, below every model part; moe's expert-parallel layer calls
#      dist; hf, the Hugging Face checkpoint reader, sits beside generate);
#   2. within the library, no two files call each other, directly or through others
#      (no cycle in the file graph).
# Run by make check (CLMOE_SRCDIR, CLMOE_LIB_DIR from it). Needs nm (binutils).
set -u
. "$(dirname "$0")/apps_common.sh"
src=${CLMOE_SRCDIR:?CLMOE_SRCDIR: the source tree}
archive=${CLMOE_LIB_DIR:-../lib/.libs}/libclmoe_impl.a
command -v nm > /dev/null 2>&1 || { fail "nm is needed (Debian: binutils)"; exit 1; }
[ -f "$archive" ] || { fail "no $archive (build the library first)"; exit 1; }

# file -> subsystem, from the source tree
for c in "$src"/lib/*/*.c; do
  echo "$(basename "$c" .c) $(basename "$(dirname "$c")")"
done > "$tmp/sub"
# "object symbol D|U" for every defined (text, data) and undefined symbol
nm -A "$archive" 2> /dev/null | sed -n 's/^[^:]*:libclmoe_impl_la-\([A-Za-z0-9_]*\)\.o:/\1 /p' |
  awk 'NF == 4 && $3 ~ /^[TDBR]$/ {print $1, $4, "D"} NF == 3 && $2 == "U" {print $1, $3, "U"}' > "$tmp/syms"
[ -s "$tmp/syms" ] || { fail "no symbols read from $archive"; exit 1; }

# edges "from_file to_file" (a use of a symbol another object defines)
awk 'NR == FNR {sub_of[$1] = $2; next}
     $3 == "D" {def[$2] = $1; next}
     {use[NR] = $1 " " $2}
     END {for (i in use) {split(use[i], u, " "); t = def[u[2]];
            if (t != "" && t != u[1] && (u[1] in sub_of) && (t in sub_of)) print u[1], t}}' \
  "$tmp/sub" "$tmp/syms" | sort -u > "$tmp/edges"
[ -s "$tmp/edges" ] || { fail "no calls between files found (nm output not understood)"; exit 1; }
pass "$(wc -l < "$tmp/edges") calls between files read"

# 1. subsystem order
awk 'BEGIN {n = split("runtime tile gemm ops dist io tokenize kda mla moe model generate", s, " ");
            for (i = 1; i <= n; i++) floor[s[i]] = i;
            floor["dist"] = floor["io"] = 4.5; floor["tokenize"] = 5.5;
            floor["kda"] = floor["mla"] = floor["moe"] = 6; floor["hf"] = floor["generate"]}
     NR == FNR {sub_of[$1] = $2; next}
     {a = sub_of[$1]; b = sub_of[$2];
      if (a != b && !(floor[b] < floor[a])) print a " (" $1 ") -> " b " (" $2 ")"}' \
  "$tmp/sub" "$tmp/edges" | sort -u > "$tmp/up"
if [ -s "$tmp/up" ]; then
  fail "calls that go up or sideways between subsystems:"; sed 's/^/    /' "$tmp/up"
else
  pass "every call between subsystems goes down"
fi

# 2. no cycle among files: peel files that call no remaining file until none is left
awk '{out[$1] = out[$1] " " $2; node[$1]; node[$2]}
     END {left = 0; for (v in node) left++;
          do {removed = 0;
              for (v in node) {n = split(out[v], w, " "); live = 0;
                for (i = 1; i <= n; i++) if (w[i] in node) live = 1;
                if (!live) {delete node[v]; removed++}}
              left -= removed} while (removed > 0);
          for (v in node) print v}' "$tmp/edges" | sort > "$tmp/cycle"
if [ -s "$tmp/cycle" ]; then
  fail "files on a call cycle (or calling into one): $(tr '\n' ' ' < "$tmp/cycle")"
else
  pass "no call cycle among the library's files"
fi

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "the library's layers point down"
