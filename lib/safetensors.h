/* safetensors files (to be written). */
#ifndef CLMOE_SAFETENSORS_H
#define CLMOE_SAFETENSORS_H
#include "tensor.h"
#endif
