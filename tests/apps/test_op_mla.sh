#!/bin/sh
# Tests of clmoe-op mla: the tiled attention against the materialised kernel through files
# (fp32, bf16, packed sequences from the file and from the flag), the backward's outputs,
# the metadata, and clear errors with exit 1 (bad data) or 2 (bad command line).
# Run by make check with CLMOE_APPS_DIR set to the built apps.
set -u
. "$(dirname "$0")/apps_common.sh"
op="$apps/clmoe-op"

skip_without_device

# ---- command line ---------------------------------------------------------------------
expect "op --help lists mla" 0 "mla " -- "$op" --help
expect "mla --help" 0 "make-example FILE --shape B,T,H,Dn,Dr,Dv" -- "$op" mla --help
expect "mla bad flag" 2 "unknown argument '--frobnicate'" -- "$op" mla --frobnicate
expect "mla without --in" 2 "--in FILE and --out FILE are required" -- "$op" mla --out "$tmp/x.st"
expect "mla bad --scale" 2 "--scale: '-1' is not a positive finite number" -- "$op" mla --in a --out b --scale -1
expect "mla decreasing --cu-seqlens" 2 "--cu-seqlens: '0,5,3' must start at 0" -- "$op" mla --in a --out b --cu-seqlens 0,5,3
expect "mla --naive --backward" 2 "--naive is forward only" -- "$op" mla --in a --out b --naive --backward
expect "make-example short --shape" 2 "--shape: '1,2,3,4,5' is not B,T,H,Dn,Dr,Dv" -- "$op" mla --make-example "$tmp/e.st" --shape 1,2,3,4,5
expect "make-example bad --dtype" 2 "--dtype: 'f16' is not f32 or bf16" -- "$op" mla --make-example "$tmp/e.st" --shape 1,2,1,4,2,4 --dtype f16
expect "mla --seed without --make-example" 2 "go with --make-example" -- "$op" mla --in a --out b --seed 3

# ---- tiled against materialised ----------------------------------------------------------
ex="$tmp/ex.st"
expect "make-example" 0 "wrote" -- "$op" mla --make-example "$ex" --shape 2,37,3,16,8,16 --seed 3 --with-backward
expect "mla tiled" 0 "tiled forward" -- "$op" mla --in "$ex" --out "$tmp/tiled.st"
expect "mla naive" 0 "naive forward" -- "$op" mla --in "$ex" --out "$tmp/naive.st" --naive
expect "tiled = naive (f32)" 0 "ok: 0 problem" -- "$op" compare "$tmp/tiled.st" "$tmp/naive.st" --tol 1e-5
expect "mla --scale" 0 "" -- "$op" mla --in "$ex" --out "$tmp/sc.st" --scale 0.5
expect "the scale changes the result" 1 "o .*FAIL" -- "$op" compare "$tmp/sc.st" "$tmp/tiled.st"
expect "mla --naive --scale" 0 "" -- "$op" mla --in "$ex" --out "$tmp/scn.st" --scale 0.5 --naive
expect "tiled = naive (--scale)" 0 "ok: 0 problem" -- "$op" compare "$tmp/sc.st" "$tmp/scn.st" --tol 1e-5
for key in clmoe_version device '"scale":"0.5"' '"forward":"naive"' '"storage":"f32"'; do
  if tr -c '[:print:]' '\n' < "$tmp/scn.st" | grep -q -- "$key"; then pass "metadata has $key"; else fail "metadata lacks $key"; fi
done

# bf16 storage; the report's head sizes.
exb="$tmp/exb.st"
expect "make-example bf16" 0 "bf16" -- "$op" mla --make-example "$exb" --shape 1,40,2,128,64,128 --seed 5 --dtype bf16
expect "mla tiled bf16" 0 "" -- "$op" mla --in "$exb" --out "$tmp/tb.st"
expect "mla naive bf16" 0 "" -- "$op" mla --in "$exb" --out "$tmp/nb.st" --naive
expect "tiled = naive (bf16, Dn 128 + Dr 64)" 0 "ok: 0 problem" -- "$op" compare "$tmp/tb.st" "$tmp/nb.st" --tol 1e-5

# Packed sequences (one empty): cu_seqlens from the file, and the same from the flag.
exc="$tmp/exc.st"
expect "make-example cu_seqlens" 0 "N = 3 sequences" -- "$op" mla --make-example "$exc" --shape 1,29,2,16,8,16 --cu-seqlens 0,5,5,29
expect "mla tiled cu_seqlens" 0 "" -- "$op" mla --in "$exc" --out "$tmp/tc.st"
expect "mla naive cu_seqlens" 0 "" -- "$op" mla --in "$exc" --out "$tmp/nc.st" --naive
expect "tiled = naive (cu_seqlens)" 0 "ok: 0 problem" -- "$op" compare "$tmp/tc.st" "$tmp/nc.st" --tol 1e-5
expect "cu_seqlens in the file and the flag" 2 "already has a cu_seqlens tensor" -- "$op" mla --in "$exc" --out "$tmp/x.st" --cu-seqlens 0,29
exf="$tmp/exf.st"
expect "make-example for --cu-seqlens" 0 "" -- "$op" mla --make-example "$exf" --shape 1,29,2,16,8,16
expect "mla --cu-seqlens" 0 "" -- "$op" mla --in "$exf" --out "$tmp/tf.st" --cu-seqlens 0,5,5,29
expect "same as cu_seqlens from the file" 0 "ok: 0 problem" -- "$op" compare "$tmp/tf.st" "$tmp/tc.st" --tol 0
expect "mla one sequence" 0 "" -- "$op" mla --in "$exf" --out "$tmp/tw.st"
expect "packing changes the result" 1 "o .*FAIL" -- "$op" compare "$tmp/tw.st" "$tmp/tf.st"
expect "--cu-seqlens ending before T" 2 "last offset 20 differs from T = 29" -- "$op" mla --in "$exf" --out "$tmp/x.st" --cu-seqlens 0,20
expect "--cu-seqlens with B > 1" 1 "batch size B must be 1" -- "$op" mla --in "$ex" --out "$tmp/x.st" --cu-seqlens 0,37

# ---- backward -------------------------------------------------------------------------------
expect "mla --backward" 0 "+ backward" -- "$op" mla --in "$ex" --out "$tmp/bwd.st" --backward
expect "compare a file with itself" 0 "ok: 0 problem" -- "$op" compare "$tmp/bwd.st" "$tmp/bwd.st" --tol 0
for name in o lse dq dk_nope dk_rope dv; do
  if grep -q "^$name " "$tmp/out"; then pass "backward wrote $name"; else fail "backward lacks $name"; fi
done
expect "backward keeps o" 1 "MISSING in $tmp/tiled.st" -- "$op" compare "$tmp/bwd.st" "$tmp/tiled.st" --tol 0
if grep -q "^o .* ok$" "$tmp/out" && grep -q "^lse .* ok$" "$tmp/out"; then pass "backward run has the same o and lse"
else fail "backward run changed o"; fi
expect "--backward without do" 1 "needs the tensor 'do'" -- "$op" mla --in "$exb" --out "$tmp/x.st" --backward

# ---- bad files ----------------------------------------------------------------------------
expect "missing input file" 1 "nonesuch.st: cannot open" -- "$op" mla --in "$tmp/nonesuch.st" --out "$tmp/x.st"
"$op" kda --make-example "$tmp/kda.st" --shape 1,4,1,4,4 > /dev/null 2>&1
expect "kda inputs given to mla" 1 "unknown tensor 'k' (mla takes q, k_nope, k_rope, v" -- "$op" mla --in "$tmp/kda.st" --out "$tmp/x.st"
size=$(wc -c < "$ex")
dd if="$ex" of="$tmp/trunc.st" bs=1 count=$((size - 10)) 2> /dev/null
expect "truncated data" 1 "trunc.st: tensor '.*': data_offsets .* extend past the end of the data region" -- "$op" mla --in "$tmp/trunc.st" --out "$tmp/x.st"
expect "unwritable output" 1 "cannot create" -- "$op" mla --in "$ex" --out "$tmp/no/such/dir/x.st"
if [ ! -e "$tmp/x.st" ]; then pass "no output file after failures"; else fail "an output file was left after a failure"; fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
