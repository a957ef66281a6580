/* Double-precision reference of MOE (to be written). */
#ifndef CLMOE_REF_MOE_H
#define CLMOE_REF_MOE_H
#endif
