/* clmoe-bench mla (to be written). */
#include "bench.h"

int bench_mla(int argc, char **argv)
{
  app_usage_error("clmoe-bench mla is not written yet");
}
