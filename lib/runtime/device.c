/* Device enumeration and capability records. */
#include "clmoe/runtime.h"
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Extension query constants, defined here so that old headers still build. */
#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif
#ifndef CL_DEVICE_PCI_BUS_INFO_KHR
#define CL_DEVICE_PCI_BUS_INFO_KHR 0x410F
#endif
#define CLMOE_NV_CC_MAJOR 0x4000   /* CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV */
#define CLMOE_NV_CC_MINOR 0x4001   /* CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV */
#define CLMOE_NV_WARP_SIZE 0x4003  /* CL_DEVICE_WARP_SIZE_NV */
#define CLMOE_NV_PCI_BUS 0x4008    /* CL_DEVICE_PCI_BUS_ID_NV */
#define CLMOE_NV_PCI_SLOT 0x4009   /* CL_DEVICE_PCI_SLOT_ID_NV */
#define CLMOE_NV_PCI_DOMAIN 0x400A /* CL_DEVICE_PCI_DOMAIN_ID_NV */
#define CLMOE_AMD_TOPOLOGY 0x4037  /* CL_DEVICE_TOPOLOGY_AMD */
#define CLMOE_AMD_WAVEFRONT 0x4043 /* CL_DEVICE_WAVEFRONT_WIDTH_AMD */
#define CLMOE_MAX_NUM_SUB_GROUPS 0x105C
#define CLMOE_PLATFORM_ICD_SUFFIX 0x0920 /* CL_PLATFORM_ICD_SUFFIX_KHR (cl_khr_icd) */

typedef struct { unsigned domain, bus, device, function; } pci_bus_info_khr;
typedef union {
  struct { cl_uint type, data[5]; } raw;
  struct { cl_uint type; char unused[17]; cl_char bus, device, function; } pcie;
} amd_topology;

const char *clmoe_vendor_name(clmoe_vendor vendor)
{
  switch (vendor) {
  case CLMOE_VENDOR_NVIDIA: return "nvidia";
  case CLMOE_VENDOR_AMD: return "amd";
  case CLMOE_VENDOR_INTEL: return "intel";
  case CLMOE_VENDOR_POCL: return "pocl";
  case CLMOE_VENDOR_APPLE: return "apple";
  case CLMOE_VENDOR_ARM: return "arm";
  case CLMOE_VENDOR_QUALCOMM: return "qualcomm";
  default: return "other";
  }
}


static clmoe_vendor classify_vendor(const char *platform, const char *vendor)
{
  if (clmoe__contains_nocase(platform, "portable computing language") || clmoe__contains_nocase(platform, "pocl"))
    return CLMOE_VENDOR_POCL;
  if (clmoe__contains_nocase(vendor, "nvidia")) return CLMOE_VENDOR_NVIDIA;
  if (clmoe__contains_nocase(vendor, "advanced micro devices") || clmoe__contains_nocase(vendor, "amd"))
    return CLMOE_VENDOR_AMD;
  if (clmoe__contains_nocase(vendor, "intel")) return CLMOE_VENDOR_INTEL;
  if (clmoe__contains_nocase(vendor, "apple")) return CLMOE_VENDOR_APPLE;
  if (clmoe__contains_nocase(vendor, "arm")) return CLMOE_VENDOR_ARM;
  if (clmoe__contains_nocase(vendor, "qualcomm")) return CLMOE_VENDOR_QUALCOMM;
  return CLMOE_VENDOR_OTHER;
}

static clmoe_status device_string(cl_device_id dev, cl_device_info what, char *out, size_t len)
{
  size_t got = 0;
  out[0] = '\0';
  CLMOE_CL(clGetDeviceInfo(dev, what, len - 1, out, &got));
  out[len - 1] = '\0';
  /* Trim trailing spaces some drivers leave. */
  size_t n = strlen(out);
  while (n > 0 && isspace((unsigned char)out[n - 1])) out[--n] = '\0';
  return CLMOE_OK;
}

/* The (possibly long) extension list, in a heap buffer. */
static char *device_extensions(cl_device_id dev)
{
  size_t size = 0;
  if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &size) != CL_SUCCESS) return NULL;
  char *ext = malloc(size + 1);
  if (!ext) return NULL;
  if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, size, ext, NULL) != CL_SUCCESS) {
    free(ext);
    return NULL;
  }
  ext[size] = '\0';
  return ext;
}

static int has_extension(const char *list, const char *name)
{
  if (!list) return 0;
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += n) {
    int starts = p == list || p[-1] == ' ';
    int ends = p[n] == '\0' || p[n] == ' ';
    if (starts && ends) return 1;
  }
  return 0;
}

/* The ICD suffix of a platform with cl_khr_icd, else "". A failing suffix query only
 * loses the suffix: not an error. */
static clmoe_status platform_icd_suffix(cl_platform_id platform, char *out, size_t len)
{
  out[0] = '\0';
  size_t size = 0;
  CLMOE_CL(clGetPlatformInfo(platform, CL_PLATFORM_EXTENSIONS, 0, NULL, &size));
  char *ext = malloc(size + 1);
  if (!ext) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory reading platform extensions");
  cl_int err = clGetPlatformInfo(platform, CL_PLATFORM_EXTENSIONS, size, ext, NULL);
  ext[size] = '\0';
  int icd = err == CL_SUCCESS && has_extension(ext, "cl_khr_icd");
  free(ext);
  if (err != CL_SUCCESS) return clmoe__cl_error(err, "clGetPlatformInfo(CL_PLATFORM_EXTENSIONS)",
                                                __FILE__, __LINE__);
  if (icd && clGetPlatformInfo(platform, CLMOE_PLATFORM_ICD_SUFFIX, len - 1, out, NULL) != CL_SUCCESS)
    out[0] = '\0';
  out[len - 1] = '\0';
  return CLMOE_OK;
}

static void choose_tunables(clmoe_device_caps *c)
{
  /* One work-group size for the simple 1-D kernels: 256 on GPUs (8 warps, 4 wavefronts),
   * smaller on CPUs where a work-group is a loop on one core. Never above the limit. */
  unsigned wg = c->is_gpu ? 256 : 64;
  while (wg > c->max_work_group_size && wg > 1) wg /= 2;
  c->wg_size = wg;
}

clmoe_status clmoe__device_caps(cl_platform_id platform, cl_device_id dev, int pindex,
                                int dindex, clmoe_device_caps *c)
{
  memset(c, 0, sizeof *c);
  c->platform_index = pindex;
  c->device_index = dindex;
  c->inline_ptx = -1;
  CLMOE_CL(clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof c->platform_name - 1,
                             c->platform_name, NULL));
  CLMOE_CL(clGetPlatformInfo(platform, CL_PLATFORM_VERSION, sizeof c->platform_version - 1,
                             c->platform_version, NULL));
  CLMOE_CL(clGetPlatformInfo(platform, CL_PLATFORM_VENDOR, sizeof c->platform_vendor - 1,
                             c->platform_vendor, NULL));
  CLMOE_TRY(platform_icd_suffix(platform, c->icd_suffix, sizeof c->icd_suffix));
  c->impl = clmoe_impl_identify(c->platform_name, c->platform_vendor, c->platform_version,
                                c->icd_suffix);
  CLMOE_TRY(device_string(dev, CL_DEVICE_NAME, c->device_name, sizeof c->device_name));
  CLMOE_TRY(device_string(dev, CL_DEVICE_VENDOR, c->vendor_name, sizeof c->vendor_name));
  CLMOE_TRY(device_string(dev, CL_DEVICE_VERSION, c->device_version, sizeof c->device_version));
  CLMOE_TRY(device_string(dev, CL_DRIVER_VERSION, c->driver_version, sizeof c->driver_version));
  CLMOE_TRY(device_string(dev, CL_DEVICE_OPENCL_C_VERSION, c->opencl_c_version,
                          sizeof c->opencl_c_version));
  c->vendor = classify_vendor(c->platform_name, c->vendor_name);
  if (sscanf(c->opencl_c_version, "OpenCL C %d.%d", &c->opencl_c_major, &c->opencl_c_minor) != 2)
    c->opencl_c_major = 1, c->opencl_c_minor = 0;

  cl_device_type type = 0;
  cl_uint units = 0, clock = 0;
  cl_ulong gmem = 0, lmem = 0, maxalloc = 0;
  cl_device_local_mem_type ltype = CL_GLOBAL;
  size_t wg = 0;
  CLMOE_CL(clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL));
  CLMOE_CL(clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL));
  CLMOE_CL(clGetDeviceInfo(dev, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof clock, &clock, NULL));
  CLMOE_CL(clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem, &gmem, NULL));
  CLMOE_CL(clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof maxalloc, &maxalloc, NULL));
  CLMOE_CL(clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL));
  CLMOE_CL(clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_TYPE, sizeof ltype, &ltype, NULL));
  CLMOE_CL(clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL));
  cl_uint vecf = 1;
  CLMOE_CL(clGetDeviceInfo(dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof vecf, &vecf, NULL));
  c->float_vector_width = vecf ? vecf : 1;
  c->is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
  c->is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  c->is_accelerator = (type & CL_DEVICE_TYPE_ACCELERATOR) != 0;
  c->compute_units = units;
  c->clock_mhz = clock;
  c->global_mem_bytes = gmem;
  c->max_alloc_bytes = maxalloc;
  c->local_mem_bytes = lmem;
  /* CLMOE_LOCAL_MEM_BYTES: the local memory kernels may plan for, in place of the reported
   * size (tuning experiments: NVIDIA reports 48 KB, its compiler accepts a little more);
   * a context applies its own value of the knob (context.c). */
  clmoe__knob_value lm;
  CLMOE_TRY(clmoe__knob_env(CLMOE_K_LOCAL_MEM_BYTES, &lm));
  if (lm.source == CLMOE__KNOB_ENV) c->local_mem_bytes = (uint64_t)lm.i; /* set in the environment */
  clmoe__knob_value_free(&lm);
  c->local_mem_dedicated = ltype == CL_LOCAL;
  c->max_work_group_size = wg;

  char *ext = device_extensions(dev);
  if (!ext) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "could not read the extension list of %s",
                                c->device_name);
  c->has_fp64 = has_extension(ext, "cl_khr_fp64");
  c->has_fp16 = has_extension(ext, "cl_khr_fp16");
  c->has_int64_atomics = has_extension(ext, "cl_khr_int64_base_atomics");
  c->has_subgroups = has_extension(ext, "cl_khr_subgroups") || has_extension(ext, "cl_intel_subgroups");
  if (!c->has_subgroups) {
    /* OpenCL 3.0 devices report subgroups through a query instead of the extension. */
    cl_uint nsub = 0;
    if (clGetDeviceInfo(dev, CLMOE_MAX_NUM_SUB_GROUPS, sizeof nsub, &nsub, NULL) == CL_SUCCESS &&
        nsub > 0)
      c->has_subgroups = 1;
  }

  /* PCI location: the Khronos extension first, then the vendor queries. */
  if (has_extension(ext, "cl_khr_pci_bus_info")) {
    pci_bus_info_khr info;
    if (clGetDeviceInfo(dev, CL_DEVICE_PCI_BUS_INFO_KHR, sizeof info, &info, NULL) == CL_SUCCESS) {
      c->pci_known = 1;
      c->pci_domain = info.domain, c->pci_bus = info.bus;
      c->pci_device = info.device, c->pci_function = info.function;
    }
  }
  if (has_extension(ext, "cl_nv_device_attribute_query")) {
    cl_uint major = 0, minor = 0, warp = 0;
    if (clGetDeviceInfo(dev, CLMOE_NV_CC_MAJOR, sizeof major, &major, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(dev, CLMOE_NV_CC_MINOR, sizeof minor, &minor, NULL) == CL_SUCCESS)
      c->nv_cc_major = (int)major, c->nv_cc_minor = (int)minor;
    if (clGetDeviceInfo(dev, CLMOE_NV_WARP_SIZE, sizeof warp, &warp, NULL) == CL_SUCCESS)
      c->warp_size = (int)warp;
    cl_uint bus = 0, slot = 0, domain = 0;
    if (!c->pci_known &&
        clGetDeviceInfo(dev, CLMOE_NV_PCI_BUS, sizeof bus, &bus, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(dev, CLMOE_NV_PCI_SLOT, sizeof slot, &slot, NULL) == CL_SUCCESS) {
      if (clGetDeviceInfo(dev, CLMOE_NV_PCI_DOMAIN, sizeof domain, &domain, NULL) != CL_SUCCESS)
        domain = 0;
      c->pci_known = 1;
      c->pci_domain = domain, c->pci_bus = bus;
      c->pci_device = slot >> 3, c->pci_function = slot & 7; /* slot holds device<<3 | function */
    }
  }
  if (has_extension(ext, "cl_amd_device_attribute_query")) {
    amd_topology topo;
    if (!c->pci_known &&
        clGetDeviceInfo(dev, CLMOE_AMD_TOPOLOGY, sizeof topo, &topo, NULL) == CL_SUCCESS &&
        topo.raw.type == 1 /* CL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD */) {
      c->pci_known = 1;
      c->pci_bus = (unsigned char)topo.pcie.bus;
      c->pci_device = (unsigned char)topo.pcie.device;
      c->pci_function = (unsigned char)topo.pcie.function;
    }
    cl_uint wave = 0;
    if (clGetDeviceInfo(dev, CLMOE_AMD_WAVEFRONT, sizeof wave, &wave, NULL) == CL_SUCCESS)
      c->warp_size = (int)wave;
  }
  free(ext);
  choose_tunables(c);
  return CLMOE_OK;
}

clmoe_status clmoe_devices_list(clmoe_device_caps **list, int *count)
{
  *list = NULL;
  *count = 0;
  cl_uint nplat = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &nplat);
  if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && nplat == 0))
    return clmoe__error(CLMOE_ERR_NO_DEVICE,
                        "no OpenCL platform found: install a driver (for the CPU on Debian/Ubuntu: "
                        "apt-get install pocl-opencl-icd; for GPUs the vendor's OpenCL driver), "
                        "and check /etc/OpenCL/vendors or OCL_ICD_VENDORS");
  if (err != CL_SUCCESS) return clmoe__cl_error(err, "clGetPlatformIDs", __FILE__, __LINE__);
  cl_platform_id *plats = calloc(nplat, sizeof *plats);
  if (!plats) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory listing platforms");
  clmoe_status st = CLMOE_OK;
  clmoe_device_caps *out = NULL;
  int n = 0, cap = 0;
  CLMOE_CL_GOTO(st, clGetPlatformIDs(nplat, plats, NULL), done);
  for (cl_uint p = 0; p < nplat; p++) {
    cl_uint ndev = 0;
    err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev);
    if (err == CL_DEVICE_NOT_FOUND || ndev == 0) continue; /* a platform with no devices */
    CLMOE_CL_GOTO(st, err, done);
    cl_device_id devs[64];
    if (ndev > 64) ndev = 64;
    CLMOE_CL_GOTO(st, clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, devs, NULL), done);
    for (cl_uint d = 0; d < ndev; d++) {
      if (n == cap) {
        cap = cap ? 2 * cap : 8;
        clmoe_device_caps *grown = realloc(out, (size_t)cap * sizeof *out);
        if (!grown) {
          st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "out of host memory listing devices");
          goto done;
        }
        out = grown;
      }
      CLMOE_TRY_GOTO(st, clmoe__device_caps(plats[p], devs[d], (int)p, (int)d, &out[n]), done);
      n++;
    }
  }
  if (n == 0)
    st = clmoe__error(CLMOE_ERR_NO_DEVICE,
                      "OpenCL platforms exist but none has a device: install a driver (for the "
                      "CPU on Debian/Ubuntu: apt-get install pocl-opencl-icd)");
done:
  free(plats);
  if (st != CLMOE_OK) {
    free(out);
    return st;
  }
  *list = out;
  *count = n;
  return CLMOE_OK;
}
