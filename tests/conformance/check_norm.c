/* Conformance checks for the norm family (to be written). */
#include "conformance/conformance.h"

const clmoe_check clmoe_checks_norm[] = {{NULL, NULL, NULL}};
