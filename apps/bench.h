/* clmoe-bench's parts: the benchmarks (bench_*.c, each takes the arguments after its name
 * and returns the exit status) and what they share (bench_common.c). Every benchmark states
 * its FLOP and byte counts and compares against a reference measured in the same run. */
#ifndef CLMOE_BENCH_H
#define CLMOE_BENCH_H

#include "app_common.h"

int bench_gemm(int argc, char **argv);
int bench_kda(int argc, char **argv);
int bench_mla(int argc, char **argv);
int bench_moe(int argc, char **argv);
int bench_sample(int argc, char **argv);
int bench_gemv(int argc, char **argv);

/* bench_common.c: what the benchmarks share. */

/* Median of n timings (sorts in place). */
double bench_median(double *v, int n);

/* "4096,16384" -> at most BENCH_MAX_LIST integers in [lo, hi] into out; returns the count.
 * A bad or empty list is a usage error naming the flag. */
#define BENCH_MAX_LIST 16
int bench_parse_list(const char *flag, const char *s, long long *out, long long lo, long long hi);
/* "AxB,..." (sep 'x') or "A:B,..." -> at most BENCH_MAX_LIST pairs, a in [alo, ahi] and b in
 * [blo, bhi]; returns the count. A bad or empty list is a usage error naming the flag. */
int bench_parse_pairs(const char *flag, const char *s, char sep, long long *a, long long alo, long long ahi,
                      long long *b, long long blo, long long bhi);

#endif
