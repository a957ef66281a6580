/* Double-precision reference of Gated MLA (shared/spec/MODEL.md section 3): the attention
 * with a materialised causal softmax per sequence and head, its analytic backward, and the
 * whole layer (projections, RMSNorms, sigmoid gate) forward and backward. Written for
 * clarity, independently of the library's kernels. All arrays are row-major. */
#ifndef CLMOE_REF_REF_MLA_H
#define CLMOE_REF_REF_MLA_H

#include <stddef.h>
#include <stdint.h>

/* Sequences: with cu_seqlens ([nseq + 1] offsets into T, B = 1) nseq packed sequences,
 * else B sequences of T tokens. M = B T tokens. */
typedef struct ref_mla_shape {
  int64_t B, T, H, Dn, Dr, Dv;
  const int32_t *cu_seqlens;
  int64_t nseq;
  double scale; /* softmax scale, usually 1/sqrt(Dn + Dr) */
  int o_bf16;   /* backward only: D_i = dO_i . o_i with o rounded to bf16, as a kernel that
                   reads a bf16 o computes it (else the exact D_i = sum_j P_ij dP_ij) */
} ref_mla_shape;

/* Number of sequences and the token range [*t0, *t1) of sequence n (over the M tokens). */
int64_t ref_mla_nseq(const ref_mla_shape *s);
void ref_mla_seq(const ref_mla_shape *s, int64_t n, int64_t *t0, int64_t *t1);

/* q [M, H, Dn + Dr], kn [M, H, Dn], kr [M, Dr], v [M, H, Dv] -> o [M, H, Dv], lse [M, H]
 * (lse may be NULL): o_i = sum_{j <= i} softmax_j(scale q_i . [kn_j; kr_j]) v_j. */
void ref_mla_attention(const ref_mla_shape *s, const double *q, const double *kn, const double *kr,
                       const double *v, double *o, double *lse);
/* Gradients of sum(o * dout): dq, dkn, dkr (summed over heads), dv, shaped as the inputs. */
void ref_mla_attention_backward(const ref_mla_shape *s, const double *q, const double *kn,
                                const double *kr, const double *v, const double *dout, double *dq,
                                double *dkn, double *dkr, double *dv);

/* The layer. Weights in clmoe_mla_weights' order and layouts ([out, in]):
 * w[0] w_dq [rq, d], w[1] q_norm [rq], w[2] w_uq [H (Dn + Dr), rq], w[3] w_dkv [dc + Dr, d],
 * w[4] kv_norm [dc], w[5] w_ukv [H (Dn + Dv), dc], w[6] w_g [H Dv, d], w[7] w_o [d, H Dv].
 * rq 0: q = x W_q^T with W_q [H (Dn + Dr), d] in w[2], w[0] and w[1] absent (0 elements);
 * ungated: y = o W_o^T, w[6] absent. */
typedef struct ref_mla_layer {
  ref_mla_shape s; /* sequences, heads and head sizes, scale */
  int64_t d, rq, dc;
  double eps;      /* RMSNorm epsilon */
  int cache_bf16;  /* forward only: c and k_r rounded to bf16 before use, as a decode step
                      sees them in a bf16 cache */
  int ungated;     /* 1: no output gate */
} ref_mla_layer;
#define REF_MLA_NWEIGHTS 8
/* Number of elements of weight i. */
int64_t ref_mla_weight_numel(const ref_mla_layer *l, int i);

/* y [M, d] from x [M, d]. */
void ref_mla_forward(const ref_mla_layer *l, const double *const w[REF_MLA_NWEIGHTS], const double *x, double *y);
/* dx [M, d] (may be NULL) and dw[i] (each overwritten) of sum(y * dy). */
void ref_mla_backward(const ref_mla_layer *l, const double *const w[REF_MLA_NWEIGHTS], const double *x,
                      const double *dy, double *dx, double *const dw[REF_MLA_NWEIGHTS]);

#endif
