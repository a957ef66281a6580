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

/* The backward's per-(chunk, head) block of factors (ushorts), written by kda_tile.cl's prep
 * built with -DTC_BWD=1 and read by kda_tile_bwd.cl's two state passes: B operands of
 * tile_mma in fragment order (kda_tile.cl's TC_FO), then gl. The save pass's part:
 *   S0  -W     [2 token tiles][KD / 16 k-steps]  B[k][n] = -W[8 nt + n][16 ks + k]
 *   S1  Kd     [KD / 8 column tiles]             B[k][n] = Kd[k][8 nt + n]
 *   S2  gl     [KD] fp32
 * then the reverse pass's:
 *   R0  Kd^T   [2 token tiles][KD / 16 k-steps]  B[k][n] = Kd[8 nt + n][16 ks + k]
 *   R1  Qg     [KD / 8 column tiles]             B[k][n] = Qg[k][8 nt + n]
 *   R2  -W     [KD / 8 column tiles]             B[k][n] = -W[k][8 nt + n]
 *   R3  Aqk    [2 token tiles]                   B[k][n] = Aqk[k][8 nt + n]
 *   R4  gl     [KD] fp32 again,
 * and for kda_tile_bwd_chunk.cl's kda_tile_bwd_chunk Tm = (I + Akk)^-1 and P (fp32, row-major). */
#define KDA_BB_S0 0
#define KDA_BB_S1 (16 * KD)
#define KDA_BB_S2 (32 * KD)
#define KDA_BB_SAVE (34 * KD) /* ushorts of the save pass's part */
#define KDA_BB_R0 KDA_BB_SAVE
#define KDA_BB_R1 (KDA_BB_R0 + 16 * KD)
#define KDA_BB_R2 (KDA_BB_R1 + 16 * KD)
#define KDA_BB_R3 (KDA_BB_R2 + 16 * KD)
#define KDA_BB_R4 (KDA_BB_R3 + 256)
#define KDA_BB_REND (KDA_BB_R4 + 2 * KD) /* the end of the reverse pass's part */
#define KDA_BB_TM KDA_BB_REND              /* Tm [16][16] fp32, for kda_tile_bwd_chunk */
#define KDA_BB_PM (KDA_BB_TM + 512)        /* P = Kp Km^T (c < r, else 0) [16][16] fp32 */
#define KDA_BB_SIZE (KDA_BB_PM + 512)

#define NM ((KD + 15) / 16) /* key columns per work-item: d = lane + 16 m */

/* Tm = (I + Akk)^-1 of a strictly lower Akk [CH][CH + 1] (fp32 forward substitution), one
 * column per work-item lid < CH: column cc needs only the earlier rows of column cc. */
inline void kda_unit_lower_inverse(__local float (*Akk)[CH + 1], __local float (*Tm)[CH + 1], int lid)
{
  if (lid >= CH) return;
  const int cc = lid;
  for (int i = 0; i < CH; i++) {
    float t = i == cc ? 1.0f : 0.0f;
    if (i > cc) {
      float s = 0.0f;
      for (int m = cc; m < i; m++) s += Akk[i][m] * Tm[m][cc];
      t = -s;
    }
    Tm[i][cc] = t;
  }
}

/* The tiles of one (chunk, head), shared by kda_prep and kda_bwd_chunk; every work-item
 * of the 16 x 16 work-group calls it. Loads q, k and the gate of the chunk's rows (zero
 * past len) and the sigmoid of beta, forms the L2 norms, the cumulative gate G and the
 * anchored factors with G0 the first row:
 *   Qp = qn e^(G - G0),  Kp = kn e^(G - G0)  (<= 1),   Km = kn e^(G0 - G)  (<= e^75),
 * then P = Kp Km^T and Akk = beta P (c < r), Aqk = scale Qp Km^T (c <= r; skipped when
 * Aqk is 0), and Tm = (I + Akk)^-1 by forward substitution, one column per work-item.
 * Work-item (r, lane) keeps its entries (d = lane + 16 m) of qn, kn, e^(G - G0) and
 * e^(G0 - G) in qn, kn, up, dn. On return Tm and everything else are visible to all. */
inline void kda_tiles(__global const store_t *q, ulong qo, __global const store_t *k, ulong ko,
                      __global const store_t *z, ulong zo, __global const store_t *bl, ulong bo,
                      __global const float *dtb, ulong dto, float ea, int h, int H, ulong tok,
                      int len, float scale, float lb, int unbounded,
                      __local float (*Qp)[KD], __local float (*Kp)[KD], __local float (*Km)[KD],
                      __local float *G0, __local float *E0, __local float *EL,
                      __local float (*red)[CH + 1], __local float *nq, __local float *nk,
                      __local float *bt, __local float (*Pm)[CH + 1], __local float (*Akk)[CH + 1],
                      __local float (*Aqk)[CH + 1], __local float (*Tm)[CH + 1],
                      float *qn, float *kn, float *up, float *dn)
{
  const int lid = (int)get_local_id(0), r = lid >> 4, lane = lid & 15, valid = r < len;
  const ulong rk = (tok * (ulong)H + (ulong)h) * KD;
  /* Raw q, k and the gate g (in Km for now); the squared norms by fixed partials. */
  float sq = 0.0f, sk = 0.0f;
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d >= KD) break;
    float qv = valid ? LOAD(q, qo + rk + d) : 0.0f, kv = valid ? LOAD(k, ko + rk + d) : 0.0f;
    Qp[r][d] = qv;
    Kp[r][d] = kv;
    sq += qv * qv;
    sk += kv * kv;
    Km[r][d] = valid ? kda_gate(LOAD(z, zo + rk + d), ea, dtb[dto + (ulong)h * KD + d], lb, unbounded) : 0.0f;
  }
  red[r][lane] = sq;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == 0) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += red[r][l];
    nq[r] = 1.0f / sqrt(s + L2_EPS);
    bt[r] = valid ? kda_sigmoid(LOAD(bl, bo + tok * (ulong)H + (ulong)h)) : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  red[r][lane] = sk;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == 0) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += red[r][l];
    nk[r] = 1.0f / sqrt(s + L2_EPS);
  }
  /* In-chunk inclusive cumulative sum of g, one column per work-item. */
  for (int d = lid; d < KD; d += KDA_WG) {
    float run = 0.0f;
    for (int i = 0; i < CH; i++) {
      run += Km[i][d];
      Km[i][d] = run;
    }
    G0[d] = Km[0][d];
    E0[d] = exp(Km[0][d]);
    EL[d] = exp(Km[len - 1][d] - Km[0][d]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* Anchored factors, normalising q and k on the way. */
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d >= KD) break;
    const float e = Km[r][d] - G0[d]; /* G_r - G0 in [-75, 0] */
    up[m] = exp(e);
    /* exp(G0 - G_r) is exp(-e) bit for bit. Written as exp(-e), Intel's CPU compiler
     * (2026.2) returned another value for dn after the barriers below (docs/conformance.md). */
    dn[m] = exp(G0[d] - Km[r][d]);
    qn[m] = Qp[r][d] * nq[r];
    kn[m] = Kp[r][d] * nk[r];
    Qp[r][d] = qn[m] * up[m];
    Kp[r][d] = kn[m] * up[m];
    Km[r][d] = kn[m] * dn[m];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* The tile products; (r, lane) is one entry of each. */
  {
    float a = 0.0f, b = 0.0f;
    for (int d = 0; d < KD; d++) {
      a += Kp[r][d] * Km[lane][d];
      if (Aqk) b += Qp[r][d] * Km[lane][d];
    }
    if (Pm) Pm[r][lane] = lane < r ? a : 0.0f;
    Akk[r][lane] = lane < r ? bt[r] * a : 0.0f;
    if (Aqk) Aqk[r][lane] = lane <= r ? scale * b : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  kda_unit_lower_inverse(Akk, Tm, lid);
  barrier(CLK_LOCAL_MEM_FENCE);
}
