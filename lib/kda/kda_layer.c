/* The KDA token mixer: forward, backward, decode step (include/clmoe/kda_layer.h). Composition of
 * GEMMs (CLBlast), the short convolution, KDA, RMSNorm and pointwise ops. The parameters'
 * list, creation and initialisation: kda_layer_params.c. */
#include "runtime/internal.h"
#include "kda_internal.h"
#include "clmoe/ops.h"

#include <stdlib.h>
#include <string.h>
#include "clmoe/kda_layer.h"
#include "clmoe/conv.h"

void clmoe_kda_layer_cache_destroy(clmoe_kda_layer_cache *c)
{
  clmoe_tensor *t[] = {&c->xq, &c->xk, &c->xv, &c->q, &c->k, &c->v, &c->za, &c->z, &c->beta, &c->o,
                       &c->rstd, &c->on, &c->gs, &c->gd};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) clmoe_tensor_destroy(t[i]);
  clmoe__kda_kept_free(c->kda_kept);
  c->kda_kept = NULL;
}

clmoe_status clmoe_kda_layer_state_create(clmoe_ctx *ctx, const clmoe_kda_layer *l, int64_t nseq,
                                          clmoe_kda_layer_state *s)
{
  memset(s, 0, sizeof *s);
  const int64_t sk[4] = {nseq, l->H, l->D, l->D}, sc[3] = {nseq, l->conv_width - 1, l->H * l->D};
  clmoe_status st = clmoe_tensor_zeros(ctx, &s->kda, CLMOE_F32, 4, sk);
  if (st == CLMOE_OK) st = clmoe_tensor_zeros(ctx, &s->conv_q, CLMOE_F32, 3, sc);
  if (st == CLMOE_OK) st = clmoe_tensor_zeros(ctx, &s->conv_k, CLMOE_F32, 3, sc);
  if (st == CLMOE_OK) st = clmoe_tensor_zeros(ctx, &s->conv_v, CLMOE_F32, 3, sc);
  if (st != CLMOE_OK) clmoe_kda_layer_state_destroy(s);
  return st;
}

void clmoe_kda_layer_state_destroy(clmoe_kda_layer_state *s)
{
  clmoe_tensor_destroy(&s->kda);
  clmoe_tensor_destroy(&s->conv_q);
  clmoe_tensor_destroy(&s->conv_k);
  clmoe_tensor_destroy(&s->conv_v);
}

/* The backward of Y = X W^T (weights [out, in], PyTorch's Linear layout): dW += dY^T X and,
 * when dX is not NULL, dX += dY W. */
static clmoe_status proj_back(clmoe_ctx *ctx, const clmoe_tensor *X, const clmoe_tensor *W,
                              const clmoe_tensor *dY, clmoe_tensor *dW, clmoe_tensor *dX)
{
  return clmoe_linear_backward(ctx, X, W, dY, dX, dW, NULL,
                               CLMOE_LINEAR_ACC_DX | CLMOE_LINEAR_ACC_DW);
}

static clmoe_status check_x(const char *op, const clmoe_kda_layer *l, const clmoe_tensor *x,
                            const clmoe_tensor *y)
{
  char desc[96];
  if (!x || x->ndim != 3 || x->shape[2] != l->d)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: x is %s, expected [B, T, %lld]", op,
                        x ? clmoe_tensor_describe(x, desc, sizeof desc) : "NULL", (long long)l->d);
  /* x feeds only the projections: bf16 storage is taken as it is (a bf16 step's normed input) */
  CLMOE_TRY(clmoe__want(x, x->dtype == CLMOE_BF16 ? CLMOE_BF16 : CLMOE_F32, op, "x"));
  return clmoe__want_shape(y, op, "y", 0, 3, x->shape[0], x->shape[1], l->d, 0);
}

/* The storage of an activation that feeds only the product with W: bf16 when W is a bf16 copy
 * (a bf16 training step; the product would round it anyway, so the producer rounds it once
 * and the backward's dW reads it as it is), else fp32. */
static clmoe_dtype operand_dtype(const clmoe_tensor *W)
{
  return W->dtype == CLMOE_BF16 ? CLMOE_BF16 : CLMOE_F32;
}

/* The cache tensors for N tokens; za (the decay gate's low-rank code) and gd (the output
 * gate's) feed only W_a_up and W_g_up: operand_dtype. */
static clmoe_status cache_create(clmoe_ctx *ctx, const clmoe_kda_layer *l, int64_t N, clmoe_kda_layer_cache *c)
{
  memset(c, 0, sizeof *c);
  const int64_t HD = l->H * l->D;
  const clmoe_dtype F = CLMOE_F32;
  struct { clmoe_tensor *t; int64_t cols; clmoe_dtype dt; } list[] = {
      {&c->xq, HD, F}, {&c->xk, HD, F}, {&c->xv, HD, F}, {&c->q, HD, F}, {&c->k, HD, F}, {&c->v, HD, F},
      {&c->za, l->rank, operand_dtype(&l->w_a_up)}, {&c->z, HD, F}, {&c->beta, l->H, F}, {&c->o, HD, F},
      {&c->on, HD, F}, {&c->gs, HD, F}};
  for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
    clmoe_status st = clmoe_tensor_create(ctx, list[i].t, list[i].dt, 2, (int64_t[]){N, list[i].cols});
    if (st != CLMOE_OK) {
      clmoe_kda_layer_cache_destroy(c);
      return st;
    }
  }
  clmoe_status st = clmoe_tensor_create(ctx, &c->rstd, CLMOE_F32, 1, (int64_t[]){N * l->H});
  if (st == CLMOE_OK && l->out_gate_rank > 0)
    st = clmoe_tensor_create(ctx, &c->gd, operand_dtype(&l->w_g_up), 2, (int64_t[]){N, l->out_gate_rank});
  if (st != CLMOE_OK) clmoe_kda_layer_cache_destroy(c);
  return st;
}

/* After KDA: on = RMSNorm_head(o), gs = sigmoid(x W_g) (low rank: sigmoid((x W_g_down) W_g_up)),
 * y = (gs * on) W_o. Kimi Linear's o_norm computes the same: weight [D] * RMSNorm over the head's
 * D channels (eps the model's rms_norm_eps) * sigmoid(gate), in fp32. */
static clmoe_status output_gate(clmoe_ctx *ctx, const clmoe_kda_layer *l, const clmoe_tensor *x2,
                                clmoe_kda_layer_cache *c, clmoe_tensor *y2, int64_t N)
{
  clmoe_tensor o_rows, on_rows, m = {0};
  const int64_t HD = l->H * l->D;
  CLMOE_TRY(clmoe_tensor_view2d(&c->o, &o_rows, N * l->H, l->D));
  CLMOE_TRY(clmoe_tensor_view2d(&c->on, &on_rows, N * l->H, l->D));
  CLMOE_TRY(clmoe_rmsnorm(ctx, &o_rows, &l->o_gain, l->norm_eps, &on_rows, &c->rstd));
  if (l->out_gate_rank > 0) {
    CLMOE_TRY(clmoe_linear(ctx, x2, &l->w_g_down, NULL, &c->gd));
    CLMOE_TRY(clmoe_linear(ctx, &c->gd, &l->w_g_up, NULL, &c->gs));
  } else {
    CLMOE_TRY(clmoe_linear(ctx, x2, &l->w_g, NULL, &c->gs));
  }
  CLMOE_TRY(clmoe_sigmoid(ctx, &c->gs, &c->gs));
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m, operand_dtype(&l->w_o), 2, (int64_t[]){N, HD}), done);
  CLMOE_TRY_GOTO(st, clmoe_mul(ctx, &c->gs, &c->on, &m), done);
  st = clmoe_linear(ctx, &m, &l->w_o, NULL, y2);
done:
  clmoe_tensor_destroy(&m);
  return st;
}

clmoe_status clmoe_kda_layer_forward(clmoe_ctx *ctx, const clmoe_kda_layer *l, const clmoe_tensor *x,
                                     const clmoe_tensor *cu_seqlens, clmoe_tensor *y,
                                     clmoe_kda_layer_cache *cache, clmoe_kda_layer_state *state)
{
  const char *op = "clmoe_kda_layer_forward";
  CLMOE_TRY(check_x(op, l, x, y));
  const int64_t B = x->shape[0], T = x->shape[1], N = B * T, H = l->H, D = l->D, HD = H * D;
  clmoe_kda_layer_cache local;
  clmoe_kda_layer_cache *c = cache ? cache : &local;
  CLMOE_TRY(cache_create(ctx, l, N, c));
  clmoe_status st;
  clmoe_tensor x2, y2, a3, b3, q4, k4, v4, z4, beta3, o4;
  const int64_t s3[3] = {B, T, HD}, s4[4] = {B, T, H, D}, sb[3] = {B, T, H};
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(x, &x2, N, l->d), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(y, &y2, N, l->d), done);
  /* q, k, v: projection, then the causal convolution with SiLU (state: prefill). */
  const clmoe_tensor *W[3] = {&l->w_q, &l->w_k, &l->w_v}, *cw[3] = {&l->conv_q, &l->conv_k, &l->conv_v};
  clmoe_tensor *pre[3] = {&c->xq, &c->xk, &c->xv}, *post[3] = {&c->q, &c->k, &c->v};
  clmoe_tensor *cst[3] = {state ? &state->conv_q : NULL, state ? &state->conv_k : NULL, state ? &state->conv_v : NULL};
  for (int j = 0; j < 3; j++) {
    CLMOE_TRY_GOTO(st, clmoe_linear(ctx, &x2, W[j], NULL, pre[j]), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(pre[j], &a3, 3, s3, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(post[j], &b3, 3, s3, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_short_conv(ctx, &a3, cw[j], cu_seqlens, cst[j], &b3, cst[j]), done);
  }
  /* The decay gate's logits through the low-rank pair, and beta. */
  CLMOE_TRY_GOTO(st, clmoe_linear(ctx, &x2, &l->w_a_down, NULL, &c->za), done);
  CLMOE_TRY_GOTO(st, clmoe_linear(ctx, &c->za, &l->w_a_up, NULL, &c->z), done);
  CLMOE_TRY_GOTO(st, clmoe_linear(ctx, &x2, &l->w_beta, NULL, &c->beta), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->q, &q4, 4, s4, 0), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->k, &k4, 4, s4, 0), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->v, &v4, 4, s4, 0), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->z, &z4, 4, s4, 0), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->beta, &beta3, 3, sb, 0), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->o, &o4, 4, s4, 0), done);
  {
    clmoe_kda_inputs in = {&q4, &k4, &v4, &z4, &beta3, &l->A_log, &l->dt_bias,
                           state ? &state->kda : NULL, cu_seqlens};
    /* With a state the op reads it first and overwrites it with the final one. For a
     * backward (cache) the tile path keeps its per-chunk factors (about 1.9 KB per token and
     * head at D = 128; CLMOE_KDA_KEEP=0: none), so that the backward skips recomputing them. */
    if (cache && !c->kda_kept) c->kda_kept = clmoe__kda_kept_new(ctx);
    CLMOE_TRY_GOTO(st, clmoe__kda_forward_kept(ctx, &l->opts, &in, &o4, state ? &state->kda : NULL,
                                               clmoe__kda_kept_saved(c->kda_kept)), done);
  }
  st = output_gate(ctx, l, &x2, c, &y2, N);
done:
  if (!cache || st != CLMOE_OK) clmoe_kda_layer_cache_destroy(c);
  return st;
}

/* t += the contents of a temporary of the same size. */
static clmoe_status add_into(clmoe_ctx *ctx, clmoe_tensor *t, const clmoe_tensor *tmp)
{
  return clmoe_axpy(ctx, 1.0f, tmp, t);
}

clmoe_status clmoe_kda_layer_backward(clmoe_ctx *ctx, const clmoe_kda_layer *l, const clmoe_tensor *x,
                                      const clmoe_tensor *cu_seqlens, const clmoe_kda_layer_cache *c,
                                      const clmoe_tensor *dy, clmoe_kda_layer *g, clmoe_tensor *dx)
{
  const char *op = "clmoe_kda_layer_backward";
  CLMOE_TRY(check_x(op, l, x, dy));
  CLMOE_TRY(clmoe__want_shape(dx, op, "dx", 0, 3, x->shape[0], x->shape[1], l->d, 0));
  const int64_t B = x->shape[0], T = x->shape[1], N = B * T, H = l->H, D = l->D, HD = H * D;
  clmoe_tensor x2, dx2, dy2, rows, drows, on_rows;
  clmoe_tensor dm = {0}, m = {0}, don = {0}, dO = {0}, dq = {0}, dk = {0}, dv = {0}, dz = {0}, dbeta = {0};
  clmoe_tensor dza = {0}, dpre = {0}, small = {0}, dA = {0}, ddt = {0}, dconv = {0}, dgd = {0}, m16 = {0};
  const int64_t s3[3] = {B, T, HD}, s4[4] = {B, T, H, D}, sb[3] = {B, T, H};
  clmoe_status st;
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(x, &x2, N, l->d), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(dx, &dx2, N, l->d), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(dy, &dy2, N, l->d), done);
  clmoe_tensor *nd[] = {&dm, &m, &don, &dO, &dq, &dk, &dv, &dz, &dpre};
  for (size_t i = 0; i < sizeof nd / sizeof nd[0]; i++)
    CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, nd[i], CLMOE_F32, 2, (int64_t[]){N, HD}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dbeta, CLMOE_F32, 2, (int64_t[]){N, H}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dza, CLMOE_F32, 2, (int64_t[]){N, l->rank}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &small, CLMOE_F32, 1, (int64_t[]){D}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dA, CLMOE_F32, 1, (int64_t[]){H}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &ddt, CLMOE_F32, 2, (int64_t[]){H, D}), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &dconv, CLMOE_F32, 2, (int64_t[]){HD, l->conv_width}), done);
  /* y = m W_o with m = gs * on, recomputed in W_o's operand dtype (m [N, HD] fp32 is dgs below) */
  CLMOE_TRY_GOTO(st, clmoe_tensor_create(ctx, &m16, operand_dtype(&l->w_o), 2, (int64_t[]){N, HD}), done);
  CLMOE_TRY_GOTO(st, clmoe_mul(ctx, &c->gs, &c->on, &m16), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_fill(&dm, 0.0), done);
  CLMOE_TRY_GOTO(st, proj_back(ctx, &m16, &l->w_o, &dy2, &g->w_o, &dm), done);
  clmoe_tensor_destroy(&m16);
  /* m = gs * on; gs = sigmoid(x W_g) */
  CLMOE_TRY_GOTO(st, clmoe_mul_backward(ctx, &dm, &c->gs, &c->on, &m /* dgs */, &don), done);
  CLMOE_TRY_GOTO(st, clmoe_sigmoid_backward(ctx, &c->gs, &m, &m), done);
  if (l->out_gate_rank > 0) { /* gate logits = (x W_g_down) W_g_up */
    if (g->out_gate_rank != l->out_gate_rank) {
      st = clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: grads have out_gate_rank %lld, the layer %lld", op,
                        (long long)g->out_gate_rank, (long long)l->out_gate_rank);
      goto done;
    }
    CLMOE_TRY_GOTO(st, clmoe_tensor_zeros(ctx, &dgd, CLMOE_F32, 2, (int64_t[]){N, l->out_gate_rank}), done);
    CLMOE_TRY_GOTO(st, proj_back(ctx, &c->gd, &l->w_g_up, &m, &g->w_g_up, &dgd), done);
    CLMOE_TRY_GOTO(st, proj_back(ctx, &x2, &l->w_g_down, &dgd, &g->w_g_down, &dx2), done);
  } else {
    CLMOE_TRY_GOTO(st, proj_back(ctx, &x2, &l->w_g, &m, &g->w_g, &dx2), done);
  }
  /* on = RMSNorm_head(o) */
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(&c->o, &rows, N * H, D), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(&dO, &drows, N * H, D), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_view2d(&don, &on_rows, N * H, D), done);
  CLMOE_TRY_GOTO(st, clmoe_rmsnorm_backward(ctx, &rows, &l->o_gain, &c->rstd, &on_rows, &drows, &small), done);
  CLMOE_TRY_GOTO(st, add_into(ctx, &g->o_gain, &small), done);
  /* KDA */
  {
    clmoe_tensor q4, k4, v4, z4, b3, dO4, dq4, dk4, dv4, dz4, db3;
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->q, &q4, 4, s4, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->k, &k4, 4, s4, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->v, &v4, 4, s4, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->z, &z4, 4, s4, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c->beta, &b3, 3, sb, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&dO, &dO4, 4, s4, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&dq, &dq4, 4, s4, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&dk, &dk4, 4, s4, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&dv, &dv4, 4, s4, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&dz, &dz4, 4, s4, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&dbeta, &db3, 3, sb, 0), done);
    clmoe_kda_inputs in = {&q4, &k4, &v4, &z4, &b3, &l->A_log, &l->dt_bias, NULL, cu_seqlens};
    clmoe_kda_grads kg = {&dq4, &dk4, &dv4, &dz4, &db3, &dA, &ddt, NULL};
    CLMOE_TRY_GOTO(st, clmoe__kda_backward_kept(ctx, &l->opts, &in, &dO4, NULL, &kg,
                                                clmoe__kda_kept_saved(c->kda_kept)), done);
  }
  CLMOE_TRY_GOTO(st, add_into(ctx, &g->A_log, &dA), done);
  CLMOE_TRY_GOTO(st, add_into(ctx, &g->dt_bias, &ddt), done);
  /* beta = x W_beta; z = (x W_a_down) W_a_up */
  CLMOE_TRY_GOTO(st, proj_back(ctx, &x2, &l->w_beta, &dbeta, &g->w_beta, &dx2), done);
  CLMOE_TRY_GOTO(st, clmoe_tensor_fill(&dza, 0.0), done);
  CLMOE_TRY_GOTO(st, proj_back(ctx, &c->za, &l->w_a_up, &dz, &g->w_a_up, &dza), done);
  CLMOE_TRY_GOTO(st, proj_back(ctx, &x2, &l->w_a_down, &dza, &g->w_a_down, &dx2), done);
  /* q, k, v: the convolutions, then the projections. */
  {
    const clmoe_tensor *W[3] = {&l->w_q, &l->w_k, &l->w_v}, *cw[3] = {&l->conv_q, &l->conv_k, &l->conv_v};
    const clmoe_tensor *pre[3] = {&c->xq, &c->xk, &c->xv};
    clmoe_tensor *dpost[3] = {&dq, &dk, &dv}, *gW[3] = {&g->w_q, &g->w_k, &g->w_v};
    clmoe_tensor *gc[3] = {&g->conv_q, &g->conv_k, &g->conv_v};
    for (int j = 0; j < 3; j++) {
      clmoe_tensor a3, d3, p3;
      CLMOE_TRY_GOTO(st, clmoe_tensor_view(pre[j], &a3, 3, s3, 0), done);
      CLMOE_TRY_GOTO(st, clmoe_tensor_view(dpost[j], &d3, 3, s3, 0), done);
      CLMOE_TRY_GOTO(st, clmoe_tensor_view(&dpre, &p3, 3, s3, 0), done);
      CLMOE_TRY_GOTO(st, clmoe_short_conv_backward(ctx, &a3, cw[j], cu_seqlens, NULL, &d3, &p3, &dconv, NULL), done);
      CLMOE_TRY_GOTO(st, add_into(ctx, gc[j], &dconv), done);
      CLMOE_TRY_GOTO(st, proj_back(ctx, &x2, W[j], &dpre, gW[j], &dx2), done);
    }
  }
done:;
  clmoe_tensor *all[] = {&dm, &m, &don, &dO, &dq, &dk, &dv, &dz, &dbeta, &dza, &dpre, &small, &dA, &ddt, &dconv, &dgd,
                         &m16};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  return st;
}

clmoe_status clmoe_kda_layer_step(clmoe_ctx *ctx, const clmoe_kda_layer *l, const clmoe_tensor *x,
                                  clmoe_kda_layer_state *state, clmoe_tensor *y)
{
  const char *op = "clmoe_kda_layer_step";
  char desc[96];
  if (!x || x->ndim != 2 || x->shape[1] != l->d)
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: x is %s, expected [Nseq, %lld]", op,
                        x ? clmoe_tensor_describe(x, desc, sizeof desc) : "NULL", (long long)l->d);
  const int64_t N = x->shape[0], H = l->H, D = l->D, HD = H * D;
  CLMOE_TRY(clmoe__want_shape(y, op, "y", 0, 2, N, l->d, 0, 0));
  clmoe_kda_layer_cache c;
  CLMOE_TRY(cache_create(ctx, l, N, &c));
  clmoe_status st;
  const clmoe_tensor *W[3] = {&l->w_q, &l->w_k, &l->w_v}, *cw[3] = {&l->conv_q, &l->conv_k, &l->conv_v};
  clmoe_tensor *pre[3] = {&c.xq, &c.xk, &c.xv}, *post[3] = {&c.q, &c.k, &c.v};
  clmoe_tensor *cst[3] = {&state->conv_q, &state->conv_k, &state->conv_v};
  for (int j = 0; j < 3; j++) {
    CLMOE_TRY_GOTO(st, clmoe_linear(ctx, x, W[j], NULL, pre[j]), done);
    CLMOE_TRY_GOTO(st, clmoe_short_conv_step(ctx, pre[j], cw[j], cst[j], post[j]), done);
  }
  CLMOE_TRY_GOTO(st, clmoe_linear(ctx, x, &l->w_a_down, NULL, &c.za), done);
  CLMOE_TRY_GOTO(st, clmoe_linear(ctx, &c.za, &l->w_a_up, NULL, &c.z), done);
  CLMOE_TRY_GOTO(st, clmoe_linear(ctx, x, &l->w_beta, NULL, &c.beta), done);
  {
    clmoe_tensor q3, k3, v3, z3, o3;
    const int64_t s3[3] = {N, H, D};
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c.q, &q3, 3, s3, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c.k, &k3, 3, s3, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c.v, &v3, 3, s3, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c.z, &z3, 3, s3, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_tensor_view(&c.o, &o3, 3, s3, 0), done);
    CLMOE_TRY_GOTO(st, clmoe_kda_decode_step(ctx, &l->opts, &q3, &k3, &v3, &z3, &c.beta, &l->A_log,
                                             &l->dt_bias, &state->kda, &o3), done);
  }
  st = output_gate(ctx, l, x, &c, y, N);
done:
  clmoe_kda_layer_cache_destroy(&c);
  (void)HD;
  return st;
}
