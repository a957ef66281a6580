# Device calls, one per argument, each fitting one `run` of at most 10 minutes. `core` and
# `torch` ran on 2026-12-05 on an H100 (docs/benchmarks.md, "bf16 training against
# PyTorch"); `k48` needs an H200 and has not run (no H200 came):
#
#   sh docs/data/2026-12-06-h200-plan.sh train   about 9 min: the NVIDIA checks of the kernels
#       added since the last device call, then the `gpu` preset at T 8192, B 2, bf16, 10
#       steps: 0d1a723 (before this session's merges) against HEAD with the new MLA backward
#       off and on (CLMOE_MLA_TC_BWD=0 / 1): tokens/s, wall minus device time per step, the
#       host waits, the `convert` and `mla` families' time, peak memory, the losses
#   sh docs/data/2026-12-06-h200-plan.sh decode  about 6 min: the `gpu` preset's decode with
#       random weights at batch 1, 4, 16: 0d1a723's step-by-step loop against HEAD's greedy
#       runs fed on the device (clmoe_gen_decode_greedy), bf16 and fp32 weights, then a
#       per-step profile by kernel family at batch 1 (the table that did not come back on
#       2026-12-05)
#   sh docs/data/2026-12-06-h200-plan.sh torch   about 9 min: PyTorch + fla (torch_ref's
#       train_bench.py; Triton compiles for 3-4 min) and HEAD's clmoe-train in the same call,
#       the issue's ratio (tokens/s, peak memory)
#   sh docs/data/2026-12-06-h200-plan.sh core    about 7 min: the short form of train + decode (no
#       0d1a723 runs): the MLA backward's checks, training with it off and on, decode b1/b16
#   sh docs/data/2026-12-06-h200-plan.sh k48     about 8 min, needs_h200 (98 GB of bf16
#       weights): Kimi-Linear-48B-A3B's shapes with random weights: peak device memory, decode
#       tokens/s at batch 1, 8, 64, prefill at 4K and 16K
#
# Set up here first (DEVICE.md's recipe; binaries built here run there):
#   ../shared/tools/device-prep                     (.device/debs, .device/env.sh)
#   HEAD:    ./configure --prefix=$PWD/.device/prefix --disable-shared && make -j2 && make install
#   0d1a723: the same from a worktree of that commit, into .device/before, then keep only
#            .device/before/bin/{clmoe-train,clmoe-generate,clmoe-xcheck}
#   text:    head -c 1100000 of the docs and library sources into .device/text.txt (the
#            1.06 MB byte text of the bf16 sections of docs/benchmarks.md)
#   torch:   pip download --no-deps -d .device/whl flash-linear-attention fla-core einops;
#            cp -r ../shared/peers/torch_ref .device/
# and run with carry [".device"] (64 MiB at most: strip the binaries), writing under $OUT.
set -u
. .device/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc CLMOE_FASTPATH=1
D=.device; NB=$D/prefix/bin; BB=$D/before/bin
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf r.tgz r); }
say() { echo "$(date +%T) $*" | tee -a $R/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $R/gpu.txt 2>&1
$NB/clmoe-train --version > $R/version.txt 2>&1

# tokens/s and wall - device per profiled step of a clmoe-train --profile log
steprate() {
  awk -v f="$(basename "$1")" '/^profile \(/ { for (i = 1; i <= NF; i++) { if ($i == "tokens") tok = $(i - 1);
    if ($i == "in") w = $(i + 1); if ($i == "time") k = $(i + 1) }
    st = tok / 16384; printf "%s: %.0f tok/s, wall %.1f ms, device %.1f ms, wall - device %.1f ms per step\n",
    f, tok / w, 1e3 * w / st, 1e3 * k / st, 1e3 * (w - k) / st }' "$1"
  awk '$1 == "convert" || $1 == "mla" || $1 == "moe" || $1 == "gemm" {print "  " $0}' "$1" | head -8
  grep -E "host waits|peak in use" "$1"
}

train() { # tag binary [env...]
  tag=$1 bin=$2; shift 2
  env "$@" timeout 150 $bin --preset gpu --data $D/text.txt --steps 10 --seq-len 8192 --batch 2 --precision bf16 \
    --profile --sample 0 --eval-every 0 --checkpoint-every 0 --metrics $R/metrics-$tag.csv --out /tmp/r-$tag \
    --overwrite --device nvidia > $R/train-$tag.txt 2>&1
  say "train $tag rc=$?"
  pack
}

case ${1:-} in
train)
  timeout 150 $NB/clmoe-xcheck --device nvidia --op mla_tile --op moe.bf16 --op rmsnorm --op pointwise --op adamw \
    --op embedding --op xent --op gemv --op linear --json $R/xcheck.json > $R/xcheck.txt 2>&1
  say "xcheck rc=$? (CLMOE_MLA_TC_BWD unset: the new MLA backward's checks run the new kernels)"
  pack
  train before $BB/clmoe-train
  train after-bwd0 $NB/clmoe-train CLMOE_MLA_TC_BWD=0
  train after-bwd1 $NB/clmoe-train CLMOE_MLA_TC_BWD=1
  cat $R/gpu.txt $R/summary.txt; tail -8 $R/xcheck.txt
  for t in before after-bwd0 after-bwd1; do steprate $R/train-$t.txt; done
  for t in before after-bwd0 after-bwd1; do echo "$t: $(cut -d, -f2 $R/metrics-$t.csv | tr '\n' ' ')"; done
  ;;
decode)
  gen() { # tag binary batch [args...]
    tag=$1 bin=$2 b=$3; shift 3
    args=; for i in $(seq $b); do args="$args --prompt The_quick_brown_fox_$i"; done
    # shellcheck disable=SC2086
    timeout 100 $bin --random-weights gpu --device nvidia $args -n 128 --greedy --quiet --json $R/$tag-b$b.json "$@" \
      > /dev/null 2> $R/$tag-b$b.err
    say "$tag b$b rc=$? $(grep -o '"decode_tokens_per_s": [0-9.]*' $R/$tag-b$b.json)"
    pack
  }
  for b in 1 4 16; do
    gen before $BB/clmoe-generate $b
    gen after-bf16 $NB/clmoe-generate $b --weights bf16
    gen after-fp32 $NB/clmoe-generate $b --weights fp32
  done
  # step by step, profiled (per family), batch 1
  timeout 100 $NB/clmoe-generate --random-weights gpu --device nvidia --prompt The_quick_brown_fox -n 40 --greedy \
    --profile --json $R/profile-b1.json > /dev/null 2> $R/profile-b1.err
  say "profile b1 rc=$?"
  timeout 120 $NB/clmoe-xcheck --device nvidia --op gemv --op moe.decode --op mla.decode --json $R/xcheck-dec.json \
    > $R/xcheck-dec.txt 2>&1
  say "xcheck decode rc=$?"
  pack
  cat $R/gpu.txt $R/summary.txt; grep -A30 "^profile" $R/profile-b1.err | head -30; tail -4 $R/xcheck-dec.txt
  ;;
core)
  # the short form when device time is scarce: the new MLA backward's checks, HEAD's training
  # with it off and on, and HEAD's decode at batch 1 and 16 with the per-family profile
  timeout 120 $NB/clmoe-xcheck --device nvidia --op mla_tile --op moe.bf16 --op rmsnorm --op pointwise --op adamw \
    --op gemv --json $R/xcheck.json > $R/xcheck.txt 2>&1
  say "xcheck rc=$?"
  pack
  train after-bwd0 $NB/clmoe-train CLMOE_MLA_TC_BWD=0
  train after-bwd1 $NB/clmoe-train CLMOE_MLA_TC_BWD=1
  for b in 1 16; do
    args=; for i in $(seq $b); do args="$args --prompt The_quick_brown_fox_$i"; done
    # shellcheck disable=SC2086
    timeout 60 $NB/clmoe-generate --random-weights gpu --device nvidia $args -n 128 --greedy --quiet --weights bf16 \
      --json $R/after-bf16-b$b.json > /dev/null 2> $R/after-bf16-b$b.err
    say "decode b$b rc=$? $(grep -o '"decode_tokens_per_s": [0-9.]*' $R/after-bf16-b$b.json)"
  done
  timeout 60 $NB/clmoe-generate --random-weights gpu --device nvidia --prompt The_quick_brown_fox -n 40 --greedy \
    --weights bf16 --profile --json $R/profile-b1.json > /dev/null 2> $R/profile-b1.err
  say "profile b1 rc=$?"
  pack
  cat $R/gpu.txt $R/summary.txt; tail -4 $R/xcheck.txt
  for t in after-bwd0 after-bwd1; do steprate $R/train-$t.txt; done
  for t in after-bwd0 after-bwd1; do echo "$t: $(cut -d, -f2 $R/metrics-$t.csv | tr '\n' ' ')"; done
  grep -A12 "^profile" $R/profile-b1.err | head -14
  python3 -c "import json; [print('  %-28s %8.4f ms %5.1f launches' % (k['kernel'], k['ms_per_step'], k['launches_per_step']))
    for k in json.load(open('$R/profile-b1.json'))['profile']['kernels'][:24]]"
  ;;
torch)
  pip install --no-index --no-deps --target /tmp/site $D/whl/*.whl > $R/pip.txt 2>&1
  PYTHONPATH=/tmp/site timeout 420 python3 $D/torch_ref/train_bench.py --device cuda --preset gpu --dtype bf16 \
    --kda-impl fla --seq-len 8192 --batch 2 --steps 20 --lr 3e-4 --skip 3 --data $D/text.txt > $R/torch.txt 2>&1
  say "torch rc=$?"
  pack
  train after $NB/clmoe-train CLMOE_MLA_TC_BWD=${CLMOE_MLA_TC_BWD:-0}
  cat $R/gpu.txt $R/summary.txt; tail -5 $R/torch.txt; steprate $R/train-after.txt
  ;;
k48)
  # at most 560 s in all: one process per measurement, each making the 98 GB of random weights
  timeout 200 $NB/clmoe-generate --random-weights kimi-linear-48b --weights bf16 --device nvidia \
    --prefill-bench 4096,16384 --bench-steps 8 --json $R/k48-prefill.json > /dev/null 2> $R/k48-prefill.err
  say "k48 prefill rc=$?"
  pack
  for b in 8 1 64; do # b8 first: it builds the decode kernels b1 then finds cached
    args=; for i in $(seq $b); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
    # shellcheck disable=SC2086
    timeout 90 $NB/clmoe-generate --random-weights kimi-linear-48b --weights bf16 --device nvidia $args -n 48 \
      --greedy --quiet --json $R/k48-b$b.json > /dev/null 2> $R/k48-b$b.err
    say "k48 b$b rc=$? $(grep -o '"decode_tokens_per_s": [0-9.]*' $R/k48-b$b.json)"
    pack
  done
  timeout 80 $NB/clmoe-generate --random-weights kimi-linear-48b --weights bf16 --device nvidia \
    --prompt-ids 1,2,3,4,5,6,7,8 -n 24 --greedy --profile --json $R/k48-profile-b1.json > /dev/null 2> $R/k48-profile-b1.err
  say "k48 profile b1 rc=$?"
  pack
  cat $R/gpu.txt $R/summary.txt; tail -8 $R/k48-prefill.err; grep -h "memory\|weights" $R/k48-b1.err | head -4
  grep -A8 "^profile" $R/k48-profile-b1.err | head -10
  ;;
k48s)
  # the short form (at most 260 s): prefill of 4K with 8 decode steps after it (batch 1), then
  # batch-8 decode
  timeout 170 $NB/clmoe-generate --random-weights kimi-linear-48b --weights bf16 --device nvidia \
    --prefill-bench 4096 --bench-steps 8 --json $R/k48-prefill.json > /dev/null 2> $R/k48-prefill.err
  say "k48 prefill rc=$?"
  pack
  args=; for i in $(seq 8); do args="$args --prompt-ids 1,2,3,4,5,6,7,$i"; done
  # shellcheck disable=SC2086
  timeout 85 $NB/clmoe-generate --random-weights kimi-linear-48b --weights bf16 --device nvidia $args -n 32 \
    --greedy --quiet --json $R/k48-b8.json > /dev/null 2> $R/k48-b8.err
  say "k48 b8 rc=$? $(grep -o '"decode_tokens_per_s": [0-9.]*' $R/k48-b8.json)"
  pack
  cat $R/gpu.txt $R/summary.txt; tail -12 $R/k48-prefill.err; tail -4 $R/k48-b8.err
  ;;
*)
  echo "usage: sh docs/data/2026-12-06-h200-plan.sh train|core|decode|torch|k48|k48s" >&2
  exit 2
  ;;
esac
