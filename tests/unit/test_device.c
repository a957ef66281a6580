/* CUnit suite: devices. Their choice (--device, CLMOE_DEVICE) on synthetic lists, the
 * implementation identified from a platform's strings and chosen by the names users type,
 * the enumeration of this machine's devices, and their locality (hwloc). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"

/* ---- device choice on synthetic lists: the logic, independent of this machine ---- */
static clmoe_device_caps fake(int p, int d, int gpu, const char *plat, const char *name)
{
  clmoe_device_caps c;
  memset(&c, 0, sizeof c);
  c.platform_index = p, c.device_index = d;
  c.is_gpu = gpu, c.is_cpu = !gpu;
  snprintf(c.platform_name, sizeof c.platform_name, "%s", plat);
  snprintf(c.vendor_name, sizeof c.vendor_name, "%s", gpu ? "NVIDIA Corporation" : "GenuineIntel");
  snprintf(c.device_name, sizeof c.device_name, "%s", name);
  return c;
}

static void test_choose(void)
{
  clmoe_device_caps list[3] = {fake(0, 0, 0, "Portable Computing Language", "pthread-cpu"),
                               fake(1, 0, 1, "NVIDIA CUDA", "NVIDIA H200"),
                               fake(1, 1, 1, "NVIDIA CUDA", "NVIDIA H100")};
  int chosen = -1;
  char why[256];
  unsetenv("CLMOE_DEVICE");
  TEST_OK(clmoe_device_choose(list, 3, NULL, &chosen, why, sizeof why));
  CU_ASSERT_EQUAL(chosen, 1); /* the first GPU, though a CPU comes first */
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "GPU"));
  TEST_OK(clmoe_device_choose(list, 1, NULL, &chosen, why, sizeof why));
  CU_ASSERT_EQUAL(chosen, 0); /* no GPU: the CPU */
  TEST_OK(clmoe_device_choose(list, 3, "1:1", &chosen, NULL, 0));
  CU_ASSERT_EQUAL(chosen, 2);
  TEST_OK(clmoe_device_choose(list, 3, "cpu", &chosen, NULL, 0));
  CU_ASSERT_EQUAL(chosen, 0);
  TEST_OK(clmoe_device_choose(list, 3, "GPU", &chosen, NULL, 0));
  CU_ASSERT_EQUAL(chosen, 1);
  TEST_OK(clmoe_device_choose(list, 3, "h100", &chosen, NULL, 0)); /* name, any case */
  CU_ASSERT_EQUAL(chosen, 2);
  TEST_OK(clmoe_device_choose(list, 3, "portable", &chosen, NULL, 0)); /* PoCL's alias */
  CU_ASSERT_EQUAL(chosen, 0);
  TEST_OK(clmoe_device_choose(list, 3, "nvidia", &chosen, NULL, 0)); /* an implementation */
  CU_ASSERT_EQUAL(chosen, 1);
  TEST_OK(clmoe_device_choose(list, 3, "computing", &chosen, NULL, 0)); /* platform name */
  CU_ASSERT_EQUAL(chosen, 0);
  CU_ASSERT_EQUAL(clmoe_device_choose(list, 3, "mi300", &chosen, NULL, 0), CLMOE_ERR_NO_DEVICE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "mi300"));
  CU_ASSERT_EQUAL(clmoe_device_choose(list, 3, "2:0", &chosen, NULL, 0), CLMOE_ERR_NO_DEVICE);
  setenv("CLMOE_DEVICE", "H100", 1);
  TEST_OK(clmoe_device_choose(list, 3, NULL, &chosen, why, sizeof why));
  CU_ASSERT_EQUAL(chosen, 2);
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "CLMOE_DEVICE"));
  TEST_OK(clmoe_device_choose(list, 3, "cpu", &chosen, NULL, 0)); /* the flag wins */
  CU_ASSERT_EQUAL(chosen, 0);
  unsetenv("CLMOE_DEVICE");
}

/* ---- implementations: identified from platform strings, chosen by the names users type ---- */

/* A record as clmoe__device_caps fills it, from the strings a driver reports. */
static clmoe_device_caps fake_impl(int p, int d, const char *type, const char *plat,
                                   const char *plat_vendor, const char *plat_version,
                                   const char *suffix, const char *name, const char *vendor)
{
  clmoe_device_caps c;
  memset(&c, 0, sizeof c);
  c.platform_index = p, c.device_index = d;
  c.is_gpu = !strcmp(type, "gpu"), c.is_cpu = !strcmp(type, "cpu");
  c.is_accelerator = !strcmp(type, "accelerator");
  snprintf(c.platform_name, sizeof c.platform_name, "%s", plat);
  snprintf(c.platform_vendor, sizeof c.platform_vendor, "%s", plat_vendor);
  snprintf(c.platform_version, sizeof c.platform_version, "%s", plat_version);
  snprintf(c.icd_suffix, sizeof c.icd_suffix, "%s", suffix);
  snprintf(c.device_name, sizeof c.device_name, "%s", name);
  snprintf(c.vendor_name, sizeof c.vendor_name, "%s", vendor);
  c.impl = clmoe_impl_identify(plat, plat_vendor, plat_version, suffix);
  return c;
}

#define POCL_CPU(p) fake_impl(p, 0, "cpu", "Portable Computing Language", "The pocl project", \
    "OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, RELOC, SPIR, LLVM 15.0.6", "POCL", \
    "pthread-skylake-avx512-Intel(R) Xeon(R) Processor", "GenuineIntel")
#define INTEL_CPU(p) fake_impl(p, 0, "cpu", "Intel(R) OpenCL", "Intel(R) Corporation", \
    "OpenCL 3.1 LINUX", "INTEL", "Intel(R) Xeon(R) Processor", "Intel(R) Corporation")
#define NVIDIA_GPU(p) fake_impl(p, 0, "gpu", "NVIDIA CUDA", "NVIDIA Corporation", \
    "OpenCL 3.0 CUDA 12.4.131", "NV", "NVIDIA H200", "NVIDIA Corporation")
#define AMD_GPU(p) fake_impl(p, 0, "gpu", "AMD Accelerated Parallel Processing", \
    "Advanced Micro Devices, Inc.", "OpenCL 2.1 AMD-APP (3614.0)", "AMD", "gfx942:sramecc+:xnack-", \
    "Advanced Micro Devices, Inc.")
#define OTHER_ACC(p) fake_impl(p, 0, "accelerator", "Example Platform", "Example Labs", \
    "OpenCL 1.2 example", "EXQ", "widget", "Example Labs")

static void test_impl_identify(void)
{
  static const struct { const char *name, *vendor, *version, *suffix; clmoe_impl want; } cases[] = {
    {"Portable Computing Language", "The pocl project", "OpenCL 3.0 PoCL 3.1", "POCL", CLMOE_IMPL_POCL},
    {"Portable Computing Language", "The pocl project", "OpenCL 1.2 pocl 1.8", "", CLMOE_IMPL_POCL},
    {"Intel(R) OpenCL", "Intel(R) Corporation", "OpenCL 3.1 LINUX", "INTEL", CLMOE_IMPL_INTEL},
    {"Intel(R) OpenCL Graphics", "Intel(R) Corporation", "OpenCL 3.0 ", "", CLMOE_IMPL_INTEL},
    {"NVIDIA CUDA", "NVIDIA Corporation", "OpenCL 3.0 CUDA 12.4.131", "NV", CLMOE_IMPL_NVIDIA},
    {"AMD Accelerated Parallel Processing", "Advanced Micro Devices, Inc.", "OpenCL 2.1 AMD-APP",
     "AMD", CLMOE_IMPL_AMD},
    {"AMD Accelerated Parallel Processing", "Advanced Micro Devices, Inc.", "OpenCL 2.1", "",
     CLMOE_IMPL_AMD},
    {"Oclgrind", "Oclgrind", "OpenCL 1.2 (Oclgrind 21.10)", "oclg", CLMOE_IMPL_OCLGRIND},
    {"rusticl", "Mesa/X.org", "OpenCL 3.0 ", "MESA", CLMOE_IMPL_RUSTICL},
    {"Clover", "Mesa", "OpenCL 1.1 Mesa 22.3.6", "MESA", CLMOE_IMPL_CLOVER},
    {"clvk", "clvk", "OpenCL 3.0 clvk", "clvk", CLMOE_IMPL_CLVK},
    {"Apple", "Apple", "OpenCL 1.2 (Jun 23 2023)", "", CLMOE_IMPL_APPLE},
    {"ARM Platform", "ARM", "OpenCL 3.0 v1.r40p0", "", CLMOE_IMPL_ARM},
    {"QUALCOMM Snapdragon(TM)", "QUALCOMM", "OpenCL 3.0 QUALCOMM build", "", CLMOE_IMPL_QUALCOMM},
    {"Example Platform", "Example Labs", "OpenCL 1.2", "EXQ", CLMOE_IMPL_OTHER},
    {"Farmhouse CL", "Charming Devices", "OpenCL 1.2", "", CLMOE_IMPL_OTHER}, /* no word arm/amd */
    {NULL, NULL, NULL, NULL, CLMOE_IMPL_OTHER},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    clmoe_impl got = clmoe_impl_identify(cases[i].name, cases[i].vendor, cases[i].version,
                                         cases[i].suffix);
    if (got != cases[i].want)
      fprintf(stderr, "\n  %s / %s: identified as %s, want %s\n", cases[i].name, cases[i].vendor,
              clmoe_impl_name(got), clmoe_impl_name(cases[i].want));
    CU_ASSERT_EQUAL(got, cases[i].want);
  }
  /* Names and aliases: each parses to its implementation; the list in messages is complete. */
  static const struct { const char *alias; clmoe_impl want; } aliases[] = {
    {"portable", CLMOE_IMPL_POCL}, {"PoCL", CLMOE_IMPL_POCL}, {"oneapi", CLMOE_IMPL_INTEL},
    {"cuda", CLMOE_IMPL_NVIDIA}, {"rocm", CLMOE_IMPL_AMD}, {"mali", CLMOE_IMPL_ARM},
    {"adreno", CLMOE_IMPL_QUALCOMM},
  };
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
    clmoe_impl got = CLMOE_IMPL_OTHER;
    CU_ASSERT(clmoe_impl_parse(aliases[i].alias, &got) && got == aliases[i].want);
  }
  CU_ASSERT_FALSE(clmoe_impl_parse("other", NULL));
  CU_ASSERT_FALSE(clmoe_impl_parse("xeon", NULL));
  CU_ASSERT_FALSE(clmoe_impl_parse("poc", NULL)); /* whole names only */
  CU_ASSERT_STRING_EQUAL(clmoe_impl_name(CLMOE_IMPL_OTHER), "other");
  const char *names = clmoe_impl_names();
  for (int impl = CLMOE_IMPL_POCL; impl <= CLMOE_IMPL_QUALCOMM; impl++) {
    clmoe_impl got = CLMOE_IMPL_OTHER;
    const char *name = clmoe_impl_name((clmoe_impl)impl);
    CU_ASSERT(clmoe_impl_parse(name, &got) && (int)got == impl);
    CU_ASSERT_PTR_NOT_NULL(strstr(names, name));
  }
  char copy[512];
  snprintf(copy, sizeof copy, "%s", names);
  int tokens = 0;
  for (char *save = NULL, *t = strtok_r(copy, ", |", &save); t; t = strtok_r(NULL, ", |", &save)) {
    tokens++;
    if (!clmoe_impl_parse(t, NULL)) fprintf(stderr, "\n  listed name '%s' does not parse\n", t);
    CU_ASSERT(clmoe_impl_parse(t, NULL));
  }
  CU_ASSERT(tokens >= CLMOE_IMPL_QUALCOMM);
}

/* Chooses spec from list; checks the index and that `why` names the rule. */
static void expect_choice(const clmoe_device_caps *list, int n, const char *spec, int want,
                          const char *rule)
{
  int chosen = -1;
  char why[256] = "";
  clmoe_status st = clmoe_device_choose(list, n, spec, &chosen, why, sizeof why);
  int ok = st == CLMOE_OK && chosen == want && strstr(why, rule) != NULL;
  if (!ok)
    fprintf(stderr, "\n  --device %s: got %d (%s), want %d by '%s'\n", spec, chosen,
            st ? clmoe_last_error() : why, want, rule);
  CU_ASSERT(ok);
}

static void test_choose_impl(void)
{
  unsetenv("CLMOE_DEVICE");
  /* PoCL on an Intel CPU first, then Intel's runtime on the same CPU, an NVIDIA GPU, an AMD
   * GPU and an unidentified accelerator. */
  clmoe_device_caps list[5] = {POCL_CPU(0), INTEL_CPU(1), NVIDIA_GPU(2), AMD_GPU(3), OTHER_ACC(4)};
  expect_choice(list, 5, "1:0", 1, "platform 1, device 0");                /* 1: indices */
  expect_choice(list, 5, "gpu", 2, "of that type");                        /* 2: types */
  expect_choice(list, 5, "cpu", 0, "of that type");
  expect_choice(list, 5, "accelerator", 4, "of that type");
  expect_choice(list, 5, "intel", 1, "the first device of the Intel OpenCL implementation");
  expect_choice(list, 5, "INTEL", 1, "Intel OpenCL implementation");      /* 3: not PoCL's */
  expect_choice(list, 5, "oneapi", 1, "Intel OpenCL implementation");
  expect_choice(list, 5, "pocl", 0, "PoCL implementation");
  expect_choice(list, 5, "portable", 0, "PoCL implementation");
  expect_choice(list, 5, "cuda", 2, "NVIDIA CUDA implementation");
  expect_choice(list, 5, "nvidia", 2, "NVIDIA CUDA implementation");
  expect_choice(list, 5, "amd", 3, "AMD ROCm implementation");
  expect_choice(list, 5, "rocm", 3, "AMD ROCm implementation");
  expect_choice(list, 5, "Intel(R) OpenCL", 1, "platform name");          /* 4: platform */
  expect_choice(list, 5, "Intel(R)", 1, "platform name"); /* before PoCL's device name */
  expect_choice(list, 5, "Corporation", 1, "platform vendor");
  expect_choice(list, 5, "CUDA 12", 2, "platform version");
  expect_choice(list, 5, "exq", 4, "ICD suffix");
  expect_choice(list, 5, "Xeon", 0, "device name");                       /* 5: device */
  expect_choice(list, 5, "skylake", 0, "device name");
  expect_choice(list, 5, "H200", 2, "device name");
  expect_choice(list, 5, "gfx942", 3, "device name");
  expect_choice(list, 5, "GenuineIntel", 0, "device vendor");
  int chosen = -1;
  CU_ASSERT_EQUAL(clmoe_device_choose(list, 5, "nosuch", &chosen, NULL, 0), CLMOE_ERR_NO_DEVICE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "nosuch matches no device"));
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "portable"));
  /* Records made by hand without impl are identified from their strings. */
  list[1].impl = CLMOE_IMPL_OTHER;
  expect_choice(list, 5, "intel", 1, "Intel OpenCL implementation");

  /* No Intel runtime: "intel" is an error naming what exists and how to pick PoCL's device
   * named "...Intel(R) Xeon(R)...", never that device. */
  clmoe_device_caps no_intel[3] = {POCL_CPU(0), NVIDIA_GPU(1), AMD_GPU(2)};
  CU_ASSERT_EQUAL(clmoe_device_choose(no_intel, 3, "intel", &chosen, NULL, 0), CLMOE_ERR_NO_DEVICE);
  const char *e = clmoe_last_error();
  CU_ASSERT_PTR_NOT_NULL(strstr(e, "--device=intel: no Intel OpenCL platform"));
  CU_ASSERT_PTR_NOT_NULL(strstr(e, "found PoCL [0:0] pthread-skylake-avx512-Intel(R) Xeon(R) Processor"));
  CU_ASSERT_PTR_NOT_NULL(strstr(e, "NVIDIA CUDA [1:0] NVIDIA H200"));
  CU_ASSERT_PTR_NOT_NULL(strstr(e, "AMD ROCm [2:0] gfx942"));
  CU_ASSERT_PTR_NOT_NULL(strstr(e, "use --device=0:0 or --device=pthread"));
  expect_choice(no_intel, 3, "pthread", 0, "device name"); /* the word suggested picks it */
  /* an implementation nobody's device is named after: the list, no hint */
  setenv("CLMOE_DEVICE", "oclgrind", 1);
  CU_ASSERT_EQUAL(clmoe_device_choose(no_intel, 3, NULL, &chosen, NULL, 0), CLMOE_ERR_NO_DEVICE);
  e = clmoe_last_error();
  CU_ASSERT_PTR_NOT_NULL(strstr(e, "CLMOE_DEVICE=oclgrind: no Oclgrind platform"));
  CU_ASSERT_PTR_NULL(strstr(e, "names an implementation"));
  unsetenv("CLMOE_DEVICE");
  /* no GPU of AMD's own runtime, though a Mesa driver runs an AMD GPU */
  clmoe_device_caps mesa[2] = {POCL_CPU(0), fake_impl(1, 0, "gpu", "rusticl", "Mesa/X.org",
                               "OpenCL 3.0 ", "MESA", "AMD Radeon RX 7900 XTX (radeonsi, navi31)",
                               "AMD")};
  CU_ASSERT_EQUAL(clmoe_device_choose(mesa, 2, "amd", &chosen, NULL, 0), CLMOE_ERR_NO_DEVICE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "Mesa rusticl [1:0] AMD Radeon"));
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "use --device=1:0 or --device=Radeon"));
  expect_choice(mesa, 2, "rusticl", 1, "Mesa rusticl implementation");
  expect_choice(mesa, 2, "Radeon", 1, "device name");
  CU_ASSERT_EQUAL(clmoe_device_choose(mesa, 2, "accelerator", &chosen, NULL, 0), CLMOE_ERR_NO_DEVICE);
}

static void test_devices(void)
{
  clmoe_device_caps *list = NULL;
  int n = 0;
  TEST_OK(clmoe_devices_list(&list, &n));
  CU_ASSERT(n >= 1);
  for (int i = 0; i < n; i++) {
    CU_ASSERT(list[i].device_name[0] != '\0');
    CU_ASSERT(list[i].compute_units >= 1);
    CU_ASSERT(list[i].wg_size >= 1 && list[i].wg_size <= list[i].max_work_group_size);
    CU_ASSERT(list[i].opencl_c_major >= 1);
    /* the implementation comes from the platform's strings, and its name picks a device of it */
    CU_ASSERT(list[i].platform_vendor[0] != '\0');
    CU_ASSERT_EQUAL(list[i].impl, clmoe_impl_identify(list[i].platform_name, list[i].platform_vendor,
                                                      list[i].platform_version, list[i].icd_suffix));
    if (strstr(list[i].platform_name, "Portable Computing Language"))
      CU_ASSERT_EQUAL(list[i].impl, CLMOE_IMPL_POCL);
    if (list[i].impl != CLMOE_IMPL_OTHER) {
      int chosen = -1;
      TEST_OK(clmoe_device_choose(list, n, clmoe_impl_name(list[i].impl), &chosen, NULL, 0));
      CU_ASSERT(chosen >= 0 && chosen <= i && list[chosen].impl == list[i].impl);
    }
  }
  const clmoe_device_caps *c = clmoe_ctx_caps(test_ctx);
  CU_ASSERT(c->inline_ptx == 0 || c->inline_ptx == 1); /* probed at context creation */
  if (c->vendor != CLMOE_VENDOR_NVIDIA) CU_ASSERT_EQUAL(c->inline_ptx, 0);
  free(list);
}

static void test_locality(void)
{
  clmoe_locality loc;
  TEST_OK(clmoe_device_locality(clmoe_ctx_caps(test_ctx), &loc));
  CU_ASSERT(loc.cpuset[0] != '\0');
  CU_ASSERT(loc.machine_cores >= 1 && loc.ncores >= 1 && loc.ncores <= loc.machine_cores);
  if (!loc.known) CU_ASSERT(loc.note[0] != '\0');
  if (!clmoe_ctx_caps(test_ctx)->pci_known) CU_ASSERT_EQUAL(loc.known, 0);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "device choice (synthetic lists)", test_choose);
  CU_add_test(suite, "implementation identity from platform strings", test_impl_identify);
  CU_add_test(suite, "device choice by implementation, platform, device", test_choose_impl);
  CU_add_test(suite, "device enumeration", test_devices);
  CU_add_test(suite, "device locality (hwloc)", test_locality);
}

int main(void) { return test_main("device", add_tests); }
