# The device call that measures branch infbf's inference models with bf16 matrices from their
# creation on one H200 (not run yet: no device was lent to the session that wrote it). From the
# project root with the branch's build installed in .device-infbf/prefix and main's (before the
# change) in .device-infbf/main-prefix (both --disable-shared, ../shared/guide/DEVICE.md), and a
# byte text in .device-infbf/text.txt. A small driver (below) loads each model the way
# clmoe-generate does (before: clmoe_gen_load + clmoe_gen_set_weights; after:
# clmoe_gen_load_weights; --random-weights: clmoe_gen_random_model), runs a prefill of 8 tokens
# and 8 decode steps, and prints the pool's peak bytes in use and held (clmoe_ctx_pool_stats);
# nvidia-smi samples the driver's memory.used every 100 ms beside it. Runs: the gpu preset's
# random bf16 model and a gpu checkpoint in bf16, before and after; the kimi-linear-48b
# preset's random bf16 model after (about 98 GB; expected peak near that, where before it
# allocated the 197 GB fp32 model first) and before (expected to fail on 141 GB). About 15 min
# (the 48B model's random fill and the gpu checkpoint's 8.5 GB write dominate).
set -u
. .device-infbf/env.sh > /dev/null
export CLMOE_CACHE_DIR=/tmp/kc
D=.device-infbf
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/r/gpu.txt 2>&1
cat > /tmp/peak.c <<'C'
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include "clmoe/clmoe.h"
#define CK(x) do { clmoe_status s_ = (x); if (s_) { printf("FAILED %s: %s\n", #x, clmoe_last_error()); return 1; } } while (0)
static void stats(clmoe_ctx *c, const char *w)
{
  clmoe_pool_stats s; clmoe_ctx_pool_stats(c, &s);
  printf("%s: peak in use %.1f MiB, held %.1f MiB\n", w, s.peak_in_use_bytes / 1048576.0, s.device_bytes / 1048576.0);
}
int main(int argc, char **argv)
{
  clmoe_ctx *ctx; clmoe_model *m = NULL; clmoe_ctx_options o = {.device = "nvidia"};
  CK(clmoe_ctx_create(&ctx, &o));
  if (!strcmp(argv[1], "random")) {
    clmoe_config cfg; CK(clmoe_config_preset(argv[2], &cfg));
    CK(clmoe_gen_random_model(ctx, &cfg, 1, CLMOE_BF16, &m));
  } else {
#ifdef AFTER
    CK(clmoe_gen_load_weights(ctx, argv[2], NULL, NULL, CLMOE_BF16, &m, NULL));
#else
    CK(clmoe_gen_load(ctx, argv[2], &m, NULL)); CK(clmoe_gen_set_weights(m, CLMOE_BF16));
#endif
  }
  stats(ctx, "loaded");
  clmoe_gen_state *g; CK(clmoe_gen_state_create(m, 1, NULL, &g));
  const int64_t V = clmoe_model_config(m)->vocab; float *l = malloc(V * sizeof *l);
  int32_t p[8] = {1, 2, 3, 4, 5, 6, 7, 8}; const int32_t *pp[1] = {p}; int64_t n[1] = {8};
  CK(clmoe_gen_prefill(g, pp, n, l, NULL));
  for (int k = 0; k < 8; k++) { int32_t t = 9 + k; CK(clmoe_gen_step(g, &t, l)); }
  stats(ctx, "generated");
  clmoe_gen_state_destroy(g); clmoe_model_destroy(m); clmoe_ctx_destroy(ctx); free(l);
  return 0;
}
C
for v in main after; do
  P=$D/main-prefix; F=; [ $v = after ] && P=$D/prefix F=-DAFTER
  cc -O1 $F -I$P/include /tmp/peak.c -o /tmp/peak-$v $(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --static --libs clmoe) \
    > $OUT/r/cc-$v.txt 2>&1; echo "cc $v rc=$?" >> $OUT/r/summary.txt
done
# measure NAME CMD...: the command's output and the driver's largest memory.used meanwhile.
measure() {
  name=$1; shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $OUT/r/smi-$name.txt 2>&1 & smi=$!
  timeout 900 "$@" > $OUT/r/$name.txt 2>&1; echo "$name rc=$?" >> $OUT/r/summary.txt
  kill $smi; wait $smi 2> /dev/null
  echo "$name: driver memory.used max $(sort -n $OUT/r/smi-$name.txt | tail -1) MiB" >> $OUT/r/summary.txt
}
for v in main after; do measure gpu-random-$v /tmp/peak-$v random gpu; done
timeout 600 $D/prefix/bin/clmoe-train --preset gpu --data $D/text.txt --stop-at 1 --sample 0 --quiet --device nvidia \
  --out /tmp/gpu-ck > $OUT/r/train.txt 2>&1; echo "train rc=$?" >> $OUT/r/summary.txt
for v in main after; do measure gpu-ckpt-$v /tmp/peak-$v load /tmp/gpu-ck/checkpoint.safetensors; done
measure k48-random-after /tmp/peak-after random kimi-linear-48b
measure k48-random-main /tmp/peak-main random kimi-linear-48b
cd $OUT && tar czf r.tgz r && cd - > /dev/null
cat $OUT/r/gpu.txt $OUT/r/summary.txt; for f in $OUT/r/gpu-*.txt $OUT/r/k48-*.txt; do echo "== $f"; cat $f; done
