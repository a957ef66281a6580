/* Conformance checks: MLA attention on the tile interface (kernels_cl/mla/mla_tile.cl)
 * against the double-precision reference (check/ref/ref_mla.c) and against the portable
 * kernel (kernels_cl/mla/mla_fwd.cl) on the same inputs, whatever the context's fast path:
 *   mla_tile.fwd.f32   the report's head sizes (qk 128 + 64, v 128), fp32 inputs and
 *                      output, packed sequences of 300, 64, 17 and 1 tokens, 2 heads;
 *   mla_tile.fwd.bf16  small heads (qk 16 + 8, v 16), bf16 inputs and output, 2 sequences
 *                      of 150 tokens, 3 heads, 128-row query tiles;
 *   mla_tile.bwd       the tile backward after the tile forward, the report's head sizes,
 *                      bf16 inputs, packed 150, 1 and 90 tokens, 2 heads: dq, dk_nope,
 *                      dk_rope, dv to 3e-2 (dO, P and dS rounded to bf16 too); bf16 inputs
 *                      take the double-buffered kernels (mla_tile_bwd_async.cl) everywhere;
 *   mla_tile.bwd.small  the same with small heads (qk 16 + 8, v 16), bf16, B 2 T 97, 3
 *                      heads (T 40, 1 head at the smallest sizes): batches, several heads,
 *                      partial blocks of both kernels;
 *   mla_tile.bwd.f32   fp32 inputs (qk 16 + 8, v 16, packed 70, 1, 41, 2 heads; 1 at the
 *                      smallest sizes): the single-buffered kernels (mla_tile_bwd.cl) on
 *                      devices without a matrix unit, the double-buffered ones through bf16
 *                      copies on one.
 * The tile kernel rounds fp32 inputs to bf16 on load, so the reference (and the portable
 * kernel) are given the rounded values: what is checked is the kernel's arithmetic, to 1e-2
 * (P rounded to bf16 before P V; fp32 sums) on o and lse with ck_compare's measure. The
 * rounding of the inputs themselves costs about 3e-2 more on o by that measure (scores off
 * by ~4e-3 at qk 192 with inputs of size 1): the price of bf16 operands. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_mla.h"
#include "check_mla_tile.h"
#include "conformance.h"
#include "clmoe/paths.h"

/* x rounded to the nearest bf16 (ties to even), as the kernel rounds fp32 inputs. */
static double round_bf16(double x)
{
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* One forward case; also run by tests/unit/test_mla_tile.c. */
clmoe_status ck_mla_tile_forward(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                 const ck_mla_tile_case *c)
{
  clmoe_status st = CLMOE_OK;
  enum { Q, KN, KR, V, O, LSE, PO, PLSE, NT };
  clmoe_tensor t[NT], r[V + 1], cu_t = {0};
  double *h[NT], *ro = NULL, *rl = NULL;
  float *hf = NULL;
  int32_t *cu = NULL;
  memset(t, 0, sizeof t), memset(r, 0, sizeof r), memset(h, 0, sizeof h);
  int64_t B = c->B, T = c->T;
  const int64_t H = c->H, Dn = c->Dn, Dr = c->Dr, Dv = c->Dv;
  if (c->lens) {
    B = 1;
    CK(ck_mla_make_cu(ctx, c->lens, c->nlens, &cu, &cu_t, &T));
  }
  const int64_t M = B * T;
  const int64_t shp[4][4] = {{B, T, H, Dn + Dr}, {B, T, H, Dn}, {B, T, Dr, 0}, {B, T, H, Dv}};
  const int64_t so[4] = {B, T, H, Dv}, sl[3] = {B, T, H};
  for (int i = Q; i <= V; i++) {
    CK(ck_uniform(ctx, &t[i], c->dtype, shp[i][3] ? 4 : 3, shp[i], seed + (uint64_t)i, -2.0f, 2.0f, &h[i]));
    if (c->dtype != CLMOE_F32) continue;
    /* The tile kernel computes with the inputs rounded to bf16 on load: the reference and
     * the portable kernel get those values (f32 tensors holding bf16 values). */
    const int64_t n = clmoe_tensor_numel(&t[i]);
    CK_ALLOC(hf, n);
    for (int64_t j = 0; j < n; j++) h[i][j] = round_bf16(h[i][j]), hf[j] = (float)h[i][j];
    CK(clmoe_tensor_create(ctx, &r[i], CLMOE_F32, shp[i][3] ? 4 : 3, shp[i]));
    CK(clmoe_tensor_write_f32(&r[i], hf));
    free(hf), hf = NULL;
  }
  for (int i = O; i <= PO; i += PO - O) {
    CK(clmoe_tensor_create(ctx, &t[i], c->odtype, 4, so));
    CK(clmoe_tensor_create(ctx, &t[i + 1], CLMOE_F32, 3, sl));
    CK(clmoe_tensor_fill(&t[i], NAN)); /* every output element must be written */
    CK(clmoe_tensor_fill(&t[i + 1], NAN));
  }
  clmoe_mla_attn_inputs in = {&t[Q], &t[KN], &t[KR], &t[V], cu ? &cu_t : NULL};
  CK(clmoe_mla_attention_path(ctx, c->path, 0.0f, &in, &t[O], &t[LSE]));
  CK(ck_read(&t[O], &h[O]));
  CK(ck_read(&t[LSE], &h[LSE]));
  CK_ALLOC(ro, M * H * Dv);
  CK_ALLOC(rl, M * H);
  ref_mla_shape s = {B, T, H, Dn, Dr, Dv, cu, c->nlens, 1.0 / sqrt((double)(Dn + Dr)), 0};
  ref_mla_attention(&s, h[Q], h[KN], h[KR], h[V], ro, rl);
  res->tolerance = TOL_BF16;
  ck_compare("o", h[O], ro, (size_t)(M * H * Dv), res);
  ck_compare("lse", h[LSE], rl, (size_t)(M * H), res);
  if (c->vs_portable) {
    clmoe_mla_attn_inputs pin = in;
    if (c->dtype == CLMOE_F32) pin.q = &r[Q], pin.k_nope = &r[KN], pin.k_rope = &r[KR], pin.v = &r[V];
    CK(clmoe_mla_attention_path(ctx, CLMOE_MLA_ATTN_PORTABLE, 0.0f, &pin, &t[PO], &t[PLSE]));
    CK(ck_read(&t[PO], &h[PO]));
    CK(ck_read(&t[PLSE], &h[PLSE]));
    ck_compare("o_vs_portable", h[O], h[PO], (size_t)(M * H * Dv), res);
    ck_compare("lse_vs_portable", h[LSE], h[PLSE], (size_t)(M * H), res);
  }
done:
  for (int i = 0; i < NT; i++) {
    clmoe_tensor_destroy(&t[i]);
    free(h[i]);
  }
  for (int i = 0; i <= V; i++) clmoe_tensor_destroy(&r[i]);
  clmoe_tensor_destroy(&cu_t);
  free(ro), free(rl), free(cu), free(hf);
  return st;
}

/* Backward: q, k, v (storage c->dtype) and dO (f32) hold bf16 values, so every kernel and
 * the reference see the same numbers; the forward of c->path gives o and lse, then the
 * tile backward the gradients, compared with the reference's (and with the portable
 * backward's on the same o, lse when c->vs_portable). */
clmoe_status ck_mla_tile_backward(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                  const ck_mla_tile_case *c, double tol)
{
  clmoe_status st = CLMOE_OK;
  enum { Q, KN, KR, V, DO, O, LSE, DQ, DKN, DKR, DV, PQ, PKN, PKR, PV, NT };
  clmoe_tensor t[NT], cu_t = {0};
  double *h[NT], *r[4] = {NULL, NULL, NULL, NULL};
  float *hf = NULL;
  int32_t *cu = NULL;
  memset(t, 0, sizeof t), memset(h, 0, sizeof h);
  int64_t B = c->B, T = c->T;
  const int64_t H = c->H, Dn = c->Dn, Dr = c->Dr, Dv = c->Dv;
  if (c->lens) {
    B = 1;
    CK(ck_mla_make_cu(ctx, c->lens, c->nlens, &cu, &cu_t, &T));
  }
  const int64_t M = B * T;
  const int64_t shp[5][4] = {{B, T, H, Dn + Dr}, {B, T, H, Dn}, {B, T, Dr, 0}, {B, T, H, Dv}, {B, T, H, Dv}};
  const int64_t sl[3] = {B, T, H}, cnt[4] = {M * H * (Dn + Dr), M * H * Dn, M * Dr, M * H * Dv};
  for (int i = Q; i <= DO; i++) {
    const clmoe_dtype dt = i == DO ? CLMOE_F32 : c->dtype;
    CK(ck_uniform(ctx, &t[i], dt, shp[i][3] ? 4 : 3, shp[i], seed + (uint64_t)i, i == DO ? -1.0f : -2.0f,
                  i == DO ? 1.0f : 2.0f, &h[i]));
    if (dt != CLMOE_F32) continue;
    const int64_t n = clmoe_tensor_numel(&t[i]);
    CK_ALLOC(hf, n);
    for (int64_t j = 0; j < n; j++) h[i][j] = round_bf16(h[i][j]), hf[j] = (float)h[i][j];
    CK(clmoe_tensor_write_f32(&t[i], hf));
    free(hf), hf = NULL;
  }
  CK(clmoe_tensor_create(ctx, &t[O], c->odtype, 4, shp[V]));
  CK(clmoe_tensor_create(ctx, &t[LSE], CLMOE_F32, 3, sl));
  for (int i = DQ; i < NT; i++) {
    const int k = (i - DQ) % 4;
    CK(clmoe_tensor_create(ctx, &t[i], CLMOE_F32, shp[k == 3 ? V : k][3] ? 4 : 3, shp[k == 3 ? V : k]));
    CK(clmoe_tensor_fill(&t[i], NAN));
  }
  clmoe_mla_attn_inputs in = {&t[Q], &t[KN], &t[KR], &t[V], cu ? &cu_t : NULL};
  CK(clmoe_mla_attention_path(ctx, c->path, 0.0f, &in, &t[O], &t[LSE]));
  clmoe_mla_attn_grads g = {&t[DQ], &t[DKN], &t[DKR], &t[DV]}, pg = {&t[PQ], &t[PKN], &t[PKR], &t[PV]};
  CK(clmoe_mla_attention_backward_path(ctx, CLMOE_MLA_ATTN_TILE, 0.0f, &in, &t[O], &t[LSE], &t[DO], &g));
  ref_mla_shape s = {B, T, H, Dn, Dr, Dv, cu, c->nlens, 1.0 / sqrt((double)(Dn + Dr)), c->odtype == CLMOE_BF16};
  for (int k = 0; k < 4; k++) CK_ALLOC(r[k], cnt[k]);
  ref_mla_attention_backward(&s, h[Q], h[KN], h[KR], h[V], h[DO], r[0], r[1], r[2], r[3]);
  static const char *names[8] = {"dq", "dk_nope", "dk_rope", "dv", "dq_vs_portable", "dk_nope_vs_portable",
                                 "dk_rope_vs_portable", "dv_vs_portable"};
  res->tolerance = tol;
  for (int k = 0; k < 4; k++) {
    CK(ck_read(&t[DQ + k], &h[DQ + k]));
    ck_compare(names[k], h[DQ + k], r[k], (size_t)cnt[k], res);
  }
  if (c->vs_portable) {
    CK(clmoe_mla_attention_backward_path(ctx, CLMOE_MLA_ATTN_PORTABLE, 0.0f, &in, &t[O], &t[LSE], &t[DO], &pg));
    for (int k = 0; k < 4; k++) {
      CK(ck_read(&t[PQ + k], &h[PQ + k]));
      ck_compare(names[4 + k], h[DQ + k], h[PQ + k], (size_t)cnt[k], res);
    }
  }
done:
  for (int i = 0; i < NT; i++) {
    clmoe_tensor_destroy(&t[i]);
    free(h[i]);
  }
  for (int k = 0; k < 4; k++) free(r[k]);
  clmoe_tensor_destroy(&cu_t);
  free(cu), free(hf);
  return st;
}

static clmoe_status check_fwd_f32(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  static const int32_t lens[4] = {300, 64, 17, 1}, small[4] = {130, 64, 17, 1}; /* (3 query tiles) */
  /* (smallest sizes: one head; the heads' work-groups run the same code on other rows) */
  const ck_mla_tile_case c = {1, 0, clmoe_check_small() ? 1 : 2, 128, 64, 128, clmoe_check_small() ? small : lens, 4, CLMOE_F32, CLMOE_F32,
                              CLMOE_MLA_ATTN_TILE, 1};
  return ck_mla_tile_forward(ctx, seed, res, &c);
}

static clmoe_status check_fwd_bf16(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  const ck_mla_tile_case c = {2, CK_SIZE(150, 130), 3, 16, 8, 16, NULL, 0, CLMOE_BF16, CLMOE_BF16,
                              CLMOE_MLA_ATTN_TILE128, 1};
  return ck_mla_tile_forward(ctx, seed, res, &c);
}

static clmoe_status check_bwd(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  /* (smallest sizes: 2 tiles of 64, the second partial, streamed as 3 blocks of 32, the last
   * partial; a single token; a partial tile of one block) */
  static const int32_t lens[3] = {150, 1, 90}, small[3] = {80, 1, 17};
  const ck_mla_tile_case c = {1, 0, clmoe_check_small() ? 1 : 2, 128, 64, 128, clmoe_check_small() ? small : lens, 3, CLMOE_BF16, CLMOE_F32,
                              CLMOE_MLA_ATTN_TILE, 1};
  return ck_mla_tile_backward(ctx, seed, res, &c, 3e-2);
}

static clmoe_status check_bwd_small(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  /* (smallest sizes: T 40, 2 query blocks of 32, the second partial; one head) */
  const ck_mla_tile_case c = {2, CK_SIZE(97, 40), CK_SIZE(3, 1), 16, 8, 16, NULL, 0, CLMOE_BF16, CLMOE_BF16,
                              CLMOE_MLA_ATTN_TILE64, 1};
  return ck_mla_tile_backward(ctx, seed, res, &c, 3e-2);
}

static clmoe_status check_bwd_f32(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  static const int32_t lens[3] = {70, 1, 41};
  const ck_mla_tile_case c = {1, 0, CK_SIZE(2, 1), 16, 8, 16, lens, 3, CLMOE_F32, CLMOE_F32, CLMOE_MLA_ATTN_TILE64, 1};
  return ck_mla_tile_backward(ctx, seed, res, &c, 3e-2);
}

const clmoe_check clmoe_checks_mla_tile[] = {
    {"mla_tile.fwd.f32", "tile attention forward, qk 128+64 v 128, f32, packed 300/64/17/1, H 2 (1e-2)",
     check_fwd_f32},
    {"mla_tile.fwd.bf16", "tile attention forward (128-row tiles), qk 16+8 v 16, bf16 in/out, B 2 T 150, H 3 (1e-2)",
     check_fwd_bf16},
    {"mla_tile.bwd", "tile attention backward, qk 128+64 v 128, bf16 in, packed 150/1/90, H 2 (3e-2)", check_bwd},
    {"mla_tile.bwd.small", "tile attention backward, qk 16+8 v 16, bf16 in/out, B 2 T 97, H 3 (3e-2)",
     check_bwd_small},
    {"mla_tile.bwd.f32", "tile attention backward, qk 16+8 v 16, f32 in/out, packed 70/1/41, H 2 (3e-2)",
     check_bwd_f32},
    {NULL},
};
