#!/bin/sh
# The device sampler with several work-groups per row (gen_sample_split.cl) against one per row
# (CLMOE_SAMPLE_GROUPS=1, the kernel before it), one binary, in one device call: the NVIDIA
# checks of both forms, clmoe-bench sample at Kimi-Linear's vocabulary (the automatic count,
# then a sweep of counts per row), and a sampled (temperature 0.8, top-p 0.95) decode of the
# `gpu` preset at batch 1 and 16, timed (256 tokens) and profiled (--profile draws on the
# device, so gen_sample* rows are the sampler), in each form.
#   run with carry [".device"]: .device/prefix = this branch's build
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
NB=.device/prefix/bin
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
$NB/clmoe-generate --version > $R/version.txt 2>&1

timeout 120 $NB/clmoe-xcheck --device nvidia --op gen.sample --json $R/xcheck.json > $R/xcheck.txt 2>&1
say "xcheck rc=$? $(tail -1 $R/xcheck.txt)"
timeout 120 $NB/clmoe-bench sample --device nvidia --vocab 163840 --batch 1,16 --json $R/sample.json \
  > $R/sample.txt 2>&1
say "sample bench rc=$?"
timeout 150 $NB/clmoe-bench sample --device nvidia --vocab 163840,32000 --batch 1,4,16 --groups 1,0,16,33,66,132,264 \
  --reps 10 --no-host --json $R/sample-groups.json > $R/sample-groups.txt 2>&1
say "sample groups sweep rc=$?"
pack

gen() { # tag groups batch n [args...] (sh has no locals: names of their own)
  gt=$1 gg=$2 b=$3 n=$4; shift 4
  args=; for i in $(seq $b); do args="$args --prompt The_quick_brown_fox_jumps_over_$i"; done
  # shellcheck disable=SC2086
  CLMOE_SAMPLE_GROUPS=$gg timeout 90 $NB/clmoe-generate --random-weights gpu --device nvidia $args -n $n \
    --temperature 0.8 --top-p 0.95 --weights bf16 --json $R/$gt-b$b.json "$@" > $R/$gt-b$b.txt 2> $R/$gt-b$b.err
  say "$gt b$b rc=$? $(grep -o '"decode_tokens_per_s": [0-9.]*' $R/$gt-b$b.json)"
}
for b in 1 16; do gen warm 0 $b 16; gen warm 1 $b 16; done # every kernel built before the timed runs
for tag in one:1 split:0; do
  name=${tag%%:*} groups=${tag#*:}
  gen $name $groups 1 256
  gen $name $groups 16 256
  gen $name-profile $groups 1 40 --profile
  gen $name-profile $groups 16 40 --profile
  pack
done
for b in 1 16; do # the same text either way (the same draws)
  if cmp -s $R/one-b$b.txt $R/split-b$b.txt; then say "b$b same text"; else say "b$b TEXT DIFFERS"; fi
done
pack
cat $R/gpu.txt $R/summary.txt; grep -E "FAIL|passed" $R/xcheck.txt | head
cat $R/sample.txt; cat $R/sample-groups.txt
for p in one-profile-b1 split-profile-b1 one-profile-b16 split-profile-b16; do
  echo "== $p"; grep "^profile" $R/$p.err
  python3 -c "import json; [print('  %-24s %8.4f ms %5.1f launches' % (k['kernel'], k['ms_per_step'], k['launches_per_step']))
    for i, k in enumerate(json.load(open('$R/$p.json'))['profile']['kernels']) if i < 8 or 'sample' in k['kernel']]"
done
