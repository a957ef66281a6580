/* Shared by clmoe-op's subcommands (clmoe_op.c, clmoe_op_mla.c). */
#ifndef CLMOE_APP_OP_H
#define CLMOE_APP_OP_H

#include <stddef.h>
#include <stdint.h>

/* Prints "app: message" and exits 1 (a bad input file, not a bad command line). */
void op_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* "0,5,12" -> a new array of *n integers in [lo, hi] (free it); a usage error naming flag. */
int64_t *op_parse_list(const char *flag, const char *value, int64_t lo, int64_t hi, int *n);
/* "F32 [2, 3]" for messages; a negative size prints as *. */
const char *op_describe(const char *dtype, const int64_t *dims, int n, char *buf, size_t len);

/* clmoe-op mla (clmoe_op_mla.c). */
int cmd_mla(int argc, char **argv);

#endif
