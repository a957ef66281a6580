/* Run by tests/mpi/test_mpi.sh under mpirun: checks clmoe's world and host-local ranks against
 * what the launcher says (Open MPI's OMPI_COMM_WORLD_* variables, when present), places
 * every rank, gathers the reports and checks them on rank 0. With --fail-rank R, rank R
 * ends the job as an app does after an error: the whole job must exit non-zero at once.
 * Prints "mpi_ranks: OK ..." on rank 0 and exits 0 when every check passes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/clmoe.h"

static int failures = 0;

#define CHECK(cond, ...)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "mpi_ranks: FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);           \
      fprintf(stderr, __VA_ARGS__);                                                        \
      fprintf(stderr, "\n");                                                               \
      failures++;                                                                          \
    }                                                                                      \
  } while (0)

/* The launcher's own number for a quantity, or -1 when it does not say. */
static int launcher_value(const char *name)
{
  const char *v = getenv(name);
  return v ? atoi(v) : -1;
}

static void die(clmoe_dist *d, const char *what, clmoe_status st)
{
  fprintf(stderr, "mpi_ranks: rank %d: %s: %s (%s)\n", clmoe_dist_rank(d), what,
          clmoe_last_error(), clmoe_strerror(st));
  clmoe_dist_abort(d, 1);
  exit(1);
}

int main(int argc, char **argv)
{
  int fail_rank = -1;
  if (argc == 3 && !strcmp(argv[1], "--fail-rank")) fail_rank = atoi(argv[2]);
  else if (argc != 1) {
    fprintf(stderr, "usage: mpi_ranks [--fail-rank R]\n");
    return 2;
  }
  clmoe_dist *d = NULL;
  clmoe_status st = clmoe_dist_init(&d, &argc, &argv);
  if (st != CLMOE_OK) {
    fprintf(stderr, "mpi_ranks: clmoe_dist_init: %s\n", clmoe_last_error());
    return 1;
  }
  int rank = clmoe_dist_rank(d), size = clmoe_dist_size(d);
  int lr = clmoe_dist_local_rank(d), ls = clmoe_dist_local_size(d);
  CHECK(clmoe_dist_uses_mpi(d), "not using MPI under a launcher: %s", clmoe_dist_describe(d));
  int want;
  if ((want = launcher_value("OMPI_COMM_WORLD_SIZE")) >= 0) CHECK(size == want, "size %d, launcher %d", size, want);
  if ((want = launcher_value("OMPI_COMM_WORLD_RANK")) >= 0) CHECK(rank == want, "rank %d, launcher %d", rank, want);
  if ((want = launcher_value("OMPI_COMM_WORLD_LOCAL_SIZE")) >= 0)
    CHECK(ls == want, "local size %d, launcher %d", ls, want);
  if ((want = launcher_value("OMPI_COMM_WORLD_LOCAL_RANK")) >= 0)
    CHECK(lr == want, "local rank %d, launcher %d", lr, want);
  CHECK(lr >= 0 && lr < ls && ls <= size, "local rank %d of %d in %d", lr, ls, size);

  if (rank == fail_rank) {
    fprintf(stderr, "mpi_ranks: rank %d of %d: failing on purpose (--fail-rank)\n", rank, size);
    fflush(stderr);
    clmoe_dist_abort(d, 3);
    return 3;
  }
  clmoe_device_caps *list = NULL;
  int n = 0, chosen = -1;
  if ((st = clmoe_devices_list(&list, &n)) != CLMOE_OK) die(d, "clmoe_devices_list", st);
  clmoe_rank_report mine, *all = NULL;
  if ((st = clmoe_dist_place(d, list, n, NULL, NULL, &chosen, &mine)) != CLMOE_OK)
    die(d, "clmoe_dist_place", st);
  CHECK(chosen >= 0 && chosen < n, "chosen device %d of %d", chosen, n);
  free(list);
  if (rank == 0 && !(all = calloc((size_t)size, sizeof *all))) die(d, "calloc", CLMOE_ERR_OUT_OF_MEMORY);
  if ((st = clmoe_dist_gather_reports(d, &mine, all)) != CLMOE_OK) die(d, "gather", st);
  if (rank == 0) {
    for (int r = 0; r < size; r++) {
      const clmoe_rank_report *p = &all[r];
      CHECK(p->rank == r && p->size == size, "report %d says rank %d of %d", r, p->rank, p->size);
      CHECK(p->host[0] != '\0', "report %d has no host", r);
      CHECK(p->cpuset[0] != '\0' && p->ncores > 0, "report %d: cpuset '%s'", r, p->cpuset);
      CHECK(p->local_size == ls || strcmp(p->host, all[0].host), "report %d: local size %d", r,
            p->local_size);
      /* local ranks of one host are 0 .. local_size - 1, each once */
      for (int q = 0; q < r; q++)
        CHECK(strcmp(all[q].host, p->host) || all[q].local_rank != p->local_rank,
              "ranks %d and %d share local rank %d on %s", q, r, p->local_rank, p->host);
      CHECK(p->local_rank >= 0 && p->local_rank < p->local_size, "report %d: local rank %d of %d", r,
            p->local_rank, p->local_size);
    }
    if (!failures) printf("mpi_ranks: OK %d ranks, %s\n", size, clmoe_dist_describe(d));
  }
  free(all);
  /* sums across ranks: exact for int64 and small integers in float/double */
  int64_t ci[3] = {rank + 1, 1, (int64_t)1 << 40};
  double cd[2] = {rank + 1.0, 0.5};
  float cf[2] = {(float)(rank + 1), 0.25f};
  if ((st = clmoe_dist_allreduce_sum_i64(d, ci, 3)) != CLMOE_OK) die(d, "allreduce i64", st);
  if ((st = clmoe_dist_allreduce_sum_f64(d, cd, 2)) != CLMOE_OK) die(d, "allreduce f64", st);
  if ((st = clmoe_dist_allreduce_sum_f32(d, cf, 2)) != CLMOE_OK) die(d, "allreduce f32", st);
  const int64_t tri = (int64_t)size * (size + 1) / 2;
  CHECK(ci[0] == tri && ci[1] == size && ci[2] == ((int64_t)size << 40), "int64 sums %lld %lld %lld",
        (long long)ci[0], (long long)ci[1], (long long)ci[2]);
  CHECK(cd[0] == (double)tri && cd[1] == 0.5 * size, "double sums %g %g", cd[0], cd[1]);
  CHECK(cf[0] == (float)tri && cf[1] == 0.25f * (float)size, "float sums %g %g", cf[0], cf[1]);
  /* every rank's verdict counts: a failure anywhere makes rank 0 exit non-zero */
  if ((st = clmoe_dist_barrier(d)) != CLMOE_OK) die(d, "barrier", st);
  if (failures) clmoe_dist_abort(d, 1);
  if ((st = clmoe_dist_finalize(d)) != CLMOE_OK) {
    fprintf(stderr, "mpi_ranks: finalize: %s\n", clmoe_last_error());
    return 1;
  }
  return failures ? 1 : 0;
}
