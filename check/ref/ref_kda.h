/* Double-precision reference of KDA (Kimi Delta Attention): the token loop of
 * shared/spec/KERNELS.md with the gate, the L2 normalisation of q and k and the sigmoid of
 * beta inside, its analytic backward, and the causal short convolution with SiLU. */
#ifndef CLMOE_REF_KDA_H
#define CLMOE_REF_KDA_H

#include <stddef.h>
#include <stdint.h>

/* Shapes: q, k, z [B, T, H, K]; v [B, T, H, V]; beta [B, T, H]; A_log [H]; dt_bias [H, K];
 * states [N, H, K, V] where N = B, or the number of packed sequences when cu_seqlens
 * ([N + 1] offsets into T) is given (then B = 1). */
typedef struct ref_kda_shape {
  int64_t B, T, H, K, V;
  const int32_t *cu_seqlens; /* NULL: B sequences of T tokens */
  int64_t nseq;              /* N, only with cu_seqlens */
  double scale;              /* applied to o; usually 1/sqrt(K) */
  double lower_bound;        /* lb of the bounded gate, in [-5, 0) */
  int unbounded;             /* 1: g = -exp(A_log) softplus(z + dt_bias) */
} ref_kda_shape;

/* Number of sequences (N) and the token range [*t0, *t1) of sequence s in batch row *b. */
int64_t ref_kda_nseq(const ref_kda_shape *s);
void ref_kda_seq(const ref_kda_shape *s, int64_t seq, int64_t *b, int64_t *t0, int64_t *t1);

/* The gate g(z) and dg/dz for one channel. */
double ref_kda_gate(const ref_kda_shape *s, double z, double A_log, double dt_bias, double *dg_dz,
                    double *dg_dAlog);

/* o [B, T, H, V]; ht [N, H, K, V] (may be NULL); h0 may be NULL (zero state). */
void ref_kda_forward(const ref_kda_shape *s, const double *q, const double *k, const double *v,
                     const double *z, const double *beta, const double *A_log,
                     const double *dt_bias, const double *h0, double *o, double *ht);

/* Gradients of sum(o * dout) + sum(ht * dht) (dht may be NULL) with respect to every input:
 * dq, dk, dz [B, T, H, K], dv [B, T, H, V], dbeta [B, T, H], dA_log [H], ddt_bias [H, K],
 * dh0 [N, H, K, V] (dh0 may be NULL). */
void ref_kda_backward(const ref_kda_shape *s, const double *q, const double *k, const double *v,
                      const double *z, const double *beta, const double *A_log,
                      const double *dt_bias, const double *h0, const double *dout,
                      const double *dht, double *dq, double *dk, double *dv, double *dz,
                      double *dbeta, double *dA_log, double *ddt_bias, double *dh0);

/* Causal depthwise convolution of width W over time followed by SiLU, per sequence:
 * y[t, c] = silu(sum_{j<W} w[c, j] x[t - W + 1 + j, c]), inputs before a sequence's start
 * taken from its conv state [N, W - 1, C] (the last W - 1 inputs before it; NULL: zeros).
 * x, y [B, T, C]; w [C, W]. state_out [N, W - 1, C] (may be NULL) receives the last W - 1
 * inputs of each sequence, the decode state. */
void ref_short_conv(const ref_kda_shape *s, int64_t C, int64_t W, const double *x,
                    const double *w, const double *state_in, double *y, double *state_out);
/* Gradients of sum(y * dy): dx [B, T, C], dw [C, W], dstate_in [N, W - 1, C] (may be NULL). */
void ref_short_conv_backward(const ref_kda_shape *s, int64_t C, int64_t W, const double *x,
                             const double *w, const double *state_in, const double *dy,
                             double *dx, double *dw, double *dstate_in);

#endif
