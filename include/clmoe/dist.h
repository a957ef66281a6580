/* Distributed runs: MPI ranks, the device of each local rank, CPU binding and the per-rank
 * report.
 *
 * The library builds with or without MPI (configure --with-mpi). Without it, or when the
 * process was not started by an MPI launcher, a clmoe_dist is a single rank (rank 0 of 1)
 * and every collective is a local copy, so callers need no #ifdef. This header never
 * includes mpi.h; dist_mpi.h hands out the communicator for code that needs it.
 *
 * Device per local rank (clmoe_dist_choose_device), with the spec from --device or
 * CLMOE_DEVICE:
 *   (none)             the local rank's GPU in list order (local rank i takes GPU i mod
 *                      the number of GPUs), else the first CPU device for every rank
 *   gpu | cpu | accelerator
 *                      the local rank's device of that type, in order (i mod count)
 *   an implementation  (clmoe_impl_parse: pocl, portable, intel, nvidia, cuda, amd, ...)
 *                      the local rank's device of that implementation, in order (i mod
 *                      count); with none, clmoe_device_choose's error
 *   P:D or a name      the same device for every rank (as for one process)
 *   A,B,C              a comma-separated list of the forms above: local rank i uses
 *                      entry i mod (entries), e.g. "0:0,0:1" or "pocl,intel"
 * Vendor visibility variables (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES,
 * ZE_AFFINITY_MASK, ...) are applied by the drivers before clmoe sees the devices; clmoe
 * reports them. When a launcher gives each rank one visible GPU, "local rank mod count"
 * picks that GPU.
 *
 * Binding (clmoe_dist_bind), policy from CLMOE_BIND (auto when unset):
 *   auto  if the process is already bound (its cpuset is narrower than the cores it may
 *         use), keep it: "bound by the launcher"; when the device is a CPU and that binding
 *         holds fewer cores than the rank's share (allowed cores / local ranks), the
 *         binding's warning says so and names the fix (mpirun --bind-to none, or --map-by
 *         slot:PE=share). Otherwise bind to the cores nearest the device (locality.h:
 *         its NUMA node); a CPU device (no PCI locality) gets the local rank's even share
 *         of the machine's cores; a GPU of unknown locality is not bound.
 *   none  never bind; report the current cpuset. */
#ifndef CLMOE_DIST_H
#define CLMOE_DIST_H

#include "locality.h"
#include "runtime.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clmoe_dist clmoe_dist;

/* How this process was started, read from the launchers' environment (no MPI call): by an
 * MPI launcher (mpirun/mpiexec: OMPI_COMM_WORLD_*, PMI_*, PMIX_RANK, MPI_LOCALNRANKS; srun
 * with --mpi=pmix or pmi2), by srun without a process-management interface (only SLURM_*
 * step variables: the tasks cannot form one MPI job), or by hand. */
typedef struct clmoe_launch {
  int ranks;      /* processes the launcher started; 0 when it does not say (PMIx alone) */
  int rank;       /* this one's index (0 when started by hand) */
  int local_rank; /* its index on this host (SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, ...) */
  int mpi;        /* 1: an MPI launch (clmoe_dist_init will see the ranks) */
  int srun;       /* 1: a task of an srun step (SLURM_STEP_NUM_TASKS set) */
  char ranks_from[40];   /* the variable ranks came from; "" when started by hand */
  char slurm_job[32];    /* SLURM_JOB_ID, "" outside Slurm */
  char slurm_nodes[256]; /* the step's node list (SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST) */
} clmoe_launch;

/* Fills l from the environment. */
CLMOE_API void clmoe_launch_detect(clmoe_launch *l);
/* CLMOE_OK, or CLMOE_ERR_UNSUPPORTED with a message when l is several srun tasks without an
 * MPI launch (each would run alone, doing the same work and writing the same files). */
CLMOE_API clmoe_status clmoe_launch_check(const clmoe_launch *l);

/* Starts the distributed layer. When the process was started by an MPI launcher (mpirun,
 * mpiexec, srun with PMI/PMIx) or CLMOE_MPI=1, MPI is initialised (MPI_THREAD_FUNNELED)
 * unless the caller did that already, in which case clmoe uses MPI_COMM_WORLD and leaves
 * finalisation to the caller. CLMOE_MPI=0 forces a single rank. A build without MPI
 * started by a launcher fails (CLMOE_ERR_UNSUPPORTED) unless CLMOE_MPI=0, rather than run N
 * copies that each think they are alone; so does a step of several srun tasks without an
 * MPI launch (clmoe_launch_check). argc/argv may be NULL. */
CLMOE_API clmoe_status clmoe_dist_init(clmoe_dist **dist, int *argc, char ***argv);
/* Frees dist; finalises MPI only when clmoe_dist_init initialised it. */
CLMOE_API clmoe_status clmoe_dist_finalize(clmoe_dist *dist);

CLMOE_API int clmoe_dist_rank(const clmoe_dist *dist); /* in MPI_COMM_WORLD */
CLMOE_API int clmoe_dist_size(const clmoe_dist *dist);
CLMOE_API int clmoe_dist_local_rank(const clmoe_dist *dist); /* among the ranks of this host */
CLMOE_API int clmoe_dist_local_size(const clmoe_dist *dist);
/* 1 when MPI is in use, 0 for a single rank without MPI. */
CLMOE_API int clmoe_dist_uses_mpi(const clmoe_dist *dist);
/* 1 when the library was built with MPI. */
CLMOE_API int clmoe_dist_built_with_mpi(void);
/* One sentence saying how the ranks came about ("MPI: 4 ranks on 2 hosts, initialised by
 * clmoe", "single rank: not started by an MPI launcher", ...). */
CLMOE_API const char *clmoe_dist_describe(const clmoe_dist *dist);

CLMOE_API clmoe_status clmoe_dist_barrier(clmoe_dist *dist);
/* Ends the whole job with `code` (MPI_Abort), for an app whose rank hit an error, so the
 * other ranks do not hang. Without MPI it returns (the caller exits). */
CLMOE_API void clmoe_dist_abort(clmoe_dist *dist, int code);

/* Sums buf over all ranks in place: every rank gets the sum. Collective; any count (sent
 * in pieces of at most INT_MAX). int64 sums are exact (QB histogram counts, token counts);
 * float sums follow MPI's reduction order, which may differ with the number of ranks. */
CLMOE_API clmoe_status clmoe_dist_allreduce_sum_i64(clmoe_dist *dist, int64_t *buf, size_t count);
CLMOE_API clmoe_status clmoe_dist_allreduce_sum_f64(clmoe_dist *dist, double *buf, size_t count);
CLMOE_API clmoe_status clmoe_dist_allreduce_sum_f32(clmoe_dist *dist, float *buf, size_t count);

/* Copies root's contents of t to every rank (collective; t has the same dtype and shape on
 * every rank). For state that every rank must hold bit for bit, such as a selection bias
 * each rank's device updated with its own rounding. One rank: nothing to do. */
CLMOE_API clmoe_status clmoe_dist_broadcast_tensor(clmoe_dist *dist, clmoe_tensor *t, int root);

/* Time and bytes of this rank's collectives since the last reset, for the step-time split
 * of distributed runs: the expert exchange (include/clmoe/dist_exchange.h) counts itself; callers add
 * what they time themselves (the gradient all-reduce, through clmoe_dist_stats_add). Bytes
 * are those sent to other ranks (not to itself). Wall time includes the host-side packing
 * and waiting for the slowest rank. */
typedef struct clmoe_dist_stats {
  double dispatch_s, combine_s, allreduce_s;
  int64_t dispatch_bytes, combine_bytes, allreduce_bytes;
  int64_t dispatches, combines, allreduces; /* calls */
} clmoe_dist_stats;
CLMOE_API void clmoe_dist_stats_get(const clmoe_dist *dist, clmoe_dist_stats *stats);
CLMOE_API void clmoe_dist_stats_reset(clmoe_dist *dist);
/* Adds to the all-reduce counters (one call). */
CLMOE_API void clmoe_dist_stats_add_allreduce(clmoe_dist *dist, double seconds, int64_t bytes);

/* Picks the device of a local rank as described above. Writes the index into list and a
 * sentence saying why. Pure (no MPI): testable with any list. */
CLMOE_API clmoe_status clmoe_dist_choose_device(const clmoe_device_caps *list, int count,
                                                const char *spec, int local_rank, int local_size,
                                                int *chosen, char *why, size_t why_len);
/* The vendor visibility variables that are set, as "NAME=value; NAME=value", or "none". */
CLMOE_API void clmoe_dist_visibility(char *buf, size_t len);

typedef enum clmoe_bind_source {
  CLMOE_BIND_LAUNCHER = 0,    /* already bound by mpirun/srun: kept */
  CLMOE_BIND_DEVICE_NUMA = 1, /* bound by clmoe to the cores near the device */
  CLMOE_BIND_CPU_SHARE = 2,   /* CPU device: bound by clmoe to the local rank's share */
  CLMOE_BIND_NONE = 3         /* not bound (CLMOE_BIND=none, or unknown locality) */
} clmoe_bind_source;

typedef struct clmoe_binding {
  clmoe_bind_source source;
  char cpuset[256]; /* the cores the process runs on afterwards, as a list "0-7,16" */
  int ncores;       /* physical cores in that set */
  char note[192];   /* one sentence: what was decided and why */
  char warning[320]; /* "" or one sentence: a CPU device's rank bound by the launcher to
                      * fewer cores than its share, and the fix */
} clmoe_binding;

/* Short name of a binding source: "launcher", "device-numa", "cpu-share", "none". */
CLMOE_API const char *clmoe_bind_source_name(clmoe_bind_source source);

/* Decides the binding without applying it. topology: NULL for this machine (with the
 * process's current binding), or an hwloc synthetic description ("pack:2 numa:2 core:4
 * pu:2") with `current` the cpuset the process is assumed to have (a list such as "0-3";
 * NULL: all of it). policy: "auto", "none" or NULL (CLMOE_BIND, else auto). */
CLMOE_API clmoe_status clmoe_dist_bind_plan(const char *topology, const char *current,
                                            const clmoe_locality *loc, int device_is_cpu,
                                            int local_rank, int local_size, const char *policy,
                                            clmoe_binding *out);
/* Decides on this machine and applies it (hwloc_set_cpubind on the whole process). Call
 * before creating the OpenCL context so that driver threads inherit the binding. */
CLMOE_API clmoe_status clmoe_dist_bind(const clmoe_locality *loc, int device_is_cpu, int local_rank,
                                       int local_size, const char *policy, clmoe_binding *out);

/* One rank's placement, fixed-size so that it can be gathered as bytes. */
typedef struct clmoe_rank_report {
  char host[64];
  int rank, size, local_rank, local_size;
  int platform_index, device_index;
  char device[128];      /* device name */
  char device_why[192];  /* why this device */
  char pci[32];          /* "" when unknown */
  int numa_node;         /* -1 when unknown */
  char bind_source[16];  /* clmoe_bind_source_name */
  char cpuset[256];
  int ncores;
  char bind_note[192];
  char bind_warning[320]; /* clmoe_binding.warning: "" when the binding is fine */
  char visibility[192];  /* clmoe_dist_visibility */
} clmoe_rank_report;

/* Chooses the device of this rank, finds its locality, binds (policy as above) and fills
 * the report. list/count from clmoe_devices_list; spec: --device or NULL. */
CLMOE_API clmoe_status clmoe_dist_place(clmoe_dist *dist, const clmoe_device_caps *list, int count,
                                        const char *spec, const char *bind_policy, int *chosen,
                                        clmoe_rank_report *report);
/* Gathers every rank's report to rank 0 (MPI_Gather of the bytes). all: clmoe_dist_size
 * entries on rank 0, ignored (may be NULL) on the others. Collective. */
CLMOE_API clmoe_status clmoe_dist_gather_reports(clmoe_dist *dist, const clmoe_rank_report *mine,
                                                 clmoe_rank_report *all);
/* The binding warnings of gathered reports in one sentence for rank 0 to print once: the
 * first rank warned, its warning and how many more ranks have one. Returns how many ranks
 * have a warning; buf gets "" when none has. */
CLMOE_API int clmoe_dist_binding_warnings(const clmoe_rank_report *all, int size, char *buf,
                                          size_t len);

#ifdef __cplusplus
}
#endif
#endif
