/* Conformance checks of the causal short convolution with SiLU (KDA's ShortConv4): the
 * forward (y and the decode state it leaves), the backward (dx, dw, dstate_in) and decode
 * steps token by token, against the double-precision reference of check/ref/ref_kda.c
 * (itself checked against finite differences). Packed lengths include sequences shorter
 * than W - 1 and an empty one, so states pass through whole sequences. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "ref/ref_kda.h"

#define TOL_F32 1e-5
#define TOL_BF16 1e-2

enum { CONV_FWD = 1, CONV_BWD = 2, CONV_STEP = 4 };

typedef struct conv_case {
  int64_t B, T, C, W;
  const int32_t *lens; /* packed sequence lengths (then B = 1 and T = their sum) */
  int nlens;
  int state;           /* random input conv state (else none: zeros) */
  clmoe_dtype xdt, ydt; /* storage of x and of y */
  int what;            /* CONV_FWD | CONV_BWD | CONV_STEP (steps need equal lengths) */
} conv_case;

/* Device inputs and their host copies (the values as stored, so bf16 rounding is shared). */
typedef struct conv_data {
  int64_t B, T, C, W, N;
  int32_t *cu;
  clmoe_tensor x, w, s0, cu_t;
  double *hx, *hw, *hs0;
} conv_data;

static void conv_data_free(conv_data *d)
{
  clmoe_tensor_destroy(&d->x), clmoe_tensor_destroy(&d->w), clmoe_tensor_destroy(&d->s0);
  clmoe_tensor_destroy(&d->cu_t);
  free(d->cu), free(d->hx), free(d->hw), free(d->hs0);
  memset(d, 0, sizeof *d);
}

static clmoe_status conv_setup(clmoe_ctx *ctx, uint64_t seed, const conv_case *cc, conv_data *d)
{
  clmoe_status st = CLMOE_OK;
  memset(d, 0, sizeof *d);
  d->B = cc->B, d->T = cc->T, d->C = cc->C, d->W = cc->W, d->N = cc->B;
  if (cc->lens) {
    d->B = 1, d->N = cc->nlens;
    CK_ALLOC(d->cu, cc->nlens + 1);
    d->cu[0] = 0;
    for (int i = 0; i < cc->nlens; i++) d->cu[i + 1] = d->cu[i] + cc->lens[i];
    d->T = d->cu[cc->nlens];
    const int64_t nc = cc->nlens + 1;
    CK(clmoe_tensor_create(ctx, &d->cu_t, CLMOE_I32, 1, &nc));
    CK(clmoe_tensor_write(&d->cu_t, d->cu, (size_t)nc * sizeof *d->cu));
  }
  const int64_t sx[3] = {d->B, d->T, d->C}, sw[2] = {d->C, d->W}, ss[3] = {d->N, d->W - 1, d->C};
  CK(ck_uniform(ctx, &d->x, cc->xdt, 3, sx, seed, -2.0f, 2.0f, &d->hx));
  CK(ck_uniform(ctx, &d->w, CLMOE_F32, 2, sw, seed + 1, -1.0f, 1.0f, &d->hw));
  if (cc->state) CK(ck_uniform(ctx, &d->s0, CLMOE_F32, 3, ss, seed + 2, -2.0f, 2.0f, &d->hs0));
done:
  if (st != CLMOE_OK) conv_data_free(d);
  return st;
}

static ref_kda_shape conv_ref_shape(const conv_data *d)
{
  ref_kda_shape s = {d->B, d->T, 1, 1, 1, d->cu, d->N, 1.0, -5.0, 0};
  return s;
}

/* Forward: y and state_out against the reference. */
static clmoe_status conv_check_forward(clmoe_ctx *ctx, const conv_case *cc, const conv_data *d,
                                       clmoe_check_result *res)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor y = {0}, so = {0};
  double *gy = NULL, *gs = NULL, *ry = NULL, *rs = NULL;
  const int64_t sx[3] = {d->B, d->T, d->C}, ss[3] = {d->N, d->W - 1, d->C};
  const size_t ny = (size_t)(d->B * d->T * d->C), ns = (size_t)(d->N * (d->W - 1) * d->C);
  CK(clmoe_tensor_create(ctx, &y, cc->ydt, 3, sx));
  CK(clmoe_tensor_create(ctx, &so, CLMOE_F32, 3, ss));
  CK(clmoe_tensor_fill(&y, NAN)); /* every output element must be written */
  CK(clmoe_tensor_fill(&so, NAN));
  CK(clmoe_short_conv(ctx, &d->x, &d->w, d->cu ? &d->cu_t : NULL, d->hs0 ? &d->s0 : NULL, &y, &so));
  CK(ck_read(&y, &gy));
  CK(ck_read(&so, &gs));
  CK_ALLOC(ry, ny);
  CK_ALLOC(rs, ns);
  ref_kda_shape s = conv_ref_shape(d);
  ref_short_conv(&s, d->C, d->W, d->hx, d->hw, d->hs0, ry, rs);
  ck_compare("y", gy, ry, ny, res);
  ck_compare("state_out", gs, rs, ns, res);
done:
  free(gy), free(gs), free(ry), free(rs);
  clmoe_tensor_destroy(&y), clmoe_tensor_destroy(&so);
  return st;
}

/* Backward: dx, dw, dstate_in against the reference's analytic gradient. */
static clmoe_status conv_check_backward(clmoe_ctx *ctx, uint64_t seed, const conv_data *d,
                                        clmoe_check_result *res)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor dy = {0}, dx = {0}, dw = {0}, ds = {0};
  double *hdy = NULL, *gx = NULL, *gw = NULL, *gs = NULL, *rx = NULL, *rw = NULL, *rs = NULL;
  const int64_t sx[3] = {d->B, d->T, d->C}, sw[2] = {d->C, d->W}, ss[3] = {d->N, d->W - 1, d->C};
  const size_t nx = (size_t)(d->B * d->T * d->C), nw = (size_t)(d->C * d->W);
  const size_t ns = (size_t)(d->N * (d->W - 1) * d->C);
  CK(ck_uniform(ctx, &dy, CLMOE_F32, 3, sx, seed + 10, -1.0f, 1.0f, &hdy));
  CK(clmoe_tensor_create(ctx, &dx, CLMOE_F32, 3, sx));
  CK(clmoe_tensor_create(ctx, &dw, CLMOE_F32, 2, sw));
  CK(clmoe_tensor_create(ctx, &ds, CLMOE_F32, 3, ss));
  CK(clmoe_tensor_fill(&dx, NAN)); /* every output element must be written */
  CK(clmoe_tensor_fill(&dw, NAN));
  CK(clmoe_tensor_fill(&ds, NAN));
  CK(clmoe_short_conv_backward(ctx, &d->x, &d->w, d->cu ? &d->cu_t : NULL, d->hs0 ? &d->s0 : NULL,
                               &dy, &dx, &dw, &ds));
  CK(ck_read(&dx, &gx));
  CK(ck_read(&dw, &gw));
  CK(ck_read(&ds, &gs));
  CK_ALLOC(rx, nx);
  CK_ALLOC(rw, nw);
  CK_ALLOC(rs, ns);
  ref_kda_shape s = conv_ref_shape(d);
  ref_short_conv_backward(&s, d->C, d->W, d->hx, d->hw, d->hs0, hdy, rx, rw, rs);
  ck_compare("dx", gx, rx, nx, res);
  ck_compare("dw", gw, rw, nw, res);
  ck_compare("dstate_in", gs, rs, ns, res);
done:
  free(hdy), free(gx), free(gw), free(gs), free(rx), free(rw), free(rs);
  clmoe_tensor_destroy(&dy), clmoe_tensor_destroy(&dx), clmoe_tensor_destroy(&dw);
  clmoe_tensor_destroy(&ds);
  return st;
}

/* Decoding: step t feeds token t of every sequence; the outputs must equal the full
 * forward's and the final state its state_out. */
static clmoe_status conv_check_step(clmoe_ctx *ctx, const conv_case *cc, const conv_data *d,
                                    clmoe_check_result *res)
{
  clmoe_status st = CLMOE_OK;
  const int64_t N = d->B, T = d->T, C = d->C;
  clmoe_tensor xt = {0}, yt = {0}, state = {0};
  float *hxt = NULL, *hyt = NULL;
  double *gy = NULL, *gs = NULL, *ry = NULL, *rs = NULL;
  const int64_t sr[2] = {N, C}, ss[3] = {N, d->W - 1, C};
  const size_t ny = (size_t)(N * T * C), ns = (size_t)(N * (d->W - 1) * C);
  CK(clmoe_tensor_create(ctx, &xt, cc->xdt, 2, sr));
  CK(clmoe_tensor_create(ctx, &yt, cc->ydt, 2, sr));
  CK(clmoe_tensor_create(ctx, &state, CLMOE_F32, 3, ss));
  if (d->hs0) CK(clmoe_tensor_copy(&state, &d->s0));
  else CK(clmoe_tensor_fill(&state, 0.0));
  CK_ALLOC(hxt, N * C);
  CK_ALLOC(hyt, N * C);
  CK_ALLOC(gy, ny);
  for (int64_t t = 0; t < T; t++) {
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++) hxt[n * C + c] = (float)d->hx[(n * T + t) * C + c];
    CK(clmoe_tensor_write_f32(&xt, hxt)); /* exact: the values are already stored ones */
    CK(clmoe_tensor_fill(&yt, NAN));
    CK(clmoe_short_conv_step(ctx, &xt, &d->w, &state, &yt));
    CK(clmoe_tensor_read_f32(&yt, hyt));
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++) gy[(n * T + t) * C + c] = hyt[n * C + c];
  }
  CK(ck_read(&state, &gs));
  CK_ALLOC(ry, ny);
  CK_ALLOC(rs, ns);
  ref_kda_shape s = conv_ref_shape(d);
  ref_short_conv(&s, C, d->W, d->hx, d->hw, d->hs0, ry, rs);
  ck_compare("y (steps)", gy, ry, ny, res);
  ck_compare("state (steps)", gs, rs, ns, res);
done:
  free(hxt), free(hyt), free(gy), free(gs), free(ry), free(rs);
  clmoe_tensor_destroy(&xt), clmoe_tensor_destroy(&yt), clmoe_tensor_destroy(&state);
  return st;
}

static clmoe_status check_conv(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                               const conv_case *cc)
{
  clmoe_status st = CLMOE_OK;
  conv_data d;
  CK(conv_setup(ctx, seed, cc, &d));
  res->tolerance = cc->ydt == CLMOE_BF16 ? TOL_BF16 : TOL_F32;
  if (cc->what & CONV_FWD) CK(conv_check_forward(ctx, cc, &d, res));
  if (cc->what & CONV_BWD) CK(conv_check_backward(ctx, seed, &d, res));
  if (cc->what & CONV_STEP) CK(conv_check_step(ctx, cc, &d, res));
done:
  conv_data_free(&d);
  return st;
}

#define F CLMOE_F32
#define H16 CLMOE_BF16
#define CONV_CHECK(fname, ...)                                                            \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)              \
  {                                                                                       \
    const conv_case cc = __VA_ARGS__;                                                     \
    return check_conv(c, s, r, &cc);                                                      \
  }
/* Lengths below W - 1 (a state reaching through whole sequences), an empty sequence, and
 * 161 tokens in all: the backward's chunks of 64 tokens start inside sequences (at 64, 3
 * tokens into one of 5, and at 128) and one ends 2 tokens before a sequence does. */
static const int32_t lens_mixed[] = {1, 2, 3, 0, 15, 40, 5, 30, 64, 1};
static const int32_t lens_w7[] = {3, 1, 9, 0, 6, 37, 2, 70, 4};

/*                          B  T       C    W  lens        nl  st x    y    what */
CONV_CHECK(conv_fwd,        {2, 50,     67,  4, NULL,       0,  0, F,   F,   CONV_FWD})
CONV_CHECK(conv_fwd_state,  {3, 37,     130, 4, NULL,       0,  1, F,   F,   CONV_FWD})
CONV_CHECK(conv_fwd_packed, {1, 0,      100, 4, lens_mixed, 10, 1, F,   F,   CONV_FWD})
CONV_CHECK(conv_fwd_bf16,   {2, 45,     64,  4, NULL,       0,  1, H16, H16, CONV_FWD})
CONV_CHECK(conv_fwd_bf16in, {1, 0,      33,  4, lens_mixed, 10, 1, H16, F,   CONV_FWD})
CONV_CHECK(conv_bwd,        {2, 100,    67,  4, NULL,       0,  0, F,   F,   CONV_BWD})
CONV_CHECK(conv_bwd_packed, {1, 0,      100, 4, lens_mixed, 10, 1, F,   F,   CONV_BWD})
CONV_CHECK(conv_bwd_bf16,   {2, 70,     40,  4, NULL,       0,  1, H16, F,   CONV_BWD})
CONV_CHECK(conv_bwd_long,   {1, 200000, 2,   4, NULL,       0,  1, F,   F,   CONV_BWD})
CONV_CHECK(conv_step,       {3, 20,     70,  4, NULL,       0,  1, F,   F,   CONV_STEP})
CONV_CHECK(conv_step_zero,  {2, 5,      17,  4, NULL,       0,  0, F,   F,   CONV_STEP})
CONV_CHECK(conv_step_bf16,  {2, 12,     64,  4, NULL,       0,  1, H16, H16, CONV_STEP})
CONV_CHECK(conv_w1,         {2, 30,     40,  1, NULL,       0,  1, F,   F,   CONV_FWD | CONV_BWD | CONV_STEP})
CONV_CHECK(conv_w1_packed,  {1, 0,      24,  1, lens_mixed, 10, 1, F,   F,   CONV_FWD | CONV_BWD})
CONV_CHECK(conv_w2,         {2, 30,     40,  2, NULL,       0,  1, F,   F,   CONV_FWD | CONV_BWD | CONV_STEP})
CONV_CHECK(conv_w2_packed,  {1, 0,      24,  2, lens_mixed, 10, 1, F,   F,   CONV_FWD | CONV_BWD})
CONV_CHECK(conv_w7_packed,  {1, 0,      19,  7, lens_w7,    9,  1, F,   F,   CONV_FWD | CONV_BWD})

const clmoe_check clmoe_checks_conv[] = {
    {"conv.forward", "forward, W = 4, 2 sequences of 50, C = 67, no state", conv_fwd},
    {"conv.forward.state", "forward from an input conv state, C = 130", conv_fwd_state},
    {"conv.forward.packed", "forward, packed lengths 1,2,3,0,15,40,5,30,64,1 with states", conv_fwd_packed},
    {"conv.forward.bf16", "forward, bf16 x and y", conv_fwd_bf16},
    {"conv.forward.bf16in", "forward, bf16 x, fp32 y, packed", conv_fwd_bf16in},
    {"conv.backward", "backward, W = 4, 2 sequences of 100, no state", conv_bwd},
    {"conv.backward.packed.state", "backward, packed lengths 1,2,3,0,15,40,5,30,64,1, dstate_in", conv_bwd_packed},
    {"conv.backward.bf16", "backward, bf16 x, with state", conv_bwd_bf16},
    {"conv.backward.long", "backward, 200000 tokens: dw summed over 3125 chunks", conv_bwd_long},
    {"conv.step", "decode steps of 3 sequences against the full forward and its state", conv_step},
    {"conv.step.zero", "decode steps from a zero state", conv_step_zero},
    {"conv.step.bf16", "decode steps, bf16 x and y", conv_step_bf16},
    {"conv.w1", "W = 1 (no state): forward, backward, decode steps", conv_w1},
    {"conv.w1.packed", "W = 1, packed: forward, backward", conv_w1_packed},
    {"conv.w2", "W = 2: forward, backward, decode steps", conv_w2},
    {"conv.w2.packed", "W = 2, packed: forward, backward", conv_w2_packed},
    {"conv.w7.packed", "W = 7, packed lengths 3,1,9,0,6,37,2,70,4: forward, backward", conv_w7_packed},
    {NULL, NULL, NULL}};
