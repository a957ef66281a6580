/* OpenCL runtime: device enumeration and choice, capability records, contexts.
 *
 * A clmoe_ctx owns one OpenCL context and one in-order command queue on one device, the
 * programs built for it, a buffer pool and the GEMM backend state. A context is used by
 * one thread at a time; several contexts (one per device) may live in one process. */
#ifndef CLMOE_RUNTIME_H
#define CLMOE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum clmoe_vendor {
  CLMOE_VENDOR_OTHER = 0,
  CLMOE_VENDOR_NVIDIA,
  CLMOE_VENDOR_AMD,
  CLMOE_VENDOR_INTEL,
  CLMOE_VENDOR_POCL,
  CLMOE_VENDOR_APPLE,
  CLMOE_VENDOR_ARM,
  CLMOE_VENDOR_QUALCOMM
} clmoe_vendor;

/* What clmoe knows about one OpenCL device: enough to choose kernels and tunables. */
typedef struct clmoe_device_caps {
  int platform_index; /* position in clGetPlatformIDs' list */
  int device_index;   /* position in that platform's clGetDeviceIDs(ALL) list */
  char platform_name[128];
  char platform_version[128];
  char vendor_name[128]; /* CL_DEVICE_VENDOR */
  char device_name[128];
  char device_version[128];
  char driver_version[128];
  char opencl_c_version[64]; /* CL_DEVICE_OPENCL_C_VERSION, e.g. "OpenCL C 1.2 PoCL" */
  clmoe_vendor vendor;
  int is_gpu, is_cpu, is_accelerator;
  int opencl_c_major, opencl_c_minor;
  unsigned compute_units;
  unsigned clock_mhz;
  size_t max_work_group_size;
  uint64_t global_mem_bytes;
  uint64_t max_alloc_bytes;
  uint64_t local_mem_bytes;
  int local_mem_dedicated; /* 1 when CL_LOCAL (on-chip), 0 when emulated in global memory */
  int has_subgroups;       /* cl_khr_subgroups, cl_intel_subgroups or OpenCL 2.1+ subgroups */
  int has_fp64;
  int has_fp16;
  int has_int64_atomics;
  int pci_known; /* from cl_khr_pci_bus_info, cl_nv_device_attribute_query or AMD topology */
  unsigned pci_domain, pci_bus, pci_device, pci_function;
  int nv_cc_major, nv_cc_minor; /* NVIDIA compute capability, 0.0 elsewhere */
  int warp_size;                /* NVIDIA warp or AMD wavefront size when known, else 0 */
  unsigned float_vector_width;  /* CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT (1 on GPUs, SIMD on CPUs) */
  int inline_ptx;               /* 1: inline PTX asm() builds and runs; 0: no; -1: not probed */
  /* Tunables derived from the above and passed to every kernel as -D constants. */
  unsigned wg_size; /* default 1-D work-group size (CLMOE_WG) */
} clmoe_device_caps;

/* Lists every device of every platform. *list is allocated; free it with free().
 * Returns CLMOE_ERR_NO_DEVICE (with a message naming the package that provides a CPU
 * driver) when there is no platform or no device at all. */
clmoe_status clmoe_devices_list(clmoe_device_caps **list, int *count);

/* Picks a device from a list by spec: NULL or "" means the CLMOE_DEVICE environment
 * variable, and if that is unset the default (the first GPU, else the first CPU, else the
 * first device). A spec is "P:D" (platform and device index), "gpu", "cpu",
 * "accelerator", or a case-insensitive substring of platform, vendor or device name.
 * Writes the index into list to *chosen and a sentence saying why into why (may be NULL). */
clmoe_status clmoe_device_choose(const clmoe_device_caps *list, int count, const char *spec,
                                 int *chosen, char *why, size_t why_len);

typedef struct clmoe_ctx clmoe_ctx;

/* Options for a context; zero-initialise and set what you need. */
typedef struct clmoe_ctx_options {
  const char *device; /* device spec as for clmoe_device_choose; NULL: CLMOE_DEVICE/default */
  int profiling;      /* 1: queue with CL_QUEUE_PROFILING_ENABLE (benchmarks) */
  int no_probe;       /* 1: skip the build probes (inline PTX); faster start for listings */
} clmoe_ctx_options;

/* Creates a context on the chosen device. opts may be NULL. */
clmoe_status clmoe_ctx_create(clmoe_ctx **ctx, const clmoe_ctx_options *opts);
/* Creates a context on device `index` of a list from clmoe_devices_list. */
clmoe_status clmoe_ctx_create_at(clmoe_ctx **ctx, const clmoe_device_caps *dev,
                                 const clmoe_ctx_options *opts);
void clmoe_ctx_destroy(clmoe_ctx *ctx);

const clmoe_device_caps *clmoe_ctx_caps(const clmoe_ctx *ctx);
/* The sentence saying why this device was chosen. */
const char *clmoe_ctx_choice_reason(const clmoe_ctx *ctx);
cl_context clmoe_ctx_cl_context(const clmoe_ctx *ctx);
cl_device_id clmoe_ctx_cl_device(const clmoe_ctx *ctx);
cl_command_queue clmoe_ctx_queue(const clmoe_ctx *ctx);
/* Waits for all queued work (clFinish). */
clmoe_status clmoe_ctx_finish(clmoe_ctx *ctx);

/* Kernel timing for benchmarks, on contexts created with profiling = 1: between _begin
 * and _end every kernel clmoe launches on ctx keeps its OpenCL event; _end waits for the
 * queue and returns the sum of those kernels' execution times (host overhead and gaps
 * between kernels excluded) and how many there were. */
clmoe_status clmoe_ctx_profile_begin(clmoe_ctx *ctx);
clmoe_status clmoe_ctx_profile_end(clmoe_ctx *ctx, double *kernel_seconds, int *kernels);

/* Time by kernel name, summed over every profiled interval since the context was created
 * or last cleared. CLBlast's GEMMs count as "clblast_sgemm" (from a marker before the call
 * to the end of its last kernel, so CLBlast's own host work between its kernels is
 * included). `*rows` stays valid until the next profiling call; returns the row count. */
typedef struct clmoe_kernel_time {
  char name[64];
  double seconds;
  int64_t launches;
} clmoe_kernel_time;
int clmoe_ctx_profile_kernels(const clmoe_ctx *ctx, const clmoe_kernel_time **rows);
void clmoe_ctx_profile_clear(clmoe_ctx *ctx);

/* Short name of a vendor ("nvidia", "amd", "intel", "pocl", ...). */
const char *clmoe_vendor_name(clmoe_vendor vendor);

#ifdef __cplusplus
}
#endif
#endif
