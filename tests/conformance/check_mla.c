/* Conformance checks of MLA (to be written). */
#include "conformance/conformance.h"

const clmoe_check clmoe_checks_mla[] = {{NULL, NULL, NULL}};
