/* MOE operator (to be written). */
#ifndef CLMOE_MOE_H
#define CLMOE_MOE_H
#include "tensor.h"
#endif
