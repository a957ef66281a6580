/* kda_tile.cl: the KDA forward on the tile interface, in the two kernels of the
 * FlashKDA split. Built as "tile+kda_common+kda_tile+kda_tile_state16+kda_tile_state" with
 * kda_common's -DKD -DVD -DSTORE_BF16 -DOUT_BF16 (KD, VD multiples of 16, <= 128), the tile
 * implementation's options, -DTC_NW (warps of a state work-group) and -DTC_PF (chunks of
 * look-ahead). Every matrix product is tile_mma (D[16 x 8] += A[16 x 16] B[16 x 8], bf16
 * operands, fp32 accumulators); chunks are the 16-token tiles of kda_fwd.cl (same chunk
 * table, same anchored factors).
 *
 * -DTC_STEP (16 or 64) picks the state pass: 16, the kda_tile_state of kda_tile_state16.cl;
 * 64, the one of kda_tile_state.cl (both appended to this file in the program), with the
 * prep's outputs laid out for it (see TC_IW below). -DTC_BWD=1 builds the prep alone for the
 * backward (lib/kda/kda_tile_bwd.c), its outputs in the backward's block (kda_common.cl's
 * KDA_BB_*); -DTC_SAVE=1 has the forward's prep write that block too (bbg), for a later
 * backward.
 *
 * kda_tile_prep, token-parallel (one work-group of 4 warps per (chunk, head)): gate (bounded;
 *   -DTC_UNB=1 the unbounded gate, see below), L2 norms, sigmoid of beta, in-chunk cumulative
 *   gate G, then with G0 = G of the first row
 *     Akk = beta Kp Km^T (c < r),  Aqk = scale Qp Km^T (c <= r),
 *     Kp = kn e^(G - G0) (<= 1),   Qp = qn e^(G - G0),   Km = kn e^(G0 - G) (<= e^75),
 *   Tm = (I + Akk)^-1 (fp32 forward substitution), W = Tm (beta e^G kn), U = Tm (beta v),
 *   and the state pass's factors Qg = scale e^G qn, Kd = e^(G_last - G) kn, gl = e^G_last.
 *   Output per (chunk, head): one block of bf16 W, Qg [2][16][KD], Kd^T [KD][16] (the A
 *   operand of the state update), Aqk [16][16], then gl fp32 [KD] (TC_BLK ushorts); U fp32
 *   [chunks, H, 16, VD] apart (its error would add directly to Vnew, so it keeps fp32).
 *   (The TC_STEP 16 layout; TC_STEP 64 reorders both, same sizes: TC_IW below.)
 * kda_tile_state with TC_STEP 16, head-parallel (work-group: TC_NW warps of one (sequence,
 *   head), each warp owning 8 columns of V): walks the chunks with its columns of the
 *   state S [KD, 8] in fp32 accumulators (KD / 16 tiles per lane) and a bf16 copy in local
 *   memory (the B operand of the next chunk):
 *     Vnew = U - W S,  O = Qg S + Aqk Vnew,  S = gl (.) S + Kd^T Vnew.
 *   The next chunks' blocks travel through registers while the current one computes.
 *
 * -DTC_UNB=1: the prep for the unbounded gate (Kimi Linear's -exp(A_log) softplus(z + dt_bias)),
 *   same outputs, finite for any gate values. A token's decay reaches -50 and beyond, so
 *   e^(G0 - G) overflows within a chunk. Every factor is then the exponential of a sum of
 *   gates (<= 0, so <= 1) taken from the raw gates in local memory, never a difference of
 *   cumulative sums: Qg, W from e^G, Kd from e^(G_last - G), gl = e^G_last. The pair factors
 *   e^(G_r - G_c) (c <= r) of Akk and Aqk come from products whose two operands both lie in
 *   [0, 1], anchored between the pair: for the highest bit hh in which r and c differ (r has
 *   it), m = (r & ~(2 hh - 1)) + hh, c < m <= r, and
 *     e^(G_r - G_c) = e^(g_(m+1) + .. + g_r) e^(g_(c+1) + .. + g_m).
 *   One tile_mma product per level hh = 8, 4, 2, 1 (rows r with bit hh take the first factor,
 *   columns c without it the second, zero otherwise), one for the diagonal (factor 1), each
 *   entry selected from its own level. A chunk whose decay from its first row to its last,
 *   G0 - G_last, stays within 75 on every channel (the bounded gate's range) takes one product
 *   anchored at its first row instead, as the bounded prep. Where an operand underflows the
 *   exact product is smaller still (below bf16's least normal, 2^-126). */
#ifndef TC_UNB
#define TC_UNB 0
#endif
#ifndef TC_NW
#define TC_NW 2
#endif
#ifndef TC_STEP
#define TC_STEP 16
#endif
#if KD % 16 || VD % 16
#error "kda_tile needs KD and VD multiples of 16"
#endif

/* Diagnostic builds only (-DTC_DIAG=bits, wrong results): 16-token pass: 1 no block loads,
 * 2 no staging stores, 4 no output stores, 8 no bf16 copy of S; prep: 16 no W, Qg, Kd
 * stores, 32 no U stores, 64 no inverse. */
#ifndef TC_DIAG
#define TC_DIAG 0
#endif
/* (sizes from kda_common.cl's layouts, which the host reads too) */
#define TC_PREP_WG KDA_TILE_PREP_WG   /* kda_tile_prep: 4 warps */
#define TC_LDK KDA_TILE_LDK(KD)       /* padded bf16 row of local K-wide tiles (bank spread) */
#define TC_LDV KDA_TILE_LDV(VD)
#define TC_LDA KDA_TILE_LD16          /* padded bf16 row of 16-wide local tiles */
#define TC_LDT KDA_TILE_LDT           /* fp32 16 x 16 tiles */
#define TC_BLK KDA_TILE_FWD_BLOCK(KD) /* ushorts per (chunk, head) block */
#define TC_BLK4 (TC_BLK / 8)            /* ... in uint4 */
#define TC_NMT (KD / 16)                /* 16-row tiles of S */
#define TC_AL __attribute__((aligned(16)))

/* Where the prep puts entry (row r, column d) of W, Qg (r < 16, d < KD), Kd (the same
 * indices; stored transposed for TC_STEP 16), Aqk (r, c < 16) in a block (ushorts), and of U
 * (r < 16, column c < VD) in its [16 x VD] fp32 slice. TC_STEP 64 stores B operands of
 * tile_mma in fragment order (TC_FO: a 16 x 8 B[k][n] as 32 lanes x 4 ushorts, lane
 * 4 n + (k % 8) / 2 holding B[k][n] at (k / 8) * 2 + k % 2: the mma.sync fragment, so a
 * lane loads its fragment as one uint2), -W instead of W, and U transposed:
 *   W^T, Qg^T: fragments [2 token tiles][KD / 16 k-steps], B[k][n] = W[8 nt + n][16 ks + k]
 *   Kd:        fragments [KD / 8 column tiles],             B[k][n] = Kd[k][8 nt + n]
 *   Aqk^T:     fragments [2 token tiles],                   B[k][n] = Aqk[8 nt + n][k]
 *   U^T [VD][16]. */
/* Fragment order (TC_STEP 64 and TC_BWD): entry (row r, column d) of a [16 x KD] factor X
 * as B[k][n] = X[8 nt + n][16 ks + k] (TC_FW: fragments [2][KD / 16]) or as
 * B[k][n] = X[k][8 nt + n] (TC_FK: fragments [KD / 8]). */
#define TC_FO(k, n) (((n) << 4) | ((((k) & 7) >> 1) << 2) | (((k) >> 3) << 1) | ((k) & 1))
#define TC_FW(r, d) ((((r) >> 3) * (KD / 16) + ((d) >> 4)) * 128 + TC_FO((d) & 15, (r) & 7))
#define TC_FK(r, d) (((d) >> 3) * 128 + TC_FO(r, (d) & 7))
#if defined(TC_SAVE) && TC_SAVE && TC_STEP != 64
#error "TC_SAVE needs TC_STEP 64 (U^T, as the backward reads it)"
#endif
#if (defined(TC_BWD) && TC_BWD) || (defined(TC_SAVE) && TC_SAVE)
#define TC_BB 1
/* The backward's block at bb (kda_common.cl's KDA_BB_*: each factor where its passes read
 * it), written by -DTC_BWD=1 (the prep alone for the backward, lib/kda/kda_tile_bwd.c) and by
 * -DTC_SAVE=1 (the forward's prep keeping it for a later backward, besides its own block).
 * The save pass's part (S0..S2) only with TC_BWD: a forward that keeps the blocks keeps the
 * states too (its state pass writes them), so no save pass reads that part then. */
#if defined(TC_BWD) && TC_BWD
#define TC_BB_SAVEPART 1
#else
#define TC_BB_SAVEPART 0
#endif
#define TC_BB_W(r, d, b)                                                                    \
  do {                                                                                      \
    if (TC_BB_SAVEPART) bb[KDA_BB_S0 + TC_FW(r, d)] = (b);                                  \
    bb[KDA_BB_R2 + TC_FK(r, d)] = (b);                                                      \
  } while (0)
#define TC_BB_K(r, d, b)                                                                    \
  do {                                                                                      \
    if (TC_BB_SAVEPART) bb[KDA_BB_S1 + TC_FK(r, d)] = (b);                                  \
    bb[KDA_BB_R0 + TC_FW(r, d)] = (b);                                                      \
  } while (0)
#define TC_BB_GL(d, x)                                                                      \
  do {                                                                                      \
    if (TC_BB_SAVEPART) ((__global float *)(bb + KDA_BB_S2))[d] = (x);                      \
    ((__global float *)(bb + KDA_BB_R4))[d] = (x);                                          \
  } while (0)
#else
#define TC_BB 0
#endif
#if defined(TC_BWD) && TC_BWD
/* (the backward's block only; no state pass here) */
#define TC_PUT_W(r, d, x) TC_BB_W(r, d, f32_to_bf16(-(x)))
#define TC_PUT_Q(r, d, x) (bb[KDA_BB_R1 + TC_FK(r, d)] = f32_to_bf16(x))
#define TC_PUT_K(r, d, x) TC_BB_K(r, d, f32_to_bf16(x))
#define TC_PUT_A(r, c, x) (bb[KDA_BB_R3 + TC_FK(r, c)] = f32_to_bf16(x))
#define TC_PUT_GL(d, x) TC_BB_GL(d, x)
#define TC_IU(r, c) ((c) * CH + (r)) /* U^T [VD][16] */
#define TC_BSTRIDE KDA_BB_SIZE /* ushorts between blocks */
#elif TC_STEP == 64
#define TC_IW(r, d) TC_FW(r, d)
#define TC_IQ(r, d) (16 * KD + TC_FW(r, d))
#define TC_IK(r, d) (32 * KD + TC_FK(r, d))
#define TC_IA(r, c) (48 * KD + ((r) >> 3) * 128 + TC_FO(c, (r) & 7))
#define TC_IU(r, c) ((c) * CH + (r))
#define TC_WSIGN (-1.0f)
#define TC_OGL (48 * KD + 256)
#define TC_BSTRIDE TC_BLK
#else
#define TC_IW(r, d) ((r) * KD + (d))
#define TC_IQ(r, d) (16 * KD + (r) * KD + (d))
#define TC_IK(r, d) (32 * KD + (d) * 16 + (r))
#define TC_IA(r, c) (48 * KD + (r) * 16 + (c))
#define TC_IU(r, c) ((r) * VD + (c))
#define TC_WSIGN 1.0f
#define TC_OGL (48 * KD + 256)
#define TC_BSTRIDE TC_BLK
#endif
#if !(defined(TC_BWD) && TC_BWD) && TC_BB /* the forward's block and the backward's */
#define TC_PUT_W(r, d, x)                                                                   \
  do {                                                                                      \
    blk[TC_IW(r, d)] = f32_to_bf16(TC_WSIGN * (x));                                         \
    TC_BB_W(r, d, f32_to_bf16(-(x)));                                                       \
  } while (0)
#define TC_PUT_Q(r, d, x)                                                                   \
  do {                                                                                      \
    const ushort b_ = f32_to_bf16(x);                                                       \
    blk[TC_IQ(r, d)] = b_;                                                                  \
    bb[KDA_BB_R1 + TC_FK(r, d)] = b_;                                                       \
  } while (0)
#define TC_PUT_K(r, d, x)                                                                   \
  do {                                                                                      \
    const ushort b_ = f32_to_bf16(x);                                                       \
    blk[TC_IK(r, d)] = b_;                                                                  \
    TC_BB_K(r, d, b_);                                                                      \
  } while (0)
#define TC_PUT_A(r, c, x)                                                                   \
  do {                                                                                      \
    const ushort b_ = f32_to_bf16(x);                                                       \
    blk[TC_IA(r, c)] = b_;                                                                  \
    bb[KDA_BB_R3 + TC_FK(r, c)] = b_;                                                       \
  } while (0)
#define TC_PUT_GL(d, x)                                                                     \
  do {                                                                                      \
    ((__global float *)(blk + TC_OGL))[d] = (x);                                            \
    TC_BB_GL(d, x);                                                                         \
  } while (0)
#elif !TC_BB /* the forward's: one place per entry */
#define TC_PUT_W(r, d, x) (blk[TC_IW(r, d)] = f32_to_bf16(TC_WSIGN * (x)))
#define TC_PUT_Q(r, d, x) (blk[TC_IQ(r, d)] = f32_to_bf16(x))
#define TC_PUT_K(r, d, x) (blk[TC_IK(r, d)] = f32_to_bf16(x))
#define TC_PUT_A(r, c, x) (blk[TC_IA(r, c)] = f32_to_bf16(x))
#define TC_PUT_GL(d, x) (((__global float *)(blk + TC_OGL))[d] = (x))
#endif

/* ---- kda_tile_prep ------------------------------------------------------------------------ */

__kernel __attribute__((reqd_work_group_size(TC_PREP_WG, 1, 1)))
void kda_tile_prep(__global const store_t *q, ulong qo, __global const store_t *k, ulong ko,
                   __global const store_t *v, ulong vo, __global const store_t *z, ulong zo,
                   __global const store_t *bl, ulong bo, __global const float *A_log, ulong ao,
                   __global const float *dtb, ulong dto, __global const int2 *chunks, int H,
                   float scale, float lb, __global ushort *blkg, __global float *Ug, __global ushort *bbg)
{
  /* (KDA_TILE_PREP_LOCAL_BYTES: how the host decides whether a device can run the kernels) */
  __local float G[CH][TC_LDK]; /* gate, then its in-chunk cumsum (rows padded: bank spread) */
  __local float E0[KD], EL[KD]; /* e^G0, e^(G_last - G0) per column */
  /* bf16 operands; 4-byte aligned for the paired loads of packed tiles */
  __local ushort Qp[CH][TC_LDK] TC_AL, Kp[CH][TC_LDK] TC_AL; /* A operands */
  __local ushort Km[CH][TC_LDK] TC_AL;                       /* B operand, stored transposed */
  __local ushort Bk[CH][TC_LDK] TC_AL, Bv[CH][TC_LDV] TC_AL; /* B operands (row-major) */
  __local float Akk[CH][TC_LDT], Tm[CH][TC_LDT];
  __local float red[2][CH][8], nq[CH], nk[CH], bt[CH];
#if !TILE_HAS_MATRIX_UNIT /* (checked on the portable builds, which CI runs) */
  KDA_LAYOUT_CHECK(sizeof G + sizeof E0 + sizeof EL + sizeof Qp + sizeof Kp + sizeof Km +
                       sizeof Bk + sizeof Bv + sizeof Akk + sizeof Tm + sizeof red + sizeof nq +
                       sizeof nk + sizeof bt ==
                   KDA_TILE_PREP_LOCAL_BYTES(KD, VD));
#endif
  const int lid = (int)get_local_id(0), warp = lid >> 5, lane = lid & 31;
  const int r = lid >> 3, s = lid & 7; /* elementwise: row r, columns s + 8 j */
  const int c = (int)get_group_id(0), h = (int)get_group_id(1);
  const int2 ch = chunks[c];
  const int len = ch.y, valid = r < len;
  const ulong tok = (ulong)(ch.x + r), rk = (tok * (ulong)H + (ulong)h) * KD;
  const float ea = exp(A_log[ao + h]);
  __global ushort *blk = blkg + ((ulong)c * (ulong)H + (ulong)h) * TC_BSTRIDE;
#if defined(TC_BWD) && TC_BWD
  __global ushort *bb = blk;
#elif TC_BB
  __global ushort *bb = bbg + ((ulong)c * (ulong)H + (ulong)h) * KDA_BB_SIZE;
#else
  (void)bbg; /* (NULL) */
#endif
#define NJ (KD / 8)
#define NJV (VD / 8)
  /* 1. q, k, v into registers, the gate into G, partial squared norms. */
  float qv[NJ], kv[NJ], vv[NJV], sq = 0.0f, sk = 0.0f;
  const ulong rv = (tok * (ulong)H + (ulong)h) * VD;
#pragma unroll
  for (int j = 0; j < NJV; j++) vv[j] = valid ? LOAD(v, vo + rv + s + 8 * j) : 0.0f;
#pragma unroll
  for (int j = 0; j < NJ; j++) {
    const int d = s + 8 * j;
    qv[j] = valid ? LOAD(q, qo + rk + d) : 0.0f;
    kv[j] = valid ? LOAD(k, ko + rk + d) : 0.0f;
    sq += qv[j] * qv[j];
    sk += kv[j] * kv[j];
    G[r][d] = valid ? kda_gate(LOAD(z, zo + rk + d), ea, dtb[dto + (ulong)h * KD + d], lb, TC_UNB) : 0.0f;
  }
  red[0][r][s] = sq;
  red[1][r][s] = sk;
  if (s == 0) bt[r] = valid ? kda_sigmoid(LOAD(bl, bo + tok * (ulong)H + (ulong)h)) : 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 2. Inclusive cumsum down each column (rows past len add 0); the norms. (TC_UNB: G keeps
   * the raw gates; gl, and in E0 whether the column's decay from the first row to the last
   * passes 75: 1 if so, else 0.) */
#if TC_UNB
  for (int d = lid; d < KD; d += TC_PREP_WG) {
    float run = G[0][d], tail = 0.0f;
    for (int i = 1; i < CH; i++) tail += G[i][d];
    TC_PUT_GL(d, exp(run + tail));
    E0[d] = tail < -75.0f ? 1.0f : 0.0f;
  }
#else
  for (int d = lid; d < KD; d += TC_PREP_WG) {
    float run = 0.0f;
    for (int i = 0; i < CH; i++) {
      run += G[i][d];
      G[i][d] = run;
    }
    E0[d] = exp(G[0][d]);
    EL[d] = exp(run - G[0][d]);
    TC_PUT_GL(d, exp(run));
  }
#endif
  if (lid < 2 * CH) {
    const int w = lid >> 4, i = lid & 15;
    float t = 0.0f;
    for (int l = 0; l < 8; l++) t += red[w][i][l];
    if (w) nk[i] = 1.0f / sqrt(t + L2_EPS);
    else nq[i] = 1.0f / sqrt(t + L2_EPS);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 3. The anchored factors (bf16 operands) and the state pass's Qg, Kd^T: with
   * up = e^(G - G0) (<= 1) and dn = 1 / up (<= e^75), e^G = up e^G0 and
   * e^(G_last - G) = dn e^(G_last - G0). */
  {
    const float b = bt[r], nqr = nq[r], nkr = nk[r];
#if TC_UNB
    /* (e^G and e^(G_last - G) from the raw gates; the pair factors in step 4) */
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      const int d = s + 8 * j;
      float gr = 0.0f, gt = 0.0f;
      for (int i = 0; i <= r; i++) gr += G[i][d];
      for (int i = r + 1; i < CH; i++) gt += G[i][d];
      const float er = exp(gr), qn = qv[j] * nqr, kn = kv[j] * nkr;
      Bk[r][d] = f32_to_bf16(b * kn * er);
      if (!(TC_DIAG & 16)) TC_PUT_Q(r, d, scale * qn * er);
      if (!(TC_DIAG & 16)) TC_PUT_K(r, d, kn * exp(gt));
    }
#else
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      const int d = s + 8 * j;
      const float e = G[r][d] - G[0][d]; /* in [-75, 0] */
      const float up = exp(e), dn = exp(-e), qn = qv[j] * nqr, kn = kv[j] * nkr;
      Qp[r][d] = f32_to_bf16(qn * up);
      Kp[r][d] = f32_to_bf16(kn * up);
      Km[r][d] = f32_to_bf16(kn * dn);
      Bk[r][d] = f32_to_bf16(b * kn * up * E0[d]);
      if (!(TC_DIAG & 16)) TC_PUT_Q(r, d, scale * qn * up * E0[d]);
      if (!(TC_DIAG & 16)) TC_PUT_K(r, d, kn * dn * EL[d]);
    }
#endif
#pragma unroll
    for (int j = 0; j < NJV; j++) Bv[r][s + 8 * j] = f32_to_bf16(b * vv[j]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 4. Akk (warps 0, 1) and Aqk (warps 2, 3), 8 columns each; the mask by selection. */
  {
    const int nt = warp & 1, isq = warp >> 1;
    __local const ushort *ap = isq ? &Qp[0][0] : &Kp[0][0];
    tile_c acc = tile_c_zero();
#if TC_UNB
    /* The levels (the header): hh the level's bit, 0 the diagonal; a safe chunk, one level
     * anchored at its first row (hh = CH). Each work-item forms its row r's operands. */
    int safe = 1;
    for (int d = 0; d < KD; d++) safe = safe && E0[d] == 0.0f;
    const int nlev = safe ? 1 : 5;
    for (int lev = 0; lev < nlev; lev++) {
      const int hh = safe ? CH : 8 >> lev, mr = (r & ~(2 * hh - 1)) + hh, upper = (r & hh) != 0;
#pragma unroll
      for (int j = 0; j < NJ; j++) {
        const int d = s + 8 * j;
        float up = 1.0f, dn = 1.0f;
        if (safe) { /* e^(G_r - G0) >= e^-75, e^(G0 - G_r) <= e^75 */
          float t = 0.0f;
          for (int i = 1; i <= r; i++) t += G[i][d];
          up = exp(t), dn = exp(-t);
        } else if (hh) {
          float t = 0.0f;
          if (upper) for (int i = mr + 1; i <= r; i++) t += G[i][d];
          else for (int i = r + 1; i <= mr; i++) t += G[i][d];
          up = upper ? exp(t) : 0.0f, dn = upper ? 0.0f : exp(t);
        }
        const float qn = qv[j] * nq[r], kn = kv[j] * nk[r];
        Qp[r][d] = f32_to_bf16(qn * up);
        Kp[r][d] = f32_to_bf16(kn * up);
        Km[r][d] = f32_to_bf16(kn * dn);
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      tile_c part = tile_c_zero();
#pragma unroll
      for (int ks = 0; ks < KD / 16; ks++)
        tile_mma(&part, tile_load_a_bf16(ap + 16 * ks, TC_LDK, lane),
                 tile_load_bt_bf16(&Km[8 * nt][16 * ks], TC_LDK, lane));
      for (int i = 0; i < TILE_C_NE; i++) {
        const int row = tile_c_row(lane, i), col = 8 * nt + tile_c_col(lane, i);
        const int take = safe ? 1
                         : hh ? (row & ~(2 * hh - 1)) == (col & ~(2 * hh - 1)) && (row & hh) && !(col & hh)
                              : row == col;
        if (take) TILE_C_AT(acc, i) = TILE_C_AT(part, i);
      }
      barrier(CLK_LOCAL_MEM_FENCE); /* the next level's operands overwrite these */
    }
#else
#pragma unroll
    for (int ks = 0; ks < KD / 16; ks++)
      tile_mma(&acc, tile_load_a_bf16(ap + 16 * ks, TC_LDK, lane),
               tile_load_bt_bf16(&Km[8 * nt][16 * ks], TC_LDK, lane));
#endif
    for (int i = 0; i < TILE_C_NE; i++) {
      const int row = tile_c_row(lane, i), col = 8 * nt + tile_c_col(lane, i);
      if (isq) TC_PUT_A(row, col, col <= row ? scale * TILE_C_AT(acc, i) : 0.0f);
      else Akk[row][col] = col < row ? bt[row] * TILE_C_AT(acc, i) : 0.0f;
#if TC_BB
      if (!isq) ((__global float *)(bb + KDA_BB_PM))[row * CH + col] = col < row ? TILE_C_AT(acc, i) : 0.0f;
#endif
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  /* 5. Tm = (I + Akk)^-1 (kda_common.cl) */
  if (!(TC_DIAG & 64)) kda_unit_lower_inverse(Akk, Tm, lid);
  barrier(CLK_LOCAL_MEM_FENCE);
#if TC_BB
  for (int e = lid; e < CH * CH; e += TC_PREP_WG) ((__global float *)(bb + KDA_BB_TM))[e] = Tm[e >> 4][e & 15];
#endif
  /* 6. W = Tm Bk (bf16 into the block) and U = Tm Bv (fp32), 8 columns per product. */
  {
    const tile_a ta = tile_load_a_f32(&Tm[0][0], TC_LDT, lane);
    for (int nt = warp; nt < KD / 8; nt += TC_PREP_WG / 32) {
      tile_c acc = tile_c_zero();
      tile_mma(&acc, ta, tile_load_b_bf16(&Bk[0][8 * nt], TC_LDK, lane));
      for (int i = 0; i < TILE_C_NE; i++)
        if (!(TC_DIAG & 16)) TC_PUT_W(tile_c_row(lane, i), 8 * nt + tile_c_col(lane, i), TILE_C_AT(acc, i));
    }
    __global float *U = Ug + ((ulong)c * (ulong)H + (ulong)h) * CH * VD;
    for (int nt = warp; nt < VD / 8; nt += TC_PREP_WG / 32) {
      tile_c acc = tile_c_zero();
      tile_mma(&acc, ta, tile_load_b_bf16(&Bv[0][8 * nt], TC_LDV, lane));
      for (int i = 0; i < TILE_C_NE; i++)
        if (!(TC_DIAG & 32)) U[TC_IU(tile_c_row(lane, i), 8 * nt + tile_c_col(lane, i))] = TILE_C_AT(acc, i);
    }
  }
#undef NJ
#undef NJV
}
