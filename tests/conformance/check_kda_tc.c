/* Conformance checks: KDA on the tile interface (issue 9). */
#include "conformance/conformance.h"

const clmoe_check clmoe_checks_kda_tc[] = {
    {NULL},
};
