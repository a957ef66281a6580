/* Internal to the ops subsystem: what its files share beyond include/clmoe/ops.h. Not
 * installed. */
#ifndef CLMOE_OPS_INTERNAL_H
#define CLMOE_OPS_INTERNAL_H

#include "clmoe/runtime.h"
#include "clmoe/status.h"
#include "clmoe/tensor.h"

/* y[r, :] += bias for every row r of y [rows, n]; bias [n]; both contiguous fp32
 * (ops_elementwise.c; the messages name op). */
clmoe_status clmoe__ops_add_rows(clmoe_ctx *ctx, const char *op, const clmoe_tensor *bias,
                                 clmoe_tensor *y);

#endif
