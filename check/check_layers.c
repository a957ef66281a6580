/* Conformance checks of the model's layer pieces: Block AttnRes and the KDA token mixer (full-rank
 * and low-rank output gates, bounded and unbounded decay gates). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/generate.h"
#include "conformance.h"
#include "ref/reference.h"
#include "ref/ref_kda.h"
#include "ref/ref_layers.h"

#define TOL 1e-5

static clmoe_status check_attn_res(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                   int64_t S, int64_t T, int64_t d, int backward, float wscale)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor src = {0}, w = {0}, g = {0}, h = {0}, al = {0}, dh = {0}, ds = {0}, dw = {0}, dg = {0};
  double *hs = NULL, *hw = NULL, *hg = NULL, *hdh = NULL, *hds0 = NULL, *got = NULL, *ref = NULL;
  double *got2 = NULL, *ref2 = NULL, *got3 = NULL, *ref3 = NULL, *ref4 = NULL;
  const int64_t ss[3] = {S, T, d}, st2[2] = {T, d}, sa[2] = {T, S};
  const size_t nsrc = (size_t)(S * T * d), nh = (size_t)(T * d);
  CK(ck_uniform(ctx, &src, CLMOE_F32, 3, ss, seed, -2.0f, 2.0f, &hs));
  CK(ck_uniform(ctx, &w, CLMOE_F32, 1, &d, seed + 1, -wscale, wscale, &hw));
  CK(ck_uniform(ctx, &g, CLMOE_F32, 1, &d, seed + 2, 0.5f, 1.5f, &hg));
  CK(clmoe_tensor_create(ctx, &h, CLMOE_F32, 2, st2));
  CK(clmoe_tensor_create(ctx, &al, CLMOE_F32, 2, sa));
  CK(clmoe_tensor_fill(&h, NAN));
  CK(clmoe_attn_res(ctx, &src, &w, &g, 1e-5f, &h, &al));
  res->tolerance = TOL;
  if (!backward) {
    CK_ALLOC(ref, nh);
    CK_ALLOC(ref2, T * S);
    ref_attn_res(hs, S, T, d, hw, hg, 1e-5, ref, ref2);
    CK(ck_read(&h, &got));
    CK(ck_read(&al, &got2));
    ck_compare("h", got, ref, nh, res);
    ck_compare("alpha", got2, ref2, (size_t)(T * S), res);
    goto done;
  }
  CK(ck_uniform(ctx, &dh, CLMOE_F32, 2, st2, seed + 3, -1.0f, 1.0f, &hdh));
  CK(ck_uniform(ctx, &ds, CLMOE_F32, 3, ss, seed + 4, -1.0f, 1.0f, &hds0)); /* accumulated into */
  CK(clmoe_tensor_create(ctx, &dw, CLMOE_F32, 1, &d));
  CK(clmoe_tensor_create(ctx, &dg, CLMOE_F32, 1, &d));
  CK(clmoe_tensor_fill(&dw, NAN));
  CK(clmoe_tensor_fill(&dg, NAN));
  CK(clmoe_attn_res_backward(ctx, &src, &w, &g, 1e-5f, &al, &dh, &ds, &dw, &dg));
  CK_ALLOC(ref, nsrc);
  CK_ALLOC(ref3, d);
  CK_ALLOC(ref4, d);
  memcpy(ref, hds0, nsrc * sizeof *ref);
  ref_attn_res_backward(hs, S, T, d, hw, hg, 1e-5, hdh, ref, ref3, ref4);
  CK(ck_read(&ds, &got));
  CK(ck_read(&dw, &got2));
  CK(ck_read(&dg, &got3));
  ck_compare("dsources", got, ref, nsrc, res);
  ck_compare("dw", got2, ref3, (size_t)d, res);
  ck_compare("dgain", got3, ref4, (size_t)d, res);
done:
  free(hs), free(hw), free(hg), free(hdh), free(hds0), free(got), free(ref), free(got2), free(ref2);
  free(got3), free(ref3), free(ref4);
  clmoe_tensor *all[] = {&src, &w, &g, &h, &al, &dh, &ds, &dw, &dg};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  return st;
}

/* The decode step's AttnRes + RMSNorm launch: h and hn against the double reference, or
 * (bits) h against clmoe_attn_res's on the same device, to the bit. */
static clmoe_status check_gen_attn_res(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, int64_t S, int64_t T,
                                       int64_t d, int bits)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor src = {0}, w = {0}, g = {0}, gn = {0}, h = {0}, hn = {0}, ht = {0}, al = {0};
  double *hs = NULL, *hw = NULL, *hg = NULL, *hgn = NULL, *got = NULL, *got2 = NULL, *ref = NULL, *ref2 = NULL;
  double *alpha = NULL;
  const int64_t ss[3] = {S, T, d}, st2[2] = {T, d}, sa[2] = {T, S};
  const size_t nh = (size_t)(T * d);
  CK(ck_uniform(ctx, &src, CLMOE_F32, 3, ss, seed, -2.0f, 2.0f, &hs));
  CK(ck_uniform(ctx, &w, CLMOE_F32, 1, &d, seed + 1, -0.3f, 0.3f, &hw));
  CK(ck_uniform(ctx, &g, CLMOE_F32, 1, &d, seed + 2, 0.5f, 1.5f, &hg));
  CK(ck_uniform(ctx, &gn, CLMOE_F32, 1, &d, seed + 3, 0.5f, 1.5f, &hgn));
  clmoe_tensor *out[4] = {&h, &hn, &ht, &al};
  for (int i = 0; i < 4; i++) {
    CK(clmoe_tensor_create(ctx, out[i], CLMOE_F32, 2, i < 3 ? st2 : sa));
    CK(clmoe_tensor_fill(out[i], NAN));
  }
  CK(clmoe_gen_attn_res_norm(ctx, &src, &w, &g, &gn, 1e-5f, &h, &hn));
  CK(ck_read(&h, &got));
  if (bits) {
    CK(clmoe_attn_res(ctx, &src, &w, &g, 1e-5f, &ht, &al));
    CK(ck_read(&ht, &ref));
    res->tolerance = 0.0;
    ck_compare("h", got, ref, nh, res);
    goto done;
  }
  CK_ALLOC(ref, nh);
  CK_ALLOC(ref2, nh);
  CK_ALLOC(alpha, T * S);
  ref_attn_res(hs, S, T, d, hw, hg, 1e-5, ref, alpha);
  ref_rmsnorm(ref, hgn, T, d, 1e-5, ref2);
  CK(ck_read(&hn, &got2));
  res->tolerance = TOL;
  ck_compare("h", got, ref, nh, res);
  ck_compare("hn", got2, ref2, nh, res);
done:
  free(hs), free(hw), free(hg), free(hgn), free(got), free(got2), free(ref), free(ref2), free(alpha);
  clmoe_tensor *all[] = {&src, &w, &g, &gn, &h, &hn, &ht, &al};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  return st;
}

static clmoe_status ar_gen(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_gen_attn_res(c, s, r, 3, 2, 1024, 0); }
static clmoe_status ar_gen_many(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_gen_attn_res(c, s, r, 9, 3, 300, 0); }
static clmoe_status ar_gen_bits(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_gen_attn_res(c, s, r, 6, 4, 1030, 1); }
static clmoe_status ar_fwd(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 3, 37, 64, 0, 0.3f); }
static clmoe_status ar_fwd_one(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 1, 5, 300, 0, 0.3f); }
static clmoe_status ar_fwd_zero(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 4, 9, 33, 0, 0.0f); }
static clmoe_status ar_fwd_wide(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 9, 6, 2100, 0, 0.05f); }
static clmoe_status ar_bwd(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 3, 37, 64, 1, 0.3f); }
static clmoe_status ar_bwd_wide(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 7, 20, 1030, 1, 0.05f); }
static clmoe_status ar_bwd_one(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_attn_res(c, s, r, 1, 8, 16, 1, 0.3f); }

/* ---- the KDA token mixer ---- */
typedef struct kl_case {
  int64_t B, T;
  const int32_t *lens; /* packed lengths (B = 1), or NULL */
  int nlens;
  int mode;            /* 0 forward, 1 backward (finite differences), 2 prefill + decode, 3 the
                          same decoding as generation does (clmoe_gen_kda_step) */
  int64_t gate_rank;   /* out_gate_rank: 0 full rank, r > 0 Kimi Linear's low-rank pair */
  int unbounded;       /* 1: Kimi Linear's gate -exp(A_log) softplus(z + dt_bias) */
  int64_t dh;          /* head size (0: KL_DH) */
} kl_case;

enum { KL_D = 16, KL_H = 2, KL_DH = 8, KL_R = 4, KL_W = 4 };
#define KL_HEAD(kc) ((kc)->dh ? (kc)->dh : KL_DH)

/* y = layer(x) in double from the host copies of the parameters. */
static void kl_ref(double *const *p, const kl_case *kc, const int32_t *cu, int64_t B, int64_t T,
                   const double *x, double *y)
{
  /* p in clmoe_kda_layer_params' order: ..., o_gain, then w_g, w_o or w_g_down, w_g_up, w_o */
  const int lr = kc->gate_rank > 0;
  ref_kda_layer L = {KL_D, KL_H, KL_HEAD(kc), KL_R, KL_W, 1e-5, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7],
                     p[8], p[9], p[10], p[11], lr ? NULL : p[12], p[lr ? 14 : 13],
                     kc->gate_rank, lr ? p[12] : NULL, lr ? p[13] : NULL, kc->unbounded};
  ref_kda_layer_forward(&L, B, T, cu, kc->lens ? kc->nlens : B, x, y);
}

static double kl_loss(double *const *p, const kl_case *kc, const int32_t *cu, int64_t B, int64_t T,
                      const double *x, const double *dy, double *y)
{
  kl_ref(p, kc, cu, B, T, x, y);
  double L = 0.0;
  for (int64_t i = 0; i < B * T * KL_D; i++) L += y[i] * dy[i];
  return L;
}

static clmoe_status check_kda_layer(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, const kl_case *kc)
{
  clmoe_status st = CLMOE_OK;
  clmoe_kda_layer L = {0}, G = {0};
  clmoe_tensor *pt[CLMOE_KDA_LAYER_PARAMS], *gt[CLMOE_KDA_LAYER_PARAMS];
  double *p[CLMOE_KDA_LAYER_PARAMS] = {0}, *gp = NULL, *fd = NULL;
  clmoe_tensor x = {0}, y = {0}, dy = {0}, dx = {0}, cu_t = {0}, xs = {0}, ys = {0}, yd = {0};
  clmoe_kda_layer_cache cache = {0};
  clmoe_kda_layer_state state = {0};
  double *hx = NULL, *hy = NULL, *ref = NULL, *hdy = NULL, *got = NULL, *tmp = NULL;
  int32_t cu[16];
  int64_t B = kc->B, T = kc->T;
  if (kc->lens) {
    B = 1, T = 0;
    cu[0] = 0;
    for (int i = 0; i < kc->nlens; i++) cu[i + 1] = cu[i] + kc->lens[i];
    T = cu[kc->nlens];
    const int64_t nc = kc->nlens + 1;
    CK(clmoe_tensor_create(ctx, &cu_t, CLMOE_I32, 1, &nc));
    CK(clmoe_tensor_write(&cu_t, cu, (size_t)nc * sizeof *cu));
  }
  const int64_t sx[3] = {B, T, KL_D};
  const size_t nx = (size_t)(B * T * KL_D);
  const clmoe_kda_options opts = {.gate = kc->unbounded ? CLMOE_KDA_GATE_UNBOUNDED : CLMOE_KDA_GATE_BOUNDED};
  CK(clmoe_kda_layer_create_form(ctx, &L, KL_D, KL_H, KL_HEAD(kc), KL_R, KL_W, 1e-5f, &opts, kc->gate_rank));
  const int np = clmoe_kda_layer_params(&L, pt, NULL, NULL);
  for (int i = 0; i < np; i++) {
    /* Random everything (not the default init) so that every path carries signal. */
    float lo = i == 7 ? -0.5f : i == 11 ? 0.5f : -0.4f, hi = i == 7 ? 0.5f : i == 11 ? 1.5f : 0.4f;
    CK(clmoe_tensor_fill_uniform(pt[i], seed + 10 + (uint64_t)i, lo, hi));
    CK(ck_read(pt[i], &p[i]));
  }
  CK(ck_uniform(ctx, &x, CLMOE_F32, 3, sx, seed, -1.0f, 1.0f, &hx));
  CK(clmoe_tensor_create(ctx, &y, CLMOE_F32, 3, sx));
  CK(clmoe_tensor_fill(&y, NAN));
  CK_ALLOC(ref, nx);
  CK_ALLOC(tmp, nx);
  const int32_t *cup = kc->lens ? cu : NULL;
  kl_ref(p, kc, cup, B, T, hx, ref);
  res->tolerance = 1e-4;
  if (kc->mode == 0) {
    CK(clmoe_kda_layer_forward(ctx, &L, &x, kc->lens ? &cu_t : NULL, &y, NULL, NULL));
    CK(ck_read(&y, &got));
    ck_compare("y", got, ref, nx, res);
  } else if (kc->mode == 1) {
    CK(clmoe_kda_layer_forward(ctx, &L, &x, kc->lens ? &cu_t : NULL, &y, &cache, NULL));
    CK(ck_uniform(ctx, &dy, CLMOE_F32, 3, sx, seed + 1, -1.0f, 1.0f, &hdy));
    CK(clmoe_tensor_zeros(ctx, &dx, CLMOE_F32, 3, sx));
    CK(clmoe_kda_layer_create_form(ctx, &G, KL_D, KL_H, KL_HEAD(kc), KL_R, KL_W, 1e-5f, &opts, kc->gate_rank));
    clmoe_kda_layer_params(&G, gt, NULL, NULL);
    for (int i = 0; i < np; i++) CK(clmoe_tensor_fill(gt[i], 0.0));
    CK(clmoe_kda_layer_backward(ctx, &L, &x, kc->lens ? &cu_t : NULL, &cache, &dy, &G, &dx));
    /* Every parameter and x against central differences of the double reference. */
    for (int i = -1; i < np; i++) {
      double *v = i < 0 ? hx : p[i];
      size_t n = i < 0 ? nx : (size_t)clmoe_tensor_numel(pt[i]);
      free(gp), free(fd);
      gp = NULL, fd = NULL;
      CK(ck_read(i < 0 ? &dx : gt[i], &gp));
      CK_ALLOC(fd, n);
      for (size_t e = 0; e < n; e++) {
        double orig = v[e], h = 1e-5;
        v[e] = orig + h;
        double lp = kl_loss(p, kc, cup, B, T, hx, hdy, tmp);
        v[e] = orig - h;
        double lm = kl_loss(p, kc, cup, B, T, hx, hdy, tmp);
        v[e] = orig;
        fd[e] = (lp - lm) / (2.0 * h);
      }
      const char *names[CLMOE_KDA_LAYER_PARAMS];
      clmoe_kda_layer_params(&L, NULL, names, NULL);
      ck_compare(i < 0 ? "dx" : names[i], gp, fd, n, res);
    }
  } else {
    /* Prefill the first half of every sequence (equal lengths), then decode the rest one
     * token at a time: the outputs must equal the full forward's. */
    const int64_t P = T / 2, sp[3] = {B, P, KL_D}, s1[2] = {B, KL_D};
    float *hxf = malloc(nx * sizeof *hxf), *hyf = malloc(nx * sizeof *hyf), *buf = malloc((size_t)(B * KL_D) * sizeof *buf);
    if (!hxf || !hyf || !buf) {
      free(hxf), free(hyf), free(buf);
      st = CLMOE_ERR_OUT_OF_MEMORY;
      goto done;
    }
    for (size_t e = 0; e < nx; e++) hxf[e] = (float)hx[e];
    CK(clmoe_kda_layer_state_create(ctx, &L, B, &state));
    CK(clmoe_tensor_create(ctx, &xs, CLMOE_F32, 3, sp));
    CK(clmoe_tensor_create(ctx, &ys, CLMOE_F32, 3, sp));
    CK(clmoe_tensor_create(ctx, &yd, CLMOE_F32, 2, s1));
    for (int64_t b = 0; b < B; b++) memcpy(hyf + b * P * KL_D, hxf + b * T * KL_D, (size_t)(P * KL_D) * sizeof *hyf);
    CK(clmoe_tensor_write(&xs, hyf, (size_t)(B * P * KL_D) * sizeof *hyf));
    CK(clmoe_kda_layer_forward(ctx, &L, &xs, NULL, &ys, NULL, &state));
    CK(clmoe_tensor_read(&ys, hyf, (size_t)(B * P * KL_D) * sizeof *hyf));
    CK_ALLOC(got, nx);
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < P; t++)
        for (int c = 0; c < KL_D; c++) got[(b * T + t) * KL_D + c] = hyf[(b * P + t) * KL_D + c];
    clmoe_tensor_destroy(&xs);
    CK(clmoe_tensor_create(ctx, &xs, CLMOE_F32, 2, s1));
    for (int64_t t = P; t < T; t++) {
      for (int64_t b = 0; b < B; b++) memcpy(buf + b * KL_D, hxf + (b * T + t) * KL_D, KL_D * sizeof *buf);
      CK(clmoe_tensor_write(&xs, buf, (size_t)(B * KL_D) * sizeof *buf));
      CK(kc->mode == 3 ? clmoe_gen_kda_step(ctx, &L, &xs, &state, &yd) : clmoe_kda_layer_step(ctx, &L, &xs, &state, &yd));
      CK(clmoe_tensor_read(&yd, buf, (size_t)(B * KL_D) * sizeof *buf));
      for (int64_t b = 0; b < B; b++)
        for (int c = 0; c < KL_D; c++) got[(b * T + t) * KL_D + c] = buf[b * KL_D + c];
    }
    free(hxf), free(hyf), free(buf);
    ck_compare("y (prefill + decode)", got, ref, nx, res);
  }
done:
  for (int i = 0; i < CLMOE_KDA_LAYER_PARAMS; i++) free(p[i]);
  free(gp), free(fd), free(hx), free(hy), free(ref), free(hdy), free(got), free(tmp);
  clmoe_kda_layer_cache_destroy(&cache);
  clmoe_kda_layer_state_destroy(&state);
  clmoe_kda_layer_destroy(&L);
  clmoe_kda_layer_destroy(&G);
  clmoe_tensor *all[] = {&x, &y, &dy, &dx, &cu_t, &xs, &ys, &yd};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  return st;
}

static const int32_t kl_lens[] = {5, 1, 12, 0, 17};
static clmoe_status kl_fwd(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {2, 21, NULL, 0, 0, 0, 0, 0}; return check_kda_layer(c, s, r, &k); }
static clmoe_status kl_fwd_packed(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {1, 0, kl_lens, 5, 0, 0, 0, 0}; return check_kda_layer(c, s, r, &k); }
static clmoe_status kl_bwd(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {2, 9, NULL, 0, 1, 0, 0, 0}; return check_kda_layer(c, s, r, &k); }
static clmoe_status kl_bwd_packed(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {1, 0, kl_lens, 3, 1, 0, 0, 0}; return check_kda_layer(c, s, r, &k); }
static clmoe_status kl_step(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {3, 24, NULL, 0, 2, 0, 0, 0}; return check_kda_layer(c, s, r, &k); }
/* Kimi Linear's form: the low-rank output gate (r = D, as its g_a_proj, g_b_proj) and the unbounded decay gate */
static clmoe_status kl_kimi_fwd(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {1, 0, kl_lens, 5, 0, KL_DH, 1, 0}; return check_kda_layer(c, s, r, &k); }
static clmoe_status kl_kimi_bwd(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {2, 9, NULL, 0, 1, KL_DH, 1, 0}; return check_kda_layer(c, s, r, &k); }
static clmoe_status kl_kimi_step(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {3, 24, NULL, 0, 2, KL_DH, 1, 0}; return check_kda_layer(c, s, r, &k); }
static clmoe_status kl_gen_step(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {3, 24, NULL, 0, 3, 0, 0, 0}; return check_kda_layer(c, s, r, &k); }
static clmoe_status kl_kimi_gen_step(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {3, 24, NULL, 0, 3, KL_DH, 1, 0}; return check_kda_layer(c, s, r, &k); }
/* Kimi Linear's head size (128: a lane holds 64 rows of the state) and an odd one (24) */
static clmoe_status kl_kimi_gen_step128(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {2, 12, NULL, 0, 3, 128, 1, 128}; return check_kda_layer(c, s, r, &k); }
static clmoe_status kl_gen_step24(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {2, 12, NULL, 0, 3, 0, 0, 24}; return check_kda_layer(c, s, r, &k); }
static clmoe_status kl_lowrank_bwd(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { const kl_case k = {1, 0, kl_lens, 3, 1, 3, 0, 0}; return check_kda_layer(c, s, r, &k); }

const clmoe_check clmoe_checks_layers[] = {
    {"kda_layer.forward", "KDA mixer against the composed double reference", kl_fwd},
    {"kda_layer.forward.packed", "KDA mixer, packed sequences incl. empty", kl_fwd_packed},
    {"kda_layer.backward", "KDA mixer gradients of every weight and x vs finite differences", kl_bwd},
    {"kda_layer.backward.packed", "KDA mixer gradients, packed sequences", kl_bwd_packed},
    {"kda_layer.step", "prefill half, decode the rest: equals the full forward", kl_step},
    {"kda_layer.kimi.forward", "Kimi Linear's form (low-rank output gate, unbounded gate), packed", kl_kimi_fwd},
    {"kda_layer.kimi.backward", "Kimi Linear's form: gradients (w_g_down, w_g_up, ...) vs finite differences", kl_kimi_bwd},
    {"kda_layer.kimi.step", "Kimi Linear's form: prefill half, decode the rest", kl_kimi_step},
    {"kda_layer.gen_step", "generation's decode step (one-launch convolutions and update) = the full forward", kl_gen_step},
    {"kda_layer.kimi.gen_step", "Kimi Linear's form: generation's decode step = the full forward", kl_kimi_gen_step},
    {"kda_layer.kimi.gen_step.h128", "generation's decode step, Kimi Linear's form, heads of 128", kl_kimi_gen_step128},
    {"kda_layer.gen_step.h24", "generation's decode step, heads of 24", kl_gen_step24},
    {"kda_layer.lowrank.backward", "out_gate_rank 3, bounded gate: gradients, packed", kl_lowrank_bwd},
    {"attn_res.forward", "Block AttnRes, 3 sources, d 64", ar_fwd},
    {"attn_res.forward.one", "a single source (h = b_0)", ar_fwd_one},
    {"attn_res.forward.zero", "zero pseudo-query: uniform weights", ar_fwd_zero},
    {"attn_res.forward.wide", "9 sources, d 2100", ar_fwd_wide},
    {"attn_res.backward", "backward, 3 sources, d 64", ar_bwd},
    {"attn_res.backward.wide", "backward, 7 sources, d 1030", ar_bwd_wide},
    {"attn_res.backward.one", "backward, a single source", ar_bwd_one},
    {"attn_res.gen_norm", "decode step's AttnRes + RMSNorm launch, 3 sources, 2 tokens, d 1024", ar_gen},
    {"attn_res.gen_norm.many", "the same with 9 sources (three batches of sums), d 300", ar_gen_many},
    {"attn_res.gen_norm.bits", "its h equals clmoe_attn_res's to the bit (6 sources, d 1030)", ar_gen_bits},
    {NULL, NULL, NULL}};
