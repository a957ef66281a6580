/* A KDA layer's decode step for few sequences, the math of clmoe_kda_layer_step (lib/kda/
 * kda_layer.c) in fewer launches: the six products of x (q, k, v, beta, the gate's down
 * projection and the output gate or its down projection) in one GEMV launch, the gate's up
 * projection (and the output gate's, in the same launch when their ranks are equal), the
 * short convolutions with the recurrent step in one launch (lib/kda/kda_step.c), and W_o
 * adding into the residual stream with the output's gated head norm applied on the way in (a
 * launch of its own where a head is not a multiple of 8 wide or there are more than 64
 * heads): 4 launches and no CLBlast call, where clmoe_kda_layer_step makes 9 or 10 products
 * through CLBlast and 7 more launches. */
#include "generate_internal.h"

#include "clmoe/kda.h"

#define GEN_GEMV_GROUPS 64 /* groups of the GEMV's gated group norm (lib/ops/ops_gemv.c) */

int clmoe__gen_kda_gemv_ok(const clmoe_kda_layer *l)
{
  const clmoe_tensor *w[] = {&l->w_q, &l->w_k, &l->w_v, &l->w_beta, &l->w_a_down, &l->w_a_up, &l->w_o};
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
    if (!clmoe__ops_gemv_ok(w[i])) return 0;
  if (l->out_gate_rank > 0) return clmoe__ops_gemv_ok(&l->w_g_down) && clmoe__ops_gemv_ok(&l->w_g_up);
  return clmoe__ops_gemv_ok(&l->w_g);
}

/* The step's temporaries, each [N, cols]. */
enum { KS_XQ, KS_XK, KS_XV, KS_BETA, KS_ZA, KS_Z, KS_GD, KS_GS, KS_O, KS_M, KS_N };

clmoe_status clmoe__gen_kda_step(clmoe_ctx *ctx, const clmoe_kda_layer *l, const clmoe_tensor *x,
                                 const clmoe_tensor *x_gain, float x_eps, clmoe_kda_layer_state *state,
                                 int accumulate, clmoe_tensor *y)
{
  const int64_t N = x->shape[0], H = l->H, D = l->D, HD = H * D, r = l->out_gate_rank;
  const int64_t cols[KS_N] = {HD, HD, HD, H, l->rank, HD, r > 0 ? r : 1, HD, HD, HD};
  /* the two up projections' inputs in one buffer, so that one launch reads both when their
   * ranks are equal */
  const int64_t rg = r > 0 ? r : 1, zg_n = N * (l->rank + rg);
  const int one_up = r == l->rank;
  clmoe_tensor t[KS_N] = {{0}}, zg = {0};
  clmoe_status st = clmoe_tensor_create(ctx, &zg, CLMOE_F32, 1, &zg_n);
  for (int i = 0; i < KS_N && st == CLMOE_OK; i++)
    st = i == KS_ZA   ? clmoe_tensor_view(&zg, &t[i], 2, (int64_t[]){N, l->rank}, 0)
         : i == KS_GD ? clmoe_tensor_view(&zg, &t[i], 2, (int64_t[]){N, rg}, N * l->rank)
                      : clmoe_tensor_create(ctx, &t[i], CLMOE_F32, 2, (int64_t[]){N, cols[i]});
  if (st != CLMOE_OK) goto done;
  {
    const clmoe__gemv_slot xs[6] = {{&l->w_q, &t[KS_XQ], NULL}, {&l->w_k, &t[KS_XK], NULL}, {&l->w_v, &t[KS_XV], NULL},
                                 {&l->w_beta, &t[KS_BETA], NULL}, {&l->w_a_down, &t[KS_ZA], NULL},
                                 {r > 0 ? &l->w_g_down : &l->w_g, r > 0 ? &t[KS_GD] : &t[KS_GS], NULL}};
    CLMOE_TRY_GOTO(st, clmoe__ops_gemv(ctx, "generate (gemv)", x, NULL, x_gain, x_gain ? 1 : 0, 0,
                                       x_gain ? x_eps : 0.0f, 0, 6, xs), done);
  }
  {
    const clmoe__gemv_slot up[2] = {{&l->w_a_up, &t[KS_Z], NULL}, {&l->w_g_up, &t[KS_GS], &t[KS_GD]}};
    CLMOE_TRY_GOTO(st, clmoe__ops_gemv(ctx, "generate (gemv)", &t[KS_ZA], NULL, NULL, 0, 0, 0.0f, 0, one_up ? 2 : 1,
                                       up), done);
    if (r > 0 && !one_up) {
      const clmoe__gemv_slot gup = {&l->w_g_up, &t[KS_GS], NULL};
      CLMOE_TRY_GOTO(st, clmoe__ops_gemv(ctx, "generate (gemv)", &t[KS_GD], NULL, NULL, 0, 0, 0.0f, 0, 1, &gup),
                     done);
    }
  }
  {
    const clmoe_tensor *const cx[3] = {&t[KS_XQ], &t[KS_XK], &t[KS_XV]};
    CLMOE_TRY_GOTO(st, clmoe__kda_conv_step(ctx, l, cx, &t[KS_Z], &t[KS_BETA], state, &t[KS_O]), done);
  }
  {
    const clmoe__gemv_slot wo = {&l->w_o, y, NULL};
    if (D % 8 == 0 && H <= GEN_GEMV_GROUPS) { /* the gated head norm inside W_o's launch */
      st = clmoe__ops_gemv(ctx, "generate (gemv)", &t[KS_O], &t[KS_GS], &l->o_gain, 4, (int)D, l->norm_eps,
                           accumulate, 1, &wo);
    } else {
      CLMOE_TRY_GOTO(st, clmoe__gen_kda_out_gate(ctx, &t[KS_O], &t[KS_GS], &l->o_gain, l->norm_eps, H, &t[KS_M]),
                     done);
      st = clmoe__ops_gemv(ctx, "generate (gemv)", &t[KS_M], NULL, NULL, 0, 0, 0.0f, accumulate, 1, &wo);
    }
  }
done:
  for (int i = 0; i < KS_N; i++) clmoe_tensor_destroy(&t[i]);
  clmoe_tensor_destroy(&zg);
  return st;
}

clmoe_status clmoe_gen_kda_step(clmoe_ctx *ctx, const clmoe_kda_layer *layer, const clmoe_tensor *x,
                                clmoe_kda_layer_state *state, clmoe_tensor *y)
{
  if (!ctx || !layer || !x || !state || !y)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_gen_kda_step: every argument is required");
  if (!clmoe__gen_kda_gemv_ok(layer))
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "clmoe_gen_kda_step: the layer's matrices must be fp32 whole tensors");
  return clmoe__gen_kda_step(ctx, layer, x, NULL, 0.0f, state, 0, y);
}
