#include "internal.h"

const char *clmoe_version(void) { return PACKAGE_VERSION; }
