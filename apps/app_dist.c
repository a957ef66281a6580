/* The distributed start shared by the apps that run under mpirun (clmoe-info --mpi,
 * clmoe-train --ep): MPI, the device of each rank, CPU binding and the per-rank report. */
#include <stdlib.h>

#include "app_common.h"

/* One rank's placement as the apps print it. */
void app_print_rank(FILE *f, const clmoe_rank_report *r)
{
  fprintf(f, "rank %d of %d on %s (local rank %d of %d)\n", r->rank, r->size, r->host, r->local_rank,
         r->local_size);
  fprintf(f, "  device      [%d:%d] %s - %s\n", r->platform_index, r->device_index, r->device, r->device_why);
  if (r->pci[0])
    fprintf(f, "  locality    PCI %s, NUMA node %d\n", r->pci, r->numa_node);
  else
    fprintf(f, "  locality    no PCI location (a CPU device, or not reported by the driver)\n");
  fprintf(f, "  binding     %s: cores %s (%d) - %s\n", r->bind_source, r->cpuset, r->ncores, r->bind_note);
  if (r->bind_warning[0]) fprintf(f, "  warning     %s\n", r->bind_warning);
  fprintf(f, "  visibility  %s\n", r->visibility);
}

clmoe_ctx *app_dist_start(const char *device, int profiling, FILE *report, int *argc, char ***argv)
{
  APP_CHECK(clmoe_dist_init(&app_dist, argc, argv));
  const int rank = clmoe_dist_rank(app_dist), size = clmoe_dist_size(app_dist);
  clmoe_device_caps *list = NULL;
  int n = 0, chosen = 0;
  clmoe_rank_report mine;
  APP_CHECK(clmoe_devices_list(&list, &n));
  APP_CHECK(clmoe_dist_place(app_dist, list, n, device, NULL, &chosen, &mine));
  clmoe_rank_report *all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
  if (rank == 0 && !all) app_die(CLMOE_ERR_OUT_OF_MEMORY, "rank reports");
  APP_CHECK(clmoe_dist_gather_reports(app_dist, &mine, all));
  if (rank == 0 && report) {
    fprintf(report, "%s %s: %s\n", app_name, clmoe_version(), clmoe_dist_describe(app_dist));
    for (int r = 0; r < size; r++) app_print_rank(report, &all[r]);
    fflush(report);
  }
  char warning[512];
  if (rank == 0 && clmoe_dist_binding_warnings(all, size, warning, sizeof warning) > 0)
    fprintf(stderr, "%s: warning: %s\n", app_name, warning);
  free(all);
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.profiling = profiling};
  APP_CHECK(clmoe_ctx_create_at(&ctx, &list[chosen], &opts));
  free(list);
  return ctx;
}

void app_dist_end(void)
{
  clmoe_dist *d = app_dist;
  app_dist = NULL;
  if (d) APP_CHECK(clmoe_dist_finalize(d));
}
