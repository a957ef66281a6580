/* Time of one device draw per row (clmoe_gen_sample_rows) against the host sampler, at a
 * vocabulary of V (default Kimi's 163,840), for batch sizes 1 and 16 and four option sets.
 * Built and run by docs/data/sample_bench.sh; prints one JSON line per case. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "clmoe/clmoe.h"

#define TRY(call)                                                                                  \
  do {                                                                                             \
    clmoe_status st_ = (call);                                                                     \
    if (st_ != CLMOE_OK) {                                                                         \
      fprintf(stderr, "%s: %s\n", #call, clmoe_last_error());                                      \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
  const int64_t V = argc > 1 ? atoll(argv[1]) : 163840, reps = 20;
  const clmoe_gen_sampling how[] = {{.temperature = 0.8, .seed = 1}, {.temperature = 0.8, .top_p = 0.95, .seed = 1},
                                    {.temperature = 0.8, .top_k = 50, .seed = 1},
                                    {.temperature = 0.8, .top_k = 50, .top_p = 0.9, .seed = 1}};
  const char *names[] = {"temperature", "top-p 0.95", "top-k 50", "top-k 50 top-p 0.9"};
  clmoe_ctx *ctx;
  TRY(clmoe_ctx_create(&ctx, NULL));
  for (int64_t R = 1; R <= 16; R *= 16) {
    clmoe_tensor lg = {0}, ids = {0};
    const int64_t shape[2] = {R, V};
    TRY(clmoe_tensor_create(ctx, &lg, CLMOE_F32, 2, shape));
    TRY(clmoe_tensor_create(ctx, &ids, CLMOE_I32, 1, &R));
    TRY(clmoe_tensor_fill_normal(&lg, 7, 0.0f, 3.0f));
    float *host = malloc((size_t)(R * V) * sizeof *host);
    int32_t *out = malloc((size_t)R * sizeof *out);
    if (!host || !out) return 1;
    TRY(clmoe_tensor_read(&lg, host, (size_t)(R * V) * sizeof *host));
    for (size_t h = 0; h < sizeof how / sizeof how[0]; h++) {
      TRY(clmoe_gen_sample_rows(ctx, &how[h], &lg, 0, &ids)); /* build, warm */
      TRY(clmoe_ctx_finish(ctx));
      double t0 = now();
      for (int64_t k = 0; k < reps; k++) TRY(clmoe_gen_sample_rows(ctx, &how[h], &lg, k, &ids));
      TRY(clmoe_ctx_finish(ctx));
      const double dev = (now() - t0) / (double)reps;
      TRY(clmoe_tensor_read(&ids, out, (size_t)R * sizeof *out));
      int same = 1;
      t0 = now();
      for (int64_t r = 0; r < R; r++) {
        int32_t t;
        TRY(clmoe_gen_sample(&how[h], host + r * V, V, r, reps - 1, &t));
        same &= t == out[r];
      }
      const double hst = now() - t0;
      printf("{\"V\": %lld, \"rows\": %lld, \"options\": \"%s\", \"device_ms\": %.3f, \"host_ms\": %.3f, "
             "\"same_tokens\": %d}\n", (long long)V, (long long)R, names[h], 1e3 * dev, 1e3 * hst, same);
    }
    free(host), free(out);
    clmoe_tensor_destroy(&lg), clmoe_tensor_destroy(&ids);
  }
  clmoe_ctx_destroy(ctx);
  return 0;
}
