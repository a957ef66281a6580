/* Conformance checks: embedding lookup and backward, the device sort, AdamW. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clmoe/paths.h" /* clmoe_sort_u64: the device sort, checked like an operator */
#include "conformance.h"
#include "ref/reference.h"

#define TOL_F32 1e-5
#define F CLMOE_F32

/* ids[i] = floor(V u^skew) for uniform u: skew 1 is uniform, larger skews pile tokens onto
 * the first ids (like byte-level text, where a few symbols dominate). */
static void host_ids(uint64_t seed, int64_t n, int64_t V, double skew, int32_t *ids)
{
  for (int64_t i = 0; i < n; i++) {
    double u = ck_host_uniform(seed, (uint64_t)i, 0.0, 1.0);
    int64_t id = (int64_t)(V * pow(u, skew));
    ids[i] = (int32_t)(id < V ? id : V - 1);
  }
}

/* ---- embedding forward: a bit-exact gather; ids, table and output at offsets ---- */
static clmoe_status embedding_forward(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  const int64_t V = 1000, d = 67, N = 3 * 41, pad = 7;
  clmoe_status st = CLMOE_OK;
  clmoe_tensor Tfull = {0}, T = {0}, Ifull = {0}, I = {0}, Ofull = {0}, O = {0};
  double *table = NULL, *got = NULL, *ref = NULL;
  int32_t *ids = NULL;
  CK_ALLOC(ids, N + 5);
  host_ids(seed + 1, N + 5, V, 1.0, ids);
  ids[5] = 0, ids[6] = (int32_t)(V - 1); /* both ends of the table */
  CK(ck_uniform(ctx, &Tfull, F, 2, (int64_t[]){V + 2, d}, seed, -1.0f, 1.0f, &table));
  CK(clmoe_tensor_view(&Tfull, &T, 2, (int64_t[]){V, d}, d)); /* skips row 0 */
  CK(clmoe_tensor_create(ctx, &Ifull, CLMOE_I32, 1, (int64_t[]){N + 5}));
  CK(clmoe_tensor_write(&Ifull, ids, (size_t)(N + 5) * sizeof *ids));
  CK(clmoe_tensor_view(&Ifull, &I, 2, (int64_t[]){3, 41}, 5));
  CK(clmoe_tensor_create(ctx, &Ofull, F, 1, (int64_t[]){N * d + pad}));
  CK(clmoe_tensor_fill(&Ofull, 42.0)); /* the padding must keep this */
  CK(clmoe_tensor_view(&Ofull, &O, 3, (int64_t[]){3, 41, d}, pad));
  CK(clmoe_embedding(ctx, &T, &I, &O));
  CK(ck_read(&Ofull, &got));
  CK_ALLOC(ref, N * d + pad);
  for (int64_t i = 0; i < pad; i++) ref[i] = 42.0;
  ref_embedding(table + d, ids + 5, N, d, ref + pad);
  res->tolerance = 0.0; /* a copy: exact */
  ck_compare("out", got, ref, (size_t)(N * d + pad), res);
done:
  free(table), free(got), free(ref), free(ids);
  clmoe_tensor_destroy(&Tfull), clmoe_tensor_destroy(&Ifull), clmoe_tensor_destroy(&Ofull);
  return st;
}

/* ---- embedding backward ----
 * dtable (at an offset, holding random values: the op accumulates) against the reference,
 * then a second run from the same start must give the same bits. */
static clmoe_status check_embedding_backward(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                             int64_t V, int64_t d, int64_t N, double skew)
{
  clmoe_status st = CLMOE_OK;
  clmoe_tensor I = {0}, D = {0}, T0 = {0}, Tfull = {0}, T = {0};
  double *dout = NULL, *table0 = NULL, *got = NULL, *ref = NULL;
  int32_t *ids = NULL;
  float *bits1 = NULL, *bits2 = NULL;
  int64_t *count = NULL, most = 1;
  const size_t tn = (size_t)(V * d);
  CK_ALLOC(ids, N);
  host_ids(seed + 3, N, V, skew, ids);
  CK(clmoe_tensor_create(ctx, &I, CLMOE_I32, 1, &N));
  CK(clmoe_tensor_write(&I, ids, (size_t)N * sizeof *ids));
  CK(ck_uniform(ctx, &D, F, 2, (int64_t[]){N, d}, seed, -1.0f, 1.0f, &dout));
  CK(ck_uniform(ctx, &T0, F, 2, (int64_t[]){V, d}, seed + 1, -1.0f, 1.0f, &table0));
  CK(clmoe_tensor_create(ctx, &Tfull, F, 1, (int64_t[]){(int64_t)tn + 3}));
  CK(clmoe_tensor_view(&Tfull, &T, 2, (int64_t[]){V, d}, 3));
  CK_ALLOC(bits1, tn);
  CK_ALLOC(bits2, tn);
  for (int run = 0; run < 2; run++) {
    CK(clmoe_tensor_copy(&T, &T0));
    CK(clmoe_embedding_backward(ctx, &I, &D, &T));
    CK(clmoe_tensor_read_f32(&T, run == 0 ? bits1 : bits2));
  }
  CK_ALLOC(ref, tn);
  CK_ALLOC(got, tn);
  memcpy(ref, table0, tn * sizeof *ref);
  ref_embedding_backward(ids, dout, N, d, ref);
  for (size_t i = 0; i < tn; i++) got[i] = bits1[i];
  /* A row's sum has as many terms as its id has tokens: scale the bound by the longest. */
  CK_ALLOC(count, V);
  memset(count, 0, (size_t)V * sizeof *count);
  for (int64_t t = 0; t < N; t++) count[ids[t]]++;
  for (int64_t v = 0; v < V; v++) most = count[v] > most ? count[v] : most;
  res->tolerance = TOL_F32 * fmax(1.0, sqrt((double)most) / 10.0);
  ck_compare("dtable", got, ref, tn, res);
  if (memcmp(bits1, bits2, tn * sizeof *bits1) != 0)
    for (size_t i = 0; i < tn; i++)
      if (memcmp(&bits1[i], &bits2[i], sizeof *bits1)) {
        res->max_err = INFINITY;
        snprintf(res->worst, sizeof res->worst, "not deterministic: dtable[%zu] %.9g, then %.9g",
                 i, bits1[i], bits2[i]);
        break;
      }
done:
  free(dout), free(table0), free(got), free(ref), free(ids), free(bits1), free(bits2), free(count);
  clmoe_tensor_destroy(&I), clmoe_tensor_destroy(&D), clmoe_tensor_destroy(&T0);
  clmoe_tensor_destroy(&Tfull);
  return st;
}

/* Most rows empty (they must stay as they were); a few hundred tokens. */
static clmoe_status embedding_backward(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_embedding_backward(c, s, r, CK_SIZE(5000, 500), 129, CK_SIZE(3000, 300), 1.0); }
/* 256 ids, the first with ~40% of 20k tokens: long segments cross the 512-token chunks
 * (smallest: 2000 tokens, still ~800 for the first id). */
static clmoe_status embedding_backward_skewed(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_embedding_backward(c, s, r, 256, CK_SIZE(300, 67), CK_SIZE(20000, 2000), 6.0); }
/* Tiny d and a vocabulary smaller than the work-group. */
static clmoe_status embedding_backward_narrow(clmoe_ctx *c, uint64_t s, clmoe_check_result *r) { return check_embedding_backward(c, s, r, 3, 1, 1500, 1.0); }

/* ---- device sort: exact against qsort ---- */
static int cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Random 64-bit keys with duplicates, zeros and all-ones among them. */
static void host_keys(uint64_t seed, size_t n, uint64_t *keys)
{
  for (size_t i = 0; i < n; i++) {
    uint64_t hi = (uint64_t)ck_host_uniform(seed, 2 * i, 0.0, 4294967295.0);
    uint64_t lo = (uint64_t)ck_host_uniform(seed, 2 * i + 1, 0.0, 4294967295.0);
    uint64_t k = hi << 32 | lo;
    switch (lo % 8) {
    case 0: k = hi % 5; break;            /* small: many equal keys */
    case 1: k = (hi % 3) << 32 | i; break; /* packed (id << 32 | position) */
    case 2: k = lo % 16 == 2 ? UINT64_MAX : k; break;
    default: break;
    }
    keys[i] = k;
  }
}

/* Sorts each size at an offset inside a buffer with guard keys on both sides. */
static clmoe_status check_sort(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                               const size_t *sizes, int nsizes)
{
  const size_t before = 3, after = 5;
  clmoe_status st = CLMOE_OK;
  clmoe_tensor B = {0};
  uint64_t *keys = NULL, *got = NULL;
  res->tolerance = 0.0;
  for (int s = 0; s < nsizes && st == CLMOE_OK; s++) {
    size_t n = sizes[s], total = before + n + after;
    /* Keys live in an int32 tensor of twice the length: the pool's buffer, 8-byte keys. */
    CK_ALLOC(keys, total);
    CK_ALLOC(got, total);
    host_keys(seed + (uint64_t)s, total, keys);
    CK(clmoe_tensor_create(ctx, &B, CLMOE_I32, 1, (int64_t[]){(int64_t)(2 * total)}));
    CK(clmoe_tensor_write(&B, keys, total * sizeof *keys));
    CK(clmoe_sort_u64(ctx, B.buf, before, n));
    CK(clmoe_tensor_read(&B, got, total * sizeof *got));
    qsort(keys + before, n, sizeof *keys, cmp_u64);
    for (size_t i = 0; i < total; i++)
      if (got[i] != keys[i]) {
        res->max_err = 1.0;
        snprintf(res->worst, sizeof res->worst, "n %zu: key[%zu] (%s) is %#llx, expected %#llx", n,
                 i, i < before || i >= before + n ? "guard" : "sorted", (unsigned long long)got[i],
                 (unsigned long long)keys[i]);
        break;
      }
    free(keys), free(got);
    keys = got = NULL;
    clmoe_tensor_destroy(&B);
    if (res->max_err > 0.0) break;
  }
done:
  free(keys), free(got);
  clmoe_tensor_destroy(&B);
  return st;
}

static clmoe_status sort_u64(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)
{
  static const size_t sizes[] = {0, 1, 2, 3, 7, 100, 1000, 2047, 2048, 2049, 5000, 8191};
  /* smallest: one size each side of the local block, and two blocks' worth */
  static const size_t small[] = {0, 1, 3, 100, 2047, 2049, 4097};
  return clmoe_check_small() ? check_sort(c, s, r, small, (int)(sizeof small / sizeof small[0]))
                             : check_sort(c, s, r, sizes, (int)(sizeof sizes / sizeof sizes[0]));
}

static clmoe_status sort_u64_large(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)
{
  static const size_t sizes[] = {100003, 65536}, small[] = {16385, 16384}; /* (smallest: 8 blocks) */
  return check_sort(c, s, r, clmoe_check_small() ? small : sizes, 2);
}

/* ---- AdamW: three consecutive steps against the double reference ---- */
typedef struct adamw_case {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  int64_t first_step;
  float grad_range, m_range, v_max; /* m, v start at 0 when m_range, v_max are 0 */
  int copy; /* 1: clmoe_adamw_step_bf16, its copy checked to be the new param rounded */
  int dev_scale; /* 1: clmoe_adamw_step_scaled, grad_scale from a device tensor */
} adamw_case;

static clmoe_status check_adamw(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res,
                                const adamw_case *a)
{
  const int64_t n = 10007, pad = 5;
  clmoe_status st = CLMOE_OK;
  clmoe_tensor Pfull = {0}, P = {0}, G = {0}, M = {0}, Vt = {0}, C = {0}, Sfull = {0}, S = {0};
  double *pfull = NULL, *g = NULL, *m = NULL, *v = NULL, *gotp = NULL, *gotm = NULL, *gotv = NULL;
  double *gotc = NULL, *wantc = NULL;
  if (a->copy) {
    CK(clmoe_tensor_create(ctx, &C, CLMOE_BF16, 1, &n));
    CK(clmoe_tensor_fill(&C, NAN)); /* every element is written */
  }
  CK(ck_uniform(ctx, &Pfull, F, 1, (int64_t[]){n + pad}, seed, -1.0f, 1.0f, &pfull));
  CK(clmoe_tensor_view(&Pfull, &P, 1, &n, pad)); /* param at an offset */
  CK(ck_uniform(ctx, &M, F, 1, &n, seed + 1, -a->m_range, a->m_range, &m));
  CK(ck_uniform(ctx, &Vt, F, 1, &n, seed + 2, 0.0f, a->v_max, &v));
  if (a->dev_scale) { /* one element at an offset */
    CK(clmoe_tensor_create(ctx, &Sfull, F, 1, (int64_t[]){3}));
    CK(clmoe_tensor_write_f32(&Sfull, (const float[]){NAN, a->grad_scale, NAN}));
    CK(clmoe_tensor_view(&Sfull, &S, 1, (int64_t[]){1}, 1));
  }
  double *p = pfull + pad;
  for (int64_t s = 0; s < 3; s++) {
    clmoe_adamw hp = {a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->grad_scale,
                      a->first_step + s};
    clmoe_tensor_destroy(&G);
    free(g);
    g = NULL;
    CK(ck_uniform(ctx, &G, F, 1, &n, seed + 10 + (uint64_t)s, -a->grad_range, a->grad_range, &g));
    if (a->dev_scale) {
      hp.grad_scale = 1.0f; /* ignored: the kernel reads S */
      CK(clmoe_adamw_step_scaled(ctx, &P, &G, &M, &Vt, &hp, &S, a->copy ? &C : NULL));
    } else if (a->copy) {
      CK(clmoe_adamw_step_bf16(ctx, &P, &G, &M, &Vt, &hp, &C));
    } else {
      CK(clmoe_adamw_step(ctx, &P, &G, &M, &Vt, &hp));
    }
    ref_adamw(p, g, m, v, (size_t)n, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay,
              a->grad_scale, hp.step);
  }
  CK(ck_read(&Pfull, &gotp));
  CK(ck_read(&M, &gotm));
  CK(ck_read(&Vt, &gotv));
  res->tolerance = TOL_F32;
  ck_compare("param", gotp, pfull, (size_t)(n + pad), res); /* the padding stays put */
  ck_compare("m", gotm, m, (size_t)n, res);
  ck_compare("v", gotv, v, (size_t)n, res);
  if (a->copy) {
    /* the copy: the device's new param rounded to nearest even, bit for bit */
    CK(ck_read(&C, &gotc));
    CK_ALLOC(wantc, (size_t)n);
    for (int64_t i = 0; i < n; i++)
      wantc[i] = clmoe_f32_from_bf16(clmoe_bf16_from_f32((float)gotp[pad + i]));
    for (int64_t i = 0; i < n; i++)
      if (!(gotc[i] == wantc[i])) { /* NaN fails too */
        res->max_err = INFINITY;
        snprintf(res->worst, sizeof res->worst, "bf16 copy[%lld] = %g, param rounds to %g",
                 (long long)i, gotc[i], wantc[i]);
        break;
      }
  }
done:
  free(gotc), free(wantc), clmoe_tensor_destroy(&C), clmoe_tensor_destroy(&Sfull);
  free(pfull), free(g), free(m), free(v), free(gotp), free(gotm), free(gotv);
  clmoe_tensor_destroy(&Pfull), clmoe_tensor_destroy(&G), clmoe_tensor_destroy(&M);
  clmoe_tensor_destroy(&Vt);
  return st;
}

static clmoe_status adamw_step(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)
{
  /* From a fresh start (m = v = 0, t = 1, 2, 3): the bias corrections matter most. */
  const adamw_case a = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 1, 1.0f, 0.0f, 0.0f, 0, 0};
  return check_adamw(c, s, r, &a);
}

static clmoe_status adamw_clipped(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)
{
  /* Mid-training (t = 5, 6, 7) with large gradients scaled down by clipping. */
  const adamw_case a = {3e-3f, 0.8f, 0.95f, 1e-6f, 0.05f, 0.25f, 5, 8.0f, 0.5f, 1.0f, 0, 0};
  return check_adamw(c, s, r, &a);
}

static clmoe_status adamw_bf16(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)
{
  /* The clipped case with the bf16 weight copy written in the same kernel. */
  const adamw_case a = {3e-3f, 0.8f, 0.95f, 1e-6f, 0.05f, 0.25f, 5, 8.0f, 0.5f, 1.0f, 1, 0};
  return check_adamw(c, s, r, &a);
}

static clmoe_status adamw_scaled(clmoe_ctx *c, uint64_t s, clmoe_check_result *r)
{
  /* adamw.bf16 with the clip's scale read from the device (the training step's form). */
  const adamw_case a = {3e-3f, 0.8f, 0.95f, 1e-6f, 0.05f, 0.25f, 5, 8.0f, 0.5f, 1.0f, 1, 1};
  return check_adamw(c, s, r, &a);
}

/* ---- AdamW with a NaN device scale: nothing changes (the step is not taken) ---- */
static clmoe_status adamw_skip(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  const int64_t n = 1001;
  clmoe_status st = CLMOE_OK;
  clmoe_tensor P = {0}, G = {0}, M = {0}, V = {0}, C = {0}, S = {0};
  double *p = NULL, *g = NULL, *m = NULL, *v = NULL, *c = NULL, *gp = NULL, *gm = NULL, *gv = NULL, *gc = NULL;
  CK(ck_uniform(ctx, &P, F, 1, &n, seed, -1.0f, 1.0f, &p));
  CK(ck_uniform(ctx, &G, F, 1, &n, seed + 1, -1.0f, 1.0f, &g));
  CK(ck_uniform(ctx, &M, F, 1, &n, seed + 2, -0.5f, 0.5f, &m));
  CK(ck_uniform(ctx, &V, F, 1, &n, seed + 3, 0.0f, 1.0f, &v));
  CK(ck_uniform(ctx, &C, CLMOE_BF16, 1, &n, seed + 4, -1.0f, 1.0f, &c));
  CK(clmoe_tensor_create(ctx, &S, F, 1, (int64_t[]){1}));
  CK(clmoe_tensor_write_f32(&S, (const float[]){NAN}));
  const clmoe_adamw hp = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 3};
  CK(clmoe_adamw_step_scaled(ctx, &P, &G, &M, &V, &hp, &S, &C));
  CK(clmoe_adamw_step_scaled(ctx, &P, &G, &M, &V, &hp, &S, NULL));
  CK(ck_read(&P, &gp));
  CK(ck_read(&M, &gm));
  CK(ck_read(&V, &gv));
  CK(ck_read(&C, &gc));
  res->tolerance = 0.0; /* untouched: the same bits */
  ck_compare("param", gp, p, (size_t)n, res);
  ck_compare("m", gm, m, (size_t)n, res);
  ck_compare("v", gv, v, (size_t)n, res);
  ck_compare("copy", gc, c, (size_t)n, res);
done:
  free(p), free(g), free(m), free(v), free(c), free(gp), free(gm), free(gv), free(gc);
  clmoe_tensor_destroy(&P), clmoe_tensor_destroy(&G), clmoe_tensor_destroy(&M);
  clmoe_tensor_destroy(&V), clmoe_tensor_destroy(&C), clmoe_tensor_destroy(&S);
  return st;
}

/* ---- the clip's norm and scale on the device against the host's double arithmetic ----
 * Random sums of squares at an offset; the clip below, at and above the norm (scale < 1,
 * 1, 1), then a NaN and an infinite sum (scale NaN). The norm's bits must be the host's:
 * the same double sum in the same order, sqrt and division correctly rounded. */
static clmoe_status clip_scale(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  const int64_t n = 97, pad = 3;
  clmoe_status st = CLMOE_OK;
  clmoe_tensor Sfull = {0}, S = {0}, N = {0}, K = {0};
  double *sums = NULL;
  res->tolerance = 0.0;
  if (!clmoe_ctx_caps(ctx)->has_fp64) { /* the library reads the norm on the host there */
    res->max_err = 0.0;
    snprintf(res->worst, sizeof res->worst, "no fp64: clmoe_grad_clip_scale is not used on this device");
    return CLMOE_OK;
  }
  CK(ck_uniform(ctx, &Sfull, F, 1, (int64_t[]){n + pad}, seed, 0.0f, 3.0f, &sums));
  CK(clmoe_tensor_view(&Sfull, &S, 1, &n, pad));
  CK(clmoe_tensor_create(ctx, &N, CLMOE_I32, 1, (int64_t[]){2}));
  CK(clmoe_tensor_create(ctx, &K, F, 1, (int64_t[]){1}));
  double total = 0.0;
  for (int64_t i = 0; i < n; i++) total += (double)(float)sums[pad + i];
  const double norm = sqrt(total);
  const double clips[] = {0.5 * norm, norm, 2.0 * norm, 0.0};
  const float bad[] = {0.0f, NAN, INFINITY};
  for (int b = 0; b < 3; b++) {
    if (b) CK(clmoe_tensor_write_f32(&Sfull, (float[100]){[43] = bad[b]})); /* zeros; S[40] bad */
    for (int c = 0; c < 4 && st == CLMOE_OK; c++) {
      const double clip = clips[c];
      CK(clmoe_grad_clip_scale(ctx, &S, clip, &N, &K));
      uint32_t w[2];
      float got_scale;
      CK(clmoe_tensor_read(&N, w, sizeof w));
      CK(clmoe_tensor_read(&K, &got_scale, sizeof got_scale));
      uint64_t bits = (uint64_t)w[0] | (uint64_t)w[1] << 32;
      double got_norm;
      memcpy(&got_norm, &bits, sizeof got_norm);
      const double want_norm = b == 0 ? norm : b == 1 ? NAN : INFINITY;
      const float want_scale = b ? NAN : clip > 0.0 && norm > clip ? (float)(clip / norm) : 1.0f;
      const int norm_ok = b == 1 ? isnan(got_norm) : got_norm == want_norm;
      const int scale_ok = b ? isnan(got_scale) : got_scale == want_scale;
      if (!norm_ok || !scale_ok) {
        res->max_err = INFINITY;
        snprintf(res->worst, sizeof res->worst, "case %d clip %g: norm %.17g scale %.9g, expected %.17g and %.9g", b,
                 clip, got_norm, (double)got_scale, want_norm, (double)want_scale);
        goto done;
      }
    }
  }
  res->max_err = 0.0;
done:
  free(sums);
  clmoe_tensor_destroy(&Sfull), clmoe_tensor_destroy(&N), clmoe_tensor_destroy(&K);
  return st;
}

/* ---- the embedding's and cross-entropy's checks without a wait ----
 * Good ids and targets give -1 in the flag; a bad id or target at a position gives that
 * position, and the report names it with its value as the waiting call does. */
static clmoe_status nowait_flags(clmoe_ctx *ctx, uint64_t seed, clmoe_check_result *res)
{
  const int64_t V = 50, d = 8, N = 64;
  clmoe_status st = CLMOE_OK;
  clmoe_tensor T = {0}, I = {0}, O = {0}, L = {0}, Tg = {0}, Lo = {0}, Ls = {0}, D = {0}, Fl = {0};
  double *table = NULL, *logits = NULL;
  int32_t ids[64], flags[3];
  host_ids(seed + 1, N, V, 1.0, ids);
  CK(ck_uniform(ctx, &T, F, 2, (int64_t[]){V, d}, seed, -1.0f, 1.0f, &table));
  CK(ck_uniform(ctx, &L, F, 2, (int64_t[]){N, V}, seed + 2, -3.0f, 3.0f, &logits));
  CK(clmoe_tensor_create(ctx, &I, CLMOE_I32, 1, &N));
  CK(clmoe_tensor_create(ctx, &Tg, CLMOE_I32, 1, &N));
  CK(clmoe_tensor_create(ctx, &O, F, 2, (int64_t[]){N, d}));
  CK(clmoe_tensor_create(ctx, &Lo, F, 1, &N));
  CK(clmoe_tensor_create(ctx, &Ls, F, 1, &N));
  CK(clmoe_tensor_create(ctx, &D, F, 2, (int64_t[]){N, V}));
  CK(clmoe_tensor_create(ctx, &Fl, CLMOE_I32, 1, (int64_t[]){3}));
  res->tolerance = 0.0;
  res->max_err = 0.0;
  for (int bad = 0; bad < 2; bad++) {
    const int64_t at = 37;
    int32_t tg[64];
    memcpy(tg, ids, sizeof tg);
    if (bad) ids[at] = (int32_t)V + 3, tg[at] = (int32_t)V; /* just outside */
    CK(clmoe_tensor_write(&I, ids, sizeof ids));
    CK(clmoe_tensor_write(&Tg, tg, sizeof tg));
    CK(clmoe_tensor_fill(&Fl, 7.0)); /* overwritten by each call */
    clmoe_tensor f0, f1, f2;
    CK(clmoe_tensor_view(&Fl, &f0, 1, (int64_t[]){1}, 0));
    CK(clmoe_tensor_view(&Fl, &f1, 1, (int64_t[]){1}, 1));
    CK(clmoe_tensor_view(&Fl, &f2, 1, (int64_t[]){1}, 2));
    CK(clmoe_embedding_nowait(ctx, &T, &I, &O, &f0));
    CK(clmoe_cross_entropy_nowait(ctx, &L, &Tg, &Lo, &Ls, &f1));
    CK(clmoe_cross_entropy_backward_nowait(ctx, &L, &Tg, &Ls, 1.0f / (float)N, &D, &f2));
    CK(clmoe_tensor_read(&Fl, flags, sizeof flags));
    const int32_t want = bad ? (int32_t)at : -1;
    char want_id[64], want_tg[64];
    snprintf(want_id, sizeof want_id, "id %d at position %d", (int)V + 3, (int)at);
    snprintf(want_tg, sizeof want_tg, "target %d of row %d", (int)V, (int)at);
    const clmoe_status r0 = clmoe_embedding_report(ctx, &T, &I, flags[0]);
    const int msg0 = !bad || strstr(clmoe_last_error(), want_id) != NULL;
    const clmoe_status r1 = clmoe_cross_entropy_report(ctx, V, &Tg, 0, flags[1]);
    const int msg1 = !bad || strstr(clmoe_last_error(), want_tg) != NULL;
    const clmoe_status r2 = clmoe_cross_entropy_report(ctx, V, &Tg, 1, flags[2]);
    const int msg2 = !bad || strstr(clmoe_last_error(), want_tg) != NULL;
    const clmoe_status want_st = bad ? CLMOE_ERR_INVALID_ARGUMENT : CLMOE_OK;
    if (flags[0] != want || flags[1] != want || flags[2] != want || r0 != want_st || r1 != want_st ||
        r2 != want_st || !msg0 || !msg1 || !msg2) {
      res->max_err = INFINITY;
      snprintf(res->worst, sizeof res->worst, "%s ids: flags %d %d %d (want %d), reports %d %d %d, messages %d %d %d",
               bad ? "bad" : "good", flags[0], flags[1], flags[2], want, r0, r1, r2, msg0, msg1, msg2);
      break;
    }
  }
done:
  free(table), free(logits);
  clmoe_tensor_destroy(&T), clmoe_tensor_destroy(&I), clmoe_tensor_destroy(&O), clmoe_tensor_destroy(&L);
  clmoe_tensor_destroy(&Tg), clmoe_tensor_destroy(&Lo), clmoe_tensor_destroy(&Ls), clmoe_tensor_destroy(&D);
  clmoe_tensor_destroy(&Fl);
  return st;
}

const clmoe_check clmoe_checks_embed[] = {
    {"embedding.forward", "gather of 123 ids from a [1000, 67] table, at offsets", embedding_forward},
    {"embedding.backward", "3000 tokens into a [5000, 129] table, deterministic", embedding_backward},
    {"embedding.backward.skewed", "20k tokens over 256 ids, one with ~40%: chunked sums", embedding_backward_skewed},
    {"embedding.backward.narrow", "d = 1, V = 3: tiny rows", embedding_backward_narrow},
    {"sort.u64", "u64 keys, 0 .. 8191 of them, against qsort", sort_u64},
    {"sort.u64.large", "100003 and 65536 u64 keys against qsort", sort_u64_large},
    {"adamw.step", "three AdamW steps from zero moments, weight decay", adamw_step},
    {"adamw.clipped", "three AdamW steps at t = 5 with grad_scale 0.25", adamw_clipped},
    {"adamw.bf16", "adamw.clipped writing the bf16 weight copy (bit-exact rounding)", adamw_bf16},
    {"adamw.scaled", "adamw.bf16 with the scale read from a device tensor", adamw_scaled},
    {"adamw.scaled.nan", "a NaN device scale: param, moments and copy unchanged", adamw_skip},
    {"adamw.clip", "the clip's norm and scale on the device: the host's double bits", clip_scale},
    {"embedding.nowait", "bad-id and bad-target flags without a wait, and their reports", nowait_flags},
    {NULL, NULL, NULL}};
