/* The library's version string (clmoe_version, include/clmoe/clmoe.h). */
#include "clmoe/clmoe.h"
#include "internal.h"

const char *clmoe_version(void) { return PACKAGE_VERSION; }
