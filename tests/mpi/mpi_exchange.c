/* Run by tests/mpi/test_mpi.sh under mpirun (and once without it): the expert-parallel
 * exchange moves every routed copy to a rank that holds its expert and brings the result
 * back to the right row, for an even map and for a balanced map with replicas, with a
 * number of experts that no rank count divides and a different token count on every rank.
 * The "expert" is y = x (e + 1) + e, exact in float, so the check is exact.
 * Prints "mpi_exchange: OK ..." on rank 0 and exits 0 when every rank passed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/clmoe.h"
#include "mpi_common.h"

#define EXPERTS 13
#define TOP_K 4
#define WIDTH 5


/* Runs one exchange with `map`; returns the number of wrong rows. */
static int round_trip(const clmoe_expert_map *map)
{
  const int rank = clmoe_dist_rank(mpi_dist);
  const int64_t tokens = 37 + 11 * rank;
  int32_t *experts = malloc((size_t)tokens * TOP_K * sizeof *experts);
  float *x = malloc((size_t)tokens * WIDTH * sizeof *x);
  float *out = malloc((size_t)tokens * TOP_K * WIDTH * sizeof *out);
  if (!experts || !x || !out) mpi_die("malloc", CLMOE_ERR_OUT_OF_MEMORY);
  uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
  for (int64_t c = 0; c < tokens * TOP_K; c++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    experts[c] = (int32_t)((s >> 33) % EXPERTS);
  }
  for (int64_t t = 0; t < tokens; t++)
    for (int k = 0; k < WIDTH; k++) x[t * WIDTH + k] = (float)(rank * 1000 + t) + 0.25f * (float)k;

  clmoe_ep_plan *plan = NULL;
  TRY(clmoe_ep_plan_create(mpi_dist, map, experts, tokens, TOP_K, &plan));
  float *recv = malloc((size_t)(plan->recv_rows + 1) * WIDTH * sizeof *recv);
  if (!recv) mpi_die("malloc", CLMOE_ERR_OUT_OF_MEMORY);
  TRY(clmoe_ep_dispatch(mpi_dist, plan, x, WIDTH, recv));
  for (int64_t i = 0; i < plan->recv_rows; i++) { /* the local "experts" */
    const float e = (float)plan->recv_expert[i];
    for (int k = 0; k < WIDTH; k++) recv[i * WIDTH + k] = recv[i * WIDTH + k] * (e + 1.0f) + e;
  }
  TRY(clmoe_ep_combine(mpi_dist, plan, recv, WIDTH, out));
  int wrong = 0;
  for (int64_t c = 0; c < tokens * TOP_K; c++) {
    const float e = (float)experts[c];
    for (int k = 0; k < WIDTH; k++) {
      float want = x[(c / TOP_K) * WIDTH + k] * (e + 1.0f) + e;
      if (out[c * WIDTH + k] != want) {
        if (wrong++ < 3)
          fprintf(stderr, "mpi_exchange: rank %d copy %lld col %d: %g, want %g\n", rank,
                  (long long)c, k, out[c * WIDTH + k], want);
      }
    }
  }
  clmoe_ep_plan_destroy(plan);
  free(recv);
  free(out);
  free(x);
  free(experts);
  return wrong;
}

int main(int argc, char **argv)
{
  mpi_prog = "mpi_exchange";
  clmoe_status st = clmoe_dist_init(&mpi_dist, &argc, &argv);
  if (st != CLMOE_OK) {
    fprintf(stderr, "mpi_exchange: clmoe_dist_init: %s\n", clmoe_last_error());
    return 1;
  }
  const int size = clmoe_dist_size(mpi_dist);
  clmoe_expert_map *even = NULL, *balanced = NULL;
  TRY(clmoe_expert_map_even(EXPERTS, size, &even));
  double load[EXPERTS]; /* the same on every rank, so every rank builds the same map */
  for (int e = 0; e < EXPERTS; e++) load[e] = 100.0 / (e + 1);
  int slots = even->slots + 1 > EXPERTS ? EXPERTS : even->slots + 1;
  TRY(clmoe_expert_map_balance(load, EXPERTS, size, slots, &balanced));
  int wrong = round_trip(even) + round_trip(balanced);
  clmoe_expert_map_destroy(even);
  clmoe_expert_map_destroy(balanced);
  TRY(clmoe_dist_barrier(mpi_dist));
  if (wrong) {
    fprintf(stderr, "mpi_exchange: rank %d: %d wrong values\n", clmoe_dist_rank(mpi_dist), wrong);
    clmoe_dist_abort(mpi_dist, 1);
  } else if (clmoe_dist_rank(mpi_dist) == 0) {
    printf("mpi_exchange: OK %d rank%s (%s)\n", size, size == 1 ? "" : "s", clmoe_dist_describe(mpi_dist));
  }
  TRY(clmoe_dist_finalize(mpi_dist));
  return wrong ? 1 : 0;
}
