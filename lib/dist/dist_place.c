/* Placement of a rank: its device (by local rank), its CPU binding (hwloc), its report.
 * The rules are documented in dist.h. */
#include "runtime/internal.h"

#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "clmoe/dist.h"

static void copy_str(char *dst, size_t len, const char *src)
{
  size_t n = strlen(src);
  if (n >= len) n = len - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* ---- device ------------------------------------------------------------------------------ */

/* What a spec names as a class of devices: 1 gpu, 2 cpu, 3 accelerator, 4 an
 * implementation (*impl: "pocl", "nvidia", ...); 0 anything else. */
static int device_class(const char *spec, clmoe_impl *impl)
{
  if (!strcasecmp(spec, "gpu")) return 1;
  if (!strcasecmp(spec, "cpu")) return 2;
  if (!strcasecmp(spec, "accelerator")) return 3;
  if (clmoe_impl_parse(spec, impl)) return 4;
  return 0;
}

static int in_class(const clmoe_device_caps *c, int cls, clmoe_impl impl)
{
  switch (cls) {
  case 1: return c->is_gpu;
  case 2: return c->is_cpu;
  case 3: return c->is_accelerator;
  default: return clmoe_device_impl(c) == impl;
  }
}

/* The (local_rank mod n)-th device of a class; n = how many there are. */
static int nth_of_class(const clmoe_device_caps *list, int count, int cls, clmoe_impl impl,
                        int local_rank, int *n)
{
  *n = 0;
  for (int i = 0; i < count; i++) *n += in_class(&list[i], cls, impl);
  if (*n == 0) return -1;
  int want = local_rank % *n;
  for (int i = 0; i < count; i++)
    if (in_class(&list[i], cls, impl) && want-- == 0) return i;
  return -1;
}

static clmoe_status choose_one(const clmoe_device_caps *list, int count, const char *spec,
                               const char *source, int local_rank, int local_size, int *chosen,
                               char *why, size_t why_len)
{
  clmoe_impl impl = CLMOE_IMPL_OTHER;
  int cls = device_class(spec, &impl), n = 0;
  int i = cls ? nth_of_class(list, count, cls, impl, local_rank, &n) : -1;
  if (i >= 0) {
    char what[64] = "that type";
    if (cls == 4) snprintf(what, sizeof what, "the %s implementation", clmoe_impl_title(impl));
    *chosen = i;
    snprintf(why, why_len, "%s=%s: device %d of %d of %s for local rank %d of %d%s", source,
             spec, local_rank % n, n, what, local_rank, local_size,
             local_size > n ? " (shared: more local ranks than devices)" : "");
    return CLMOE_OK;
  }
  if (cls && cls != 4)
    return clmoe__error(CLMOE_ERR_NO_DEVICE, "%s=%s: there is no device of that type (clmoe-info "
                        "lists the devices)", source, spec);
  /* a name, or an implementation without devices (for clmoe_device_choose's message) */
  char inner[256];
  clmoe_status st = clmoe_device_choose(list, count, spec, chosen, inner, sizeof inner);
  if (st != CLMOE_OK) {
    clmoe__append_error(" (from %s)", source);
    return st;
  }
  snprintf(why, why_len, "%s=%s: the same device for every rank", source, spec);
  return CLMOE_OK;
}

clmoe_status clmoe_dist_choose_device(const clmoe_device_caps *list, int count, const char *spec,
                                      int local_rank, int local_size, int *chosen, char *why,
                                      size_t why_len)
{
  char scratch[256];
  if (!why) why = scratch, why_len = sizeof scratch;
  if (!list || count <= 0 || !chosen)
    return clmoe__error(CLMOE_ERR_NO_DEVICE, "clmoe_dist_choose_device: no OpenCL device to choose from");
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_dist_choose_device: local rank %d of %d",
                        local_rank, local_size);
  const char *source = "--device";
  clmoe_status kst = CLMOE_OK;
  if (!spec || !*spec) spec = clmoe__knob_getenv(CLMOE_K_DEVICE, &kst), source = "CLMOE_DEVICE";
  if (kst != CLMOE_OK) return kst;
  if (!spec || !*spec) {
    int n = 0, i = nth_of_class(list, count, 1, CLMOE_IMPL_OTHER, local_rank, &n);
    if (i >= 0) {
      *chosen = i;
      snprintf(why, why_len, "default: GPU %d of %d for local rank %d of %d%s", local_rank % n, n,
               local_rank, local_size, local_size > n ? " (shared: more local ranks than GPUs)" : "");
      return CLMOE_OK;
    }
    i = nth_of_class(list, count, 2, CLMOE_IMPL_OTHER, 0, &n);
    *chosen = i >= 0 ? i : 0;
    snprintf(why, why_len, "default: no GPU, the %s%s", i >= 0 ? "first CPU device" : "first device",
             local_size > 1 ? " (shared by the local ranks)" : "");
    return CLMOE_OK;
  }
  if (!strchr(spec, ','))
    return choose_one(list, count, spec, source, local_rank, local_size, chosen, why, why_len);

  /* A list: local rank i takes entry i mod (number of entries). */
  int entries = 1;
  for (const char *p = spec; *p; p++) entries += *p == ',';
  int want = local_rank % entries, k = 0;
  const char *start = spec;
  for (const char *p = spec;; p++) {
    if (*p != ',' && *p) continue;
    size_t len = (size_t)(p - start);
    if (len == 0)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s=%s: entry %d of the list is empty", source,
                          spec, k + 1);
    if (k == want) {
      char entry[128], inner[256];
      if (len >= sizeof entry)
        return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: entry %d is too long", source, k + 1);
      memcpy(entry, start, len);
      entry[len] = '\0';
      CLMOE_TRY(choose_one(list, count, entry, source, local_rank / entries, 1, chosen, inner,
                           sizeof inner));
      snprintf(why, why_len, "%s=%s: entry %d of %d (%s) for local rank %d", source, spec, k + 1,
               entries, entry, local_rank);
      return CLMOE_OK;
    }
    if (!*p) break;
    start = p + 1, k++;
  }
  return clmoe__error(CLMOE_ERR_INTERNAL, "clmoe_dist_choose_device: list entry not found");
}

void clmoe_dist_visibility(char *buf, size_t len)
{
  static const char *const names[] = {"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                      "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
                                      "ZE_AFFINITY_MASK"};
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *v = getenv(names[i]);
    if (!v || used >= len) continue;
    int w = snprintf(buf + used, len - used, "%s%s=%s", used ? "; " : "", names[i], v);
    if (w > 0) used += (size_t)w;
  }
  if (!buf[0]) snprintf(buf, len, "none");
}

/* ---- binding ----------------------------------------------------------------------------- */

const char *clmoe_bind_source_name(clmoe_bind_source s)
{
  switch (s) {
  case CLMOE_BIND_LAUNCHER: return "launcher";
  case CLMOE_BIND_DEVICE_NUMA: return "device-numa";
  case CLMOE_BIND_CPU_SHARE: return "cpu-share";
  default: return "none";
  }
}

static clmoe_status parse_policy(const char *policy, int *none)
{
  const char *source = "the bind policy";
  clmoe_status kst = CLMOE_OK;
  if (!policy || !*policy) policy = clmoe__knob_getenv(CLMOE_K_BIND, &kst), source = "CLMOE_BIND";
  if (kst != CLMOE_OK) return kst;
  if (!policy || !*policy || !strcmp(policy, "auto")) {
    *none = 0;
    return CLMOE_OK;
  }
  if (!strcmp(policy, "none")) {
    *none = 1;
    return CLMOE_OK;
  }
  return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s=%s: use auto or none", source, policy);
}

/* The local rank's even share of the machine's cores (hwloc_distrib over the cores). */
static clmoe_status cpu_share(hwloc_topology_t topo, int local_rank, int local_size,
                              hwloc_bitmap_t target)
{
  hwloc_bitmap_t *sets = calloc((size_t)local_size, sizeof *sets);
  if (!sets) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "binding: out of host memory");
  clmoe_status st = CLMOE_OK;
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  int core_depth = hwloc_get_type_depth(topo, HWLOC_OBJ_CORE);
  if (core_depth < 0) core_depth = hwloc_get_type_depth(topo, HWLOC_OBJ_PU);
  /* hwloc_distrib allocates the sets itself (freed below) */
  if (hwloc_distrib(topo, &root, 1, sets, (unsigned)local_size, core_depth, 0) != 0 ||
      !sets[local_rank]) {
    st = clmoe__error(CLMOE_ERR_HWLOC, "hwloc_distrib failed for %d local ranks", local_size);
    goto done;
  }
  if (hwloc_bitmap_copy(target, sets[local_rank]) != 0)
    st = clmoe__error(CLMOE_ERR_HWLOC, "hwloc_bitmap_copy failed");
done:
  for (int i = 0; i < local_size; i++) hwloc_bitmap_free(sets[i]);
  free(sets);
  return st;
}

/* The cores that `set` touches (a core counts when any of its PUs is in the set). */
static int cores_touched(hwloc_topology_t topo, hwloc_const_bitmap_t set)
{
  int n = 0;
  for (hwloc_obj_t core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, NULL); core;
       core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core))
    n += hwloc_bitmap_intersects(core->cpuset, set) != 0;
  return n;
}

/* A rank whose device is the CPU computes on the cores it is bound to. When the launcher
 * bound it to fewer than its share of the host (allowed cores / local ranks; Open MPI
 * binds each rank to one core by default when there are at most two), say so and how to
 * fix it, in out->warning. */
static void warn_short_share(hwloc_topology_t topo, hwloc_const_bitmap_t bound, int allowed_cores,
                             int local_size, clmoe_binding *out)
{
  int share = allowed_cores / local_size, have = cores_touched(topo, bound);
  if (share < 1 || have >= share) return;
  snprintf(out->warning, sizeof out->warning, "the CPU device runs on the %d core%s the launcher "
           "bound this rank to, but its share is %d of the %d cores (%d local rank%s): start it "
           "with mpirun --bind-to none (clmoe then binds each rank to its share) or mpirun "
           "--map-by slot:PE=%d", have, have == 1 ? "" : "s", share, allowed_cores, local_size,
           local_size == 1 ? "" : "s", share);
}

/* Decides the binding on a loaded topology; `target` receives the cpuset to bind to. */
static clmoe_status decide(hwloc_topology_t topo, hwloc_const_bitmap_t current,
                           const clmoe_locality *loc, int device_is_cpu, int local_rank,
                           int local_size, int policy_none, hwloc_bitmap_t target,
                           clmoe_binding *out)
{
  hwloc_const_bitmap_t allowed = hwloc_topology_get_allowed_cpuset(topo);
  hwloc_bitmap_t in_allowed = hwloc_bitmap_alloc();
  if (!in_allowed) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "hwloc_bitmap_alloc failed");
  clmoe_status st = CLMOE_OK;
  int allowed_cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, allowed, HWLOC_OBJ_CORE);
  if (hwloc_bitmap_and(in_allowed, current, allowed) != 0) {
    st = clmoe__error(CLMOE_ERR_HWLOC, "hwloc_bitmap_and failed");
    goto done;
  }
  int rc = 0;
  if (policy_none) {
    out->source = CLMOE_BIND_NONE;
    rc = hwloc_bitmap_copy(target, current);
    snprintf(out->note, sizeof out->note, "not bound by clmoe (CLMOE_BIND=none)");
  } else if (!hwloc_bitmap_iszero(in_allowed) && !hwloc_bitmap_isequal(in_allowed, allowed)) {
    out->source = CLMOE_BIND_LAUNCHER;
    rc = hwloc_bitmap_copy(target, current);
    snprintf(out->note, sizeof out->note, "bound by the launcher (narrower than the %d cores "
             "allowed): kept", allowed_cores);
    if (device_is_cpu) warn_short_share(topo, in_allowed, allowed_cores, local_size, out);
  } else if (loc->known && loc->cpuset[0]) {
    hwloc_bitmap_t near = hwloc_bitmap_alloc();
    if (!near || hwloc_bitmap_list_sscanf(near, loc->cpuset) != 0) {
      hwloc_bitmap_free(near);
      st = clmoe__error(CLMOE_ERR_HWLOC, "cannot parse the device's cpuset '%s'", loc->cpuset);
      goto done;
    }
    rc = hwloc_bitmap_and(target, near, allowed);
    hwloc_bitmap_free(near);
    if (rc == 0 && hwloc_bitmap_iszero(target)) {
      out->source = CLMOE_BIND_NONE;
      rc = hwloc_bitmap_copy(target, current);
      snprintf(out->note, sizeof out->note, "not bound: no allowed core near device %s",
               loc->pci_address);
    } else {
      out->source = CLMOE_BIND_DEVICE_NUMA;
      snprintf(out->note, sizeof out->note, "bound by clmoe to the cores of NUMA node %d nearest "
               "device %s", loc->numa_node, loc->pci_address);
    }
  } else if (device_is_cpu) {
    out->source = CLMOE_BIND_CPU_SHARE;
    CLMOE_TRY_GOTO(st, cpu_share(topo, local_rank, local_size, target), done);
    snprintf(out->note, sizeof out->note, "bound by clmoe: CPU device, local rank %d of %d gets "
             "its share of the %d cores", local_rank, local_size, allowed_cores);
  } else {
    out->source = CLMOE_BIND_NONE;
    rc = hwloc_bitmap_copy(target, current);
    snprintf(out->note, sizeof out->note, "not bound: the device's locality is unknown (%.140s)",
             loc->note);
  }
  if (rc != 0) {
    st = clmoe__error(CLMOE_ERR_HWLOC, "an hwloc bitmap operation failed while binding");
    goto done;
  }
  hwloc_bitmap_list_snprintf(out->cpuset, sizeof out->cpuset, target);
  out->ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, target, HWLOC_OBJ_CORE);
done:
  hwloc_bitmap_free(in_allowed);
  return st;
}

/* Plans (and with apply = 1, applies) the binding; see dist.h. */
static clmoe_status bind_common(const char *topology, const char *current, int apply,
                                const clmoe_locality *loc, int device_is_cpu, int local_rank,
                                int local_size, const char *policy, clmoe_binding *out)
{
  if (!loc || !out || local_size < 1 || local_rank < 0 || local_rank >= local_size)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "binding: bad arguments (local rank %d of %d)",
                        local_rank, local_size);
  memset(out, 0, sizeof *out);
  int none = 0;
  CLMOE_TRY(parse_policy(policy, &none));
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return clmoe__error(CLMOE_ERR_HWLOC, "hwloc_topology_init failed");
  clmoe_status st = CLMOE_OK;
  hwloc_bitmap_t cur = hwloc_bitmap_alloc(), target = hwloc_bitmap_alloc();
  if (!cur || !target) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "hwloc_bitmap_alloc failed");
    goto done;
  }
  if (topology && hwloc_topology_set_synthetic(topo, topology) != 0) {
    st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "hwloc rejects the synthetic topology '%s'", topology);
    goto done;
  }
  if (hwloc_topology_load(topo) != 0) {
    st = clmoe__error(CLMOE_ERR_HWLOC, "hwloc could not load the %s topology",
                      topology ? "synthetic" : "machine's");
    goto done;
  }
  if (topology) {
    int rc = current ? hwloc_bitmap_list_sscanf(cur, current)
                     : hwloc_bitmap_copy(cur, hwloc_topology_get_allowed_cpuset(topo));
    if (rc != 0) {
      st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "cannot parse the cpuset '%s'", current);
      goto done;
    }
  } else if (hwloc_get_cpubind(topo, cur, HWLOC_CPUBIND_PROCESS) != 0) {
    st = clmoe__error(CLMOE_ERR_HWLOC, "hwloc_get_cpubind failed: %s (set CLMOE_BIND=none to "
                      "skip binding)", strerror(errno));
    goto done;
  }
  CLMOE_TRY_GOTO(st, decide(topo, cur, loc, device_is_cpu, local_rank, local_size, none, target, out),
                 done);
  if (apply && !topology && !hwloc_bitmap_isequal(cur, target) &&
      hwloc_set_cpubind(topo, target, HWLOC_CPUBIND_PROCESS) != 0)
    st = clmoe__error(CLMOE_ERR_HWLOC, "hwloc_set_cpubind(%s) failed: %s (set CLMOE_BIND=none to "
                      "skip binding)", out->cpuset, strerror(errno));
done:
  hwloc_bitmap_free(cur);
  hwloc_bitmap_free(target);
  hwloc_topology_destroy(topo);
  return st;
}

clmoe_status clmoe_dist_bind_plan(const char *topology, const char *current,
                                  const clmoe_locality *loc, int device_is_cpu, int local_rank,
                                  int local_size, const char *policy, clmoe_binding *out)
{
  return bind_common(topology, current, 0, loc, device_is_cpu, local_rank, local_size, policy, out);
}

clmoe_status clmoe_dist_bind(const clmoe_locality *loc, int device_is_cpu, int local_rank,
                             int local_size, const char *policy, clmoe_binding *out)
{
  return bind_common(NULL, NULL, 1, loc, device_is_cpu, local_rank, local_size, policy, out);
}

/* ---- the whole placement ----------------------------------------------------------------- */

clmoe_status clmoe_dist_place(clmoe_dist *d, const clmoe_device_caps *list, int count,
                              const char *spec, const char *bind_policy, int *chosen,
                              clmoe_rank_report *r)
{
  if (!r || !chosen) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_dist_place: NULL output");
  memset(r, 0, sizeof *r);
  r->rank = clmoe_dist_rank(d), r->size = clmoe_dist_size(d);
  r->local_rank = clmoe_dist_local_rank(d), r->local_size = clmoe_dist_local_size(d);
  char why[256];
  CLMOE_TRY(clmoe_dist_choose_device(list, count, spec, r->local_rank, r->local_size, chosen, why,
                                     sizeof why));
  const clmoe_device_caps *c = &list[*chosen];
  clmoe_locality loc;
  CLMOE_TRY(clmoe_device_locality(c, &loc));
  clmoe_binding b;
  CLMOE_TRY(clmoe_dist_bind(&loc, c->is_cpu, r->local_rank, r->local_size, bind_policy, &b));
  if (gethostname(r->host, sizeof r->host) != 0)
    return clmoe__error(CLMOE_ERR_IO, "gethostname failed: %s", strerror(errno));
  r->host[sizeof r->host - 1] = '\0';
  r->platform_index = c->platform_index, r->device_index = c->device_index;
  copy_str(r->device, sizeof r->device, c->device_name);
  copy_str(r->device_why, sizeof r->device_why, why);
  copy_str(r->pci, sizeof r->pci, loc.pci_address);
  r->numa_node = loc.numa_node;
  copy_str(r->bind_source, sizeof r->bind_source, clmoe_bind_source_name(b.source));
  copy_str(r->cpuset, sizeof r->cpuset, b.cpuset);
  r->ncores = b.ncores;
  copy_str(r->bind_note, sizeof r->bind_note, b.note);
  copy_str(r->bind_warning, sizeof r->bind_warning, b.warning);
  clmoe_dist_visibility(r->visibility, sizeof r->visibility);
  return CLMOE_OK;
}

int clmoe_dist_binding_warnings(const clmoe_rank_report *all, int size, char *buf, size_t len)
{
  int n = 0, first = -1;
  for (int r = 0; all && r < size; r++)
    if (all[r].bind_warning[0]) n++, first = first < 0 ? r : first;
  if (buf && len) buf[0] = '\0';
  if (n == 0 || !buf || !len) return n;
  char more[48] = "";
  if (n > 1) snprintf(more, sizeof more, "; %d more rank%s likewise", n - 1, n == 2 ? "" : "s");
  snprintf(buf, len, "rank %d (local rank %d of %d on %s): %s%s", all[first].rank,
           all[first].local_rank, all[first].local_size, all[first].host, all[first].bind_warning,
           more);
  return n;
}
