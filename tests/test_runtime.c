/* CUnit suite: device enumeration and choice, status codes, the program cache,
 * CLMOE_KERNEL_DIR, build errors, locality. */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
  TEST_OK(clmoe_device_choose(list, 3, "portable", &chosen, NULL, 0)); /* platform */
  CU_ASSERT_EQUAL(chosen, 0);
  TEST_OK(clmoe_device_choose(list, 3, "nvidia", &chosen, NULL, 0)); /* vendor */
  CU_ASSERT_EQUAL(chosen, 1);
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
  }
  const clmoe_device_caps *c = clmoe_ctx_caps(test_ctx);
  CU_ASSERT(c->inline_ptx == 0 || c->inline_ptx == 1); /* probed at context creation */
  if (c->vendor != CLMOE_VENDOR_NVIDIA) CU_ASSERT_EQUAL(c->inline_ptx, 0);
  free(list);
}

static void test_status(void)
{
  CU_ASSERT_STRING_EQUAL(clmoe_strerror(CLMOE_OK), "CL_SUCCESS");
  CU_ASSERT_STRING_EQUAL(clmoe_strerror(-30), "CL_INVALID_VALUE");
  CU_ASSERT_STRING_EQUAL(clmoe_strerror(CLMOE_ERR_SHAPE), "CLMOE_ERR_SHAPE");
  CU_ASSERT_STRING_EQUAL(clmoe_strerror(-12345), "unknown status");
  CU_ASSERT_STRING_EQUAL(clmoe_version(), PACKAGE_VERSION);
}

/* ---- the program cache ---- */
static int count_files(const char *dir, const char *suffix)
{
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name), s = strlen(suffix);
    if (l > s && !strcmp(e->d_name + l - s, suffix)) n++;
  }
  closedir(d);
  return n;
}

static void corrupt_files(const char *dir)
{
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[2400];
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r+b");
    if (!f) continue;
    fseek(f, 100, SEEK_SET); /* past the header: only the checksum can notice */
    fputs("garbage garbage garbage", f);
    fclose(f);
  }
  closedir(d);
}

/* Builds the random-fill program in a fresh context and checks the numbers it makes. */
static void fill_in_new_context(clmoe_program_stats *stats)
{
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.no_probe = 1};
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  clmoe_tensor t;
  const int64_t n = 100;
  float v[100];
  TEST_OK(clmoe_tensor_create(ctx, &t, CLMOE_F32, 1, &n));
  TEST_OK(clmoe_tensor_fill_uniform(&t, 7, 0.0f, 1.0f));
  TEST_OK(clmoe_tensor_read(&t, v, sizeof v));
  for (int i = 0; i < 100; i++) CU_ASSERT_EQUAL(v[i], clmoe_random_uniform(7, (uint64_t)i, 0.0f, 1.0f));
  clmoe_ctx_program_stats(ctx, stats);
  clmoe_tensor_destroy(&t);
  clmoe_ctx_destroy(ctx);
}

static void test_cache(void)
{
  char dir[] = "/tmp/clmoe-cache-test.XXXXXX";
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
  char sub[2048];
  snprintf(sub, sizeof sub, "%s/nested/dir", dir); /* created on demand */
  char *old = getenv("CLMOE_CACHE_DIR") ? strdup(getenv("CLMOE_CACHE_DIR")) : NULL;
  setenv("CLMOE_CACHE_DIR", sub, 1);
  char got[4096];
  CU_ASSERT_EQUAL(clmoe_cache_dir(got, sizeof got), 1);
  CU_ASSERT_STRING_EQUAL(got, sub);

  clmoe_program_stats s;
  fill_in_new_context(&s); /* cold: compiled and written */
  CU_ASSERT(s.builds >= 1 && s.cache_writes >= 1 && s.cache_hits == 0);
  CU_ASSERT(count_files(sub, ".clbin") >= 1);
  CU_ASSERT_EQUAL(count_files(sub, ".tmp"), 0);
  fill_in_new_context(&s); /* warm: loaded */
  CU_ASSERT(s.cache_hits >= 1 && s.builds == 0);
  corrupt_files(sub); /* corrupt: rejected silently, rebuilt, rewritten */
  fill_in_new_context(&s);
  CU_ASSERT(s.cache_rejects >= 1 && s.builds >= 1 && s.cache_writes >= 1);
  fill_in_new_context(&s);
  CU_ASSERT(s.cache_hits >= 1 && s.builds == 0);
  setenv("CLMOE_CACHE", "0", 1); /* off: nothing read or written */
  CU_ASSERT_EQUAL(clmoe_cache_dir(got, sizeof got), 0);
  fill_in_new_context(&s);
  CU_ASSERT(s.cache_hits == 0 && s.cache_writes == 0 && s.builds >= 1);
  unsetenv("CLMOE_CACHE");

  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
  if (old) setenv("CLMOE_CACHE_DIR", old, 1);
  else unsetenv("CLMOE_CACHE_DIR");
  free(old);
}

/* ---- CLMOE_KERNEL_DIR: sources read from a directory at run time ---- */
static int write_file(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  if (!f) return 0;
  int ok = fputs(text, f) >= 0;
  return fclose(f) == 0 && ok;
}

static void test_kernel_dir(void)
{
  const char *src = getenv("CLMOE_SRCDIR");
  char dir[] = "/tmp/clmoe-kdir-test.XXXXXX", path[2048], cmd[4200];
  CU_ASSERT_PTR_NOT_NULL_FATAL(src);
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "cp '%s/kernels_cl/common.cl' '%s/'", src, dir);
  CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
  /* A tensor.cl whose conversion writes 2.0 everywhere: proves the directory is used. */
  snprintf(path, sizeof path, "%s/tensor.cl", dir);
  CU_ASSERT_FATAL(write_file(path,
      "__kernel void convert_f32_to_bf16(__global const float *s, ulong so, __global ushort *d,\n"
      "                                  ulong dof, ulong n)\n"
      "{ ulong i = get_global_id(0); if (i < n) d[dof + i] = 0x4000; }\n"));
  setenv("CLMOE_KERNEL_DIR", dir, 1);
  setenv("CLMOE_CACHE", "0", 1);
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.no_probe = 1};
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  clmoe_tensor a, b;
  const int64_t n = 33;
  float ones[33], back[33];
  for (int i = 0; i < 33; i++) ones[i] = 1.0f;
  TEST_OK(clmoe_tensor_create(ctx, &a, CLMOE_F32, 1, &n));
  TEST_OK(clmoe_tensor_create(ctx, &b, CLMOE_BF16, 1, &n));
  TEST_OK(clmoe_tensor_write(&a, ones, sizeof ones));
  TEST_OK(clmoe_tensor_copy(&b, &a));
  TEST_OK(clmoe_tensor_read_f32(&b, back));
  for (int i = 0; i < 33; i++) CU_ASSERT_EQUAL(back[i], 2.0f);
  /* A family missing from the directory: an I/O error naming the file. */
  CU_ASSERT_EQUAL(clmoe_tensor_fill_uniform(&a, 1, 0.0f, 1.0f), CLMOE_ERR_IO);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "random.cl"));
  clmoe_tensor_destroy(&a);
  clmoe_tensor_destroy(&b);
  clmoe_ctx_destroy(ctx);

  /* A source that does not compile: CLMOE_ERR_BUILD with the file and the compiler log. */
  CU_ASSERT_FATAL(write_file(path, "__kernel void convert_f32_to_bf16(__global float *x) { this is not C; }\n"));
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  TEST_OK(clmoe_tensor_create(ctx, &a, CLMOE_F32, 1, &n));
  TEST_OK(clmoe_tensor_create(ctx, &b, CLMOE_BF16, 1, &n));
  CU_ASSERT_EQUAL(clmoe_tensor_copy(&b, &a), CLMOE_ERR_BUILD);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "tensor.cl"));
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "Compiler log"));
  clmoe_tensor_destroy(&a);
  clmoe_tensor_destroy(&b);
  clmoe_ctx_destroy(ctx);
  unsetenv("CLMOE_KERNEL_DIR");
  unsetenv("CLMOE_CACHE");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
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
  CU_add_test(suite, "device enumeration", test_devices);
  CU_add_test(suite, "status codes and version", test_status);
  CU_add_test(suite, "program cache: write, hit, corrupt, off", test_cache);
  CU_add_test(suite, "CLMOE_KERNEL_DIR and build errors", test_kernel_dir);
  CU_add_test(suite, "device locality (hwloc)", test_locality);
}

int main(void) { return test_main("runtime", add_tests); }
