/* clmoe-bench: performance measurements. The dispatcher: it names the benchmark and runs
 * it (bench_gemm.c, bench_kda.c, bench_mla.c, bench_moe.c, all over bench_common.c).
 * `clmoe-bench gemm --help` for one benchmark. */
#include <string.h>

#include "bench.h"

static void usage(void)
{
  printf("Usage: clmoe-bench BENCHMARK [options]   (clmoe-bench BENCHMARK --help)\n"
         "\n"
         "Benchmarks:\n"
         "  gemm   clmoe_gemm over sizes: CLBlast, our tiled kernel and a naive kernel side by\n"
         "         side, fp32 or bf16 operands, TFLOP/s and GB/s\n");
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
  if (!strcmp(argv[1], "gemm")) {
    app_name = "clmoe-bench gemm";
    return bench_gemm(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "kda")) {
    app_name = "clmoe-bench kda";
    return bench_kda(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "mla")) {
    app_name = "clmoe-bench mla";
    return bench_mla(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "moe")) {
    app_name = "clmoe-bench moe";
    return bench_moe(argc - 1, argv + 1);
  }
  app_usage_error("unknown benchmark '%s'", argv[1]);
}
