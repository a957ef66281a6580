/* clmoe-bench moe (to be written). */
#include "bench.h"

int bench_moe(int argc, char **argv)
{
  app_usage_error("clmoe-bench moe is not written yet");
}
