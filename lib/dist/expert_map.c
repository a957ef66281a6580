/* Expert placement maps: even, load-balanced with replication, checks, text form. */
#include "runtime/internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/expert_map.h"

/* Sizes beyond these are certainly mistakes (and keep ranks * slots within int). */
#define MAP_MAX_EXPERTS (1 << 20)
#define MAP_MAX_RANKS (1 << 20)

void clmoe_expert_map_destroy(clmoe_expert_map *m)
{
  if (!m) return;
  free(m->slot_expert);
  free(m->replicas);
  free(m->replica_start);
  free(m->replica_rank);
  free(m);
}

static clmoe_status check_sizes(int experts, int ranks, int slots, const char *who)
{
  if (experts < 1 || experts > MAP_MAX_EXPERTS)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %d experts (want 1..%d)", who, experts,
                        MAP_MAX_EXPERTS);
  if (ranks < 1 || ranks > MAP_MAX_RANKS)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %d ranks (want 1..%d)", who, ranks,
                        MAP_MAX_RANKS);
  if (slots < 1 || slots > experts)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %d slots per rank (want 1..%d: a rank "
                        "holds each expert at most once)", who, slots, experts);
  if ((int64_t)ranks * slots < experts)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %d ranks x %d slots cannot hold %d experts",
                        who, ranks, slots, experts);
  if ((int64_t)ranks * slots > (int64_t)1 << 30)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: %d ranks x %d slots is too large", who,
                        ranks, slots);
  return CLMOE_OK;
}

static clmoe_status map_alloc(int experts, int ranks, int slots, clmoe_expert_map **out)
{
  clmoe_expert_map *m = calloc(1, sizeof *m);
  size_t n = (size_t)ranks * (size_t)slots;
  if (m) {
    m->experts = experts, m->ranks = ranks, m->slots = slots;
    m->slot_expert = malloc(n * sizeof *m->slot_expert);
    m->replicas = calloc((size_t)experts, sizeof *m->replicas);
    m->replica_start = calloc((size_t)experts + 1, sizeof *m->replica_start);
    m->replica_rank = malloc(n * sizeof *m->replica_rank);
  }
  if (!m || !m->slot_expert || !m->replicas || !m->replica_start || !m->replica_rank) {
    clmoe_expert_map_destroy(m);
    return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "expert map of %d ranks x %d slots: out of host "
                        "memory", ranks, slots);
  }
  for (size_t i = 0; i < n; i++) m->slot_expert[i] = -1;
  *out = m;
  return CLMOE_OK;
}

/* Checks the table and builds replicas / replica_start / replica_rank from it. */
static clmoe_status map_index(clmoe_expert_map *m, const char *who)
{
  int E = m->experts;
  memset(m->replicas, 0, (size_t)E * sizeof *m->replicas);
  for (int r = 0; r < m->ranks; r++) {
    const int32_t *row = m->slot_expert + (size_t)r * m->slots;
    for (int s = 0; s < m->slots; s++) {
      int e = row[s];
      if (e == -1) continue;
      if (e < -1 || e >= E)
        return clmoe__error(CLMOE_ERR_FORMAT, "%s: rank %d slot %d holds expert %d (want -1..%d)",
                            who, r, s, e, E - 1);
      for (int t = 0; t < s; t++)
        if (row[t] == e)
          return clmoe__error(CLMOE_ERR_FORMAT, "%s: rank %d holds expert %d twice (slots %d and "
                              "%d)", who, r, e, t, s);
      m->replicas[e]++;
    }
  }
  m->replica_start[0] = 0;
  for (int e = 0; e < E; e++) {
    if (m->replicas[e] == 0)
      return clmoe__error(CLMOE_ERR_FORMAT, "%s: expert %d is on no rank", who, e);
    m->replica_start[e + 1] = m->replica_start[e] + m->replicas[e];
  }
  /* Ranks ascending per expert: fill in rank order, using replica_start as cursors. */
  int32_t *cursor = malloc((size_t)E * sizeof *cursor);
  if (!cursor) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
  memcpy(cursor, m->replica_start, (size_t)E * sizeof *cursor);
  for (int r = 0; r < m->ranks; r++)
    for (int s = 0; s < m->slots; s++) {
      int e = m->slot_expert[(size_t)r * m->slots + s];
      if (e >= 0) m->replica_rank[cursor[e]++] = r;
    }
  free(cursor);
  return CLMOE_OK;
}

clmoe_status clmoe_expert_map_even(int experts, int ranks, clmoe_expert_map **map)
{
  if (!map) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_expert_map_even: map is NULL");
  *map = NULL;
  if (ranks < 1)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "even expert map: %d ranks (want >= 1)", ranks);
  int slots = experts > 0 ? (experts + ranks - 1) / ranks : 0;
  CLMOE_TRY(check_sizes(experts, ranks, slots, "even expert map"));
  clmoe_expert_map *m;
  CLMOE_TRY(map_alloc(experts, ranks, slots, &m));
  int base = experts / ranks, extra = experts % ranks, next = 0;
  for (int r = 0; r < ranks; r++) {
    int n = base + (r < extra);
    for (int s = 0; s < n; s++) m->slot_expert[(size_t)r * slots + s] = next++;
  }
  clmoe_status st = map_index(m, "even expert map");
  if (st != CLMOE_OK) {
    clmoe_expert_map_destroy(m);
    return st;
  }
  *map = m;
  return CLMOE_OK;
}

static clmoe_status from_slots(int experts, int ranks, int slots, const int32_t *slot_expert,
                               const char *who, clmoe_expert_map **map)
{
  if (!map || !slot_expert)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_expert_map_from_slots: NULL argument");
  *map = NULL;
  CLMOE_TRY(check_sizes(experts, ranks, slots, who));
  clmoe_expert_map *m;
  CLMOE_TRY(map_alloc(experts, ranks, slots, &m));
  memcpy(m->slot_expert, slot_expert, (size_t)ranks * slots * sizeof *slot_expert);
  clmoe_status st = map_index(m, who);
  if (st != CLMOE_OK) {
    clmoe_expert_map_destroy(m);
    return st;
  }
  *map = m;
  return CLMOE_OK;
}

clmoe_status clmoe_expert_map_from_slots(int experts, int ranks, int slots,
                                         const int32_t *slot_expert, clmoe_expert_map **map)
{
  return from_slots(experts, ranks, slots, slot_expert, "expert map", map);
}

/* ---- balancing ---------------------------------------------------------------------------- */

typedef struct pack_item {
  double weight; /* the expert's load per replica */
  int expert;
} pack_item;

static int by_weight_desc(const void *a, const void *b)
{
  const pack_item *x = a, *y = b;
  if (x->weight != y->weight) return x->weight > y->weight ? -1 : 1;
  return (x->expert > y->expert) - (x->expert < y->expert);
}

/* Greedy replication: each spare slot goes to the expert with the highest load per replica
 * (ties: fewer replicas, then lower id), never more replicas than ranks. */
static void replicate(const double *load, int E, int N, int64_t spare, int32_t *replicas)
{
  for (int e = 0; e < E; e++) replicas[e] = 1;
  for (int64_t k = 0; k < spare; k++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      if (replicas[e] >= N) continue;
      if (best < 0) {
        best = e;
        continue;
      }
      double we = load[e] / replicas[e], wb = load[best] / replicas[best];
      if (we > wb || (we == wb && replicas[e] < replicas[best])) best = e;
    }
    if (best < 0) return; /* every expert on every rank: nothing left to add */
    replicas[best]++;
  }
}

typedef struct packer {
  int N, S, E;
  int32_t *slot_expert; /* [N, S] */
  int *filled;          /* [N] */
  double *rank_load;    /* [N] */
  unsigned char *holds; /* [N, E] */
  double *weight;       /* [E] load per replica */
} packer;

static void put(packer *p, int r, int e)
{
  p->slot_expert[(size_t)r * p->S + p->filled[r]++] = e;
  p->holds[(size_t)r * p->E + e] = 1;
  p->rank_load[r] += p->weight[e];
}

/* Makes room for expert e on a full rank lacking it: moves one of that rank's experts that
 * the least loaded rank with a free slot lacks over to it. Returns the freed rank or -1. */
static int make_room(packer *p, int e)
{
  int a = -1, b = -1;
  for (int r = 0; r < p->N; r++) {
    if (p->filled[r] < p->S && (a < 0 || p->rank_load[r] < p->rank_load[a])) a = r;
    if (p->filled[r] == p->S && !p->holds[(size_t)r * p->E + e] &&
        (b < 0 || p->rank_load[r] < p->rank_load[b]))
      b = r;
  }
  if (a < 0 || b < 0) return -1;
  int32_t *row = p->slot_expert + (size_t)b * p->S;
  for (int s = 0; s < p->S; s++) {
    int f = row[s];
    if (p->holds[(size_t)a * p->E + f]) continue;
    row[s] = row[--p->filled[b]]; /* remove f from b (keep b's slots packed) */
    row[p->filled[b]] = -1;
    p->holds[(size_t)b * p->E + f] = 0;
    p->rank_load[b] -= p->weight[f];
    put(p, a, f);
    return b;
  }
  return -1;
}

/* replicas 1: the spare slots take replicas of the hottest experts; 0: they stay empty. */
static clmoe_status balance(const double *load, int experts, int ranks, int slots, int replicas,
                            clmoe_expert_map **map)
{
  if (!map || !load)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_expert_map_balance: NULL argument");
  *map = NULL;
  CLMOE_TRY(check_sizes(experts, ranks, slots, "balanced expert map"));
  for (int e = 0; e < experts; e++)
    if (!isfinite(load[e]) || load[e] < 0)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "balanced expert map: load of expert %d is %g "
                          "(want finite and >= 0)", e, load[e]);
  clmoe_expert_map *m;
  CLMOE_TRY(map_alloc(experts, ranks, slots, &m));
  int E = experts, N = ranks;
  int64_t spare = replicas ? (int64_t)N * slots - E : 0;
  packer p = {N, slots, E, m->slot_expert, calloc((size_t)N, sizeof(int)),
              calloc((size_t)N, sizeof(double)), calloc((size_t)N * E, 1),
              malloc((size_t)E * sizeof(double))};
  pack_item *items = malloc(((size_t)N * slots) * sizeof *items);
  clmoe_status st = CLMOE_OK;
  if (!p.filled || !p.rank_load || !p.holds || !p.weight || !items) {
    st = clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "balanced expert map: out of host memory");
    goto done;
  }
  replicate(load, E, N, spare, m->replicas);
  size_t n = 0;
  for (int e = 0; e < E; e++) {
    p.weight[e] = load[e] / m->replicas[e];
    for (int k = 0; k < m->replicas[e]; k++) items[n++] = (pack_item){p.weight[e], e};
  }
  qsort(items, n, sizeof *items, by_weight_desc);
  for (size_t i = 0; i < n; i++) {
    int e = items[i].expert, best = -1;
    for (int r = 0; r < N; r++) {
      if (p.filled[r] == slots || p.holds[(size_t)r * E + e]) continue;
      if (best < 0 || p.rank_load[r] < p.rank_load[best] ||
          (p.rank_load[r] == p.rank_load[best] && p.filled[r] < p.filled[best]))
        best = r;
    }
    if (best < 0 && (best = make_room(&p, e)) < 0) {
      st = clmoe__error(CLMOE_ERR_INTERNAL, "balanced expert map: no room for expert %d", e);
      goto done;
    }
    put(&p, best, e);
  }
  st = map_index(m, "balanced expert map");
done:
  free(p.filled);
  free(p.rank_load);
  free(p.holds);
  free(p.weight);
  free(items);
  if (st != CLMOE_OK) clmoe_expert_map_destroy(m);
  else *map = m;
  return st;
}

clmoe_status clmoe_expert_map_balance(const double *load, int experts, int ranks, int slots,
                                      clmoe_expert_map **map)
{
  return balance(load, experts, ranks, slots, 1, map);
}

clmoe_status clmoe_expert_map_pack(const double *load, int experts, int ranks, int slots,
                                   clmoe_expert_map **map)
{
  return balance(load, experts, ranks, slots, 0, map);
}

int clmoe_expert_map_route(const clmoe_expert_map *m, int expert, int source_rank)
{
  if (!m || expert < 0 || expert >= m->experts || source_rank < 0) return -1;
  int k = source_rank % m->replicas[expert];
  return m->replica_rank[m->replica_start[expert] + k];
}

double clmoe_expert_map_imbalance(const clmoe_expert_map *m, const double *load, double *rank_load)
{
  double total = 0.0, peak = 0.0;
  for (int r = 0; r < m->ranks; r++) {
    double sum = 0.0;
    for (int s = 0; s < m->slots; s++) {
      int e = m->slot_expert[(size_t)r * m->slots + s];
      if (e >= 0) sum += load[e] / m->replicas[e];
    }
    if (rank_load) rank_load[r] = sum;
    total += sum;
    if (sum > peak) peak = sum;
  }
  return total > 0.0 ? peak / (total / m->ranks) : 1.0;
}

/* ---- text form ---------------------------------------------------------------------------- */

char *clmoe_expert_map_to_string(const clmoe_expert_map *m)
{
  /* each id needs at most 8 characters with its separator (ids < 2^20) */
  size_t cap = 96 + (size_t)m->ranks * ((size_t)m->slots * 8 + 1);
  char *text = malloc(cap);
  if (!text) {
    clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "expert map text: out of host memory");
    return NULL;
  }
  size_t used = (size_t)snprintf(text, cap, "clmoe-expert-map 1 experts=%d ranks=%d slots=%d\n",
                                 m->experts, m->ranks, m->slots);
  for (int r = 0; r < m->ranks; r++)
    for (int s = 0; s < m->slots; s++)
      used += (size_t)snprintf(text + used, cap - used, "%d%c", m->slot_expert[(size_t)r * m->slots + s],
                               s + 1 == m->slots ? '\n' : ' ');
  return text;
}

static int read_int(const char **p, long *v)
{
  char *end;
  errno = 0;
  *v = strtol(*p, &end, 10);
  if (end == *p || errno) return 0;
  *p = end;
  return 1;
}

clmoe_status clmoe_expert_map_parse(const char *text, const char *name, clmoe_expert_map **map)
{
  if (!map || !text) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_expert_map_parse: NULL");
  if (!name) name = "expert map";
  *map = NULL;
  int version = 0, experts = 0, ranks = 0, slots = 0, used = 0;
  if (sscanf(text, "clmoe-expert-map %d experts=%d ranks=%d slots=%d%n", &version, &experts, &ranks,
             &slots, &used) != 4 || text[used] != '\n')
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: the first line is not \"clmoe-expert-map 1 "
                        "experts=E ranks=N slots=S\"", name);
  if (version != 1)
    return clmoe__error(CLMOE_ERR_FORMAT, "%s: version %d (this clmoe reads version 1)", name, version);
  clmoe_status st = check_sizes(experts, ranks, slots, name);
  if (st != CLMOE_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", clmoe_last_error());
    return clmoe__error(CLMOE_ERR_FORMAT, "%s", why);
  }
  int32_t *table = malloc((size_t)ranks * slots * sizeof *table);
  if (!table) return clmoe__error(CLMOE_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
  const char *p = text + used + 1;
  for (int r = 0; r < ranks && st == CLMOE_OK; r++)
    for (int s = 0; s < slots; s++) {
      long v;
      while (*p == ' ') p++;
      if (!read_int(&p, &v) || v < -1 || v >= experts) {
        st = clmoe__error(CLMOE_ERR_FORMAT, "%s: rank %d (line %d), slot %d: want an expert id "
                          "-1..%d", name, r, r + 2, s, experts - 1);
        break;
      }
      if (*p != (s + 1 == slots ? '\n' : ' ')) {
        st = clmoe__error(CLMOE_ERR_FORMAT, "%s: line %d should have exactly %d ids", name, r + 2,
                          slots);
        break;
      }
      table[(size_t)r * slots + s] = (int32_t)v;
    }
  if (st == CLMOE_OK && *++p != '\0')
    st = clmoe__error(CLMOE_ERR_FORMAT, "%s: text after the %d rank lines", name, ranks);
  if (st == CLMOE_OK) st = from_slots(experts, ranks, slots, table, name, map);
  free(table);
  return st;
}
