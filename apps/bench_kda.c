/* clmoe-bench kda (to be written). */
#include "bench.h"

int bench_kda(int argc, char **argv) { return 2; }
