/* Conformance checks of the short convolution (to be written). */
#include "conformance/conformance.h"

const clmoe_check clmoe_checks_conv[] = {{NULL, NULL, NULL}};
