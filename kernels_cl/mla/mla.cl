/* mla.cl: definitions shared by the MLA kernels (mla_fwd.cl, mla_bwd.cl, mla_decode.cl),
 * after mla_layout.cl (the work-group size, the tile sizes and the local-memory layouts).
 * The attention programs are built with -DDN, -DDR, -DDV (head dimensions, compile-time so
 * loops unroll and local tiles have fixed sizes), -DSTORE_BF16=0/1 (storage of q, k, v)
 * and -DOUT_BF16=0/1 (storage of o). The decode program takes -DDC, -DDR and
 * -DCACHE_BF16. Arithmetic is fp32 everywhere.
 *
 * Strided operands: q, k_nope, v are addressed as base + token * ts + head * hs + d, and
 * k_rope as base + token * ts + d, so the layer can pass column slices of its projections
 * (k_nope and v interleaved per head in W_ukv's output) without copies. */

#define BK MLA_BK /* key rows per tile: fixes the order of every sum over keys */
#define BB MLA_BB /* query rows per tile of the backward kernels (x 16 lanes) */
#define BL 16     /* lanes per row of the backward kernels */
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

#ifdef DN
#define DQK (DN + DR)
#endif

#if defined(OUT_BF16) && OUT_BF16
typedef ushort out_t;
#define STORE_OUT(p, i, x) ((p)[i] = f32_to_bf16(x))
#define LOAD_OUT(p, i) bf16_to_f32((p)[i])
#else
typedef float out_t;
#define STORE_OUT(p, i, x) ((p)[i] = (x))
#define LOAD_OUT(p, i) ((p)[i])
#endif

/* Tile tables (int4 per tile): x = first token of the tile's sequence, y = first row of the
 * tile, z = rows in the tile, w = one past the sequence's last token (backward) or the
 * position shift of the queries (forward: 0, or a chunked prefill's, see mla_fwd.cl). Query
 * tiles of the forward and dQ kernels attend to keys [x, y + z (+ w)); key tiles of the
 * dK/dV kernel collect queries [y, w). Tiles start at their sequence's first token, so the
 * bits of a sequence do not depend on where it sits in a packed batch. */
