/* kda_common.cl: definitions shared by the KDA kernels (kda_fwd.cl, kda_bwd.cl,
 * kda_rec.cl). Built with -DKD=<K> -DVD=<V> (head dimensions, compile-time so loops
 * unroll and local tiles have fixed sizes), -DSTORE_BF16=0/1 for the inputs' storage and
 * -DOUT_BF16=0/1 for o. Arithmetic is fp32 everywhere. */
#ifndef KD
#error "KD (the key dimension) must be defined"
#endif
#ifndef VD
#error "VD (the value dimension) must be defined"
#endif

#define CH 16      /* rows of a chunk tile: with g >= -5 every exp(G_i - G_j) of a tile is within e^+-80 */
#define VS 16      /* columns of V per state-pass work-group */
#define KDA_WG 256 /* work-items of the chunk kernels: 16 rows x 16 lanes */
#define L2_EPS 1e-6f

#if defined(OUT_BF16) && OUT_BF16
typedef ushort out_t;
#define STORE_OUT(p, i, x) ((p)[i] = f32_to_bf16(x))
#else
typedef float out_t;
#define STORE_OUT(p, i, x) ((p)[i] = (x))
#endif

inline float kda_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

inline float kda_softplus(float x) { return x > 0.0f ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* The log-decay of one channel from its gate logit z: bounded lb * sigmoid(ea (z + b)),
 * in [lb, 0]; or the unbounded -ea softplus(z + b) (only to show what the bound fixes). */
inline float kda_gate(float z, float ea, float b, float lb, int unbounded)
{
  float x = z + b;
  return unbounded ? -ea * kda_softplus(x) : lb * kda_sigmoid(ea * x);
}

/* (dg/dz, dg/dA_log) of kda_gate; dg/d(dt_bias) equals dg/dz. */
inline float2 kda_gate_grads(float z, float ea, float b, float lb, int unbounded)
{
  float x = z + b;
  if (unbounded) return (float2)(-ea * kda_sigmoid(x), -ea * kda_softplus(x));
  float s = kda_sigmoid(ea * x), d = lb * s * (1.0f - s) * ea;
  return (float2)(d, d * x);
}

/* Chunk table entries: (first token, rows) of a chunk in the flattened [B*T] token axis;
 * sequence table entries: (first chunk, chunks) of a sequence. */
