/* CUnit suite: the parameter registry: gradient norm, AdamW with clipping and decay flags,
 * checkpoints (round trip, and bad files giving clear errors without changing anything;
 * damaged and edited ones refused with the tensor or metadata entry named). */
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
  TEST_OK(clmoe_tensor_zeros(test_ctx, &a, CLMOE_F32, 2, (int64_t[]){7, 5}));
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

/* ---- checkpoint integrity ----------------------------------------------------------------- */
static const char *ck_path(const char *name)
{
  static char p[4][256];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

/* The bytes of a file (malloc'ed, *n of them). */
static unsigned char *slurp(const char *path, size_t *n)
{
  FILE *f = fopen(path, "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n + 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  CU_ASSERT_EQUAL_FATAL(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

static void spill(const char *path, const unsigned char *b, size_t n)
{
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(b, 1, n, f), n);
  CU_ASSERT_EQUAL(fclose(f), 0);
}

static size_t find(const unsigned char *b, size_t n, const char *s)
{
  size_t k = strlen(s);
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(b + i, s, k)) return i;
  CU_FAIL_FATAL("pattern not in the file");
  return 0;
}

/* Loading `path` into a fresh model3 fails with a format error whose message names the file
 * and holds `what`. */
static int load_fails_with(clmoe_status want, const char *path, const char *what)
{
  model3 m;
  clmoe_params ps;
  model3_create(&m, &ps, 3, 6);
  clmoe_status st = clmoe_params_load(&ps, path, NULL);
  int ok = st == want && strstr(clmoe_last_error(), path) && strstr(clmoe_last_error(), what);
  if (!ok) fprintf(stderr, "\n  %s: %s: %s (expected '%s')\n", path, clmoe_strerror(st), clmoe_last_error(), what);
  model3_destroy(&m, &ps);
  return ok;
}
/* A malformed checkpoint (CLMOE_ERR_FORMAT), or one that fails a checksum (_DAMAGED). */
static int load_fails(const char *path, const char *what) { return load_fails_with(CLMOE_ERR_FORMAT, path, what); }
static int load_damaged(const char *path, const char *what) { return load_fails_with(CLMOE_ERR_DAMAGED, path, what); }

/* A copy of checkpoint src as dst through the writer (fresh checksums): metadata `key`
 * set to `value` (NULL: dropped), tensor `relabel` stored as I32 (its bits), and `extra`
 * (NULL: none) added as a copy of param/layer0/a. */
static void rewrite(const char *src, const char *dst, const char *key, const char *value, const char *relabel,
                    const char *extra)
{
  clmoe_st_file *f;
  clmoe_st_writer *w;
  TEST_OK(clmoe_st_open(src, &f));
  TEST_OK(clmoe_st_writer_create(dst, &w));
  for (int i = 0; i < clmoe_st_count(f); i++) {
    clmoe_st_info info;
    clmoe_st_info_at(f, i, &info);
    void *h = malloc(info.bytes + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    TEST_OK(clmoe_st_read(f, info.name, h, info.bytes));
    const clmoe_st_dtype d = relabel && !strcmp(relabel, info.name) ? CLMOE_ST_I32 : info.dtype;
    TEST_OK(clmoe_st_writer_add_host(w, info.name, d, info.ndim, info.shape, h));
    if (extra && !strcmp(info.name, "param/layer0/a"))
      TEST_OK(clmoe_st_writer_add_host(w, extra, info.dtype, info.ndim, info.shape, h));
    free(h);
  }
  for (int i = 0; i < clmoe_st_metadata_count(f); i++) {
    const char *k, *v;
    clmoe_st_metadata_at(f, i, &k, &v);
    if (!strncmp(k, "clmoe.crc32c.", 13) || (key && !strcmp(k, key))) continue;
    TEST_OK(clmoe_st_writer_metadata(w, k, v));
  }
  if (key && value) TEST_OK(clmoe_st_writer_metadata(w, key, value));
  TEST_OK(clmoe_st_writer_finish(w));
  clmoe_st_close(f);
}

/* A copy of checkpoint src as dst without checksums (as clmoe wrote them before): the same
 * data region, the header without the two checksum entries and without "clmoe_format"
 * unless `format` (then set to it), padded with spaces to its old length; `relabel`: the
 * first "F32" of the header made "I32". */
static void strip(const char *src, const char *dst, const char *format, int relabel)
{
  size_t n;
  unsigned char *b = slurp(src, &n);
  const size_t hlen = (size_t)b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16;
  char *h = malloc(hlen + 1), *out = malloc(hlen + 64);
  CU_ASSERT_FATAL(h && out);
  memcpy(h, b + 8, hlen), h[hlen] = '\0';
  const char *meta = strstr(h, "\"__metadata__\":{") + 16, *end = strstr(meta, "},\"");
  size_t o = (size_t)(meta - h);
  memcpy(out, h, o);
  /* the metadata entries the writer wrote: "key":"value" pairs, values without '"' here
   * but the config's escaped newlines */
  for (const char *q = meta; q < end;) {
    const char *k = q, *colon = strstr(q, "\":\""), *v = colon + 3, *ve = v;
    while (*ve != '"') ve += *ve == '\\' ? 2 : 1;
    q = ve + 1 + (ve[1] == ',');
    if (!strncmp(k, "\"clmoe.crc32c.", 14) || !strncmp(k, "\"clmoe_format\"", 14)) continue;
    o += (size_t)sprintf(out + o, "%s%.*s", out[o - 1] == '{' ? "" : ",", (int)(ve + 1 - k), k);
  }
  if (format) o += (size_t)sprintf(out + o, ",\"clmoe_format\":\"%s\"", format);
  o += (size_t)sprintf(out + o, "%s", end);
  CU_ASSERT_FATAL(o <= hlen);
  memset(out + o, ' ', hlen - o);
  if (relabel) memcpy(strstr(out, "\"F32\""), "\"I32\"", 5);
  memcpy(b + 8, out, hlen);
  spill(dst, b, n);
  free(h), free(out), free(b);
}

static void test_checkpoint_integrity(void)
{
  model3 m;
  clmoe_params ps;
  model3_create(&m, &ps, 1, 6);
  for (int i = 0; i < ps.n; i++)
    if (ps.p[i].trainable) TEST_OK(clmoe_tensor_fill_uniform(&ps.p[i].grad, 7 + (uint64_t)i, -1.0f, 1.0f));
  clmoe_adamw hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  TEST_OK(clmoe_params_adamw(&ps, &hp, 0.0, NULL));
  clmoe_ckpt_meta meta = {0};
  TEST_OK(clmoe_ckpt_meta_set(&meta, "config", "[model]\nvocab = 256\n[train]\nlr = 0.001\n"));
  const char *good = ck_path("good.ckpt"), *bad = ck_path("bad.ckpt");
  TEST_OK(clmoe_params_save(&ps, good, &meta));
  clmoe_ckpt_meta_free(&meta);
  size_t n;
  unsigned char *b = slurp(good, &n), *c = malloc(n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  const size_t data = 8 + ((size_t)b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16);
  clmoe_st_file *f;
  clmoe_st_info ia, im, ib;
  TEST_OK(clmoe_st_open(good, &f));
  TEST_OK(clmoe_st_info_of(f, "param/layer0/a", &ia));
  TEST_OK(clmoe_st_info_of(f, "adam_m/layer0/a", &im));
  TEST_OK(clmoe_st_info_of(f, "param/layer0/b", &ib));
  clmoe_st_close(f);

  /* one flipped bit in the data of param/layer0/b, and one in the metadata (lr) */
  memcpy(c, b, n), c[data + ib.offset + 7] ^= 0x10;
  spill(bad, c, n);
  CU_ASSERT(load_damaged(bad, "tensor 'param/layer0/b': its data fails its CRC-32C checksum"));
  memcpy(c, b, n), c[find(c, n, "lr = 0.001") + 9] ^= 0x02;
  spill(bad, c, n);
  CU_ASSERT(load_damaged(bad, "metadata: the entries fail their CRC-32C checksum"));
  memcpy(c, b, n), c[find(c, n, "\"optimizer_step\":\"1\"") + 18] ^= 0x02; /* "1" -> "3" */
  spill(bad, c, n);
  CU_ASSERT(load_damaged(bad, "metadata"));
  /* two same-shape tensors swapped (a parameter and its first moment) */
  memcpy(c, b, n);
  memcpy(c + data + ia.offset, b + data + im.offset, ia.bytes), memcpy(c + data + im.offset, b + data + ia.offset, ia.bytes);
  spill(bad, c, n);
  CU_ASSERT(load_damaged(bad, "its data fails its CRC-32C checksum"));
  /* F32 relabelled I32: with checksums the entry's, without them the registry's dtype */
  memcpy(c, b, n), memcpy(c + find(c, n, "\"F32\""), "\"I32\"", 5);
  spill(bad, c, n);
  CU_ASSERT(load_damaged(bad, "its name, dtype, shape or data_offsets (I32"));
  strip(good, bad, NULL, 1);
  CU_ASSERT(load_fails(bad, "is I32, but the model's is F32"));
  rewrite(good, bad, NULL, NULL, "adam_v/layer0/gain", NULL);
  CU_ASSERT(load_fails(bad, "tensor 'adam_v/layer0/gain' is I32, but the model's is F32"));
  /* optimizer_step: edited to what is no count of steps (with fresh checksums) */
  const char *steps[] = {"x", "", "-1", "+1", " 1", "1 ", "0x10", "1e3", "1.0", "1099511627777",
                         "99999999999999999999", "9223372036854775808"};
  for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
    rewrite(good, bad, "optimizer_step", steps[i], NULL, NULL);
    CU_ASSERT(load_fails(bad, "metadata 'optimizer_step' is '"));
  }
  rewrite(good, bad, "optimizer_step", NULL, NULL, NULL);
  CU_ASSERT(load_fails(bad, "metadata 'optimizer_step' is missing"));
  /* tensors of no parameter, also under another parameter's name */
  rewrite(good, bad, NULL, NULL, NULL, "junk/layer0/a");
  CU_ASSERT(load_fails(bad, "tensor 'junk/layer0/a' belongs to no parameter"));
  rewrite(good, bad, NULL, NULL, NULL, "buffer/layer0/a");
  CU_ASSERT(load_fails(bad, "tensor 'buffer/layer0/a' belongs to no parameter"));
  /* the format: 2 without checksums refused, an unknown one refused, 1 (older) loads */
  strip(good, bad, "2", 0);
  CU_ASSERT(load_fails(bad, "a clmoe checkpoint of format 2 without its checksums"));
  rewrite(good, bad, "clmoe_format", "3", NULL, NULL);
  CU_ASSERT(load_fails(bad, "metadata 'clmoe_format' is '3'"));
  strip(good, bad, NULL, 0);
  model3 o;
  clmoe_params os;
  clmoe_ckpt_meta back = {0};
  model3_create(&o, &os, 9, 6);
  TEST_OK(clmoe_params_load(&os, bad, &back));
  CU_ASSERT_EQUAL(os.step, 1);
  CU_ASSERT_PTR_NULL(clmoe_ckpt_meta_get(&back, "clmoe_format"));
  clmoe_ckpt_meta_free(&back);
  /* the metadata handed back has no checksums, and saving it again works; the registry's
   * own entries are its own */
  TEST_OK(clmoe_params_load(&os, good, &back));
  CU_ASSERT_PTR_NULL(clmoe_ckpt_meta_get(&back, CLMOE_ST_CRC_TENSORS));
  CU_ASSERT_PTR_NULL(clmoe_ckpt_meta_get(&back, CLMOE_ST_CRC_METADATA));
  CU_ASSERT_STRING_EQUAL(clmoe_ckpt_meta_get(&back, "clmoe_format"), "2");
  os.step = 5;
  TEST_OK(clmoe_params_save(&os, bad, &back));
  TEST_OK(clmoe_params_load(&os, bad, NULL));
  CU_ASSERT_EQUAL(os.step, 5);
  clmoe_ckpt_meta_free(&back);
  model3_destroy(&o, &os);
  free(b), free(c);
  model3_destroy(&m, &ps);
}

static void test_meta_int(void)
{
  clmoe_ckpt_meta m = {0};
  int64_t v = -7;
  TEST_OK(clmoe_ckpt_meta_set(&m, "step", "41"));
  TEST_OK(clmoe_ckpt_meta_int(&m, "step", 0, 100, &v));
  CU_ASSERT_EQUAL(v, 41);
  CU_ASSERT_EQUAL(clmoe_ckpt_meta_int(&m, "step", 0, 40, &v), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "metadata 'step' is '41', not an integer in [0, 40]"));
  CU_ASSERT_EQUAL(clmoe_ckpt_meta_int(&m, "absent", 0, 40, &v), CLMOE_ERR_FORMAT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "metadata 'absent' is missing"));
  const char *bad[] = {"x", "", "-1", "+1", " 1", "1 ", "0x10", "010a", "1e3", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    TEST_OK(clmoe_ckpt_meta_set(&m, "step", bad[i]));
    CU_ASSERT_EQUAL(clmoe_ckpt_meta_int(&m, "step", 0, INT64_MAX, &v), CLMOE_ERR_FORMAT);
  }
  TEST_OK(clmoe_ckpt_meta_set(&m, "step", "-5"));
  TEST_OK(clmoe_ckpt_meta_int(&m, "step", -10, 10, &v));
  CU_ASSERT_EQUAL(v, -5);
  TEST_OK(clmoe_ckpt_meta_set(&m, "step", "9223372036854775807"));
  TEST_OK(clmoe_ckpt_meta_int(&m, "step", 0, INT64_MAX, &v));
  CU_ASSERT_EQUAL(v, INT64_MAX);
  clmoe_ckpt_meta_free(&m);
}

static void add_tests(CU_pSuite suite)
{
  snprintf(dir, sizeof dir, "/tmp/clmoe-params.XXXXXX");
  if (!mkdtemp(dir)) abort();
  CU_add_test(suite, "registry, gradient norm, AdamW with clipping", test_registry);
  CU_add_test(suite, "checkpoints: round trip and bad files", test_checkpoint);
  CU_add_test(suite, "checkpoints: damaged and edited files refused", test_checkpoint_integrity);
  CU_add_test(suite, "checkpoint metadata: strict integers", test_meta_int);
}

int main(void)
{
  int rc = test_main("params", add_tests);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0 && rc == 0) rc = 1;
  return rc;
}
