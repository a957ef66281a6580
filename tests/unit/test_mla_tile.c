/* CUnit suite: MLA attention forward and backward on the tile interface
 * (kernels_cl/mla/mla_tile.cl, mla_tile_bwd.cl, mla_tile_bwd_async.cl, lib/mla/mla_tile.c,
 * mla_tile_bwa.c). The context's fast path
 * is forced on, so on a device without a matrix unit (PoCL in CI) the kernels run on the portable
 * tiles (tile.cl) and their logic is checked everywhere.
 *
 * Against the double-precision reference on fresh random inputs (uniform in +-2) and
 * against the portable kernel (mla_fwd.cl): T in {1, 17, 64, 300}, batches and packed
 * sequences, 1 to 3 heads, the report's head sizes (qk 128 + 64, v 128), small ones and odd
 * ones (padding, scalar staging), f32 and bf16 storage, both query tiles (64, 128 rows).
 * Tolerance 1e-2 on o and lse (ck_compare's measure, NaN fails) against the reference of
 * the inputs as the kernel sees them (fp32 inputs rounded to bf16: see check_mla_tile.c);
 * with bf16 inputs the products are exact, and lse (fp32 statistics) is held to 1e-3. The
 * tile backward against the reference and the portable backward (3e-2: dO, P and dS are
 * rounded to bf16 as well). Also: the fast path's dispatch and its fallback, the portable
 * backward fed with the tile forward's o and lse, the whole layer forward and backward
 * (strided operands) with the fast path on, and the conformance checks "mla_tile". The
 * double-buffered and warp-group kernels, and the bf16 copies that feed them:
 * test_mla_tile_async.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_mla.h"
#include "check/check_mla_tile.h"
#include "clmoe/paths.h"
#include "test_common.h"

/* The tile backward: T 1, 17, 64, 300 packed, 1-3 heads, small, odd and f32 / bf16 inputs,
 * against the reference and the portable backward on the same o, lse: 3e-2. */
static void test_backward_tiles(void)
{
  static const int32_t lens[4] = {17, 1, 300, 64}, odd[2] = {70, 41};
  const ck_mla_tile_case cs[4] = {
      {1, 0, 3, 16, 8, 16, lens, 4, CLMOE_F32, CLMOE_F32, CLMOE_MLA_ATTN_TILE64, 1},
      {1, 0, 1, 16, 8, 16, lens, 4, CLMOE_BF16, CLMOE_BF16, CLMOE_MLA_ATTN_TILE128, 1},
      {2, 64, 2, 5, 3, 7, NULL, 0, CLMOE_F32, CLMOE_BF16, CLMOE_MLA_ATTN_PORTABLE, 1},
      {1, 0, 2, 20, 12, 24, odd, 2, CLMOE_BF16, CLMOE_F32, CLMOE_MLA_ATTN_TILE128, 1}};
  for (int i = 0; i < 4; i++) {
    clmoe_check_result res;
    memset(&res, 0, sizeof res);
    TEST_OK(ck_mla_tile_backward(test_ctx, test_seed + 700 + (uint64_t)i, &res, &cs[i], 3e-2));
    if (!(res.max_err <= res.tolerance))
      fprintf(stderr, "\n  backward case %d (seed %llu): error %.3g > %.3g at %s\n", i,
              (unsigned long long)(test_seed + 700 + (uint64_t)i), res.max_err, res.tolerance, res.worst);
    CU_ASSERT(res.max_err <= res.tolerance);
  }
}

static void run_case(const ck_mla_tile_case *c, uint64_t seed)
{
  clmoe_check_result res;
  memset(&res, 0, sizeof res);
  TEST_OK(ck_mla_tile_forward(test_ctx, seed, &res, c));
  const int ok = res.max_err <= res.tolerance;
  if (!ok)
    fprintf(stderr, "\n  B %lld T %lld H %lld qk %lld+%lld v %lld %s/%s %s (seed %llu): error %.3g > %.3g at %s\n",
            (long long)c->B, (long long)c->T, (long long)c->H, (long long)c->Dn, (long long)c->Dr,
            (long long)c->Dv, clmoe_dtype_name(c->dtype), clmoe_dtype_name(c->odtype),
            clmoe_mla_attn_path_name(c->path), (unsigned long long)seed, res.max_err, res.tolerance, res.worst);
  CU_ASSERT(ok);
}

/* T in {1, 17, 64, 300} x 1..3 heads, small heads, f32 and bf16, both tile sizes. */
static void test_lengths(void)
{
  static const int64_t Ts[4] = {1, 17, 64, 300};
  for (int i = 0; i < 4; i++)
    for (int dt = 0; dt < 2; dt++) {
      const clmoe_dtype d = dt ? CLMOE_BF16 : CLMOE_F32;
      const ck_mla_tile_case c = {i == 1 ? 2 : 1, Ts[i], 1 + (i + dt) % 3, 16, 8, 16, NULL, 0, d, d,
                                  dt ? CLMOE_MLA_ATTN_TILE128 : CLMOE_MLA_ATTN_TILE64, 1};
      run_case(&c, test_seed + (uint64_t)(10 * i + dt));
    }
}

/* The report's head sizes, packed sequences (tiles start at each sequence's first token). */
static void test_model_dims_packed(void)
{
  static const int32_t lens[5] = {17, 300, 1, 64, 130};
  const ck_mla_tile_case c64 = {1, 0, 2, 128, 64, 128, lens, 5, CLMOE_F32, CLMOE_F32, CLMOE_MLA_ATTN_TILE64, 1};
  const ck_mla_tile_case c128 = {1, 0, 1, 128, 64, 128, lens, 5, CLMOE_BF16, CLMOE_F32, CLMOE_MLA_ATTN_TILE128, 1};
  run_case(&c64, test_seed + 100);
  run_case(&c128, test_seed + 101);
}

/* Head sizes that are not multiples of 4 (scalar staging, zero padding of the k-steps and
 * of the last 8-column tile) or of 16, with a bf16 output. */
static void test_odd_dims(void)
{
  static const int32_t lens[3] = {70, 5, 129};
  const ck_mla_tile_case a = {1, 0, 3, 5, 3, 7, lens, 3, CLMOE_F32, CLMOE_BF16, CLMOE_MLA_ATTN_TILE64, 1};
  const ck_mla_tile_case b = {1, 0, 2, 20, 12, 24, lens, 3, CLMOE_BF16, CLMOE_F32, CLMOE_MLA_ATTN_TILE128, 1};
  /* qk 208: the widest that fits 48 KB of local memory with v 120 (qk 256 needs ~51 KB) */
  const ck_mla_tile_case c = {1, 100, 1, 160, 48, 120, NULL, 0, CLMOE_BF16, CLMOE_BF16, CLMOE_MLA_ATTN_TILE, 0};
  run_case(&a, test_seed + 200);
  run_case(&b, test_seed + 201);
  run_case(&c, test_seed + 202);
}

/* Random inputs, read back as doubles. */
static void make_inputs(int64_t T, int64_t H, int64_t Dn, int64_t Dr, int64_t Dv, clmoe_dtype dt, uint64_t seed,
                        clmoe_tensor t[4], double *h[4])
{
  const int64_t shp[4][4] = {{1, T, H, Dn + Dr}, {1, T, H, Dn}, {1, T, Dr, 0}, {1, T, H, Dv}};
  for (int i = 0; i < 4; i++)
    TEST_OK(ck_uniform(test_ctx, &t[i], dt, shp[i][3] ? 4 : 3, shp[i], seed + (uint64_t)i, -2.0f, 2.0f, &h[i]));
}

/* bf16 inputs: q.k products are exact in fp32, so lse (fp32 statistics; only the sums'
 * order differs) is far closer than 1e-2; o carries P's bf16 rounding. */
static void test_bf16_lse_tight(void)
{
  const int64_t T = 300, H = 2, Dn = 128, Dr = 64, Dv = 128, so[4] = {1, T, H, Dv}, sl[3] = {1, T, H};
  clmoe_tensor t[4], o, lse;
  double *h[4], *ho = NULL, *hl = NULL;
  make_inputs(T, H, Dn, Dr, Dv, CLMOE_BF16, test_seed + 300, t, h);
  TEST_OK(clmoe_tensor_create(test_ctx, &o, CLMOE_F32, 4, so));
  TEST_OK(clmoe_tensor_create(test_ctx, &lse, CLMOE_F32, 3, sl));
  clmoe_mla_attn_inputs in = {&t[0], &t[1], &t[2], &t[3], NULL};
  TEST_OK(clmoe_mla_attention_path(test_ctx, CLMOE_MLA_ATTN_TILE, 0.0f, &in, &o, &lse));
  TEST_OK(ck_read(&o, &ho));
  TEST_OK(ck_read(&lse, &hl));
  double *ro = malloc((size_t)(T * H * Dv) * sizeof *ro), *rl = malloc((size_t)(T * H) * sizeof *rl);
  ref_mla_shape s = {1, T, H, Dn, Dr, Dv, NULL, 0, 1.0 / sqrt((double)(Dn + Dr)), 0};
  ref_mla_attention(&s, h[0], h[1], h[2], h[3], ro, rl);
  clmoe_check_result rlse = {0}, ro_res = {0};
  ck_compare("lse", hl, rl, (size_t)(T * H), &rlse);
  ck_compare("o", ho, ro, (size_t)(T * H * Dv), &ro_res);
  printf("\n    bf16 inputs, qk 192 v 128, T %lld: lse error %.2e, o error %.2e\n", (long long)T, rlse.max_err,
         ro_res.max_err);
  CU_ASSERT(rlse.max_err <= 1e-3);
  CU_ASSERT(ro_res.max_err <= 1e-2);
  for (int i = 0; i < 4; i++) clmoe_tensor_destroy(&t[i]), free(h[i]);
  clmoe_tensor_destroy(&o), clmoe_tensor_destroy(&lse);
  free(ho), free(hl), free(ro), free(rl);
}

/* Reads a tensor as raw bytes. */
static unsigned char *raw(const clmoe_tensor *t, size_t *n)
{
  *n = (size_t)clmoe_tensor_numel(t) * clmoe_dtype_size(t->dtype);
  unsigned char *b = malloc(*n + 1);
  TEST_OK(clmoe_tensor_read(t, b, *n));
  return b;
}

/* clmoe_mla_attention with the fast path forced on gives the tile kernel's bits, off the
 * portable kernel's; a shape the tile kernel does not cover (Dv 160) is refused by the
 * tile path and falls back to the portable kernel on the fast path. */
static void test_dispatch(void)
{
  for (int wide = 0; wide < 2; wide++) {
    const int64_t T = 90, H = 2, Dv = wide ? 160 : 16, so[4] = {1, T, H, Dv}, sl[3] = {1, T, H};
    clmoe_tensor t[4], o[3], lse[3];
    double *h[4];
    make_inputs(T, H, 16, 8, Dv, CLMOE_F32, test_seed + 400, t, h);
    for (int k = 0; k < 3; k++) {
      TEST_OK(clmoe_tensor_create(test_ctx, &o[k], CLMOE_F32, 4, so));
      TEST_OK(clmoe_tensor_create(test_ctx, &lse[k], CLMOE_F32, 3, sl));
    }
    clmoe_mla_attn_inputs in = {&t[0], &t[1], &t[2], &t[3], NULL};
    TEST_OK(clmoe_mla_attention_path(test_ctx, CLMOE_MLA_ATTN_PORTABLE, 0.0f, &in, &o[0], &lse[0]));
    if (wide) {
      CU_ASSERT_EQUAL(clmoe_mla_attention_path(test_ctx, CLMOE_MLA_ATTN_TILE, 0.0f, &in, &o[1], &lse[1]),
                      CLMOE_ERR_UNSUPPORTED);
      CU_ASSERT_PTR_NOT_NULL(strstr(clmoe_last_error(), "Dv"));
    } else {
      TEST_OK(clmoe_mla_attention_path(test_ctx, CLMOE_MLA_ATTN_TILE, 0.0f, &in, &o[1], &lse[1]));
    }
    clmoe_ctx_set_fastpath(test_ctx, 1);
    TEST_OK(clmoe_mla_attention(test_ctx, 0.0f, &in, &o[2], &lse[2]));
    size_t n0, n1, n2;
    unsigned char *b0 = raw(&o[0], &n0), *b1 = raw(&o[wide ? 0 : 1], &n1), *b2 = raw(&o[2], &n2);
    CU_ASSERT(n1 == n2 && memcmp(b1, b2, n1) == 0);     /* fast path = tile kernel, or fallback */
    if (!wide) CU_ASSERT(memcmp(b0, b1, n0) != 0);      /* the two kernels do differ (bf16) */
    free(b0), free(b1), free(b2);
    clmoe_ctx_set_fastpath(test_ctx, 0);
    TEST_OK(clmoe_mla_attention(test_ctx, 0.0f, &in, &o[2], &lse[2]));
    b0 = raw(&o[0], &n0), b2 = raw(&o[2], &n2);
    CU_ASSERT(n0 == n2 && memcmp(b0, b2, n0) == 0); /* off: the portable kernel */
    free(b0), free(b2);
    clmoe_ctx_set_fastpath(test_ctx, 1);
    for (int i = 0; i < 4; i++) clmoe_tensor_destroy(&t[i]), free(h[i]);
    for (int k = 0; k < 3; k++) clmoe_tensor_destroy(&o[k]), clmoe_tensor_destroy(&lse[k]);
  }
}

/* The portable backward (mla_bwd.cl) consumes the tile forward's o and lse. */
static void test_backward_consumes(void)
{
  static const int32_t lens[3] = {40, 1, 150};
  const int64_t T = 191, H = 2, Dn = 16, Dr = 8, Dv = 16;
  const int64_t sq[4] = {1, T, H, Dn + Dr}, sn[4] = {1, T, H, Dn}, sr[3] = {1, T, Dr}, sv[4] = {1, T, H, Dv};
  const int64_t sl[3] = {1, T, H};
  int32_t *cu = NULL;
  clmoe_tensor t[4], cu_t, o, lse, dout, g[4];
  double *h[4], *hd = NULL, *hg[4], *rg[4];
  int64_t Tc;
  TEST_OK(ck_mla_make_cu(test_ctx, lens, 3, &cu, &cu_t, &Tc));
  make_inputs(T, H, Dn, Dr, Dv, CLMOE_BF16, test_seed + 500, t, h); /* both passes read the same values */
  TEST_OK(clmoe_tensor_create(test_ctx, &o, CLMOE_BF16, 4, sv));
  TEST_OK(clmoe_tensor_create(test_ctx, &lse, CLMOE_F32, 3, sl));
  TEST_OK(ck_uniform(test_ctx, &dout, CLMOE_F32, 4, sv, test_seed + 510, -1.0f, 1.0f, &hd));
  const int64_t *gs[4] = {sq, sn, sr, sv};
  const int64_t cnt[4] = {T * H * (Dn + Dr), T * H * Dn, T * Dr, T * H * Dv};
  for (int i = 0; i < 4; i++) {
    TEST_OK(clmoe_tensor_create(test_ctx, &g[i], CLMOE_F32, i == 2 ? 3 : 4, gs[i]));
    TEST_OK(clmoe_tensor_fill(&g[i], NAN));
    rg[i] = malloc((size_t)cnt[i] * sizeof(double));
  }
  clmoe_mla_attn_inputs in = {&t[0], &t[1], &t[2], &t[3], &cu_t};
  TEST_OK(clmoe_mla_attention_path(test_ctx, CLMOE_MLA_ATTN_TILE128, 0.0f, &in, &o, &lse));
  clmoe_mla_attn_grads gr = {&g[0], &g[1], &g[2], &g[3]};
  TEST_OK(clmoe_mla_attention_backward_path(test_ctx, CLMOE_MLA_ATTN_PORTABLE, 0.0f, &in, &o, &lse, &dout, &gr));
  ref_mla_shape s = {1, T, H, Dn, Dr, Dv, cu, 3, 1.0 / sqrt((double)(Dn + Dr)), 1}; /* o in bf16 */
  ref_mla_attention_backward(&s, h[0], h[1], h[2], h[3], hd, rg[0], rg[1], rg[2], rg[3]);
  clmoe_check_result res = {0};
  const char *names[4] = {"dq", "dk_nope", "dk_rope", "dv"};
  for (int i = 0; i < 4; i++) {
    TEST_OK(ck_read(&g[i], &hg[i]));
    ck_compare(names[i], hg[i], rg[i], (size_t)cnt[i], &res);
  }
  printf("\n    backward from the tile forward's o, lse: error %.2e (%s)\n", res.max_err, res.worst);
  CU_ASSERT(res.max_err <= 3e-2); /* o's error (P in bf16) enters D = dO.o */
  for (int i = 0; i < 4; i++) {
    clmoe_tensor_destroy(&t[i]), clmoe_tensor_destroy(&g[i]);
    free(h[i]), free(hg[i]), free(rg[i]);
  }
  clmoe_tensor_destroy(&o), clmoe_tensor_destroy(&lse), clmoe_tensor_destroy(&dout), clmoe_tensor_destroy(&cu_t);
  free(hd), free(cu);
}

/* The whole layer forward and backward on the fast path: the attention reads column slices
 * of the projections and writes its dk_nope and dv into them (strided operands: k_nope
 * and v interleaved per head). */
static void test_layer_fastpath(void)
{
  static const int32_t lens[2] = {70, 33};
  const layer_case lc = {64, 2, 48, 40, 16, 8, 24, 0, 0, lens, 2, 0, CLMOE_F32, 0};
  layer_data L;
  int32_t *cu = NULL;
  clmoe_tensor x, y, cu_t;
  double *hx = NULL, *hy = NULL;
  int64_t T;
  TEST_OK(ck_mla_layer_setup(test_ctx, test_seed + 600, &lc, &L));
  TEST_OK(ck_mla_make_cu(test_ctx, lens, 2, &cu, &cu_t, &T));
  const int64_t sx[3] = {1, T, lc.d};
  TEST_OK(ck_uniform(test_ctx, &x, CLMOE_F32, 3, sx, test_seed + 601, -1.0f, 1.0f, &hx));
  TEST_OK(clmoe_tensor_create(test_ctx, &y, CLMOE_F32, 3, sx));
  TEST_OK(clmoe_tensor_fill(&y, NAN));
  clmoe_mla_saved saved = {0};
  TEST_OK(clmoe_mla_forward(test_ctx, &L.cfg, &L.w, &x, &cu_t, &y, &saved));
  TEST_OK(ck_read(&y, &hy));
  double *ry = malloc((size_t)(T * lc.d) * sizeof *ry);
  L.rl.s.B = 1, L.rl.s.T = T, L.rl.s.cu_seqlens = cu, L.rl.s.nseq = 2;
  ref_mla_forward(&L.rl, (const double *const *)L.hw, hx, ry);
  clmoe_check_result res = {0};
  ck_compare("y", hy, ry, (size_t)(T * lc.d), &res);
  printf("\n    layer forward on the fast path: error %.2e\n", res.max_err);
  CU_ASSERT(res.max_err <= 3e-2); /* q, k, v (fp32 projections) rounded to bf16 on load */
  /* the layer backward: the tile backward writes dk_nope and dv into strided slices */
  clmoe_tensor dy, dx;
  clmoe_mla_weights g;
  double *hdy = NULL, *hdx = NULL, *rdx = malloc((size_t)(T * lc.d) * sizeof *rdx), *rg[REF_MLA_NWEIGHTS];
  TEST_OK(ck_uniform(test_ctx, &dy, CLMOE_F32, 3, sx, test_seed + 602, -1.0f, 1.0f, &hdy));
  TEST_OK(clmoe_tensor_create(test_ctx, &dx, CLMOE_F32, 3, sx));
  TEST_OK(clmoe_mla_weights_create(test_ctx, &L.cfg, &g));
  TEST_OK(clmoe_mla_backward(test_ctx, &L.cfg, &L.w, &x, &cu_t, &saved, &dy, &dx, &g));
  for (int i = 0; i < REF_MLA_NWEIGHTS; i++) rg[i] = malloc((size_t)ref_mla_weight_numel(&L.rl, i) * sizeof(double));
  ref_mla_backward(&L.rl, (const double *const *)L.hw, hx, hdy, rdx, rg);
  clmoe_check_result rb = {0};
  TEST_OK(ck_read(&dx, &hdx));
  ck_compare("dx", hdx, rdx, (size_t)(T * lc.d), &rb);
  for (int i = 0; i < REF_MLA_NWEIGHTS; i++) {
    double *gw = NULL;
    TEST_OK(ck_read(clmoe_mla_weight_at(&g, i), &gw));
    ck_compare(clmoe_mla_weight_name(i), gw, rg[i], (size_t)ref_mla_weight_numel(&L.rl, i), &rb);
    free(gw), free(rg[i]);
  }
  printf("    layer backward on the fast path: error %.2e (%s)\n", rb.max_err, rb.worst);
  CU_ASSERT(rb.max_err <= 5e-2);
  clmoe_mla_weights_destroy(&g);
  clmoe_mla_saved_release(&saved);
  clmoe_tensor_destroy(&dy), clmoe_tensor_destroy(&dx);
  free(hdy), free(hdx), free(rdx);
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&cu_t);
  free(hx), free(hy), free(ry), free(cu);
  ck_mla_layer_free(&L);
}

static void add_tests(CU_pSuite suite)
{
  clmoe_ctx_set_fastpath(test_ctx, 1);
  printf("\n  tile implementation: %s\n", clmoe_tile_impl_name(clmoe_ctx_tile_impl(test_ctx)));
  CU_add_test(suite, "T 1, 17, 64, 300, 1-3 heads, f32 and bf16, both tile sizes", test_lengths);
  CU_add_test(suite, "qk 128+64 v 128, packed sequences", test_model_dims_packed);
  CU_add_test(suite, "odd head sizes (padding, scalar staging)", test_odd_dims);
  CU_add_test(suite, "bf16 inputs: lse to 1e-3", test_bf16_lse_tight);
  CU_add_test(suite, "fast-path dispatch and fallback", test_dispatch);
  CU_add_test(suite, "the portable backward consumes the tile forward's o and lse", test_backward_consumes);
  CU_add_test(suite, "layer forward and backward on the fast path (strided operands)", test_layer_fastpath);
  CU_add_test(suite, "tile backward: lengths, heads, odd sizes, f32 and bf16", test_backward_tiles);
  test_add_checks(suite, "mla_tile");
}

int main(void) { return test_main("mla_tile", add_tests); }
