/* CLMOE_API marks the library's public functions, those declared in include/clmoe/.
 * libclmoe is built with -fvisibility=hidden where the compiler has it, so these are the
 * only symbols it exports; everything else is internal and may change at any commit. */
#ifndef CLMOE_API_H
#define CLMOE_API_H

#if defined(__GNUC__) && __GNUC__ >= 4
#define CLMOE_API __attribute__((visibility("default")))
#else
#define CLMOE_API
#endif

#endif
