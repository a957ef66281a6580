/* CUnit suite: status codes, the program cache, CLMOE_KERNEL_DIR, build errors, the knobs.
 * (Devices, their choice and locality: test_device.c.) */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clmoe/paths.h"
#include "test_common.h"

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

/* Each entry's header claims 4 GiB of payload (bytes 32-39, the payload size): the reader
 * compares the claim with the file before it allocates, and rejects the entry. */
static void inflate_claims(const char *dir)
{
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[2400];
  const uint64_t claim = (uint64_t)1 << 32;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r+b");
    if (!f) continue;
    fseek(f, 32, SEEK_SET);
    fwrite(&claim, sizeof claim, 1, f);
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
  inflate_claims(sub); /* a header claiming more than the file holds: rejected, rebuilt */
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
  /* The directory mirrors kernels_cl/: runtime/common.cl, runtime/tensor.cl, ... */
  snprintf(cmd, sizeof cmd, "mkdir '%s/runtime' && cp '%s/kernels_cl/runtime/common.cl' '%s/runtime/'",
           dir, src, dir);
  CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
  /* A tensor.cl whose conversion writes 2.0 everywhere: proves the directory is used. */
  snprintf(path, sizeof path, "%s/runtime/tensor.cl", dir);
  CU_ASSERT_FATAL(write_file(path,
      "__kernel void convert_f32_to_bf16(__global const float *s, ulong so, __global ushort *d,\n"
      "                                  ulong dof, ulong n)\n"
      "{ ulong i = get_global_id(0); if (i < n) d[dof + i] = 0x4000; }\n"));
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.no_probe = 1};
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_KERNEL_DIR", dir));
  TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_CACHE", "0"));
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
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "runtime/random.cl"));
  clmoe_tensor_destroy(&a);
  clmoe_tensor_destroy(&b);
  clmoe_ctx_destroy(ctx);

  /* A source that does not compile: CLMOE_ERR_BUILD with the file and the compiler log. */
  CU_ASSERT_FATAL(write_file(path, "__kernel void convert_f32_to_bf16(__global float *x) { this is not C; }\n"));
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_KERNEL_DIR", dir));
  TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_CACHE", "0"));
  TEST_OK(clmoe_tensor_create(ctx, &a, CLMOE_F32, 1, &n));
  TEST_OK(clmoe_tensor_create(ctx, &b, CLMOE_BF16, 1, &n));
  CU_ASSERT_EQUAL(clmoe_tensor_copy(&b, &a), CLMOE_ERR_BUILD);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "tensor.cl"));
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "Compiler log"));
  clmoe_tensor_destroy(&a);
  clmoe_tensor_destroy(&b);
  clmoe_ctx_destroy(ctx);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
}

/* ---- knobs: the table of CLMOE_ variables, the environment, the per-context override ---- */

/* Every knob's default validates; its fields are filled; a bad value of each kind is refused
 * with the variable, the value and what it accepts in the message. */
static void test_knob_table(void)
{
  const int n = clmoe_knob_count();
  CU_ASSERT(n >= 20);
  for (int i = 0; i < n; i++) {
    clmoe_knob_info k;
    TEST_OK(clmoe_knob_describe(i, &k));
    CU_ASSERT(k.name && !strncmp(k.name, "CLMOE_", 6) && k.kind && k.accepts && k.doc && k.doc[0]);
    CU_ASSERT(k.scope && (!strcmp(k.scope, "user") || !strcmp(k.scope, "tuning") || !strcmp(k.scope, "testing")));
    if (k.def) {
      clmoe_status st = clmoe_knob_check(k.name, k.def);
      if (st != CLMOE_OK) fprintf(stderr, "\n  %s: default %s: %s\n", k.name, k.def, clmoe_last_error());
      CU_ASSERT_EQUAL(st, CLMOE_OK);
    }
    CU_ASSERT_EQUAL(clmoe_knob_check(k.name, NULL), CLMOE_OK); /* unset */
  }
  CU_ASSERT_EQUAL(clmoe_knob_describe(n, &(clmoe_knob_info){0}), CLMOE_ERR_INVALID_ARGUMENT);
  static const struct { const char *name, *value, *expect; } bad[] = {
      {"CLMOE_FASTPATH", "maybe", "auto, 0, 1"},           /* enum */
      {"CLMOE_POISON", "2", "0 or 1"},                     /* bool */
      {"CLMOE_LOCAL_MEM_BYTES", "0", "an integer >= 1"},   /* int, out of range */
      {"CLMOE_LOCAL_MEM_BYTES", "48k", "not an integer"},  /* int */
      {"CLMOE_KDA_KEEP_MAX_MB", "lots", "not a number"},   /* number */
      {"CLMOE_GEMM_ASYNC", "128,128", "bm,bn,warps_m"},    /* int list, shape */
      {"CLMOE_GEMM_WGMMA", "1,x", "not a list"},           /* int list */
      {"CLMOE_MLA_TC_WGMMA", "48,1", "bk must be 32 or 64"},
      {"CLMOE_MLA_TC_TILES_PER_LAUNCH", "70000", "out of range"},
      {"CLMOE_KDA_TCB_PAIR", "3", "auto, 1, 2"},
      {"CLMOE_MPI", "maybe", "auto, 0, 1"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char want[128];
    snprintf(want, sizeof want, "%s=%s", bad[i].name, bad[i].value);
    const clmoe_status st = clmoe_knob_check(bad[i].name, bad[i].value);
    const int ok = st == CLMOE_ERR_INVALID_ARGUMENT && strstr(clmoe_last_error(), want) &&
                   strstr(clmoe_last_error(), bad[i].expect);
    if (!ok) fprintf(stderr, "\n  %s: %s\n", want, clmoe_last_error());
    CU_ASSERT(ok);
  }
  CU_ASSERT_EQUAL(clmoe_knob_check("CLMOE_NO_SUCH", "1"), CLMOE_ERR_INVALID_ARGUMENT);
  TEST_OK(clmoe_knob_check("CLMOE_FASTPATH", "auto"));
  TEST_OK(clmoe_knob_check("CLMOE_GEMM_ASYNC", "0"));
  TEST_OK(clmoe_knob_check("CLMOE_GEMM_ASYNC", "64,64,2,2,2,16"));
  TEST_OK(clmoe_knob_check("CLMOE_MLA_TC_WGMMA", "64,1,0"));
  TEST_OK(clmoe_knob_check("CLMOE_KDA_KEEP_MAX_MB", "0.5"));
}

/* clmoe_ctx_set_knob: validated, per context, NULL back to the environment's value, "" the
 * default; knobs read before any context exists are refused. */
static void test_knob_override(void)
{
  clmoe_ctx *a = NULL, *b = NULL;
  clmoe_ctx_options opts = {.no_probe = 1};
  char *keep = test_env_set("CLMOE_KDA_TC_STEP", NULL);
  TEST_OK(clmoe_ctx_create(&a, &opts));
  TEST_OK(clmoe_ctx_create(&b, &opts));
  char v[64];
  clmoe_knob_source src;
  TEST_OK(clmoe_ctx_knob(a, "CLMOE_KDA_TC_STEP", v, sizeof v, &src));
  CU_ASSERT(!strcmp(v, "64") && src == CLMOE_KNOB_DEFAULT);
  TEST_OK(clmoe_ctx_set_knob(a, "CLMOE_KDA_TC_STEP", "16"));
  TEST_OK(clmoe_ctx_knob(a, "CLMOE_KDA_TC_STEP", v, sizeof v, &src));
  CU_ASSERT(!strcmp(v, "16") && src == CLMOE_KNOB_SET);
  TEST_OK(clmoe_ctx_knob(b, "CLMOE_KDA_TC_STEP", v, sizeof v, &src)); /* the other context */
  CU_ASSERT(!strcmp(v, "64") && src == CLMOE_KNOB_DEFAULT);
  CU_ASSERT_EQUAL(clmoe_ctx_set_knob(a, "CLMOE_KDA_TC_STEP", "32"), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "CLMOE_KDA_TC_STEP=32"));
  TEST_OK(clmoe_ctx_knob(a, "CLMOE_KDA_TC_STEP", v, sizeof v, NULL)); /* unchanged */
  CU_ASSERT_STRING_EQUAL(v, "16");
  TEST_OK(clmoe_ctx_set_knob(a, "CLMOE_KDA_TC_STEP", NULL));
  TEST_OK(clmoe_ctx_knob(a, "CLMOE_KDA_TC_STEP", v, sizeof v, &src));
  CU_ASSERT(!strcmp(v, "64") && src == CLMOE_KNOB_DEFAULT);
  CU_ASSERT_EQUAL(clmoe_ctx_set_knob(a, "CLMOE_DEVICE", "cpu"), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_ctx_set_knob(a, "CLMOE_NO_SUCH", "1"), CLMOE_ERR_INVALID_ARGUMENT);
  /* a knob the context keeps in its capability record */
  const uint64_t reported = clmoe_ctx_caps(a)->local_mem_bytes;
  TEST_OK(clmoe_ctx_set_knob(a, "CLMOE_LOCAL_MEM_BYTES", "12345"));
  CU_ASSERT_EQUAL(clmoe_ctx_caps(a)->local_mem_bytes, 12345u);
  CU_ASSERT_EQUAL(clmoe_ctx_caps(b)->local_mem_bytes, reported);
  TEST_OK(clmoe_ctx_set_knob(a, "CLMOE_LOCAL_MEM_BYTES", ""));
  CU_ASSERT_EQUAL(clmoe_ctx_caps(a)->local_mem_bytes, reported);
  clmoe_ctx_destroy(a);
  clmoe_ctx_destroy(b);
  test_env_restore("CLMOE_KDA_TC_STEP", keep);
}

/* The environment reaches a context's knobs when it is created (and only then); a bad value
 * fails the creation with the variable named. */
static void test_knob_environment(void)
{
  clmoe_ctx *ctx = NULL;
  clmoe_ctx_options opts = {.no_probe = 1};
  char *keep = test_env_set("CLMOE_KDA_TCB_PAIR", "1");
  TEST_OK(clmoe_ctx_create(&ctx, &opts));
  free(test_env_set("CLMOE_KDA_TCB_PAIR", "2")); /* too late for this context */
  char v[64];
  clmoe_knob_source src;
  TEST_OK(clmoe_ctx_knob(ctx, "CLMOE_KDA_TCB_PAIR", v, sizeof v, &src));
  CU_ASSERT(!strcmp(v, "1") && src == CLMOE_KNOB_ENV);
  TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_KDA_TCB_PAIR", "2"));
  TEST_OK(clmoe_ctx_set_knob(ctx, "CLMOE_KDA_TCB_PAIR", NULL)); /* back to the environment's */
  TEST_OK(clmoe_ctx_knob(ctx, "CLMOE_KDA_TCB_PAIR", v, sizeof v, &src));
  CU_ASSERT(!strcmp(v, "1") && src == CLMOE_KNOB_ENV);
  clmoe_ctx_destroy(ctx);
  free(test_env_set("CLMOE_KDA_TCB_PAIR", "two"));
  ctx = NULL;
  CU_ASSERT_EQUAL(clmoe_ctx_create(&ctx, &opts), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(ctx);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "CLMOE_KDA_TCB_PAIR=two"));
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "auto, 1, 2"));
  clmoe_ctx_destroy(ctx);
  test_env_restore("CLMOE_KDA_TCB_PAIR", keep);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "status codes and version", test_status);
  CU_add_test(suite, "program cache: write, hit, corrupt, off", test_cache);
  CU_add_test(suite, "CLMOE_KERNEL_DIR and build errors", test_kernel_dir);
  CU_add_test(suite, "knobs: the table, defaults, bad values", test_knob_table);
  CU_add_test(suite, "knobs: clmoe_ctx_set_knob per context", test_knob_override);
  CU_add_test(suite, "knobs: the environment at context creation", test_knob_environment);
}

int main(void) { return test_main("runtime", add_tests); }
