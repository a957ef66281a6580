/* kda_common.cl: definitions shared by the KDA kernels (kda_fwd.cl, kda_bwd.cl,
 * kda_rec.cl, kda_tile*.cl). Built with -DKD=<K> -DVD=<V> (head dimensions, compile-time so
 * loops unroll and local tiles have fixed sizes), -DSTORE_BF16=0/1 for the inputs' storage
 * and -DOUT_BF16=0/1 for o. Arithmetic is fp32 everywhere.
 *
 * Its first section, the layouts, is plain C that the host includes too
 * (lib/kda/kda_internal.h); the rest is OpenCL C, read only by the device compiler. */

/* ---- Layouts, shared with the host ---------------------------------------------------------
 * The work-group sizes of the KDA kernels, and the block layouts and local memory of the tile
 * kernels as functions of the head sizes K, V and of a build's warps W, ring stages NS and
 * flags REGS (the tiles make A operands of accumulators in registers, TILE_HAS_A_FROM_C:
 * no fp32 scratch), SHFL (the tiles have lane shuffles, TILE_HAS_LANE_SHUFFLE: no scratch
 * for kda_tile_warp.cl) and STSM (the stmatrix staging of saved rows). The kernels declare
 * their blocks and local arrays with these sizes (and, on the portable tiles, fail to
 * build where the arrays they declare add up to another size); the host sizes buffers,
 * checks coverage and fits the copy rings with the same text. Counts are in the element
 * type named; _BYTES are bytes. */
#define KDA_CHUNK 16 /* rows of a chunk tile: with g >= -5 every exp(G_i - G_j) of a tile is
                        within e^+-80 */
#define KDA_VS 16    /* columns of V per state-pass work-group */
#define KDA_WG 256   /* work-items of the chunk kernels: 16 rows x 16 lanes */
#define KDA_TILE_PREP_WG 128  /* kda_tile_prep: 4 warps per (chunk, head) */
#define KDA_TILE_CHUNK_WG 256 /* kda_tile_bwd_chunk: 8 warps per (chunk, head) */
#define KDA_STEP_WG 256       /* kda_step: one work-group per (head, sequence) */

/* Padded rows of local tiles (elements): bf16 rows K or V wide (8 more: a 16-byte shift a
 * row spreads the banks), bf16 rows of 16-wide tiles (48 bytes: no bank conflicts), fp32
 * 16 x 16 tiles, and the fp32 rows of the portable tiles' S^T scratch. */
#define KDA_TILE_LDK(K) ((K) + 8)
#define KDA_TILE_LDV(V) ((V) + 8)
#define KDA_TILE_LD16 24
#define KDA_TILE_LDT 17
#define KDA_TILE_LDS(K) ((K) + 4)

/* The forward's per-(chunk, head) block (ushorts): bf16 W, Qg, Kd [3][16][K], Aqk [16][16],
 * then gl fp32 [K] (kda_tile.cl's TC_IW .. TC_OGL). */
#define KDA_TILE_FWD_BLOCK(K) (48 * (K) + 256 + 2 * (K))
/* The backward's per-(chunk, head) block (ushorts, its offsets KDA_BB_* below): the save
 * pass's part, the reverse pass's, then Tm and P fp32 [16][16] each. */
#define KDA_TILE_BWD_SAVE_PART(K) (34 * (K))
#define KDA_TILE_BWD_REV_PART(K) (50 * (K) + 256)
#define KDA_TILE_BWD_BLOCK(K) (KDA_TILE_BWD_SAVE_PART(K) + KDA_TILE_BWD_REV_PART(K) + 1024)

/* The bytes of the stmatrix staging of W warps' saved rows ([16][LDK] bf16 each), and of the
 * portable tiles' per-warp fp32 scratch (S^T [16][LDS], Vnew^T [16][16]). */
#define KDA_TILE_STSM_BYTES(K, W) (2 * (W) * 16 * KDA_TILE_LDK(K))
#define KDA_TILE_SCRATCH_BYTES(K, W) (4 * (W) * (16 * KDA_TILE_LDS(K) + 16 * KDA_CHUNK))

/* kda_tile_prep (kda_tile.cl): G [16][LDK] and E0, EL [K] fp32; Qp, Kp, Km, Bk [16][LDK] and
 * Bv [16][LDV] bf16; Akk, Tm [16][LDT], red [2][16][8], nq, nk, bt [16] fp32. */
#define KDA_TILE_PREP_LOCAL_BYTES(K, V)                                                       \
  (4 * (16 * KDA_TILE_LDK(K) + 2 * (K)) + 2 * (4 * 16 * KDA_TILE_LDK(K) + 16 * KDA_TILE_LDV(V)) + \
   4 * (2 * 16 * KDA_TILE_LDT + 2 * 16 * 8 + 3 * 16))

/* The 16-token state pass (kda_tile_state16.cl's kda_tile_state): a block staged in
 * uint4 [LOC4] (rows of W and Qg padded to LDK from uint4 0, the 16-wide rows of Kd^T from
 * KT4 and of Aqk from LA4 padded to LD16, gl packed from GL4), then per warp S^T [8][LDK] and
 * Vnew^T [8][LD16] bf16. */
#define KDA_TILE_S16_KT4(K) (32 * (KDA_TILE_LDK(K) / 8))
#define KDA_TILE_S16_LA4(K) (KDA_TILE_S16_KT4(K) + (K) * (KDA_TILE_LD16 / 8))
#define KDA_TILE_S16_GL4(K) (KDA_TILE_S16_LA4(K) + 16 * (KDA_TILE_LD16 / 8))
#define KDA_TILE_S16_LOC4(K) (KDA_TILE_S16_GL4(K) + (K) / 4)
#define KDA_TILE_STATE16_LOCAL_BYTES(K, W)                                                    \
  (16 * KDA_TILE_S16_LOC4(K) + 2 * (W) * 8 * (KDA_TILE_LDK(K) + KDA_TILE_LD16))

/* The register-state pass (kda_tile_state.cl): a ring of NS stages (uint4), each a forward
 * block and the work-group's U^T rows (16 columns of V a warp, fp32 [16][16]); the portable
 * tiles' scratch; the staging of the saved rows with STSM. */
#define KDA_TILE_S64_U4(W) ((W) * 16 * KDA_CHUNK / 4)
#define KDA_TILE_S64_STAGE4(K, W) (KDA_TILE_FWD_BLOCK(K) / 8 + KDA_TILE_S64_U4(W))
#define KDA_TILE_STATE64_LOCAL_BYTES(K, W, NS, REGS, STSM)                                    \
  (16 * (NS) * KDA_TILE_S64_STAGE4(K, W) + ((REGS) ? 0 : KDA_TILE_SCRATCH_BYTES(K, W)) +       \
   ((STSM) ? KDA_TILE_STSM_BYTES(K, W) : 0))

/* The backward's state passes (kda_tile_bwd.cl; kda_tile_states and the reverse pass, the
 * larger): a ring of NS reverse parts of a block, W warps' dO^T [16][LD16] bf16, the
 * portable tiles' scratch, the staging of the saved rows with STSM. */
#define KDA_TILE_BWD_STATES_LOCAL_BYTES(K, W, NS, REGS, STSM)                                 \
  (2 * (NS) * KDA_TILE_BWD_REV_PART(K) + 2 * (W) * 16 * KDA_TILE_LD16 +                        \
   ((REGS) ? 0 : KDA_TILE_SCRATCH_BYTES(K, W)) + ((STSM) ? KDA_TILE_STSM_BYTES(K, W) : 0))

/* kda_tile_bwd_chunk (kda_tile_bwd_chunk.cl), per (chunk, head) of a work-group: a bf16 pool
 * shared by step 1 (each warp's ring of NS stages of S and dS [16][LD16], dO [16][LDV],
 * Vnew^T [V][LD16]) and step 2 (five [16][LDK] factors, one [16][LDV]); dVnew [16][LDV]
 * bf16; six fp32 [16][LDT] matrices; reductions [3][8][16], dgl [K], beta [16] fp32; the
 * portable tiles' per-warp scratch [8][16][LDT] fp32. */
#define KDA_TILE_CHUNK_RING(NS) ((NS) * 2 * 16 * KDA_TILE_LD16)
#define KDA_TILE_CHUNK_POOL1(K, V, NS)                                                         \
  ((KDA_TILE_CHUNK_WG / 32) * KDA_TILE_CHUNK_RING(NS) + 16 * KDA_TILE_LDV(V) + (V) * KDA_TILE_LD16)
#define KDA_TILE_CHUNK_POOL2(K, V) (5 * 16 * KDA_TILE_LDK(K) + 16 * KDA_TILE_LDV(V))
#define KDA_TILE_CHUNK_POOL(K, V, NS)                                                          \
  (KDA_TILE_CHUNK_POOL1(K, V, NS) > KDA_TILE_CHUNK_POOL2(K, V) ? KDA_TILE_CHUNK_POOL1(K, V, NS) \
                                                               : KDA_TILE_CHUNK_POOL2(K, V))
#define KDA_TILE_CHUNK_LOCAL_BYTES(K, V, NS, SHFL)                                             \
  (2 * KDA_TILE_CHUNK_POOL(K, V, NS) + 2 * 16 * KDA_TILE_LDV(V) +                              \
   4 * (6 * 16 * KDA_TILE_LDT + 3 * (KDA_TILE_CHUNK_WG / 32) * 16 + (K) + 16) +                \
   ((SHFL) ? 0 : 4 * (KDA_TILE_CHUNK_WG / 32) * 16 * KDA_TILE_LDT))

/* ---- OpenCL C from here on ----------------------------------------------------------------- */
#ifdef __OPENCL_VERSION__
#ifndef KD
#error "KD (the key dimension) must be defined"
#endif
#ifndef VD
#error "VD (the value dimension) must be defined"
#endif

#define CH KDA_CHUNK /* rows of a chunk tile */
#define VS KDA_VS    /* columns of V per state-pass work-group */
#define L2_EPS 1e-6f /* x / sqrt(sum x^2 + 1e-6): transformers' Kimi Linear l2norm, the same form */

/* Builds only where cond (a constant expression) holds: the layouts above checked against a
 * kernel's own arrays, once per kernel. */
#define KDA_LAYOUT_CHECK(cond) typedef char kda_layout_check_[(cond) ? 1 : -1]

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
 * in [lb, 0]; or the unbounded -ea softplus(z + b), Kimi Linear's form. That is exactly
 * transformers' KimiLinearForgetGate (5.25): -exp(A_log) * softplus(z + dt_bias), its
 * softplus x for x > 20 else log(1 + e^x); ours, x + log1p(e^-x) for x > 0, differs from x
 * by under e^-20 < ulp(20) / 900 there and is the same function below (log1p: accurate
 * where e^x is tiny). A_log per head, dt_bias per head and channel, as there. The chunked
 * forward takes the unbounded gate through kda_fwd_pairwise.cl (the anchored factors of
 * kda_tiles below would overflow), the backward through kda_bwd.cl built with -DKDA_UNB=1,
 * the tile forward through kda_tile.cl built with -DTC_UNB=1. */
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
#define KDA_BB_SAVE KDA_TILE_BWD_SAVE_PART(KD) /* ushorts of the save pass's part */
#define KDA_BB_R0 KDA_BB_SAVE
#define KDA_BB_R1 (KDA_BB_R0 + 16 * KD)
#define KDA_BB_R2 (KDA_BB_R1 + 16 * KD)
#define KDA_BB_R3 (KDA_BB_R2 + 16 * KD)
#define KDA_BB_R4 (KDA_BB_R3 + 256)
#define KDA_BB_REND (KDA_BB_R4 + 2 * KD) /* the end of the reverse pass's part */
#define KDA_BB_TM KDA_BB_REND              /* Tm [16][16] fp32, for kda_tile_bwd_chunk */
#define KDA_BB_PM (KDA_BB_TM + 512)        /* P = Kp Km^T (c < r, else 0) [16][16] fp32 */
#define KDA_BB_SIZE (KDA_BB_PM + 512)
#if KDA_BB_S2 + 2 * KD != KDA_BB_SAVE || KDA_BB_REND - KDA_BB_SAVE != KDA_TILE_BWD_REV_PART(KD) || \
    KDA_BB_SIZE != KDA_TILE_BWD_BLOCK(KD)
#error "the backward's block offsets disagree with its layout (KDA_TILE_BWD_*)"
#endif

#define NM ((KD + 15) / 16) /* key columns per work-item: d = lane + 16 m */

/* The state passes' shared parts (kda_fwd.cl's kda_state, kda_bwd.cl's kda_state_bwd): one
 * work-group of KDA_WG work-items per (sequence, head, VS columns of V from j0) walks the
 * chunks with a slice S [KD][VS] of the state, or of its gradient, in local memory, the next
 * chunk's tiles travelling through registers. */
#define NPF ((CH * KD + KDA_WG - 1) / KDA_WG) /* tile elements per work-item */

/* S from the [KD, VD] state at rows row0.. of src (element off onwards), where has; zero
 * where not and past VD. */
inline void kda_slice_load(__local float (*S)[VS], __global const float *src, ulong off, int has,
                           ulong row0, int j0, int lid)
{
  for (int e = lid; e < KD * VS; e += KDA_WG) {
    int d = e / VS, jc = e % VS;
    S[d][jc] = has && j0 + jc < VD ? src[off + (row0 + d) * VD + j0 + jc] : 0.0f;
  }
}

/* S into the [KD, VD] state at rows row0.. of dst (element off onwards), columns below VD. */
inline void kda_slice_store(__global float *dst, ulong off, ulong row0, __local float (*S)[VS], int j0,
                            int lid)
{
  for (int e = lid; e < KD * VS; e += KDA_WG) {
    int d = e / VS, jc = e % VS;
    if (j0 + jc < VD) dst[off + (row0 + d) * VD + j0 + jc] = S[d][jc];
  }
}

/* A chunk's tiles, registers -> local memory, between two barriers: this work-item's share
 * of W, Qg and Kd [CH][KD] (pw, pq, pk: NPF elements each), its entry of Aqk (pa, at row
 * lid / 16, column lid % 16) and of gl (pg, lid < KD). */
inline void kda_stage_tiles(__local float (*Wl)[KD], __local float (*Ql)[KD], __local float (*Kl)[KD],
                            __local float (*Al)[CH + 1], __local float *gll, const float *pw,
                            const float *pq, const float *pk, float pa, float pg, int lid)
{
  for (int p = 0; p < NPF; p++) {
    const int e = lid + p * KDA_WG;
    if (e < CH * KD) {
      Wl[e / KD][e % KD] = pw[p];
      Ql[e / KD][e % KD] = pq[p];
      Kl[e / KD][e % KD] = pk[p];
    }
  }
  Al[lid >> 4][lid & 15] = pa;
  if (lid < KD) gll[lid] = pg;
}

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

/* The rows of one (chunk, head) on the 16 x 16 work-group (kda_tiles below and kda_fwd_pairwise.cl's
 * kda_prep_pairwise; every work-item calls it): work-item (r, lane) loads row r's q, k
 * (columns d = lane + 16 m, zero past len) into Qr, Kr [CH][KD] and its gates into Gr
 * [CH][KD], as log-decays g (0 past len) or, with decay, as e^g (1 past len); then the L2
 * norms' reciprocals nq, nk and the sigmoid of beta bt [CH], from fixed partials in red. On
 * return nq and bt are visible to all, nk and Qr, Kr, Gr only after the caller's next barrier. */
inline void kda_rows_load(__global const store_t *q, ulong qo, __global const store_t *k, ulong ko,
                          __global const store_t *z, ulong zo, __global const store_t *bl, ulong bo,
                          __global const float *dtb, ulong dto, float ea, int h, int H, ulong tok,
                          int len, float lb, int unbounded, int decay,
                          __local float (*Qr)[KD], __local float (*Kr)[KD], __local float (*Gr)[KD],
                          __local float (*red)[CH + 1], __local float *nq, __local float *nk,
                          __local float *bt)
{
  const int lid = (int)get_local_id(0), r = lid >> 4, lane = lid & 15, valid = r < len;
  const ulong rk = (tok * (ulong)H + (ulong)h) * KD;
  float sq = 0.0f, sk = 0.0f;
  for (int m = 0; m < NM; m++) {
    const int d = lane + 16 * m;
    if (d >= KD) break;
    float qv = valid ? LOAD(q, qo + rk + d) : 0.0f, kv = valid ? LOAD(k, ko + rk + d) : 0.0f;
    Qr[r][d] = qv;
    Kr[r][d] = kv;
    sq += qv * qv;
    sk += kv * kv;
    if (decay)
      Gr[r][d] = valid ? exp(kda_gate(LOAD(z, zo + rk + d), ea, dtb[dto + (ulong)h * KD + d], lb, unbounded)) : 1.0f;
    else
      Gr[r][d] = valid ? kda_gate(LOAD(z, zo + rk + d), ea, dtb[dto + (ulong)h * KD + d], lb, unbounded) : 0.0f;
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
  const int lid = (int)get_local_id(0), r = lid >> 4, lane = lid & 15;
  /* Raw q, k and the gate g (in Km for now); the norms. */
  kda_rows_load(q, qo, k, ko, z, zo, bl, bo, dtb, dto, ea, h, H, tok, len, lb, unbounded, 0, Qp, Kp, Km,
                red, nq, nk, bt);
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

#endif /* __OPENCL_VERSION__ */
