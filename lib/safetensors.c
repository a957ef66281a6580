/* safetensors files (to be written). */
#include "internal.h"
