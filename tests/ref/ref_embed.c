/* References for the embed family (to be written). */
#include "ref/reference.h"
