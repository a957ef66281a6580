#!/bin/sh
# Tests of clmoe-op: the chunked KDA against the recurrent one through files (fp32, bf16,
# packed sequences from the file and from the flag), the backward's outputs, the metadata,
# and clear errors with exit 1 (bad data) or 2 (bad command line).
# Run by make check with CLMOE_APPS_DIR set to the built apps.
set -u
. "$(dirname "$0")/apps_common.sh"
op="$apps/clmoe-op"

# le64 N: N as 8 little-endian bytes.
le64() {
  v=$1 i=0
  while [ $i -lt 8 ]; do
    printf "\\$(printf %03o $((v % 256)))"
    v=$((v / 256)) i=$((i + 1))
  done
}

# mkst FILE NAME:DTYPE:D0,D1,... ...: a safetensors file of zeros, built here byte by byte
# (independently of the library's writer).
mkst() {
  out=$1
  shift
  json="{" off=0 sep=""
  for e in "$@"; do
    name=${e%%:*} rest=${e#*:}
    dt=${rest%%:*} shape=${rest#*:}
    case $dt in F32 | I32 | U32) es=4 ;; BF16 | F16 | I16 | U16) es=2 ;; I64 | U64 | F64) es=8 ;; *) es=1 ;; esac
    n=1
    for d in $(echo "$shape" | tr ',' ' '); do n=$((n * d)); done
    end=$((off + n * es))
    json="$json$sep\"$name\":{\"dtype\":\"$dt\",\"shape\":[$shape],\"data_offsets\":[$off,$end]}"
    sep="," off=$end
  done
  json="$json}"
  { le64 ${#json}; printf '%s' "$json"; dd if=/dev/zero bs=1 count="$off" 2> /dev/null; } > "$out"
}

skip_without_device

# ---- command line ---------------------------------------------------------------------
expect "op --help" 0 "Commands:" -- "$op" --help
expect "op --version" 0 "clmoe-op [0-9]" -- "$op" --version
expect "op without a command" 2 "Usage: clmoe-op" -- "$op"
expect "op unknown command" 2 "unknown command 'frob'" -- "$op" frob
expect "kda --help" 0 "make-example FILE" -- "$op" kda --help
expect "compare --help" 0 "max relative error" -- "$op" compare --help
expect "kda bad flag" 2 "unknown argument '--frobnicate'" -- "$op" kda --frobnicate
expect "kda without --in" 2 "--in FILE and --out FILE are required" -- "$op" kda --out "$tmp/x.st"
expect "kda --in without value" 2 "--in needs a value" -- "$op" kda --in
expect "kda bad --scale" 2 "--scale: 'abc' is not a finite number" -- "$op" kda --in a --out b --scale abc
expect "kda bad --lower-bound" 2 "--lower-bound: 1 is outside \[-5, 0)" -- "$op" kda --in a --out b --lower-bound 1
expect "kda decreasing --cu-seqlens" 2 "--cu-seqlens: '0,5,3' must start at 0" -- "$op" kda --in a --out b --cu-seqlens 0,5,3
expect "kda bad --cu-seqlens" 2 "--cu-seqlens: '0,x'" -- "$op" kda --in a --out b --cu-seqlens 0,x
expect "make-example short --shape" 2 "--shape: '1,2,3' is not B,T,H,K,V" -- "$op" kda --make-example "$tmp/e.st" --shape 1,2,3
expect "make-example huge --shape" 2 "over 2^28 elements" -- "$op" kda --make-example "$tmp/e.st" --shape 65536,65536,4,4,4
expect "make-example bad --dtype" 2 "--dtype: 'f16' is not f32 or bf16" -- "$op" kda --make-example "$tmp/e.st" --shape 1,2,1,4,4 --dtype f16
expect "kda --seed without --make-example" 2 "go with --make-example" -- "$op" kda --in a --out b --seed 3
expect "compare one file" 2 "compare needs two files" -- "$op" compare "$tmp/a.st"
expect "compare bad --tol" 2 "--tol: 'x'" -- "$op" compare a b --tol x

# ---- chunked against recurrent -------------------------------------------------------
ex="$tmp/ex.st"
expect "make-example" 0 "wrote" -- "$op" kda --make-example "$ex" --shape 2,37,3,16,32 --seed 3 --with-state --with-backward
expect "kda chunked" 0 "chunked forward" -- "$op" kda --in "$ex" --out "$tmp/chunk.st"
expect "kda recurrent" 0 "recurrent forward" -- "$op" kda --in "$ex" --out "$tmp/rec.st" --recurrent
expect "chunked = recurrent (f32)" 0 "ok: 0 problem" -- "$op" compare "$tmp/chunk.st" "$tmp/rec.st" --tol 1e-4
expect "kda with options" 0 "" -- "$op" kda --in "$ex" --out "$tmp/opt.st" --scale 0.5 --lower-bound -2
expect "options change the result" 1 "o .*FAIL" -- "$op" compare "$tmp/opt.st" "$tmp/chunk.st"
expect "kda --recurrent with options" 0 "" -- "$op" kda --in "$ex" --out "$tmp/optr.st" --scale 0.5 --lower-bound -2 --recurrent
expect "chunked = recurrent (options)" 0 "ok: 0 problem" -- "$op" compare "$tmp/opt.st" "$tmp/optr.st"
for key in clmoe_version device '"scale":"0.5"' '"lower_bound":"-2"' '"forward":"recurrent"'; do
  if tr -c '[:print:]' '\n' < "$tmp/optr.st" | grep -q -- "$key"; then pass "metadata has $key"; else fail "metadata lacks $key"; fi
done

# bf16 storage of q, k, v, g, beta.
exb="$tmp/exb.st"
expect "make-example bf16" 0 "bf16" -- "$op" kda --make-example "$exb" --shape 1,40,2,32,16 --seed 5 --dtype bf16
expect "kda chunked bf16" 0 "" -- "$op" kda --in "$exb" --out "$tmp/cb.st"
expect "kda recurrent bf16" 0 "" -- "$op" kda --in "$exb" --out "$tmp/rb.st" --recurrent
expect "chunked = recurrent (bf16)" 0 "ok: 0 problem" -- "$op" compare "$tmp/cb.st" "$tmp/rb.st"

# Packed sequences (one empty): cu_seqlens (I64) from the file, and the same from the flag.
exc="$tmp/exc.st"
expect "make-example cu_seqlens" 0 "N = 3 sequences" -- "$op" kda --make-example "$exc" --shape 1,29,2,16,16 --cu-seqlens 0,5,5,29 --with-state
expect "kda chunked cu_seqlens" 0 "" -- "$op" kda --in "$exc" --out "$tmp/cc.st"
expect "kda recurrent cu_seqlens" 0 "" -- "$op" kda --in "$exc" --out "$tmp/rc.st" --recurrent
expect "chunked = recurrent (cu_seqlens)" 0 "ok: 0 problem" -- "$op" compare "$tmp/cc.st" "$tmp/rc.st"
expect "cu_seqlens in the file and the flag" 2 "already has a cu_seqlens tensor" -- "$op" kda --in "$exc" --out "$tmp/x.st" --cu-seqlens 0,29
exf="$tmp/exf.st"
expect "make-example for --cu-seqlens" 0 "" -- "$op" kda --make-example "$exf" --shape 1,29,2,16,16 --with-state
expect "--cu-seqlens against initial_state" 1 "tensor 'initial_state' is F32 \[1, 2, 16, 16\], expected \[3, 2, 16, 16\] (NHKV)" -- "$op" kda --in "$exf" --out "$tmp/x.st" --cu-seqlens 0,5,5,29
expect "make-example without state" 0 "" -- "$op" kda --make-example "$exf" --shape 1,29,2,16,16
expect "kda --cu-seqlens" 0 "" -- "$op" kda --in "$exf" --out "$tmp/cf.st" --cu-seqlens 0,5,5,29
expect "kda --recurrent --cu-seqlens" 0 "" -- "$op" kda --in "$exf" --out "$tmp/rf.st" --cu-seqlens 0,5,5,29 --recurrent
expect "chunked = recurrent (--cu-seqlens)" 0 "ok: 0 problem" -- "$op" compare "$tmp/cf.st" "$tmp/rf.st"
expect "--cu-seqlens ending before T" 2 "last offset 20 differs from T = 29" -- "$op" kda --in "$exf" --out "$tmp/x.st" --cu-seqlens 0,20
expect "--cu-seqlens with B > 1" 1 "batch size B must be 1" -- "$op" kda --in "$ex" --out "$tmp/x.st" --cu-seqlens 0,37

# ---- backward ---------------------------------------------------------------------------
expect "kda --backward" 0 "+ backward" -- "$op" kda --in "$ex" --out "$tmp/bwd.st" --backward
expect "compare a file with itself" 0 "ok: 0 problem" -- "$op" compare "$tmp/bwd.st" "$tmp/bwd.st" --tol 0
for name in o final_state dq dk dv dg dbeta dA_log ddt_bias dinitial_state; do
  if grep -q "^$name " "$tmp/out"; then pass "backward wrote $name"; else fail "backward lacks $name"; fi
done
expect "backward forward = forward" 1 "MISSING in $tmp/chunk.st" -- "$op" compare "$tmp/bwd.st" "$tmp/chunk.st" --tol 0
if grep -q "^o .* ok$" "$tmp/out" && grep -q "^final_state .* ok$" "$tmp/out"; then pass "backward run has the same o"
else fail "backward run changed o"; fi
expect "--backward without do" 1 "needs the tensor 'do'" -- "$op" kda --in "$exb" --out "$tmp/x.st" --backward

# ---- bad files ------------------------------------------------------------------------
base="q:F32:1,2,1,4 k:F32:1,2,1,4 v:F32:1,2,1,4 g:F32:1,2,1,4 beta:F32:1,2,1 A_log:F32:1 dt_bias:F32:1,4"
mkst "$tmp/zeros.st" $base
expect "hand-built zeros run" 0 "chunked forward" -- "$op" kda --in "$tmp/zeros.st" --out "$tmp/z.st"
mkst "$tmp/bad.st" q:F32:1,2,1,4 k:F32:1,2,1,4 v:F32:1,2,1,4 g:F32:1,2,1,4 A_log:F32:1 dt_bias:F32:1,4
expect "missing tensor" 1 "bad.st: the required tensor 'beta' is missing" -- "$op" kda --in "$tmp/bad.st" --out "$tmp/x.st"
mkst "$tmp/bad.st" $base extra:F32:2
expect "unknown tensor" 1 "bad.st: unknown tensor 'extra'" -- "$op" kda --in "$tmp/bad.st" --out "$tmp/x.st"
mkst "$tmp/bad.st" q:F32:1,2,1,4 k:F32:1,2,1,8 v:F32:1,2,1,4 g:F32:1,2,1,4 beta:F32:1,2,1 A_log:F32:1 dt_bias:F32:1,4
expect "wrong shape" 1 "tensor 'k' is F32 \[1, 2, 1, 8\], expected \[1, 2, 1, 4\]" -- "$op" kda --in "$tmp/bad.st" --out "$tmp/x.st"
mkst "$tmp/bad.st" q:F32:1,2,1,4 k:F32:1,2,1,4 v:F32:1,2,1,4 g:F32:1,2,1,4 beta:F32:1,2,1 A_log:F32:2 dt_bias:F32:1,4
expect "wrong head count" 1 "tensor 'A_log' is F32 \[2\], expected \[1\] (H)" -- "$op" kda --in "$tmp/bad.st" --out "$tmp/x.st"
mkst "$tmp/bad.st" q:F32:2,1,4 k:F32:1,2,1,4 v:F32:1,2,1,4 g:F32:1,2,1,4 beta:F32:1,2,1 A_log:F32:1 dt_bias:F32:1,4
expect "q not 4-D" 1 "tensor 'q' is F32 \[2, 1, 4\], expected \[\*, \*, \*, \*\]" -- "$op" kda --in "$tmp/bad.st" --out "$tmp/x.st"
mkst "$tmp/bad.st" q:F32:1,2,1,4 k:BF16:1,2,1,4 v:F32:1,2,1,4 g:F32:1,2,1,4 beta:F32:1,2,1 A_log:F32:1 dt_bias:F32:1,4
expect "mixed dtypes" 1 "tensor 'k' is BF16 \[1, 2, 1, 4\]; q, k, v, g and beta must all be F32 or all BF16" -- "$op" kda --in "$tmp/bad.st" --out "$tmp/x.st"
mkst "$tmp/bad.st" q:I32:1,2,1,4 k:I32:1,2,1,4 v:I32:1,2,1,4 g:I32:1,2,1,4 beta:I32:1,2,1 A_log:F32:1 dt_bias:F32:1,4
expect "integer q" 1 "tensor 'q' is I32 \[1, 2, 1, 4\]; q, k, v, g and beta must all be F32 or all BF16" -- "$op" kda --in "$tmp/bad.st" --out "$tmp/x.st"
mkst "$tmp/bad.st" $base cu_seqlens:F32:2
expect "float cu_seqlens" 1 "tensor 'cu_seqlens' must be I32 or I64" -- "$op" kda --in "$tmp/bad.st" --out "$tmp/x.st"
mkst "$tmp/bad.st" $base cu_seqlens:I32:2
expect "cu_seqlens of zeros" 1 "cu_seqlens must start at 0, never decrease and end at T = 2" -- "$op" kda --in "$tmp/bad.st" --out "$tmp/x.st"
mkst "$tmp/bad.st" q:F32:1,2,1,256 k:F32:1,2,1,256 v:F32:1,2,1,4 g:F32:1,2,1,256 beta:F32:1,2,1 A_log:F32:1 dt_bias:F32:1,256
expect "K too large" 1 "K = 256" -- "$op" kda --in "$tmp/bad.st" --out "$tmp/x.st"
size=$(wc -c < "$ex")
dd if="$ex" of="$tmp/trunc.st" bs=1 count=$((size - 10)) 2> /dev/null
expect "truncated data" 1 "trunc.st: tensor '.*': data_offsets .* extend past the end of the data region" -- "$op" kda --in "$tmp/trunc.st" --out "$tmp/x.st"
dd if="$ex" of="$tmp/trunc.st" bs=1 count=100 2> /dev/null
expect "truncated header" 1 "trunc.st: header length [0-9]* is larger than the rest of the file" -- "$op" kda --in "$tmp/trunc.st" --out "$tmp/x.st"
printf 'not a safetensors file at all' > "$tmp/text.st"
expect "not a safetensors file" 1 "text.st: header length" -- "$op" kda --in "$tmp/text.st" --out "$tmp/x.st"
expect "missing input file" 1 "nonesuch.st: cannot open" -- "$op" kda --in "$tmp/nonesuch.st" --out "$tmp/x.st"
expect "unwritable output" 1 "cannot create" -- "$op" kda --in "$tmp/zeros.st" --out "$tmp/no/such/dir/x.st"
if [ ! -e "$tmp/x.st" ]; then pass "no output file after failures"; else fail "an output file was left after a failure"; fi
expect "compare different results" 1 "FAIL" -- "$op" compare "$tmp/chunk.st" "$tmp/cb.st"
expect "compare a truncated file" 1 "trunc.st" -- "$op" compare "$tmp/chunk.st" "$tmp/trunc.st"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
