/* Where a device sits in the machine, from hwloc: its PCI address, nearest NUMA node and
 * the cores close to it (what MPI ranks should be bound to). */
#ifndef CLMOE_LOCALITY_H
#define CLMOE_LOCALITY_H

#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clmoe_locality {
  int known;            /* 1: hwloc found the device's PCI object and its ancestors */
  char pci_address[32]; /* "0000:17:00.0", or "" when the driver reports no PCI location */
  int numa_node;        /* OS index of the nearest NUMA node, -1 when unknown */
  char cpuset[256];     /* nearby processing units as a list, e.g. "0-15,32-47" */
  int ncores;           /* physical cores in that set */
  int machine_cores;    /* cores of the whole machine */
  char note[256];       /* when known == 0: why, in one sentence */
} clmoe_locality;

/* Fills loc for a device. A device without a PCI location (a CPU driver such as PoCL) is
 * not an error: loc->known is 0, cpuset covers the whole machine and loc->note says why. */
CLMOE_API clmoe_status clmoe_device_locality(const clmoe_device_caps *dev, clmoe_locality *loc);

#ifdef __cplusplus
}
#endif
#endif
