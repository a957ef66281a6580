/* Double-precision reference of MLA (to be written). */
#ifndef CLMOE_REF_MLA_H
#define CLMOE_REF_MLA_H
#endif
