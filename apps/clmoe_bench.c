/* clmoe-bench: performance measurements. The dispatcher: it names the benchmark and runs
 * it (bench_gemm.c, bench_kda.c, bench_mla.c, bench_moe.c, bench_sample.c,
 * bench_gemv.c, all over bench_common.c).
 * Benchmarks are a table: add one there. `clmoe-bench gemm --help` for one benchmark. */
#include <string.h>

#include "bench.h"

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} benchmarks[] = {
    {"gemm", bench_gemm, "clmoe_gemm over sizes: CLBlast, our tiled kernel and a naive kernel side by\n"
                         "         side, fp32 or bf16 operands, TFLOP/s and GB/s"},
    {"kda", bench_kda, "the chunked KDA forward and forward + backward over B, T, H, D, against the\n"
                       "         recurrent loop, portable and on the tile interface"},
    {"mla", bench_mla, "the gated MLA's attention: tiled prefill against the materialised kernel,\n"
                       "         and decode steps over a paged latent cache"},
    {"moe", bench_moe, "the Stable LatentMoE layer on both expert GEMM paths, with the share of time\n"
                       "         per phase, and the load-balancing curves"},
    {"sample", bench_sample, "the device sampler (one launch draws a token per row) against the host\n"
                             "         sampler, over vocabularies and batch sizes, us per launch"},
    {"gemv", bench_gemv, "the decode step's few-token products over matrix shapes and token counts,\n"
                         "         us per launch and GB/s of weights, against a device copy"},
};

static void usage(void)
{
  printf("Usage: clmoe-bench BENCHMARK [options]   (clmoe-bench BENCHMARK --help)\n"
         "\n"
         "Benchmarks:\n");
  for (size_t i = 0; i < sizeof benchmarks / sizeof benchmarks[0]; i++)
    printf("  %-6s %s\n", benchmarks[i].name, benchmarks[i].summary);
  printf("\n"
         "  --help, -h   this text (BENCHMARK --help: that benchmark's options)\n"
         "  --version    the version and what the build is: commit, configure arguments,\n"
         "               compiler, OpenCL, MPI, CLBlast and hwloc versions\n");
}

int main(int argc, char **argv)
{
  app_name = "clmoe-bench";
  app_flags flags = {.take = APP_FLAG_HELP | APP_FLAG_VERSION, .usage = usage};
  int first = 1;
  if (argc < 2) {
    usage();
    return 2;
  }
  app_standard_flag(argc, argv, &first, &flags); /* --help, --version: exit */
  for (size_t i = 0; i < sizeof benchmarks / sizeof benchmarks[0]; i++) {
    if (strcmp(argv[1], benchmarks[i].name)) continue;
    static char name[64];
    snprintf(name, sizeof name, "clmoe-bench %s", benchmarks[i].name);
    app_name = name;
    return benchmarks[i].run(argc - 1, argv + 1);
  }
  app_usage_error("unknown benchmark '%s'", argv[1]);
}
