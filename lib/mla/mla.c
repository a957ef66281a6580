/* Gated MLA layer: the configuration (its check and the constants derived from it: the
 * attention scale, the norm epsilon), the weights (names, shapes, create, init, destroy,
 * check) and the release of the saved activations. The layer's forward and backward are in
 * mla_layer.c. */
#include "mla_internal.h"

#include <math.h>
#include <string.h>

float clmoe__mla_scale(const clmoe_mla_config *cfg)
{
  return cfg->scale != 0.0f ? cfg->scale : 1.0f / sqrtf((float)(cfg->qk_nope + cfg->qk_rope));
}

float clmoe__mla_eps(const clmoe_mla_config *cfg) { return cfg->norm_eps != 0.0f ? cfg->norm_eps : 1e-5f; }

clmoe_status clmoe_mla_config_check(const clmoe_mla_config *c)
{
  if (!c) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "MLA: the configuration is NULL");
  const int64_t v[7] = {c->d_model, c->n_heads, c->q_rank, c->kv_rank, c->qk_nope, c->qk_rope, c->v_dim};
  const char *names[7] = {"d_model", "n_heads", "q_rank", "kv_rank", "qk_nope", "qk_rope", "v_dim"};
  for (int i = 0; i < 7; i++)
    if (v[i] < (i == 2 ? 0 : 1) || v[i] > (1 << 20)) /* q_rank 0: q = W_q x */
        return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "MLA: %s = %lld is outside [%d, 2^20]", names[i],
                          (long long)v[i], i == 2 ? 0 : 1);
  if (c->qk_nope + c->qk_rope > MLA_MAX_DQK || c->v_dim > MLA_MAX_DV)
    return clmoe__error(CLMOE_ERR_UNSUPPORTED, "MLA: qk_nope + qk_rope = %lld and v_dim = %lld: at most %d and %d "
                        "are supported", (long long)(c->qk_nope + c->qk_rope), (long long)c->v_dim, MLA_MAX_DQK,
                        MLA_MAX_DV);
  if (!(c->norm_eps >= 0.0f) || !isfinite(c->norm_eps) || !isfinite(c->scale))
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "MLA: norm_eps must be finite and >= 0, scale finite");
  return CLMOE_OK;
}

/* ---- weights ------------------------------------------------------------------------- */

static const char *const weight_names[CLMOE_MLA_NWEIGHTS] = {"w_dq", "q_norm", "w_uq", "w_dkv",
                                                             "kv_norm", "w_ukv", "w_g", "w_o"};

const char *clmoe_mla_weight_name(int i)
{
  return i >= 0 && i < CLMOE_MLA_NWEIGHTS ? weight_names[i] : NULL;
}

/* Absent with q_rank 0: w_dq and q_norm. */
static int weight_absent(const clmoe_mla_config *c, int i) { return (i == 0 || i == 1) && c->q_rank == 0; }

const char *clmoe_mla_weight_name_in(const clmoe_mla_config *c, const clmoe_mla_weights *w, int i)
{
  if (i < 0 || i >= CLMOE_MLA_NWEIGHTS || !clmoe_mla_weight_at((clmoe_mla_weights *)w, i)->buf) return NULL;
  return i == 2 && c->q_rank == 0 ? "w_q" : weight_names[i];
}

void clmoe_mla_weight_shape(const clmoe_mla_config *c, int i, int *ndim, int64_t shape[2])
{
  const int64_t H = c->n_heads, d = c->d_model, dqk = c->qk_nope + c->qk_rope;
  const int64_t qin = c->q_rank > 0 ? c->q_rank : d; /* w_uq's input: c_q, or x itself */
  const int64_t s[CLMOE_MLA_NWEIGHTS][2] = {{c->q_rank, d}, {c->q_rank, 1}, {H * dqk, qin},
                                            {c->kv_rank + c->qk_rope, d}, {c->kv_rank, 1},
                                            {H * (c->qk_nope + c->v_dim), c->kv_rank}, {H * c->v_dim, d},
                                            {d, H * c->v_dim}};
  *ndim = weight_absent(c, i) ? 0 : i == 1 || i == 4 ? 1 : 2;
  shape[0] = *ndim ? s[i][0] : 0, shape[1] = *ndim ? s[i][1] : 0;
}

clmoe_tensor *clmoe_mla_weight_at(clmoe_mla_weights *w, int i)
{
  clmoe_tensor *all[CLMOE_MLA_NWEIGHTS] = {&w->w_dq, &w->q_norm, &w->w_uq, &w->w_dkv,
                                           &w->kv_norm, &w->w_ukv, &w->w_g, &w->w_o};
  return i >= 0 && i < CLMOE_MLA_NWEIGHTS ? all[i] : NULL;
}

clmoe_status clmoe_mla_weights_create(clmoe_ctx *ctx, const clmoe_mla_config *cfg, clmoe_mla_weights *w)
{
  return clmoe_mla_weights_create_form(ctx, cfg, 1, w);
}

clmoe_status clmoe_mla_weights_create_form(clmoe_ctx *ctx, const clmoe_mla_config *cfg, int output_gate,
                                           clmoe_mla_weights *w)
{
  return clmoe__mla_weights_create_dtype(ctx, cfg, output_gate, CLMOE_F32, w);
}

clmoe_status clmoe__mla_weights_create_dtype(clmoe_ctx *ctx, const clmoe_mla_config *cfg, int output_gate,
                                            clmoe_dtype matrices, clmoe_mla_weights *w)
{
  memset(w, 0, sizeof *w);
  CLMOE_TRY(clmoe_mla_config_check(cfg));
  if (matrices != CLMOE_F32 && matrices != CLMOE_BF16)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_mla_weights_create: matrices must be fp32 or bf16");
  if (output_gate != 0 && output_gate != 1)
    return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "clmoe_mla_weights_create_form: output_gate = %d must be 0 or 1",
                        output_gate);
  for (int i = 0; i < CLMOE_MLA_NWEIGHTS; i++) {
    int nd;
    int64_t shape[2];
    clmoe_mla_weight_shape(cfg, i, &nd, shape);
    if (nd == 0 || (i == 6 && !output_gate)) continue; /* absent in this form */
    const int gain = i == 1 || i == 4; /* q_norm, kv_norm: fp32; the rest are "w_*" matrices */
    clmoe_status st = clmoe_tensor_create(ctx, clmoe_mla_weight_at(w, i), gain ? CLMOE_F32 : matrices, nd, shape);
    if (st != CLMOE_OK) {
      clmoe_mla_weights_destroy(w);
      return st;
    }
  }
  return CLMOE_OK;
}

void clmoe_mla_weights_destroy(clmoe_mla_weights *w)
{
  if (!w) return;
  for (int i = 0; i < CLMOE_MLA_NWEIGHTS; i++) clmoe_tensor_destroy(clmoe_mla_weight_at(w, i));
  memset(w, 0, sizeof *w);
}

clmoe_status clmoe_mla_weights_init(clmoe_mla_weights *w, uint64_t seed, float stddev)
{
  for (int i = 0; i < CLMOE_MLA_NWEIGHTS; i++) {
    clmoe_tensor *t = clmoe_mla_weight_at(w, i);
    if (!t->buf) continue; /* absent in this form */
    if (i == 1 || i == 4) CLMOE_TRY(clmoe_tensor_fill(t, 1.0));
    else CLMOE_TRY(clmoe_tensor_fill_normal(t, seed + (uint64_t)i, 0.0f, stddev));
  }
  return CLMOE_OK;
}

static clmoe_status check_weights(const char *op, const clmoe_mla_config *cfg, const clmoe_mla_weights *w,
                                  int allow_bf16)
{
  CLMOE_TRY(clmoe_mla_config_check(cfg));
  if (!w) return clmoe__error(CLMOE_ERR_INVALID_ARGUMENT, "%s: the weights are NULL", op);
  for (int i = 0; i < CLMOE_MLA_NWEIGHTS; i++) {
    int nd;
    int64_t s[2];
    clmoe_mla_weight_shape(cfg, i, &nd, s);
    /* absent in this form, never read: w_dq and q_norm with q_rank 0; w_g when w lacks it */
    if (nd == 0 || (i == 6 && !w->w_g.buf)) continue;
    CLMOE_TRY(clmoe__want_shape(clmoe_mla_weight_at((clmoe_mla_weights *)w, i), op, weight_names[i],
                                allow_bf16 && nd == 2, nd, s[0], s[1], 0, 0));
  }
  return CLMOE_OK;
}

clmoe_status clmoe__mla_check_weights(const char *op, const clmoe_mla_config *cfg,
                                      const clmoe_mla_weights *w)
{
  return check_weights(op, cfg, w, 0);
}

clmoe_status clmoe__mla_check_layer_weights(const char *op, const clmoe_mla_config *cfg,
                                            const clmoe_mla_weights *w)
{
  return check_weights(op, cfg, w, 1);
}

clmoe_status clmoe__mla_check_absorbed_weights(const char *op, const clmoe_mla_config *cfg,
                                               const clmoe_mla_weights *w)
{
  CLMOE_TRY(check_weights(op, cfg, w, 1));
  return clmoe__want(&w->w_ukv, CLMOE_F32, op, "w_ukv (the absorbed and decompressing products take fp32)");
}

void clmoe_mla_saved_release(clmoe_mla_saved *s)
{
  if (!s) return;
  clmoe_tensor *all[] = {&s->cq_raw, &s->cq, &s->rstd_q, &s->q, &s->ckv_raw, &s->c, &s->rstd_kv,
                         &s->kr, &s->kv, &s->o, &s->lse, &s->gate, &s->u};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clmoe_tensor_destroy(all[i]);
  memset(s, 0, sizeof *s);
}
