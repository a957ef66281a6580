/* Conformance checks: MLA attention on the tile interface (issue 9). */
#include "conformance/conformance.h"

const clmoe_check clmoe_checks_mla_tc[] = {
    {NULL},
};
