/* Expert placement for expert parallelism: which rank holds which routed experts.
 *
 * Every rank has `slots` expert slots; a slot holds one expert or is empty (-1). An expert
 * may sit in several slots (replicas), always on different ranks; tokens routed to a
 * replicated expert are split over its replicas (clmoe_expert_map_route). Two ways to
 * build a map:
 *  - even: experts in contiguous blocks, E mod N ranks one more than the others (any N,
 *    also N > E, where some ranks hold none);
 *  - balanced, from measured per-expert loads (tokens routed in recent steps): first the
 *    spare slots (N * slots - E) go one by one to the expert with the highest load per
 *    replica (the idea of DeepSeek's EPLB), then the replicas are packed heaviest first
 *    onto the least loaded rank that has a free slot and does not yet hold that expert
 *    (greedy longest-processing-time). If only ranks already holding it have room, a
 *    lighter expert is moved off a full rank to make room, which always exists.
 * Pure C: no device, no MPI. A map is stored in checkpoints as its [ranks, slots] int32
 * table (slot_expert) plus the three sizes, or as the text of clmoe_expert_map_to_string. */
#ifndef CLMOE_EXPERT_MAP_H
#define CLMOE_EXPERT_MAP_H

#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clmoe_expert_map {
  int experts;            /* E, routed experts of one MoE layer */
  int ranks;              /* N, expert-parallel ranks */
  int slots;              /* expert slots per rank */
  int32_t *slot_expert;   /* [ranks, slots] row-major: expert id in each slot, -1 empty */
  int32_t *replicas;      /* [experts]: number of slots holding each expert (>= 1) */
  int32_t *replica_start; /* [experts + 1]: offsets into replica_rank */
  int32_t *replica_rank;  /* [sum of replicas]: the ranks holding each expert, ascending */
} clmoe_expert_map;

/* The even initial map: slots = ceil(E / N). */
CLMOE_API clmoe_status clmoe_expert_map_even(int experts, int ranks, clmoe_expert_map **map);
/* The load-balanced map for `slots` slots per rank (N * slots >= E, slots <= E).
 * load: [experts], finite and >= 0 (e.g. tokens routed to each expert). */
CLMOE_API clmoe_status clmoe_expert_map_balance(const double *load, int experts, int ranks,
                                                int slots, clmoe_expert_map **map);
/* The same without replicas (every expert on exactly one rank, spare slots left empty):
 * the placement training can use (clmoe-train --ep-rebalance). */
CLMOE_API clmoe_status clmoe_expert_map_pack(const double *load, int experts, int ranks, int slots,
                                             clmoe_expert_map **map);
/* A map from its table (checks it: ids in range, every expert placed, replicas on
 * different ranks). slot_expert: [ranks, slots], copied. */
CLMOE_API clmoe_status clmoe_expert_map_from_slots(int experts, int ranks, int slots,
                                                   const int32_t *slot_expert,
                                                   clmoe_expert_map **map);
CLMOE_API void clmoe_expert_map_destroy(clmoe_expert_map *map);

/* The rank that serves tokens of `expert` sent from `source_rank`: replica number
 * (source_rank mod replicas) of the expert, so each replica gets an equal share of the
 * senders. */
CLMOE_API int clmoe_expert_map_route(const clmoe_expert_map *map, int expert, int source_rank);
/* Load of each rank when each expert's load is split evenly over its replicas. rank_load:
 * [ranks]. Returns max / mean over ranks (1 = perfect balance; 1 when the total is 0). */
CLMOE_API double clmoe_expert_map_imbalance(const clmoe_expert_map *map, const double *load,
                                            double *rank_load);

/* Text form: a header line "clmoe-expert-map 1 experts=E ranks=N slots=S", then one line
 * per rank with its slots' expert ids separated by spaces (-1 empty). Allocated; free().
 * Returns NULL (with the error set) when out of memory. */
CLMOE_API char *clmoe_expert_map_to_string(const clmoe_expert_map *map);
/* Parses the text form; `name` is used in messages (a file name). Strict. */
CLMOE_API clmoe_status clmoe_expert_map_parse(const char *text, const char *name,
                                              clmoe_expert_map **map);

#ifdef __cplusplus
}
#endif
#endif
