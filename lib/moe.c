/* MOE operator (to be written). */
#include "internal.h"
