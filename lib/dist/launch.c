/* How a process was started (include/clmoe/dist.h: clmoe_launch), from the variables that
 * MPI launchers and Slurm put in every process they start. Reads the environment only, so
 * apps can ask before (or without) initialising MPI. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/dist.h"
#include "runtime/internal.h"

/* A non-negative integer variable, or -1 when unset or not one. */
static long env_count(const char *name)
{
  const char *v = getenv(name);
  if (!v || !*v) return -1;
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  return errno || *end || n < 0 || n > (1L << 30) ? -1 : n;
}

/* The first of names that is set: its value through *value, its name returned. */
static const char *first_set(const char *const *names, size_t n, long *value)
{
  for (size_t i = 0; i < n; i++)
    if ((*value = env_count(names[i])) >= 0) return names[i];
  return NULL;
}

#define FIRST_SET(names, value) first_set(names, sizeof names / sizeof names[0], value)

void clmoe_launch_detect(clmoe_launch *l)
{
  static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
  static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
  static const char *const local_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  static const char *const mpi_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                                         "MPI_LOCALNRANKS"};
  memset(l, 0, sizeof *l);
  long v = -1, tasks = env_count("SLURM_STEP_NUM_TASKS");
  const char *from;
  for (size_t i = 0; i < sizeof mpi_vars / sizeof mpi_vars[0]; i++)
    if (getenv(mpi_vars[i])) l->mpi = 1;
  l->srun = tasks >= 0;
  l->ranks = 1;
  if ((from = FIRST_SET(size_vars, &v)) != NULL) {
    l->ranks = (int)v;
  } else if (l->srun) { /* srun's count (also with PMIx, which names no size) */
    l->ranks = (int)tasks;
    from = "SLURM_STEP_NUM_TASKS";
  } else if (l->mpi) {
    l->ranks = 0; /* a launch whose size only MPI knows */
  }
  if (from) snprintf(l->ranks_from, sizeof l->ranks_from, "%s", from);
  if (FIRST_SET(rank_vars, &v)) l->rank = (int)v;
  if (FIRST_SET(local_vars, &v)) l->local_rank = (int)v;
  const char *job = getenv("SLURM_JOB_ID"), *nodes = getenv("SLURM_STEP_NODELIST");
  if (!nodes) nodes = getenv("SLURM_JOB_NODELIST");
  snprintf(l->slurm_job, sizeof l->slurm_job, "%s", job ? job : "");
  snprintf(l->slurm_nodes, sizeof l->slurm_nodes, "%s", nodes ? nodes : "");
}

clmoe_status clmoe_launch_check(const clmoe_launch *l)
{
  if (!l->srun || l->mpi || l->ranks <= 1) return CLMOE_OK;
  return clmoe__error(CLMOE_ERR_UNSUPPORTED,
                      "srun started %d tasks (task %d, job %s on %s) without an MPI launch: no PMIx or PMI "
                      "variables are set, so each task would run alone and do the same work; start the step "
                      "with srun --mpi=pmix (or pmi2; `srun --mpi=list` shows what this cluster has) or with "
                      "mpirun", l->ranks, l->rank, l->slurm_job[0] ? l->slurm_job : "?",
                      l->slurm_nodes[0] ? l->slurm_nodes : "?");
}
