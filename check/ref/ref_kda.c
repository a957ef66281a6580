/* Double-precision KDA reference: the token loop, its analytic backward, the short
 * convolution. Written for clarity; states are kept per token in the backward. */
#include "ref_kda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define L2_EPS 1e-6

int64_t ref_kda_nseq(const ref_kda_shape *s) { return s->cu_seqlens ? s->nseq : s->B; }

void ref_kda_seq(const ref_kda_shape *s, int64_t seq, int64_t *b, int64_t *t0, int64_t *t1)
{
  if (s->cu_seqlens) {
    *b = 0, *t0 = s->cu_seqlens[seq], *t1 = s->cu_seqlens[seq + 1];
  } else {
    *b = seq, *t0 = 0, *t1 = s->T;
  }
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

double ref_kda_gate(const ref_kda_shape *s, double z, double A_log, double dt_bias, double *dg_dz,
                    double *dg_dAlog)
{
  double ea = exp(A_log), x = z + dt_bias;
  if (s->unbounded) {
    double sp = x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    if (dg_dz) *dg_dz = -ea * sigmoid(x);
    if (dg_dAlog) *dg_dAlog = -ea * sp;
    return -ea * sp;
  }
  double sg = sigmoid(ea * x);
  if (dg_dz) *dg_dz = s->lower_bound * sg * (1.0 - sg) * ea;
  if (dg_dAlog) *dg_dAlog = s->lower_bound * sg * (1.0 - sg) * ea * x;
  return s->lower_bound * sg;
}

/* x / sqrt(|x|^2 + eps) over n values; returns the norm. */
static double l2norm(const double *x, int64_t n, double *out)
{
  double ss = 0.0;
  for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
  double nrm = sqrt(ss + L2_EPS);
  for (int64_t i = 0; i < n; i++) out[i] = x[i] / nrm;
  return nrm;
}

/* dx of the L2 normalisation: dx = dxn / n - x (x . dxn) / n^3. */
static void l2norm_backward(const double *x, double nrm, const double *dxn, int64_t n, double *dx)
{
  double dot = 0.0;
  for (int64_t i = 0; i < n; i++) dot += x[i] * dxn[i];
  for (int64_t i = 0; i < n; i++) dx[i] = dxn[i] / nrm - x[i] * dot / (nrm * nrm * nrm);
}

/* One token of the recurrence on S [K, V], in place; fills a (decay), u, the normalised
 * q and k and their norms. o_row may be NULL. */
static void token_step(const ref_kda_shape *s, int64_t h, const double *q, const double *k,
                       const double *v, const double *z, double beta_logit, const double *A_log,
                       const double *dt_bias, double *S, double *qn, double *kn, double *a,
                       double *u, double *beta, double *nq, double *nk, double *o_row)
{
  const int64_t K = s->K, V = s->V;
  *nq = l2norm(q, K, qn);
  *nk = l2norm(k, K, kn);
  *beta = sigmoid(beta_logit);
  for (int64_t i = 0; i < K; i++) {
    a[i] = exp(ref_kda_gate(s, z[i], A_log[h], dt_bias[h * K + i], NULL, NULL));
    for (int64_t j = 0; j < V; j++) S[i * V + j] *= a[i];
  }
  for (int64_t j = 0; j < V; j++) {
    double acc = 0.0;
    for (int64_t i = 0; i < K; i++) acc += kn[i] * S[i * V + j];
    u[j] = v[j] - acc;
  }
  for (int64_t i = 0; i < K; i++)
    for (int64_t j = 0; j < V; j++) S[i * V + j] += *beta * kn[i] * u[j];
  if (o_row)
    for (int64_t j = 0; j < V; j++) {
      double acc = 0.0;
      for (int64_t i = 0; i < K; i++) acc += qn[i] * S[i * V + j];
      o_row[j] = s->scale * acc;
    }
}

void ref_kda_forward(const ref_kda_shape *s, const double *q, const double *k, const double *v,
                     const double *z, const double *beta, const double *A_log,
                     const double *dt_bias, const double *h0, double *o, double *ht)
{
  const int64_t T = s->T, H = s->H, K = s->K, V = s->V;
  double *S = malloc((size_t)(K * V) * sizeof *S), *qn = malloc((size_t)K * sizeof *qn);
  double *kn = malloc((size_t)K * sizeof *kn), *a = malloc((size_t)K * sizeof *a);
  double *u = malloc((size_t)V * sizeof *u);
  for (int64_t seq = 0; seq < ref_kda_nseq(s); seq++) {
    int64_t b, t0, t1;
    ref_kda_seq(s, seq, &b, &t0, &t1);
    for (int64_t h = 0; h < H; h++) {
      const double *init = h0 ? h0 + (seq * H + h) * K * V : NULL;
      for (int64_t e = 0; e < K * V; e++) S[e] = init ? init[e] : 0.0;
      for (int64_t t = t0; t < t1; t++) {
        int64_t row = (b * T + t) * H + h;
        double bt, nq, nk;
        token_step(s, h, q + row * K, k + row * K, v + row * V, z + row * K, beta[row], A_log,
                   dt_bias, S, qn, kn, a, u, &bt, &nq, &nk, o + row * V);
      }
      if (ht) memcpy(ht + (seq * H + h) * K * V, S, (size_t)(K * V) * sizeof *S);
    }
  }
  free(S), free(qn), free(kn), free(a), free(u);
}

void ref_kda_backward(const ref_kda_shape *s, const double *q, const double *k, const double *v,
                      const double *z, const double *beta, const double *A_log,
                      const double *dt_bias, const double *h0, const double *dout,
                      const double *dht, double *dq, double *dk, double *dv, double *dz,
                      double *dbeta, double *dA_log, double *ddt_bias, double *dh0)
{
  const int64_t T = s->T, H = s->H, K = s->K, V = s->V, KV = K * V;
  memset(dA_log, 0, (size_t)H * sizeof *dA_log);
  memset(ddt_bias, 0, (size_t)(H * K) * sizeof *ddt_bias);
  int64_t maxlen = 0;
  for (int64_t seq = 0; seq < ref_kda_nseq(s); seq++) {
    int64_t b, t0, t1;
    ref_kda_seq(s, seq, &b, &t0, &t1);
    if (t1 - t0 > maxlen) maxlen = t1 - t0;
  }
  /* Per token of one (sequence, head): the state after the token (Sall[t + 1]), the one
   * before it (Sall[t]), and the token's intermediates. */
  double *Sall = malloc((size_t)((maxlen + 1) * KV) * sizeof *Sall);
  double *QN = malloc((size_t)(maxlen * K) * sizeof *QN), *KN = malloc((size_t)(maxlen * K) * sizeof *KN);
  double *A = malloc((size_t)(maxlen * K) * sizeof *A), *U = malloc((size_t)(maxlen * V) * sizeof *U);
  double *BT = malloc((size_t)(maxlen + 1) * sizeof *BT), *NQ = malloc((size_t)(maxlen + 1) * sizeof *NQ);
  double *NK = malloc((size_t)(maxlen + 1) * sizeof *NK);
  double *dS = malloc((size_t)KV * sizeof *dS), *dS1 = malloc((size_t)KV * sizeof *dS1);
  double *dqn = malloc((size_t)K * sizeof *dqn), *dkn = malloc((size_t)K * sizeof *dkn);
  double *du = malloc((size_t)V * sizeof *du);
  for (int64_t seq = 0; seq < ref_kda_nseq(s); seq++) {
    int64_t b, t0, t1;
    ref_kda_seq(s, seq, &b, &t0, &t1);
    for (int64_t h = 0; h < H; h++) {
      const double *init = h0 ? h0 + (seq * H + h) * KV : NULL;
      for (int64_t e = 0; e < KV; e++) Sall[e] = init ? init[e] : 0.0;
      for (int64_t t = t0; t < t1; t++) {
        int64_t row = (b * T + t) * H + h, l = t - t0;
        memcpy(Sall + (l + 1) * KV, Sall + l * KV, (size_t)KV * sizeof *Sall);
        token_step(s, h, q + row * K, k + row * K, v + row * V, z + row * K, beta[row], A_log,
                   dt_bias, Sall + (l + 1) * KV, QN + l * K, KN + l * K, A + l * K, U + l * V,
                   &BT[l], &NQ[l], &NK[l], NULL);
      }
      for (int64_t e = 0; e < KV; e++) dS[e] = dht ? dht[(seq * H + h) * KV + e] : 0.0;
      for (int64_t t = t1 - 1; t >= t0; t--) {
        int64_t row = (b * T + t) * H + h, l = t - t0;
        const double *St = Sall + (l + 1) * KV, *Sp = Sall + l * KV;
        const double *qn = QN + l * K, *kn = KN + l * K, *a = A + l * K, *u = U + l * V;
        const double *dov = dout + row * V;
        double bt = BT[l];
        /* o = scale S_t^T qn */
        for (int64_t i = 0; i < K; i++) {
          double acc = 0.0;
          for (int64_t j = 0; j < V; j++) {
            dS[i * V + j] += s->scale * qn[i] * dov[j];
            acc += St[i * V + j] * dov[j];
          }
          dqn[i] = s->scale * acc;
        }
        /* S_t = S1 + beta kn u^T */
        double db = 0.0;
        for (int64_t j = 0; j < V; j++) du[j] = 0.0;
        for (int64_t i = 0; i < K; i++) {
          double acc = 0.0;
          for (int64_t j = 0; j < V; j++) {
            acc += dS[i * V + j] * u[j];
            du[j] += bt * dS[i * V + j] * kn[i];
          }
          db += kn[i] * acc;
          dkn[i] = bt * acc;
        }
        /* u = v - S1^T kn, S1 = diag(a) S_prev */
        for (int64_t j = 0; j < V; j++) dv[row * V + j] = du[j];
        for (int64_t i = 0; i < K; i++) {
          double acc = 0.0, da = 0.0;
          for (int64_t j = 0; j < V; j++) {
            double s1 = a[i] * Sp[i * V + j];
            acc += s1 * du[j];
            dS1[i * V + j] = dS[i * V + j] - kn[i] * du[j];
            da += dS1[i * V + j] * Sp[i * V + j];
          }
          dkn[i] -= acc;
          double dgdz, dgda;
          ref_kda_gate(s, z[row * K + i], A_log[h], dt_bias[h * K + i], &dgdz, &dgda);
          double dg = da * a[i];
          dz[row * K + i] = dg * dgdz;
          ddt_bias[h * K + i] += dg * dgdz;
          dA_log[h] += dg * dgda;
          for (int64_t j = 0; j < V; j++) dS[i * V + j] = a[i] * dS1[i * V + j];
        }
        dbeta[row] = db * bt * (1.0 - bt);
        l2norm_backward(q + row * K, NQ[l], dqn, K, dq + row * K);
        l2norm_backward(k + row * K, NK[l], dkn, K, dk + row * K);
      }
      if (dh0) memcpy(dh0 + (seq * H + h) * KV, dS, (size_t)KV * sizeof *dS);
    }
  }
  free(Sall), free(QN), free(KN), free(A), free(U), free(BT), free(NQ), free(NK);
  free(dS), free(dS1), free(dqn), free(dkn), free(du);
}

/* Input tau of a sequence [t0, t1) in batch row b, channel c: from x inside the sequence,
 * from the conv state before it. */
static double conv_input(const ref_kda_shape *s, int64_t C, int64_t W, const double *x,
                         const double *state, int64_t seq, int64_t b, int64_t t0, int64_t tau,
                         int64_t c)
{
  if (tau >= t0) return x[(b * s->T + tau) * C + c];
  int64_t m = (W - 1) + (tau - t0); /* 0 .. W-2 */
  return state ? state[(seq * (W - 1) + m) * C + c] : 0.0;
}

void ref_short_conv(const ref_kda_shape *s, int64_t C, int64_t W, const double *x,
                    const double *w, const double *state_in, double *y, double *state_out)
{
  for (int64_t seq = 0; seq < ref_kda_nseq(s); seq++) {
    int64_t b, t0, t1;
    ref_kda_seq(s, seq, &b, &t0, &t1);
    for (int64_t c = 0; c < C; c++) {
      for (int64_t t = t0; t < t1; t++) {
        double pre = 0.0;
        for (int64_t j = 0; j < W; j++)
          pre += w[c * W + j] * conv_input(s, C, W, x, state_in, seq, b, t0, t - W + 1 + j, c);
        y[(b * s->T + t) * C + c] = pre * sigmoid(pre);
      }
      if (state_out)
        for (int64_t m = 0; m < W - 1; m++)
          state_out[(seq * (W - 1) + m) * C + c] =
              conv_input(s, C, W, x, state_in, seq, b, t0, t1 - (W - 1) + m, c);
    }
  }
}

void ref_short_conv_backward(const ref_kda_shape *s, int64_t C, int64_t W, const double *x,
                             const double *w, const double *state_in, const double *dy,
                             double *dx, double *dw, double *dstate_in)
{
  memset(dw, 0, (size_t)(C * W) * sizeof *dw);
  if (dstate_in) memset(dstate_in, 0, (size_t)(ref_kda_nseq(s) * (W - 1) * C) * sizeof *dstate_in);
  for (int64_t seq = 0; seq < ref_kda_nseq(s); seq++) {
    int64_t b, t0, t1;
    ref_kda_seq(s, seq, &b, &t0, &t1);
    for (int64_t t = t0; t < t1; t++)
      for (int64_t c = 0; c < C; c++) dx[(b * s->T + t) * C + c] = 0.0;
    for (int64_t c = 0; c < C; c++)
      for (int64_t t = t0; t < t1; t++) {
        double pre = 0.0;
        for (int64_t j = 0; j < W; j++)
          pre += w[c * W + j] * conv_input(s, C, W, x, state_in, seq, b, t0, t - W + 1 + j, c);
        double sg = sigmoid(pre);
        double dpre = dy[(b * s->T + t) * C + c] * (sg + pre * sg * (1.0 - sg));
        for (int64_t j = 0; j < W; j++) {
          int64_t tau = t - W + 1 + j;
          dw[c * W + j] += dpre * conv_input(s, C, W, x, state_in, seq, b, t0, tau, c);
          if (tau >= t0) dx[(b * s->T + tau) * C + c] += w[c * W + j] * dpre;
          else if (dstate_in) dstate_in[(seq * (W - 1) + (W - 1) + (tau - t0)) * C + c] += w[c * W + j] * dpre;
        }
      }
  }
}
