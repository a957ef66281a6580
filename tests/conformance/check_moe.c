/* Conformance checks of MOE (to be written). */
#include "conformance/conformance.h"

const clmoe_check clmoe_checks_moe[] = {{NULL, NULL, NULL}};
