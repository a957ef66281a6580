/* Double-precision reference of the Stable LatentMoE layer and its Kimi Linear options (SwiGLU,
 * grouped selection, plain combine weights, no latent projection): token loops, no tricks. */
#include "ref_moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

double ref_situ(double u, double w)
{
  return REF_SITU_B1 * tanh(u / REF_SITU_B1) * sigm(u) * (REF_SITU_B2 * tanh(w / REF_SITU_B2));
}

void ref_situ_grad(double u, double w, double *du, double *dw)
{
  const double tu = tanh(u / REF_SITU_B1), su = sigm(u), tw = tanh(w / REF_SITU_B2);
  const double g = REF_SITU_B1 * tu * su, h = REF_SITU_B2 * tw;
  *du = ((1.0 - tu * tu) * su + REF_SITU_B1 * tu * su * (1.0 - su)) * h;
  *dw = g * (1.0 - tw * tw);
}

double ref_glu(int glu, double u, double w) { return glu ? u * sigm(u) * w : ref_situ(u, w); }

void ref_glu_grad(int glu, double u, double w, double *du, double *dw)
{
  if (!glu) {
    ref_situ_grad(u, w, du, dw);
    return;
  }
  const double su = sigm(u); /* d/du u sigmoid(u) = sigmoid(u) + u sigmoid(u) (1 - sigmoid(u)) */
  *du = (su + u * su * (1.0 - su)) * w;
  *dw = u * su;
}

/* The experts' width: the latent width, or d without a latent projection. */
static int64_t width(const ref_moe_shape *s) { return s->l > 0 ? s->l : s->d; }

/* out[r] (+)= sum_c W[r, c] v[c] for W [rows, cols]. */
static void matvec(const double *W, int64_t rows, int64_t cols, const double *v, double *out, int add)
{
  for (int64_t r = 0; r < rows; r++) {
    double acc = 0.0;
    for (int64_t c = 0; c < cols; c++) acc += W[r * cols + c] * v[c];
    out[r] = add ? out[r] + acc : acc;
  }
}

/* out[c] += sum_r W[r, c] v[r] (the transposed product). */
static void matvec_t_add(const double *W, int64_t rows, int64_t cols, const double *v, double *out)
{
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) out[c] += W[r * cols + c] * v[r];
}

/* G[r, c] += a[r] b[c]. */
static void outer_add(double *G, int64_t rows, int64_t cols, const double *a, const double *b)
{
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) G[r * cols + c] += a[r] * b[c];
}

/* x rounded to bf16 (through fp32, nearest even), as a bf16 product's operand. */
double ref_bf16(double x)
{
  union { float f; uint32_t u; } v = {(float)x};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return x; /* NaN stays NaN */
  v.u += 0x7fffu + ((v.u >> 16) & 1u);
  v.u &= 0xffff0000u;
  return (double)v.f;
}

/* v itself, or with rnd a copy rounded to bf16 in buf [n]. */
static const double *operand(int rnd, const double *v, int64_t n, double *buf)
{
  if (!rnd) return v;
  for (int64_t i = 0; i < n; i++) buf[i] = ref_bf16(v[i]);
  return buf;
}

/* One gated FFN (unit glu) applied to one vector h [in] -> out [in] (added), intermediate f,
 * with the intermediate u, w, a kept in caller buffers of f. rnd: every product's vector
 * operand rounded to bf16 (h, a) as the bf16 expert kernels stage them; the weights are
 * taken as given. */
static void ffn_vec(int glu, int64_t in, int64_t f, const double *h, const double *wg, const double *wu,
                    const double *wd, double *u, double *w, double *a, double *out, int add, int rnd)
{
  double *buf = rnd ? malloc((size_t)(in + f) * sizeof *buf) : NULL;
  if (rnd && !buf) abort();
  const double *hr = operand(rnd, h, in, buf);
  matvec(wg, f, in, hr, u, 0);
  matvec(wu, f, in, hr, w, 0);
  for (int64_t j = 0; j < f; j++) a[j] = ref_glu(glu, u[j], w[j]);
  matvec(wd, in, f, operand(rnd, a, f, buf ? buf + in : NULL), out, add);
  free(buf);
}

/* Gradient of out . dout for ffn_vec: adds to dwg, dwu, dwd (may be NULL) and dh; rnd as
 * ffn_vec, also dout, du and dw rounded where they are operands. */
static void ffn_vec_backward(int glu, int64_t in, int64_t f, const double *h, const double *wg,
                             const double *wu, const double *wd, const double *dout, double *dwg,
                             double *dwu, double *dwd, double *dh, double *u, double *w, double *a,
                             double *da, int rnd)
{
  double *buf = rnd ? malloc((size_t)(2 * in + 3 * f) * sizeof *buf) : NULL;
  if (rnd && !buf) abort();
  const double *hr = operand(rnd, h, in, buf), *dr = operand(rnd, dout, in, buf ? buf + in : NULL);
  matvec(wg, f, in, hr, u, 0);
  matvec(wu, f, in, hr, w, 0);
  for (int64_t j = 0; j < f; j++) a[j] = ref_glu(glu, u[j], w[j]);
  if (dwd) outer_add(dwd, in, f, dr, operand(rnd, a, f, buf ? buf + 2 * in : NULL));
  for (int64_t j = 0; j < f; j++) da[j] = 0.0;
  matvec_t_add(wd, in, f, dr, da);
  for (int64_t j = 0; j < f; j++) {
    double gu, gw;
    ref_glu_grad(glu, u[j], w[j], &gu, &gw);
    u[j] = da[j] * gu; /* u, w now hold du, dw */
    w[j] = da[j] * gw;
  }
  const double *ur = operand(rnd, u, f, buf ? buf + 2 * in + f : NULL);
  const double *wr = operand(rnd, w, f, buf ? buf + 2 * in + 2 * f : NULL);
  if (dwg) outer_add(dwg, f, in, ur, hr);
  if (dwu) outer_add(dwu, f, in, wr, hr);
  if (dh) {
    matvec_t_add(wg, f, in, ur, dh);
    matvec_t_add(wu, f, in, wr, dh);
  }
  free(buf);
}

void ref_glu_ffn_forward(int glu, int64_t m, int64_t d, int64_t f, const double *x, const double *w_gate,
                         const double *w_upp, const double *w_dn, double *y)
{
  double *buf = malloc((size_t)(3 * f + 1) * sizeof *buf);
  for (int64_t t = 0; t < m; t++)
    ffn_vec(glu, d, f, x + t * d, w_gate, w_upp, w_dn, buf, buf + f, buf + 2 * f, y + t * d, 1, 0);
  free(buf);
}

void ref_glu_ffn_backward(int glu, int64_t m, int64_t d, int64_t f, const double *x,
                          const double *w_gate, const double *w_upp, const double *w_dn,
                          const double *dy, double *dw_gate, double *dw_upp, double *dw_dn, double *dx)
{
  double *buf = malloc((size_t)(4 * f + 1) * sizeof *buf);
  for (int64_t t = 0; t < m; t++)
    ffn_vec_backward(glu, d, f, x + t * d, w_gate, w_upp, w_dn, dy + t * d, dw_gate, dw_upp, dw_dn,
                     dx ? dx + t * d : NULL, buf, buf + f, buf + 2 * f, buf + 3 * f, 0);
  free(buf);
}

void ref_situ_ffn_forward(int64_t m, int64_t d, int64_t f, const double *x, const double *w_gate,
                          const double *w_upp, const double *w_dn, double *y)
{
  ref_glu_ffn_forward(0, m, d, f, x, w_gate, w_upp, w_dn, y);
}

void ref_situ_ffn_backward(int64_t m, int64_t d, int64_t f, const double *x, const double *w_gate,
                           const double *w_upp, const double *w_dn, const double *dy,
                           double *dw_gate, double *dw_upp, double *dw_dn, double *dx)
{
  ref_glu_ffn_backward(0, m, d, f, x, w_gate, w_upp, w_dn, dy, dw_gate, dw_upp, dw_dn, dx);
}

void ref_moe_keep_groups(const ref_moe_shape *s, const double *v, char *allowed)
{
  const int64_t G = s->groups > 1 ? s->groups : 1, gs = s->E / G;
  const int64_t TG = s->topk_groups > 0 ? s->topk_groups : G;
  for (int64_t e = 0; e < s->E; e++) allowed[e] = G == 1;
  if (G == 1) return;
  double *gsc = malloc((size_t)G * sizeof *gsc);
  char *kept = calloc((size_t)G, 1);
  for (int64_t g = 0; g < G; g++) {
    int64_t b1 = -1, b2 = -1; /* the two best of the group, by index */
    for (int64_t e = g * gs; e < (g + 1) * gs; e++) {
      if (b1 < 0 || v[e] > v[b1]) b2 = b1, b1 = e;
      else if (b2 < 0 || v[e] > v[b2]) b2 = e;
    }
    gsc[g] = v[b1] + v[b2];
  }
  for (int64_t r = 0; r < TG; r++) {
    int64_t best = -1;
    for (int64_t g = 0; g < G; g++)
      if (!kept[g] && (best < 0 || gsc[g] > gsc[best])) best = g;
    kept[best] = 1;
    for (int64_t e = best * gs; e < (best + 1) * gs; e++) allowed[e] = 1;
  }
  free(gsc), free(kept);
}

void ref_moe_route(const ref_moe_shape *s, const double *w_router, const double *bias,
                   const double *x, int64_t k1, int32_t *topk, double *s_all)
{
  double *sc = malloc((size_t)s->E * sizeof *sc), *v = malloc((size_t)s->E * sizeof *v);
  char *taken = malloc((size_t)s->E), *allowed = malloc((size_t)s->E);
  for (int64_t t = 0; t < s->m; t++) {
    matvec(w_router, s->E, s->d, x + t * s->d, sc, 0);
    for (int64_t e = 0; e < s->E; e++) {
      sc[e] = sigm(sc[e]);
      v[e] = sc[e] + (bias ? bias[e] : 0.0);
      if (s_all) s_all[t * s->E + e] = sc[e];
      taken[e] = 0;
    }
    ref_moe_keep_groups(s, v, allowed);
    for (int64_t r = 0; r < k1; r++) { /* the largest untaken s + b; '>' keeps the lower index */
      int64_t best = -1;
      double bv = 0.0;
      for (int64_t e = 0; e < s->E; e++)
        if (allowed[e] && !taken[e] && (best < 0 || v[e] > bv)) best = e, bv = v[e];
      taken[best] = 1;
      topk[t * k1 + r] = (int32_t)best;
    }
  }
  free(sc), free(v), free(taken), free(allowed);
}

/* Per-token work buffers of the layer. */
typedef struct tok_buf {
  double *sc, *xl, *z, *zn, *u, *w, *a, *ye, *da, *dz, *dzn, *dxl, *p, *dp;
  int rnd; /* the routed experts' operands rounded to bf16 (ffn_vec's rnd) */
} tok_buf;

static double *tok_buf_alloc(const ref_moe_shape *s, tok_buf *b)
{
  int64_t f = s->f > s->S ? s->f : s->S, l = width(s);
  size_t n = (size_t)(s->k * 4 + 2 * s->k * l + 6 * l + 4 * f + 1);
  double *all = calloc(n, sizeof *all), *p = all;
  b->sc = p, p += s->k;
  b->p = p, p += s->k;
  b->dp = p, p += s->k;
  p += s->k;
  b->ye = p, p += s->k * l;
  p += s->k * l;
  b->xl = p, p += l;
  b->z = p, p += l;
  b->zn = p, p += l;
  b->dz = p, p += l;
  b->dzn = p, p += l;
  b->dxl = p, p += l;
  b->u = p, p += f;
  b->w = p, p += f;
  b->a = p, p += f;
  b->da = p;
  return all;
}

/* The forward of token t up to z: xl, the chosen scores, p, each expert's output ye [k, l],
 * z; returns the sum of the chosen scores. */
static double token_forward(const ref_moe_shape *s, const ref_moe_params *P, const double *xt,
                            const int32_t *sel, tok_buf *b)
{
  const int64_t l = width(s), f = s->f;
  const double cs = s->scale != 0.0 ? s->scale : 1.0;
  if (s->l > 0) matvec(P->w_down, l, s->d, xt, b->xl, 0);
  else memcpy(b->xl, xt, (size_t)l * sizeof *xt);
  double S = 0.0;
  for (int64_t j = 0; j < s->k; j++) {
    const double *wr = P->w_router + (int64_t)sel[j] * s->d;
    double logit = 0.0;
    for (int64_t c = 0; c < s->d; c++) logit += wr[c] * xt[c];
    b->sc[j] = sigm(logit);
    S += b->sc[j];
  }
  for (int64_t c = 0; c < l; c++) b->z[c] = 0.0;
  for (int64_t j = 0; j < s->k; j++) {
    const int64_t e = sel[j];
    b->p[j] = (s->no_renorm ? b->sc[j] : b->sc[j] / S) * cs;
    ffn_vec(s->glu, l, f, b->xl, P->w_gate + e * f * l, P->w_upp + e * f * l, P->w_dn + e * l * f, b->u,
            b->w, b->a, b->ye + j * l, 0, b->rnd);
    for (int64_t c = 0; c < l; c++) b->z[c] += b->p[j] * b->ye[j * l + c];
  }
  return S;
}

static double rms_factor(const double *z, int64_t l, double eps)
{
  double ss = 0.0;
  for (int64_t c = 0; c < l; c++) ss += z[c] * z[c];
  return 1.0 / sqrt(ss / (double)l + eps);
}

static void moe_forward(const ref_moe_shape *s, const ref_moe_params *P, const double *x,
                        const int32_t *topk, double *y, double *probs, int rnd)
{
  tok_buf b;
  double *all = tok_buf_alloc(s, &b);
  b.rnd = rnd;
  for (int64_t t = 0; t < s->m; t++) {
    const double *xt = x + t * s->d;
    token_forward(s, P, xt, topk + t * s->k, &b);
    if (probs)
      for (int64_t j = 0; j < s->k; j++) probs[t * s->k + j] = b.p[j];
    if (s->l > 0) {
      const double r = rms_factor(b.z, s->l, s->eps);
      for (int64_t c = 0; c < s->l; c++) b.zn[c] = b.z[c] * r * P->gain[c];
      matvec(P->w_up, s->d, s->l, b.zn, y + t * s->d, 0);
    } else {
      memcpy(y + t * s->d, b.z, (size_t)s->d * sizeof *b.z);
    }
    if (s->S) ffn_vec(s->glu, s->d, s->S, xt, P->sh_gate, P->sh_upp, P->sh_dn, b.u, b.w, b.a, y + t * s->d, 1, 0);
  }
  free(all);
}

static void moe_backward(const ref_moe_shape *s, const ref_moe_params *P, const double *x,
                         const int32_t *topk, const double *dy, ref_moe_params *g, double *dx, int rnd)
{
  const int64_t d = s->d, l = width(s), f = s->f, E = s->E;
  const double sc = s->scale != 0.0 ? s->scale : 1.0;
  memset(g->w_router, 0, (size_t)(E * d) * sizeof(double));
  memset(g->w_gate, 0, (size_t)(E * f * l) * sizeof(double));
  memset(g->w_upp, 0, (size_t)(E * f * l) * sizeof(double));
  memset(g->w_dn, 0, (size_t)(E * l * f) * sizeof(double));
  if (s->l > 0) {
    memset(g->w_down, 0, (size_t)(l * d) * sizeof(double));
    memset(g->gain, 0, (size_t)l * sizeof(double));
    memset(g->w_up, 0, (size_t)(d * l) * sizeof(double));
  }
  if (s->S) {
    memset(g->sh_gate, 0, (size_t)(s->S * d) * sizeof(double));
    memset(g->sh_upp, 0, (size_t)(s->S * d) * sizeof(double));
    memset(g->sh_dn, 0, (size_t)(d * s->S) * sizeof(double));
  }
  memset(dx, 0, (size_t)(s->m * d) * sizeof(double));
  tok_buf b;
  double *all = tok_buf_alloc(s, &b);
  b.rnd = rnd;
  for (int64_t t = 0; t < s->m; t++) {
    const double *xt = x + t * d, *dyt = dy + t * d;
    const int32_t *sel = topk + t * s->k;
    double *dxt = dx + t * d;
    const double S = token_forward(s, P, xt, sel, &b);
    if (s->l > 0) { /* y = W_up zn: dW_up and dzn */
      const double r = rms_factor(b.z, l, s->eps);
      for (int64_t c = 0; c < l; c++) b.zn[c] = b.z[c] * r * P->gain[c];
      outer_add(g->w_up, d, l, dyt, b.zn);
      for (int64_t c = 0; c < l; c++) b.dzn[c] = 0.0;
      matvec_t_add(P->w_up, d, l, dyt, b.dzn);
      /* zn = z r gain, r = (mean z^2 + eps)^-1/2 */
      double dot = 0.0;
      for (int64_t c = 0; c < l; c++) {
        g->gain[c] += b.dzn[c] * b.z[c] * r;
        dot += P->gain[c] * b.dzn[c] * b.z[c];
      }
      for (int64_t c = 0; c < l; c++)
        b.dz[c] = r * P->gain[c] * b.dzn[c] - r * r * r * b.z[c] * dot / (double)l;
    } else { /* y = z */
      memcpy(b.dz, dyt, (size_t)l * sizeof *dyt);
    }
    /* z = sum_j p_j ye_j: dp_j, and each expert's backward with dye_j = p_j dz */
    for (int64_t c = 0; c < l; c++) b.dxl[c] = 0.0;
    double pdp = 0.0;
    for (int64_t j = 0; j < s->k; j++) {
      const int64_t e = sel[j];
      b.dp[j] = 0.0;
      for (int64_t c = 0; c < l; c++) b.dp[j] += b.dz[c] * b.ye[j * l + c];
      pdp += b.p[j] * b.dp[j];
      double *dye = b.dzn; /* dzn is no longer needed: reuse it for p_j dz */
      for (int64_t c = 0; c < l; c++) dye[c] = b.p[j] * b.dz[c];
      ffn_vec_backward(s->glu, l, f, b.xl, P->w_gate + e * f * l, P->w_upp + e * f * l, P->w_dn + e * l * f,
                       dye, g->w_gate + e * f * l, g->w_upp + e * f * l, g->w_dn + e * l * f, b.dxl,
                       b.u, b.w, b.a, b.da, b.rnd);
    }
    /* p_j = c s_j / S (or c s_j), s_j = sigmoid(logit_j); the chosen set is fixed */
    for (int64_t j = 0; j < s->k; j++) {
      const double ds = s->no_renorm ? sc * b.dp[j] : (sc * b.dp[j] - pdp) / S;
      const double dl = ds * b.sc[j] * (1.0 - b.sc[j]);
      const int64_t e = sel[j];
      for (int64_t c = 0; c < d; c++) {
        g->w_router[e * d + c] += dl * xt[c];
        dxt[c] += dl * P->w_router[e * d + c];
      }
    }
    if (s->l > 0) { /* xl = W_down x */
      outer_add(g->w_down, l, d, b.dxl, xt);
      matvec_t_add(P->w_down, l, d, b.dxl, dxt);
    } else { /* xl = x */
      for (int64_t c = 0; c < d; c++) dxt[c] += b.dxl[c];
    }
    if (s->S)
      ffn_vec_backward(s->glu, d, s->S, xt, P->sh_gate, P->sh_upp, P->sh_dn, dyt, g->sh_gate, g->sh_upp,
                       g->sh_dn, dxt, b.u, b.w, b.a, b.da, 0);
  }
  free(all);
}

void ref_moe_forward(const ref_moe_shape *s, const ref_moe_params *P, const double *x,
                     const int32_t *topk, double *y, double *probs)
{
  moe_forward(s, P, x, topk, y, probs, 0);
}

void ref_moe_forward_bf16(const ref_moe_shape *s, const ref_moe_params *P, const double *x,
                          const int32_t *topk, double *y, double *probs)
{
  moe_forward(s, P, x, topk, y, probs, 1);
}

void ref_moe_backward(const ref_moe_shape *s, const ref_moe_params *P, const double *x,
                      const int32_t *topk, const double *dy, ref_moe_params *g, double *dx)
{
  moe_backward(s, P, x, topk, dy, g, dx, 0);
}

void ref_moe_backward_bf16(const ref_moe_shape *s, const ref_moe_params *P, const double *x,
                           const int32_t *topk, const double *dy, ref_moe_params *g, double *dx)
{
  moe_backward(s, P, x, topk, dy, g, dx, 1);
}

void ref_moe_loads(int64_t m, int64_t E, int64_t k, const int32_t *topk, int64_t *counts)
{
  for (int64_t e = 0; e < E; e++) counts[e] = 0;
  for (int64_t i = 0; i < m * k; i++) counts[topk[i]]++;
}

int64_t ref_moe_qb_rank(int64_t m, int64_t E, int64_t k) { return m * k / E + 1; }

static int cmp_desc(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x > y ? -1 : x < y;
}

void ref_moe_qb_exact(int64_t m, int64_t E, int64_t k, const double *s_all, const double *cutoff,
                      double *thr)
{
  const int64_t r = ref_moe_qb_rank(m, E, k);
  double *col = malloc((size_t)m * sizeof *col);
  for (int64_t j = 0; j < E; j++) {
    for (int64_t i = 0; i < m; i++) col[i] = s_all[i * E + j] - cutoff[i];
    qsort(col, (size_t)m, sizeof *col, cmp_desc);
    thr[j] = col[r - 1];
  }
  free(col);
}

void ref_moe_qb_from_hist(int64_t E, int64_t bins, const int32_t *counts, double lo, double hi,
                          int64_t tokens, int64_t k, double *thr)
{
  const int64_t r = ref_moe_qb_rank(tokens, E, k);
  const double w = (hi - lo) / (double)bins;
  for (int64_t j = 0; j < E; j++) {
    int64_t above = 0;
    thr[j] = lo;
    for (int64_t b = bins - 1; b >= 0; b--) {
      const int64_t c = counts[j * bins + b];
      if (above + c >= r) {
        /* the (r - above)-th of c values spread evenly over the bin, from its top */
        thr[j] = lo + (double)(b + 1) * w - ((double)(r - above) - 0.5) / (double)c * w;
        break;
      }
      above += c;
    }
  }
}

void ref_moe_bias_from_thr(int64_t E, const double *thr, double *bias)
{
  double mean = 0.0;
  for (int64_t j = 0; j < E; j++) mean += -thr[j];
  mean /= (double)E;
  for (int64_t j = 0; j < E; j++) bias[j] = -thr[j] - mean;
}

void ref_moe_sign_update(int64_t E, int64_t m, int64_t k, const int64_t *counts, double gamma,
                         double *bias)
{
  const double mean = (double)(m * k) / (double)E;
  for (int64_t j = 0; j < E; j++) {
    const double diff = mean - (double)counts[j];
    bias[j] += gamma * (double)((diff > 0) - (diff < 0));
  }
}
