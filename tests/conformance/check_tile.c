/* Conformance checks: the tile interface and the tile GEMM (issue 9). */
#include "conformance/conformance.h"

const clmoe_check clmoe_checks_tile[] = {
    {NULL},
};
