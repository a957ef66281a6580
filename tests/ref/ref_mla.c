/* Double-precision reference of MLA (to be written). */
#include "ref/ref_mla.h"
