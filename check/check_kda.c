/* Conformance checks of KDA: the chunked forward, the recurrent kernel and the decode step
 * against the double-precision token loop (check/ref/ref_kda.c); the backward against the
 * reference's analytic gradient. Tolerance: fp32 relative error 1e-4. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "kda_inputs.h"
#include "ref/ref_kda.h"

#define TOL_KDA 1e-4

enum { KDA_CHUNKED, KDA_RECURRENT, KDA_DECODE, KDA_BACKWARD };

typedef struct kda_case {
  int64_t B, T, H, K, V;
  const int32_t *lens; /* packed sequence lengths (then B = 1 and T = their sum) */
  int nlens;
  int h0;              /* start from a random initial state */
  clmoe_dtype dtype;   /* storage of q, k, v, g, beta */
  int path;
  float zlo, zhi;      /* range of the gate logits */
  int extreme;         /* gate logits of +-1e4 instead */
  int saturate;        /* gate logits of +1e4 everywhere: g = lb on every channel */
  int kimi;            /* Kimi Linear's unbounded gate, per-token decays down to -50 (2: to -4, every fourth 16-token run -4 to -50) */
} kda_case;

/* The case's inputs (the generator is shared with check_kda_tile.c: kda_inputs.h). */
static clmoe_status kda_setup(clmoe_ctx *ctx, uint64_t seed, const kda_case *kc, kda_data *d)
{
  const kda_input_spec spec = {kc->B, kc->T, kc->H, kc->K, kc->V, kc->lens, kc->nlens, kc->h0, kc->dtype,
                               kc->zlo, kc->zhi, kc->extreme, kc->saturate, kc->kimi};
  return ck_kda_setup(ctx, seed, &spec, d);
}

static ref_kda_shape ref_shape(const kda_data *d, const kda_case *kc)
{
  ref_kda_shape s = {d->B, d->T, d->H, d->K, d->V, d->cu, d->N, 1.0 / sqrt((double)d->K), -5.0, kc->kimi};
  return s;
}

static clmoe_kda_options case_options(const kda_case *kc)
{
  clmoe_kda_options o = {.gate = kc->kimi ? CLMOE_KDA_GATE_UNBOUNDED : CLMOE_KDA_GATE_BOUNDED};
  return o;
}

static clmoe_kda_inputs device_inputs(const kda_data *d)
{
  clmoe_kda_inputs in = {&d->q, &d->k, &d->v, &d->z, &d->beta, &d->A_log, &d->dt_bias,
                         d->hh0 ? &d->h0 : NULL, d->cu ? &d->cu_t : NULL};
  return in;
}

/* Decoding token by token: step t feeds token t of every sequence (equal lengths). */
static clmoe_status run_decode(clmoe_ctx *ctx, const kda_case *kc, const kda_data *d,
                               clmoe_tensor *o, clmoe_tensor *ht)
{
  clmoe_status st = CLMOE_OK;
  const int64_t N = d->B, T = d->T, H = d->H, K = d->K, V = d->V;
  clmoe_tensor q = {0}, k = {0}, v = {0}, z = {0}, b = {0}, out = {0};
  float *hq = NULL, *hk = NULL, *hv = NULL, *hz = NULL, *hb = NULL, *ho = NULL, *all = NULL;
  const int64_t sk[3] = {N, H, K}, sv[3] = {N, H, V}, sb[2] = {N, H};
  CK(clmoe_tensor_create(ctx, &q, kc->dtype, 3, sk));
  CK(clmoe_tensor_create(ctx, &k, kc->dtype, 3, sk));
  CK(clmoe_tensor_create(ctx, &z, kc->dtype, 3, sk));
  CK(clmoe_tensor_create(ctx, &v, kc->dtype, 3, sv));
  CK(clmoe_tensor_create(ctx, &b, kc->dtype, 2, sb));
  CK(clmoe_tensor_create(ctx, &out, CLMOE_F32, 3, sv));
  CK_ALLOC(hq, N * H * K);
  CK_ALLOC(hk, N * H * K);
  CK_ALLOC(hz, N * H * K);
  CK_ALLOC(hv, N * H * V);
  CK_ALLOC(hb, N * H);
  CK_ALLOC(ho, N * H * V);
  CK_ALLOC(all, N * T * H * V);
  if (d->hh0) CK(clmoe_tensor_copy(ht, &d->h0));
  else CK(clmoe_tensor_fill(ht, 0.0));
  const clmoe_kda_options opts = case_options(kc);
  for (int64_t t = 0; t < T; t++) {
    for (int64_t n = 0; n < N; n++)
      for (int64_t h = 0; h < H; h++) {
        int64_t src = (n * T + t) * H + h, dst = n * H + h;
        for (int64_t i = 0; i < K; i++) {
          hq[dst * K + i] = (float)d->hq[src * K + i];
          hk[dst * K + i] = (float)d->hk[src * K + i];
          hz[dst * K + i] = (float)d->hz[src * K + i];
        }
        for (int64_t j = 0; j < V; j++) hv[dst * V + j] = (float)d->hv[src * V + j];
        hb[dst] = (float)d->hbeta[src];
      }
    CK(clmoe_tensor_write_f32(&q, hq));
    CK(clmoe_tensor_write_f32(&k, hk));
    CK(clmoe_tensor_write_f32(&z, hz));
    CK(clmoe_tensor_write_f32(&v, hv));
    CK(clmoe_tensor_write_f32(&b, hb));
    CK(clmoe_kda_decode_step(ctx, &opts, &q, &k, &v, &z, &b, &d->A_log, &d->dt_bias, ht, &out));
    CK(clmoe_tensor_read_f32(&out, ho));
    for (int64_t n = 0; n < N; n++)
      memcpy(all + ((n * T + t) * H) * V, ho + n * H * V, (size_t)(H * V) * sizeof *ho);
  }
  CK(clmoe_tensor_write_f32(o, all));
done:
  free(hq), free(hk), free(hv), free(hz), free(hb), free(ho), free(all);
  clmoe_tensor_destroy(&q), clmoe_tensor_destroy(&k), clmoe_tensor_destroy(&v);
  clmoe_tensor_destroy(&z), clmoe_tensor_destroy(&b), clmoe_tensor_destroy(&out);
  return st;
}

static clmoe_status check_kda_forward(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                      const kda_case *kc)
{
  clmoe_status st = CLMOE_OK;
  kda_data d;
  clmoe_tensor o = {0}, ht = {0};
  double *go = NULL, *ght = NULL, *ro = NULL, *rht = NULL;
  CK(kda_setup(ctx, seed, kc, &d));
  const int64_t so[4] = {d.B, d.T, d.H, d.V}, sh[4] = {d.N, d.H, d.K, d.V};
  const size_t no = (size_t)(d.B * d.T * d.H * d.V), nh = (size_t)(d.N * d.H * d.K * d.V);
  CK(clmoe_tensor_create(ctx, &o, CLMOE_F32, 4, so));
  CK(clmoe_tensor_create(ctx, &ht, CLMOE_F32, 4, sh));
  CK(clmoe_tensor_fill(&o, NAN)); /* every output element must be written */
  clmoe_kda_inputs in = device_inputs(&d);
  const clmoe_kda_options opts = case_options(kc);
  if (kc->path == KDA_CHUNKED) CK(clmoe_kda_forward(ctx, &opts, &in, &o, &ht));
  else if (kc->path == KDA_RECURRENT) CK(clmoe_kda_recurrent(ctx, &opts, &in, &o, &ht));
  else CK(run_decode(ctx, kc, &d, &o, &ht));
  CK(ck_read(&o, &go));
  CK(ck_read(&ht, &ght));
  CK_ALLOC(ro, no);
  CK_ALLOC(rht, nh);
  ref_kda_shape s = ref_shape(&d, kc);
  ref_kda_forward(&s, d.hq, d.hk, d.hv, d.hz, d.hbeta, d.hA, d.hdt, d.hh0, ro, rht);
  res->tolerance = TOL_KDA;
  ck_compare("o", go, ro, no, res);
  ck_compare("final_state", ght, rht, nh, res);
done:
  free(go), free(ght), free(ro), free(rht);
  clmoe_tensor_destroy(&o), clmoe_tensor_destroy(&ht);
  ck_kda_data_free(&d);
  return st;
}

/* Backward against the reference's analytic gradient (itself checked against finite
 * differences in tests/unit/test_kda.c). dfinal_state is random when kc->h0 is set. */
static clmoe_status check_kda_backward(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                       const kda_case *kc)
{
  clmoe_status st = CLMOE_OK;
  kda_data d;
  enum { GQ, GK, GV, GZ, GB, GA, GDT, GH0, NG };
  clmoe_tensor dout = {0}, dht = {0}, g[NG];
  double *hdo = NULL, *hdht = NULL, *ref[NG], *got[NG];
  memset(g, 0, sizeof g);
  memset(ref, 0, sizeof ref);
  memset(got, 0, sizeof got);
  CK(kda_setup(ctx, seed, kc, &d));
  const int64_t sk[4] = {d.B, d.T, d.H, d.K}, sv[4] = {d.B, d.T, d.H, d.V}, sb[3] = {d.B, d.T, d.H};
  const int64_t sdt[2] = {d.H, d.K}, sh[4] = {d.N, d.H, d.K, d.V};
  const size_t nk = (size_t)(d.B * d.T * d.H * d.K), nv = (size_t)(d.B * d.T * d.H * d.V);
  const size_t nb = (size_t)(d.B * d.T * d.H), nh = (size_t)(d.N * d.H * d.K * d.V);
  const size_t count[NG] = {nk, nk, nv, nk, nb, (size_t)d.H, (size_t)(d.H * d.K), nh};
  const char *names[NG] = {"dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dinitial_state"};
  CK(ck_uniform(ctx, &dout, CLMOE_F32, 4, sv, seed + 20, -1.0f, 1.0f, &hdo));
  if (kc->h0) CK(ck_uniform(ctx, &dht, CLMOE_F32, 4, sh, seed + 21, -1.0f, 1.0f, &hdht));
  CK(clmoe_tensor_create(ctx, &g[GQ], CLMOE_F32, 4, sk));
  CK(clmoe_tensor_create(ctx, &g[GK], CLMOE_F32, 4, sk));
  CK(clmoe_tensor_create(ctx, &g[GV], CLMOE_F32, 4, sv));
  CK(clmoe_tensor_create(ctx, &g[GZ], CLMOE_F32, 4, sk));
  CK(clmoe_tensor_create(ctx, &g[GB], CLMOE_F32, 3, sb));
  CK(clmoe_tensor_create(ctx, &g[GA], CLMOE_F32, 1, &d.H));
  CK(clmoe_tensor_create(ctx, &g[GDT], CLMOE_F32, 2, sdt));
  CK(clmoe_tensor_create(ctx, &g[GH0], CLMOE_F32, 4, sh));
  for (int i = 0; i < NG; i++) CK(clmoe_tensor_fill(&g[i], NAN)); /* every element must be written */
  clmoe_kda_inputs in = device_inputs(&d);
  const clmoe_kda_options opts = case_options(kc);
  clmoe_kda_grads grads = {&g[GQ], &g[GK], &g[GV], &g[GZ], &g[GB], &g[GA], &g[GDT], &g[GH0]};
  CK(clmoe_kda_backward(ctx, &opts, &in, &dout, kc->h0 ? &dht : NULL, &grads));
  for (int i = 0; i < NG; i++) {
    CK(ck_read(&g[i], &got[i]));
    CK_ALLOC(ref[i], count[i]);
  }
  ref_kda_shape s = ref_shape(&d, kc);
  ref_kda_backward(&s, d.hq, d.hk, d.hv, d.hz, d.hbeta, d.hA, d.hdt, d.hh0, hdo, hdht, ref[GQ],
                   ref[GK], ref[GV], ref[GZ], ref[GB], ref[GA], ref[GDT], ref[GH0]);
  res->tolerance = TOL_KDA;
  for (int i = 0; i < NG; i++) ck_compare(names[i], got[i], ref[i], count[i], res);
done:
  for (int i = 0; i < NG; i++) {
    free(ref[i]), free(got[i]);
    clmoe_tensor_destroy(&g[i]);
  }
  free(hdo), free(hdht);
  clmoe_tensor_destroy(&dout), clmoe_tensor_destroy(&dht);
  ck_kda_data_free(&d);
  return st;
}

#define F CLMOE_F32
#define H16 CLMOE_BF16
/* At the smallest sizes (clmoe_check_small: the simulators) one head, as in the tile
 * checks: the heads' work-groups run the same code on other rows; and 17 tokens for the
 * token loops without chunks, the recurrent kernel and the decode steps (one step per
 * token, each as costly to simulate as the last). */
static kda_case kda_sized(kda_case kc)
{
  if (clmoe_check_small()) kc.H = 1;
  if (clmoe_check_small() && (kc.path == KDA_RECURRENT || kc.path == KDA_DECODE) && !kc.lens && kc.T > 17)
    kc.T = 17;
  return kc;
}

#define KDA_CHECK(fname, ...)                                                             \
  static clmoe_status fname(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)              \
  {                                                                                       \
    const kda_case kc = kda_sized((kda_case)__VA_ARGS__);                                 \
    return kc.path == KDA_BACKWARD ? check_kda_backward(c, s, r, &kc) : check_kda_forward(c, s, r, &kc); \
  }
static const int32_t lens_mixed[] = {1, 15, 16, 17, 40, 3};
static const int32_t lens_empty[] = {5, 0, 33};
/* (smallest sizes, K = V = 128: one token, a chunk and one, two chunks and a partial; every
 * sequence is a work-group of its own through every chunk pass, a costly one to simulate) */
static const int32_t lens_mixed_small[] = {1, 17, 40};

/*                          B  T     H  K    V    lens nl h0 dtype path          zlo   zhi  extreme saturate kimi */
KDA_CHECK(kda_fwd_t1,      {2, 1,    2, 16,  16,  NULL, 0, 1, F, KDA_CHUNKED,   -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_fwd_t15,     {1, 15,   2, 16,  16,  NULL, 0, 0, F, KDA_CHUNKED,   -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_fwd_t16,     {2, 16,   1, 64,  64,  NULL, 0, 1, F, KDA_CHUNKED,   -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_fwd_t17,     {1, 17,   3, 16,  32,  NULL, 0, 1, F, KDA_CHUNKED,   -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_fwd_t100,    {2, 100,  2, 64,  64,  NULL, 0, 1, F, KDA_CHUNKED,   -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_fwd_t1000,   {1, 1000, 2, 128, 128, NULL, 0, 1, F, KDA_CHUNKED,   -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_fwd_kv,      {1, 50,   2, 32,  48,  NULL, 0, 0, F, KDA_CHUNKED,   -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_fwd_bf16,    {1, 77,   2, 64,  64,  NULL, 0, 1, H16, KDA_CHUNKED, -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_fwd_packed,  {1, 0,    2, 64,  64,  lens_mixed, 6, 1, F, KDA_CHUNKED, -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_fwd_empty,   {1, 0,    1, 16,  16,  lens_empty, 3, 1, F, KDA_CHUNKED, -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_fwd_extreme, {1, 300,  2, 32,  32,  NULL, 0, 1, F, KDA_CHUNKED,   0.0f, 0.0f, 1, 0, 0})
KDA_CHECK(kda_fwd_long,    {1, 65536, 1, 16, 16,  NULL, 0, 1, F, KDA_CHUNKED,   0.0f, 0.0f, 0, 1, 0})
KDA_CHECK(kda_rec_t100,    {2, 100,  2, 64,  64,  NULL, 0, 1, F, KDA_RECURRENT, -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_rec_packed,  {1, 0,    2, 32,  32,  lens_mixed, 6, 1, H16, KDA_RECURRENT, -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_rec_extreme, {1, 200,  1, 128, 128, NULL, 0, 1, F, KDA_RECURRENT, 0.0f, 0.0f, 1, 0, 0})
KDA_CHECK(kda_bwd_t1,      {1, 1,    2, 16,  16,  NULL, 0, 1, F, KDA_BACKWARD,  -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_bwd_t17,     {2, 17,   2, 16,  32,  NULL, 0, 1, F, KDA_BACKWARD,  -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_bwd_t100,    {1, 100,  2, 64,  64,  NULL, 0, 1, F, KDA_BACKWARD,  -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_bwd_k128,    {1, 200,  1, 128, 128, NULL, 0, 0, F, KDA_BACKWARD,  -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_bwd_packed,  {1, 0,    2, 32,  32,  lens_mixed, 6, 1, F, KDA_BACKWARD, -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_bwd_bf16,    {1, 50,   2, 64,  64,  NULL, 0, 1, H16, KDA_BACKWARD, -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_bwd_extreme, {1, 64,   1, 32,  32,  NULL, 0, 1, F, KDA_BACKWARD,  0.0f, 0.0f, 1, 0, 0})
KDA_CHECK(kda_bwd_empty,   {1, 0,    1, 16,  16,  lens_empty, 3, 1, F, KDA_BACKWARD, -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_decode,      {3, 20,   2, 64,  64,  NULL, 0, 1, F, KDA_DECODE,    -4.0f, 4.0f, 0, 0, 0})
KDA_CHECK(kda_decode_bf16, {2, 9,    2, 128, 128, NULL, 0, 0, H16, KDA_DECODE,  -4.0f, 4.0f, 0, 0, 0})
/* Kimi Linear's unbounded gate with per-token decays from -1e-4 to -50 (a chunk's cumulative
 * log decay down to -800): the chunked forward against the token loop, finite and exact */
KDA_CHECK(kda_fwd_kimi,     {1, 300,  2, 32,  32,  NULL, 0, 1, F, KDA_CHUNKED,   0.0f, 0.0f, 0, 0, 1})
KDA_CHECK(kda_fwd_kimi_k128, {1, 0,   2, 128, 128, CK_SIZE(lens_mixed, lens_mixed_small), CK_SIZE(6, 3), 1, F, KDA_CHUNKED, 0.0f, 0.0f, 0, 0, 1})
KDA_CHECK(kda_fwd_kimi_bf16, {2, 77,  2, 64,  64,  NULL, 0, 1, H16, KDA_CHUNKED, 0.0f, 0.0f, 0, 0, 1})
KDA_CHECK(kda_fwd_kimi_k24, {1, 0,    2, 24,  40,  lens_mixed, 6, 1, F, KDA_CHUNKED, 0.0f, 0.0f, 0, 0, 1})
KDA_CHECK(kda_fwd_kimi_mod, {1, 0,    2, 64,  64,  lens_mixed, 6, 1, F, KDA_CHUNKED, 0.0f, 0.0f, 0, 0, 2})
KDA_CHECK(kda_fwd_kimi_mix, {2, 150,  2, 32,  32,  NULL, 0, 1, F, KDA_CHUNKED,   0.0f, 0.0f, 0, 0, 2})
/* the backward with the unbounded gate: chunks whose decay passes e^-80 (to e^-800) and
 * chunks within it in turn, against the reference's analytic backward */
KDA_CHECK(kda_bwd_kimi,      {1, 100,  2, 32,  32,  NULL, 0, 1, F, KDA_BACKWARD, 0.0f, 0.0f, 0, 0, 1})
KDA_CHECK(kda_bwd_kimi_k128, {1, 0,    1, 128, 128, CK_SIZE(lens_mixed, lens_mixed_small), CK_SIZE(6, 3), 1, F, KDA_BACKWARD, 0.0f, 0.0f, 0, 0, 1})
KDA_CHECK(kda_bwd_kimi_mix,  {2, 77,   2, 64,  48,  NULL, 0, 1, F, KDA_BACKWARD, 0.0f, 0.0f, 0, 0, 2})
KDA_CHECK(kda_rec_kimi,     {1, 300,  2, 32,  32,  NULL, 0, 1, F, KDA_RECURRENT, 0.0f, 0.0f, 0, 0, 1})
KDA_CHECK(kda_decode_kimi,  {2, 40,   2, 64,  64,  NULL, 0, 1, F, KDA_DECODE,    0.0f, 0.0f, 0, 0, 1})

const clmoe_check clmoe_checks_kda[] = {
    {"kda.forward.t1", "chunked forward, T = 1, initial state", kda_fwd_t1},
    {"kda.forward.t15", "chunked forward, T = 15 (one partial chunk)", kda_fwd_t15},
    {"kda.forward.t16", "chunked forward, T = 16, K = V = 64", kda_fwd_t16},
    {"kda.forward.t17", "chunked forward, T = 17, V = 32", kda_fwd_t17},
    {"kda.forward.t100", "chunked forward, T = 100, 2 sequences x 2 heads", kda_fwd_t100},
    {"kda.forward.t1000", "chunked forward, T = 1000, K = V = 128", kda_fwd_t1000},
    {"kda.forward.kv", "chunked forward, K = 32, V = 48", kda_fwd_kv},
    {"kda.forward.bf16", "chunked forward, bf16 inputs", kda_fwd_bf16},
    {"kda.forward.packed", "chunked forward, packed lengths 1,15,16,17,40,3", kda_fwd_packed},
    {"kda.forward.empty", "chunked forward, a packed sequence of length 0", kda_fwd_empty},
    {"kda.forward.extreme", "gate logits of +-1e4: finite and exact", kda_fwd_extreme},
    {"kda.forward.long", "65536 tokens with g = -5 on every channel", kda_fwd_long},
    {"kda.recurrent.t100", "recurrent kernel, T = 100", kda_rec_t100},
    {"kda.recurrent.packed", "recurrent kernel, packed, bf16 inputs", kda_rec_packed},
    {"kda.recurrent.extreme", "recurrent kernel, gate logits of +-1e4", kda_rec_extreme},
    {"kda.backward.t1", "backward, T = 1, with dfinal_state", kda_bwd_t1},
    {"kda.backward.t17", "backward, T = 17, V = 32, 2 sequences", kda_bwd_t17},
    {"kda.backward.t100", "backward, T = 100, K = V = 64", kda_bwd_t100},
    {"kda.backward.k128", "backward, T = 200, K = V = 128", kda_bwd_k128},
    {"kda.backward.packed", "backward, packed lengths 1,15,16,17,40,3", kda_bwd_packed},
    {"kda.backward.bf16", "backward, bf16 inputs", kda_bwd_bf16},
    {"kda.backward.extreme", "backward, gate logits of +-1e4", kda_bwd_extreme},
    {"kda.backward.empty", "backward, a packed sequence of length 0", kda_bwd_empty},
    {"kda.forward.kimi", "chunked forward, unbounded gate, decays -1e-4 .. -50 per token", kda_fwd_kimi},
    {"kda.forward.kimi.k128", "chunked forward, unbounded gate down to -50, K = V = 128, packed", kda_fwd_kimi_k128},
    {"kda.forward.kimi.bf16", "chunked forward, unbounded gate down to -50, bf16 inputs", kda_fwd_kimi_bf16},
    {"kda.forward.kimi.k24", "chunked forward, unbounded gate down to -50, K = 24, V = 40, packed", kda_fwd_kimi_k24},
    {"kda.forward.kimi.moderate", "chunked forward, unbounded gate, decays -1e-4 .. -4 and runs of -4 .. -50, packed", kda_fwd_kimi_mod},
    {"kda.forward.kimi.mixed", "chunked forward, unbounded gate: chunks above and below 1e-30 in turn", kda_fwd_kimi_mix},
    {"kda.backward.kimi", "backward, unbounded gate, decays -1e-4 .. -50 per token", kda_bwd_kimi},
    {"kda.backward.kimi.k128", "backward, unbounded gate down to -50, K = V = 128, packed", kda_bwd_kimi_k128},
    {"kda.backward.kimi.mixed", "backward, unbounded gate: chunks within and beyond e^-80 in turn, K 64, V 48", kda_bwd_kimi_mix},
    {"kda.recurrent.kimi", "recurrent kernel, unbounded gate down to -50", kda_rec_kimi},
    {"kda.decode.kimi", "decode steps, unbounded gate down to -50", kda_decode_kimi},
    {"kda.decode", "decode steps of 3 sequences against the full sequence", kda_decode},
    {"kda.decode.bf16", "decode steps, bf16 inputs, K = V = 128", kda_decode_bf16},
    {NULL, NULL, NULL}};
