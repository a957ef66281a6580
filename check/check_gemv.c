/* Conformance checks of the few-token GEMV (clmoe_gen_gemv, lib/ops/ops_gemv.c and
 * kernels_cl/ops/gemv.cl: up to six matrices sharing one input, the decode step's products)
 * against a double-precision reference, with fp32 and bf16 weights: each input form (x, its
 * RMSNorm, the gated units SwiGLU and SiTU-GLU, x times a sigmoid gate, the gated norm of
 * column groups), 1 to 16 tokens (token
 * tiles of 4, the last partial), widths that are not multiples of the 64 lanes nor of a
 * work-group's rows, six slots of different heights, accumulation into a random Y, and an
 * RMSNorm gain that starts inside its buffer (a view).
 *
 * bf16 weights are read back as stored, so the reference multiplies the same rounded values
 * and only the sums' rounding remains: the fp32 tolerance (1e-5 in ck_compare's measure)
 * holds for both dtypes. Outputs written without accumulation start as NaN: an element the
 * kernel misses fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "ref/reference.h"
#include "clmoe/generate.h"
#include "clmoe/paths.h"

#define TOL 1e-5
#define GEMV_MAX 6
#define GAIN_AT 5 /* the RMSNorm gain's offset in its buffer (a parameter inside a larger one) */

typedef struct gemv_case {
  int64_t T, K;
  int n;                  /* matrices */
  int64_t rows[GEMV_MAX]; /* their heights */
  clmoe_dtype wtype;
  clmoe_gen_gemv_input in;
  int glu;                /* clmoe_glu, for CLMOE_GEN_GEMV_GLU; the group width for GROUP_NORM_GATE */
  int accumulate;
} gemv_case;

static double ref_glu(int glu, double u, double w)
{
  if (glu == CLMOE_GLU_SWIGLU) return u * ref_sigmoid(u) * w;
  return 4.0 * tanh(u / 4.0) * ref_sigmoid(u) * (25.0 * tanh(w / 25.0));
}

/* in(x) [T, K] in double. */
static void ref_input(const gemv_case *gc, const double *x, const double *x2, const double *gain, double eps,
                      double *out)
{
  const int64_t T = gc->T, K = gc->K;
  if (gc->in == CLMOE_GEN_GEMV_RMSNORM) {
    ref_rmsnorm(x, gain, T, K, eps, out);
    return;
  }
  if (gc->in == CLMOE_GEN_GEMV_GROUP_NORM_GATE) { /* groups of glu columns, gain [glu] */
    const int64_t G = gc->glu;
    ref_rmsnorm(x, gain, T * K / G, G, eps, out);
    for (int64_t i = 0; i < T * K; i++) out[i] *= ref_sigmoid(x2[i]);
    return;
  }
  for (int64_t i = 0; i < T * K; i++)
    out[i] = gc->in == CLMOE_GEN_GEMV_GLU    ? ref_glu(gc->glu, x[i], x2[i])
             : gc->in == CLMOE_GEN_GEMV_GATE ? x[i] * ref_sigmoid(x2[i])
                                             : x[i];
}

/* keep: when not NULL, receives the first output's values [T, rows[0]] (the caller frees);
 * res NULL: no comparison with the reference. */
static clmoe_status gemv_outputs(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, const gemv_case *gc,
                                 double **keep)
{
  clmoe_status st = CLMOE_OK;
  const int64_t T = gc->T, K = gc->K, sx[2] = {T, K};
  const float eps = 1e-5f;
  clmoe_tensor x = {0}, x2 = {0}, gain_all = {0}, gain = {0}, w[GEMV_MAX] = {{0}}, y[GEMV_MAX] = {{0}};
  double *hx = NULL, *hx2 = NULL, *hg = NULL, *in = NULL, *hw[GEMV_MAX] = {0}, *hy[GEMV_MAX] = {0};
  double *got = NULL, *ref = NULL;
  const int grouped = gc->in == CLMOE_GEN_GEMV_GROUP_NORM_GATE;
  const int need_x2 = gc->in == CLMOE_GEN_GEMV_GLU || gc->in == CLMOE_GEN_GEMV_GATE || grouped;
  CK(ck_uniform(ctx, &x, CLMOE_F32, 2, sx, seed, -2.0f, 2.0f, &hx));
  if (need_x2) CK(ck_uniform(ctx, &x2, CLMOE_F32, 2, sx, seed + 1, -2.0f, 2.0f, &hx2));
  if (gc->in == CLMOE_GEN_GEMV_RMSNORM || grouped) { /* the gain a view GAIN_AT elements into a larger tensor */
    const int64_t G = grouped ? gc->glu : K, kg = G + GAIN_AT;
    CK(ck_uniform(ctx, &gain_all, CLMOE_F32, 1, &kg, seed + 2, 0.5f, 1.5f, &hg));
    CK(clmoe_tensor_view(&gain_all, &gain, 1, &G, GAIN_AT));
  }
  for (int i = 0; i < gc->n; i++) {
    const int64_t sw[2] = {gc->rows[i], K}, sy[2] = {T, gc->rows[i]};
    CK(ck_uniform(ctx, &w[i], gc->wtype, 2, sw, seed + 10 + (uint64_t)i, -1.0f, 1.0f, &hw[i]));
    if (gc->accumulate) {
      CK(ck_uniform(ctx, &y[i], CLMOE_F32, 2, sy, seed + 20 + (uint64_t)i, -1.0f, 1.0f, &hy[i]));
    } else {
      CK(clmoe_tensor_create(ctx, &y[i], CLMOE_F32, 2, sy));
      CK(clmoe_tensor_fill(&y[i], NAN)); /* every element must be written */
    }
  }
  {
    const clmoe_tensor *wp[GEMV_MAX];
    clmoe_tensor *yp[GEMV_MAX];
    for (int i = 0; i < gc->n; i++) wp[i] = &w[i], yp[i] = &y[i];
    CK(clmoe_gen_gemv(ctx, &x, need_x2 ? &x2 : NULL, hg ? &gain : NULL, gc->in, gc->glu, eps, gc->accumulate,
                      gc->n, wp, yp));
  }
  CK_ALLOC(in, T * K);
  ref_input(gc, hx, hx2, hg ? hg + GAIN_AT : NULL, eps, in);
  if (res) res->tolerance = TOL;
  for (int i = 0; i < gc->n; i++) {
    const int64_t N = gc->rows[i];
    char what[16];
    CK(ck_read(&y[i], &got));
    CK_ALLOC(ref, T * N);
    for (int64_t t = 0; t < T; t++)
      for (int64_t r = 0; r < N; r++) {
        double a = gc->accumulate ? hy[i][t * N + r] : 0.0;
        for (int64_t c = 0; c < K; c++) a += in[t * K + c] * hw[i][r * K + c];
        ref[t * N + r] = a;
      }
    snprintf(what, sizeof what, "y%d", i);
    if (res) ck_compare(what, got, ref, (size_t)(T * N), res);
    if (keep && i == 0) *keep = got, got = NULL;
    free(got), free(ref);
    got = ref = NULL;
  }
done:
  clmoe_tensor_destroy(&x), clmoe_tensor_destroy(&x2), clmoe_tensor_destroy(&gain_all);
  for (int i = 0; i < GEMV_MAX; i++) clmoe_tensor_destroy(&w[i]), clmoe_tensor_destroy(&y[i]), free(hw[i]), free(hy[i]);
  free(hx), free(hx2), free(hg), free(in), free(got), free(ref);
  return st;
}

static clmoe_status check_gemv(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res, const gemv_case *gc)
{
  return gemv_outputs(ctx, seed, res, gc, NULL);
}

/* T, K, n, rows, weights, input form, glu, accumulate */
static const gemv_case f32_plain = {1, 300, 3, {5, 130, 64}, CLMOE_F32, CLMOE_GEN_GEMV_PLAIN, 0, 0};
static const gemv_case bf16_plain = {1, 300, 3, {5, 130, 64}, CLMOE_BF16, CLMOE_GEN_GEMV_PLAIN, 0, 0};
static const gemv_case bf16_six = {3, 200, 6, {1, 7, 64, 33, 70, 2}, CLMOE_BF16, CLMOE_GEN_GEMV_PLAIN, 0, 1};
static const gemv_case bf16_norm = {5, 100, 2, {40, 9}, CLMOE_BF16, CLMOE_GEN_GEMV_RMSNORM, 0, 0};
static const gemv_case bf16_swiglu = {16, 150, 1, {37}, CLMOE_BF16, CLMOE_GEN_GEMV_GLU, CLMOE_GLU_SWIGLU, 1};
static const gemv_case bf16_situ = {2, 65, 1, {20}, CLMOE_BF16, CLMOE_GEN_GEMV_GLU, CLMOE_GLU_SITU, 0};
static const gemv_case bf16_gate = {4, 128, 1, {48}, CLMOE_BF16, CLMOE_GEN_GEMV_GATE, 0, 1};
static const gemv_case f32_gate = {7, 64, 2, {11, 3}, CLMOE_F32, CLMOE_GEN_GEMV_GATE, 0, 0};
/* a KDA output's gated head norm: 5 groups of 24 columns, and 64 groups of 8 */
static const gemv_case bf16_gnorm = {6, 120, 2, {33, 4}, CLMOE_BF16, CLMOE_GEN_GEMV_GROUP_NORM_GATE, 24, 1};
static const gemv_case f32_gnorm = {2, 512, 1, {70}, CLMOE_F32, CLMOE_GEN_GEMV_GROUP_NORM_GATE, 8, 0};
/* 16 tokens per work-group (a large vocabulary's head): CLMOE_GEMV_WIDE_ROWS lowered to its 300 rows */
static const gemv_case bf16_head = {17, 12, 1, {300}, CLMOE_BF16, CLMOE_GEN_GEMV_PLAIN, 0, 0};

#define GEMV_CHECK(fname, gc)                                                                \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)                 \
  {                                                                                          \
    return check_gemv(c, s, r, &(gc));                                                       \
  }
GEMV_CHECK(g_f32_plain, f32_plain)
GEMV_CHECK(g_bf16_plain, bf16_plain)
GEMV_CHECK(g_bf16_six, bf16_six)
static clmoe_status g_bf16_head(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  clmoe_status st = clmoe_ctx_set_knob(ctx, "CLMOE_GEMV_WIDE_ROWS", "300");
  if (st == CLMOE_OK) st = check_gemv(ctx, seed, res, &bf16_head);
  const clmoe_status back = clmoe_ctx_set_knob(ctx, "CLMOE_GEMV_WIDE_ROWS", ""); /* "": the default */
  return st != CLMOE_OK ? st : back;
}
/* The launch's forms (rows and tokens per work-group, 16-byte or element loads, passes
 * whose loads are issued together: the CLMOE_GEMV_ROWS, _TOK, _VEC and _PASSES knobs) give
 * the default form's outputs to the bit (whose values the other checks hold to the double
 * reference). K 264 and 1032 take 16-byte loads by default (a last pass over a row with 33
 * and 1 of the 64 lanes), K 131 never. */
#define FORM_CASES 4
#define FORM_KNOBS 4
static const gemv_case bf16_forms[FORM_CASES] = {
    {9, 264, 2, {70, 5}, CLMOE_BF16, CLMOE_GEN_GEMV_RMSNORM, 0, 0},
    {3, 131, 1, {17}, CLMOE_BF16, CLMOE_GEN_GEMV_GLU, CLMOE_GLU_SWIGLU, 1},
    {2, 1032, 1, {9}, CLMOE_BF16, CLMOE_GEN_GEMV_GATE, 0, 1},
    {5, 1032, 1, {13}, CLMOE_BF16, CLMOE_GEN_GEMV_GROUP_NORM_GATE, 24, 0}};
static clmoe_status g_bf16_forms(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  static const char *const forms[][FORM_KNOBS] = {{"16", "4", "1", "1"}, {"5", "3", "0", "3"}, {"1", "1", "1", "4"},
                                                  {"2", "16", "0", "2"}, {"64", "8", "1", "1"}, {"0", "0", "0", "4"}};
  static const char *const names[] = {"CLMOE_GEMV_ROWS", "CLMOE_GEMV_TOK", "CLMOE_GEMV_VEC", "CLMOE_GEMV_PASSES"};
  clmoe_status st = CLMOE_OK;
  res->tolerance = 0.0;
  for (int g = 0; g < FORM_CASES && st == CLMOE_OK; g++) {
    const gemv_case *gc = &bf16_forms[g];
    const size_t n = (size_t)(gc->T * gc->rows[0]);
    double *base = NULL, *got = NULL;
    st = gemv_outputs(ctx, seed, NULL, gc, &base);
    for (size_t f = 0; st == CLMOE_OK && f < sizeof forms / sizeof forms[0]; f++) {
      for (int k = 0; k < FORM_KNOBS && st == CLMOE_OK; k++) st = clmoe_ctx_set_knob(ctx, names[k], forms[f][k]);
      if (st == CLMOE_OK) st = gemv_outputs(ctx, seed, NULL, gc, &got);
      for (int k = 0; k < FORM_KNOBS; k++) { /* "": the defaults back */
        const clmoe_status back = clmoe_ctx_set_knob(ctx, names[k], "");
        if (st == CLMOE_OK) st = back;
      }
      if (st == CLMOE_OK) { /* bits on this device: not an output to compare across devices */
        char what[48];
        clmoe_check_capture *cap = res->capture;
        snprintf(what, sizeof what, "case %d y0, form %s/%s/%s/%s", g, forms[f][0], forms[f][1], forms[f][2],
                 forms[f][3]);
        res->capture = NULL;
        ck_compare(what, got, base, n, res);
        res->capture = cap;
      }
      free(got);
      got = NULL;
    }
    free(base);
  }
  return st;
}
GEMV_CHECK(g_bf16_norm, bf16_norm)
GEMV_CHECK(g_bf16_swiglu, bf16_swiglu)
GEMV_CHECK(g_bf16_situ, bf16_situ)
GEMV_CHECK(g_bf16_gate, bf16_gate)
GEMV_CHECK(g_f32_gate, f32_gate)
GEMV_CHECK(g_bf16_gnorm, bf16_gnorm)
GEMV_CHECK(g_f32_gnorm, f32_gnorm)

/* clmoe_gen_argmax, the greedy tokens of a decode step on the device: rows of V 5000 (not a
 * multiple of the 64 lanes) drawn at random, one with its maximum twice (the lower index
 * wins; the two in different parts of a split row), one all -inf (index 0), one with two
 * NaNs (-1 - the lower one's index), one with the maximum last. The ids must equal the plain
 * scan's exactly; ids start as -7 so a row the kernel misses fails. `part`: the logits per
 * work-group (CLMOE_ARGMAX_PART; NULL: the default, 3 parts a row). */
static clmoe_status argmax_check(clmoe_ctx *ctx, uint64_t seed, const char *part, clmoe_check_result *res)
{
  enum { R = 7 };
  const int64_t V = 5000, sl[2] = {R, V}, n = R;
  clmoe_status st = CLMOE_OK;
  clmoe_tensor lg = {0}, ids = {0};
  double *h = NULL, *got = NULL, *ref = NULL;
  float *hf = NULL;
  int32_t *gi = NULL;
  CK(ck_uniform(ctx, &lg, CLMOE_F32, 2, sl, seed, -4.0f, 4.0f, &h));
  CK_ALLOC(hf, R * V);
  for (int64_t i = 0; i < R * V; i++) hf[i] = (float)h[i];
  hf[1 * V + 300] = hf[1 * V + 4100] = 9.0f;
  for (int64_t c = 0; c < V; c++) hf[2 * V + c] = -INFINITY;
  hf[3 * V + 900] = NAN, hf[3 * V + 517] = NAN, hf[3 * V + 10] = 50.0f;
  hf[4 * V + V - 1] = 8.5f;
  CK(clmoe_tensor_write(&lg, hf, (size_t)(R * V) * sizeof *hf));
  CK(clmoe_tensor_create(ctx, &ids, CLMOE_I32, 1, &n));
  CK_ALLOC(gi, R);
  for (int r = 0; r < R; r++) gi[r] = -7;
  CK(clmoe_tensor_write(&ids, gi, R * sizeof *gi));
  if (part) CK(clmoe_ctx_set_knob(ctx, "CLMOE_ARGMAX_PART", part));
  st = clmoe_gen_argmax(ctx, &lg, &ids);
  if (part) {
    const clmoe_status back = clmoe_ctx_set_knob(ctx, "CLMOE_ARGMAX_PART", ""); /* "": the default */
    if (st == CLMOE_OK) st = back;
  }
  if (st != CLMOE_OK) goto done;
  CK(clmoe_tensor_read(&ids, gi, R * sizeof *gi));
  CK_ALLOC(got, R);
  CK_ALLOC(ref, R);
  for (int r = 0; r < R; r++) {
    const float *x = hf + (int64_t)r * V;
    int64_t best = 0, nan = -1;
    for (int64_t c = 0; c < V; c++) {
      if (isnan(x[c])) {
        if (nan < 0) nan = c;
      } else if (isnan(x[best]) || (double)x[c] > (double)x[best]) {
        best = c;
      }
    }
    ref[r] = nan >= 0 ? (double)(-1 - nan) : (double)best;
    got[r] = gi[r];
  }
  res->tolerance = 0.0; /* ids: exact */
  ck_compare("ids", got, ref, R, res);
done:
  clmoe_tensor_destroy(&lg), clmoe_tensor_destroy(&ids);
  free(h), free(hf), free(got), free(ref), free(gi);
  return st;
}

static clmoe_status g_argmax(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  return argmax_check(ctx, seed, NULL, res);
}

static clmoe_status g_argmax_whole(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  return argmax_check(ctx, seed, "8192", res);
}

static clmoe_status g_argmax_parts(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  return argmax_check(ctx, seed, "77", res);
}

const clmoe_check clmoe_checks_gemv[] = {
    {"gemv.f32", "1 token, K 300, 3 matrices of 5, 130, 64 rows", g_f32_plain},
    {"gemv.bf16", "the same with bf16 weights", g_bf16_plain},
    {"gemv.bf16.six", "3 tokens, 6 matrices of 1 to 70 rows, accumulating", g_bf16_six},
    {"gemv.bf16.rmsnorm", "5 tokens, RMSNorm of x with a gain on the way in", g_bf16_norm},
    {"gemv.bf16.swiglu", "16 tokens, SwiGLU of two inputs, accumulating", g_bf16_swiglu},
    {"gemv.bf16.situ", "2 tokens, SiTU-GLU of two inputs, K 65", g_bf16_situ},
    {"gemv.bf16.gate", "4 tokens, x times sigmoid(gate), accumulating", g_bf16_gate},
    {"gemv.f32.gate", "7 tokens, x times sigmoid(gate), fp32 weights", g_f32_gate},
    {"gemv.bf16.groupnorm", "6 tokens, sigmoid(gate) times the norm of 5 groups of 24 columns, accumulating",
     g_bf16_gnorm},
    {"gemv.f32.groupnorm", "2 tokens, the same over 64 groups of 8, fp32 weights", g_f32_gnorm},
    {"gemv.bf16.forms", "6 launch forms (rows and tokens per work-group, 16-byte or element loads, passes "
     "loaded together) give the default's bits: RMSNorm, K 264; SwiGLU, K 131; gate and group norm, K 1032",
     g_bf16_forms},
    {"gemv.bf16.head", "17 tokens, 300 rows, K 12, 16 tokens per work-group (CLMOE_GEMV_WIDE_ROWS 300)",
     g_bf16_head},
    {"gemv.argmax", "greedy tokens of 7 rows of 5000 logits: ties, -inf, NaN, the last (3 parts a row)",
     g_argmax},
    {"gemv.argmax.whole", "the same, one work-group a row (CLMOE_ARGMAX_PART 8192)", g_argmax_whole},
    {"gemv.argmax.parts", "the same, 65 parts a row (CLMOE_ARGMAX_PART 77)", g_argmax_parts},
    {NULL, NULL, NULL}};
