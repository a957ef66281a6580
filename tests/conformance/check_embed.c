/* Conformance checks for the embed family (to be written). */
#include "conformance/conformance.h"

const clmoe_check clmoe_checks_embed[] = {{NULL, NULL, NULL}};
