/* References for the norm family (to be written). */
#include "ref/reference.h"
