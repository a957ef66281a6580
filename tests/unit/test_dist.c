/* The distributed layer without MPI: expert placement maps (even, balanced, text form),
 * device choice per local rank on made-up device lists, CPU binding decisions on
 * synthetic hwloc topologies, and the single-rank fallback. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"

static const int rank_counts[] = {1, 2, 3, 7, 896, 1000};
#define NRANK_COUNTS (int)(sizeof rank_counts / sizeof rank_counts[0])
#define E 896

/* Checked from the table itself (not from the map's own index): every slot in range,
 * no expert twice on a rank, every expert somewhere; returns the replica counts. */
static int table_ok(const clmoe_expert_map *m, int *replicas)
{
  memset(replicas, 0, (size_t)m->experts * sizeof *replicas);
  for (int r = 0; r < m->ranks; r++)
    for (int s = 0; s < m->slots; s++) {
      int e = m->slot_expert[(size_t)r * m->slots + s];
      if (e == -1) continue;
      if (e < 0 || e >= m->experts) return 0;
      for (int t = 0; t < s; t++)
        if (m->slot_expert[(size_t)r * m->slots + t] == e) return 0;
      replicas[e]++;
    }
  for (int e = 0; e < m->experts; e++)
    if (replicas[e] < 1 || replicas[e] != m->replicas[e]) return 0;
  return 1;
}

static void test_even(void)
{
  int replicas[E];
  for (int k = 0; k < NRANK_COUNTS; k++) {
    int n = rank_counts[k];
    clmoe_expert_map *m = NULL;
    TEST_OK(clmoe_expert_map_even(E, n, &m));
    CU_ASSERT_EQUAL(m->slots, (E + n - 1) / n);
    CU_ASSERT(table_ok(m, replicas));
    int lo = E, hi = 0, next = 0, contiguous = 1;
    for (int r = 0; r < n; r++) {
      int held = 0;
      for (int s = 0; s < m->slots; s++) {
        int e = m->slot_expert[(size_t)r * m->slots + s];
        if (e < 0) continue;
        held++;
        contiguous &= e == next++;
      }
      lo = held < lo ? held : lo, hi = held > hi ? held : hi;
    }
    CU_ASSERT(contiguous);
    CU_ASSERT(hi - lo <= 1);
    for (int e = 0; e < E; e++) CU_ASSERT_EQUAL(replicas[e], 1);
    clmoe_expert_map_destroy(m);
  }
}

/* A skewed load: a power law over a shuffled order of experts (fixed seed). */
static void skewed_load(double *load, uint64_t seed)
{
  int order[E];
  for (int e = 0; e < E; e++) order[e] = e;
  for (int e = E - 1; e > 0; e--) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    int j = (int)((seed >> 33) % (uint64_t)(e + 1)), t = order[e];
    order[e] = order[j], order[j] = t;
  }
  for (int i = 0; i < E; i++) load[order[i]] = 1000.0 / pow(i + 1.0, 1.1);
}

static void test_balance_skewed(void)
{
  double load[E];
  int replicas[E];
  skewed_load(load, test_seed);
  int hottest = 0;
  for (int e = 1; e < E; e++) hottest = load[e] > load[hottest] ? e : hottest;
  for (int k = 0; k < NRANK_COUNTS; k++) {
    int n = rank_counts[k];
    clmoe_expert_map *even = NULL;
    TEST_OK(clmoe_expert_map_even(E, n, &even));
    double even_imb = clmoe_expert_map_imbalance(even, load, NULL);
    for (int extra = 0; extra <= 2; extra += 2) {
      int slots = even->slots + extra > E ? E : even->slots + extra;
      clmoe_expert_map *m = NULL;
      TEST_OK(clmoe_expert_map_balance(load, E, n, slots, &m));
      CU_ASSERT(table_ok(m, replicas));
      int used = 0;
      for (int e = 0; e < E; e++) used += replicas[e];
      /* every slot is used while an expert can still take one more replica */
      CU_ASSERT_EQUAL(used, (int)fmin((double)n * slots, (double)E * n));
      double imb = clmoe_expert_map_imbalance(m, load, NULL);
      if (!(imb <= even_imb + 1e-12))
        fprintf(stderr, "\n  N=%d slots=%d: balanced imbalance %.4f > even %.4f (seed %llu)\n", n,
                slots, imb, even_imb, (unsigned long long)test_seed);
      CU_ASSERT(imb <= even_imb + 1e-12);
      if (n > 1 && (int64_t)n * slots > E) CU_ASSERT(replicas[hottest] >= 2);
      if (n == 7 && extra) CU_ASSERT(imb < 1.05); /* the hottest split: LPT is near perfect */
      if (getenv("CLMOE_TEST_VERBOSE")) fprintf(stderr, "\n  N=%d slots=%d even %.4f balanced %.4f", n, slots, even_imb, imb);
      clmoe_expert_map_destroy(m);
    }
    clmoe_expert_map_destroy(even);
  }
}

/* By hand: loads (10, 1, 1, 1) on 2 ranks of 3 slots. Spare slots go to expert 0 (10 ->
 * 5 + 5), then expert 1 (1 -> 0.5 + 0.5); packing gives both ranks 5 + 1 + 0.5 = 6.5. */
static void test_balance_by_hand(void)
{
  const double load[4] = {10, 1, 1, 1};
  clmoe_expert_map *m = NULL;
  TEST_OK(clmoe_expert_map_balance(load, 4, 2, 3, &m));
  CU_ASSERT_EQUAL(m->replicas[0], 2);
  CU_ASSERT_EQUAL(m->replicas[1], 2);
  CU_ASSERT_EQUAL(m->replicas[2], 1);
  CU_ASSERT_EQUAL(m->replicas[3], 1);
  double rank_load[2];
  CU_ASSERT_DOUBLE_EQUAL(clmoe_expert_map_imbalance(m, load, rank_load), 1.0, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(rank_load[0], 6.5, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(rank_load[1], 6.5, 1e-12);
  /* the even map of the same experts: ranks (11, 2), imbalance 11 / 6.5 */
  clmoe_expert_map *even = NULL;
  TEST_OK(clmoe_expert_map_even(4, 2, &even));
  CU_ASSERT_DOUBLE_EQUAL(clmoe_expert_map_imbalance(even, load, NULL), 11.0 / 6.5, 1e-12);
  /* routing splits the senders of expert 0 over its two ranks */
  int a = clmoe_expert_map_route(m, 0, 0), b = clmoe_expert_map_route(m, 0, 1);
  CU_ASSERT(a != b && a >= 0 && b >= 0);
  CU_ASSERT_EQUAL(clmoe_expert_map_route(m, 0, 2), a);
  CU_ASSERT_EQUAL(clmoe_expert_map_route(m, 4, 0), -1);
  clmoe_expert_map_destroy(even);
  clmoe_expert_map_destroy(m);
}

static void test_map_errors(void)
{
  const double load[4] = {1, 2, 3, NAN};
  clmoe_expert_map *m = NULL;
  CU_ASSERT_EQUAL(clmoe_expert_map_balance(load, 4, 2, 3, &m), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "expert 3"));
  CU_ASSERT_EQUAL(clmoe_expert_map_balance(load, 3, 2, 1, &m), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_expert_map_balance(load, 3, 2, 4, &m), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_expert_map_even(0, 2, &m), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(m);
  const int32_t twice[4] = {0, 0, 1, 2}, missing[4] = {0, 1, 1, -1};
  CU_ASSERT_EQUAL(clmoe_expert_map_from_slots(3, 2, 2, twice, &m), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "twice"));
  CU_ASSERT_EQUAL(clmoe_expert_map_from_slots(3, 2, 2, missing, &m), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "expert 2 is on no rank"));
}

static void test_text_round_trip(void)
{
  double load[E];
  skewed_load(load, test_seed + 1);
  clmoe_expert_map *m = NULL, *back = NULL;
  TEST_OK(clmoe_expert_map_balance(load, E, 3, 300, &m));
  char *text = clmoe_expert_map_to_string(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  TEST_OK(clmoe_expert_map_parse(text, "round trip", &back));
  CU_ASSERT_EQUAL(back->ranks, 3);
  CU_ASSERT_EQUAL(back->slots, 300);
  CU_ASSERT(!memcmp(back->slot_expert, m->slot_expert, 3 * 300 * sizeof(int32_t)));
  clmoe_expert_map_destroy(back);
  free(text);
  clmoe_expert_map_destroy(m);

  static const struct { const char *text, *expect; } bad[] = {
    {"clmoe-expert-map 2 experts=2 ranks=1 slots=2\n0 1\n", "version 2"},
    {"clmoe-expert-map 1 experts=2 ranks=1\n0 1\n", "first line"},
    {"clmoe-expert-map 1 experts=2 ranks=1 slots=2\n0\n", "exactly 2 ids"},
    {"clmoe-expert-map 1 experts=2 ranks=1 slots=2\n0 2\n", "slot 1"},
    {"clmoe-expert-map 1 experts=2 ranks=1 slots=2\n1 1\n", "twice"},
    {"clmoe-expert-map 1 experts=3 ranks=1 slots=2\n0 1\n", "cannot hold"},
    {"clmoe-expert-map 1 experts=2 ranks=1 slots=2\n0 1\nextra\n", "text after"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    clmoe_status st = clmoe_expert_map_parse(bad[i].text, "bad.map", &back);
    int ok = st == CLMOE_ERR_FORMAT && back == NULL && strstr(clmoe_last_error(), bad[i].expect) &&
             strstr(clmoe_last_error(), "bad.map");
    if (!ok) fprintf(stderr, "\n  bad map %zu: %s: %s\n", i, clmoe_strerror(st), clmoe_last_error());
    CU_ASSERT(ok);
  }
}

/* ---- device choice per local rank -------------------------------------------------------- */

static void fake_device(clmoe_device_caps *c, int p, int d, int gpu, const char *name)
{
  memset(c, 0, sizeof *c);
  c->platform_index = p, c->device_index = d;
  c->is_gpu = gpu, c->is_cpu = !gpu;
  snprintf(c->device_name, sizeof c->device_name, "%s", name);
  snprintf(c->platform_name, sizeof c->platform_name, "%s", gpu ? "Fake GPU platform" : "PoCL");
  snprintf(c->vendor_name, sizeof c->vendor_name, "%s", gpu ? "FakeVendor" : "pocl");
}

static void test_choose_device(void)
{
  char *saved = getenv("CLMOE_DEVICE") ? strdup(getenv("CLMOE_DEVICE")) : NULL;
  unsetenv("CLMOE_DEVICE");
  clmoe_device_caps list[3];
  fake_device(&list[0], 0, 0, 0, "cpu-x86");
  fake_device(&list[1], 1, 0, 1, "gpu-a");
  fake_device(&list[2], 1, 1, 1, "gpu-b");
  int c = -1;
  char why[256];
  static const struct { const char *spec; int lr, ls, want; } cases[] = {
    {NULL, 0, 2, 1}, {NULL, 1, 2, 2}, {NULL, 2, 3, 1},   /* default: GPUs in order, wrap */
    {"gpu", 1, 2, 2}, {"cpu", 3, 4, 0},                   /* a type: its devices in order */
    {"0:0,1:1", 0, 2, 0}, {"0:0,1:1", 1, 2, 2}, {"0:0,1:1", 2, 4, 0}, /* a list */
    {"gpu-b", 0, 2, 2}, {"gpu-b", 1, 2, 2},               /* a name: the same for all */
    {"cpu,gpu", 1, 4, 1}, {"cpu,gpu", 3, 4, 2},           /* list of types: rank / entries */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    clmoe_status st = clmoe_dist_choose_device(list, 3, cases[i].spec, cases[i].lr, cases[i].ls, &c,
                                               why, sizeof why);
    if (st != CLMOE_OK || c != cases[i].want)
      fprintf(stderr, "\n  spec %s local rank %d of %d: got %d (%s), want %d\n",
              cases[i].spec ? cases[i].spec : "(none)", cases[i].lr, cases[i].ls, c,
              st ? clmoe_last_error() : why, cases[i].want);
    CU_ASSERT(st == CLMOE_OK && c == cases[i].want);
  }
  /* no GPU: every rank takes the CPU device */
  TEST_OK(clmoe_dist_choose_device(list, 1, NULL, 3, 4, &c, why, sizeof why));
  CU_ASSERT_EQUAL(c, 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "CPU"));
  /* the environment variable when there is no spec */
  setenv("CLMOE_DEVICE", "1:0", 1);
  TEST_OK(clmoe_dist_choose_device(list, 3, NULL, 1, 2, &c, why, sizeof why));
  CU_ASSERT(c == 1 && strstr(why, "CLMOE_DEVICE"));
  unsetenv("CLMOE_DEVICE");
  CU_ASSERT_EQUAL(clmoe_dist_choose_device(list, 3, "gpu,nosuch", 1, 2, &c, why, sizeof why),
                  CLMOE_ERR_NO_DEVICE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "nosuch"));
  CU_ASSERT_EQUAL(clmoe_dist_choose_device(list, 3, "gpu,,cpu", 1, 3, &c, why, sizeof why),
                  CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "empty"));
  CU_ASSERT_EQUAL(clmoe_dist_choose_device(list, 1, "gpu", 0, 1, &c, why, sizeof why),
                  CLMOE_ERR_NO_DEVICE);
  CU_ASSERT_EQUAL(clmoe_dist_choose_device(list, 3, NULL, 2, 2, &c, why, sizeof why),
                  CLMOE_ERR_INVALID_ARGUMENT);
  if (saved) setenv("CLMOE_DEVICE", saved, 1);
  free(saved);
}

/* Implementation names pick among that implementation's devices only, by local rank. */
static void test_choose_device_impl(void)
{
  char *saved = getenv("CLMOE_DEVICE") ? strdup(getenv("CLMOE_DEVICE")) : NULL;
  unsetenv("CLMOE_DEVICE");
  clmoe_device_caps list[4];
  fake_device(&list[0], 0, 0, 0, "pthread-skylake-avx512-Intel(R) Xeon(R) Processor");
  snprintf(list[0].platform_name, sizeof list[0].platform_name, "Portable Computing Language");
  fake_device(&list[1], 1, 0, 0, "Intel(R) Xeon(R) Processor");
  snprintf(list[1].platform_name, sizeof list[1].platform_name, "Intel(R) OpenCL");
  snprintf(list[1].platform_vendor, sizeof list[1].platform_vendor, "Intel(R) Corporation");
  fake_device(&list[2], 2, 0, 1, "NVIDIA H200");
  fake_device(&list[3], 2, 1, 1, "NVIDIA H200");
  for (int i = 2; i < 4; i++)
    snprintf(list[i].platform_name, sizeof list[i].platform_name, "NVIDIA CUDA");
  int c = -1;
  char why[256];
  static const struct { const char *spec; int lr, ls, want; } cases[] = {
    {"nvidia", 0, 2, 2}, {"cuda", 1, 2, 3}, {"nvidia", 2, 3, 2},      /* in order, wrap */
    {"intel", 0, 2, 1}, {"intel", 1, 2, 1},                             /* one device: shared */
    {"portable,intel", 0, 2, 0}, {"portable,intel", 1, 2, 1},           /* a list */
    {"pocl,nvidia", 1, 4, 2}, {"pocl,nvidia", 3, 4, 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    clmoe_status st = clmoe_dist_choose_device(list, 4, cases[i].spec, cases[i].lr, cases[i].ls, &c,
                                               why, sizeof why);
    if (st != CLMOE_OK || c != cases[i].want)
      fprintf(stderr, "\n  spec %s local rank %d of %d: got %d (%s), want %d\n", cases[i].spec,
              cases[i].lr, cases[i].ls, c, st ? clmoe_last_error() : why, cases[i].want);
    CU_ASSERT(st == CLMOE_OK && c == cases[i].want);
  }
  TEST_OK(clmoe_dist_choose_device(list, 4, "cuda", 1, 2, &c, why, sizeof why));
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "device 1 of 2 of the NVIDIA CUDA implementation"));
  /* no Intel runtime: an error for that rank, never PoCL's "...Intel(R) Xeon(R)..." */
  CU_ASSERT_EQUAL(clmoe_dist_choose_device(list, 1, "pocl,intel", 1, 2, &c, why, sizeof why),
                  CLMOE_ERR_NO_DEVICE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "no Intel OpenCL platform"));
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "(from --device)"));
  if (saved) setenv("CLMOE_DEVICE", saved, 1);
  free(saved);
}

/* ---- binding on synthetic topologies ----------------------------------------------------- */

/* 2 packages x 2 NUMA nodes x 4 cores x 2 PUs: PUs 0-31, NUMA node k holds PUs 8k..8k+7. */
#define TOPO "pack:2 numa:2 core:4 pu:2"

static void test_binding(void)
{
  clmoe_locality gpu;
  memset(&gpu, 0, sizeof gpu);
  gpu.known = 1, gpu.numa_node = 1;
  snprintf(gpu.pci_address, sizeof gpu.pci_address, "0000:41:00.0");
  snprintf(gpu.cpuset, sizeof gpu.cpuset, "8-15");
  clmoe_binding b;
  /* not bound yet: the device's NUMA node */
  TEST_OK(clmoe_dist_bind_plan(TOPO, NULL, &gpu, 0, 0, 2, "auto", &b));
  CU_ASSERT_EQUAL(b.source, CLMOE_BIND_DEVICE_NUMA);
  CU_ASSERT_STRING_EQUAL(b.cpuset, "8-15");
  CU_ASSERT_EQUAL(b.ncores, 4);
  /* already bound by the launcher: kept */
  TEST_OK(clmoe_dist_bind_plan(TOPO, "0-3", &gpu, 0, 0, 2, "auto", &b));
  CU_ASSERT_EQUAL(b.source, CLMOE_BIND_LAUNCHER);
  CU_ASSERT_STRING_EQUAL(b.cpuset, "0-3");
  CU_ASSERT_PTR_NOT_NULL(strstr(b.note, "launcher"));
  /* policy none */
  TEST_OK(clmoe_dist_bind_plan(TOPO, NULL, &gpu, 0, 0, 2, "none", &b));
  CU_ASSERT_EQUAL(b.source, CLMOE_BIND_NONE);
  CU_ASSERT_STRING_EQUAL(b.cpuset, "0-31");
  /* a GPU of unknown locality: not bound */
  clmoe_locality unknown;
  memset(&unknown, 0, sizeof unknown);
  unknown.numa_node = -1;
  TEST_OK(clmoe_dist_bind_plan(TOPO, NULL, &unknown, 0, 0, 2, NULL, &b));
  CU_ASSERT_EQUAL(b.source, CLMOE_BIND_NONE);
  /* a CPU device shared by 4 local ranks: disjoint shares of 4 cores covering the machine */
  unsigned covered = 0;
  for (int lr = 0; lr < 4; lr++) {
    TEST_OK(clmoe_dist_bind_plan(TOPO, NULL, &unknown, 1, lr, 4, "auto", &b));
    CU_ASSERT_EQUAL(b.source, CLMOE_BIND_CPU_SHARE);
    CU_ASSERT_EQUAL(b.ncores, 4);
    int first = -1, last = -1;
    CU_ASSERT_EQUAL_FATAL(sscanf(b.cpuset, "%d-%d", &first, &last), 2);
    unsigned bits = (unsigned)(((1ull << (last + 1)) - 1) ^ ((1ull << first) - 1));
    CU_ASSERT_EQUAL(covered & bits, 0u);
    covered |= bits;
  }
  CU_ASSERT_EQUAL(covered, 0xffffffffu);
  CU_ASSERT_STRING_EQUAL(b.warning, "");
  /* bad input names the cause */
  CU_ASSERT_EQUAL(clmoe_dist_bind_plan(TOPO, NULL, &gpu, 0, 0, 1, "sometimes", &b),
                  CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "sometimes"));
  CU_ASSERT_EQUAL(clmoe_dist_bind_plan("pack:x", NULL, &gpu, 0, 0, 1, NULL, &b),
                  CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_dist_bind_plan(TOPO, NULL, &gpu, 0, 2, 2, NULL, &b),
                  CLMOE_ERR_INVALID_ARGUMENT);
}

/* A CPU device's rank that the launcher bound to fewer cores than its share (16 cores / local
 * ranks on TOPO) is warned, with the fix; a binding as wide as the share, a GPU's rank, or
 * CLMOE_BIND=none is not. */
static void test_binding_share_warning(void)
{
  clmoe_locality cpu;
  memset(&cpu, 0, sizeof cpu);
  cpu.numa_node = -1;
  static const struct {
    const char *current; int device_is_cpu, local_size; const char *policy, *expect;
  } cases[] = {
    {"0-1", 1, 2, "auto", "runs on the 1 core the launcher bound this rank to, but its share is 8 "
                          "of the 16 cores (2 local ranks)"}, /* Open MPI's default: one core */
    {"0", 1, 2, "auto", "on the 1 core "},                    /* one PU of a core */
    {"0-13", 1, 2, "auto", "on the 7 cores "},
    {"0-1", 1, 4, "auto", "share is 4 of the 16 cores (4 local ranks)"},
    {"0-15", 1, 2, "auto", NULL},                             /* 8 cores: its share */
    {"0-7", 1, 4, "auto", NULL},
    {"0-1", 1, 16, "auto", NULL},                             /* share 1 */
    {"0-1", 1, 32, "auto", NULL},                             /* more ranks than cores */
    {"0-1", 0, 2, "auto", NULL},                              /* a GPU's rank */
    {"0-1", 1, 2, "none", NULL},                              /* CLMOE_BIND=none */
    {NULL, 1, 2, "auto", NULL},                               /* unbound: clmoe binds */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    clmoe_binding b;
    TEST_OK(clmoe_dist_bind_plan(TOPO, cases[i].current, &cpu, cases[i].device_is_cpu, 0,
                                 cases[i].local_size, cases[i].policy, &b));
    int ok = cases[i].expect ? strstr(b.warning, cases[i].expect) != NULL : b.warning[0] == '\0';
    if (!ok)
      fprintf(stderr, "\n  cpuset %s, cpu %d, %d local ranks, %s: warning '%s'\n",
              cases[i].current ? cases[i].current : "(all)", cases[i].device_is_cpu,
              cases[i].local_size, cases[i].policy, b.warning);
    CU_ASSERT(ok);
    if (cases[i].expect) {
      char fix[64];
      snprintf(fix, sizeof fix, "--map-by slot:PE=%d", 16 / cases[i].local_size);
      CU_ASSERT_EQUAL(b.source, CLMOE_BIND_LAUNCHER);
      CU_ASSERT_PTR_NOT_NULL(strstr(b.warning, "mpirun --bind-to none"));
      CU_ASSERT_PTR_NOT_NULL(strstr(b.warning, fix));
    }
  }

  /* rank 0's summary of gathered reports: the first warned rank and how many more */
  clmoe_rank_report all[3];
  memset(all, 0, sizeof all);
  for (int r = 0; r < 3; r++) {
    all[r].rank = r, all[r].size = 3, all[r].local_rank = r, all[r].local_size = 3;
    snprintf(all[r].host, sizeof all[r].host, "node7");
  }
  char buf[512];
  CU_ASSERT_EQUAL(clmoe_dist_binding_warnings(all, 3, buf, sizeof buf), 0);
  CU_ASSERT_STRING_EQUAL(buf, "");
  snprintf(all[1].bind_warning, sizeof all[1].bind_warning, "too few cores");
  CU_ASSERT_EQUAL(clmoe_dist_binding_warnings(all, 3, buf, sizeof buf), 1);
  CU_ASSERT_STRING_EQUAL(buf, "rank 1 (local rank 1 of 3 on node7): too few cores");
  snprintf(all[2].bind_warning, sizeof all[2].bind_warning, "too few cores");
  snprintf(all[0].bind_warning, sizeof all[0].bind_warning, "too few cores");
  CU_ASSERT_EQUAL(clmoe_dist_binding_warnings(all, 3, buf, sizeof buf), 3);
  CU_ASSERT_STRING_EQUAL(buf, "rank 0 (local rank 0 of 3 on node7): too few cores; 2 more ranks likewise");
}

/* ---- one rank without a launcher -------------------------------------------------------- */

static void test_single_rank(void)
{
  setenv("CLMOE_MPI", "0", 1);
  clmoe_dist *d = NULL;
  TEST_OK(clmoe_dist_init(&d, NULL, NULL));
  CU_ASSERT_EQUAL(clmoe_dist_size(d), 1);
  CU_ASSERT_EQUAL(clmoe_dist_rank(d), 0);
  CU_ASSERT_EQUAL(clmoe_dist_local_size(d), 1);
  CU_ASSERT_EQUAL(clmoe_dist_uses_mpi(d), 0);
  TEST_OK(clmoe_dist_barrier(d));
  clmoe_rank_report mine, all;
  memset(&mine, 0, sizeof mine);
  snprintf(mine.host, sizeof mine.host, "here");
  mine.numa_node = 3;
  TEST_OK(clmoe_dist_gather_reports(d, &mine, &all));
  CU_ASSERT(!memcmp(&mine, &all, sizeof mine));
  int64_t counts[2] = {7, -3};
  TEST_OK(clmoe_dist_allreduce_sum_i64(d, counts, 2));
  CU_ASSERT(counts[0] == 7 && counts[1] == -3);
  CU_ASSERT_EQUAL(clmoe_dist_allreduce_sum_f32(d, NULL, 2), CLMOE_ERR_INVALID_ARGUMENT);
  TEST_OK(clmoe_dist_finalize(d));
  setenv("CLMOE_MPI", "maybe", 1);
  CU_ASSERT_EQUAL(clmoe_dist_init(&d, NULL, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "CLMOE_MPI=maybe"));
  unsetenv("CLMOE_MPI");
  if (!clmoe_dist_built_with_mpi() && !getenv("PMIX_RANK") && !getenv("OMPI_COMM_WORLD_SIZE")) {
    /* a build without MPI under a launcher refuses, rather than run N lone copies */
    setenv("PMIX_RANK", "1", 1);
    CU_ASSERT_EQUAL(clmoe_dist_init(&d, NULL, NULL), CLMOE_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "PMIX_RANK"));
    setenv("CLMOE_MPI", "0", 1);
    TEST_OK(clmoe_dist_init(&d, NULL, NULL));
    CU_ASSERT_EQUAL(clmoe_dist_size(d), 1);
    TEST_OK(clmoe_dist_finalize(d));
    unsetenv("CLMOE_MPI");
    unsetenv("PMIX_RANK");
  }
}

/* One rank: dispatch hands each routed copy its token's row, combine puts rows back. */
static void test_exchange_single_rank(void)
{
  setenv("CLMOE_MPI", "0", 1);
  clmoe_dist *d = NULL;
  TEST_OK(clmoe_dist_init(&d, NULL, NULL));
  clmoe_expert_map *m = NULL;
  TEST_OK(clmoe_expert_map_even(5, 1, &m));
  const int32_t experts[6] = {4, 0, 2, 2, 1, 3}; /* [3 tokens, top 2] */
  const float x[6] = {1, 2, 3, 4, 5, 6};          /* [3 tokens, width 2] */
  clmoe_ep_plan *p = NULL;
  TEST_OK(clmoe_ep_plan_create(d, m, experts, 3, 2, &p));
  CU_ASSERT_EQUAL(p->recv_rows, 6);
  float recv[12], out[12];
  TEST_OK(clmoe_ep_dispatch(d, p, x, 2, recv));
  for (int i = 0; i < 6; i++) {
    CU_ASSERT_EQUAL(p->recv_expert[i], experts[p->send_copy[i]]);
    CU_ASSERT_EQUAL(recv[2 * i], x[2 * (p->send_copy[i] / 2)]);
    recv[2 * i] += 100.0f * (float)p->recv_expert[i], recv[2 * i + 1] += 0.5f;
  }
  TEST_OK(clmoe_ep_combine(d, p, recv, 2, out));
  for (int c = 0; c < 6; c++) {
    CU_ASSERT_EQUAL(out[2 * c], x[2 * (c / 2)] + 100.0f * (float)experts[c]);
    CU_ASSERT_EQUAL(out[2 * c + 1], x[2 * (c / 2) + 1] + 0.5f);
  }
  clmoe_ep_plan_destroy(p);
  const int32_t bad[2] = {0, 5};
  CU_ASSERT_EQUAL(clmoe_ep_plan_create(d, m, bad, 1, 2, &p), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "expert 5"));
  clmoe_expert_map *two = NULL;
  TEST_OK(clmoe_expert_map_even(5, 2, &two));
  CU_ASSERT_EQUAL(clmoe_ep_plan_create(d, two, experts, 3, 2, &p), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "2 ranks"));
  clmoe_expert_map_destroy(two);
  clmoe_expert_map_destroy(m);
  TEST_OK(clmoe_dist_finalize(d));
  unsetenv("CLMOE_MPI");
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "even expert map for 1..1000 ranks", test_even);
  CU_add_test(suite, "balanced map on skewed loads beats the even map", test_balance_skewed);
  CU_add_test(suite, "balanced map by hand", test_balance_by_hand);
  CU_add_test(suite, "expert map errors", test_map_errors);
  CU_add_test(suite, "expert map text round trip and bad text", test_text_round_trip);
  CU_add_test(suite, "device per local rank", test_choose_device);
  CU_add_test(suite, "device per local rank by implementation", test_choose_device_impl);
  CU_add_test(suite, "binding on a synthetic topology", test_binding);
  CU_add_test(suite, "binding narrower than a CPU rank's share is warned", test_binding_share_warning);
  CU_add_test(suite, "single rank without MPI", test_single_rank);
  CU_add_test(suite, "expert exchange on one rank", test_exchange_single_rank);
}

int main(void) { return test_main("dist", add_tests); }
