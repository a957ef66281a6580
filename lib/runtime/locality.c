/* Device locality through hwloc (PCI object -> nearest non-I/O ancestor). */
#include "clmoe/locality.h"
#include "internal.h"

#include <hwloc.h>
#include <stdio.h>
#include <string.h>

static void whole_machine(hwloc_topology_t topo, clmoe_locality *loc)
{
  hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(topo);
  hwloc_bitmap_list_snprintf(loc->cpuset, sizeof loc->cpuset, all);
  loc->ncores = loc->machine_cores;
}

clmoe_status clmoe_device_locality(const clmoe_device_caps *dev, clmoe_locality *loc)
{
  memset(loc, 0, sizeof *loc);
  loc->numa_node = -1;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0)
    return clmoe__error(CLMOE_ERR_HWLOC, "hwloc_topology_init failed");
  clmoe_status st = CLMOE_OK;
  if (hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 ||
      hwloc_topology_load(topo) != 0) {
    st = clmoe__error(CLMOE_ERR_HWLOC, "hwloc could not load the machine's topology");
    goto done;
  }
  loc->machine_cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  if (!dev->pci_known) {
    whole_machine(topo, loc);
    snprintf(loc->note, sizeof loc->note,
             dev->is_cpu ? "a CPU device runs on the host's cores: no PCI locality (all cores listed)"
                         : "the driver reports no PCI location for this device: locality unknown");
    goto done;
  }
  snprintf(loc->pci_address, sizeof loc->pci_address, "%04x:%02x:%02x.%x", dev->pci_domain,
           dev->pci_bus, dev->pci_device, dev->pci_function);
  hwloc_obj_t pci = hwloc_get_pcidev_by_busid(topo, dev->pci_domain, dev->pci_bus,
                                              dev->pci_device, dev->pci_function);
  if (!pci) {
    whole_machine(topo, loc);
    snprintf(loc->note, sizeof loc->note,
             "hwloc does not see PCI device %s (no PCI access in this environment?)",
             loc->pci_address);
    goto done;
  }
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, pci);
  if (!anc || !anc->cpuset) {
    whole_machine(topo, loc);
    snprintf(loc->note, sizeof loc->note, "hwloc found %s but no CPU-side ancestor",
             loc->pci_address);
    goto done;
  }
  loc->known = 1;
  hwloc_bitmap_list_snprintf(loc->cpuset, sizeof loc->cpuset, anc->cpuset);
  loc->ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, anc->cpuset, HWLOC_OBJ_CORE);
  if (anc->nodeset && !hwloc_bitmap_iszero(anc->nodeset))
    loc->numa_node = hwloc_bitmap_first(anc->nodeset);
done:
  hwloc_topology_destroy(topo);
  return st;
}
