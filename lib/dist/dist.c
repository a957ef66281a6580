/* Distributed layer: MPI start-up and shutdown, world and host-local ranks, the few
 * collectives the placement needs. Without MPI (or outside a launcher) one rank. */
#include "dist_mpi_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/dist.h"

struct clmoe_dist {
  int rank, size, local_rank, local_size, hosts;
  int uses_mpi;
  int owns_mpi; /* 1: clmoe_dist_init called MPI_Init_thread, so finalize ends MPI */
  char describe[192];
  clmoe_dist_stats stats;
#ifdef HAVE_MPI
  MPI_Comm world; /* a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN */
  MPI_Comm local; /* the ranks sharing this host's memory */
#endif
};

int clmoe_dist_built_with_mpi(void)
{
#ifdef HAVE_MPI
  return 1;
#else
  return 0;
#endif
}

int clmoe_dist_rank(const clmoe_dist *d) { return d ? d->rank : 0; }

void clmoe_dist_stats_get(const clmoe_dist *d, clmoe_dist_stats *s)
{
  if (d) *s = d->stats;
  else memset(s, 0, sizeof *s);
}
void clmoe_dist_stats_reset(clmoe_dist *d)
{
  if (d) memset(&d->stats, 0, sizeof d->stats);
}
void clmoe_dist_stats_add_allreduce(clmoe_dist *d, double seconds, int64_t bytes)
{
  if (!d) return;
  d->stats.allreduce_s += seconds, d->stats.allreduce_bytes += bytes, d->stats.allreduces++;
}
clmoe_dist_stats *clmoe__dist_stats(clmoe_dist *d) { return d ? &d->stats : NULL; }
int clmoe_dist_size(const clmoe_dist *d) { return d ? d->size : 1; }
int clmoe_dist_local_rank(const clmoe_dist *d) { return d ? d->local_rank : 0; }
int clmoe_dist_local_size(const clmoe_dist *d) { return d ? d->local_size : 1; }
int clmoe_dist_uses_mpi(const clmoe_dist *d) { return d ? d->uses_mpi : 0; }
const char *clmoe_dist_describe(const clmoe_dist *d) { return d ? d->describe : "single rank"; }

/* Variables that MPI launchers set in every process they start (Open MPI, PMIx, PMI-1/2
 * as used by MPICH's hydra and by srun --mpi=pmi2). */
static const char *launcher_variable(void)
{
  static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                      "PMI_SIZE", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (getenv(names[i])) return names[i];
  return NULL;
}

static void single_rank(clmoe_dist *d, const char *why)
{
  d->rank = 0, d->size = 1, d->local_rank = 0, d->local_size = 1, d->hosts = 1;
  d->uses_mpi = 0;
  snprintf(d->describe, sizeof d->describe, "single rank: %s", why);
}

#ifdef HAVE_MPI
clmoe_status clmoe__dist_mpi_error(int err, const char *call)
{
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", err);
  return clmoe__error(CLMOE_ERR_MPI, "%s failed: %s", call, text);
}

#define DIST_MPI_GOTO(st, call, label)                                                     \
  do {                                                                                     \
    int dist_e_ = (call);                                                                  \
    if (dist_e_ != MPI_SUCCESS) {                                                          \
      st = clmoe__dist_mpi_error(dist_e_, #call);                                          \
      goto label;                                                                          \
    }                                                                                      \
  } while (0)

#define DIST_MPI(call)                                                                     \
  do {                                                                                     \
    int dist_e_ = (call);                                                                  \
    if (dist_e_ != MPI_SUCCESS) return clmoe__dist_mpi_error(dist_e_, #call);              \
  } while (0)

/* Duplicates the world (so clmoe's messages never mix with the caller's), makes its errors
 * returned rather than fatal, and splits off the ranks of this host. */
static clmoe_status mpi_setup(clmoe_dist *d)
{
  clmoe_status st = CLMOE_OK;
  int is_first = 0, hosts = 0;
  DIST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &d->world));
  DIST_MPI_GOTO(st, MPI_Comm_set_errhandler(d->world, MPI_ERRORS_RETURN), fail);
  DIST_MPI_GOTO(st, MPI_Comm_rank(d->world, &d->rank), fail);
  DIST_MPI_GOTO(st, MPI_Comm_size(d->world, &d->size), fail);
  DIST_MPI_GOTO(st, MPI_Comm_split_type(d->world, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL,
                                        &d->local), fail);
  DIST_MPI_GOTO(st, MPI_Comm_set_errhandler(d->local, MPI_ERRORS_RETURN), fail_local);
  DIST_MPI_GOTO(st, MPI_Comm_rank(d->local, &d->local_rank), fail_local);
  DIST_MPI_GOTO(st, MPI_Comm_size(d->local, &d->local_size), fail_local);
  is_first = d->local_rank == 0;
  DIST_MPI_GOTO(st, MPI_Allreduce(&is_first, &hosts, 1, MPI_INT, MPI_SUM, d->world), fail_local);
  d->hosts = hosts;
  d->uses_mpi = 1;
  return CLMOE_OK;
fail_local:
  MPI_Comm_free(&d->local);
fail:
  MPI_Comm_free(&d->world);
  return st;
}

MPI_Comm clmoe_dist_comm(const clmoe_dist *d) { return d && d->uses_mpi ? d->world : MPI_COMM_SELF; }
MPI_Comm clmoe_dist_local_comm(const clmoe_dist *d)
{
  return d && d->uses_mpi ? d->local : MPI_COMM_SELF;
}
#endif

clmoe_status clmoe_dist_init(clmoe_dist **dist, int *argc, char ***argv)
{
  if (!dist) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_dist_init: dist is NULL");
  *dist = NULL;
  clmoe_dist *d = calloc(1, sizeof *d);
  if (!d) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "clmoe_dist_init: out of host memory");
  clmoe__knob_value mpi; /* auto, 0 or 1 (the knob table's CLMOE_MPI) */
  clmoe_status kst = clmoe__knob_env(CLMOE_K_MPI, &mpi);
  if (kst != CLMOE_OK) {
    free(d);
    return kst;
  }
  const char *force = mpi.i == 1 ? "0" : mpi.i == 2 ? "1" : NULL; /* NULL: auto */
  clmoe__knob_value_free(&mpi);
  clmoe_launch launch;
  clmoe_launch_detect(&launch);
  if (!(force && !strcmp(force, "0")) && (kst = clmoe_launch_check(&launch)) != CLMOE_OK) {
    free(d);
    return kst;
  }
#ifndef HAVE_MPI
  (void)argc, (void)argv;
  single_rank(d, force && !strcmp(force, "1") ? "CLMOE_MPI=1 but clmoe was built without MPI "
              "(configure --with-mpi)" : "clmoe was built without MPI");
  /* N copies that each believe they are alone would each write the same outputs. */
  const char *launcher = launcher_variable();
  if (launcher && !(force && !strcmp(force, "0"))) {
    free(d);
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "started by an MPI launcher (%s is set) but clmoe "
                        "was built without MPI: re-run configure with --with-mpi=yes, or set "
                        "CLMOE_MPI=0 to run every process as a single rank", launcher);
  }
#else
  int initialised = 0, finalised = 0;
  clmoe_status st;
  if (MPI_Initialized(&initialised) != MPI_SUCCESS || MPI_Finalized(&finalised) != MPI_SUCCESS) {
    free(d);
    return clmoe__error(CLMOE_ERR_MPI, "MPI_Initialized/MPI_Finalized failed");
  }
  const char *launcher = launcher_variable();
  if (finalised) {
    free(d);
    return clmoe__error(CLMOE_ERR_MPI, "clmoe_dist_init: MPI was already finalised");
  } else if (initialised) {
    if ((st = mpi_setup(d)) != CLMOE_OK) {
      free(d);
      return st;
    }
    snprintf(d->describe, sizeof d->describe, "MPI: %d rank%s on %d host%s (initialised by the "
             "caller)", d->size, d->size == 1 ? "" : "s", d->hosts, d->hosts == 1 ? "" : "s");
  } else if ((force && !strcmp(force, "0")) || (!launcher && !force)) {
    single_rank(d, force ? "CLMOE_MPI=0" : "not started by an MPI launcher (mpirun, srun)");
  } else {
    int provided = 0;
    int e = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (e != MPI_SUCCESS) {
      free(d);
      return clmoe__error(CLMOE_ERR_MPI, "MPI_Init_thread failed (code %d) although %s is set", e,
                          launcher ? launcher : "CLMOE_MPI=1");
    }
    d->owns_mpi = 1;
    if ((st = mpi_setup(d)) != CLMOE_OK) {
      MPI_Finalize();
      free(d);
      return st;
    }
    snprintf(d->describe, sizeof d->describe, "MPI: %d rank%s on %d host%s (initialised by clmoe%s)",
             d->size, d->size == 1 ? "" : "s", d->hosts, d->hosts == 1 ? "" : "s",
             provided < MPI_THREAD_FUNNELED ? "; warning: MPI gives less than MPI_THREAD_FUNNELED" : "");
  }
#endif
  *dist = d;
  return CLMOE_OK;
}

clmoe_status clmoe_dist_finalize(clmoe_dist *d)
{
  if (!d) return CLMOE_OK;
  clmoe_status st = CLMOE_OK;
#ifdef HAVE_MPI
  if (d->uses_mpi) {
    int e1 = MPI_Comm_free(&d->local), e2 = MPI_Comm_free(&d->world);
    if (e1 != MPI_SUCCESS) st = clmoe__dist_mpi_error(e1, "MPI_Comm_free(local)");
    else if (e2 != MPI_SUCCESS) st = clmoe__dist_mpi_error(e2, "MPI_Comm_free(world)");
  }
  if (d->owns_mpi) {
    int e = MPI_Finalize();
    if (e != MPI_SUCCESS && st == CLMOE_OK) st = clmoe__dist_mpi_error(e, "MPI_Finalize");
  }
#endif
  free(d);
  return st;
}

clmoe_status clmoe_dist_barrier(clmoe_dist *d)
{
#ifdef HAVE_MPI
  if (d && d->uses_mpi) DIST_MPI(MPI_Barrier(d->world));
#else
  (void)d;
#endif
  return CLMOE_OK;
}

void clmoe_dist_abort(clmoe_dist *d, int code)
{
#ifdef HAVE_MPI
  if (d && d->uses_mpi) MPI_Abort(d->world, code);
#else
  (void)d, (void)code;
#endif
}

#ifdef HAVE_MPI
static clmoe_status allreduce_sum(clmoe_dist *d, void *buf, size_t count, size_t elem,
                                  MPI_Datatype type, const char *name)
{
  if (!buf && count) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: buf is NULL", name);
  if (!d || !d->uses_mpi) return CLMOE_OK;
  for (size_t done = 0; done < count;) {
    size_t n = count - done > (size_t)INT_MAX ? (size_t)INT_MAX : count - done;
    int e = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + done * elem, (int)n, type, MPI_SUM, d->world);
    if (e != MPI_SUCCESS) return clmoe__dist_mpi_error(e, name);
    done += n;
  }
  return CLMOE_OK;
}
#define ALLREDUCE(d, buf, count, type) allreduce_sum(d, buf, count, sizeof *(buf), type, __func__)
#else
/* one rank: the sum is the buffer itself */
#define ALLREDUCE(d, buf, count, type)                                                     \
  ((void)(d), !(buf) && (count)                                                            \
                  ? clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: buf is NULL", __func__)  \
                  : CLMOE_OK)
#endif

clmoe_status clmoe_dist_allreduce_sum_i64(clmoe_dist *d, int64_t *buf, size_t count)
{
  return ALLREDUCE(d, buf, count, MPI_INT64_T);
}
clmoe_status clmoe_dist_allreduce_sum_f64(clmoe_dist *d, double *buf, size_t count)
{
  return ALLREDUCE(d, buf, count, MPI_DOUBLE);
}
clmoe_status clmoe_dist_allreduce_sum_f32(clmoe_dist *d, float *buf, size_t count)
{
  return ALLREDUCE(d, buf, count, MPI_FLOAT);
}

clmoe_status clmoe_dist_gather_reports(clmoe_dist *d, const clmoe_rank_report *mine,
                                       clmoe_rank_report *all)
{
  if (!mine) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_dist_gather_reports: mine is NULL");
  int root = clmoe_dist_rank(d) == 0;
  if (root && !all)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_dist_gather_reports: rank 0 needs `all`");
#ifdef HAVE_MPI
  if (d && d->uses_mpi) {
    DIST_MPI(MPI_Gather(mine, (int)sizeof *mine, MPI_BYTE, root ? (void *)all : NULL,
                        (int)sizeof *mine, MPI_BYTE, 0, d->world));
    return CLMOE_OK;
  }
#endif
  memcpy(all, mine, sizeof *mine);
  return CLMOE_OK;
}
