/* Double-precision reference of MOE (to be written). */
#include "ref/ref_moe.h"
