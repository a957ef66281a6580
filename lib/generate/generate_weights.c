/* Inference weights in bf16 (include/clmoe/generate.h): a random model's matrices made bf16
 * from the start (clmoe_gen_random_model), or a loaded fp32 model's rounded to bf16 in place
 * (clmoe_gen_set_weights), each fp32 tensor freed once its copy is made. Decode
 * steps read them as bf16 (the GEMV of lib/ops/ops_gemv.c, the MoE decode kernels, MLA's
 * per-head products) with fp32 sums. A pass that takes another path (prefill, or a step of
 * more sequences than the GEMV takes) runs, where clmoe__gen_tile says so, on the tile GEMM
 * with the bf16 matrices as they are (bf16-rounded rows, fp32 sums; only MLA's W_ukv is
 * widened, gen_widen_mla_ukv); elsewhere it widens one layer's other matrices to fp32
 * temporaries for the call (gen_widen_*) and a MoE layer's routed experts are read by the
 * grouped kernels that widen the bf16 stacks as they load them (clmoe_moe_forward_infer), so
 * that path computes bf16 weights times fp32 activations.
 * Also the public face of the few-token GEMV (clmoe_gen_gemv), for checks and benchmarks. */
#include "generate_internal.h"

#include "clmoe/tile.h"
#include "tile/tile_internal.h" /* clmoe__infer_tile */

clmoe_dtype clmoe__gen_auto_weights(clmoe_ctx *ctx)
{
  return clmoe_ctx_tile_impl(ctx) == CLMOE_TILE_PORTABLE ? CLMOE_F32 : CLMOE_BF16;
}

clmoe_status clmoe_gen_set_weights(clmoe_model *m, clmoe_dtype dtype)
{
  static const char op[] = "clmoe_gen_set_weights";
  if (!m) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: model is NULL", op);
  if (dtype != CLMOE_F32 && dtype != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: weights must be fp32 or bf16", op);
  if (dtype == CLMOE_F32) {
    if (clmoe_gen_weights(m) == CLMOE_BF16)
      return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the model's weights are bf16 already (load it again "
                          "for fp32)", op);
    return CLMOE_OK;
  }
  if (!m->inference_only)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the model is not an inference model (clmoe_gen_load)", op);
  clmoe_params *ps = clmoe_model_params(m);
  for (int i = 0; i < ps->n; i++) {
    clmoe_param *p = &ps->p[i];
    if (!clmoe__param_is_weight_matrix(p)) continue;
    clmoe_tensor b = {0};
    CLMOE_TRY(clmoe_tensor_create(m->ctx, &b, CLMOE_BF16, p->value->ndim, p->value->shape));
    const clmoe_status st = clmoe_tensor_copy(&b, p->value); /* rounds to nearest even */
    if (st != CLMOE_OK) {
      clmoe_tensor_destroy(&b);
      return st;
    }
    clmoe_tensor_destroy(p->value); /* the queue is in order: the copy has read it first */
    *p->value = b;
  }
  return CLMOE_OK;
}

/* The head is one of the matrices, and every one is converted when it is. */
clmoe_dtype clmoe_gen_weights(const clmoe_model *m) { return m && m->head.dtype == CLMOE_BF16 ? CLMOE_BF16 : CLMOE_F32; }

clmoe_status clmoe_gen_random_model(clmoe_ctx *ctx, const clmoe_config *cfg, uint64_t seed, clmoe_dtype dtype,
                                    clmoe_model **model)
{
  static const char op[] = "clmoe_gen_random_model";
  if (!model) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: model is NULL", op);
  *model = NULL;
  if (!ctx || !cfg || (dtype != CLMOE_F32 && dtype != CLMOE_BF16))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: ctx, cfg and fp32 or bf16 weights are required", op);
  clmoe_model *m = NULL;
  /* The matrices are bf16 tensors from their creation, filled directly by the
   * initialisation: no fp32 buffer of them is ever allocated. */
  CLMOE_TRY(clmoe__model_create_inference(ctx, cfg, NULL, NULL, dtype, &m));
  const clmoe_status st = clmoe_model_init(m, seed);
  if (st != CLMOE_OK) {
    clmoe_model_destroy(m);
    return st;
  }
  *model = m;
  return CLMOE_OK;
}

/* ---- fp32 temporaries of one layer's bf16 matrices ---- */

/* *t = a fp32 copy of *t, remembered in w for gen_widen_release; fp32 tensors stay. */
static clmoe_status widen(clmoe_ctx *ctx, clmoe_tensor *t, gen_widened *w)
{
  if (!t->buf || t->dtype != CLMOE_BF16) return CLMOE_OK;
  if (w->n == GEN_WIDEN_MAX) return clmoe__error(CLMOE_ERR_INTERNAL, "generate: too many matrices to widen");
  clmoe_tensor *f = &w->t[w->n];
  CLMOE_TRY(clmoe_tensor_create(ctx, f, CLMOE_F32, t->ndim, t->shape));
  w->n++;
  CLMOE_TRY(clmoe_tensor_copy(f, t));
  *t = *f;
  return CLMOE_OK;
}

void clmoe__gen_widen_release(gen_widened *w)
{
  for (int i = 0; i < w->n; i++) clmoe_tensor_destroy(&w->t[i]);
  w->n = 0;
}

clmoe_status clmoe__gen_widen_kda(clmoe_ctx *ctx, const clmoe_kda_layer *l, clmoe_kda_layer *tmp, gen_widened *w)
{
  *tmp = *l;
  clmoe_tensor *t[CLMOE_KDA_LAYER_PARAMS];
  const int n = clmoe_kda_layer_params(tmp, t, NULL, NULL);
  for (int i = 0; i < n; i++) CLMOE_TRY(widen(ctx, t[i], w));
  return CLMOE_OK;
}

clmoe_status clmoe__gen_widen_mla(clmoe_ctx *ctx, const clmoe_mla_weights *l, clmoe_mla_weights *tmp,
                                  gen_widened *w)
{
  *tmp = *l;
  for (int i = 0; i < CLMOE_MLA_NWEIGHTS; i++) CLMOE_TRY(widen(ctx, clmoe_mla_weight_at(tmp, i), w));
  return CLMOE_OK;
}

clmoe_status clmoe__gen_widen_mla_ukv(clmoe_ctx *ctx, const clmoe_mla_weights *l, clmoe_mla_weights *tmp,
                                      gen_widened *w)
{
  *tmp = *l;
  return widen(ctx, &tmp->w_ukv, w);
}

int clmoe__gen_tile(clmoe_ctx *ctx, const clmoe_model *m)
{
  return clmoe_gen_weights(m) == CLMOE_BF16 && clmoe__infer_tile(ctx);
}

clmoe_status clmoe__gen_widen_ffn(clmoe_ctx *ctx, const clmoe_situ_ffn *f, clmoe_situ_ffn *tmp, gen_widened *w)
{
  *tmp = *f;
  CLMOE_TRY(widen(ctx, &tmp->w_gate, w));
  CLMOE_TRY(widen(ctx, &tmp->w_upp, w));
  return widen(ctx, &tmp->w_dn, w);
}

/* The routed expert stacks stay bf16: clmoe_moe_forward_infer reads them as they are (their
 * fp32 copies would be 4 bytes a parameter of the layer: 7.2 GB at Kimi-Linear-48B's). */
clmoe_status clmoe__gen_widen_moe(clmoe_ctx *ctx, const clmoe_moe_layer *l, clmoe_moe_layer *tmp, gen_widened *w)
{
  *tmp = *l;
  clmoe_tensor *t[] = {&tmp->w_router, &tmp->w_down, &tmp->w_up};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) CLMOE_TRY(widen(ctx, t[i], w));
  return clmoe__gen_widen_ffn(ctx, &l->shared, &tmp->shared, w);
}

clmoe_status clmoe__gen_widen_ep(clmoe_ctx *ctx, const clmoe_moe_ep_layer *l, clmoe_moe_ep_layer *tmp, gen_widened *w)
{
  *tmp = *l; /* the tables and the map are shared, not copied; the expert stacks stay bf16 */
  return clmoe__gen_widen_moe(ctx, &l->dense, &tmp->dense, w);
}

clmoe_status clmoe__gen_widen_head(clmoe_ctx *ctx, const clmoe_tensor *head, clmoe_tensor *tmp, gen_widened *w)
{
  *tmp = *head;
  return widen(ctx, tmp, w);
}

/* ---- the GEMV, public ---- */

clmoe_status clmoe_gen_gemv(clmoe_ctx *ctx, const clmoe_tensor *x, const clmoe_tensor *x2, const clmoe_tensor *gain,
                            clmoe_gen_gemv_input in, int glu, float eps, int accumulate, int n,
                            const clmoe_tensor *const *w, clmoe_tensor *const *y)
{
  static const char op[] = "clmoe_gen_gemv";
  if (!ctx || !x || !w || !y || n < 1 || n > CLMOE__GEMV_SLOTS)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: ctx, x and 1 to %d matrices with outputs are required", op,
                        CLMOE__GEMV_SLOTS);
  const int grouped = in == CLMOE_GEN_GEMV_GROUP_NORM_GATE;
  const int need_x2 = in == CLMOE_GEN_GEMV_GLU || in == CLMOE_GEN_GEMV_GATE || grouped;
  const int need_gain = in == CLMOE_GEN_GEMV_RMSNORM || grouped;
  if ((int)in < 0 || (int)in > 4 || (need_x2 && !x2) || (need_gain && !gain))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: input form %d lacks its second input or gain", op, (int)in);
  clmoe__gemv_slot sl[CLMOE__GEMV_SLOTS];
  for (int i = 0; i < n; i++) {
    if (!w[i] || !y[i] || !clmoe__ops_gemv_ok(w[i]) || w[i]->shape[1] != w[0]->shape[1])
      return clmoe__error(CLMOE_ERR_SHAPE, "%s: matrix %d must be a 2-D fp32 or bf16 tensor with x's width", op, i);
    sl[i] = (clmoe__gemv_slot){w[i], y[i], NULL};
  }
  const int64_t K = w[0]->shape[1];
  const int64_t G = grouped ? glu : K; /* the gain's length */
  if (x->ndim != 2 || x->shape[1] != K || (x2 && clmoe_tensor_numel(x2) != clmoe_tensor_numel(x)) ||
      (gain && (gain->ndim != 1 || gain->shape[0] != G)))
    return clmoe__error(CLMOE_ERR_SHAPE, "%s: x (and x2) must be [T, %lld], the gain [%lld]", op, (long long)K,
                        (long long)G);
  if (x2) CLMOE_TRY(clmoe__want(x2, CLMOE_F32, op, "x2"));
  if (gain) CLMOE_TRY(clmoe__want(gain, CLMOE_F32, op, "gain"));
  return clmoe__ops_gemv(ctx, op, x, x2, gain, (int)in, glu, eps, accumulate != 0, n, sl);
}
