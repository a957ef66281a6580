/* CUnit suite: Gated MLA. The reference's own backward against finite differences (the
 * attention and the whole layer), the O(T) memory of the tiled kernels against the T^2 of
 * the materialised one, run-to-run determinism, argument errors, the cache's block pool,
 * and the conformance checks ("mla": forward, backward, layer, decode). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check/ref/ref_mla.h"
#include "test_common.h"

static double urand(uint64_t *s)
{
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0;
}

/* Worst |fd - grad| / (|fd| + 1e-3) over a parameter, by central differences of loss(). */
typedef double (*loss_fn)(const void *ctx, double *const *in);
static double fd_worst(const void *ctx, loss_fn loss, double *const *in, int p, int64_t n, const double *grad)
{
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double x = in[p][i], h = 1e-5;
    in[p][i] = x + h;
    const double lp = loss(ctx, in);
    in[p][i] = x - h;
    const double lm = loss(ctx, in);
    in[p][i] = x;
    const double fd = (lp - lm) / (2.0 * h), err = fabs(fd - grad[i]) / (fabs(fd) + 1e-3);
    if (!(err <= worst)) worst = err;
  }
  return worst;
}

/* ---- attention: in = q, kn, kr, v, dout ---- */
static double attn_loss(const void *c, double *const *in)
{
  const ref_mla_shape *s = c;
  const int64_t n = s->B * s->T * s->H * s->Dv;
  double *o = malloc((size_t)n * sizeof *o), L = 0.0;
  ref_mla_attention(s, in[0], in[1], in[2], in[3], o, NULL);
  for (int64_t i = 0; i < n; i++) L += o[i] * in[4][i];
  free(o);
  return L;
}

static void test_ref_attention_fd(void)
{
  static const int32_t cu[4] = {0, 4, 5, 11};
  ref_mla_shape s = {1, 11, 2, 3, 2, 3, cu, 3, 0.7, 0};
  const int64_t M = 11, count[5] = {M * 2 * 5, M * 2 * 3, M * 2, M * 2 * 3, M * 2 * 3};
  const char *names[4] = {"q", "k_nope", "k_rope", "v"};
  double *in[5], *g[4];
  uint64_t seed = test_seed;
  for (int p = 0; p < 5; p++) {
    in[p] = malloc((size_t)count[p] * sizeof(double));
    for (int64_t i = 0; i < count[p]; i++) in[p][i] = 1.5 * urand(&seed);
  }
  for (int p = 0; p < 4; p++) g[p] = malloc((size_t)count[p] * sizeof(double));
  ref_mla_attention_backward(&s, in[0], in[1], in[2], in[3], in[4], g[0], g[1], g[2], g[3]);
  for (int p = 0; p < 4; p++) {
    double worst = fd_worst(&s, attn_loss, in, p, count[p], g[p]);
    if (!(worst < 1e-6)) fprintf(stderr, "\n  attention d%s differs from finite differences by %.3g\n", names[p], worst);
    CU_ASSERT(worst < 1e-6);
  }
  for (int p = 0; p < 5; p++) free(in[p]);
  for (int p = 0; p < 4; p++) free(g[p]);
}

/* ---- the layer: in = 8 weights, x, dy ---- */
static double layer_loss(const void *c, double *const *in)
{
  const ref_mla_layer *l = c;
  const int64_t n = l->s.B * l->s.T * l->d;
  double *y = malloc((size_t)n * sizeof *y), L = 0.0;
  ref_mla_forward(l, (const double *const *)in, in[8], y);
  for (int64_t i = 0; i < n; i++) L += y[i] * in[9][i];
  free(y);
  return L;
}

/* rq 0: q = W_q x; ungated: no output gate (Kimi Linear's forms); a weight absent in the
 * form has 0 elements, so finite differences have nothing to check there. */
static void layer_fd(int64_t rq, int ungated)
{
  static const int32_t cu[4] = {0, 3, 4, 7};
  ref_mla_layer l = {{1, 7, 2, 3, 2, 3, cu, 3, 1.0 / sqrt(5.0), 0}, 6, rq, 4, 1e-5, 0, ungated};
  double *in[10], *g[9];
  int64_t count[10];
  for (int i = 0; i < 8; i++) count[i] = ref_mla_weight_numel(&l, i);
  count[8] = count[9] = 7 * 6;
  uint64_t seed = test_seed + 1;
  for (int p = 0; p < 10; p++) {
    in[p] = malloc((size_t)count[p] * sizeof(double));
    for (int64_t i = 0; i < count[p]; i++) in[p][i] = (p == 1 || p == 4 ? 1.0 + 0.5 * urand(&seed) : 0.8 * urand(&seed));
    if (p < 9) g[p] = malloc((size_t)count[p] * sizeof(double));
  }
  ref_mla_backward(&l, (const double *const *)in, in[8], in[9], g[8], g);
  const char *names[9] = {"w_dq", "q_norm", "w_uq", "w_dkv", "kv_norm", "w_ukv", "w_g", "w_o", "x"};
  for (int p = 0; p < 9; p++) {
    double worst = fd_worst(&l, layer_loss, in, p, count[p], g[p]);
    if (!(worst < 1e-6)) fprintf(stderr, "\n  layer d%s differs from finite differences by %.3g\n", names[p], worst);
    CU_ASSERT(worst < 1e-6);
  }
  for (int p = 0; p < 10; p++) free(in[p]);
  for (int p = 0; p < 9; p++) free(g[p]);
}

static void test_ref_layer_fd(void)
{
  layer_fd(5, 0);
  layer_fd(0, 0);
  layer_fd(5, 1);
  layer_fd(0, 1);
  /* the forms' absent weights */
  ref_mla_layer k = {{1, 7, 2, 3, 2, 3, NULL, 0, 1.0, 0}, 6, 0, 4, 1e-5, 0, 1};
  CU_ASSERT(ref_mla_weight_numel(&k, 0) == 0 && ref_mla_weight_numel(&k, 1) == 0 && ref_mla_weight_numel(&k, 6) == 0);
  CU_ASSERT(ref_mla_weight_numel(&k, 2) == 2 * 5 * 6);
}

/* ---- device helpers ---- */
typedef struct attn_bufs {
  clmoe_tensor q, kn, kr, v, o, lse, dout, dq, dkn, dkr, dv;
} attn_bufs;

static void attn_bufs_create(clmoe_ctx *ctx, attn_bufs *b, int64_t T, int64_t H, int grads)
{
  memset(b, 0, sizeof *b);
  const int64_t sq[4] = {1, T, H, 24}, sn[4] = {1, T, H, 16}, sr[3] = {1, T, 8}, sl[3] = {1, T, H};
  clmoe_tensor *in[4] = {&b->q, &b->kn, &b->kr, &b->v};
  const int64_t *shapes[4] = {sq, sn, sr, sn};
  for (int i = 0; i < 4; i++) {
    TEST_OK(clmoe_tensor_create(ctx, in[i], CLMOE_F32, i == 2 ? 3 : 4, shapes[i]));
    TEST_OK(clmoe_tensor_fill_uniform(in[i], 7 + (uint64_t)i, -1.0f, 1.0f));
  }
  TEST_OK(clmoe_tensor_create(ctx, &b->o, CLMOE_F32, 4, sn));
  TEST_OK(clmoe_tensor_create(ctx, &b->lse, CLMOE_F32, 3, sl));
  if (!grads) return;
  TEST_OK(clmoe_tensor_create(ctx, &b->dout, CLMOE_F32, 4, sn));
  TEST_OK(clmoe_tensor_fill_uniform(&b->dout, 20, -1.0f, 1.0f));
  TEST_OK(clmoe_tensor_create(ctx, &b->dq, CLMOE_F32, 4, sq));
  TEST_OK(clmoe_tensor_create(ctx, &b->dkn, CLMOE_F32, 4, sn));
  TEST_OK(clmoe_tensor_create(ctx, &b->dkr, CLMOE_F32, 3, sr));
  TEST_OK(clmoe_tensor_create(ctx, &b->dv, CLMOE_F32, 4, sn));
}

static void attn_bufs_destroy(attn_bufs *b)
{
  clmoe_tensor *all[] = {&b->q, &b->kn, &b->kr, &b->v, &b->o, &b->lse, &b->dout, &b->dq, &b->dkn, &b->dkr, &b->dv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
}

/* Peak pool bytes an attention pass needs beyond its inputs and outputs, measured on a
 * fresh context (where the peak so far equals the bytes in use). */
static uint64_t pass_bytes(int64_t T, int64_t H, int what)
{
  clmoe_ctx *ctx = NULL;
  TEST_OK(clmoe_ctx_create(&ctx, NULL));
  attn_bufs b;
  attn_bufs_create(ctx, &b, T, H, what == 1);
  clmoe_pool_stats before, after;
  TEST_OK(clmoe_ctx_finish(ctx));
  clmoe_ctx_pool_stats(ctx, &before);
  CU_ASSERT_EQUAL(before.peak_in_use_bytes, before.in_use_bytes); /* else the measure means nothing */
  clmoe_mla_attn_inputs in = {&b.q, &b.kn, &b.kr, &b.v, NULL};
  if (what == 2) {
    TEST_OK(clmoe_mla_attention_naive(ctx, 0.0f, &in, &b.o, &b.lse));
  } else {
    TEST_OK(clmoe_mla_attention(ctx, 0.0f, &in, &b.o, &b.lse));
    if (what == 1) {
      clmoe_mla_attn_grads g = {&b.dq, &b.dkn, &b.dkr, &b.dv};
      TEST_OK(clmoe_mla_attention_backward(ctx, 0.0f, &in, &b.o, &b.lse, &b.dout, &g));
    }
  }
  TEST_OK(clmoe_ctx_finish(ctx));
  clmoe_ctx_pool_stats(ctx, &after);
  attn_bufs_destroy(&b);
  clmoe_ctx_destroy(ctx);
  return after.peak_in_use_bytes - before.in_use_bytes;
}

/* The tiled forward and backward need O(T) scratch (tile tables, D [T, H] and the per-head
 * shared-key gradients [T, H, Dr]); a T x T score matrix would be 4 T^2 H bytes. The
 * materialised kernel is measured the same way, showing the measure sees T^2 buffers. */
static void test_memory_linear(void)
{
  const int64_t H = 2, t1 = 512, t2 = 2048;
  const uint64_t f1 = pass_bytes(t1, H, 0), f2 = pass_bytes(t2, H, 0);
  const uint64_t b1 = pass_bytes(t1, H, 1), b2 = pass_bytes(t2, H, 1);
  const uint64_t n1 = pass_bytes(t1, H, 2);
  printf("\n    scratch bytes: forward T=%lld %llu, T=%lld %llu; fwd+bwd %llu, %llu; materialised T=%lld %llu\n",
         (long long)t1, (unsigned long long)f1, (long long)t2, (unsigned long long)f2, (unsigned long long)b1,
         (unsigned long long)b2, (long long)t1, (unsigned long long)n1);
  const uint64_t linear2 = (uint64_t)(t2 * H * (8 + 1) * 4); /* [T, H, Dr] + [T, H] floats */
  CU_ASSERT(f2 <= 2 * (uint64_t)t2 + 65536); /* the forward: a tile table only */
  CU_ASSERT(b2 <= 2 * linear2 + 65536);      /* pool size classes at most double */
  CU_ASSERT(b2 <= 5 * b1 + 65536);           /* 4x the tokens: about 4x the bytes, not 16x */
  CU_ASSERT(b2 < (uint64_t)(t2 * t2 * H * 4) / 32);
  CU_ASSERT(n1 >= (uint64_t)(t1 * t1 * H * 4)); /* the materialised kernel holds T^2 H floats */
}

/* The same inputs twice: the same bits (fixed summation orders, no atomics). */
static void test_deterministic(void)
{
  attn_bufs b;
  const int64_t T = 150, H = 3;
  attn_bufs_create(test_ctx, &b, T, H, 1);
  clmoe_mla_attn_inputs in = {&b.q, &b.kn, &b.kr, &b.v, NULL};
  clmoe_mla_attn_grads g = {&b.dq, &b.dkn, &b.dkr, &b.dv};
  const size_t nq = (size_t)(T * H * 24), nr = (size_t)(T * 8);
  float *run[2][2];
  for (int r = 0; r < 2; r++) {
    run[r][0] = malloc(nq * sizeof(float)), run[r][1] = malloc(nr * sizeof(float));
    TEST_OK(clmoe_mla_attention(test_ctx, 0.0f, &in, &b.o, &b.lse));
    TEST_OK(clmoe_mla_attention_backward(test_ctx, 0.0f, &in, &b.o, &b.lse, &b.dout, &g));
    TEST_OK(clmoe_tensor_read_f32(&b.dq, run[r][0]));
    TEST_OK(clmoe_tensor_read_f32(&b.dkr, run[r][1]));
  }
  CU_ASSERT(memcmp(run[0][0], run[1][0], nq * sizeof(float)) == 0);
  CU_ASSERT(memcmp(run[0][1], run[1][1], nr * sizeof(float)) == 0);
  for (int r = 0; r < 2; r++) free(run[r][0]), free(run[r][1]);
  attn_bufs_destroy(&b);
}

static void test_errors(void)
{
  attn_bufs b;
  attn_bufs_create(test_ctx, &b, 20, 2, 0);
  clmoe_tensor qh, kr5, cu;
  const int64_t sq[4] = {1, 20, 2, 24}, sr[3] = {1, 20, 5}, ncu = 3;
  TEST_OK(clmoe_tensor_zeros(test_ctx, &qh, CLMOE_BF16, 4, sq));
  TEST_OK(clmoe_tensor_zeros(test_ctx, &kr5, CLMOE_F32, 3, sr));
  TEST_OK(clmoe_tensor_create(test_ctx, &cu, CLMOE_I32, 1, &ncu));
  clmoe_mla_attn_inputs in = {&qh, &b.kn, &b.kr, &b.v, NULL};
  CU_ASSERT_EQUAL(clmoe_mla_attention(test_ctx, 0.0f, &in, &b.o, &b.lse), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "storage type"));
  in.q = &b.q, in.k_rope = &kr5;
  CU_ASSERT_EQUAL(clmoe_mla_attention(test_ctx, 0.0f, &in, &b.o, &b.lse), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "k_rope"));
  in.k_rope = &b.kr;
  int32_t bad_cu[3] = {0, 25, 20};
  TEST_OK(clmoe_tensor_write(&cu, bad_cu, sizeof bad_cu));
  in.cu_seqlens = &cu;
  CU_ASSERT_EQUAL(clmoe_mla_attention(test_ctx, 0.0f, &in, &b.o, &b.lse), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "cu_seqlens"));
  in.cu_seqlens = NULL;
  CU_ASSERT_EQUAL(clmoe_mla_attention_backward(test_ctx, 0.0f, &in, &b.o, NULL, &b.o, NULL), CLMOE_ERR_INVALID_ARGUMENT);
  /* Layer and cache. */
  clmoe_mla_config cfg = {64, 2, 32, 32, 16, 8, 16, 0.0f, 0.0f}, bad = cfg;
  bad.qk_rope = 0;
  CU_ASSERT_EQUAL(clmoe_mla_config_check(&bad), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "qk_rope"));
  clmoe_mla_weights w;
  TEST_OK(clmoe_mla_weights_create(test_ctx, &cfg, &w));
  TEST_OK(clmoe_mla_weights_init(&w, 5, 0.02f));
  clmoe_mla_cache *cache = NULL;
  TEST_OK(clmoe_mla_cache_create(test_ctx, &cfg, 2, CLMOE_BF16, 0, &cache));
  CU_ASSERT_EQUAL(clmoe_mla_cache_token_bytes(cache), (32 + 8) * 2);
  clmoe_tensor x, y, x2, y2;
  const int64_t sx[3] = {2, 3, 64}, s2[2] = {2, 64}, s3[2] = {3, 64};
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 3, sx));
  TEST_OK(clmoe_tensor_create(test_ctx, &y, CLMOE_F32, 3, sx));
  TEST_OK(clmoe_tensor_fill(&x, 0.5));
  TEST_OK(clmoe_tensor_create(test_ctx, &x2, CLMOE_F32, 2, s2));
  TEST_OK(clmoe_tensor_create(test_ctx, &y2, CLMOE_F32, 2, s3));
  TEST_OK(clmoe_tensor_fill(&x2, 0.5));
  TEST_OK(clmoe_mla_prefill(test_ctx, &cfg, &w, cache, &x, NULL, NULL, &y));
  CU_ASSERT_EQUAL(clmoe_mla_cache_length(cache, 1), 3);
  CU_ASSERT_EQUAL(clmoe_mla_prefill(test_ctx, &cfg, &w, cache, &x, NULL, NULL, &y), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "not empty"));
  CU_ASSERT_EQUAL(clmoe_mla_decode_step(test_ctx, &cfg, &w, cache, &x2, &y2), CLMOE_ERR_SHAPE); /* y [3, d] */
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "y"));
  TEST_OK(clmoe_mla_cache_reset(cache, 0));
  CU_ASSERT_EQUAL(clmoe_mla_cache_length(cache, 0), 0);
  clmoe_mla_config other = cfg;
  other.kv_rank = 16;
  CU_ASSERT_EQUAL(clmoe_mla_decode_step(test_ctx, &other, &w, cache, &x2, &y2), CLMOE_ERR_SHAPE);
  /* Training-form extend: arguments checked before anything is appended; the form chooser
   * keeps 1-token passes absorbed and takes long ones in the training form. */
  CU_ASSERT_EQUAL(clmoe_mla_extend_flash(test_ctx, &cfg, &w, cache, &x2, NULL, &y2), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "counts"));
  CU_ASSERT_EQUAL(clmoe_mla_extend_flash(test_ctx, &cfg, &w, cache, &x2, (int64_t[]){1, 2}, &y2), CLMOE_ERR_SHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "clmoe_mla_extend_flash"));
  CU_ASSERT_EQUAL(clmoe_mla_extend_flash(test_ctx, &other, &w, cache, &x2, (int64_t[]){1, 1}, &y2), CLMOE_ERR_SHAPE);
  CU_ASSERT_EQUAL(clmoe_mla_cache_length(cache, 0), 0);
  CU_ASSERT_EQUAL(clmoe_mla_cache_length(cache, 1), 3);
  CU_ASSERT_EQUAL(clmoe_mla_extend_flash_cheaper(&cfg, cache, (int64_t[]){0, 1}), 0);
  CU_ASSERT_EQUAL(clmoe_mla_extend_flash_cheaper(&cfg, cache, (int64_t[]){1, 1}), 0);
  CU_ASSERT_EQUAL(clmoe_mla_extend_flash_cheaper(&cfg, cache, (int64_t[]){0, 200}), 1);
  CU_ASSERT_EQUAL(clmoe_mla_extend_flash_cheaper(&cfg, cache, NULL), 0);
  clmoe_mla_cache_destroy(cache);
  clmoe_mla_weights_destroy(&w);
  clmoe_tensor *all[] = {&qh, &kr5, &cu, &x, &y, &x2, &y2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  attn_bufs_destroy(&b);
}

/* The block pool grows by doubling, sequences of different lengths get their own blocks,
 * reset returns them, and decoding never copies the cache per token. */
static void test_cache_blocks(void)
{
  clmoe_mla_config cfg = {64, 2, 32, 32, 16, 8, 16, 0.0f, 0.0f};
  clmoe_mla_weights w;
  TEST_OK(clmoe_mla_weights_create(test_ctx, &cfg, &w));
  TEST_OK(clmoe_mla_weights_init(&w, 9, 0.1f));
  clmoe_mla_cache *cache = NULL;
  TEST_OK(clmoe_mla_cache_create(test_ctx, &cfg, 2, CLMOE_F32, 0, &cache));
  const size_t start = clmoe_mla_cache_device_bytes(cache);
  clmoe_tensor x, y, cu;
  const int64_t sx[3] = {1, 200, 64}, ncu = 3;
  int32_t hcu[3] = {0, 130, 200};
  TEST_OK(clmoe_tensor_create(test_ctx, &x, CLMOE_F32, 3, sx));
  TEST_OK(clmoe_tensor_create(test_ctx, &y, CLMOE_F32, 3, sx));
  TEST_OK(clmoe_tensor_create(test_ctx, &cu, CLMOE_I32, 1, &ncu));
  TEST_OK(clmoe_tensor_write(&cu, hcu, sizeof hcu));
  TEST_OK(clmoe_tensor_fill_uniform(&x, 3, -1.0f, 1.0f));
  int32_t slots[2] = {1, 0};
  TEST_OK(clmoe_mla_prefill(test_ctx, &cfg, &w, cache, &x, &cu, slots, &y));
  CU_ASSERT_EQUAL(clmoe_mla_cache_length(cache, 1), 130);
  CU_ASSERT_EQUAL(clmoe_mla_cache_length(cache, 0), 70);
  const size_t grown = clmoe_mla_cache_device_bytes(cache);
  CU_ASSERT(grown > start);
  CU_ASSERT(grown <= start + 8 * CLMOE_MLA_CACHE_BLOCK * 40 * 4 + 4096); /* 5 blocks used, pool <= 8 */
  TEST_OK(clmoe_mla_cache_reset(cache, 1));
  int32_t bad_slots[2] = {1, -1};
  CU_ASSERT_EQUAL(clmoe_mla_prefill(test_ctx, &cfg, &w, cache, &x, &cu, bad_slots, &y), CLMOE_ERR_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(clmoe_mla_cache_length(cache, 1), 0);
  CU_ASSERT_EQUAL(clmoe_mla_cache_length(cache, 5), -1);
  clmoe_mla_cache_destroy(cache);
  clmoe_mla_weights_destroy(&w);
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&cu);
}

static void add_tests(CU_pSuite suite)
{
  CU_add_test(suite, "reference attention backward = finite differences", test_ref_attention_fd);
  CU_add_test(suite, "reference layer backward = finite differences", test_ref_layer_fd);
  CU_add_test(suite, "tiled kernels need O(T) memory, the materialised one T^2", test_memory_linear);
  CU_add_test(suite, "forward and backward give the same bits twice", test_deterministic);
  CU_add_test(suite, "argument errors", test_errors);
  CU_add_test(suite, "the cache's block pool", test_cache_blocks);
  test_add_checks(suite, "mla");
}

int main(void) { return test_main("mla", add_tests); }
