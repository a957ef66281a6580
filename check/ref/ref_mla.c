/* Double-precision reference of Gated MLA: see ref_mla.h. */
#include "ref_mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

int64_t ref_mla_nseq(const ref_mla_shape *s) { return s->cu_seqlens ? s->nseq : s->B; }

void ref_mla_seq(const ref_mla_shape *s, int64_t n, int64_t *t0, int64_t *t1)
{
  if (s->cu_seqlens) {
    *t0 = s->cu_seqlens[n];
    *t1 = s->cu_seqlens[n + 1];
  } else {
    *t0 = n * s->T;
    *t1 = (n + 1) * s->T;
  }
}

static double *dalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

/* Probabilities P [L, L] (row i over keys j <= i, zero above) of one sequence and head. */
static void probs(const ref_mla_shape *s, const double *q, const double *kn, const double *kr, int64_t t0,
                  int64_t L, int64_t h, double *P, double *lse_row)
{
  const int64_t H = s->H, Dn = s->Dn, Dr = s->Dr, Dqk = Dn + Dr;
  for (int64_t i = 0; i < L; i++) {
    const double *qi = q + ((t0 + i) * H + h) * Dqk;
    double m = -INFINITY;
    for (int64_t j = 0; j <= i; j++) {
      const double *kj = kn + ((t0 + j) * H + h) * Dn, *rj = kr + (t0 + j) * Dr;
      double a = 0.0;
      for (int64_t d = 0; d < Dn; d++) a += qi[d] * kj[d];
      for (int64_t d = 0; d < Dr; d++) a += qi[Dn + d] * rj[d];
      P[i * L + j] = s->scale * a;
      if (P[i * L + j] > m) m = P[i * L + j];
    }
    double sum = 0.0;
    for (int64_t j = 0; j <= i; j++) sum += exp(P[i * L + j] - m);
    for (int64_t j = 0; j < L; j++) P[i * L + j] = j <= i ? exp(P[i * L + j] - m) / sum : 0.0;
    if (lse_row) lse_row[i] = m + log(sum);
  }
}

void ref_mla_attention(const ref_mla_shape *s, const double *q, const double *kn, const double *kr,
                       const double *v, double *o, double *lse)
{
  const int64_t H = s->H, Dv = s->Dv;
  for (int64_t n = 0; n < ref_mla_nseq(s); n++) {
    int64_t t0, t1;
    ref_mla_seq(s, n, &t0, &t1);
    const int64_t L = t1 - t0;
    double *P = dalloc(L * L), *ls = dalloc(L);
    for (int64_t h = 0; h < H; h++) {
      probs(s, q, kn, kr, t0, L, h, P, ls);
      for (int64_t i = 0; i < L; i++) {
        for (int64_t c = 0; c < Dv; c++) {
          double a = 0.0;
          for (int64_t j = 0; j <= i; j++) a += P[i * L + j] * v[((t0 + j) * H + h) * Dv + c];
          o[((t0 + i) * H + h) * Dv + c] = a;
        }
        if (lse) lse[(t0 + i) * H + h] = ls[i];
      }
    }
    free(P), free(ls);
  }
}

/* x rounded to bf16 (nearest even) through fp32. */
static double round_bf16(double x)
{
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) <= 0x7f800000u) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* dP_ij = dO_i . v_j;  dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik);  dq_i = scale sum_j dS_ij k_j;
 * dk_j = scale sum_i dS_ij q_i;  dv_j = sum_i P_ij dO_i. */
void ref_mla_attention_backward(const ref_mla_shape *s, const double *q, const double *kn,
                                const double *kr, const double *v, const double *dout, double *dq,
                                double *dkn, double *dkr, double *dv)
{
  const int64_t H = s->H, Dn = s->Dn, Dr = s->Dr, Dqk = Dn + Dr, Dv = s->Dv;
  for (int64_t n = 0; n < ref_mla_nseq(s); n++) {
    int64_t t0, t1;
    ref_mla_seq(s, n, &t0, &t1);
    const int64_t L = t1 - t0;
    double *P = dalloc(L * L), *dS = dalloc(L * L);
    for (int64_t i = 0; i < L * Dr; i++) dkr[t0 * Dr + i] = 0.0;
    for (int64_t h = 0; h < H; h++) {
      probs(s, q, kn, kr, t0, L, h, P, NULL);
      for (int64_t i = 0; i < L; i++) {
        const double *doi = dout + ((t0 + i) * H + h) * Dv;
        double rowdot = 0.0;
        for (int64_t j = 0; j <= i; j++) {
          double dp = 0.0;
          for (int64_t c = 0; c < Dv; c++) dp += doi[c] * v[((t0 + j) * H + h) * Dv + c];
          dS[i * L + j] = dp;
          rowdot += P[i * L + j] * dp;
        }
        if (s->o_bf16) { /* D from the stored (rounded) o */
          rowdot = 0.0;
          for (int64_t c = 0; c < Dv; c++) {
            double oc = 0.0;
            for (int64_t j = 0; j <= i; j++) oc += P[i * L + j] * v[((t0 + j) * H + h) * Dv + c];
            rowdot += doi[c] * round_bf16(oc);
          }
        }
        for (int64_t j = 0; j <= i; j++) dS[i * L + j] = P[i * L + j] * (dS[i * L + j] - rowdot);
      }
      for (int64_t i = 0; i < L; i++) {
        double *dqi = dq + ((t0 + i) * H + h) * Dqk;
        for (int64_t d = 0; d < Dqk; d++) {
          double a = 0.0;
          for (int64_t j = 0; j <= i; j++)
            a += dS[i * L + j] * (d < Dn ? kn[((t0 + j) * H + h) * Dn + d] : kr[(t0 + j) * Dr + d - Dn]);
          dqi[d] = s->scale * a;
        }
      }
      for (int64_t j = 0; j < L; j++) {
        for (int64_t d = 0; d < Dqk; d++) {
          double a = 0.0;
          for (int64_t i = j; i < L; i++) a += dS[i * L + j] * q[((t0 + i) * H + h) * Dqk + d];
          if (d < Dn) dkn[((t0 + j) * H + h) * Dn + d] = s->scale * a;
          else dkr[(t0 + j) * Dr + d - Dn] += s->scale * a;
        }
        for (int64_t c = 0; c < Dv; c++) {
          double a = 0.0;
          for (int64_t i = j; i < L; i++) a += P[i * L + j] * dout[((t0 + i) * H + h) * Dv + c];
          dv[((t0 + j) * H + h) * Dv + c] = a;
        }
      }
    }
    free(P), free(dS);
  }
}

/* ---- the layer ------------------------------------------------------------------------- */

int64_t ref_mla_weight_numel(const ref_mla_layer *l, int i)
{
  const int64_t H = l->s.H, Dqk = l->s.Dn + l->s.Dr, Dv = l->s.Dv;
  const int64_t n[REF_MLA_NWEIGHTS] = {l->rq * l->d, l->rq, H * Dqk * (l->rq ? l->rq : l->d),
                                       (l->dc + l->s.Dr) * l->d, l->dc, H * (l->s.Dn + Dv) * l->dc,
                                       l->ungated ? 0 : H * Dv * l->d, l->d * H * Dv};
  return n[i];
}

/* Intermediates of the forward, kept for the backward. */
typedef struct fwd_state {
  double *cq_raw, *cq, *q, *ckv, *craw, *c, *kr, *kv, *kn, *v, *o, *g, *u;
} fwd_state;

static void state_free(fwd_state *f)
{
  double *all[] = {f->cq_raw, f->cq, f->q, f->ckv, f->craw, f->c, f->kr, f->kv, f->kn, f->v, f->o, f->g, f->u};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* y = x W^T for x [M, in], W [out, in]. */
static void linear(int64_t M, int64_t in, int64_t out, const double *x, const double *W, double *y)
{
  ref_gemm(0, 1, M, out, in, 1.0, x, in, W, in, 0.0, y, out);
}

static void forward_state(const ref_mla_layer *l, const double *const w[], const double *x, double *y, fwd_state *f)
{
  const ref_mla_shape *s = &l->s;
  const int64_t M = s->B * s->T, H = s->H, Dn = s->Dn, Dr = s->Dr, Dv = s->Dv, Dqk = Dn + Dr, dc = l->dc;
  f->cq_raw = dalloc(M * l->rq), f->cq = dalloc(M * l->rq), f->q = dalloc(M * H * Dqk);
  f->ckv = dalloc(M * (dc + Dr)), f->craw = dalloc(M * dc), f->c = dalloc(M * dc), f->kr = dalloc(M * Dr);
  f->kv = dalloc(M * H * (Dn + Dv)), f->kn = dalloc(M * H * Dn), f->v = dalloc(M * H * Dv);
  f->o = dalloc(M * H * Dv), f->g = dalloc(M * H * Dv), f->u = dalloc(M * H * Dv);
  if (l->rq) {
    linear(M, l->d, l->rq, x, w[0], f->cq_raw);
    ref_rmsnorm(f->cq_raw, w[1], M, l->rq, l->eps, f->cq);
    linear(M, l->rq, H * Dqk, f->cq, w[2], f->q);
  } else {
    linear(M, l->d, H * Dqk, x, w[2], f->q);
  }
  linear(M, l->d, dc + Dr, x, w[3], f->ckv);
  for (int64_t i = 0; i < M; i++) {
    memcpy(f->craw + i * dc, f->ckv + i * (dc + Dr), (size_t)dc * sizeof(double));
    memcpy(f->kr + i * Dr, f->ckv + i * (dc + Dr) + dc, (size_t)Dr * sizeof(double));
  }
  ref_rmsnorm(f->craw, w[4], M, dc, l->eps, f->c);
  if (l->cache_bf16) {
    for (int64_t i = 0; i < M * dc; i++) f->c[i] = round_bf16(f->c[i]);
    for (int64_t i = 0; i < M * Dr; i++) f->kr[i] = round_bf16(f->kr[i]);
  }
  linear(M, dc, H * (Dn + Dv), f->c, w[5], f->kv);
  for (int64_t i = 0; i < M * H; i++) {
    memcpy(f->kn + i * Dn, f->kv + i * (Dn + Dv), (size_t)Dn * sizeof(double));
    memcpy(f->v + i * Dv, f->kv + i * (Dn + Dv) + Dn, (size_t)Dv * sizeof(double));
  }
  ref_mla_attention(s, f->q, f->kn, f->kr, f->v, f->o, NULL);
  if (!l->ungated) linear(M, l->d, H * Dv, x, w[6], f->g);
  for (int64_t i = 0; i < M * H * Dv; i++) {
    f->g[i] = l->ungated ? 1.0 : ref_sigmoid(f->g[i]);
    f->u[i] = f->g[i] * f->o[i];
  }
  linear(M, H * Dv, l->d, f->u, w[7], y);
}

void ref_mla_forward(const ref_mla_layer *l, const double *const w[REF_MLA_NWEIGHTS], const double *x, double *y)
{
  fwd_state f;
  forward_state(l, w, x, y, &f);
  state_free(&f);
}

void ref_mla_backward(const ref_mla_layer *l, const double *const w[REF_MLA_NWEIGHTS], const double *x,
                      const double *dy, double *dx, double *const dw[REF_MLA_NWEIGHTS])
{
  const ref_mla_shape *s = &l->s;
  const int64_t M = s->B * s->T, H = s->H, Dn = s->Dn, Dr = s->Dr, Dv = s->Dv, Dqk = Dn + Dr, dc = l->dc;
  const int64_t d = l->d, HV = H * Dv;
  fwd_state f;
  double *y = dalloc(M * d);
  forward_state(l, w, x, y, &f);
  double *du = dalloc(M * HV), *dgl = dalloc(M * HV), *dO = dalloc(M * HV), *dq = dalloc(M * H * Dqk);
  double *dkn = dalloc(M * H * Dn), *dkr = dalloc(M * Dr), *dv = dalloc(M * HV), *dkv = dalloc(M * H * (Dn + Dv));
  double *dc_ = dalloc(M * dc), *dcraw = dalloc(M * dc), *dckv = dalloc(M * (dc + Dr));
  double *dcq = dalloc(M * l->rq), *dcqraw = dalloc(M * l->rq), *dxa = dalloc(M * d);
  /* y = u W_o^T, u = g o, g = sigmoid(x W_g^T) */
  ref_gemm(0, 0, M, HV, d, 1.0, dy, d, w[7], HV, 0.0, du, HV);
  ref_gemm(1, 0, d, HV, M, 1.0, dy, d, f.u, HV, 0.0, dw[7], HV);
  for (int64_t i = 0; i < M * HV; i++) {
    dO[i] = du[i] * f.g[i];
    dgl[i] = du[i] * f.o[i] * f.g[i] * (1.0 - f.g[i]);
  }
  if (!l->ungated) {
    ref_gemm(1, 0, HV, d, M, 1.0, dgl, HV, x, d, 0.0, dw[6], d);
    ref_gemm(0, 0, M, d, HV, 1.0, dgl, HV, w[6], d, 0.0, dxa, d);
  }
  /* attention */
  ref_mla_attention_backward(s, f.q, f.kn, f.kr, f.v, dO, dq, dkn, dkr, dv);
  for (int64_t i = 0; i < M * H; i++) {
    memcpy(dkv + i * (Dn + Dv), dkn + i * Dn, (size_t)Dn * sizeof(double));
    memcpy(dkv + i * (Dn + Dv) + Dn, dv + i * Dv, (size_t)Dv * sizeof(double));
  }
  /* kv = c W_ukv^T, c = RMSNorm(c_kv), [c_kv; kr] = x W_dkv^T */
  ref_gemm(1, 0, H * (Dn + Dv), dc, M, 1.0, dkv, H * (Dn + Dv), f.c, dc, 0.0, dw[5], dc);
  ref_gemm(0, 0, M, dc, H * (Dn + Dv), 1.0, dkv, H * (Dn + Dv), w[5], dc, 0.0, dc_, dc);
  ref_rmsnorm_backward(f.craw, w[4], dc_, M, dc, l->eps, dcraw, dw[4]);
  for (int64_t i = 0; i < M; i++) {
    memcpy(dckv + i * (dc + Dr), dcraw + i * dc, (size_t)dc * sizeof(double));
    memcpy(dckv + i * (dc + Dr) + dc, dkr + i * Dr, (size_t)Dr * sizeof(double));
  }
  ref_gemm(1, 0, dc + Dr, d, M, 1.0, dckv, dc + Dr, x, d, 0.0, dw[3], d);
  ref_gemm(0, 0, M, d, dc + Dr, 1.0, dckv, dc + Dr, w[3], d, 1.0, dxa, d);
  /* q = c_q W_uq^T, c_q = RMSNorm(x W_dq^T) */
  if (l->rq) {
    ref_gemm(1, 0, H * Dqk, l->rq, M, 1.0, dq, H * Dqk, f.cq, l->rq, 0.0, dw[2], l->rq);
    ref_gemm(0, 0, M, l->rq, H * Dqk, 1.0, dq, H * Dqk, w[2], l->rq, 0.0, dcq, l->rq);
    ref_rmsnorm_backward(f.cq_raw, w[1], dcq, M, l->rq, l->eps, dcqraw, dw[1]);
    ref_gemm(1, 0, l->rq, d, M, 1.0, dcqraw, l->rq, x, d, 0.0, dw[0], d);
    ref_gemm(0, 0, M, d, l->rq, 1.0, dcqraw, l->rq, w[0], d, 1.0, dxa, d);
  } else { /* q = x W_q^T */
    ref_gemm(1, 0, H * Dqk, d, M, 1.0, dq, H * Dqk, x, d, 0.0, dw[2], d);
    ref_gemm(0, 0, M, d, H * Dqk, 1.0, dq, H * Dqk, w[2], d, 1.0, dxa, d);
  }
  if (dx) memcpy(dx, dxa, (size_t)(M * d) * sizeof(double));
  double *tmp[] = {y, du, dgl, dO, dq, dkn, dkr, dv, dkv, dc_, dcraw, dckv, dcq, dcqraw, dxa};
  for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) free(tmp[i]);
  state_free(&f);
}
