/* CUnit suite: the parameter registry: gradient norm, AdamW with clipping and decay flags,
 * checkpoints (round trip, and bad files giving clear errors without changing anything). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_common.h"

static char dir[64];

/* Three parameters and a buffer with random contents. */
typedef struct model3 { clmoe_tensor a, b, gain, buf; } model3;

static void model3_create(model3 *m, clmoe_params *ps, uint64_t seed, int64_t bcols)
{
  TEST_OK(clmoe_tensor_create(test_ctx, &m->a, CLMOE_F32, 2, (int64_t[]){7, 5}));
  TEST_OK(clmoe_tensor_create(test_ctx, &m->b, CLMOE_F32, 2, (int64_t[]){3, bcols}));
  TEST_OK(clmoe_tensor_create(test_ctx, &m->gain, CLMOE_F32, 1, (int64_t[]){5}));
  TEST_OK(clmoe_tensor_create(test_ctx, &m->buf, CLMOE_F32, 1, (int64_t[]){4}));
  TEST_OK(clmoe_tensor_fill_uniform(&m->a, seed, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill_uniform(&m->b, seed + 1, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_fill(&m->gain, 1.0));
  TEST_OK(clmoe_tensor_fill_uniform(&m->buf, seed + 2, -1.0f, 1.0f));
  clmoe_params_init(ps, test_ctx);
  TEST_OK(clmoe_params_add(ps, "layer0/a", &m->a, 1));
  TEST_OK(clmoe_params_add(ps, "layer0/b", &m->b, 1));
  TEST_OK(clmoe_params_add(ps, "layer0/gain", &m->gain, 0));
  TEST_OK(clmoe_params_add_buffer(ps, "layer0/bias", &m->buf));
}

static void model3_destroy(model3 *m, clmoe_params *ps)
{
  clmoe_params_destroy(ps);
  clmoe_tensor_destroy(&m->a), clmoe_tensor_destroy(&m->b), clmoe_tensor_destroy(&m->gain);
  clmoe_tensor_destroy(&m->buf);
}

static void read_all(const clmoe_tensor *t, float *h) { TEST_OK(clmoe_tensor_read(t, h, clmoe_tensor_bytes(t))); }

static void test_registry(void)
{
  model3 m;
  clmoe_params ps;
  model3_create(&m, &ps, 1, 6);
  CU_ASSERT_EQUAL(clmoe_params_count(&ps), 35 + 18 + 5);
  CU_ASSERT_EQUAL(clmoe_params_add(&ps, "layer0/a", &m.b, 1), CLMOE_ERR_INVALID_ARGUMENT); /* twice */
  CU_ASSERT_PTR_NOT_NULL(clmoe_params_find(&ps, "layer0/gain"));
  CU_ASSERT_PTR_NULL(clmoe_params_find(&ps, "layer1/a"));
  /* Gradient norm against the host. */
  double host = 0.0;
  for (int i = 0; i < ps.n; i++) {
    if (!ps.p[i].trainable) continue;
    TEST_OK(clmoe_tensor_fill_uniform(&ps.p[i].grad, 100 + (uint64_t)i, -2.0f, 2.0f));
    float h[64];
    read_all(&ps.p[i].grad, h);
    for (int64_t e = 0; e < clmoe_tensor_numel(&ps.p[i].grad); e++) host += (double)h[e] * h[e];
  }
  double norm;
  TEST_OK(clmoe_params_grad_norm(&ps, &norm));
  CU_ASSERT(fabs(norm - sqrt(host)) <= 1e-5 * sqrt(host));
  /* AdamW with clipping: the first step moves every decayed parameter by lr (sign of the
   * clipped gradient) minus lr wd p; the gain (no decay) by lr sign(g) exactly. */
  float a0[35], g0[35], gain0[5], gg[5], a1[35], gain1[5];
  read_all(&m.a, a0), read_all(&ps.p[0].grad, g0), read_all(&m.gain, gain0), read_all(&ps.p[2].grad, gg);
  clmoe_adamw hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  double seen;
  TEST_OK(clmoe_params_adamw(&ps, &hp, norm / 4.0, &seen));
  CU_ASSERT(fabs(seen - norm) <= 1e-9 * norm);
  read_all(&m.a, a1), read_all(&m.gain, gain1);
  for (int i = 0; i < 35; i++) {
    double want = a0[i] - 0.01 * (0.1 * a0[i] + (g0[i] > 0 ? 1.0 : -1.0));
    CU_ASSERT(fabs(a1[i] - want) < 1e-5);
  }
  for (int i = 0; i < 5; i++) CU_ASSERT(fabs(gain1[i] - (gain0[i] - 0.01 * (gg[i] > 0 ? 1.0 : -1.0))) < 1e-5);
  CU_ASSERT_EQUAL(ps.step, 1);
  TEST_OK(clmoe_params_zero_grad(&ps));
  TEST_OK(clmoe_params_grad_norm(&ps, &norm));
  CU_ASSERT_EQUAL(norm, 0.0);
  model3_destroy(&m, &ps);
}

static const char *path_of(const char *name)
{
  static char p[256];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return p;
}

static void test_checkpoint(void)
{
  model3 m, n;
  clmoe_params ps, qs;
  model3_create(&m, &ps, 1, 6);
  for (int i = 0; i < ps.n; i++)
    if (ps.p[i].trainable) TEST_OK(clmoe_tensor_fill_uniform(&ps.p[i].grad, 7 + (uint64_t)i, -1.0f, 1.0f));
  clmoe_adamw hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  TEST_OK(clmoe_params_adamw(&ps, &hp, 0.0, NULL));
  clmoe_ckpt_meta meta = {0}, back = {0};
  TEST_OK(clmoe_ckpt_meta_set(&meta, "step", "41"));
  TEST_OK(clmoe_ckpt_meta_set(&meta, "config", "[model]\nvocab = 256\n"));
  TEST_OK(clmoe_params_save(&ps, path_of("a.ckpt"), &meta));
  CU_ASSERT(access(path_of("a.ckpt"), F_OK) == 0);
  /* A second model with other values: loading makes it equal, moments and step included. */
  model3_create(&n, &qs, 99, 6);
  TEST_OK(clmoe_params_load(&qs, path_of("a.ckpt"), &back));
  CU_ASSERT_EQUAL(qs.step, 1);
  CU_ASSERT_STRING_EQUAL(clmoe_ckpt_meta_get(&back, "step"), "41");
  CU_ASSERT_STRING_EQUAL(clmoe_ckpt_meta_get(&back, "config"), "[model]\nvocab = 256\n");
  for (int i = 0; i < ps.n; i++) {
    const clmoe_tensor *x[3] = {ps.p[i].value, &ps.p[i].m, &ps.p[i].v}, *y[3] = {qs.p[i].value, &qs.p[i].m, &qs.p[i].v};
    for (int k = 0; k < (ps.p[i].trainable ? 3 : 1); k++) {
      float hx[64], hy[64];
      read_all(x[k], hx), read_all(y[k], hy);
      CU_ASSERT_EQUAL(memcmp(hx, hy, clmoe_tensor_bytes(x[k])), 0);
    }
  }
  clmoe_ckpt_meta_free(&back);
  clmoe_ckpt_meta_free(&meta);
  model3_destroy(&n, &qs);
  model3_destroy(&m, &ps);

  /* Bad checkpoints: a clear error, and the model untouched. */
  model3 o;
  clmoe_params os;
  model3_create(&o, &os, 5, 7); /* b is [3, 7] here: a shape mismatch */
  float before[21], after[21];
  read_all(&o.b, before);
  CU_ASSERT_EQUAL(clmoe_params_load(&os, path_of("a.ckpt"), NULL), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "param/layer0/b"));
  read_all(&o.b, after);
  CU_ASSERT_EQUAL(memcmp(before, after, sizeof before), 0);
  model3_destroy(&o, &os);
  /* Truncated: the file cut in half. */
  FILE *f = fopen(path_of("a.ckpt"), "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  char buf[1 << 16];
  size_t len = fread(buf, 1, sizeof buf, f);
  fclose(f);
  f = fopen(path_of("cut.ckpt"), "wb");
  CU_ASSERT_EQUAL(fwrite(buf, 1, len / 2, f), len / 2);
  fclose(f);
  model3_create(&o, &os, 5, 6);
  clmoe_status st = clmoe_params_load(&os, path_of("cut.ckpt"), NULL);
  CU_ASSERT(st == CLMOE_ERR_FORMAT || st == CLMOE_ERR_IO);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "cut.ckpt"));
  /* An extra parameter in the model that the file lacks. */
  clmoe_tensor extra;
  TEST_OK(clmoe_tensor_zeros(test_ctx, &extra, CLMOE_F32, 1, (int64_t[]){2}));
  TEST_OK(clmoe_params_add(&os, "layer1/new", &extra, 1));
  CU_ASSERT_EQUAL(clmoe_params_load(&os, path_of("a.ckpt"), NULL), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "no tensor 'param/layer1/new'"));
  model3_destroy(&o, &os);
  clmoe_tensor_destroy(&extra);
  /* A file with a tensor the model does not have: a model of fewer parameters. */
  clmoe_params few;
  clmoe_tensor a;
  TEST_OK(clmoe_tensor_create(test_ctx, &a, CLMOE_F32, 2, (int64_t[]){7, 5}));
  clmoe_params_init(&few, test_ctx);
  TEST_OK(clmoe_params_add(&few, "layer0/a", &a, 1));
  CU_ASSERT_EQUAL(clmoe_params_load(&few, path_of("a.ckpt"), NULL), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "belongs to no parameter"));
  /* Not a checkpoint at all; a directory that does not exist when saving. */
  f = fopen(path_of("text.ckpt"), "wb");
  fputs("hello, I am not a checkpoint", f);
  fclose(f);
  CU_ASSERT_EQUAL(clmoe_params_load(&few, path_of("text.ckpt"), NULL), CLMOE_ERR_FORMAT);
  CU_ASSERT_NOT_EQUAL(clmoe_params_save(&few, "/nonexistent-dir/x.ckpt", NULL), CLMOE_OK);
  clmoe_params_destroy(&few);
  clmoe_tensor_destroy(&a);
}

static void add_tests(CU_pSuite suite)
{
  snprintf(dir, sizeof dir, "/tmp/clmoe-params.XXXXXX");
  if (!mkdtemp(dir)) abort();
  CU_add_test(suite, "registry, gradient norm, AdamW with clipping", test_registry);
  CU_add_test(suite, "checkpoints: round trip and bad files", test_checkpoint);
}

int main(void)
{
  int rc = test_main("params", add_tests);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0 && rc == 0) rc = 1;
  return rc;
}
