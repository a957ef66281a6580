/* MLA operator (to be written). */
#ifndef CLMOE_MLA_H
#define CLMOE_MLA_H
#include "tensor.h"
#endif
