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

/* The OpenCL implementation (driver stack) behind a device. It is not always the
 * hardware's maker: PoCL and Intel's CPU runtime both run on Intel CPUs, rusticl and clvk
 * on several vendors' GPUs. It comes from the platform's name, vendor, version and ICD
 * suffix, never from the device's name (PoCL calls its device on a Xeon
 * "pthread-skylake-avx512-Intel(R) Xeon(R) Processor"). */
typedef enum clmoe_impl {
  CLMOE_IMPL_OTHER = 0, /* none of the below */
  CLMOE_IMPL_POCL,      /* Portable Computing Language */
  CLMOE_IMPL_INTEL,     /* Intel's runtimes: the CPU runtime and the GPU compute runtime */
  CLMOE_IMPL_NVIDIA,    /* the CUDA driver's OpenCL */
  CLMOE_IMPL_AMD,       /* AMD's own (ROCm, AMD APP), not Mesa's drivers for AMD GPUs */
  CLMOE_IMPL_OCLGRIND,  /* the Oclgrind simulator */
  CLMOE_IMPL_RUSTICL,   /* Mesa's rusticl */
  CLMOE_IMPL_CLOVER,    /* Mesa's older Clover */
  CLMOE_IMPL_CLVK,      /* OpenCL over Vulkan */
  CLMOE_IMPL_APPLE,
  CLMOE_IMPL_ARM,       /* Arm's Mali driver */
  CLMOE_IMPL_QUALCOMM   /* Qualcomm's Adreno driver */
} clmoe_impl;

/* What clmoe knows about one OpenCL device: enough to choose kernels and tunables. */
typedef struct clmoe_device_caps {
  int platform_index; /* position in clGetPlatformIDs' list */
  int device_index;   /* position in that platform's clGetDeviceIDs(ALL) list */
  char platform_name[128];
  char platform_version[128];
  char platform_vendor[128]; /* CL_PLATFORM_VENDOR */
  char icd_suffix[32];       /* CL_PLATFORM_ICD_SUFFIX_KHR ("POCL", "INTEL", "NV"); "" if none */
  clmoe_impl impl;           /* from the four strings above (clmoe_impl_identify) */
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
CLMOE_API clmoe_status clmoe_devices_list(clmoe_device_caps **list, int *count);

/* Picks a device from a list by spec: NULL or "" means the CLMOE_DEVICE environment
 * variable, and if that is unset the default (the first GPU, else the first CPU, else the
 * first device). The rules, first match wins (names in any case):
 *   1. "P:D"                       platform P, device D (the indices clmoe-info prints)
 *   2. gpu | cpu | accelerator     the first device of that type
 *   3. an implementation's name or alias (clmoe_impl_parse): the first device of that
 *      implementation and of no other; none there is an error listing what was found
 *      ("intel" never picks PoCL's device named "...Intel(R) Xeon(R)...")
 *   4. part of a platform's name, vendor, version or ICD suffix: the first such device
 *   5. part of a device's name or vendor: the first such device
 * Writes the index into list to *chosen and a sentence naming the rule into why (may be
 * NULL). Records whose impl is CLMOE_IMPL_OTHER (lists made by hand) are identified from
 * their strings (clmoe_device_impl). */
CLMOE_API clmoe_status clmoe_device_choose(const clmoe_device_caps *list, int count,
                                           const char *spec, int *chosen, char *why,
                                           size_t why_len);

typedef struct clmoe_ctx clmoe_ctx;

/* Options for a context; zero-initialise and set what you need. */
typedef struct clmoe_ctx_options {
  const char *device; /* device spec as for clmoe_device_choose; NULL: CLMOE_DEVICE/default */
  int profiling;      /* 1: queue with CL_QUEUE_PROFILING_ENABLE (benchmarks) */
  int no_probe;       /* 1: skip the build probes (inline PTX); faster start for listings */
  int poison;         /* 1: every device buffer the context hands out (tensors, scratch, new
                       * or reused) is first filled with a NaN pattern, so that a kernel
                       * reading memory nobody wrote fails on every device; the environment
                       * variable CLMOE_POISON=1 sets it for every context (testing) */
} clmoe_ctx_options;

/* Creates a context on the chosen device. opts may be NULL. */
CLMOE_API clmoe_status clmoe_ctx_create(clmoe_ctx **ctx, const clmoe_ctx_options *opts);
/* Creates a context on device `index` of a list from clmoe_devices_list. */
CLMOE_API clmoe_status clmoe_ctx_create_at(clmoe_ctx **ctx, const clmoe_device_caps *dev,
                                           const clmoe_ctx_options *opts);
CLMOE_API void clmoe_ctx_destroy(clmoe_ctx *ctx);

CLMOE_API const clmoe_device_caps *clmoe_ctx_caps(const clmoe_ctx *ctx);
/* The sentence saying why this device was chosen. */
CLMOE_API const char *clmoe_ctx_choice_reason(const clmoe_ctx *ctx);
CLMOE_API cl_context clmoe_ctx_cl_context(const clmoe_ctx *ctx);
CLMOE_API cl_device_id clmoe_ctx_cl_device(const clmoe_ctx *ctx);
CLMOE_API cl_command_queue clmoe_ctx_queue(const clmoe_ctx *ctx);
/* Waits for all queued work (clFinish). */
CLMOE_API clmoe_status clmoe_ctx_finish(clmoe_ctx *ctx);

/* What a context has done since it was created: counted on every context, profiling or
 * not, for telling launch- and round-trip-bound code apart (clmoe-generate --profile). A
 * blocking transfer or a finish makes the host wait until the device has run everything
 * queued before it. Kernels that other libraries enqueue (CLBlast) are not in `launches`;
 * the profiler counts each such call once. */
typedef struct clmoe_ctx_counters {
  int64_t launches;        /* kernels enqueued by clmoe */
  int64_t blocking_reads;  /* device-to-host reads that wait (clmoe_tensor_read, ...) */
  int64_t blocking_writes; /* host-to-device writes that wait (clmoe_tensor_write, ...) */
  int64_t finishes;        /* clFinish (clmoe_ctx_finish, the profiler's end, ...) */
} clmoe_ctx_counters;
CLMOE_API void clmoe_ctx_counters_get(const clmoe_ctx *ctx, clmoe_ctx_counters *counters);

/* Kernel timing for benchmarks, on contexts created with profiling = 1: between _begin
 * and _end every kernel clmoe launches on ctx keeps its OpenCL event; _end waits for the
 * queue and returns the sum of those kernels' execution times (host overhead and gaps
 * between kernels excluded) and how many there were. */
CLMOE_API clmoe_status clmoe_ctx_profile_begin(clmoe_ctx *ctx);
CLMOE_API clmoe_status clmoe_ctx_profile_end(clmoe_ctx *ctx, double *kernel_seconds, int *kernels);

/* Time by kernel name, summed over every profiled interval since the context was created
 * or last cleared. CLBlast's GEMMs count as "clblast_sgemm" (from a marker before the call
 * to the end of its last kernel, so CLBlast's own host work between its kernels is
 * included). `*rows` stays valid until the next profiling call; returns the row count. */
typedef struct clmoe_kernel_time {
  char name[64];
  double seconds;
  int64_t launches;
} clmoe_kernel_time;
CLMOE_API int clmoe_ctx_profile_kernels(const clmoe_ctx *ctx, const clmoe_kernel_time **rows);
CLMOE_API void clmoe_ctx_profile_clear(clmoe_ctx *ctx);

/* Short name of a vendor ("nvidia", "amd", "intel", "pocl", ...). */
CLMOE_API const char *clmoe_vendor_name(clmoe_vendor vendor);

/* Which implementation a platform is, from its CL_PLATFORM_NAME, _VENDOR, _VERSION and
 * ICD suffix (any may be NULL or ""). */
CLMOE_API clmoe_impl clmoe_impl_identify(const char *platform_name, const char *platform_vendor,
                                         const char *platform_version, const char *icd_suffix);
/* The implementation of a record: c->impl, or when that is CLMOE_IMPL_OTHER, identified
 * from the record's platform strings. */
CLMOE_API clmoe_impl clmoe_device_impl(const clmoe_device_caps *c);
/* Short name, the one clmoe-info and its JSON show: "pocl", "intel", "nvidia", "amd",
 * "oclgrind", "rusticl", "clover", "clvk", "apple", "arm", "qualcomm", "other". */
CLMOE_API const char *clmoe_impl_name(clmoe_impl impl);
/* Name for sentences: "PoCL", "Intel OpenCL", "NVIDIA CUDA", "AMD ROCm", ... */
CLMOE_API const char *clmoe_impl_title(clmoe_impl impl);
/* 1 and *impl set when `name` (any case, whole) names an implementation: its short name
 * or an alias - portable (PoCL), oneapi (Intel), cuda (NVIDIA), rocm (AMD), mali (Arm),
 * adreno (Qualcomm). "other" names none. 0 otherwise. */
CLMOE_API int clmoe_impl_parse(const char *name, clmoe_impl *impl);
/* The names clmoe_impl_parse accepts, for help texts and messages:
 * "pocl|portable, intel|oneapi, nvidia|cuda, ...". */
CLMOE_API const char *clmoe_impl_names(void);

#ifdef __cplusplus
}
#endif
#endif
