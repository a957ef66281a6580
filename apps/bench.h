/* clmoe-bench subcommands. Each takes the arguments after its name and returns the exit
 * status. Every benchmark states its FLOP and byte counts and compares against a reference
 * measured in the same run. */
#ifndef CLMOE_BENCH_H
#define CLMOE_BENCH_H

#include "app_common.h"

int bench_gemm(int argc, char **argv);
int bench_kda(int argc, char **argv);
int bench_mla(int argc, char **argv);
int bench_moe(int argc, char **argv);

/* Median of n timings (sorts in place). */
double bench_median(double *v, int n);

#endif
