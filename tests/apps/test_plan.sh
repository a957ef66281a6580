#!/bin/sh
# clmoe-plan against hand counts: the k3 and kimi-linear-48b totals equal clmoe-train
# --count-params, and k3's per-GPU numbers on 512 GPUs equal the formulas of --help worked
# out here from the model's sizes (MODEL.md section 6); impossible plans say so (exit 1),
# bad flags are named (exit 2). Needs no device.
set -u
. "$(dirname "$0")/apps_common.sh"
plan="$apps/clmoe-plan"
train="$apps/clmoe-train"

# jnum KEY FILE: the first JSON number of KEY.
jnum() { grep -o "\"$1\": [-0-9.e+]*" "$2" | head -n 1 | sed 's/.*: //'; }
# same NAME GOT WANT: equal to 1e-12 relative (the JSON prints whole numbers).
same() {
  if awk -v a="$2" -v b="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b;
                                       exit !(a != "" && d <= 1e-12 * m + 0.5) }'; then
    pass "$1 = $3"
  else
    fail "$1: got '$2', hand count $3"
  fi
}

# 1. Totals equal --count-params' exact numbers.
for p in k3 kimi-linear-48b; do
  "$train" --preset $p --count-params > "$tmp/count" 2>&1 || fail "count-params $p"
  total=$(sed -n 's/.*(\([0-9]*\) \/ \([0-9]*\)).*/\1/p' "$tmp/count")
  active=$(sed -n 's/.*(\([0-9]*\) \/ \([0-9]*\)).*/\2/p' "$tmp/count")
  "$plan" --preset $p --gpus 512 --gpu-mem 141G --json "$tmp/$p.json" > /dev/null
  same "$p total" "$(jnum params_total "$tmp/$p.json")" "$total"
  same "$p active" "$(jnum params_active "$tmp/$p.json")" "$active"
done
case $(jnum params_total "$tmp/k3.json") in
  27794*) pass "k3 is 2.779T" ;; *) fail "k3 total is not 2.779T" ;;
esac

# 2. k3 on 512 GPUs, bf16, 8192 tokens a GPU, by hand: 896 experts of 3 x 3584 x 3072
#    in 92 MoE layers; ceil(896 / 512) = 2 experts a GPU a layer.
j="$tmp/k3.json"
total=$(jnum params_total "$j")
awk -v total="$total" 'BEGIN {
  routed = 896 * 3 * 3584 * 3072 * 92; gpu = 2 * 3 * 3584 * 3072 * 92; dense = total - routed
  printf "%.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f\n", routed, gpu, 2 * (dense + gpu), \
    4 * (dense + gpu), 8 * (dense + gpu), 8192 * 16 * 3584 * 2 * 2 * 92 * 2, \
    2 * 511 / 512 * dense * 2, 8192 * 16 * 3584 * 2 * 2 * 92 * 2 * 511 / 512 }' > "$tmp/hand"
read routed gpu wbf16 master moments a2a allreduce offgpu < "$tmp/hand"
same "k3 routed expert params" "$(jnum params_routed_experts "$j")" "$routed"
same "k3 experts a GPU a layer" "$(jnum experts_per_gpu_per_layer "$j")" 2
same "k3 expert params a GPU" "$(jnum expert_params_per_gpu "$j")" "$gpu"
same "k3 bf16 weights a GPU" "$(jnum weights_bf16 "$j")" "$wbf16"
same "k3 fp32 master a GPU" "$(jnum master "$j")" "$master"
same "k3 AdamW moments a GPU" "$(jnum moments "$j")" "$moments"
same "k3 all-to-all bytes a GPU" "$(jnum all_to_all "$j")" "$a2a"
same "k3 all-to-all bytes to other GPUs" "$(jnum all_to_all_off_gpu "$j")" "$offgpu"
same "k3 dense all-reduce bytes" "$(jnum dense_allreduce "$j")" "$allreduce"

# 3. Expert counts that do not divide 896, and expert copies.
"$plan" --preset k3 --gpus 7 --gpu-mem 141G --nodes 1 --json "$tmp/k3-7.json" > /dev/null
same "896 experts on 7 GPUs" "$(jnum experts_per_gpu_per_layer "$tmp/k3-7.json")" 128
"$plan" --preset k3 --gpus 1000 --ep 1000 --gpu-mem 141G --json "$tmp/k3-1000.json" > /dev/null
same "896 experts on 1000 GPUs" "$(jnum experts_per_gpu_per_layer "$tmp/k3-1000.json")" 1
"$plan" --preset k3 --gpus 24 --ep 3 --gpu-mem 141G --json "$tmp/k3-3.json" > /dev/null
same "896 experts on groups of 3" "$(jnum experts_per_gpu_per_layer "$tmp/k3-3.json")" 299
same "8 copies of each expert" "$(jnum expert_copies "$tmp/k3-3.json")" 8

# 3b. --kda-tiles: kimi-linear-48b has 27 layers, 7 of them MLA (4, 8, ..., 24, 27), so 20
#     KDA layers of 32 heads of 128; the tile KDA keeps per 16-token chunk and head the
#     backward's block (84 x 128 + 1280 bf16), U^T (16 x 128 fp32), S_c^T (128 x 128 bf16)
#     and Vnew^T (128 x 16 bf16) = 69120 bytes.
"$plan" --preset kimi-linear-48b --gpus 64 --gpu-mem 141G --batch-tokens 4096 --json "$tmp/kl.json" > /dev/null
"$plan" --preset kimi-linear-48b --gpus 64 --gpu-mem 141G --batch-tokens 4096 --kda-tiles --json "$tmp/klt.json" > /dev/null
kept=$(awk 'BEGIN { printf "%.0f", 20 * 32 * (2 * (84 * 128 + 1280) + 16 * 128 * 4 + 128 * 128 * 2 + 128 * 16 * 2) / 16 * 4096 }')
same "kimi-linear-48b KDA tile factors a GPU" "$(jnum kda_kept "$tmp/klt.json")" "$kept"
same "no KDA tile factors without --kda-tiles" "$(jnum kda_kept "$tmp/kl.json")" 0
same "--kda-tiles adds them to the total" "$(jnum total "$tmp/klt.json")" \
  "$(awk -v a="$(jnum total "$tmp/kl.json")" -v b="$kept" 'BEGIN { printf "%.0f", a + b }')"

# 4. Verdicts and exit status.
expect "k3 on 512 H200s does not fit as is" 1 "DOES NOT FIT" -- "$plan" --preset k3 --gpus 512 --gpu-mem 141G
expect "a plan that does not fit says what to change" 1 "what would fit" -- "$plan" --preset k3 --gpus 512 --gpu-mem 141G --zero 3
expect "k3 on one 1 GB GPU does not fit" 1 "DOES NOT FIT" -- "$plan" --preset k3 --gpus 1 --gpu-mem 1G
expect "tiny fits one GPU" 0 "verdict: FITS" -- "$plan" --preset tiny --gpus 1 --gpu-mem 16Gi
expect "kimi-linear-48b on 64 H200s fits" 0 "verdict: FITS" -- "$plan" --preset kimi-linear-48b --gpus 64 --gpu-mem 141G --batch-tokens 4096
expect "--help states the formulas" 0 "2 (N-1)/N" -- "$plan" --help

# 5. Bad command lines name the flag.
expect "--ep must divide --gpus" 2 "--ep 3 does not divide --gpus 512" -- "$plan" --preset k3 --gpus 512 --ep 3 --gpu-mem 141G
expect "bad --gpu-mem unit" 2 "unknown unit 'X'" -- "$plan" --preset k3 --gpus 8 --gpu-mem 12X
expect "--gpus required" 2 "--gpus is required" -- "$plan" --preset k3 --gpu-mem 141G
expect "unknown preset" 1 "k4" -- "$plan" --preset k4 --gpus 8 --gpu-mem 141G
expect "bad --dtype" 2 "--dtype" -- "$plan" --preset k3 --gpus 8 --gpu-mem 141G --dtype fp8

[ "$fails" -eq 0 ]
