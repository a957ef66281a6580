/* Internal: PTX retargeting for Hopper's architecture-specific instructions (wgmma), which
 * NVIDIA's OpenCL compiler cannot emit itself (it writes ".target sm_90"). Not installed. */
#ifndef CLMOE_PTX_SM90A_H
#define CLMOE_PTX_SM90A_H

#include "internal.h"

/* The build option that asks lib/runtime/program.c to rebuild a program through clmoe__ptx_sm90a. */
#define CLMOE_PTX_SM90A_OPTION "-DCLMOE_PTX_SM90A=1"

/* The comment mark that hides an sm_90a instruction from the first build (kernels write
 * asm("//sm90a wgmma...")). */
#define CLMOE_PTX_SM90A_MARK "//sm90a "

/* Rewrites PTX text (n bytes, as clGetProgramInfo(CL_PROGRAM_BINARIES) gives it) for
 * sm_90a: ".target sm_90" becomes ".target sm_90a", a ".version" below 8.0 becomes 8.0 (the
 * first with wgmma), and every CLMOE_PTX_SM90A_MARK is removed, leaving its instruction.
 * *out (malloc'd, *out_n bytes) is the result. CLMOE_ERR_UNSUPPORTED when the text is not
 * PTX for sm_90 / sm_90a. */
clmoe_status clmoe__ptx_sm90a(const unsigned char *ptx, size_t n, unsigned char **out, size_t *out_n);

#endif
