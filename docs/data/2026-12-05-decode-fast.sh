#!/bin/sh
# Batch-1 decode of the `gpu` preset, before and after the decode kernels' rework (the GEMV and
# the MoE decode kernels reading 8-element vectors with 16 partials per dot product, the
# router's top-k with one barrier a round, AttnRes sums batched, MLA decode splits from 32
# tokens), in one device call: the NVIDIA checks of the changed kernels, then for each build
# a warm-up, greedy decode at batch 1, 4 and 16 (bf16 weights, random), and the per-kernel
# profile at batch 1.
#   run with carry [".device"]: .device/prefix = HEAD, .device/before = the commit before
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
D=.device; NB=$D/prefix/bin; BB=$D/before/bin
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
$NB/clmoe-generate --version > $R/version.txt 2>&1
$BB/clmoe-generate --version > $R/version-before.txt 2>&1

timeout 150 $NB/clmoe-xcheck --device nvidia --op gemv --op moe.decode --op mla.decode --op attn_res \
  ${XCHECK_MORE:---op moe.forward --op moe.infer --op gen.sample} --json $R/xcheck.json > $R/xcheck.txt 2>&1
say "xcheck rc=$? $(tail -1 $R/xcheck.txt)"
pack

gen() { # tag binary batch n [args...] (sh has no locals: names of their own)
  gt=$1 gb=$2 b=$3 n=$4; shift 4
  args=; for i in $(seq $b); do args="$args --prompt The_quick_brown_fox_jumps_over_$i"; done
  # shellcheck disable=SC2086
  timeout 90 $gb --random-weights gpu --device nvidia $args -n $n --greedy --quiet --weights bf16 \
    --json $R/$gt-b$b.json "$@" > /dev/null 2> $R/$gt-b$b.err
  say "$gt b$b rc=$? $(grep -o '"decode_tokens_per_s": [0-9.]*' $R/$gt-b$b.json)"
}
for tag in before after; do
  bin=$NB/clmoe-generate; [ $tag = before ] && bin=$BB/clmoe-generate
  for b in 1 4 16; do gen $tag-warm $bin $b 16; done # every batch's kernels built before the timed runs
  gen $tag $bin 1 256
  gen $tag $bin 4 256
  gen $tag $bin 16 256
  timeout 60 $bin --random-weights gpu --device nvidia --prompt The_quick_brown_fox -n 40 --greedy --weights bf16 \
    --profile --json $R/$tag-profile-b1.json > /dev/null 2> $R/$tag-profile-b1.err
  say "$tag profile b1 rc=$?"
  args=; for i in $(seq 16); do args="$args --prompt The_quick_brown_fox_jumps_over_$i"; done
  # shellcheck disable=SC2086
  timeout 60 $bin --random-weights gpu --device nvidia $args -n 40 --greedy --weights bf16 \
    --profile --json $R/$tag-profile-b16.json > /dev/null 2> $R/$tag-profile-b16.err
  say "$tag profile b16 rc=$?"
  pack
done
if [ "${SAMPLE:-1}" = 1 ]; then
  timeout 90 $NB/clmoe-bench sample --device nvidia --vocab 163840 --batch 1,16 > $R/sample.txt 2>&1
  say "sample bench rc=$?"
fi
pack
cat $R/gpu.txt $R/summary.txt; grep -E "FAIL|passed" $R/xcheck.txt | head
for p in before-profile-b1 after-profile-b1 before-profile-b16 after-profile-b16; do
  tag=$p; echo "== $p"; grep -A8 "^profile" $R/$p.err | head -9
  python3 -c "import json; [print('  %-24s %8.4f ms %5.1f launches' % (k['kernel'], k['ms_per_step'], k['launches_per_step']))
    for k in json.load(open('$R/$p.json'))['profile']['kernels'][:10]]"
done
cat $R/sample.txt 2>/dev/null | tail -8
